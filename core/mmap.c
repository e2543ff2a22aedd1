/*
 * mmap.c — the program's own mmap, munmap, mprotect, madvise, mincore,
 * mlock, munlock and mseal, served inside the arena by the range allocator
 * with the kernel's answers (mremap: mremap.c).
 *
 * Served: private, anonymous, read-write requests without an address hint,
 * fd -1, offset 0, and none of MAP_FIXED(_NOREPLACE), MAP_SHARED, MAP_HUGETLB,
 * MAP_GROWSDOWN, MAP_STACK, MAP_32BIT, MAP_LOCKED; MAP_POPULATE and
 * MAP_NORESERVE are honoured.  Everything else goes to the kernel unchanged
 * through the raw system call, with the kernel's result and errno.
 *
 * A served mapping is an area tagged VMAP_TAG_MMAP: all its pages are the
 * program's (no guard page), zero-filled when handed out.  munmap() of any
 * part of it — head, tail, middle, several mappings and holes in one call —
 * splits the area exactly; the unmapped pages fault like unmapped memory --
 * kept resident PROT_NONE for the next mmap (LAZY_MAX set), else a fresh
 * PROT_NONE mapping (within the VMA budget: fork copies nothing of it), else
 * guard markers (MADV_GUARD_INSTALL: no VMA cut, a page-table entry each) --
 * a "protected" or "guarded" free run, un-guarded when reused.  mprotect,
 * madvise, mincore, mremap there fail as on unmapped memory (ENOMEM, EFAULT).
 * Served mappings come from shards of their own (vmap_shard_mmap_here).
 * An area whose protection or advice the program changed is flagged ATTR and
 * reset with a fresh mapping before reuse; where it changed them for part of
 * the area only, the area mirrors the VMAs the kernel would have split it
 * into (mmap_vma.c).  munmap/mremap aimed at a live malloc block, and
 * munmap/mremap/MAP_FIXED aimed at a slab or at vmapalloc's metadata, are
 * refused with EINVAL and one diagnostic line.  MAP_FIXED over a live large
 * block gets the kernel's answer: the block is marked mapped over
 * (VMAP_TAG_OVER, take_for_fixed); MAP_FIXED_NOREPLACE over any mapped page
 * of the arena (a block, a slab, metadata) gets EEXIST.
 * MAP_FIXED, MAP_FIXED_NOREPLACE and hints aimed at arena pages that
 * are free from the program's point of view get them: the pages are carved
 * out and handed to the kernel (a "foreign" range, ours again once the
 * program unmaps it).
 *
 * Owns no state of its own beyond counters; every tag change happens under
 * the owner shard's lock (range.h), system calls outside it — but for the
 * attribute bits of a live served mapping (ATTR, VMA, SEGS), which
 * mprotect/madvise/mlock change lock-free with an atomic read-modify-write.
 *
 * Re-entered (a signal handler that interrupted this thread inside the
 * allocator, alloc.h): nothing here may take a shard lock, so mmap goes to
 * the kernel, munmap of arena pages is deferred to the end of the
 * interrupted call, and MAP_FIXED or mremap into the arena is refused with
 * ENOMEM (vmap_*_reentered below).  mprotect, madvise, mincore and mlock
 * take no lock: they need no other path.
 *
 * Called by: preload/mmap.c (the exported names); mremap.c (mmap_impl.h).
 */
#include "mmap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "counter.h"
#include "fmt.h"
#include "mmap_impl.h"
#include "options.h"
#include "observe.h"
#include "range.h"
#include "slab.h"
#include "thread.h"

#define SERVED_MAX ((size_t)1 << 36) /* 64 GiB: larger requests go to the kernel */

/* One diagnostic line for a call aimed at a live malloc block or metadata. */
void vmap_mmap_refuse(const char *call, uintptr_t a)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_str(&b, "vmapalloc: ");
	vmap_buf_str(&b, call);
	vmap_buf_str(&b, "(");
	vmap_buf_hex(&b, a);
	vmap_buf_str(&b, ") aimed at memory vmapalloc uses (a live malloc block, a slab or metadata): "
			 "refused with EINVAL\n");
	vmap_buf_flush(&b);
	count(VMAP_STAT_mmap_refused, 1);
}

