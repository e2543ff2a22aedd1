/*
 * mremap.c — the program's mremap of arena memory, with the kernel's
 * answers: a served mapping is shrunk, grown in place into the free space
 * after it, or moved into a new served mapping — also with MREMAP_FIXED to
 * free arena space (carve_at) — and keeps the attributes of the VMAs the
 * program gave it (mmap_vma.c); across one of their boundaries it is
 * refused with EFAULT as the kernel refuses it.  Foreign ranges, and ranges
 * outside the arena, are the kernel's (a destination in the arena is carved
 * out for it first).  vmap_mremap is the sequence of the steps below.
 */
#include "mmap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "counter.h"
#include "mmap_impl.h"
#include "options.h"
#include "observe.h"
#include "range.h"

/* ---- growing in place, and the destination of a move ------------------------- */

/* Free pages [a, a + bytes) of a run in `state`, just taken for the program:
 * zero-filled and accessible.  0, or -errno: some may still fault (at
 * vm.max_map_count the VMA cannot be split); no longer counted as cached. */
static int make_usable(uintptr_t a, size_t bytes, unsigned state)
{
	uint64_t pages = bytes >> VMAP_PAGE_SHIFT;
	if (state == VMAP_RUN_DIRTY) {
		count(VMAP_STAT_cached_bytes, -(int64_t)bytes);
		memset((void *)a, 0, bytes);
	} else if (state == VMAP_RUN_ADVISED) {
		memset((void *)a, 0, bytes);
	} else if (state == VMAP_RUN_GUARDED) {
		return vmap_unguard(a, pages);
	} else if (state == VMAP_RUN_PROTECTED) {
		count(VMAP_STAT_cached_bytes, -(int64_t)bytes);
		int rc = vmap_unprotect(a, pages);
		if (rc)
			return rc;
		memset((void *)a, 0, bytes);
	}
	return 0;
}

/* Grows the served mapping that ends at `end` by `extra` pages into free
 * space right after it; true on success.  The new pages read zero. */
static bool grow_in_place(struct vmap_region *r, struct piece *p, uint64_t extra)
{
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	uintptr_t end = p->end;
	if (end + (extra << VMAP_PAGE_SHIFT) > r->base + r->size)
		return false;
	vmap_shard_lock(s);
	struct vmap_pte *re = vmap_pte_of(r, end);
	uint64_t rt = re->tag, rp = vmap_tag_pages(rt);
	if (vmap_pte_of(r, p->head)->tag != t || vmap_tag_state(rt) != VMAP_ST_FREE ||
	    vmap_tag_shard(rt) != s->id || rp < extra) {
		vmap_shard_unlock(s);
		return false;
	}
	unsigned state = vmap_tag_run_state(rt);
	uint64_t stamp = re->stamp;
	vmap_run_take_locked(s, re, rt);
	if (rp > extra)
		vmap_run_set_locked(s, r, end + (extra << VMAP_PAGE_SHIFT), rp - extra, state,
				    rt & VMAP_TAG_BIG, stamp);
	uint64_t pages = vmap_tag_pages(t) + extra;
	/* The kernel grows the last VMA: the new pages take its attributes. */
	unsigned last = vmap_attrs_at(r, p->head, t, end - VMAP_PAGE);
	if (t & VMAP_TAG_SEGS)
		vmap_set_attrs(r, end, end + (extra << VMAP_PAGE_SHIFT), last);
	__atomic_store_n(&vmap_pte_of(r, p->head)->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, pages,
				       t & (VMAP_TAG_BIG | VMAP_TAG_MMAP | VMAP_TAG_ATTR |
					    VMAP_TAG_MOVED | VMAP_TAG_VMA | VMAP_TAG_SEGS)),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	size_t bytes = (size_t)extra << VMAP_PAGE_SHIFT;
	if (make_usable(end, bytes, state)) {
		/* Pages that still fault cannot join the mapping: it keeps its
		 * size, and they stay out of circulation (as in carve_finish). */
		vmap_shard_lock(s);
		__atomic_store_n(&vmap_pte_of(r, p->head)->tag, t, __ATOMIC_RELEASE);
		__atomic_store_n(&re->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, extra, rt & VMAP_TAG_BIG),
				 __ATOMIC_RELEASE);
		vmap_shard_unlock(s);
		return false;
	}
	vmap_realize_attrs(end, bytes, last);
	vmap_populated(r, p->head, end + bytes - VMAP_PAGE);
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)bytes);
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_observe.mmap_grow(p->head, bytes);
	return true;
}

