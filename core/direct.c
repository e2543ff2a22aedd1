/*
 * direct.c — what the slabs' fast paths (fast.h) call when they do not
 * serve: with BACKEND=libc or mimalloc, where one allocator serves every
 * small size, straight to it; everything else on to the general paths
 * (alloc.c vmap_malloc_general, vmap_free_general).  And the fast paths'
 * rare exits, and vmap_malloc/vmap_free themselves.
 *
 * Owns nothing: the mode it reads (vmap_direct_limit, vmap_direct_to) is
 * init.c's, mimalloc's functions backend_mimalloc.c's.
 *
 * Invariants: the same contracts as the general paths: init before the
 * first call (the direct paths are off until it is done), every call counted
 * (one direct kind per call, which the fold turns into malloc_calls /
 * free_calls, small_allocs / small_frees and the serving allocator's own),
 * a thread's first call registered (direct_tick), errno kept by free; with the
 * profile on, vmap_direct_limit and vmap_direct_to are 0 and every call
 * takes the general path, which records it.  Apart from alloc.c so that
 * these stay small functions that save few registers; the direct frees need
 * no frame.  Instructions per 64-byte malloc/free pair (bench/pairs.sh
 * --backends): libc 201, mimalloc 175 (glibc alone 142, mimalloc alone
 * 119); a free of mimalloc's out of its range (backend_mimalloc.c) asks
 * mimalloc's segment map, 21 more.
 *
 * Called by: fast.h (preload/shim.c's malloc and free, and vmap_malloc and
 * vmap_free here); alloc.c's own frees and mallocs (realloc) take the
 * general paths directly.
 */
#include "alloc_impl.h"

#include <string.h>

#include "express.h"
#include "fast.h"
#include "profile.h"
#include "pte.h"

/* One add per call served directly; the thread's first call and every
 * VMAP_LOCAL_BATCH-th go out of line, where enter() does what a thread's
 * first call needs (init itself is done: the direct paths are off until
 * then) before the fold. */
__attribute__((noinline, cold)) static void direct_tick(void)
{
	enter();
	vmap_fold_and_tick();
}

/* Counts a call of kind k; true when the fold is due. */
static inline bool direct_add(enum vmap_direct_kind k)
{
	vmap_local.direct[k]++;
	return __builtin_expect(--vmap_local.budget < 0, 0);
}

/* A mimalloc malloc's turn to tick: its block, one in VMAP_LOCAL_BATCH,
 * says where mimalloc is placing blocks.  From the range's last segment:
 * every 32nd such of a thread's asks for the range to grow
 * (backend_mimalloc.c) before mimalloc runs out of room and refuses. */
__attribute__((noinline, cold)) static void direct_tick_mi(const void *p)
{
	static __thread unsigned n;
	direct_tick();
	if (!vmap_mi_in_room(p) && !(++n & 31))
		vmap_mimalloc_grow(false);
}

/* A large block from the thread's cache by the express path, else the
 * general path.  Re-entered, parked or profiling: the general path, which
 * knows what to do. */
__attribute__((noinline)) static void *malloc_large(size_t size)
{
	if (!vmap_reentered_or_parked() && !vmap_profile_on) {
		vmap_depth_enter();
		void *p = vmap_express_alloc(size);
		vmap_depth_leave();
		if (p) {
			count(VMAP_STAT_malloc_calls);
			return p;
		}
	}
	return vmap_malloc_general(size);
}

/* p, a pointer of region r outside its slabs: freed by the express path
 * when it is a block the thread's cache takes; else the general path (which
 * also knows the rest: an escape block, a lent chunk's pointer, a handler's
 * free, the profile). */
static inline void free_arena(void *p, struct vmap_region *r)
{
	if (!vmap_reentered_or_parked() && !vmap_profile_on &&
	    __atomic_load_n(&vmap_escape_live, __ATOMIC_RELAXED) == 0) {
		vmap_depth_enter();
		bool done = vmap_express_free(p, r);
		vmap_depth_leave();
		if (done) {
			count(VMAP_STAT_free_calls);
			return;
		}
	}
	vmap_free_general(p);
}

