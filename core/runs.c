/*
 * runs.c — a shard's free runs: the size bins, setting and taking runs,
 * merging a freed range with its free neighbours, and carving an area out
 * of them.  Every function here runs under the shard's lock.
 *
 * Invariants:
 *  - A page-table tag is non-zero only at the head of an area or a free run,
 *    and at the tail of a free run (pte.h).  Interior and freed addresses
 *    therefore fail the O(1) check in free().
 *  - Free runs merge only with runs of the same shard and kind (small/big),
 *    and of the same state; a zero run between two guarded runs joins them.
 *  - A guarded run made of more than one piece is one PROT_NONE mapping
 *    (guard_whole; or, where the kernel refused, pages that fault all the
 *    same): it cuts at most two VMAs out of the arena's, which is what
 *    vmap_none_vmas counts for it (vm.c says why).
 */
#include "range_impl.h"

/* ---- free runs (shard lock held) -------------------------------------- */

int vmap_protected_runs; /* free runs filed PROTECTED: each may split the arena VMA */
uint64_t vmap_none_vmas;  /* two per guarded run */
bool vmap_none_made;      /* some guarded pages are PROT_NONE mappings, not markers */

static inline uint64_t state_flags(unsigned state)
{
	static const uint64_t flags[] = {VMAP_TAG_ZERO, 0, VMAP_TAG_ADVISED, VMAP_TAG_GUARDED,
					 VMAP_TAG_PROTECTED};
	return flags[state];
}

static void bin_push(struct vmap_shard *s, unsigned li, struct vmap_pte *e, uintptr_t a,
		     uint64_t pages)
{
	unsigned b = bin_of(pages);
	uintptr_t head = s->free_bin[li][b];
	e->next = head;
	e->prev = 0;
	if (head)
		vmap_pte_of(vmap_region_of(head), head)->prev = a;
	s->free_bin[li][b] = a;
	__atomic_store_n(&s->free_bin_mask[li], s->free_bin_mask[li] | 1ull << b, __ATOMIC_RELAXED);
}

static void bin_remove(struct vmap_shard *s, unsigned li, struct vmap_pte *e, uint64_t pages)
{
	unsigned b = bin_of(pages);
	if (e->prev)
		vmap_pte_of(vmap_region_of(e->prev), e->prev)->next = e->next;
	else
		s->free_bin[li][b] = e->next;
	if (e->next)
		vmap_pte_of(vmap_region_of(e->next), e->next)->prev = e->prev;
	if (!s->free_bin[li][b])
		__atomic_store_n(&s->free_bin_mask[li], s->free_bin_mask[li] & ~(1ull << b),
				 __ATOMIC_RELAXED);
}

/* Writes the head and tail tags of a free run and files it in its bin. */
void vmap_run_set_locked(struct vmap_shard *s, struct vmap_region *r, uintptr_t a,
			   uint64_t pages, unsigned state, bool big, uint64_t stamp)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	uint64_t flags = state_flags(state) | (big ? VMAP_TAG_BIG : 0);
	unsigned li = list_of(big, state);
	struct vmap_pte *e = vmap_pte_of(r, a);
	__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_FREE, s->id, pages, flags), __ATOMIC_RELEASE);
	if (pages > 1)
		__atomic_store_n(&e[pages - 1].tag, vmap_tag_make(VMAP_ST_FREE_TAIL, s->id, pages, flags),
				 __ATOMIC_RELAXED);
	e->stamp = stamp;
	bin_push(s, li, e, a, pages);
	s->free_pages[li] += pages;
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		cached_add(s, pages << VMAP_PAGE_SHIFT);
	if (state == VMAP_RUN_PROTECTED)
		__atomic_add_fetch(&vmap_protected_runs, 1, __ATOMIC_RELAXED);
	if (state == VMAP_RUN_GUARDED)
		__atomic_add_fetch(&vmap_none_vmas, 2, __ATOMIC_RELAXED);
}

