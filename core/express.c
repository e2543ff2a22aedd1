/*
 * express.c — malloc and free of large blocks that a thread's own cache
 * serves, without the layers of the general path.
 *
 * A thread that allocates and frees blocks of 64 KiB - 1 MiB gets them back
 * from its cache (cache.c): most often its hot area's block, lent and given
 * back, or the newest area of the LIFO of its page count.  Through the
 * general path that hit crossed the facade's tests of every mode, the range
 * layer's (size, alignment, huge pages, pools, shards) and the cache's own
 * calls: about 250 instructions a malloc and 300 a free at 128 KiB, against
 * 30-40 each for tcmalloc's thread cache.  Here, a hit is the cache's state
 * change, the page tag's, and the figures: the same state the general path
 * leaves, with the same checks of the pointer a free gets.
 *
 * Anything else -- a miss, a near fit, a refill, a full LIFO, the hot slot
 * changing hands, an area beside a resident free run, a purger thread that
 * may reap the cache, a trim not yet seen, an invalid pointer -- returns
 * "not served" before any change, and the general path does it all.
 *
 * Owns nothing.  Invariants: those of cache.c and large.c (a cached area's
 * tag CACHED, counted in thread_cached_bytes; a live block's tag LIVE, set
 * with release after the cache let go of it; a free changes LIVE to CACHED
 * with one compare-and-swap, so that of two frees of one block exactly one
 * proceeds and the other stops the program).
 *
 * Called by: direct.c (the facade's slow entries for sizes over the small
 * limit), bracketed against re-entry.
 */
#include "express.h"

#include "cache_impl.h"
#include "range_impl.h"

/* Atomic counters: the peak noted (vmap_note_peak), out of line so that the
 * path itself needs no frame. */
__attribute__((noinline)) static void *peak_noted(uintptr_t a, uint64_t pages)
{
	vmap_note_peak(pages);
	return (void *)a;
}

void *vmap_express_alloc(size_t size)
{
	uint64_t pages = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	struct vmap_tcache *tc = vmap_tc_plain();
	if (!tc || pages > vmap_pool_exact)
		return NULL;
	uintptr_t a;
	if (tc->hot && !tc->hot_lent && tc->hot_pages == pages) {
		a = tc->hot;
		tc->hot_lent = pages;
		vmap_tc_served(tc, pages);
	} else if (tc->count[pages]) {
		a = vmap_tc_take(tc, pages);
	} else {
		return NULL;
	}
	tc->seen = __atomic_load_n(&vmap_cache_clock_ns, __ATOMIC_RELAXED);
	struct vmap_pte *e = vmap_pte_at(a);
	publish_live(e, vmap_tag_shard(e->tag), pages, false); /* (1 MiB: never big) */
	int64_t bytes = (int64_t)(pages << VMAP_PAGE_SHIFT), usable = bytes - (int64_t)VMAP_PAGE;
	vmap_stat_add_quiet(VMAP_STAT_pool_hits, 1);
	vmap_stat_add_quiet(VMAP_STAT_thread_cached_bytes, -bytes);
	vmap_count_large_alloc_quiet(usable);
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	if (!vmap_counter_slots) /* (per-CPU counters: only blocks of 8 MiB and more) */
		return peak_noted(a, pages);
	return (void *)a;
}

/* The figures of a block freed into the cache; the age purge looked at on
 * every 64th (as large.c does for its cached frees).  Always true. */
static inline __attribute__((always_inline)) bool freed(uint64_t bytes)
{
	vmap_stat_add_quiet(VMAP_STAT_thread_cached_bytes, (int64_t)bytes);
	vmap_count_large_free_quiet((int64_t)(bytes - VMAP_PAGE));
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	if (__builtin_expect(!(++vmap_cached_frees & 63), 0))
		vmap_purge_maybe(vmap_os_now_ns());
	return true;
}

/* LIVE -> CACHED, the one change a free makes to a tag: of two frees of one
 * block, one proceeds and the other finds CACHED (the general path then
 * stops the program). */
static inline bool tag_cached(struct vmap_pte *e, uint64_t t)
{
	uint64_t cached = vmap_tag_make(VMAP_ST_CACHED, vmap_tag_shard(t), vmap_tag_pages(t), 0);
	return __atomic_compare_exchange_n(&e->tag, &t, cached, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* An ordinary push, out of line (the hot area's block, far more common,
 * needs no frame): an area that does not take the hot slot (a newer or
 * larger one would, displacing the one there) into a LIFO with room,
 * within the byte cap, and not beside a resident free run (large.c: such
 * an area merges with it). */
__attribute__((noinline)) static bool express_push(struct vmap_tcache *tc, struct vmap_region *r,
						   struct vmap_pte *e, uintptr_t a, uint64_t t)
{
	uint64_t pages = vmap_tag_pages(t), bytes = pages << VMAP_PAGE_SHIFT;
	if (!tc->hot || tc->hot_lent || pages >= tc->hot_pages ||
	    tc->count[pages] == vmap_cache_cap[pages] || tc->bytes + bytes > vmap_cache_byte_cap ||
	    (!vmap_guard_on && vmap_beside_resident_run(r, e, a, pages, t)) || !tag_cached(e, t))
		return false;
	tc->seen = __atomic_load_n(&vmap_cache_clock_ns, __ATOMIC_RELAXED);
	tc->slot[vmap_cache_off[pages] + tc->count[pages]++] = a;
	tc->bytes += bytes;
	return freed(bytes);
}

bool vmap_express_free(void *p, struct vmap_region *r)
{
	uintptr_t a = (uintptr_t)p;
	struct vmap_tcache *tc = vmap_tc_plain();
	if (!tc || tc->consumer || (a & (VMAP_PAGE - 1)))
		return false;
	struct vmap_pte *e = vmap_pte_of(r, a);
	uint64_t t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
	uint64_t pages = vmap_tag_pages(t);
	if (vmap_tag_state(t) != VMAP_ST_LIVE || (t & (VMAP_TAG_OVER | VMAP_TAG_ATTR | VMAP_TAG_BIG)) ||
	    pages > CACHE_MAX_PAGES || pages > vmap_pool_exact || (int)vmap_tag_shard(t) != tc->home)
		return false;
	if (a != tc->hot || pages != tc->hot_lent)
		return express_push(tc, r, e, a, t);
	if (!tag_cached(e, t))
		return false;
	tc->seen = __atomic_load_n(&vmap_cache_clock_ns, __ATOMIC_RELAXED);
	vmap_tc_hot_back(tc, e, vmap_tag_shard(t), pages);
	return freed(pages << VMAP_PAGE_SHIFT);
}
