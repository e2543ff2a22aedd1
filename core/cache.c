/*
 * cache.c — per-thread partial caches of freed areas, in front of the shard
 * pools (as SLUB's per-CPU partial lists).
 *
 * Each thread keeps, per exact page count of 2..CACHE_MAX_PAGES (areas up to
 * 1 MiB, guard page included), a LIFO of recently freed areas:
 *
 *   usable <= 64 KiB : 16 entries     <= 256 KiB : 8     <= 1 MiB : 4
 *
 * doubled on machines with >= 32 CPUs (half the traffic on the shard locks
 * where many CPUs share them), and a byte cap per
 * thread (VMAPALLOC_CACHE_BYTES).  An empty slot is refilled with half its
 * capacity from the shard pool under one lock hold; a full one drains its
 * older half under one lock hold per owner shard.  A free of an area owned by
 * another shard than the one this thread runs on goes straight to its owner,
 * so producer/consumer pairs do not pile areas up in the consumer.
 *
 * In front of the per-size LIFOs, one "hot" area per thread, the way glibc
 * serves random sizes from its top chunk: the most recently freed area (or
 * the larger one) serves any request that fits, split in two when it is
 * larger -- the block at its start, the rest a cached area of its own --
 * and a free of that block by this thread merges the two back.  A thread
 * that allocates, uses and frees blocks of random sizes thus reuses the same
 * addresses, hot in the TLB and the caches, where exact sizes made
 * it cycle through every area of the cache.  When a newer free takes the hot
 * slot while the block is still out, the rest goes back to its shard, where
 * it merges with its free neighbours and serves any size: kept here under
 * its exact page count it waited, while requests of other sizes faulted in
 * fresh memory (bench/large random: a quarter fewer page faults this way).
 * The split writes the rest's head tag (CACHED) and the merge clears it,
 * without the shard lock: both areas are this thread's, and whoever reads
 * those tags under the lock (a neighbour's free run merging, a resize) sees
 * "not free" either way.
 *
 * Owns: the thread's struct vmap_tcache (mapped, never malloc'd; recycled
 * through a free list when threads exit), the TLS pointer to it, the trim epoch.
 *
 * Invariants:
 *  - A cached area's tag is CACHED (so a second free of it still aborts) and
 *    it is counted in thread_cached_bytes, not cached_bytes: the purge cannot
 *    reach it, so it must not count against VMAPALLOC_LAZY_MAX (each thread's
 *    share is bounded by VMAPALLOC_CACHE_BYTES instead).
 *  - After the thread's key destructor ran, the thread never caches again
 *    (glibc frees after destructors: those go straight to the shards).
 *
 * Called by: large.c (alloc and free fast paths), alloc.c (thread exit, trim);
 * express.c takes hits itself through cache_impl.h.
 */
#include "cache_impl.h"

#include <sys/mman.h>

#include "counter.h"
#include "options.h"

/* Where in its mapping a cache starts: not at a page's first line, the L1
 * set of every page-aligned block's (pte.h VMAP_PT_SHIFT says what that cost
 * the table), nor at the heaps' offset (slab_heap.c); its first lines are
 * read and written on every large malloc and free. */
#define TC_OFFSET 0x940

uint16_t vmap_cache_cap[CACHE_MAX_PAGES + 1];
uint32_t vmap_cache_off[CACHE_MAX_PAGES + 1];
static size_t cache_bytes_each;
uint64_t vmap_cache_byte_cap;
static bool cache_on;
uint64_t vmap_trim_epoch;
static struct vmap_tcache *cache_free_list;
static struct vmap_tcache *cache_all; /* every cache made: they are never unmapped */
/* A coarse clock for the idle passes (vmap_cache_idle_pass): set by them
 * and by the allocator's every 128th call (purge_policy.c's tick); an operation
 * notes it, so that a cache's idle time is known without a clock read per
 * operation. */
uint64_t vmap_cache_clock_ns;
bool vmap_cache_shared;
static struct vmap_lock cache_list_lock = VMAP_LOCK_INIT;

__thread struct vmap_tcache *vmap_tc;
__thread uint8_t vmap_tc_state;