/* Unfiles a free run and clears its tags. */
void vmap_run_take_locked(struct vmap_shard *s, struct vmap_pte *e, uint64_t t)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	uint64_t pages = vmap_tag_pages(t);
	unsigned state = vmap_tag_run_state(t);
	unsigned li = list_of(t & VMAP_TAG_BIG, state);
	bin_remove(s, li, e, pages);
	__atomic_store_n(&e->tag, 0, __ATOMIC_RELAXED);
	if (pages > 1)
		__atomic_store_n(&e[pages - 1].tag, 0, __ATOMIC_RELAXED);
	s->free_pages[li] -= pages;
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		cached_add(s, -(pages << VMAP_PAGE_SHIFT));
	if (state == VMAP_RUN_PROTECTED)
		__atomic_sub_fetch(&vmap_protected_runs, 1, __ATOMIC_RELAXED);
	if (state == VMAP_RUN_GUARDED)
		__atomic_sub_fetch(&vmap_none_vmas, 2, __ATOMIC_RELAXED);
}


/*
 * The records of a free run's interior pages hold nothing (tag 0, stale
 * links): whole pages of them that the pages [a, e) of the run at `run`
 * cover are dropped (MADV_DONTNEED; they read zero again, which is what
 * an interior record's tag is).  Fork copies every resident page of the
 * records: freed address space that keeps them, hundreds of pages for a
 * CPython whose arenas came and went over 100 MiB, costs each fork as
 * much as live memory.  The run's head and tail records stay.
 */