/* ---- unmapping part of a served mapping ----------------------------------- */

/* Makes [a, e) fault like unmapped memory.  0 or -errno. */
static int make_unmapped(uintptr_t a, uintptr_t e, bool attr)
{
	size_t len = e - a;
	if (attr) {
		/* Reset protection/advice/locking with a fresh mapping first. */
		int rc = vmap_map_fresh_arena(a, len);
		if (rc)
			return rc;
	}
	if (vmap_guard_markers()) {
		int rc = vmap_os_madvise((void *)a, len, MADV_GUARD_INSTALL);
		if (rc == 0)
			return 0;
		if (!attr && rc == -EINVAL) /* e.g. mlocked: reset, then try again */
			return make_unmapped(a, e, true);
		/* After the fresh mapping the content is gone: the unmap took
		 * place, only its pages do not fault (they read zero, as a
		 * guarded run must).  Failing would tell the program its
		 * mapping is still there (rel-strace-inject). */
		return attr ? 0 : rc;
	}
	/* Older kernels: PROT_NONE (splits the VMA; the pages are dropped first
	 * so that they are zero when un-guarded). */
	if (vmap_os_madvise((void *)a, len, MADV_DONTNEED)) {
		int rc = vmap_os_map_fresh((void *)a, len);
		if (rc)
			return attr ? 0 : rc; /* (as above) */
	}
	return vmap_os_mprotect((void *)a, len, PROT_NONE);
}

/* Lazily unmapped runs (free runs filed PROTECTED, counted by runs.c): at
 * most a sixth of vmap_vma_budget() (8 of the default 48), each may cut the
 * arena's VMA in three.  Read without a lock: threads unmapping at once may
 * pass it by one each. */
static bool lazy_unmap_fits(void)
{
	return __atomic_load_n(&vmap_protected_runs, __ATOMIC_RELAXED) < (int)(vmap_vma_budget() / 6);
}

/* Cuts [a, e) out of the served mapping p (shard lock not held).  Lazily
 * with VMAPALLOC_LAZY_MAX set: PROT_NONE keeps the pages resident for the
 * next mmap (an mprotect and a memset, not a fault per page), within the
 * cache and VMA budgets.  Else they go at once, as the kernel's munmap gives
 * them back (kept, they raised CPython's and Ruby's peak RSS).  Pages of a
 * moved area (VMAP_TAG_MOVED) are mapped afresh first, which merges them
 * back into the arena's VMA (move.c). */
