/*
 * move.c — realloc by moving pages (mremap) instead of copying them, the
 * undo of a move that failed part way, and the VMAs moved areas add.
 */
#include "range_impl.h"

/*
 * Undoing a move that failed part way.  Since Linux 6.17 mremap moves a
 * source made of several VMAs one VMA at a time, and near vm.max_map_count
 * it can fail after the first pieces have moved: their pages are in q, their
 * old range is empty (MREMAP_DONTUNMAP) or unmapped, and the destination of
 * the piece that failed may be unmapped too.  Nothing says where the pieces
 * end; but if q read zero before the move, every page is in exactly one of p
 * and q, the other reading zero, so ORing q into p page by page puts every
 * byte back in p.  Pages of p still resident never moved (moving empties the
 * source) and are skipped.  Holes in p and q are mapped again (NOREPLACE:
 * another thread's mapping may have taken a hole since).  Returns 0 when p
 * holds its content and q is whole again, 1 when p does but part of q could
 * not be mapped again, -1 when a hole in p could not be refilled (its pages
 * stay in q, which the caller must then keep).
 */
#define UNDO_PAGES 256 /* pages per mincore call */
#define MOVE_MIN_PAGES 64 /* 256 KiB: smaller areas are copied */
#define UNDO_HOLE 2    /* vec mark: not mapped */

static void undo_residency(uintptr_t a, size_t n, unsigned char *vec)
{
	if (vmap_os_mincore((void *)a, n << VMAP_PAGE_SHIFT, vec) == 0) {
		for (size_t i = 0; i < n; i++)
			vec[i] &= 1;
		return;
	}
	for (size_t i = 0; i < n; i++) /* something is unmapped: page by page */
		if (vmap_os_mincore((void *)(a + (i << VMAP_PAGE_SHIFT)), VMAP_PAGE, &vec[i]) == 0)
			vec[i] &= 1;
		else
			vec[i] = UNDO_HOLE;
}

/* Maps every run of holes in vec again; false if one could not be. */
static bool undo_refill(uintptr_t a, size_t n, const unsigned char *vec)
{
	bool ok = true;
	for (size_t i = 0; i < n;) {
		if (vec[i] != UNDO_HOLE) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && vec[j] == UNDO_HOLE)
			j++;
		if (vmap_os_map_hole((void *)(a + (i << VMAP_PAGE_SHIFT)), (j - i) << VMAP_PAGE_SHIFT))
			ok = false;
		i = j;
	}
	return ok;
}

int vmap_move_undo(void *p, void *q, size_t len)
{
	unsigned char pv[UNDO_PAGES], qv[UNDO_PAGES];
	size_t pages = len >> VMAP_PAGE_SHIFT;
	bool p_ok = true, q_ok = true;
	for (size_t at = 0; at < pages; at += UNDO_PAGES) {
		size_t n = pages - at < UNDO_PAGES ? pages - at : UNDO_PAGES;
		uintptr_t pa = (uintptr_t)p + (at << VMAP_PAGE_SHIFT);
		uintptr_t qa = (uintptr_t)q + (at << VMAP_PAGE_SHIFT);
		undo_residency(pa, n, pv);
		undo_residency(qa, n, qv);
		bool refilled = undo_refill(pa, n, pv);
		p_ok &= refilled;
		for (size_t i = 0; i < n; i++) {
			if (pv[i] == 1 || qv[i] == UNDO_HOLE || (pv[i] == UNDO_HOLE && !refilled))
				continue;
			uint64_t *d = (uint64_t *)(pa + (i << VMAP_PAGE_SHIFT));
			const uint64_t *src = (const uint64_t *)(qa + (i << VMAP_PAGE_SHIFT));
			for (size_t w = 0; w < VMAP_PAGE / sizeof(uint64_t); w++)
				if (src[w])
					d[w] |= src[w];
		}
		q_ok &= undo_refill(qa, n, qv);
	}
	return !p_ok ? -1 : !q_ok;
}

/* Retires q, a fresh area the caller will not get (part of it could not be
 * mapped again): foreign (mmap.c) = out of circulation, no longer a live
 * block, ours again if the program ever munmaps it. */
