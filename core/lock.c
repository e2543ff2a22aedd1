/*
 * lock.c — the slow path of the futex mutex, and the debug rank checker.
 *
 * Slow path (Drepper, "Futexes are tricky", mutex 2): spin briefly while the
 * holder is likely running on the other core, then mark the lock contended
 * (2) and sleep in the kernel; unlock wakes one sleeper when it sees 2.
 */
#include "lock.h"

#include <errno.h>

#include "fmt.h"

/*
 * An orphaned lock: held, and this thread, waiting for it, is the only one
 * in the process.  A waiter never holds the lock it waits for (a signal
 * handler that interrupts the holder takes no lock, alloc.h), so its holder
 * is a thread that does not exist here: the process is the child of a raw
 * clone(2) (or of any fork that ran no fork handler; _Fork has them, see
 * preload/fork.c), made while another thread of the parent held the lock.
 * Waiting would last for ever; the waiter takes the lock over, after
 * ORPHAN_TIMEOUTS waits of ORPHAN_WAIT_NS in a row without a wake-up (1 s:
 * a holder's critical section lasts microseconds), and says so once: what
 * the lock guarded may have been half updated by the vanished holder.
 * Costs nothing before the first timeout; after it, one read of
 * /proc/self/stat per timeout.  Not safe in a vfork (CLONE_VM) child, which
 * is alone in its process but shares the parent's memory and live lock
 * holders: one that mallocs (already wrong: it would change the parent's
 * heap through the parent thread's TLS) and waits a whole second for a
 * lock another thread of the parent holds would take it over too.
 */
#define ORPHAN_WAIT_NS (250u * 1000 * 1000)
#define ORPHAN_TIMEOUTS 4

static int orphan_said;

__attribute__((noinline, cold)) static void orphaned(void)
{
	if (!__atomic_exchange_n(&orphan_said, 1, __ATOMIC_RELAXED))
		vmap_say("a lock is held by a thread that does not exist in this process (a child "
			 "of clone() without fork handlers): taken over; ",
			 "allocator state the parent's thread was changing may be inconsistent", NULL);
}

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
	unsigned timeouts = 0;
	while (__atomic_exchange_n(&l->word, 2, __ATOMIC_ACQUIRE) != 0) {
		if (vmap_os_futex_wait_ns(&l->word, 2, ORPHAN_WAIT_NS) != -ETIMEDOUT) {
			timeouts = 0;
			continue;
		}
		if (++timeouts >= ORPHAN_TIMEOUTS && vmap_os_nthreads() == 1) {
			orphaned();
			return; /* ours now (2: the unlock wakes nobody, harmlessly) */
		}
	}
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