void vmap_cache_init(unsigned ncpu)
{
	static const struct vmap_lock_set locks = {"thread caches", VMAP_RANK_CACHE_LIST,
						   &cache_list_lock, 0, NULL};
	vmap_lock_register(&locks);
	cache_on = vmap_opt.cache && vmap_opt.cache_bytes > 0;
	if (!cache_on)
		return;
	vmap_cache_shared = vmap_opt.background;
	unsigned scale = ncpu >= 32 ? 2 : 1;
	uint32_t off = 0;
	for (unsigned n = 2; n <= CACHE_MAX_PAGES; n++) {
		uint64_t usable = (uint64_t)(n - 1) << VMAP_PAGE_SHIFT;
		unsigned cap = usable <= (64u << 10) ? 16 : usable <= (256u << 10) ? 8 : 4;
		vmap_cache_cap[n] = (uint16_t)(cap * scale);
		vmap_cache_off[n] = off;
		off += vmap_cache_cap[n];
	}
	cache_bytes_each = (TC_OFFSET + sizeof(struct vmap_tcache) + off * sizeof(uintptr_t) +
			    VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	vmap_cache_byte_cap = vmap_opt.cache_bytes;
}

static struct vmap_tcache *cache_create(void)
{
	struct vmap_tcache *tc = NULL;
	vmap_lock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
	if (cache_free_list) {
		tc = cache_free_list;
		cache_free_list = tc->next_free;
	}
	vmap_unlock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
	if (!tc) {
		char *m = vmap_os_mmap(NULL, cache_bytes_each, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (vmap_os_is_err(m))
			return NULL;
		tc = (struct vmap_tcache *)(m + TC_OFFSET);
		vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)cache_bytes_each);
		vmap_lock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
		tc->next_all = cache_all;
		__atomic_store_n(&cache_all, tc, __ATOMIC_RELEASE);
		vmap_unlock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
	}
	tc->epoch = __atomic_load_n(&vmap_trim_epoch, __ATOMIC_RELAXED);
	tc->home = -1;
	tc->hot = 0;
	tc->hot_pages = tc->hot_lent = 0;
	return tc;
}

/* The thread's cache, created on first use; NULL when caching is off. */
static inline struct vmap_tcache *cache_get(void)
{
	if (__builtin_expect(vmap_tc_state == VMAP_TC_ACTIVE, 1))
		return vmap_tc;
	if (vmap_tc_state == VMAP_TC_DEAD || !cache_on)
		return NULL;
	vmap_tc = cache_create();
	vmap_tc_state = vmap_tc ? VMAP_TC_ACTIVE : VMAP_TC_DEAD;
	return vmap_tc;
}

/* Sends n entries starting at s[0] back to their owner shards' pools. */
static void drain_entries(uintptr_t *s, unsigned n, uint64_t now)
{
	struct vmap_shard *held = NULL;
	int64_t bytes = 0;
	for (unsigned i = 0; i < n; i++) {
		struct vmap_region *r = vmap_region_of(s[i]);
		struct vmap_pte *e = vmap_pte_of(r, s[i]);
		bytes += (int64_t)(vmap_tag_pages(e->tag) << VMAP_PAGE_SHIFT);
		struct vmap_shard *owner = &vmap_shards[vmap_tag_shard(e->tag)];
		if (owner != held) {
			if (held)
				vmap_shard_unlock(held);
			held = owner;
			vmap_shard_lock(held);
		}
		vmap_area_park_locked(held, e, s[i], now);
	}
	if (held)
		vmap_shard_unlock(held);
	vmap_stat_add_local(VMAP_STAT_thread_cached_bytes, -bytes);
	vmap_stat_add_cpu(0, VMAP_STAT_cached_bytes, bytes);
}

/* The cached part of the hot area (all of it, or the rest after the lent
 * block), as an ordinary area; the hot slot is emptied. */
static uintptr_t hot_detach(struct vmap_tcache *tc, uint64_t *pages)
{
	uintptr_t a = tc->hot + (tc->hot_lent << VMAP_PAGE_SHIFT);
	*pages = tc->hot_pages - tc->hot_lent;
	tc->hot = 0;
	tc->hot_pages = tc->hot_lent = 0;
	return *pages ? a : 0;
}

/* Everything the cache holds goes back to the shards, stamped `now` (0: as
 * old as can be, for the age purge to take at once). */
