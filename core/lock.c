/*
 * lock.c — the slow path of the futex mutex, and the debug rank checker.
 *
 * Slow path (Drepper, "Futexes are tricky", mutex 2): spin briefly while the
 * holder is likely running on the other core, then mark the lock contended
 * (2) and sleep in the kernel; unlock wakes one sleeper when it sees 2.
 */
#include "lock.h"

#include "fmt.h"

void vmap_lock_slow(struct vmap_lock *l)
{
	for (int spin = 0; spin < 100; spin++) {
#if defined(__x86_64__)
		__builtin_ia32_pause();
#endif
		uint32_t z = 0;
		if (__atomic_load_n(&l->word, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(&l->word, &z, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
	}
	while (__atomic_exchange_n(&l->word, 2, __ATOMIC_ACQUIRE) != 0)
		vmap_os_futex_wait(&l->word, 2);
}

#ifdef VMAP_DEBUG
static __thread unsigned vmap_held_ranks;
static __thread unsigned vmap_held_count[8];

void vmap_lock_rank_acquire(enum vmap_lock_rank rank)
{
	/* Same rank twice is allowed only for shards taken in index order
	 * (fork_prepare); anything of a higher rank held is an inversion. */
	if (vmap_held_ranks >> (rank + 1)) {
		vmap_say("lock rank violation: taking a lower-ranked lock while holding a higher one",
			 NULL, NULL);
		vmap_os_abort();
	}
	vmap_held_ranks |= 1u << rank;
	vmap_held_count[rank]++;
}

void vmap_lock_rank_reset(void)
{
	vmap_held_ranks = 0;
	for (int i = 0; i < 8; i++)
		vmap_held_count[i] = 0;
}

void vmap_lock_rank_release(enum vmap_lock_rank rank)
{
	if (--vmap_held_count[rank] == 0)
		vmap_held_ranks &= ~(1u << rank);
}
#endif
