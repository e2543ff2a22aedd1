/*
 * lock.c — the slow path of the futex mutex, and the debug rank checker.
 *
 * Slow path (Drepper, "Futexes are tricky", mutex 2): spin briefly while the
 * holder is likely running on the other core, then mark the lock contended
 * (2) and sleep in the kernel; unlock wakes one sleeper when it sees 2.
 */
#include "lock.h"

#include <errno.h>

#include "debug.h"
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

/* Every wait for any of vmapalloc's locks, and the ones that slept (the
 * report's "waits"): counted here, in the slow path, so that no lock's
 * waits go uncounted whoever takes it. */
static uint64_t lock_waits, lock_sleeps;

void vmap_lock_wait_counts(uint64_t *waits, uint64_t *sleeps)
{
	*waits = __atomic_load_n(&lock_waits, __ATOMIC_RELAXED);
	*sleeps = __atomic_load_n(&lock_sleeps, __ATOMIC_RELAXED);
}

void vmap_lock_slow(struct vmap_lock *l)
{
	__atomic_fetch_add(&lock_waits, 1, __ATOMIC_RELAXED);
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
		__atomic_fetch_add(&lock_sleeps, 1, __ATOMIC_RELAXED);
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

/* ---- the registry -------------------------------------------------------- */

#define MAX_SETS 16
static const struct vmap_lock_set *sets[MAX_SETS];
static unsigned nsets; /* published with release after its slot is written */

void vmap_lock_register(const struct vmap_lock_set *set)
{
	unsigned i = __atomic_fetch_add(&nsets, 0, __ATOMIC_RELAXED);
	for (;;) {
		if (i >= MAX_SETS) {
			vmap_say("internal error: too many lock sets for the fork handlers", NULL, NULL);
			vmap_os_abort();
		}
		/* Claim slot i by writing it first (NULL -> set), then count it. */
		const struct vmap_lock_set *none = NULL;
		if (__atomic_compare_exchange_n(&sets[i], &none, set, false, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			break;
		i++;
	}
	unsigned want = i;
	while (!__atomic_compare_exchange_n(&nsets, &want, i + 1, false, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		want = i; /* an earlier slot's owner counts first */
}

static unsigned set_count(const struct vmap_lock_set *s)
{
	return s->count ? __atomic_load_n(s->count, __ATOMIC_ACQUIRE) : 1;
}

static struct vmap_lock *set_lock(const struct vmap_lock_set *s, unsigned i)
{
	return (struct vmap_lock *)((char *)s->first + (size_t)i * s->stride);
}

/* The sets in rank order (stable: registration order within a rank), with
 * the count of each taken at prepare, so that parent and child release what
 * prepare took even if a count grew meanwhile (it cannot: every lock is
 * held, and a count grows under one of them). */
static __thread const struct vmap_lock_set *fork_sets[MAX_SETS];
static __thread unsigned fork_counts[MAX_SETS];
static __thread unsigned fork_nsets;

void vmap_locks_fork_prepare(void)
{
	unsigned n = __atomic_load_n(&nsets, __ATOMIC_ACQUIRE);
	unsigned k = 0;
	for (unsigned rank = VMAP_RANK_PURGE; rank <= VMAP_RANK_SLAB; rank++)
		for (unsigned i = 0; i < n; i++)
			if (sets[i]->rank == rank)
				fork_sets[k++] = sets[i];
	fork_nsets = k;
	for (unsigned j = 0; j < k; j++) {
		const struct vmap_lock_set *s = fork_sets[j];
		unsigned c = set_count(s);
		for (unsigned i = 0; i < c; i++)
			vmap_lock(set_lock(s, i), s->rank);
		fork_counts[j] = c;
	}
}

void vmap_locks_fork_parent(void)
{
	for (unsigned j = fork_nsets; j-- > 0;) {
		const struct vmap_lock_set *s = fork_sets[j];
		for (unsigned i = fork_counts[j]; i-- > 0;)
			vmap_unlock(set_lock(s, i), s->rank);
	}
}

void vmap_locks_fork_child(void)
{
	for (unsigned j = fork_nsets; j-- > 0;) {
		const struct vmap_lock_set *s = fork_sets[j];
		for (unsigned i = fork_counts[j]; i-- > 0;)
			vmap_lock_reset(set_lock(s, i));
	}
	vmap_lock_rank_reset();
}

/* ---- debug checks ------------------------------------------------------- */

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
_Noreturn void vmap_assert_fail(const char *cond, const char *file, int line)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_str(&b, "vmapalloc: internal error: ");
	vmap_buf_str(&b, cond);
	vmap_buf_str(&b, " is false at ");
	vmap_buf_str(&b, file);
	vmap_buf_char(&b, ':');
	vmap_buf_u64(&b, (uint64_t)line);
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
	vmap_os_abort();
}

void vmap_lock_assert_held(const struct vmap_lock *l, enum vmap_lock_rank rank)
{
	if (!__atomic_load_n(&l->word, __ATOMIC_RELAXED) || !(vmap_held_ranks & (1u << rank))) {
		vmap_say("internal error: a function that needs a lock was called without it", NULL,
			 NULL);
		vmap_os_abort();
	}
}
#endif
