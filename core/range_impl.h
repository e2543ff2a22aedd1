/*
 * range_impl.h — what the files of the large allocator share among
 * themselves and no one else: the arena's variables, the free-run and pool
 * helpers the layers above them call, and the small inline helpers they all
 * use.  range.h is the layer's interface to the rest of the core.
 *
 *   large.c, move.c, range_check.c    alloc/free/resize, moves, the check
 *        |            cache.c, purge_policy.c, purge.c (thread caches, the
 *        |            lazy purge: when, and how)
 *        v
 *   pool.c    runs.c    vm.c          per-size pools, free runs, page states
 *        \       |      /
 *         arena.c                     regions, chunks, shards
 *
 * Arrows point down: a file calls only files below it (scripts/check-layers).
 */
#ifndef VMAP_RANGE_IMPL_H
#define VMAP_RANGE_IMPL_H

#include "range.h"

#include <errno.h>
#include <sys/mman.h>

#include "counter.h"
#include "fmt.h"
#include "options.h"
#include "observe.h"
#include "section.h"
#include "thread.h"

/* The smallest region worth reserving: a smaller one is not an arena.  Under
 * a tight RLIMIT_AS (2 MiB chunks, tight.c) four chunks still are: large
 * blocks of a few MiB and slabs. */
#define REGION_FLOOR ((size_t)256 << 20)
#define REGION_FLOOR_TIGHT ((size_t)8 << 20)

static inline bool vmap_arena_tight(void)
{
	return VMAP_CHUNK_SHIFT == VMAP_CHUNK_SHIFT_TIGHT;
}

static inline size_t vmap_region_floor(void)
{
	return vmap_arena_tight() ? REGION_FLOOR_TIGHT : REGION_FLOOR;
}

uintptr_t vmap_chunks_acquire(struct vmap_shard *s, bool big, size_t n);
/* arena.c's chunks for tight.c (global lock held): the room RLIMIT_AS leaves
 * (claim: chunks; reserve: a new region), the unclaimed gauge, the claim of
 * given chunks, their THP advice, lent chunks taken back. */
struct vmap_as_room {
	uint64_t claim, reserve;
};
struct vmap_as_room vmap_as_room_locked(void);
void vmap_unclaimed_add(unsigned cpu, int64_t d);
bool vmap_chunks_take_locked(struct vmap_region *r, size_t first, size_t n, unsigned shard,
			     bool big, bool *unadvise);
void vmap_chunks_advise(uintptr_t a, size_t n, bool big, bool unadvise);
bool vmap_chunks_unlend_locked(struct vmap_region *r, size_t first, size_t n);
/* tight.c: the chunks after a block that realloc grows in place. */
void vmap_tight_room_after(struct vmap_shard *s, struct vmap_region *r, uintptr_t end,
			   uint64_t extra, bool big);
uint64_t vmap_proc_vsize(void);
int vmap_region_add(size_t want, size_t at_least);
extern size_t vmap_shards_bytes;
extern size_t vmap_reserve_size;
extern struct vmap_lock vmap_global_lock;
extern bool vmap_moves_refused;
extern uint64_t vmap_moves;
uintptr_t vmap_carve_locked(struct vmap_shard *s, bool *big, uint64_t pages, size_t align,
			      unsigned *state_out, uint64_t *resident_out, bool resident_only,
			      bool low);
uintptr_t vmap_run_find(struct vmap_shard *s, unsigned li, uint64_t pages, size_t align,
			bool low);
bool vmap_run_mergeable(uint64_t t, unsigned shard, bool big, unsigned state);
/* The free run of s and kind big that ends right before a / starts at a,
 * and its *state; or 0. */
uintptr_t vmap_run_before(struct vmap_shard *s, struct vmap_region *r, uintptr_t a, bool big,
			 unsigned *state);
uintptr_t vmap_run_at(struct vmap_shard *s, struct vmap_region *r, uintptr_t a, bool big,
		     unsigned *state);
void vmap_guard_page(uintptr_t area, uint64_t pages, int advice);
extern bool vmap_guard_on;
void vmap_pools_to_runs_locked(struct vmap_shard *s);
size_t vmap_fit_reservation(size_t want, bool *tight);
unsigned vmap_tight_setup(unsigned n);
struct vmap_pte *vmap_live_pte(const void *p, const char *who, uint64_t *tag,
				 struct vmap_region **region);

/* The counters of a large block made (its usable bytes: all but the guard),
 * added quietly: the caller counts the event. */
static inline void vmap_count_large_alloc_quiet(int64_t usable)
{
	vmap_stat_add_quiet(VMAP_STAT_large_allocs, 1);
	vmap_stat_add_quiet(VMAP_STAT_large_blocks_in_use, 1);
	vmap_stat_add_quiet(VMAP_STAT_large_bytes_allocated, usable);
	vmap_stat_add_quiet(VMAP_STAT_large_bytes_in_use, usable);
}

/* The same for a large block freed. */
static inline void vmap_count_large_free_quiet(int64_t usable)
{
	vmap_stat_add_quiet(VMAP_STAT_large_frees, 1);
	vmap_stat_add_quiet(VMAP_STAT_large_blocks_in_use, -1);
	vmap_stat_add_quiet(VMAP_STAT_large_bytes_in_use, -usable);
}