/*
 * MREMAP_FIXED to a destination in the arena: like MAP_FIXED there — the
 * program's own mappings in the way are unmapped, the pages are carved out of
 * free space and handed to the kernel, which moves the old pages in.  A
 * destination over a live malloc block or metadata is refused.
 */
static int clear_destination(uintptr_t d, size_t nl)
{
	uintptr_t de = d + nl;
	if (!overlaps_arena(d, de))
		return 0;
	if (vmap_walk(d, de, vmap_find_malloc, NULL) || vmap_range_is_metadata(d, de) ||
	    !vmap_release_cached(d, de)) {
		vmap_mmap_refuse("mremap(MREMAP_FIXED)", d);
		return -EINVAL;
	}
	if (vmap_walk(d, de, vmap_find_sealed, NULL))
		return -EPERM;
	bool any = false;
	return vmap_walk(d, de, vmap_unmap_piece, &any);
}

static int claim_destination(uintptr_t d, size_t nl)
{
	int rc = clear_destination(d, nl);
	if (rc || !overlaps_arena(d, d + nl))
		return rc;
	return vmap_walk(d, d + nl, vmap_take_hole, NULL) ? -ENOMEM : 0;
}

/*
 * MREMAP_FIXED of a served mapping into free arena space: the destination
 * becomes a served mapping itself, exactly [d, d + len), when it is free runs
 * of one shard (small chunks, at most CARVE_RUNS runs).  The kernel moves the
 * pages in, and what the program does with them next (resize, move back) is
 * ours to do, as for any served mapping.  Handed to the kernel instead (a
 * foreign range) they would keep the arena's VMAs: vmapalloc's own page moves
 * split a served mapping into several, which Linux 6.17+ moves only at the
 * same size and then refuses to resize (EFAULT) — the program sees one.
 * False (nothing changed) when it cannot: the caller hands the range over.
 */
#define CARVE_RUNS 8

static bool carve_at(uintptr_t d, size_t len)
{
	struct vmap_region *r = vmap_region_of(d);
	uintptr_t e = d + len;
	if (!r || e > r->base + r->size)
		return false;
	struct piece p = vmap_piece_at(d);
	if (p.kind != PIECE_HOLE || !p.tag)
		return false;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(p.tag)];
	struct {
		uintptr_t head, end;
		uint64_t tag, stamp;
	} run[CARVE_RUNS];
	unsigned n = 0;
	vmap_shard_lock(s);
	for (uintptr_t x = d; x < e; x = p.end) {
		p = vmap_piece_at(x);
		if (n == CARVE_RUNS || vmap_tag_state(p.tag) != VMAP_ST_FREE ||
		    vmap_tag_shard(p.tag) != s->id || (p.tag & VMAP_TAG_BIG)) {
			vmap_shard_unlock(s);
			return false;
		}
		run[n].head = p.head;
		run[n].end = p.end;
		run[n].tag = p.tag;
		run[n].stamp = vmap_pte_of(r, p.head)->stamp;
		n++;
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned state = vmap_tag_run_state(run[i].tag);
		vmap_run_take_locked(s, vmap_pte_of(r, run[i].head), run[i].tag);
		if (run[i].head < d)
			vmap_run_set_locked(s, r, run[i].head, (d - run[i].head) >> VMAP_PAGE_SHIFT,
					    state, false, run[i].stamp);
		if (run[i].end > e)
			vmap_run_set_locked(s, r, e, (run[i].end - e) >> VMAP_PAGE_SHIFT, state, false,
					    run[i].stamp);
	}
	vmap_clear_hidden(r, d);
	__atomic_store_n(&vmap_pte_of(r, d)->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, len >> VMAP_PAGE_SHIFT, VMAP_TAG_MMAP),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	/* (Failing leaves pages that fault: the kernel's MREMAP_FIXED replaces
	 * the whole destination anyway.) */
	for (unsigned i = 0; i < n; i++) {
		uintptr_t x = run[i].head > d ? run[i].head : d, y = run[i].end < e ? run[i].end : e;
		(void)make_usable(x, y - x, vmap_tag_run_state(run[i].tag));
	}
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)len);
	return true;
}