static void drain_all(struct vmap_tcache *tc, uint64_t now)
{
	uint64_t hp;
	uintptr_t h = tc->hot ? hot_detach(tc, &hp) : 0;
	if (h)
		drain_entries(&h, 1, now);
	for (unsigned n = 2; n <= CACHE_MAX_PAGES; n++) {
		if (!tc->count[n])
			continue;
		drain_entries(&tc->slot[vmap_cache_off[n]], tc->count[n], now);
		tc->count[n] = 0;
	}
	tc->bytes = 0;
}

static inline void check_epoch(struct vmap_tcache *tc)
{
	uint64_t e = __atomic_load_n(&vmap_trim_epoch, __ATOMIC_RELAXED);
	if (__builtin_expect(tc->epoch != e, 0)) {
		drain_all(tc, vmap_os_now_ns());
		tc->epoch = e;
	}
}

/*
 * With a purger thread (vmap_cache_shared), the owner's operations and the
 * purger's reaping of an idle cache exclude each other with the cache's
 * lock: a spin lock, since the purger holds it only to drain the cache and
 * only trylocks it (the owner never waits for more than one drain).  Taken
 * before any shard lock.  Every operation notes the idle pass it ran in.
 */
static inline void tc_enter(struct vmap_tcache *tc)
{
	if (__builtin_expect(vmap_cache_shared, 0))
		while (__atomic_exchange_n(&tc->lock, 1, __ATOMIC_ACQUIRE))
			vmap_os_yield();
	tc->seen = __atomic_load_n(&vmap_cache_clock_ns, __ATOMIC_RELAXED);
}

static inline void tc_leave(struct vmap_tcache *tc)
{
	if (__builtin_expect(vmap_cache_shared, 0))
		__atomic_store_n(&tc->lock, 0, __ATOMIC_RELEASE);
}

static inline __attribute__((always_inline)) uintptr_t pop_held(struct vmap_tcache *tc, uint64_t *pages)
{
	uint64_t n = *pages;
	check_epoch(tc);
	if (tc->hot && !tc->hot_lent && n <= tc->hot_pages &&
	    (tc->hot_pages - n < 2 || !vmap_range_guard_on())) {
		/* The hot area: split when the rest is an area (two pages or
		 * more), else whole.  (Not split under VMAPALLOC_GUARD=1: the
		 * block's last page would carry no guard marker.) */
		uintptr_t a = tc->hot;
		uint64_t rest = tc->hot_pages - n;
		if (rest >= 2) {
			struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
			uint64_t t = e->tag;
			__atomic_store_n(&e[n].tag,
					 vmap_tag_make(VMAP_ST_CACHED, vmap_tag_shard(t), rest,
						       t & VMAP_TAG_BIG),
					 __ATOMIC_RELAXED);
		} else {
			n = tc->hot_pages;
		}
		tc->hot_lent = n;
		*pages = n;
		vmap_tc_served(tc, n);
		return a;
	}
	if (!tc->count[n]) {
		/* A near fit: an area up to an eighth larger (at least the next
		 * size) rather than none.  Sizes that vary (bench/large random,
		 * xthread: 64 KiB - 1 MiB) then keep reusing the same few
		 * resident areas, as a size-class allocator would, instead of
		 * carving fresh ones while the cache holds the wrong sizes. */
		uint64_t top = n + (n >> 3 ? n >> 3 : 1);
		if (top > CACHE_MAX_PAGES)
			top = CACHE_MAX_PAGES;
		while (++n <= top && !tc->count[n])
			;
		if (n > top)
			return 0;
		*pages = n;
	}
	return vmap_tc_take(tc, n);
}

uintptr_t vmap_cache_pop(uint64_t *pages)
{
	if (*pages > CACHE_MAX_PAGES)
		return 0;
	struct vmap_tcache *tc = cache_get();
	if (!tc)
		return 0;
	tc_enter(tc);
	uintptr_t a = pop_held(tc, pages);
	tc_leave(tc);
	return a;
}

