/*
 * section.h — where the variables a short process touches live.
 *
 * Every page of the library's data that a process touches costs it a page
 * fault (4-5 us on the reference VM), two when a read maps the page before
 * the first write.  Init writes some variables in every process, so the
 * variables that init, the small-allocation path and exit read or write are
 * gathered in one input section of .data -- in the first page of the
 * read-write segment, with what ld.so relocates there at load anyway
 * (preload/bss.ld) -- instead of lying scattered among the 200 KiB of zeroed
 * buffers (.bss) that only some processes use (issue 5).  A variable marked
 * VMAP_HOT must be small: the relocated data and the whole set share that
 * page (tests/preload/api/pages.c checks).
 */
#ifndef VMAP_SECTION_H
#define VMAP_SECTION_H

#define VMAP_HOT __attribute__((section(".data.vmap_hot")))

/* On the declaration of a variable the fast paths read from another file:
 * -fvisibility=hidden covers definitions only, so without it the compiler
 * loads the address from the GOT first (one instruction more a read). */
#define VMAP_HIDDEN __attribute__((visibility("hidden")))

#endif