int vmap_cut_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e)
{
	uint64_t t = p->tag;
	unsigned state = VMAP_RUN_GUARDED;
	bool reset = t & (VMAP_TAG_ATTR | VMAP_TAG_MOVED);
	int rc = -1;
	if (!reset && vmap_opt.lazy_max && e - a <= vmap_lazy_max / 4 && lazy_unmap_fits()) {
		rc = vmap_os_mprotect((void *)a, e - a, PROT_NONE);
		if (rc == 0)
			state = VMAP_RUN_PROTECTED;
	}
	if (rc)
		rc = vmap_guard_none(a, e - a, false);
	if (rc) {
		rc = make_unmapped(a, e, reset);
		if (rc)
			return rc;
	}
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	bool big = t & VMAP_TAG_BIG;
	uint64_t keep = t & (VMAP_TAG_BIG | VMAP_TAG_MMAP | VMAP_TAG_ATTR | VMAP_TAG_MOVED);
	vmap_shard_lock(s);
	struct vmap_pte *h = vmap_pte_of(r, p->head);
	uint64_t left = (a - p->head) >> VMAP_PAGE_SHIFT, right = (p->end - e) >> VMAP_PAGE_SHIFT;
	/* The pieces left keep the attributes the program gave their pages (its
	 * VMAs): the right one's first page's go to its head tag.  Read before
	 * the profile takes e's entry over.  (The attribute bits may have
	 * changed since p was read: mprotect takes no lock.) */
	uint64_t cur = __atomic_load_n(&h->tag, __ATOMIC_RELAXED);
	if ((cur ^ t) & ~(VMAP_TAG_VMA | VMAP_TAG_SEGS))
		cur = t;
	uint64_t lkeep = keep | (cur & (VMAP_TAG_VMA | VMAP_TAG_SEGS));
	uint64_t rkeep = keep | (cur & VMAP_TAG_SEGS);
	if (right && (cur & VMAP_TAG_ATTR)) {
		unsigned v = vmap_attrs_at(r, p->head, cur, e);
		rkeep |= attrs_bits(v);
		vmap_rebase_labels(r, p->head, cur, e, p->end);
		vmap_set_head_hidden(r, e, v, vmap_has_hidden(r, p->head));
	} else if (right) {
		vmap_clear_hidden(r, e);
	}
	if (__builtin_expect(vmap_profile_on, 0)) /* its record follows the pieces left */
		vmap_observe.mmap_cut(p->head, p->end, a, e);
	__atomic_store_n(&h->tag,
			 left ? vmap_tag_make(VMAP_ST_LIVE, s->id, left, lkeep) : 0, __ATOMIC_RELEASE);
	if (right)
		__atomic_store_n(&vmap_pte_of(r, e)->tag,
				 vmap_tag_make(VMAP_ST_LIVE, s->id, right, rkeep), __ATOMIC_RELEASE);
	vmap_free_insert_locked(s, a, (e - a) >> VMAP_PAGE_SHIFT, state, big, vmap_os_now_ns());
	vmap_shard_unlock(s);
	count(VMAP_STAT_mmap_bytes_in_use, -(int64_t)(e - a));
	if (state == VMAP_RUN_PROTECTED) {
		count(VMAP_STAT_cached_bytes, (int64_t)(e - a));
		vmap_purge_maybe(vmap_os_now_ns());
	}
	if (left || right)
		count(VMAP_STAT_munmap_partial, 1);
	return 0;
}

/* A foreign range the program unmaps: back to the kernel, then ours again. */
static int cut_foreign(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e)
{
	int rc = vmap_os_munmap((void *)a, e - a);
	if (rc)
		return rc;
	if (vmap_os_map_fresh((void *)a, e - a))
		return 0; /* a hole in the arena: it stays foreign (never reused) */
	/* The placeholder must fault like the unmapped memory it stands for. */
	if (make_unmapped(a, e, false))
		return 0; /* cannot: keep it foreign, never handed out */
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	vmap_shard_lock(s);
	uint64_t left = (a - p->head) >> VMAP_PAGE_SHIFT, right = (p->end - e) >> VMAP_PAGE_SHIFT;
	uint64_t keep = t & VMAP_TAG_BIG;
	__atomic_store_n(&vmap_pte_of(r, p->head)->tag,
			 left ? vmap_tag_make(VMAP_ST_FOREIGN, s->id, left, keep) : 0, __ATOMIC_RELEASE);
	if (right)
		__atomic_store_n(&vmap_pte_of(r, e)->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, right, keep), __ATOMIC_RELEASE);
	vmap_free_insert_locked(s, a, (e - a) >> VMAP_PAGE_SHIFT, VMAP_RUN_GUARDED, t & VMAP_TAG_BIG,
				0);
	vmap_shard_unlock(s);
	return 0;
}

int vmap_unmap_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	bool *any = arg;
	if (!r) {
		/* Outside the arena: the kernel's business. */
		int rc = vmap_os_munmap((void *)a, e - a);
		return rc ? rc : 0;
	}
	if (p->kind == PIECE_MAPPED) {
		*any = true;
		return vmap_cut_mapped(r, p, a, e);
	}
	if (p->kind == PIECE_FOREIGN)
		return cut_foreign(r, p, a, e);
	return 0; /* a hole: already unmapped from the program's view */
}