static inline __attribute__((always_inline)) uintptr_t refill_held(struct vmap_tcache *tc, struct vmap_shard *s, uint64_t pages)
{
	tc->pops++;
	tc->consumer = false;
	/* This thread runs on s now: frees of s's areas may stay in the cache.
	 * (A hint only: a stale home after a migration costs nothing wrong.) */
	tc->home = (int)s->id;
	if (!__atomic_load_n(&s->pool[pages].count, __ATOMIC_RELAXED)) /* a hint */
		return 0;
	/* Half the capacity from this shard's pool, one lock hold. */
	uintptr_t *slot = &tc->slot[vmap_cache_off[pages]];
	unsigned want = vmap_cache_cap[pages] / 2;
	vmap_shard_lock(s);
	tc->count[pages] = (uint16_t)vmap_pool_pop_many_locked(s, (unsigned)pages, slot, want);
	vmap_shard_unlock(s);
	int64_t moved = (int64_t)tc->count[pages] * (int64_t)(pages << VMAP_PAGE_SHIFT);
	tc->bytes += (uint64_t)moved;
	vmap_stat_add_cpu(s->id, VMAP_STAT_cached_bytes, -moved);
	vmap_stat_add_local(VMAP_STAT_thread_cached_bytes, moved);
	if (!tc->count[pages])
		return 0;
	uintptr_t a = slot[--tc->count[pages]];
	tc->bytes -= pages << VMAP_PAGE_SHIFT;
	return a;
}

uintptr_t vmap_cache_refill(struct vmap_shard *s, uint64_t pages)
{
	if (pages > CACHE_MAX_PAGES)
		return 0;
	struct vmap_tcache *tc = cache_get();
	if (!tc)
		return 0;
	tc_enter(tc);
	uintptr_t a = refill_held(tc, s, pages);
	tc_leave(tc);
	return a;
}

static inline __attribute__((always_inline)) uintptr_t grow_hot_held(struct vmap_tcache *tc, uint64_t *pages)
{
	uint64_t want = *pages;
	if (!tc->hot || tc->hot_lent || want <= tc->hot_pages || want > CACHE_MAX_PAGES ||
	    vmap_range_guard_on())
		return 0;
	if (vmap_cached_extend(tc->hot, tc->hot_pages, want) < 0)
		return 0;
	uint64_t extra = (want - tc->hot_pages) << VMAP_PAGE_SHIFT;
	tc->hot_pages = want;
	tc->bytes += extra;
	vmap_stat_add_local(VMAP_STAT_thread_cached_bytes, (int64_t)extra);
	return pop_held(tc, pages);
}

uintptr_t vmap_cache_grow_hot(uint64_t *pages)
{
	struct vmap_tcache *tc = vmap_tc_state == VMAP_TC_ACTIVE ? vmap_tc : NULL;
	if (!tc)
		return 0;
	tc_enter(tc);
	uintptr_t a = grow_hot_held(tc, pages);
	tc_leave(tc);
	return a;
}

static inline __attribute__((always_inline)) bool push_held(struct vmap_tcache *tc, struct vmap_shard *owner, uintptr_t a,
		      uint64_t pages)
{
	check_epoch(tc);
	uint64_t bytes = pages << VMAP_PAGE_SHIFT;
	if (a == tc->hot && pages == tc->hot_lent) {
		vmap_tc_hot_back(tc, vmap_pte_of(vmap_region_of(a), a), owner->id, pages);
		return true;
	}
	if (tc->bytes + bytes > vmap_cache_byte_cap)
		return false;
	bool displaced = false;
	if (!tc->hot || tc->hot_lent || pages >= tc->hot_pages) {
		/* The newest area becomes hot (a lent hot area's block will come
		 * back as an ordinary one); the previous hot area is kept like
		 * any freed area, its rest goes back to the shard (above). */
		uint64_t op = 0;
		bool rest = tc->hot_lent != 0;
		uintptr_t old = tc->hot ? hot_detach(tc, &op) : 0;
		tc->hot = a;
		tc->hot_pages = pages;
		tc->bytes += bytes;
		if (!old)
			return true;
		a = old;
		pages = op;
		bytes = op << VMAP_PAGE_SHIFT;
		tc->bytes -= bytes; /* counted again below */
		displaced = true;
		if (rest) {
			drain_entries(&a, 1, vmap_os_now_ns());
			return true;
		}
	}
	uintptr_t *slot = &tc->slot[vmap_cache_off[pages]];
	if (tc->count[pages] == vmap_cache_cap[pages]) {
		/* Full: the older half goes back to the shards in one lock hold.
		 * A thread that filled a slot without allocating anything since
		 * the last time is a consumer (it frees what others allocate):
		 * its frees go straight to the shards, where producers find them,
		 * until it allocates again. */
		if (!tc->pops) {
			/* (The freed area is in the hot slot when it displaced
			 * another: drained with the rest, it is handled.) */
			tc->consumer = true;
			drain_all(tc, vmap_os_now_ns());
			if (displaced) {
				drain_entries(&a, 1, vmap_os_now_ns());
				return true;
			}
			return false;
		}
		tc->pops = 0;
		unsigned half = vmap_cache_cap[pages] / 2;
		drain_entries(slot, half, vmap_os_now_ns());
		for (unsigned i = half; i < vmap_cache_cap[pages]; i++)
			slot[i - half] = slot[i];
		tc->count[pages] = (uint16_t)(vmap_cache_cap[pages] - half);
		tc->bytes -= half * bytes;
	}
	slot[tc->count[pages]++] = a;
	tc->bytes += bytes;
	return true;
}