void vmap_run_drop_records_locked(uintptr_t run, uintptr_t a, uintptr_t e)
{
	struct vmap_region *r = vmap_region_of(run);
	struct vmap_pte *h = vmap_pte_of(r, run);
	uint64_t pages = vmap_tag_pages(h->tag);
	struct vmap_pte *first = vmap_pte_of(r, a), *last = vmap_pte_of(r, e);
	if (first < h + 1)
		first = h + 1;
	if (last > h + pages - 1)
		last = h + pages - 1; /* the tail's record, kept */
	uintptr_t lo = ((uintptr_t)first + VMAP_PAGE - 1) & ~(uintptr_t)(VMAP_PAGE - 1);
	uintptr_t hi = (uintptr_t)last & ~(uintptr_t)(VMAP_PAGE - 1);
	if (hi > lo)
		vmap_os_madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* A guarded run that merged pieces or zero runs, made one PROT_NONE mapping:
 * its pieces' VMAs, markers and page tables go with the old mappings.  The
 * run is free and the shard lock held: nobody maps or carves it meanwhile
 * (with the records' drop, the system calls made in this file).  On failure (ENOMEM at
 * vm.max_map_count) it stays as it was, every page faulting all the same:
 * vmap_unguard clears markers and PROT_NONE alike.
 *
 * A run under GUARD_WHOLE_MIN pages gets guard markers over it instead,
 * where the kernel has them: no VMA of its own.  Programs that map and trim
 * small pieces (Ruby's 16 KiB heap pages, mapped twice as large and cut to
 * their alignment) merged their marker pieces into thousands of small
 * PROT_NONE mappings, past any budget; markers cost a fork a page-table
 * entry each, which only runs of megabytes (CPython's freed arenas) make
 * worth a mapping. */
#define GUARD_WHOLE_MIN (VMAP_HUGE_PAGE >> VMAP_PAGE_SHIFT)
static void guard_whole(uintptr_t a, uint64_t pages)
{
	if (pages < GUARD_WHOLE_MIN &&
	    vmap_os_madvise((void *)a, (size_t)pages << VMAP_PAGE_SHIFT, MADV_GUARD_INSTALL) == 0)
		return;
	void *m = vmap_os_mmap((void *)a, (size_t)pages << VMAP_PAGE_SHIFT, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(m))
		return;
	__atomic_store_n(&vmap_none_made, true, __ATOMIC_RELAXED);
	vmap_run_drop_records_locked(a, a, a + ((uintptr_t)pages << VMAP_PAGE_SHIFT));
}

/* Runs merge only within one shard and one kind (and states_merge). */
bool vmap_run_mergeable(uint64_t t, unsigned shard, bool big, unsigned state)
{
	return vmap_tag_shard(t) == shard && !!(t & VMAP_TAG_BIG) == big &&
	       states_merge(vmap_tag_run_state(t), state);
}

/* The free run of s and kind `big` that ends right before a: its start and
 * *state, or 0.  (Atomic reads: another shard's insert may read the same
 * tags as its run's neighbours; never mergeable: another shard's.) */
uintptr_t vmap_run_before(struct vmap_shard *s, struct vmap_region *r, uintptr_t a, bool big,
			 unsigned *state)
{
	if (a <= r->base)
		return 0;
	uint64_t lt = __atomic_load_n(&vmap_pte_of(r, a)[-1].tag, __ATOMIC_RELAXED);
	unsigned st = vmap_tag_state(lt);
	if (!(st == VMAP_ST_FREE_TAIL || (st == VMAP_ST_FREE && vmap_tag_pages(lt) == 1)) ||
	    vmap_tag_shard(lt) != s->id || !!(lt & VMAP_TAG_BIG) != big)
		return 0;
	*state = vmap_tag_run_state(lt);
	return a - (vmap_tag_pages(lt) << VMAP_PAGE_SHIFT);
}

/* The free run of s and kind `big` that starts at a, and *state, or 0. */
uintptr_t vmap_run_at(struct vmap_shard *s, struct vmap_region *r, uintptr_t a, bool big,
		     unsigned *state)
{
	if (a >= r->base + r->size)
		return 0;
	uint64_t t = __atomic_load_n(&vmap_pte_of(r, a)->tag, __ATOMIC_RELAXED);
	if (vmap_tag_state(t) != VMAP_ST_FREE || vmap_tag_shard(t) != s->id ||
	    !!(t & VMAP_TAG_BIG) != big)
		return 0;
	*state = vmap_tag_run_state(t);
	return a;
}

/* Takes the free run at a out of its bin; returns its pages. */
static uint64_t take(struct vmap_shard *s, struct vmap_region *r, uintptr_t a)
{
	struct vmap_pte *e = vmap_pte_of(r, a);
	uint64_t t = e->tag;
	vmap_run_take_locked(s, e, t);
	return vmap_tag_pages(t);
}

/*
 * Files [start, start+pages) as a free run in `state`, merged with the free
 * runs around it in the same state; returns the merged run's start.
 *
 * A zero run between two guarded runs joins them (a bridge): one PROT_NONE
 * mapping where there were two pieces, two VMAs fewer (CPython's freed
 * arenas, with the purged blocks between them, made thousands of pieces).
 * A zero run beside one guarded run only stays apart: joining it would
 * save no VMA, and it made the whole rest of a chunk one PROT_NONE mapping,
 * which every area carved from it had to make usable again and which slabs
 * (64 KiB aligned) cut into as many pieces as slabs; a mapping made afresh
 * there and faulted in no longer merges with the arena's VMAs either.
 *
 *   before:  [ G | zero | G ]    (G: guarded; the inserted run any of the three)
 *   after:   [      G       ]    (one PROT_NONE mapping: guard_whole)
 */
uintptr_t vmap_free_insert_locked(struct vmap_shard *s, uintptr_t start, uint64_t pages,
				  unsigned state, bool big, uint64_t now)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	struct vmap_region *r = vmap_region_of(start);
	const uint64_t inserted = pages;
	/* Atomic: another shard's insert may read it as its run's right
	 * neighbour (never mergeable: another shard's). */
	__atomic_store_n(&vmap_pte_of(r, start)->tag, 0, __ATOMIC_RELAXED);
	unsigned ls, rs, fs;
	uintptr_t l = vmap_run_before(s, r, start, big, &ls);
	if (l && ls == state) {
		pages += take(s, r, l);
		start = l;
	}
	uintptr_t end = start + (pages << VMAP_PAGE_SHIFT);
	uintptr_t n = vmap_run_at(s, r, end, big, &rs);
	if (n && rs == state) {
		pages += take(s, r, n);
		end = start + (pages << VMAP_PAGE_SHIFT);
	}
	if (state == VMAP_RUN_ZERO) {
		l = vmap_run_before(s, r, start, big, &ls);
		n = vmap_run_at(s, r, end, big, &rs);
		if (l && n && ls == VMAP_RUN_GUARDED && rs == VMAP_RUN_GUARDED) {
			pages += take(s, r, l) + take(s, r, n);
			start = l;
			state = VMAP_RUN_GUARDED;
		}
	} else if (state == VMAP_RUN_GUARDED) {
		l = vmap_run_before(s, r, start, big, &ls);
		uintptr_t f = l && ls == VMAP_RUN_ZERO ? vmap_run_before(s, r, l, big, &fs) : 0;
		if (f && fs == VMAP_RUN_GUARDED) {
			pages += take(s, r, l) + take(s, r, f);
			start = f;
		}
		n = vmap_run_at(s, r, end, big, &rs);
		if (n && rs == VMAP_RUN_ZERO) {
			uint64_t np = vmap_tag_pages(vmap_pte_of(r, n)->tag);
			f = vmap_run_at(s, r, n + (np << VMAP_PAGE_SHIFT), big, &fs);
			if (f && fs == VMAP_RUN_GUARDED)
				pages += take(s, r, n) + take(s, r, f);
		}
	}
	vmap_run_set_locked(s, r, start, pages, state, big, now);
	if (state == VMAP_RUN_GUARDED && pages != inserted) /* (after the set: reads the tag) */
		guard_whole(start, pages);
	return start;
}

/* A run of list li that holds `pages` pages at `align`, or 0, looking at up
 * to RUN_FIND_BUDGET runs per bin: an exact fit if one is seen, else the
 * smallest that fits once aligned (the lowest address among equals), from
 * the bin of `pages` up to the first bin whose smallest possible run is no
 * better than the best found.  Best fit keeps the large runs whole for the
 * large requests (fewer pages faulted than with the first fit of a bin's
 * head).
 *
 * With `low` (a block that realloc grows, vmap_range_alloc_grown), a
 * page-aligned request to a resident list takes the lowest address among
 * the runs that fit in its own bin and the next (RUN_LOW_BINS), or failing
 * that in the first larger bin that has one.  Blocks that grow by realloc
 * and are freed at random (a parser's or a serialiser's buffers) left best
 * fit's holes scattered over the whole chunk, each too small for the next
 * larger copy, which then took fresh memory; filling the lowest holes first
 * keeps the growing blocks packed low and the free memory above them in long
 * runs (docs/benchmarks.md has the figures).  Other requests keep best fit:
 * with address order for every request, bench/large's shapes that replace
 * blocks of random sizes one for one faulted 10-15% more. */
#define RUN_FIND_BUDGET 64
#define RUN_LOW_BINS    2
uintptr_t vmap_run_find(struct vmap_shard *s, unsigned li, uint64_t pages, size_t align, bool low)
{
	const unsigned first = bin_of(pages);
	const bool by_address = low && align <= VMAP_PAGE && li % 5 == VMAP_RUN_DIRTY;
	uint64_t mask = s->free_bin_mask[li] & ~((1ull << first) - 1);
	uintptr_t best = 0;
	uint64_t best_m = UINT64_MAX;
	while (mask) {
		unsigned b = (unsigned)__builtin_ctzll(mask);
		mask &= mask - 1;
		/* By address: the request's bin and the next, or else the first
		 * larger bin with a fit.  Best fit: every run of bin b is at least
		 * 2^b pages, so once that is no smaller than the best found,
		 * larger bins cannot beat it. */
		if (best && (by_address ? b >= first + RUN_LOW_BINS : (1ull << b) >= best_m))
			break;
		int budget = RUN_FIND_BUDGET;
		for (uintptr_t a = s->free_bin[li][b]; a && budget-- > 0;) {
			struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
			uint64_t m = vmap_tag_pages(e->tag);
			uintptr_t al = (a + align - 1) & ~(uintptr_t)(align - 1);
			if (al + (pages << VMAP_PAGE_SHIFT) <= a + (m << VMAP_PAGE_SHIFT)) {
				if (m == pages)
					return a;
				bool better = by_address ? a < best
							 : m < best_m || (m == best_m && a < best);
				if (!best || better) {
					best = a;
					best_m = m;
				}
			}
			a = e->next;
		}
	}
	return best;
}

/*
 * Would an area of `pages` at `align` carved from the run at a leave pages
 * of the run on both sides?  In a run of pages the program unmapped
 * (protected or guarded: PROT_NONE), that is two PROT_NONE pieces where
 * there was one: two more VMAs.  A slab (64 KiB aligned, guard page
 * included) carved at each alignment step cut one such run into dozens, so
 * such a run is taken only when no other run fits.  Page-aligned requests
 * never split: they take the run's start.
 */
static bool splits(uintptr_t run, uint64_t pages, size_t align)
{
	uint64_t m = vmap_tag_pages(vmap_pte_of(vmap_region_of(run), run)->tag);
	uintptr_t al = (run + align - 1) & ~(uintptr_t)(align - 1);
	return al != run && al + (pages << VMAP_PAGE_SHIFT) != run + (m << VMAP_PAGE_SHIFT);
}

/*
 * Carves an area of `pages` pages aligned to `align` bytes from the shard's
 * free runs.  Order: resident (dirty) runs of the request's kind, resident
 * runs of the other kind (memory already faulted in is the cheapest there
 * is: a memset at most, where a fresh page costs a fault), known-zero runs of
 * the request's kind, and for small requests known-zero big runs too (the
 * lead fragments that 2 MiB alignment leaves in big chunks).  Pages the
 * program munmap()ed come in between: lazily protected ones right after the
 * dirty runs (resident: one mprotect), guarded ones before fresh memory
 * (one madvise, then faults like fresh memory, but no new address space).
 * *state is the run's state; the area's kind is the run's (*big); *resident
 * how many of its pages were resident (cached).  An area that starts in a
 * resident run and ends in a zero or guarded one has that run's state and
 * *resident > 0: its first *resident pages are stale, the rest as the state
 * says.  With resident_only, only the lists that need no page fault (dirty,
 * protected); with low, resident runs are taken by address (vmap_run_find).
 */
uintptr_t vmap_carve_locked(struct vmap_shard *s, bool *big, uint64_t pages, size_t align,
			      unsigned *state_out, uint64_t *resident_out, bool resident_only,
			      bool low)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	const bool k = *big;
	const unsigned order[9] = {
		list_of(k, VMAP_RUN_DIRTY),     list_of(!k, VMAP_RUN_DIRTY),
		list_of(k, VMAP_RUN_PROTECTED), list_of(!k, VMAP_RUN_PROTECTED),
		list_of(k, VMAP_RUN_ADVISED),   list_of(k, VMAP_RUN_GUARDED),
		list_of(k, VMAP_RUN_ZERO),
		/* small requests may also use the zero lead fragments of big chunks */
		list_of(true, VMAP_RUN_ZERO),   list_of(!k, VMAP_RUN_GUARDED),
	};
	uintptr_t found = 0, split = 0;
	for (int i = 0; i < (resident_only ? 4 : 9) && !found; i++) {
		found = vmap_run_find(s, order[i], pages, align, low);
		unsigned st = order[i] % 5; /* (vmap_run_list) */
		if (found && (st == VMAP_RUN_PROTECTED || st == VMAP_RUN_GUARDED) &&
		    splits(found, pages, align)) {
			if (!split)
				split = found;
			found = 0;
		}
	}
	if (!found && !resident_only)
		found = split;
	*resident_out = 0;
	if (!found)
		return 0;
	struct vmap_region *r = vmap_region_of(found);
	struct vmap_pte *e = vmap_pte_of(r, found);
	uint64_t t = e->tag, m = vmap_tag_pages(t), stamp = e->stamp;
	unsigned state = vmap_tag_run_state(t);
	bool kind = t & VMAP_TAG_BIG;
	if ((state == VMAP_RUN_ZERO || state == VMAP_RUN_GUARDED) && align <= VMAP_PAGE &&
	    found > r->base) {
		/* Fresh memory right after a resident run too small for the
		 * request (else it would have been found): the area starts in
		 * the resident run and takes from the fresh one only what is
		 * missing.  Fewer pages fault, and the resident run, which
		 * nothing that big could use, does not stay behind as a hole. */
		uint64_t lt = __atomic_load_n(&e[-1].tag, __ATOMIC_RELAXED);
		unsigned lst = vmap_tag_state(lt);
		uint64_t lp = vmap_tag_pages(lt);
		if ((lst == VMAP_ST_FREE_TAIL || (lst == VMAP_ST_FREE && lp == 1)) &&
		    vmap_run_mergeable(lt, s->id, kind, VMAP_RUN_DIRTY) && lp < pages) {
			uintptr_t ls = found - (lp << VMAP_PAGE_SHIFT);
			struct vmap_pte *le = vmap_pte_of(r, ls);
			vmap_run_take_locked(s, le, le->tag);
			vmap_run_take_locked(s, e, t);
			uint64_t fresh = pages - lp;
			if (m > fresh)
				vmap_run_set_locked(s, r, found + (fresh << VMAP_PAGE_SHIFT), m - fresh,
						    state, kind, stamp);
			*state_out = state; /* of the fresh part; contents not known zero */
			*resident_out = lp;
			*big = kind;
			return ls;
		}
	}
	vmap_run_take_locked(s, e, t);
	uintptr_t al = (found + align - 1) & ~(uintptr_t)(align - 1);
	uint64_t lead = (al - found) >> VMAP_PAGE_SHIFT;
	uint64_t rest = m - lead - pages;
	if (lead)
		vmap_run_set_locked(s, r, found, lead, state, kind, stamp);
	if (rest)
		vmap_run_set_locked(s, r, al + (pages << VMAP_PAGE_SHIFT), rest, state, kind, stamp);
	*state_out = state;
	*resident_out = state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED ? pages : 0;
	*big = kind;
	return al;
}

