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
 * address (alloc.c): the arena's regions first, then mimalloc's (the range
 * below, else its segment map: mi_is_in_heap_region, backend.h
 * vmap_mi_owns), then glibc.  So blocks glibc handed out before the load, or
 * when mimalloc refused, stay glibc's.
 *
 * mimalloc's segments come from one range reserved here, at a fixed place
 * under 20 TiB, handed to mimalloc as arenas of its own
 * (mi_manage_os_memory): so a free asks one subtraction and compare where
 * mimalloc's segment map took a call and 21 instructions (backend.h
 * vmap_mi_in_range).  The range is PROT_NONE and MAP_NORESERVE, and handed
 * over as not committed: mimalloc makes what it uses writable (mprotect,
 * charged then under strict overcommit) and gives it back as it would its
 * own mappings (MADV_DONTNEED); its segments sit side by side, in one
 * mapping.  It starts at one segment, at load (none under a finite
 * RLIMIT_AS: reserved space counts against it, so the first segment waits
 * for mimalloc's first block), and doubles in place (vmap_mimalloc_grow)
 * when mimalloc's blocks show it filling the last segment, or when mimalloc
 * refuses a block.
 *
 * mimalloc never maps a segment itself (mi_option_limit_os_alloc): when the
 * range is full and cannot grow it refuses, and glibc serves.  A segment it
 * mapped itself could land anywhere: its segment map covers only the
 * addresses under 20 TiB, and when its hinted mmap fails (another mapping
 * there, or a finite RLIMIT_AS that a racing munmap relieves) it maps at
 * the kernel's choice, far above, where mi_is_in_heap_region says no and
 * the block would be taken for glibc's.
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
uintptr_t vmap_mi_lo VMAP_HOT;
size_t vmap_mi_len VMAP_HOT;
size_t vmap_mi_room VMAP_HOT;

#ifdef VMAP_HAVE_MIMALLOC
#include <mimalloc.h>
#include <sys/mman.h>

#include "counter.h"
#include "os.h"

/* mimalloc's segment size and alignment (2.x): its arenas' start and the
 * range's first step. */
#define MI_SEGMENT (32ul << 20)
/* Where the range may start: under the 20 TiB that mimalloc's segment map
 * covers (so mi_is_in_heap_region knows these segments too), above where
 * its own hints start (2-6 TiB, a segment further each time).  If all four
 * are taken, no range. */
#define MI_RANGE_AT (16ul << 40)
#define MI_RANGE_TRIES 4
/* The most the range grows to (so it stays under 20 TiB); it doubles from
 * one segment. */
#define MI_RANGE_MAX (1ul << 40)

static bool (*mi_manage)(void *, size_t, bool, bool, bool, int);
static bool range_growing, range_stuck;

static bool as_unlimited(void)
{
	uint64_t cur, max;
	return vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) == 0 && cur == UINT64_MAX;
}

/* Hands [at, at + len), reserved, to mimalloc as an arena, not committed;
 * the range takes it in first, since mimalloc may place a segment in it as
 * soon as it has it. */
static bool range_add(uintptr_t at, size_t len)
{
	size_t old = vmap_mi_len;
	if (!vmap_mi_lo)
		vmap_mi_lo = at;
	__atomic_store_n(&vmap_mi_len, old + len, __ATOMIC_RELEASE);
	if (mi_manage((void *)at, len, false /* committed */, false /* large pages */,
		      true /* zero */, -1 /* any NUMA node */)) {
		__atomic_store_n(&vmap_mi_room, old + len - MI_SEGMENT, __ATOMIC_RELAXED);
		vmap_stat_add_cpu(0, VMAP_STAT_mimalloc_range_bytes, (int64_t)len);
		return true;
	}
	__atomic_store_n(&vmap_mi_len, old, __ATOMIC_RELEASE);
	vmap_os_munmap((void *)at, len);
	return false;
}

/* The range's first segment, at one of MI_RANGE_TRIES places; -errno of
 * the last refusal. */
static int first_segment(void)
{
	int err = -1;
	for (unsigned i = 0; i < MI_RANGE_TRIES && err != -12 /* ENOMEM: anywhere */; i++) {
		uintptr_t at = MI_RANGE_AT + ((uintptr_t)i << 40);
		if ((err = vmap_os_reserve_at((void *)at, MI_SEGMENT)) == 0)
			return range_add(at, MI_SEGMENT) ? 0 : -1;
	}
	return err;
}

bool vmap_mimalloc_refused(size_t size, size_t align)
{
	/* Blocks that fit a segment of the usual size: mimalloc refuses
	 * larger ones or stranger alignments for other reasons than room. */
	return size <= MI_SEGMENT / 2 && align <= (64u << 10) && vmap_mimalloc_grow(true);
}

/* Refusals to let pass before trying again after a finite RLIMIT_AS
 * refused the range room: at most one system call per REFUSED_BACKOFF of
 * them while the address space is full (glibc serves meanwhile). */
#define REFUSED_BACKOFF 64
static unsigned refused_skip;

bool vmap_mimalloc_grow(bool refused)
{
	unsigned skip = __atomic_load_n(&refused_skip, __ATOMIC_RELAXED);
	if (refused && skip) {
		__atomic_store_n(&refused_skip, skip - 1, __ATOMIC_RELAXED);
		return false;
	}
	if (!mi_manage || __atomic_load_n(&range_stuck, __ATOMIC_RELAXED) ||
	    __atomic_exchange_n(&range_growing, true, __ATOMIC_ACQUIRE))
		return false;
	size_t len = vmap_mi_len;
	uintptr_t at = vmap_mi_lo + len;
	/* Unless mimalloc refused a block: only once it has used the range's
	 * last segment, made writable then (the blocks that call here may be
	 * those of segments placed before the last growth). */
	char probe;
	if (len && !refused && vmap_os_read_self(&probe, (void *)(at - MI_SEGMENT), 1) != 1) {
		__atomic_store_n(&range_growing, false, __ATOMIC_RELEASE);
		return false;
	}
	bool unlimited = as_unlimited();
	int err = 0;
	if (!len) {
		err = first_segment();
	} else {
		/* Doubling, but a segment at a time under a finite RLIMIT_AS,
		 * which counts the reserved rest. */
		size_t step = unlimited ? len : MI_SEGMENT;
		if (len + step > MI_RANGE_MAX)
			err = -1;
		else if ((err = vmap_os_reserve_at((void *)at, step)) == 0 && !range_add(at, step))
			err = -1;
	}
	/* For good, but when a finite RLIMIT_AS refused: memory freed later
	 * may make room. */
	if (err && (unlimited || err != -12 /* ENOMEM */))
		__atomic_store_n(&range_stuck, true, __ATOMIC_RELAXED);
	else if (err)
		__atomic_store_n(&refused_skip, REFUSED_BACKOFF - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&range_growing, false, __ATOMIC_RELEASE);
	return err == 0;
}

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
	mi_manage = (__typeof__(mi_manage))vmap_elf_symbol(VMAP_MIMALLOC_SONAME,
							   "mi_manage_os_memory");
	if (mi_manage) {
		option_set(mi_option_limit_os_alloc, 1);
		if (as_unlimited())
			first_segment(); /* (else at mimalloc's first refusal) */
	}
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

bool vmap_mimalloc_grow(bool refused)
{
	(void)refused;
	return false;
}

bool vmap_mimalloc_refused(size_t size, size_t align)
{
	(void)size;
	(void)align;
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