bool vmap_cache_push(struct vmap_shard *owner, uintptr_t a, uint64_t pages)
{
	if (pages > CACHE_MAX_PAGES)
		return false;
	struct vmap_tcache *tc = cache_get();
	if (!tc || tc->consumer || (int)owner->id != tc->home)
		return false;
	tc_enter(tc);
	bool kept = push_held(tc, owner, a, pages);
	tc_leave(tc);
	return kept;
}

void vmap_cache_drain_self(uint64_t stamp)
{
	struct vmap_tcache *tc = vmap_tc_state == VMAP_TC_ACTIVE ? vmap_tc : NULL;
	if (!tc || !tc->bytes)
		return;
	tc_enter(tc);
	drain_all(tc, stamp);
	tc_leave(tc);
}

void vmap_cache_thread_exit(void)
{
	struct vmap_tcache *tc = vmap_tc;
	vmap_tc_state = VMAP_TC_DEAD;
	vmap_tc = NULL;
	if (!tc)
		return;
	tc_enter(tc);
	drain_all(tc, vmap_os_now_ns());
	tc_leave(tc);
	vmap_lock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
	tc->next_free = cache_free_list;
	cache_free_list = tc;
	vmap_unlock(&cache_list_lock, VMAP_RANK_CACHE_LIST);
}

void vmap_cache_trim(void)
{
	__atomic_add_fetch(&vmap_trim_epoch, 1, __ATOMIC_RELAXED);
	if (vmap_tc_state == VMAP_TC_ACTIVE) {
		tc_enter(vmap_tc);
		check_epoch(vmap_tc);
		tc_leave(vmap_tc);
	}
}

/*
 * An idle pass, from the age purge (the calling thread's own cache) or the
 * purger thread (every thread's): a cache whose last operation is a delay
 * and a half old by the coarse clock (which may be half a delay behind at
 * that operation) is drained, its areas stamped as old so that the age purge
 * releases them at once: the memory of a thread that went quiet.  Another
 * thread's cache is reaped only where its lock protects it (vmap_cache_shared),
 * and only if the lock is free (held: its owner is using it).  The cache of
 * a thread that exited is empty (drained at exit); one left by a thread that
 * did not survive a fork is idle and gets reaped.
 */
void vmap_cache_idle_pass(uint64_t now, bool others)
{
	__atomic_store_n(&vmap_cache_clock_ns, now, __ATOMIC_RELAXED);
	if (!cache_on || (others && !vmap_cache_shared))
		return;
	uint64_t idle = vmap_opt.purge_delay_ms * 1500000ull;
	if (!others) {
		struct vmap_tcache *tc = vmap_tc_state == VMAP_TC_ACTIVE ? vmap_tc : NULL;
		if (tc && tc->bytes && now - tc->seen >= idle) {
			tc_enter(tc);
			drain_all(tc, 0);
			tc_leave(tc);
		}
		return;
	}
	for (struct vmap_tcache *tc = __atomic_load_n(&cache_all, __ATOMIC_ACQUIRE); tc;
	     tc = tc->next_all) {
		if (__atomic_exchange_n(&tc->lock, 1, __ATOMIC_ACQUIRE))
			continue;
		if (tc->bytes && now - tc->seen >= idle)
			drain_all(tc, 0);
		__atomic_store_n(&tc->lock, 0, __ATOMIC_RELEASE);
	}
}

uint64_t vmap_cache_pages_held(void)
{
	return vmap_tc_state == VMAP_TC_ACTIVE ? vmap_tc->bytes >> VMAP_PAGE_SHIFT : 0;
}
