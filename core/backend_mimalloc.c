/*
 * backend_mimalloc.c — the mimalloc small backend: loads libmimalloc.so.2 at
 * run time and finds its functions.
 *
 * Owns: vmap_mi (mimalloc's functions) and vmap_mi_on (whether they are set).
 *
 * Why loaded, not linked: the library's only DT_NEEDED stays libc, and a
 * process that does not ask for VMAPALLOC_BACKEND=mimalloc neither maps
 * libmimalloc nor runs its constructor (start-up and footprint unchanged).
 * With it, the library's constructor (init.c vmap_backend_start) calls
 * vmap_mimalloc_load once, never malloc: dlopen allocates and takes the
 * loader's lock.  The functions are then found in libmimalloc's own symbol
 * table (backend.c vmap_elf_symbol), as glibc's are: no dlsym.
 *
 * How it is kept from the process's malloc (Debian's libmimalloc exports
 * malloc, free... itself and runs its own initialisation):
 *  - RTLD_LOCAL: its malloc never enters the global scope, so every caller,
 *    those bound later included, keeps binding malloc to vmapalloc's;
 *  - RTLD_DEEPBIND: its own references (mmap, munmap, madvise, pthread_*)
 *    bind to libc's, so its segments come from the kernel, never from
 *    vmapalloc's arena (where free would take them for arena blocks), and its
 *    internal calls stay its own;
 *  - its atexit handler (mi_process_done), registered while vmapalloc's
 *    constructor loads it and so before the program's handlers and ld.so's
 *    destructor pass, runs last: after the program's atexit handlers, every
 *    destructor and the exit report, which still free and read its blocks.
 *    mi_option_destroy_on_exit is forced off all the same: with it on
 *    (MIMALLOC_DESTROY_ON_EXIT=1) that handler would unmap the heaps under
 *    threads still running at exit.  Its thread-exit key destructor
 *    abandons only the exiting thread's own heap (mimalloc checks the thread
 *    id); later frees of that thread's blocks from others, and a later
 *    malloc on the exiting thread, are mimalloc's usual cross-thread cases;
 *  - kept loaded once used (its blocks live to the end); a library that
 *    lacks mimalloc's functions is closed again.
 *
 * Ownership: a block is freed by the allocator whose block it is, decided by
 * address (alloc.c): the arena's regions first, then mimalloc's segment map
 * (mi_is_in_heap_region, backend.h vmap_mi_owns), then glibc.  So blocks
 * glibc handed out before the load, or when mimalloc refused, stay glibc's.
 *
 * Invariants: vmap_mi's slots are written before vmap_mi_on (release) and
 * never change after; vmap_mi_on never goes back to false.
 *
 * Called by: init.c (load), alloc.c (through vmap_mi), stats.c (held).
 */
#include "backend.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>

#include "fmt.h"
#include "section.h"

struct vmap_mi vmap_mi;
bool vmap_mi_on VMAP_HOT;

#ifdef VMAP_HAVE_MIMALLOC
#include <mimalloc.h>

bool vmap_mimalloc_built(void)
{
	return true;
}

int vmap_mimalloc_load(void)
{
	if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE))
		return 0;
	void *(*dlopen_fn)(const char *, int) =
		(__typeof__(dlopen_fn))vmap_elf_symbol(LIBC_SO, "dlopen");
	char *(*dlerror_fn)(void) = (__typeof__(dlerror_fn))vmap_elf_symbol(LIBC_SO, "dlerror");
	int (*dlclose_fn)(void *) = (__typeof__(dlclose_fn))vmap_elf_symbol(LIBC_SO, "dlclose");
	if (!dlopen_fn || !dlclose_fn) {
		vmap_say("VMAPALLOC_BACKEND=mimalloc: glibc has no dlopen; ",
			 "using the default backend (auto)", NULL);
		return -1;
	}
	void *h = dlopen_fn(VMAP_MIMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
	if (!h) {
		const char *why = dlerror_fn ? dlerror_fn() : NULL;
		vmap_say("VMAPALLOC_BACKEND=mimalloc: cannot load " VMAP_MIMALLOC_SONAME " (",
			 why ? why : "dlopen failed",
			 "); using the default backend (auto)");
		return -1;
	}
	struct vmap_mi m;
	const char *missing = NULL;
#define MI_FN(field, name)                                                                    \
	do {                                                                                  \
		field = (__typeof__(field))vmap_elf_symbol(VMAP_MIMALLOC_SONAME, name);       \
		if (!field && !missing)                                                       \
			missing = name;                                                       \
	} while (0)
	MI_FN(m.malloc, "mi_malloc");
	MI_FN(m.calloc, "mi_calloc");
	MI_FN(m.realloc, "mi_realloc");
	MI_FN(m.malloc_aligned, "mi_malloc_aligned");
	MI_FN(m.usable_size, "mi_usable_size");
	MI_FN(m.free, "mi_free");
	MI_FN(m.owns, "mi_is_in_heap_region");
	MI_FN(m.collect, "mi_collect");
	MI_FN(m.process_info, "mi_process_info");
	void (*option_set)(mi_option_t, long);
	MI_FN(option_set, "mi_option_set");
#undef MI_FN
	if (missing) {
		dlclose_fn(h); /* not a mimalloc we can use: not kept either */
		vmap_say("VMAPALLOC_BACKEND=mimalloc: " VMAP_MIMALLOC_SONAME " has no ", missing,
			 "; using the default backend (auto)");
		return -1;
	}
	option_set(mi_option_destroy_on_exit, 0);
	vmap_mi = m;
	__atomic_store_n(&vmap_mi_on, true, __ATOMIC_RELEASE);
	return 0;
}

void vmap_mimalloc_held(uint64_t *now, uint64_t *peak)
{
	size_t commit = 0, peak_commit = 0, x;
	if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE))
		vmap_mi.process_info(&x, &x, &x, &x, &x, &commit, &peak_commit, &x);
	*now = commit;
	*peak = peak_commit;
}

#else /* built without mimalloc: nothing to load */

bool vmap_mimalloc_built(void)
{
	return false;
}

int vmap_mimalloc_load(void)
{
	return -1;
}

void vmap_mimalloc_held(uint64_t *now, uint64_t *peak)
{
	*now = *peak = 0;
}

#endif