/* munmap's argument checks, the kernel's: the page-rounded length, or 0 for
 * EINVAL. */
static size_t munmap_len(uintptr_t a, size_t len)
{
	if ((a & (VMAP_PAGE - 1)) || len == 0)
		return 0;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!rounded || e <= a || e > TASK_TOP)
		return 0;
	return rounded;
}

int vmap_munmap(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_munmap(addr, len);
	size_t rounded = munmap_len(a, len);
	if (!rounded)
		return -EINVAL;
	uintptr_t e = a + rounded;
	if (vmap_range_is_metadata(a, e)) {
		vmap_mmap_refuse("munmap", a);
		return -EINVAL;
	}
	if (!overlaps_arena(a, e))
		return vmap_os_munmap(addr, len);
	/* A sealed page anywhere in the range: the kernel's first answer,
	 * whatever else the range holds (nothing is unmapped). */
	if (vmap_walk(a, e, vmap_find_sealed, NULL))
		return -EPERM;
	if (vmap_walk(a, e, vmap_find_malloc, NULL)) {
		vmap_mmap_refuse("munmap", a);
		return -EINVAL;
	}
	bool any = false;
	int rc = vmap_walk(a, e, vmap_unmap_piece, &any);
	if (any)
		count(VMAP_STAT_munmap_served, 1);
	return rc;
}

/* ---- mmap ------------------------------------------------------------------ */

static bool servable(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	/* The mapping type (low bits) must be exactly MAP_PRIVATE, and no flag
	 * but these may be set: anything else (MAP_FIXED*, MAP_HUGETLB,
	 * MAP_GROWSDOWN, MAP_STACK, MAP_32BIT, MAP_LOCKED, unknown bits that the
	 * kernel may reject) goes to the kernel. */
	const int allowed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_NORESERVE;
	return !addr && len && len <= SERVED_MAX && prot == (PROT_READ | PROT_WRITE) &&
	       (flags & 0x0f) == MAP_PRIVATE && (flags & MAP_ANONYMOUS) && !(flags & ~allowed) &&
	       fd == -1 && off == 0;
}

/* Carves exactly [a, e) out of free arena space (any free run state) so that
 * the kernel can map it for the program; false if any part is not free. */
