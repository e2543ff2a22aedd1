/*
 * thread.h — the calling thread's state that every layer reads: the re-entry
 * depth and deferred work (signal handlers), the slab heap, and whether the
 * process ever had a second thread calling in.
 */
#ifndef VMAP_THREAD_H
#define VMAP_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Re-entry (thread.c): how many range-allocator sections this
 * thread is inside, and a bit set while a deferred free or munmap waits in
 * its slots.  A signal handler (or another library's fork handler, run while
 * fork_prepare holds every lock) that calls in while the depth is non-zero
 * must not touch the range allocator: it maps, defers or passes to the
 * kernel instead.  Only code that takes vmapalloc's locks or uses the thread
 * cache is bracketed, so the small path pays nothing.  One word, so that
 * leaving a section is one subtraction and one branch.
 */
struct vmap_heap;
struct vmap_tls {
	unsigned reentry;       /* the depth above, and VMAP_REENTRY_DEFERRED */
	struct vmap_heap *heap; /* the thread's slab heap (slab.h), NULL while it has none */
};
/* Together, so that the fast paths (fast.h), which read both, load the
 * thread's offset once. */
extern __thread struct vmap_tls vmap_tls;
#define VMAP_REENTRY_DEFERRED 0x80000000u
void vmap_reentry_leave_slow(void);
void vmap_deferred_drain(void);
/* Parks a free (len 0) or a munmap of arena pages until this thread leaves its
 * outermost section; false when its slots are full. */
bool vmap_defer(void *p, size_t len);

static inline bool vmap_reentered(void)
{
	return __builtin_expect((vmap_tls.reentry & ~VMAP_REENTRY_DEFERRED) != 0, 0);
}

/* Re-entered, or a free or munmap parked: the fast paths (fast.h) take the
 * general ones, which drain what is parked.  One compare with the word in
 * memory, and the section's entry then one increment of it: where the
 * fast paths masked the parked bit out, they loaded the word, tested it and
 * stored it incremented. */
static inline bool vmap_reentered_or_parked(void)
{
	return __builtin_expect(vmap_tls.reentry != 0, 0);
}

/* A section; nests.  The handler that competes runs on this thread, so a
 * compiler barrier orders it.  The increment and decrement are plain: a
 * handler only ever sets the DEFERRED bit (with an atomic or), and where the
 * compiler splits the decrement into a load and a store, a handler landing
 * in between can lose that bit: the parked free then waits for the next one
 * (x86-64 compiles it to one instruction, which an interrupt cannot split). */
static inline void vmap_depth_enter(void)
{
	vmap_tls.reentry++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void vmap_depth_leave(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(--vmap_tls.reentry != 0, 0))
		vmap_reentry_leave_slow(); /* still nested, or something was parked */
}

/* What a parked free or munmap becomes at depth 0: set by the facade at
 * init, before anything can be parked (thread.c calls no layer above it). */
struct vmap_thread_hooks {
	void (*drain)(uintptr_t a, size_t len); /* len 0: free(a); else munmap(a, len) */
};
extern struct vmap_thread_hooks vmap_thread_hooks;

/* A second thread called the allocator (set once, never cleared). */
extern bool vmap_threads_seen;

#endif