static void retire_destination(void *q)
{
	struct vmap_pte *qe = vmap_pte_of(vmap_region_of((uintptr_t)q), (uintptr_t)q);
	uint64_t qt = __atomic_load_n(&qe->tag, __ATOMIC_ACQUIRE);
	struct vmap_shard *qs = &vmap_shards[vmap_tag_shard(qt)];
	unsigned qcpu = vmap_os_cpu();
	vmap_shard_lock(qs);
	__atomic_store_n(&qe->tag,
			 vmap_tag_make(VMAP_ST_FOREIGN, qs->id, vmap_tag_pages(qt), qt & VMAP_TAG_BIG),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(qs);
	vmap_stat_add_cpu(qcpu, VMAP_STAT_large_blocks_in_use, -1);
	vmap_stat_add_cpu(qcpu, VMAP_STAT_large_bytes_in_use,
			  -(int64_t)((vmap_tag_pages(qt) - 1) << VMAP_PAGE_SHIFT));
}

/*
 * The VMAs moves leave.  Pages mremap moves keep their old page offset, so
 * the kernel cannot merge them with the arena's VMA around their new place:
 * each moved area is a VMA of its own, cutting the one it landed in (two
 * more).  Its old range, mapped again at once, merges back.  The VMA lasts
 * while the area lives and while its pages are cached after a free (a free
 * that mapped them afresh would drop the pages a realloc loop reuses next);
 * the purge maps such pages afresh, which merges them back.  vmap_moves
 * counts two VMAs per move, an upper bound since moves last counted: when a
 * move would take it past two thirds of the VMA budget (arena.c), the VMAs
 * are counted again in /proc/self/maps (vmap_arena_recount), and
 * past the budget realloc copies.
 */
static uint64_t vmap_moves_counted_ns;

void vmap_moves_count(unsigned areas)
{
	__atomic_add_fetch(&vmap_moves, 2ull * areas, __ATOMIC_RELAXED);
}

bool vmap_moves_allowed(void)
{
	uint64_t max = vmap_vma_budget() / 3 * 2;
	if (__atomic_load_n(&vmap_moves, __ATOMIC_RELAXED) + 2 <= max)
		return true;
	uint64_t extra = vmap_arena_recount(&vmap_moves_counted_ns);
	if (extra == UINT64_MAX)
		return false;
	/* What is not the lazily unmapped pieces' (two VMAs each at most). */
	uint64_t pieces = 2 * (uint64_t)__atomic_load_n(&vmap_protected_runs, __ATOMIC_RELAXED) +
			  __atomic_load_n(&vmap_none_vmas, __ATOMIC_RELAXED);
	uint64_t moves = extra > pieces ? extra - pieces : 0;
	__atomic_store_n(&vmap_moves, moves, __ATOMIC_RELAXED);
	return moves + 2 <= max;
}

/* Retires [a, a+len), arena pages a moved area left and that could not be
 * mapped again (another mapping took the hole, or the VMA limit): foreign,
 * out of circulation, ours again if the program ever munmaps them. */
static void retire_hole(struct vmap_shard *s, uintptr_t a, uint64_t pages, bool big)
{
	vmap_shard_lock(s);
	__atomic_store_n(&vmap_pte_of(vmap_region_of(a), a)->tag,
			 vmap_tag_make(VMAP_ST_FOREIGN, s->id, pages, big ? VMAP_TAG_BIG : 0),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
}

/*
 * realloc shrinking a block in place: the pages past the new size go back as
 * a zero run, purged first (the block still owns them, so no other thread can
 * have carved them).  Kept, they would be filed as resident when the block is
 * freed while many were never touched: redis-server sizes a query buffer for
 * the last large value and trims each stored value to its length, and reusing
 * such a block faulted its untouched tail in while the free runs that were
 * resident stayed unused.  Not for areas moved, mapped over or with changed
 * attributes (their pages are not plain arena memory), nor with guards on.
 */
#define SHRINK_MIN_PAGES 4

bool vmap_range_shrink(void *p, size_t size)
{
	uint64_t t;
	struct vmap_pte *e = vmap_live_pte(p, "realloc", &t, NULL);
	uint64_t pages = vmap_tag_pages(t), keep = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	if (keep + SHRINK_MIN_PAGES > pages || vmap_guard_on ||
	    (t & (VMAP_TAG_MOVED | VMAP_TAG_OVER | VMAP_TAG_ATTR)))
		return false;
	uint64_t tail = pages - keep;
	uintptr_t a = (uintptr_t)p + (keep << VMAP_PAGE_SHIFT);
	if (vmap_os_madvise((void *)a, (size_t)tail << VMAP_PAGE_SHIFT, MADV_DONTNEED))
		return false;
	bool big = t & VMAP_TAG_BIG;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	vmap_shard_lock(s);
	__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_LIVE, s->id, keep, t & VMAP_TAG_BIG),
			 __ATOMIC_RELEASE);
	vmap_chunks_give_back_locked(s, vmap_free_insert_locked(s, a, tail, VMAP_RUN_ZERO, big, 0));
	vmap_shard_unlock(s);
	vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, -(int64_t)(tail << VMAP_PAGE_SHIFT));
	vmap_stat_add_local(VMAP_STAT_realloc_tails_released, 1);
	return true;
}