int vmap_take_hole(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)arg;
	if (!r)
		return 0;
	if (p->kind == PIECE_HOLE && !p->tag) {
		/* A chunk no shard has taken: take it now (as free space of this
		 * CPU's mmap shard), then carve from it like any free run. */
		unsigned cpu;
		struct vmap_shard *here = vmap_shard_mmap_here(&cpu);
		if (!vmap_chunk_claim_at(a, here))
			return 1;
		struct piece np = vmap_piece_at(a);
		return vmap_take_hole(r, &np, a, e, arg);
	}
	if (p->kind != PIECE_HOLE)
		return 1;
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	vmap_shard_lock(s);
	struct vmap_pte *h = vmap_pte_of(r, p->head);
	if (h->tag != t) {
		vmap_shard_unlock(s);
		return 1; /* changed under us */
	}
	unsigned state = vmap_tag_run_state(t);
	bool big = t & VMAP_TAG_BIG;
	uint64_t stamp = h->stamp;
	vmap_run_take_locked(s, h, t);
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		count(VMAP_STAT_cached_bytes, -(int64_t)(p->end - p->head));
	if (a > p->head)
		vmap_run_set_locked(s, r, p->head, (a - p->head) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (p->end > e)
		vmap_run_set_locked(s, r, e, (p->end - e) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		count(VMAP_STAT_cached_bytes, (int64_t)((a - p->head) + (p->end - e)));
	__atomic_store_n(&vmap_pte_of(r, a)->tag,
			 vmap_tag_make(VMAP_ST_FOREIGN, s->id, (e - a) >> VMAP_PAGE_SHIFT, t & VMAP_TAG_BIG),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	return 0;
}

/* piece_fn: 1 at a slab of the builtin backend.  Its pages hold other
 * callers' objects and its free lists: mapping over one is refused. */
static int find_slab(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)a, (void)e, (void)arg;
	return r && p->kind == PIECE_MALLOC && vmap_slab_of(r, p->head) != NULL;
}

/*
 * piece_fn for MAP_FIXED: free space is carved out (vmap_take_hole); a live
 * malloc block is marked VMAP_TAG_OVER and left live.  The program may map
 * over its own block, as the kernel lets it (a program filling the mapping
 * limit inside one large block); the pages it maps are its own from then on,
 * never handed out or purged, and the block's free releases only the
 * bookkeeping (large.c).  1 if the block changed under us.
 */
static int take_for_fixed(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
			  void *arg)
{
	if (!r || p->kind != PIECE_MALLOC)
		return vmap_take_hole(r, p, a, e, arg);
	if (p->tag & VMAP_TAG_OVER)
		return 0;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(p->tag)];
	uint64_t t = p->tag;
	vmap_shard_lock(s);
	bool ok = __atomic_compare_exchange_n(&vmap_pte_of(r, p->head)->tag, &t, t | VMAP_TAG_OVER,
					      false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	vmap_shard_unlock(s);
	return !ok;
}

/* MAP_FIXED, MAP_FIXED_NOREPLACE or a hint aimed at the arena. */
static void *map_into_arena(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	bool fixed = flags & MAP_FIXED, noreplace = flags & MAP_FIXED_NOREPLACE;
	uintptr_t a = (uintptr_t)addr;
	if (a & (VMAP_PAGE - 1)) {
		if (fixed || noreplace)
			return (void *)(intptr_t)-EINVAL;
		a &= ~(uintptr_t)(VMAP_PAGE - 1); /* the kernel rounds a hint down */
		addr = (void *)a;
	}
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!rounded || e <= a || e > TASK_TOP)
		return vmap_os_mmap(addr, len, prot, flags, fd, off); /* the kernel's error */
	if (!fixed && !noreplace) {
		/* A hint: honoured when the range is free, else the kernel picks. */
		if (vmap_walk(a, e, vmap_find_mapped, NULL) ||
		    vmap_walk(a, e, vmap_find_malloc, NULL) || vmap_range_is_metadata(a, e) ||
		    !vmap_release_cached(a, e))
			return vmap_os_mmap(NULL, len, prot, flags, fd, off);
		flags |= MAP_FIXED;
	} else if (noreplace && (vmap_range_is_metadata(a, e) || vmap_walk(a, e, vmap_find_mapped, NULL) ||
				 vmap_walk(a, e, vmap_find_malloc, NULL))) {
		return (void *)(intptr_t)-EEXIST; /* mapped memory there: the kernel's answer */
	} else if (vmap_range_is_metadata(a, e) || vmap_walk(a, e, find_slab, NULL) ||
		   !vmap_release_cached(a, e)) {
		vmap_mmap_refuse(noreplace ? "mmap(MAP_FIXED_NOREPLACE)" : "mmap(MAP_FIXED)", a);
		return (void *)(intptr_t)-EINVAL;
	} else if (noreplace) {
		flags = (flags & ~MAP_FIXED_NOREPLACE) | MAP_FIXED;
	} else {
		/* MAP_FIXED replaces whatever the program had there. */
		if (vmap_walk(a, e, vmap_find_sealed, NULL))
			return (void *)(intptr_t)-EPERM;
		bool any = false;
		int rc = vmap_walk(a, e, vmap_unmap_piece, &any);
		if (rc)
			return (void *)(intptr_t)rc;
	}
	/* Every page is now free arena space or a malloc block: take it out
	 * (mark the block mapped over), then let the kernel map. */
	if (vmap_walk(a, e, take_for_fixed, NULL))
		return vmap_os_mmap(fixed || noreplace ? addr : NULL, len, prot,
				    fixed || noreplace ? flags : flags & ~MAP_FIXED, fd, off);
	void *m = vmap_os_mmap(addr, len, prot, flags, fd, off);
	if (vmap_os_is_err(m)) {
		bool any = false;
		vmap_walk(a, e, vmap_unmap_piece, &any); /* give the pages back */
	}
	return m;
}