/* A large block freed, with whatever the caller added quietly before: one
 * event. */
static inline void vmap_count_large_free(int64_t usable)
{
	vmap_count_large_free_quiet(usable);
	vmap_stat_local_event();
}

static inline unsigned log2_floor(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* After large_bytes_in_use grew: in atomic mode the peak is noted here, from
 * the base and this thread's unfolded delta.  Per-CPU mode notes it at folds,
 * which a block of tens of MiB that lives between two folds escapes: then the
 * purge's limit, which may grow to twice the peak, stayed at its start and
 * every free of such a block purged it (a purge and a refault per growth
 * cycle of a growing realloc).  Blocks of 8 MiB and more (rare, and costing
 * thousands of page touches each) read the counter exactly. */
static inline void vmap_note_peak(uint64_t pages)
{
	if (!vmap_counter_slots)
		vmap_stat_note_peak(vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
				    vmap_local.n[VMAP_STAT_large_bytes_in_use]);
	else if (pages >= (8u << 20) >> VMAP_PAGE_SHIFT)
		vmap_stat_note_peak(vmap_stat_read(VMAP_STAT_large_bytes_in_use));
}

/* Frees kept in a thread's cache (large.c, express.c): the age purge is looked
 * at on every 64th. */
extern __thread uint32_t vmap_cached_frees VMAP_HIDDEN;

/*
 * A freed area with a resident free run of its shard and kind just before or
 * after it (tags read without the lock: a hint).  Such an area goes to the
 * free runs at once, past the thread cache and the exact-size pools: merged,
 * it serves any size, where kept whole it waits for its own size while the
 * run beside it stays too small for the larger requests, which then take
 * fresh memory.  Repeated sizes are unaffected: their neighbours are live
 * or pooled areas, not free runs.
 */
static inline bool vmap_beside_resident_run(struct vmap_region *r, struct vmap_pte *e, uintptr_t a,
				uint64_t pages, uint64_t t)
{
	unsigned shard = vmap_tag_shard(t);
	bool big = t & VMAP_TAG_BIG;
	if (a > r->base) {
		uint64_t lt = __atomic_load_n(&e[-1].tag, __ATOMIC_RELAXED);
		unsigned st = vmap_tag_state(lt);
		if ((st == VMAP_ST_FREE_TAIL || (st == VMAP_ST_FREE && vmap_tag_pages(lt) == 1)) &&
		    vmap_run_mergeable(lt, shard, big, VMAP_RUN_DIRTY))
			return true;
	}
	if (a + (pages << VMAP_PAGE_SHIFT) < r->base + r->size) {
		uint64_t rt = __atomic_load_n(&e[pages].tag, __ATOMIC_RELAXED);
		if (vmap_tag_state(rt) == VMAP_ST_FREE && vmap_run_mergeable(rt, shard, big, VMAP_RUN_DIRTY))
			return true;
	}
	return false;
}

static inline void publish_live(struct vmap_pte *e, unsigned shard, uint64_t pages, bool big)
{
	__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_LIVE, shard, pages, big ? VMAP_TAG_BIG : 0),
			 __ATOMIC_RELEASE);
}

/* shard->cached_bytes and pool[].count are written under the shard lock and
 * read without it as hints (purge.c collect, the pool checks before taking
 * the lock): relaxed atomic stores, plain moves on x86-64 and arm64, so that
 * those reads are not data races. */
static inline void cached_add(struct vmap_shard *s, uint64_t d)
{
	__atomic_store_n(&s->cached_bytes, s->cached_bytes + d, __ATOMIC_RELAXED);
}

static inline unsigned bin_of(uint64_t pages)
{
	unsigned b = log2_floor(pages);
	return b < VMAP_FREE_BINS ? b : VMAP_FREE_BINS - 1;
}

static inline unsigned list_of(bool big, unsigned state)
{
	return vmap_run_list(big, state);
}

/* An upper bound of the largest area cached, in pages, read without the
 * shard locks (the bin masks are stored relaxed): pooled areas have at most
 * vmap_pool_exact pages, thread-cached ones at most VMAP_CACHE_MAX_PAGES, resident
 * runs of bin b (dirty or protected) fewer than 2^(b+1). */
static inline uint64_t vmap_cached_area_bound(void)
{
	uint64_t bound = vmap_pool_exact > VMAP_CACHE_MAX_PAGES ? vmap_pool_exact
							 : VMAP_CACHE_MAX_PAGES;
	for (unsigned i = 0; i < vmap_nshards; i++)
		for (unsigned k = 0; k < 4; k++) {
			unsigned li = list_of(k & 1, k < 2 ? VMAP_RUN_DIRTY : VMAP_RUN_PROTECTED);
			uint64_t m = __atomic_load_n(&vmap_shards[i].free_bin_mask[li], __ATOMIC_RELAXED);
			if (m && (2ull << log2_floor(m)) > bound)
				bound = 2ull << log2_floor(m);
		}
	return bound;
}

/* Whether runs in states a and b merge when they touch: when they are the
 * same.  (A zero run between two guarded runs joins them: runs.c.) */
static inline bool states_merge(unsigned a, unsigned b)
{
	return a == b;
}


#endif
