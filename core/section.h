/*
 * section.h — where the variables a short process touches live.
 *
 * Every page of the library's data that a process touches costs it a page
 * fault, two when a read maps the page before
 * the first write.  Init writes some variables in every process, so the
 * variables that init, the small-allocation path and exit read or write are
 * gathered in one input section of .data -- in the first page of the
 * read-write segment, with what ld.so relocates there at load anyway
 * (preload/bss.ld) -- instead of lying scattered among the 200 KiB of zeroed
 * buffers (.bss) that only some processes use.  A variable marked
 * VMAP_HOT must be small: the relocated data and the whole set share that
 * page (tests/preload/api/pages.c checks).
 */
#ifndef VMAP_SECTION_H
#define VMAP_SECTION_H

#define VMAP_HOT __attribute__((section(".data.vmap_hot")))

/*
 * The code and constants that a process which never allocates runs besides
 * ld.so: the constructor's way out when no option is set (alloc.c
 * vmap_init_at_start: the walk to libc, the scan of environ) and the
 * destructor's; and the set-up that a short process which allocates runs
 * once, beyond its calls (the options' defaults and table, the profile's,
 * statistics' and timeline's set-up, the fork handlers' registration, the
 * look-up of glibc's malloc, free and realloc).  In .text.startup, beside the
 * constructor, which the linker puts at the start of .text, they lie in the
 * first 64 KiB of the file with the headers and symbol tables ld.so reads
 * anyway, so that the first page fault maps them all (fault-around).  Spread
 * over the library they cost /bin/true a page fault more whenever the file's
 * pages sit in the page cache in small folios, as they do in a file the
 * linker has just written; and the set-up's ten functions and five strings,
 * spread over the other three 64 KiB of the file, had every process that
 * allocates map them all: `sleep 1` with 45-49 of the library's 54 pages
 * mapped, 16 now, and a VmRSS of 1,984 KiB against 1,844 (bench/footprint.sh).
 * VMAP_START_DATA: the constants they read, in a section of their own that
 * the linker places there too.
 */
#define VMAP_START_TEXT __attribute__((section(".text.startup")))
#define VMAP_START_DATA __attribute__((section(".text.startup.vmap_data")))

/* On the declaration of a variable the fast paths read from another file:
 * -fvisibility=hidden covers definitions only, so without it the compiler
 * loads the address from the GOT first (one instruction more a read). */
#define VMAP_HIDDEN __attribute__((visibility("hidden")))

#endif