/* A new served mapping of len bytes, zero-filled; NULL when the arena is full. */
void *vmap_serve(size_t len, int flags)
{
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uint64_t pages = rounded >> VMAP_PAGE_SHIFT;
	/* Served mappings stay out of the THP chunks: the kernel gives an
	 * anonymous mapping no huge pages in THP "madvise" mode either, and
	 * 2 MiB alignment defeats reuse of lazily unmapped runs (mmap cycles
	 * would fault fresh memory instead). */
	bool zero;
	unsigned cpu;
	struct vmap_shard *s = vmap_shard_mmap_here(&cpu);
	vmap_shard_lock(s);
	void *p = vmap_alloc_carve(s, cpu, pages, false, VMAP_PAGE, &zero, VMAP_TAG_MMAP,
				   VMAP_CARVE_BLOCK);
	if (!p)
		return NULL;
	vmap_clear_hidden(vmap_region_of((uintptr_t)p), (uintptr_t)p);
	if (!zero)
		memset(p, 0, rounded);
	else if ((flags & MAP_POPULATE) &&
		 vmap_os_madvise(p, rounded, 23 /* MADV_POPULATE_WRITE, Linux >= 5.14 */))
		for (size_t off = 0; off < rounded; off += VMAP_PAGE)
			((volatile char *)p)[off] = 0; /* older kernels: a write fault per page */
	count(VMAP_STAT_mmap_served, 1);
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)rounded);
	return p;
}

void *vmap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (!vmap_opt.mmap || !(vmap_range_enabled() || (servable(addr, len, prot, flags, fd, off) &&
							  vmap_range_ready()))) {
		count(VMAP_STAT_mmap_passed, 1);
		return vmap_os_mmap(addr, len, prot, flags, fd, off);
	}
	if (servable(addr, len, prot, flags, fd, off) && len <= vmap_area_max) {
		void *p = vmap_serve(len, flags);
		if (p) {
			if (__builtin_expect(vmap_profile_on, 0))
				vmap_observe.record(p, (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1),
						    VMAP_PROFILE_MMAP,
						    (uintptr_t)__builtin_return_address(0),
						    (uintptr_t)__builtin_dwarf_cfa());
			return p;
		}
		/* Arena exhausted: the kernel may still have room. */
	}
	count(VMAP_STAT_mmap_passed, 1);
	uintptr_t a = (uintptr_t)addr;
	if (addr && overlaps_arena(a, a + len) && len)
		return map_into_arena(addr, len, prot, flags, fd, off);
	void *m = vmap_os_mmap(addr, len, prot, flags, fd, off);
	/* Under a tight RLIMIT_AS the arena lends the kernel free chunks (tight.c). */
	if (m == (void *)(intptr_t)-ENOMEM && vmap_range_lend(len))
		m = vmap_os_mmap(addr, len, prot, flags, fd, off);
	return m;
}

/* ---- mprotect, madvise, mincore, mlock ------------------------------------- */

/*
 * mprotect, madvise, mincore, mlock and munlock over a range that touches the
 * arena: the kernel sees one big read-write mapping there, so vmapalloc walks
 * the range itself and gives each piece the program has mapped to the kernel,
 * in order, as the kernel would walk its VMAs.  At a hole (pages the program
 * unmapped, or never got) mprotect, mlock, munlock and mincore stop with
 * ENOMEM, having changed what came before; madvise carries on and returns
 * ENOMEM at the end.  A live block whose protection, advice or locking the
 * program changed is flagged, to be reset before reuse.
 */

