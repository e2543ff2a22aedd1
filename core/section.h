/*
 * section.h — where the variables a short process touches live.
 *
 * Every page of the library's .data or .bss that a process touches costs it a
 * page fault (14-22 us on the reference VM), two when a read maps the zero
 * page before the first write.  ld.so writes the first .data page anyway (it
 * clears the part of it past the file's end, where .bss begins), so the
 * variables that init, the small-allocation path and exit read or write are
 * gathered there, in one input section of .data, instead of lying scattered
 * among the 200 KiB of .bss buffers that only some processes use (issue 5).
 * A variable marked VMAP_HOT must be small; the whole set stays well under a
 * page (tests/preload/pages checks the pages touched).
 */
#ifndef VMAP_SECTION_H
#define VMAP_SECTION_H

#define VMAP_HOT __attribute__((section(".data.vmap_hot")))

#endif