unsigned vmap_dirty_take_locked(struct vmap_shard *s, uint64_t older_than, uint64_t want_bytes,
				struct vmap_victim *out, unsigned max, uint64_t *taken,
				bool protected_too)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	/* Oldest first (the kernel's decay order): gather up to DIRTY_SCAN runs,
	 * then repeatedly take the oldest of them.  Runs are not kept in age
	 * order, so the scan is bounded; what it misses waits for the next purge. */
	enum { DIRTY_SCAN = 512 };
	uintptr_t cand[DIRTY_SCAN];
	uint64_t stamp[DIRTY_SCAN];
	unsigned nc = 0;
	for (unsigned l = 0; l < (protected_too ? 4u : 2u); l++) {
		unsigned li = list_of(l & 1, l < 2 ? VMAP_RUN_DIRTY : VMAP_RUN_PROTECTED);
		uint64_t mask = s->free_bin_mask[li];
		while (mask && nc < DIRTY_SCAN) {
			unsigned b = (unsigned)__builtin_ctzll(mask);
			mask &= mask - 1;
			for (uintptr_t a = s->free_bin[li][b]; a && nc < DIRTY_SCAN;) {
				struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
				if (!older_than || e->stamp <= older_than) {
					cand[nc] = a;
					stamp[nc++] = e->stamp;
				}
				a = e->next;
			}
		}
	}
	unsigned n = 0;
	uint64_t got = 0;
	while (n < max && got < want_bytes && nc > 0) {
		unsigned oldest = 0;
		for (unsigned i = 1; i < nc; i++)
			if (stamp[i] < stamp[oldest])
				oldest = i;
		uintptr_t a = cand[oldest];
		cand[oldest] = cand[--nc];
		stamp[oldest] = stamp[nc];
		struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
		uint64_t t = e->tag, np = vmap_tag_pages(t);
		vmap_run_take_locked(s, e, t);
		/* Atomic: a free next to it reads it without the lock (range free). */
		__atomic_store_n(&e->tag,
				 vmap_tag_make(VMAP_ST_PURGING, s->id, np,
					       t & (VMAP_TAG_BIG | VMAP_TAG_PROTECTED)),
				 __ATOMIC_RELAXED);
		out[n++] = (struct vmap_victim){a, np, e->tag};
		got += np << VMAP_PAGE_SHIFT;
	}
	*taken += got;
	return n;
}