/* The system call of ap->op over [a, a + len), one piece of the walk. */
int vmap_kernel_op(struct apply *ap, uintptr_t a, size_t len)
{
	switch (ap->op) {
	case OP_MPROTECT: return vmap_os_mprotect((void *)a, len, (int)ap->arg);
	case OP_MADVISE: return vmap_os_madvise((void *)a, len, (int)ap->arg);
	case OP_MINCORE:
		return vmap_os_mincore((void *)a, len, ap->vec + ((a - ap->start) >> VMAP_PAGE_SHIFT));
	case OP_MLOCK: return vmap_os_mlock((void *)a, len, 0);
	case OP_MUNLOCK: return vmap_os_munlock((void *)a, len);
	case OP_MLOCK2:
		return vmap_os_mlock((void *)a, len, (unsigned)ap->arg);
	case OP_MSEAL: return 0; /* done by vmap_mseal, for the whole range */
	}
	return -EINVAL;
}


static int apply_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	struct apply *ap = arg;
	if (r && p->kind == PIECE_HOLE) {
		ap->hole = true;
		return ap->op == OP_MADVISE ? 0 : 1;
	}
	if (r && ap->attr && vmap_tag_state(p->tag) == VMAP_ST_LIVE && !(p->tag & VMAP_TAG_ATTR))
		__atomic_fetch_or(&vmap_pte_of(r, p->head)->tag, VMAP_TAG_ATTR, __ATOMIC_RELAXED);
	int rc = vmap_kernel_op(ap, a, e - a);
	if (rc) {
		ap->rc = rc;
		return ap->op == OP_MADVISE && rc == -ENOMEM ? 0 : 1;
	}
	if (r && p->kind == PIECE_MAPPED && (ap->attr || ap->op == OP_MUNLOCK) &&
	    ap->op != OP_MINCORE)
		vmap_record_attrs(r, p, a, e, ap);
	return 0;
}

static int range_op(enum range_op op, void *addr, size_t len, long arg, unsigned char *vec,
		    bool attr)
{
	uintptr_t a = (uintptr_t)addr;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	struct apply ap = {op, arg, vec, a, attr, false, 0};
	if (!vmap_opt.mmap || (a & (VMAP_PAGE - 1)) || !rounded || e <= a || e > TASK_TOP ||
	    !overlaps_arena(a, e))
		return vmap_kernel_op(&ap, a, len);
	vmap_walk(a, e, apply_piece, &ap);
	if (ap.rc)
		return ap.rc;
	/* The kernel refuses an advice it does not know before looking at the
	 * range; with no mapped piece to try it on, ask it with an empty range. */
	if (ap.hole && op == OP_MADVISE && vmap_os_madvise(NULL, 0, arg) == -EINVAL)
		return -EINVAL;
	return ap.hole ? -ENOMEM : 0;
}

static bool advice_changes_vma(int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_FREE:
	case MADV_WILLNEED:
	case 20: /* MADV_COLD */
	case 21: /* MADV_PAGEOUT */
	case 22: /* MADV_POPULATE_READ */
	case 23: /* MADV_POPULATE_WRITE */
		return false;
	default:
		return true;
	}
}

int vmap_mprotect(void *addr, size_t len, int prot)
{
	return range_op(OP_MPROTECT, addr, len, prot, NULL, true);
}

int vmap_madvise(void *addr, size_t len, int advice)
{
	return range_op(OP_MADVISE, addr, len, advice, NULL, advice_changes_vma(advice));
}

int vmap_mincore(void *addr, size_t len, unsigned char *vec)
{
	return range_op(OP_MINCORE, addr, len, 0, vec, false);
}

int vmap_mlock(const void *addr, size_t len, unsigned flags, bool two)
{
	/* mlock works on the pages containing [addr, addr+len): align down. */
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(VMAP_PAGE - 1);
	len += (uintptr_t)addr - a;
	return range_op(two ? OP_MLOCK2 : OP_MLOCK, (void *)a, len, flags, NULL, true);
}

int vmap_munlock(const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(VMAP_PAGE - 1);
	len += (uintptr_t)addr - a;
	return range_op(OP_MUNLOCK, (void *)a, len, 0, NULL, false);
}


/* ---- mseal -------------------------------------------------------------------- */

