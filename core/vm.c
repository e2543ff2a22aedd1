/*
 * vm.c — page-state changes of arena pages: the guard page of each area
 * (VMAPALLOC_GUARD=1), guard markers (MADV_GUARD_INSTALL, probed once; a
 * PROT_NONE mapping on kernels without them) and taking them off again;
 * the PROT_NONE mappings of guarded runs and their VMA budget; the page
 * tables of purged zero runs.
 *
 * Invariant: every page of a guarded run faults until vmap_unguard.  Calls
 * named _locked run under the run's shard lock (rank 1): they map over free
 * pages that nobody may carve meanwhile; the rest holds no lock.
 */
#include "range_impl.h"

/* VMAPALLOC_GUARD=1: the guard page of every malloc area traps.  Installed
 * when an area is carved, removed when its pages go back to the free runs
 * (pools and thread caches keep areas whole, marker included). */
bool vmap_guard_on;
static int vmap_guard_markers_state; /* 0 not probed yet, 1 MADV_GUARD_INSTALL works, -1 not */

void vmap_guard_page(uintptr_t area, uint64_t pages, int advice)
{
	if (vmap_guard_on)
		vmap_os_madvise((void *)(area + ((pages - 1) << VMAP_PAGE_SHIFT)), VMAP_PAGE, advice);
}

bool vmap_range_guard_on(void)
{
	return vmap_guard_on;
}

/* Makes lazily unmapped pages usable again (contents: stale). */
/* When the call that makes them usable fails (ENOMEM: the kernel could not
 * split a VMA, or an injected fault, rel-strace-inject), a fresh mapping
 * over them does it (zero-filled: every caller zeroes or wants zero); the
 * pages were handed out faulting before. */
int vmap_unprotect(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	int rc = vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE);
	if (rc)
		rc = vmap_os_map_fresh((void *)a, len);
	return rc;
}

/* Can this kernel mark pages as faulting without splitting the VMA
 * (MADV_GUARD_INSTALL, Linux >= 6.13)?  Asked of the kernel the first
 * time it matters (VMAPALLOC_GUARD, or the program's first munmap of served
 * memory), so a process that never needs it makes no system call for it. */
bool vmap_guard_markers(void)
{
	int st = __atomic_load_n(&vmap_guard_markers_state, __ATOMIC_RELAXED);
	if (__builtin_expect(st != 0, 1))
		return st > 0;
	/* The kernel checks the advice before the range: an empty range at 0
	 * tells a known advice (0) from an unknown one (EINVAL). */
	st = vmap_os_madvise(NULL, 0, MADV_GUARD_INSTALL) == 0 ? 1 : -1;
	__atomic_store_n(&vmap_guard_markers_state, st, __ATOMIC_RELAXED);
	return st > 0;
}

/* Makes guarded pages (munmap()ed by the program) usable again: zero-filled.
 * 0, or -errno: they may still fault (on a kernel without guard markers, at
 * vm.max_map_count neither mprotect nor a fresh mapping can split the VMA). */
int vmap_unguard(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	bool markers = vmap_guard_markers();
	int rc = markers ? vmap_os_madvise((void *)a, len, MADV_GUARD_REMOVE) : 0;
	/* Some guarded pages may be PROT_NONE pieces instead (below). */
	if (!rc && (!markers || __atomic_load_n(&vmap_none_made, __ATOMIC_RELAXED))) {
		rc = vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE);
		/* A fresh PROT_NONE mapping lost the chunk's MADV_HUGEPAGE: without
		 * it the pages neither merge back into a big chunk's VMA nor get
		 * huge pages. */
		if (!rc)
			vmap_arena_advise(a, len);
	}
	if (!rc)
		return 0;
	return vmap_os_map_fresh((void *)a, len);
}

