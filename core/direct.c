/*
 * direct.c — what the slabs' fast paths (fast.h) call when they do not
 * serve: with BACKEND=libc or mimalloc, where one allocator serves every
 * small size, straight to it; everything else on to the general paths
 * (alloc.c vmap_malloc_general, vmap_free_general).  And the fast paths'
 * rare exits, and vmap_malloc/vmap_free themselves.
 *
 * Owns nothing: the mode it reads (vmap_direct_limit, vmap_direct_mi) is
 * init.c's, mimalloc's functions backend_mimalloc.c's.
 *
 * Invariants: the same contracts as the general paths: init on the first
 * call (enter), every call counted (malloc_calls / free_calls, small_allocs /
 * small_frees, and the serving allocator's own), errno kept by free; with the
 * profile on, vmap_direct_limit is 0 and mimalloc's frees take the general
 * path, which records them.  Apart from alloc.c so that these stay small
 * functions that save few registers: instructions per 64-byte malloc/free
 * pair (bench/pairs.sh --backends): libc 270 -> 243 with glibc's free here
 * too, mimalloc 223 (322 and 240 through the general paths; glibc alone
 * 142, mimalloc alone 119).
 *
 * Called by: fast.h (preload/shim.c's malloc and free, and vmap_malloc and
 * vmap_free here); alloc.c's own frees and mallocs (realloc) take the
 * general paths directly.
 */
#include "alloc_impl.h"

#include "fast.h"
#include "profile.h"
#include "pte.h"

/* Init and a thread's first call go through enter() on either path: the
 * limit is 0 until init has set a direct backend up. */
__attribute__((noinline)) void *vmap_malloc_slow(size_t size)
{
	if (size - 1 < __atomic_load_n(&vmap_direct_limit, __ATOMIC_ACQUIRE)) {
		enter();
		bool mi = vmap_direct_mi;
		void *p = mi ? vmap_mi.malloc(vmap_mi_size(size)) : vmap_libc.malloc(size);
		if (__builtin_expect(p != NULL, 1)) {
			count3(VMAP_STAT_malloc_calls, VMAP_STAT_small_allocs,
			       mi ? VMAP_STAT_small_mimalloc_allocs : VMAP_STAT_small_glibc_allocs);
			return p;
		}
	}
	return vmap_malloc_general(size);
}

__attribute__((noinline)) void vmap_free_slow(void *p)
{
	if (!p)
		return;
	/* mimalloc's block (its segments are never the arena's, an escape
	 * block or a foreign pointer): asked first, only once it is loaded. */
	if (vmap_mi_owns(p) && !__builtin_expect(vmap_profile_on, 0)) {
		enter();
		count3(VMAP_STAT_free_calls, VMAP_STAT_small_frees, VMAP_STAT_small_mimalloc_frees);
		vmap_mi.free(p);
		return;
	}
	/* BACKEND=libc: glibc's block (or no block: glibc stops the program),
	 * unless it is in the arena or an escape block. */
	if (__atomic_load_n(&vmap_direct_limit, __ATOMIC_ACQUIRE) && !vmap_direct_mi &&
	    !vmap_region_of((uintptr_t)p) &&
	    __atomic_load_n(&vmap_escape_live, __ATOMIC_RELAXED) == 0) {
		enter();
		count3(VMAP_STAT_free_calls, VMAP_STAT_small_frees, VMAP_STAT_small_glibc_frees);
		vmap_libc.free(p);
		return;
	}
	vmap_free_general(p);
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

void *vmap_malloc(size_t size)
{
	return vmap_fast_malloc(size);
}

void vmap_free(void *p)
{
	vmap_fast_free(p);
}