/* MREMAP_FIXED done by the kernel: a destination in the arena is carved out
 * for it first and given back if it fails; a served mapping it moved out of
 * is cut. */
static void *remap_fixed(struct vmap_region *r, struct piece *p, void *old, size_t old_len,
			 size_t new_len, int flags, void *new_addr, size_t ol, size_t nl)
{
	uintptr_t a = (uintptr_t)old, d = (uintptr_t)new_addr;
	int rc = claim_destination(d, nl);
	if (rc)
		return (void *)(intptr_t)rc;
	void *m = vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	if (vmap_os_is_err(m)) {
		bool any = false;
		if (overlaps_arena(d, d + nl)) /* give the destination back */
			vmap_walk(d, d + nl, vmap_unmap_piece, &any);
		return m;
	}
	if (r && !(flags & MREMAP_DONTUNMAP) && p->kind == PIECE_MAPPED) {
		/* The pages left this place: fill the hole, then it is unmapped. */
		vmap_os_map_fresh(old, ol);
		struct piece cur = vmap_piece_at(a);
		vmap_cut_mapped(r, &cur, a, a + ol);
	}
	return m;
}

/* Does the kernel know MREMAP_DONTUNMAP (Linux >= 5.7)?  It checks the flags
 * before it looks up the range: for a page that cannot be mapped it says
 * EFAULT where it knows the flag, EINVAL where it does not.  On x86_64 the
 * page just below 2^47 is past TASK_SIZE (never mapped, 4-level or not
 * opted into 5-level addresses); elsewhere the flag is taken as known.
 * Asked once, on the program's first DONTUNMAP of served memory. */
