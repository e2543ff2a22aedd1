/*
 * lock.h — vmapalloc's one lock type and the lock ranks.
 *
 * A three-state futex mutex (0 free, 1 locked, 2 locked with waiters): one
 * atomic exchange to take it uncontended, a short spin, then a futex sleep so
 * that 64 threads on 2 cores do not burn their time slices spinning.
 *
 * Ranks: a thread that holds a lock of rank r takes only locks of a higher
 * rank.  Every lock is in one registry (vmap_lock_register), which the fork
 * handlers walk: they take every lock in rank order before fork and release
 * (parent) or reset (child) them after.  Debug builds (VMAP_DEBUG) check the
 * order with a per-thread bitmask, and vmap_lock_assert_held checks the
 * promise of every function named _locked.
 */
#ifndef VMAP_LOCK_H
#define VMAP_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "os.h"

enum vmap_lock_rank {
	VMAP_RANK_PURGE = 0,   /* the one purger (trylock only) */
	VMAP_RANK_SHARD = 1,   /* per-shard: pools, free extents, chunk carving */
	VMAP_RANK_GLOBAL = 2,  /* the arena's chunk map and region list */
	VMAP_RANK_CACHE_LIST = 3, /* recycled per-thread caches */
	VMAP_RANK_PROFILE = 4, /* profile.c: site inserts and live-pointer stripes (leaf) */
	VMAP_RANK_SLAB = 5,    /* slab.c: heap recycling, abandoned slabs (leaf) */
};

struct vmap_lock {
	volatile uint32_t word;
};

#define VMAP_LOCK_INIT {0}

#ifdef VMAP_DEBUG
void vmap_lock_rank_acquire(enum vmap_lock_rank rank);
void vmap_lock_rank_release(enum vmap_lock_rank rank);
/* In a fork child: the locks were reset, so is this thread's record of them. */
void vmap_lock_rank_reset(void);
#else
static inline void vmap_lock_rank_acquire(enum vmap_lock_rank rank) { (void)rank; }
static inline void vmap_lock_rank_release(enum vmap_lock_rank rank) { (void)rank; }
static inline void vmap_lock_rank_reset(void) {}
#endif

void vmap_lock_slow(struct vmap_lock *l);
/* Waits for any lock since start (a slow path entered), and sleeps in them. */
void vmap_lock_wait_counts(uint64_t *waits, uint64_t *sleeps);

/* Debug builds: the lock is held and this thread holds a lock of its rank
 * (the registry of ranks is per thread; owners are not recorded).  Aborts
 * with one line otherwise. */
#ifdef VMAP_DEBUG
void vmap_lock_assert_held(const struct vmap_lock *l, enum vmap_lock_rank rank);
#else
static inline void vmap_lock_assert_held(const struct vmap_lock *l, enum vmap_lock_rank rank)
{
	(void)l;
	(void)rank;
}
#endif

/*
 * The registry.  A module registers each of its locks, or an array of them,
 * once, before the first time it takes one (its set-up); the set is static
 * and stays registered.  For an array, count points at the number in use,
 * read at every fork (shards are set up after registration).  Within a rank,
 * sets are taken in the order of registration and an array in index order.
 */
struct vmap_lock_set {
	const char *name;
	enum vmap_lock_rank rank;
	struct vmap_lock *first;
	size_t stride;         /* bytes from one lock of the array to the next */
	const unsigned *count; /* NULL: one lock */
};
void vmap_lock_register(const struct vmap_lock_set *set);
/* The fork handlers' part: every registered lock, in rank order. */
void vmap_locks_fork_prepare(void);
void vmap_locks_fork_parent(void);
void vmap_locks_fork_child(void);

/* Returns true if the lock was contended (someone else held it). */
static inline bool vmap_lock(struct vmap_lock *l, enum vmap_lock_rank rank)
{
	vmap_lock_rank_acquire(rank);
	uint32_t z = 0;
	if (__atomic_compare_exchange_n(&l->word, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return false;
	vmap_lock_slow(l);
	return true;
}

static inline bool vmap_trylock(struct vmap_lock *l, enum vmap_lock_rank rank)
{
	uint32_t z = 0;
	if (!__atomic_compare_exchange_n(&l->word, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return false;
	vmap_lock_rank_acquire(rank);
	return true;
}

static inline void vmap_unlock(struct vmap_lock *l, enum vmap_lock_rank rank)
{
	vmap_lock_rank_release(rank);
	if (__atomic_exchange_n(&l->word, 0, __ATOMIC_RELEASE) == 2)
		vmap_os_futex_wake(&l->word, 1);
}

/* After fork, in the child: the lock is simply free (its holders are gone). */
static inline void vmap_lock_reset(struct vmap_lock *l)
{
	__atomic_store_n(&l->word, 0, __ATOMIC_RELAXED);
}

#endif
