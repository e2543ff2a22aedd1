/*
 * background.c — the purger thread (VMAPALLOC_BACKGROUND=1, off by default).
 *
 * Without it, cached memory goes back on the allocator's own calls: under
 * pressure at once, and by age on the first calls after the delay
 * (purge_policy.c, alloc.c's fold of every 128th call).  A program that frees a
 * burst of large blocks and then goes quiet -- a daemon between two
 * requests -- makes no such call, and keeps the cache until it wakes.  The
 * purger thread makes the calls for it: every half delay it runs
 * vmap_purge_background, the pressure check and, when due, the age purge,
 * which also drains the thread caches that saw no operation for a whole
 * interval (cache.c; their areas then go in the same purge).
 *
 *   state   NONE --kick--> RUNNING --exit--> STOPPED
 *             ^                |
 *             +----fork child--+   (the child has no thread until it caches)
 *
 * Started on the first large free (vmap_background_kick, from alloc.c with
 * no lock held and outside any section): a process that never caches a
 * large block never has one.  pthread_create is looked up like the other
 * pthread functions (init.c) and may allocate; the thread is created with
 * every signal blocked, so that no handler of the program runs on it.  Each
 * pass holds the background lock, which the fork handlers take first (rank
 * PURGE, registered before the thread exists): no pass is half done in a
 * child, and no thread cache is left locked there.  At exit (init.c) the
 * state goes to STOPPED under that lock: no pass runs after the exit
 * report has begun.
 *
 * Owns: the thread's state word (also its futex), the background lock.
 * Cost: one wake-up per half delay (1 s by default) while the process runs;
 * with it on, every thread-cache operation holds its cache's lock (cache.c).
 */
#include "background.h"

#include <gnu/lib-names.h>
#include <pthread.h>

#include "alloc_impl.h"
#include "backend.h"
#include "fmt.h"
#include "counter.h"
#include "lock.h"
#include "options.h"
#include "range.h"
#include "thread.h"

enum { BG_NONE = 0, BG_STARTING = 1, BG_RUNNING = 2, BG_STOPPED = 3, BG_FAILED = 4 };

static uint32_t bg_state;
static struct vmap_lock bg_lock = VMAP_LOCK_INIT;
static uint64_t bg_passes;

static void *bg_main(void *arg)
{
	(void)arg;
	vmap_os_thread_name("vmapalloc-purge");
	uint64_t period = vmap_opt.purge_delay_ms * 1000000ull / 2;
	if (period < 1000000ull)
		period = 1000000ull;
	for (;;) {
		vmap_os_futex_wait_ns(&bg_state, BG_RUNNING, period);
		vmap_lock(&bg_lock, VMAP_RANK_PURGE);
		if (__atomic_load_n(&bg_state, __ATOMIC_ACQUIRE) != BG_RUNNING) {
			vmap_unlock(&bg_lock, VMAP_RANK_PURGE);
			return NULL; /* stopped at exit */
		}
		vmap_depth_enter();
		vmap_purge_background(vmap_os_now_ns());
		vmap_depth_leave();
		__atomic_store_n(&bg_passes, bg_passes + 1, __ATOMIC_RELAXED);
		vmap_unlock(&bg_lock, VMAP_RANK_PURGE);
	}
}

__attribute__((noinline, cold)) static void bg_start(void)
{
	uint32_t none = BG_NONE;
	if (!__atomic_compare_exchange_n(&bg_state, &none, BG_STARTING, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return;
	static bool registered;
	if (!registered) {
		static const struct vmap_lock_set set = {"background purger", VMAP_RANK_PURGE,
							 &bg_lock, 0, NULL};
		vmap_lock_register(&set);
		registered = true;
	}
	int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) =
		(__typeof__(create))vmap_elf_symbol(LIBC_SO, "pthread_create");
	/* A second thread from now on: the fork handlers take the locks. */
	__atomic_store_n(&vmap_threads_seen, true, __ATOMIC_RELAXED);
	__atomic_store_n(&bg_state, BG_RUNNING, __ATOMIC_RELEASE);
	uint64_t mask;
	bool blocked = vmap_os_block_signals(&mask) == 0;
	pthread_t t;
	if (!create || create(&t, NULL, bg_main, NULL) != 0) {
		__atomic_store_n(&bg_state, BG_FAILED, __ATOMIC_RELEASE);
		vmap_say("cannot start the purger thread (VMAPALLOC_BACKGROUND=1): ",
			 "cached memory goes back on the allocator's calls only", NULL);
	}
	if (blocked)
		vmap_os_set_signals(&mask);
}

void vmap_background_kick(void)
{
	if (__atomic_load_n(&bg_state, __ATOMIC_RELAXED) == BG_NONE &&
	    vmap_opt.purge_delay_ms && !vmap_reentered())
		bg_start();
}

VMAP_START_TEXT void vmap_background_stop(void)
{
	uint32_t s = __atomic_load_n(&bg_state, __ATOMIC_ACQUIRE);
	if (s != BG_RUNNING)
		return;
	vmap_lock(&bg_lock, VMAP_RANK_PURGE);
	__atomic_store_n(&bg_state, BG_STOPPED, __ATOMIC_RELEASE);
	vmap_unlock(&bg_lock, VMAP_RANK_PURGE);
	vmap_os_futex_wake(&bg_state, 1);
}

void vmap_background_fork_child(void)
{
	/* The thread did not survive the fork; the child starts its own when it
	 * caches a large block (its lock was reset with the others). */
	if (__atomic_load_n(&bg_state, __ATOMIC_RELAXED) == BG_RUNNING) {
		__atomic_store_n(&bg_state, BG_NONE, __ATOMIC_RELAXED);
		__atomic_store_n(&bg_passes, 0, __ATOMIC_RELAXED);
	}
}

bool vmap_background_running(uint64_t *passes)
{
	*passes = __atomic_load_n(&bg_passes, __ATOMIC_RELAXED);
	return __atomic_load_n(&bg_state, __ATOMIC_RELAXED) == BG_RUNNING;
}