static bool kernel_has_dontunmap(void)
{
#if defined(__x86_64__)
	static int known; /* 0 not asked, 1 yes, -1 no */
	int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
	if (!k) {
		void *m = vmap_os_mremap((void *)0x7ffffffff000UL, VMAP_PAGE, VMAP_PAGE,
					 MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
		k = vmap_os_is_err(m) && vmap_os_err(m) == EINVAL ? -1 : 1;
		__atomic_store_n(&known, k, __ATOMIC_RELAXED);
	}
	return k > 0;
#else
	return true;
#endif
}

/* The program moved pages [x, e) of the served mapping at head out with
 * MREMAP_DONTUNMAP, which clears VM_LOCKED of the whole VMA they were in
 * (dontunmap_complete), pages not moved included, and merges it with
 * nothing: the VMA stays one of its own (its labels say so). */
static void unlock_vmas(struct vmap_region *r, uintptr_t head, uintptr_t x, uintptr_t e)
{
	struct piece p = vmap_piece_at(head);
	uint64_t t = p.tag;
	unsigned vx = VA_KEY(vmap_attrs_at(r, head, t, x));
	unsigned ve = VA_KEY(vmap_attrs_at(r, head, t, e - VMAP_PAGE));
	while (x > head && VA_KEY(vmap_attrs_at(r, head, t, x - VMAP_PAGE)) == vx)
		x -= VMAP_PAGE;
	while (e < p.end && VA_KEY(vmap_attrs_at(r, head, t, e)) == ve)
		e += VMAP_PAGE;
	struct apply ap = {OP_MUNLOCK, 0, NULL, x, false, false, 0};
	if (vmap_kernel_op(&ap, x, e - x) != 0)
		return;
	struct vmap_pte *h = vmap_pte_of(r, head);
	if (!(t & VMAP_TAG_SEGS)) {
		/* One VMA, the whole mapping: nothing to keep apart. */
		vmap_record_attrs(r, &p, x, e, &ap);
		return;
	}
	if ((__atomic_load_n(&h->tag, __ATOMIC_ACQUIRE) ^ t) & ~(VMAP_TAG_VMA | VMAP_TAG_ATTR))
		return; /* (a race of the program's) */
	vmap_relabel(r, head, p.end, t, x, e, OP_MUNLOCK, 0, true);
}

/* ---- mremap, step by step ------------------------------------------------- */

/*
 * One mremap call of arena memory, from its checks to its end:
 *
 *   check_args -> check_source -> resize -> destination -> move_pages -> finish
 *
 *   check_args    the kernel's argument checks (EINVAL)
 *   check_source  whose the old range is: the kernel's, a foreign range's, an
 *                 error (EINVAL, EFAULT, EPERM), or one VMA of a served mapping
 *   resize        in place: the same size, a shrink, a grow
 *   destination   where a move goes: carved there, a new served mapping, or
 *                 the kernel's
 *   move_pages    the kernel moves the pages (profile_moved just before), or
 *                 they are copied
 *   finish        the attributes of the new place; the old range cut
 *
 * Each step but the last may answer the call itself (true, *res), which ends
 * it; the order of the steps is the order of the kernel's checks.
 */
struct remap {
	void *old, *new_addr;  /* the call's arguments */
	size_t old_len, new_len;
	int flags;
	uintptr_t a, d;        /* old and new_addr as addresses */
	size_t ol, nl;         /* old_len and new_len, page-rounded */
	struct vmap_region *r; /* the region of old */
	struct piece p;        /* the served mapping old is in */
	void *q;               /* the destination */
	bool from_kernel;      /* q is a fresh mapping of the kernel's */
	size_t moved;          /* bytes of old that go to q */
	uint64_t st;           /* the mapping's head tag when the move began */
	bool locked;           /* some of them were mlocked */
	bool copied;           /* q holds copies: the pages did not move */
};

/* The kernel's argument checks, in its order: 0 or -EINVAL.  Sets ol, nl. */
static int check_args(struct remap *m)
{
	int flags = m->flags;
	uintptr_t a = m->a, d = m->d;
	if (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP))
		return -EINVAL;
	if ((flags & MREMAP_FIXED) && !(flags & MREMAP_MAYMOVE))
		return -EINVAL;
	if ((flags & MREMAP_DONTUNMAP) && (!(flags & MREMAP_MAYMOVE) || m->old_len != m->new_len))
		return -EINVAL;
	if ((flags & MREMAP_DONTUNMAP) && !kernel_has_dontunmap())
		return -EINVAL; /* as the kernel says: it knows no such flag */
	if (a & (VMAP_PAGE - 1))
		return -EINVAL;
	size_t ol = (m->old_len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t nl = (m->new_len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	m->ol = ol;
	m->nl = nl;
	if (!nl || nl < m->new_len || nl > TASK_TOP)
		return -EINVAL;
	/* new_address: the destination with MREMAP_FIXED, a hint with
	 * MREMAP_DONTUNMAP alone, which the kernel checks the same way
	 * (check_mremap_params: whatever the program passed, NULL included). */
	if (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {
		if ((d & (VMAP_PAGE - 1)) || d + nl > TASK_TOP || d + nl < d)
			return -EINVAL;
		if (d < a + ol && a < d + nl)
			return -EINVAL; /* old and new overlap */
	}
	return 0;
}

/* A step's answer to the call: *res, and true (the call ends there). */
static bool answer(void **res, void *v)
{
	*res = v;
	return true;
}

/* Whose the old range is: the kernel's or a foreign range's (passed on, the
 * destination carved if it is in the arena), an error (EINVAL, EFAULT,
 * EPERM), or one VMA of a served mapping: false, to resize or move. */
static bool check_source(struct remap *m, void **res)
{
	uintptr_t a = m->a;
	size_t ol = m->ol, nl = m->nl;
	int flags = m->flags;
	struct vmap_region *r = overlaps_arena(a, a + 1) ? vmap_region_of(a) : NULL;
	m->r = r;
	if (!r) {
		/* Not ours; the destination may be. */
		if ((flags & MREMAP_FIXED) && overlaps_arena(m->d, m->d + nl))
			return answer(res, remap_fixed(NULL, NULL, m->old, m->old_len, m->new_len,
						       flags, m->new_addr, ol, nl));
		return answer(res, vmap_os_mremap(m->old, m->old_len, m->new_len, flags,
						  m->new_addr));
	}
	struct piece *p = &m->p;
	*p = vmap_piece_at(a);
	if (p->kind == PIECE_MALLOC) {
		vmap_mmap_refuse("mremap", a);
		return answer(res, (void *)(intptr_t)-EINVAL);
	}
	if (p->kind == PIECE_HOLE || p->kind == PIECE_CACHED)
		return answer(res, (void *)(intptr_t)-EFAULT);
	if (!ol) /* old_len 0 duplicates shared mappings only */
		return answer(res, (void *)(intptr_t)-EINVAL);
	if (a + ol > p->end) /* the old range spans more than one mapping */
		return answer(res, (void *)(intptr_t)-EFAULT);
	if (p->kind == PIECE_MAPPED && vmap_sealed_in(r, p->head, p->tag, a, ol))
		return answer(res, (void *)(intptr_t)-EPERM); /* neither resized nor moved */
	if (p->kind == PIECE_FOREIGN) {
		if (flags & MREMAP_FIXED)
			return answer(res, remap_fixed(r, p, m->old, m->old_len, m->new_len, flags,
						       m->new_addr, ol, nl));
		return answer(res, vmap_os_mremap(m->old, m->old_len, m->new_len, flags,
						  m->new_addr));
	}
	/* The program's own VMA boundaries in the mapping (its mprotect, madvise
	 * and mlock calls split it): the kernel resizes or moves one VMA only,
	 * but since Linux 6.17 moves several with MREMAP_FIXED at the same size
	 * (after a shrink, what is left must be one). */
	size_t one = nl > ol ? ol
		     : (flags & MREMAP_FIXED) ? (nl < ol ? nl : 0)
		     : (flags & MREMAP_DONTUNMAP) ? ol : 0;
	if (one && vmap_spans_vmas(r, p->head, p->tag, a, one))
		return answer(res, (void *)(intptr_t)-EFAULT);
	return false;
}

/* Without MREMAP_FIXED or MREMAP_DONTUNMAP, in place: the same size, a
 * shrink, or a grow into free space right after the mapping; ENOMEM when it
 * cannot grow there and may not move.  False: it is to move. */
static bool resize(struct remap *m, void **res)
{
	uintptr_t a = m->a;
	size_t ol = m->ol, nl = m->nl;
	if ((m->flags & MREMAP_FIXED) || (m->flags & MREMAP_DONTUNMAP))
		return false;
	if (nl == ol)
		return answer(res, m->old);
	if (nl < ol) {
		int rc = vmap_cut_mapped(m->r, &m->p, a + nl, a + ol);
		return answer(res, rc ? (void *)(intptr_t)rc : m->old);
	}
	if (a + ol == m->p.end && grow_in_place(m->r, &m->p, (nl - ol) >> VMAP_PAGE_SHIFT))
		return answer(res, m->old);
	if (!(m->flags & MREMAP_MAYMOVE))
		return answer(res, (void *)(intptr_t)-ENOMEM);
	return false;
}

/* The destination of a move (q): the program's address (a served mapping
 * carved there when it is free arena space, else handed to the kernel, which
 * then answers the call), or a new served mapping (else a fresh one of the
 * kernel's).  True when that answered the call. */
static bool destination(struct remap *m, void **res)
{
	size_t nl = m->nl;
	m->from_kernel = false;
	if (m->flags & MREMAP_FIXED) {
		if (!overlaps_arena(m->d, m->d + nl))
			return answer(res, remap_fixed(m->r, &m->p, m->old, m->old_len, m->new_len,
						       m->flags, m->new_addr, m->ol, nl));
		int rc = clear_destination(m->d, nl);
		if (rc)
			return answer(res, (void *)(intptr_t)rc);
		if (!carve_at(m->d, nl))
			return answer(res, remap_fixed(m->r, &m->p, m->old, m->old_len, m->new_len,
						       m->flags, m->new_addr, m->ol, nl));
		m->q = m->new_addr;
		/* The destination may have cut the mapping's head off. */
		m->p = vmap_piece_at(m->a);
		return false;
	}
	m->q = vmap_serve(nl, 0);
	if (!m->q) {
		count(VMAP_STAT_mmap_passed, 1);
		m->q = vmap_os_mmap(NULL, nl, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				    -1, 0);
		m->from_kernel = true;
	}
	if (vmap_os_is_err(m->q))
		return answer(res, m->q);
	return false;
}

/* The new mapping is the old one moved: the profile keeps its site rather
 * than record the mremap as a new allocation.  Told before the pages move,
 * while the old mapping's head still holds the site (finish cuts it). */
static void profile_moved(struct remap *m)
{
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_observe.mmap_moved(m->p.head, (uintptr_t)m->q, m->nl,
					(m->flags & MREMAP_DONTUNMAP) ? m->nl
					: m->nl > m->ol ? m->nl - m->ol : 0);
}

/* Moves the pages of old that fit into q with the kernel's mremap, or copies
 * them where a move would leave VMAs the program would not have (copied).
 * True (ENOMEM) when a failed move could not be undone. */
static bool move_pages(struct remap *m, void **res)
{
	void *old = m->old, *q = m->q;
	size_t moved = m->ol < m->nl ? m->ol : m->nl;
	uint64_t st = __atomic_load_n(&vmap_pte_of(m->r, m->p.head)->tag, __ATOMIC_ACQUIRE);
	m->moved = moved;
	m->st = st;
	/* MREMAP_DONTUNMAP keeps the old range mapped until it is cut (no hole
	 * in the arena for another thread's mmap to land in).  But it unlocks
	 * the whole kernel VMA the pages leave, pages not moved included (Linux
	 * 6.18), and the arena's VMAs are not the program's: locked pages are
	 * moved the plain way, and the hole they leave is filled at once. */
	int how = MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP;
	bool locked = vmap_locked_in(m->r, m->p.head, st, m->a, moved);
	m->locked = locked;
	if (locked || !kernel_has_dontunmap())
		how &= ~MREMAP_DONTUNMAP;
	m->copied = true;
	if ((m->from_kernel && m->nl > moved) || (!locked && !vmap_moves_allowed())) {
		/* The arena could not serve (full, or a chunk it could not
		 * commit): pages moved into the head of the kernel's mapping
		 * would stay a VMA of their own (their old page offset), and a
		 * later mremap of the whole would fail with EFAULT where the
		 * kernel's own grow leaves one VMA.  Copied instead (rare).
		 * Copied too past the budget of VMAs moves may leave (move.c). */
		if (st & VMAP_TAG_ATTR)
			vmap_os_mprotect(old, moved, PROT_READ | PROT_WRITE);
		memcpy(q, old, moved);
		return false; /* not moved: the pages are copies */
	}
	void *got = vmap_os_mremap(old, moved, moved, how, q);
	if (!vmap_os_is_err(got) && !(how & MREMAP_DONTUNMAP))
		vmap_os_map_fresh(old, moved);
	if (!vmap_os_is_err(got) && !m->from_kernel) {
		/* q is a moved area (move.c); the old range, if it was one, is
		 * cut (and mapped afresh) by finish(). */
		__atomic_or_fetch(&vmap_pte_of(vmap_region_of((uintptr_t)q), (uintptr_t)q)->tag,
				  VMAP_TAG_MOVED, __ATOMIC_RELEASE);
		vmap_moves_count(1);
	}
	if (!vmap_os_is_err(got)) {
		m->copied = false;
		return false;
	}
	/* Nothing moved (kernels without MREMAP_DONTUNMAP; before 6.17 a range
	 * of several VMAs), or, near the VMA limit, some pieces did (6.17+ moves
	 * VMA by VMA): every byte goes back to the old range (q, served or
	 * carved, read zero), holes in q are mapped again, then the bytes are
	 * copied.  The program may have made the old pages unreadable: they are
	 * reset after. */
	if (st & VMAP_TAG_ATTR)
		vmap_os_mprotect(old, moved, PROT_READ | PROT_WRITE);
	if (vmap_move_undo(old, q, moved) != 0) {
		/* (-1, a hole left in the old range by a plain move that cannot
		 * be mapped again, loses the pieces moved: only for locked pages
		 * at the VMA limit.) */
		bool any = false;
		/* give q back */
		vmap_walk((uintptr_t)q, (uintptr_t)q + m->nl, vmap_unmap_piece, &any);
		return answer(res, (void *)(intptr_t)-ENOMEM);
	}
	memcpy(q, old, moved);
	return false;
}

/* After the move: q's attributes, and the old range cut (or, with the
 * program's MREMAP_DONTUNMAP, kept as the kernel keeps it).  Returns q. */
static void *finish(struct remap *m)
{
	struct vmap_region *r = m->r;
	uintptr_t a = m->a, head = m->p.head;
	/* The moved pages carry their VMAs' attributes; copied or added pages
	 * are given them. */
	vmap_inherit_attrs(r, m->st, head, a, m->moved, (uintptr_t)m->q, m->nl,
			   m->copied ? 0 : m->moved);
	struct vmap_region *rq = m->from_kernel ? NULL : vmap_region_of((uintptr_t)m->q);
	if (rq && m->nl > m->moved)
		vmap_populated(rq, (uintptr_t)m->q, (uintptr_t)m->q + m->nl - VMAP_PAGE);
	if (!(m->flags & MREMAP_DONTUNMAP)) {
		struct piece cur = vmap_piece_at(a);
		vmap_cut_mapped(r, &cur, a, a + m->ol);
	} else if (m->locked || m->copied) {
		/* The program's DONTUNMAP: the old range stays, reads zero and keeps
		 * its attributes (it was refilled fresh, or copied from) — but the
		 * kernel unlocks the whole VMAs the locked pages left. */
		if (m->copied)
			memset(m->old, 0, m->moved);
		if (m->locked)
			unlock_vmas(r, head, a, a + m->moved);
		if (m->st & VMAP_TAG_ATTR) {
			uint64_t t = __atomic_load_n(&vmap_pte_of(r, head)->tag, __ATOMIC_ACQUIRE);
			vmap_realize_range(r, head, t, a, a + m->moved);
		}
	}
	if (m->flags & MREMAP_DONTUNMAP)
		vmap_emptied(r, head, a, a + m->moved);
	return m->q;
}

void *vmap_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	struct remap m = {
		.old = old, .new_addr = new_addr, .old_len = old_len, .new_len = new_len,
		.flags = flags, .a = (uintptr_t)old, .d = (uintptr_t)new_addr,
	};
	void *res;
	int rc = check_args(&m);
	if (rc)
		return (void *)(intptr_t)rc;
	if (check_source(&m, &res))
		return res;
	count(VMAP_STAT_mremap_calls, 1);
	if (resize(&m, &res) || destination(&m, &res))
		return res;
	profile_moved(&m);
	if (move_pages(&m, &res))
		return res;
	return finish(&m);
}