/* From free's fast path: p lies in the first region, in no slab. */
__attribute__((noinline)) void vmap_free_large(void *p)
{
	free_arena(p, &vmap_regions[0]);
}

/* Any other pointer the fast path does not take. */
__attribute__((noinline)) static void free_other(void *p)
{
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	if (r && !vmap_slab_of(r, (uintptr_t)p))
		free_arena(p, r);
	else
		vmap_free_general(p);
}

__attribute__((noinline)) void *vmap_malloc_slow(size_t size)
{
	if (size - 1 < __atomic_load_n(&vmap_direct_limit, __ATOMIC_ACQUIRE)) {
		if (vmap_direct_to == VMAP_DIRECT_MI) {
			void *p = vmap_mi.malloc(vmap_mi_size(size));
			if (__builtin_expect(p != NULL, 1)) {
				if (direct_add(VMAP_DIRECT_MI_MALLOC))
					direct_tick_mi(p);
				return p;
			}
		} else {
			void *p = vmap_libc.malloc(size);
			if (__builtin_expect(p != NULL, 1)) {
				if (direct_add(VMAP_DIRECT_GLIBC_MALLOC))
					direct_tick();
				return p;
			}
		}
	}
	if (size > __atomic_load_n(&vmap_large_above, __ATOMIC_RELAXED) && size <= VMAP_EXPRESS_MAX)
		return malloc_large(size);
	return vmap_malloc_general(size);
}

/* A direct free, counted: its turn to tick first, out of line, so that the
 * free is a tail call either way and the path needs no frame. */
__attribute__((noinline, cold)) static void direct_free_tick(void *p, void (*fn)(void *))
{
	direct_tick();
	fn(p);
}

static inline void direct_free(enum vmap_direct_kind k, void (*fn)(void *), void *p)
{
	if (direct_add(k))
		return direct_free_tick(p, fn);
	fn(p);
}

/* Out of mimalloc's range: mimalloc's block (in an arena it reserved
 * itself: never the arena's), asked by its segment map, or an arena or
 * escape block, or a foreign pointer. */
__attribute__((noinline)) static void direct_free_mi(void *p)
{
	if (vmap_mi.owns(p))
		return direct_free(VMAP_DIRECT_MI_FREE, vmap_mi.free, p);
	vmap_free_general(p);
}

__attribute__((noinline)) void vmap_free_slow(void *p)
{
	if (!p)
		return;
	unsigned to = __atomic_load_n(&vmap_direct_to, __ATOMIC_ACQUIRE);
	if (to == VMAP_DIRECT_MI) {
		if (vmap_mi_in_range(p)) /* mimalloc's, with no look-up */
			return direct_free(VMAP_DIRECT_MI_FREE, vmap_mi.free, p);
		return direct_free_mi(p);
	}
	/* glibc's block (or no block: glibc stops the program), unless it is
	 * in the arena or an escape block. */
	if (to == VMAP_DIRECT_GLIBC && !vmap_region_of((uintptr_t)p) &&
	    __atomic_load_n(&vmap_escape_live, __ATOMIC_RELAXED) == 0)
		return direct_free(VMAP_DIRECT_GLIBC_FREE, vmap_libc.free, p);
	free_other(p);
}

/* The fast paths (fast.h) and their rare exits, out of line so that the fast
 * paths themselves save no register: leaving a section with something
 * parked, or with the class's current slab empty, or with a slab to move. */
__attribute__((noinline, cold)) void *vmap_malloc_fast_leave(struct vmap_heap *h, void *o)
{
	vmap_reentry_leave_slow();
	__atomic_store_n(&h->fast_mallocs, h->fast_mallocs + 1, __ATOMIC_RELAXED);
	return o;
}

__attribute__((noinline)) void *vmap_malloc_refill(size_t size)
{
	vmap_reentry_leave_slow();
	return vmap_malloc_slow(size);
}

/* The class's current slab ran dry, nothing parked: the heap refills it
 * (collects, carves, takes a partial slab, the spare, an abandoned one, or a
 * new one) without the general path's tests, which the fast path made; no
 * slab to be had: the general path (glibc). */
