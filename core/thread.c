/*
 * thread.c — what every layer knows of the calling thread: its re-entry
 * depth, its slab heap, the frees and munmaps a signal handler parked, and
 * whether a second thread ever called in.
 *
 * A signal handler can interrupt this thread anywhere in the range allocator
 * (holding a shard lock, half way through its thread cache) and call malloc,
 * free or mmap; so can a fork handler that runs while fork_prepare holds
 * every lock.  vmap_tls.reentry (thread.h) counts the range-path sections this
 * thread is in; a call that finds it non-zero takes no lock and touches no
 * range state:
 *  - a large allocation is mapped straight from the kernel: an "escape
 *    block", recorded in a small lock-free table so that free, realloc and
 *    malloc_usable_size recognise it later (from any context); small ones go
 *    to glibc, as they would without vmapalloc;
 *  - a free of an arena block is parked in this thread's deferred slots and
 *    done when the thread leaves its outermost section (or exits, or after
 *    fork); a free of an escape block is a munmap;
 *  - mmap goes to the kernel; munmap of arena pages is deferred (mmap.c).
 * The deferred slots are the thread's own: only a signal handler on the same
 * thread competes for them, so a slot is claimed with a compare-and-swap
 * (atomic against an interrupt) and drained only at depth 0, which no pusher
 * can interrupt.  Escape blocks are shared: any thread may free one.
 */
#include "thread.h"

#include <stdint.h>

#include "observe.h"
#include "section.h"

bool vmap_threads_seen;
struct vmap_thread_hooks vmap_thread_hooks VMAP_HOT; /* written by init */
bool vmap_profile_on VMAP_HOT;
struct vmap_observe vmap_observe;

__thread struct vmap_tls vmap_tls;

/* Frees made from a handler that interrupted a range section: one or two in
 * practice (a handler frees what it allocated, and that is an escape block). */
#define DEFER_SLOTS 8
struct deferred {
	uintptr_t a; /* 0: empty */
	size_t len;  /* 0: free(a); else munmap(a, len) */
};
static __thread struct deferred vmap_tls_defer[DEFER_SLOTS];

bool vmap_defer(void *p, size_t len)
{
	for (unsigned i = 0; i < DEFER_SLOTS; i++) {
		struct deferred *d = &vmap_tls_defer[i];
		uintptr_t z = 0;
		if (__atomic_load_n(&d->a, __ATOMIC_RELAXED))
			continue;
		/* len before the claim: a nested handler that takes the slot
		 * first rewrites len, and this claim then fails. */
		d->len = len;
		if (__atomic_compare_exchange_n(&d->a, &z, (uintptr_t)p, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			__atomic_fetch_or(&vmap_tls.reentry, VMAP_REENTRY_DEFERRED, __ATOMIC_RELAXED);
			return true;
		}
	}
	return false;
}

__attribute__((noinline, cold)) void vmap_reentry_leave_slow(void)
{
	if (vmap_tls.reentry == VMAP_REENTRY_DEFERRED)
		vmap_deferred_drain();
}

/* At depth 0 (leaving the outermost section, thread exit, after fork). */
__attribute__((noinline, cold)) void vmap_deferred_drain(void)
{
	vmap_depth_enter(); /* a handler that frees now parks its free too */
	while (__atomic_fetch_and(&vmap_tls.reentry, ~VMAP_REENTRY_DEFERRED, __ATOMIC_RELAXED) &
	       VMAP_REENTRY_DEFERRED) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		for (unsigned i = 0; i < DEFER_SLOTS; i++) {
			struct deferred *d = &vmap_tls_defer[i];
			uintptr_t a = __atomic_load_n(&d->a, __ATOMIC_RELAXED);
			if (!a)
				continue;
			size_t len = d->len;
			__atomic_store_n(&d->a, 0, __ATOMIC_RELAXED);
			vmap_thread_hooks.drain(a, len);
		}
	}
	/* Not vmap_depth_leave: that would come back here. */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	vmap_tls.reentry--;
}

