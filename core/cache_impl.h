/*
 * cache_impl.h — a thread's cache of freed areas (cache.c), as cache.c and
 * the express path (express.c) both see it: the structure, the thread's
 * pointer to it, and the steps of a hit that both take, so that a hit is
 * the same state change whichever of the two serves it.
 */
#ifndef VMAP_CACHE_IMPL_H
#define VMAP_CACHE_IMPL_H

#include "cache.h"
#include "pte.h"

#define CACHE_MAX_PAGES VMAP_CACHE_MAX_PAGES

struct vmap_tcache {
	struct vmap_tcache *next_free; /* on the recycle list */
	struct vmap_tcache *next_all;  /* on the list of every cache made */
	uint32_t lock;     /* with a purger thread: owner's operations vs its reaping */
	uint64_t seen;     /* vmap_cache_clock_ns at the owner's last operation */
	uint64_t epoch;
	uint64_t bytes;
	uint64_t pops;     /* allocations served since the last full drain */
	bool consumer;     /* frees but does not allocate: cache nothing */
	int home;          /* shard of the last refill: frees of its areas stay here */
	/* The hot area: [hot, hot + hot_pages), CACHED, or when hot_lent is not
	 * 0 its first hot_lent pages are a live block and the rest (if any) is
	 * a CACHED area at hot + hot_lent.  Cached pages count in `bytes`. */
	uintptr_t hot;
	uint64_t hot_pages, hot_lent;
	uint16_t count[CACHE_MAX_PAGES + 1];
	uintptr_t slot[]; /* per class: cap(class) entries at off(class) */
};

/* Per page count: entries a cache keeps, and where they start in slot[]. */
extern uint16_t vmap_cache_cap[CACHE_MAX_PAGES + 1] VMAP_HIDDEN;
extern uint32_t vmap_cache_off[CACHE_MAX_PAGES + 1] VMAP_HIDDEN;
/* Most bytes one cache holds (VMAPALLOC_CACHE_BYTES). */
extern uint64_t vmap_cache_byte_cap VMAP_HIDDEN;
/* malloc_trim's epoch: a cache that lags drains before its next operation. */
extern uint64_t vmap_trim_epoch VMAP_HIDDEN;
/* A purger thread may drain other threads' caches: every operation on a
 * cache then holds its lock (one exchange; 0 costs a predicted branch). */
extern bool vmap_cache_shared VMAP_HIDDEN;

enum { VMAP_TC_NONE = 0, VMAP_TC_ACTIVE = 1, VMAP_TC_DEAD = 2 };
extern __thread struct vmap_tcache *vmap_tc VMAP_HIDDEN;
extern __thread uint8_t vmap_tc_state VMAP_HIDDEN;

/* The calling thread's cache when it has one in use and nothing asks it to
 * take the long way (a purger thread that may reap it, a trim it has not
 * seen): the express path's condition.  NULL otherwise. */
static inline struct vmap_tcache *vmap_tc_plain(void)
{
	if (__builtin_expect(vmap_tc_state != VMAP_TC_ACTIVE || vmap_cache_shared, 0))
		return NULL;
	struct vmap_tcache *tc = vmap_tc;
	if (__builtin_expect(tc->epoch != __atomic_load_n(&vmap_trim_epoch, __ATOMIC_RELAXED), 0))
		return NULL;
	return tc;
}

/* An allocation served: n pages leave the cache. */
static inline void vmap_tc_served(struct vmap_tcache *tc, uint64_t n)
{
	tc->pops++;
	tc->consumer = false;
	tc->bytes -= n << VMAP_PAGE_SHIFT;
}

/* The newest area of n pages, popped from its LIFO (count[n] > 0). */
static inline uintptr_t vmap_tc_take(struct vmap_tcache *tc, uint64_t n)
{
	vmap_tc_served(tc, n);
	return tc->slot[vmap_cache_off[n] + --tc->count[n]];
}

/* The hot area's block (its first `pages` pages, entry e, shard `shard`)
 * comes back: one area again, all of it cached. */
static inline void vmap_tc_hot_back(struct vmap_tcache *tc, struct vmap_pte *e, unsigned shard,
				    uint64_t pages)
{
	if (tc->hot_pages > pages) {
		__atomic_store_n(&e[pages].tag, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->tag,
				 vmap_tag_make(VMAP_ST_CACHED, shard, tc->hot_pages, e->tag & VMAP_TAG_BIG),
				 __ATOMIC_RELEASE);
	}
	tc->hot_lent = 0;
	tc->bytes += pages << VMAP_PAGE_SHIFT;
}

#endif