__attribute__((noinline)) void *vmap_malloc_fast_refill(struct vmap_heap *h, size_t size)
{
	void *p = vmap_slab_take(h, vmap_slab_class_fast(size));
	if (__builtin_expect(p == NULL, 0))
		return vmap_malloc_slow(size);
	__atomic_store_n(&h->fast_mallocs, h->fast_mallocs + 1, __ATOMIC_RELAXED);
	return p;
}

/* A free into another thread's slab (or an exited thread's: taken over,
 * slab_heap.c), which the fast path found: checked and pushed onto the
 * slab's remote stack without looking the address up again. */
__attribute__((noinline)) void vmap_free_remote(void *p, struct vmap_slab *d)
{
	count3(VMAP_STAT_free_calls, VMAP_STAT_small_frees, VMAP_STAT_small_slab_frees);
	vmap_slab_remote_free(d, vmap_slab_mark_free(d, p, "free"));
}

__attribute__((noinline, cold)) void vmap_free_fast_leave(struct vmap_heap *h)
{
	vmap_reentry_leave_slow();
	__atomic_store_n(&h->fast_frees, h->fast_frees + 1, __ATOMIC_RELAXED);
}

/* A slab changing lists (full -> partial, partial -> given back), then the
 * same exit. */
__attribute__((noinline)) void vmap_free_fast_move(struct vmap_heap *h, struct vmap_slab *d)
{
	vmap_slab_owner_free_slow(h, d);
	vmap_depth_leave();
	__atomic_store_n(&h->fast_frees, h->fast_frees + 1, __ATOMIC_RELAXED);
}

__attribute__((noinline)) void *vmap_fast_malloc_step(struct vmap_heap *h, void *o)
{
	h->mallocs_left = VMAP_HEAP_STEP;
	__atomic_store_n(&h->fast_mallocs, h->fast_mallocs + VMAP_HEAP_STEP, __ATOMIC_RELAXED);
	vmap_fold_and_tick();
	return o;
}

__attribute__((noinline)) void vmap_fast_free_step(struct vmap_heap *h)
{
	h->frees_left = VMAP_HEAP_STEP;
	__atomic_store_n(&h->fast_frees, h->fast_frees + VMAP_HEAP_STEP, __ATOMIC_RELAXED);
}

__attribute__((noinline)) void *vmap_fast_kind_step(void *o, enum vmap_fast_kind k, size_t zero)
{
	struct vmap_heap *h = vmap_tls.heap;
	h->kinds_left[k] = VMAP_HEAP_STEP;
	__atomic_store_n(&h->fast_kinds[k], h->fast_kinds[k] + VMAP_HEAP_STEP, __ATOMIC_RELAXED);
	vmap_fold_and_tick();
	return zero ? memset(o, 0, zero) : o;
}

__attribute__((noinline, cold)) void *vmap_fast_pop_leave(void *o, enum vmap_fast_kind k, size_t zero)
{
	vmap_reentry_leave_slow();
	if (--vmap_tls.heap->kinds_left[k] == 0)
		return vmap_fast_kind_step(o, k, zero);
	return zero ? memset(o, 0, zero) : o;
}

__attribute__((noinline, cold)) void *vmap_fast_pop_empty(void *(*miss)(size_t a, size_t b), size_t a,
							   size_t b)
{
	vmap_reentry_leave_slow();
	return miss(a, b);
}

__attribute__((noinline, cold)) void *vmap_fast_corrupt(void *next)
{
	vmap_slab_die("malloc", next, "heap corruption: a freed object was overwritten");
}

/* Stops the program with the line of the check that failed. */
__attribute__((noinline, cold)) void vmap_fast_bad_free(struct vmap_slab *d, void *p)
{
	vmap_slab_mark_free(d, p, "free");
	vmap_slab_die("free", p, "not the start of a block"); /* (the check failed above) */
}

void *vmap_malloc(size_t size)
{
	return vmap_fast_malloc(size);
}

void vmap_free(void *p)
{
	vmap_fast_free(p);
}
