/*
 * alloc.h — the facade that preload/ calls: the malloc family with glibc's
 * contracts, routed to the small backend or the range allocator.
 */
#ifndef VMAP_ALLOC_H
#define VMAP_ALLOC_H

#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

void *vmap_malloc(size_t size);
void vmap_free(void *p);
void *vmap_calloc(size_t n, size_t size);
void *vmap_realloc(void *p, size_t size);
void *vmap_reallocarray(void *p, size_t n, size_t size);
int vmap_posix_memalign(void **out, size_t align, size_t size);
void *vmap_aligned_alloc(size_t align, size_t size);
void *vmap_memalign(size_t align, size_t size);
void *vmap_valloc(size_t size);
void *vmap_pvalloc(size_t size);
size_t vmap_usable_size(void *p);
int vmap_trim(size_t pad);
int vmap_mallopt(int param, int value);
struct mallinfo2 vmap_mallinfo2(void);
void vmap_malloc_stats(void);
int vmap_malloc_info(int options, FILE *fp);

/*
 * Re-entry (alloc.c, "re-entry"): how many range-allocator sections this
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
/* Together, so that the fast paths (alloc.c), which read both, load the
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

/* Life cycle. */
void vmap_init(void);            /* idempotent; every entry point calls it */
void vmap_init_at_start(void);   /* the library's constructor (see alloc.c) */
void vmap_at_exit(void);         /* the destructor: the report */
/* Around glibc's _Fork (preload/fork.c), which runs no fork handler: the
 * handlers fork() runs, when vmapalloc is initialised. */
void vmap_fork_hook_prepare(void);
void vmap_fork_hook_after(bool child);
/* Not the process's malloc (dlopen, or under a valgrind tool): everything
 * passes to glibc and the kernel (alloc.c go_inert).  Valid after init. */
bool vmap_is_inert(void);
/* The profile is on (vmap_profile_on set, sequentially consistent): every
 * malloc and free from now on takes the general path, which has the hooks. */
void vmap_fast_paths_off(void);
bool vmap_range_enabled(void);   /* the arena is set up (does not set it up) */
bool vmap_range_ready(void);     /* sets the arena up if need be; false if it cannot be had */

#endif