/*
 * mseal(2) (Linux 6.10; glibc 2.43 has the wrapper, older programs call
 * syscall(SYS_mseal), both exported by preload/mmap.c).  The kernel seals
 * VMAs; over the arena it would seal vmapalloc's pages, and vmapalloc's
 * emulated munmap would then "succeed" (returning 0 where the kernel says
 * EPERM) and its space be reused.  So: the kernel's argument checks; every
 * arena page of the range must be the program's (a served or foreign
 * mapping: a hole or a freed block vmapalloc holds is unmapped memory,
 * ENOMEM; a live malloc block is refused with EINVAL and one line); then the
 * kernel seals the range (it checks the pages outside the arena itself) and
 * the served pages are marked sealed (VA_SEALED, split like any attribute):
 * munmap, MAP_FIXED and mremap aimed at them fail with EPERM (vmap_find_sealed,
 * vmap_mremap), and as they are never unmapped their space is never reused.
 * mprotect and madvise meet the kernel's own seal.  Foreign pieces are the
 * kernel's (its munmap refuses them).  A kernel without mseal: ENOSYS.
 */
static int seal_check(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)e;
	(void)arg;
	if (!r || p->kind == PIECE_MAPPED || p->kind == PIECE_FOREIGN)
		return 0;
	if (p->kind == PIECE_MALLOC) {
		vmap_mmap_refuse("mseal", a);
		return -EINVAL;
	}
	return -ENOMEM;
}

static int seal_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	struct apply *ap = arg;
	if (r && p->kind == PIECE_MAPPED) {
		if (!(p->tag & VMAP_TAG_ATTR))
			__atomic_fetch_or(&vmap_pte_of(r, p->head)->tag, VMAP_TAG_ATTR, __ATOMIC_RELAXED);
		vmap_record_attrs(r, p, a, e, ap);
	}
	return 0;
}

int vmap_mseal(void *addr, size_t len, unsigned long flags)
{
	uintptr_t a = (uintptr_t)addr;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!vmap_opt.mmap || !vmap_range_enabled() || flags || (a & (VMAP_PAGE - 1)) || !rounded ||
	    e < a || !overlaps_arena(a, e))
		return vmap_os_mseal(addr, len, flags);
	/* Does this kernel have it?  (mseal(0, 0, 0) is a no-op that succeeds.) */
	int have = vmap_os_mseal(NULL, 0, 0);
	if (have)
		return have;
	int rc = vmap_walk(a, e, seal_check, NULL);
	if (rc)
		return rc;
	rc = vmap_os_mseal(addr, len, 0);
	if (rc)
		return rc;
	struct apply ap = {OP_MSEAL, 0, NULL, a, true, false, 0};
	vmap_walk(a, e, seal_piece, &ap);
	return 0;
}

/* ---- re-entered ----------------------------------------------------------- */

void *vmap_mmap_reentered(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uintptr_t a = (uintptr_t)addr;
	/* Without MAP_FIXED the kernel never places a mapping over the arena's
	 * reservation: a hint there is simply not honoured. */
	if ((flags & MAP_FIXED) && vmap_range_enabled() && len && overlaps_arena(a, a + len))
		return (void *)(intptr_t)-ENOMEM;
	count(VMAP_STAT_mmap_passed, 1);
	return vmap_os_mmap(addr, len, prot, flags, fd, off);
}

int vmap_munmap_reentered(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_munmap(addr, len);
	size_t rounded = munmap_len(a, len);
	if (!rounded)
		return -EINVAL;
	if (!overlaps_arena(a, a + rounded))
		return vmap_os_munmap(addr, len);
	/* Checked again (and refused there, with its line) when it is done. */
	return vmap_defer(addr, rounded) ? 0 : -ENOMEM;
}

void *vmap_mremap_reentered(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	uintptr_t a = (uintptr_t)old, d = (uintptr_t)new_addr;
	if (vmap_opt.mmap && vmap_range_enabled() &&
	    (overlaps_arena(a, a + (old_len ? old_len : 1)) ||
	     ((flags & MREMAP_FIXED) && overlaps_arena(d, d + new_len))))
		return (void *)(intptr_t)-ENOMEM;
	return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
}