/*
 * PROT_NONE pieces.  Guard markers make unmapped pages fault without cutting
 * the arena's VMA, but each marker is a page-table entry that fork copies
 * one by one, and the table that holds it stays: 56 MiB of them (CPython's
 * freed arenas) doubled the cost of every fork.  A fresh PROT_NONE mapping
 * over the pages faults the same way, drops them and the page tables under
 * it, and fork copies nothing of it (no anonymous pages).  A guarded run
 * that merges pieces (and the zero runs between them) is mapped PROT_NONE whole
 * (runs.c, guard_whole): one VMA, however many pieces went into it, so that
 * each guarded run cuts at most two VMAs out of the arena's.  runs.c counts
 * two per guarded run in vmap_none_vmas, an upper bound that falls when a
 * run is carved or merged; the pieces share a third of the VMA budget with
 * the lazily unmapped runs (two each), and past it they get markers.  A
 * run of markers only counts too, cutting nothing: when the count says the
 * share is full, the arena's VMAs are counted in /proc/self/maps (at most
 * every 10 ms, vmap_arena_recount), less the moves' and the lazily
 * unmapped runs', for a second opinion.  A guarded run may thus hold markers
 * and PROT_NONE pages both: vmap_unguard clears either.
 *
 *   pieces:  [ live |NONE|  zero  |NONE| live ]     up to four cuts
 *   merged:  [ live |        NONE       | live ]     two
 */
static uint64_t none_counted_ns;

static bool none_fits(void)
{
	uint64_t share = vmap_vma_budget() / 3;
	uint64_t lazy = 2 * (uint64_t)__atomic_load_n(&vmap_protected_runs, __ATOMIC_RELAXED);
	uint64_t none = __atomic_load_n(&vmap_none_vmas, __ATOMIC_RELAXED);
	if (none + lazy + 2 <= share)
		return true;
	uint64_t extra = vmap_arena_recount(&none_counted_ns);
	if (extra == UINT64_MAX)
		return false;
	uint64_t others = lazy + __atomic_load_n(&vmap_moves, __ATOMIC_RELAXED);
	none = extra > others ? extra - others : 0;
	return none + lazy + 2 <= share;
}

static int map_none(uintptr_t a, size_t len)
{
	void *m = vmap_os_mmap((void *)a, len, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(m))
		return -vmap_os_err(m);
	__atomic_store_n(&vmap_none_made, true, __ATOMIC_RELAXED);
	return 0;
}

int vmap_guard_none(uintptr_t a, size_t len, bool counted)
{
	if (!counted && !none_fits())
		return -ENOMEM;
	return map_none(a, len);
}

/*
 * Page tables of freed memory.  The kernel frees a page table only when one
 * call unmaps, maps afresh or (Linux >= 6.14) drops with MADV_DONTNEED the
 * whole 2 MiB it maps.  A purge drops areas smaller than that: the tables
 * under them stay, empty, and every fork copies them (allocates one, scans
 * its 512 entries) and every child's exit frees them.  So when a purged
 * area completes whole 2 MiB spans of the zero run it merges into, those
 * spans are mapped afresh, read-write as the arena around them (merging
 * with its VMA): their tables go, and so do their records (runs.c).  Only
 * spans the area reaches into, which had pages resident: the rest of a zero
 * run never faulted, or was dropped whole already.  Under the shard lock (the run is free: nobody carves it
 * meanwhile), one call per purged area that completes a span.
 *
 *   run:     [ zero  |   span   |   span   | zero ]
 *   purged:               [ area ]
 *   afresh:          [   span   ]
 */
void vmap_zero_spans_locked(uintptr_t run, uintptr_t a, uintptr_t e)
{
	const uintptr_t span = VMAP_HUGE_PAGE;
	struct vmap_pte *h = vmap_pte_of(vmap_region_of(run), run);
	uintptr_t end = run + (vmap_tag_pages(h->tag) << VMAP_PAGE_SHIFT);
	uintptr_t lo = a & ~(span - 1), hi = (e + span - 1) & ~(span - 1);
	if (lo < run)
		lo = (run + span - 1) & ~(span - 1);
	if (hi > end)
		hi = end & ~(span - 1);
	if (lo < hi && vmap_map_fresh_arena(lo, hi - lo) == 0)
		vmap_run_drop_records_locked(run, lo, hi);
}