void *vmap_range_move(void *p, size_t size, bool *moved)
{
	uint64_t t;
	struct vmap_pte *e = vmap_live_pte(p, "realloc", &t, NULL);
	uint64_t pages = vmap_tag_pages(t);
	size_t old_usable = (size_t)((pages - 1) << VMAP_PAGE_SHIFT);
	bool zero;
	void *q = vmap_range_alloc_grown(size, &zero);
	*moved = false;
	if (!q)
		return NULL;
	/* A moved area is a VMA of its own while it lives (above): only as
	 * many as the budget allows, the largest first -- below MOVE_MIN_PAGES
	 * copying costs less than the VMA. */
	if (pages < MOVE_MIN_PAGES || !vmap_moves_allowed() || (t & VMAP_TAG_OVER))
		return q; /* (mapped over: the program's mappings stay where they are) */
	if (__atomic_load_n(&vmap_moves_refused, __ATOMIC_RELAXED))
		return q; /* this kernel cannot: copy */
	/* Move the page tables, not the bytes, and grow the moved VMA to
	 * q's whole area at once: the kernel unmaps q's range, moves p's
	 * pages to its start, and the new VMA covers the rest too (zero), so
	 * the moved area is one VMA however often it moves.  The guard page
	 * stays out of it (with guards on, it keeps its marker).  p's range is
	 * left unmapped and mapped again at once, without replacing anything
	 * (another thread's mapping may have taken the hole meanwhile). */
	struct vmap_pte *qe = vmap_pte_of(vmap_region_of((uintptr_t)q), (uintptr_t)q);
	uint64_t qt = __atomic_load_n(&qe->tag, __ATOMIC_RELAXED);
	size_t span = (size_t)(pages - vmap_guard_on) << VMAP_PAGE_SHIFT;
	size_t qspan = (size_t)(vmap_tag_pages(qt) - vmap_guard_on) << VMAP_PAGE_SHIFT;
	/* A move that fails part way is undone by merging q back into p,
	 * which needs q to read zero where nothing moved (vmap_move_undo). */
	if (!zero && vmap_os_madvise(q, qspan, MADV_DONTNEED))
		return q; /* (cannot happen to an arena area: then copy) */
	void *m = vmap_os_mremap(p, span, qspan, MREMAP_MAYMOVE | MREMAP_FIXED, q);
	if (vmap_os_is_err(m)) {
		if (vmap_os_err(m) == EINVAL) {
			/* Checked before anything moves (a kernel that will not
			 * move within one mapping): copy, now and from now on. */
			__atomic_store_n(&vmap_moves_refused, true, __ATOMIC_RELAXED);
			return q;
		}
		/* Nothing moved (EFAULT before Linux 6.17 for a source of several
		 * VMAs), or near vm.max_map_count some pieces did: p gets all its
		 * bytes back (q read zero, or was unmapped, before the move), and
		 * the caller copies them into q.  If a hole cannot be mapped
		 * again (the VMA limit), q is retired and the caller gets NULL. */
		if (vmap_move_undo(p, q, span) != 0) {
			retire_destination(q);
			return NULL;
		}
		return q; /* caller copies and frees p */
	}
	/* q is a moved area now: one VMA more (if p was one, its VMA went
	 * with the move, and the count is an upper bound). */
	__atomic_or_fetch(&qe->tag, VMAP_TAG_MOVED, __ATOMIC_RELEASE);
	vmap_moves_count(1);
	if (qt & VMAP_TAG_BIG)
		vmap_arena_advise((uintptr_t)q, qspan);
	bool big = t & VMAP_TAG_BIG;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	unsigned cpu = vmap_os_cpu();
	vmap_guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE); /* marker gone: reads zero */
	if (vmap_os_map_hole(p, span)) {
		retire_hole(s, (uintptr_t)p, pages, big);
	} else {
		vmap_arena_advise((uintptr_t)p, span);
		vmap_shard_lock(s);
		__atomic_store_n(&e->tag, 0, __ATOMIC_RELAXED);
		vmap_chunks_give_back_locked(s, vmap_free_insert_locked(s, (uintptr_t)p, pages,
									VMAP_RUN_ZERO, big, 0));
		vmap_shard_unlock(s);
	}
	vmap_count_large_free((int64_t)old_usable);
	vmap_stat_add_cpu(cpu, VMAP_STAT_realloc_moved_pages, 1);
	*moved = true;
	return q;
}
