/*
 * fast.h — malloc's and free's fast paths, inline in the entry points
 * (preload/shim.c's malloc and free, alloc.c's vmap_malloc and vmap_free):
 * one jump fewer a call.  Everything they do not serve goes to the general
 * paths in alloc.c.
 */
#ifndef VMAP_FAST_H
#define VMAP_FAST_H

#include "alloc.h"
#include "range.h"
#include "section.h"
#include "slab.h"

/* Sizes 1..vmap_fast_limit may take malloc's fast path: the slab limit once
 * the slabs are on, 0 before and while profiling (init.c vmap_fast_paths_off). */
extern size_t vmap_fast_limit VMAP_HIDDEN;

/* The general paths, and the fast paths' rare exits (alloc.c). */
void *vmap_malloc_slow(size_t size) VMAP_HIDDEN;
void vmap_free_slow(void *p) VMAP_HIDDEN;
void *vmap_malloc_refill(size_t size) VMAP_HIDDEN;
void *vmap_malloc_fast_refill(struct vmap_heap *h, size_t size) VMAP_HIDDEN;
void vmap_free_remote(void *p, struct vmap_slab *d) VMAP_HIDDEN;
void *vmap_malloc_fast_leave(struct vmap_heap *h, void *o) VMAP_HIDDEN;
void vmap_free_fast_leave(struct vmap_heap *h) VMAP_HIDDEN;
void vmap_free_fast_move(struct vmap_heap *h, struct vmap_slab *d) VMAP_HIDDEN;
void vmap_fold_and_tick(void) VMAP_HIDDEN;
/* The fast paths' counts reached a step (struct vmap_heap); malloc's also
 * folds and ticks (vmap_fold_and_tick) and returns o.  Jumped to. */
void *vmap_fast_malloc_step(struct vmap_heap *h, void *o) VMAP_HIDDEN;
void vmap_fast_free_step(struct vmap_heap *h) VMAP_HIDDEN;
/* The stops of the fast paths' checks (never return): jumped to rather than
 * called, the paths need no stack frame. */
void *vmap_fast_corrupt(void *next) VMAP_HIDDEN;
void vmap_fast_bad_free(struct vmap_slab *d, void *p) VMAP_HIDDEN;

/*
 * The fast paths: a thread with a heap (so seen, past init, slabs on), a slab
 * size, no profile (vmap_fast_limit and vmap_slab0 say none), not re-entered,
 * an object in (or of) the thread's own slab; for free, a slab of the first
 * region.  Anything else takes the general paths, which decide again from
 * the start.  The fast paths count into the heap (vmap_slab_fast_counts), are
 * bracketed as a range section (a signal handler that interrupts them takes
 * glibc or parks its free), and keep every check of vmap_slab_take and
 * vmap_slab_free: a free-list link that leaves its slab, a pointer that is
 * not an object's start, a double free.  Inline, and with nothing but the
 * common case in them, they take about a third fewer instructions a
 * malloc/free pair than the general paths.
 */
typedef void *(*vmap_malloc_exit)(size_t size);
typedef void *(*vmap_malloc_refill_exit)(struct vmap_heap *h, size_t size);

/* malloc's fast path with the exits that may fail named by the caller
 * (constants, inlined to jumps): vmap_malloc_slow, vmap_malloc_refill and
 * vmap_malloc_fast_refill for malloc; C++'s operator new wraps them with its
 * failure (preload/cxx.c), so that its own path needs no test of the result. */
__attribute__((always_inline)) static inline void *
vmap_fast_malloc_via(size_t size, vmap_malloc_exit slow, vmap_malloc_exit refill,
		     vmap_malloc_refill_exit fast_refill)
{
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!h || size - 1 >= __atomic_load_n(&vmap_fast_limit, __ATOMIC_RELAXED) ||
				     vmap_reentered_or_parked(),
			     0))
		return slow(size);
	vmap_depth_enter();
	struct vmap_slab *d = h->cur[vmap_slab_class_fast(size)];
	void **o = (void **)d->free;
	if (__builtin_expect(!o, 0)) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (--vmap_tls.reentry != 0)
			return refill(size);
		return fast_refill(h, size);
	}
	/* vmap_slab_pop, with its stop a jump (vmap_fast_corrupt): no call, so
	 * no frame, in the path. */
	void *next = o[0];
	if (__builtin_expect((uintptr_t)next - d->start >= d->span, 0) && next)
		return vmap_fast_corrupt(next);
	d->free = next;
	vmap_slab_prefetch(d, next);
	d->over++;
	o[1] = NULL; /* the double-free mark */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(--vmap_tls.reentry != 0, 0))
		return vmap_malloc_fast_leave(h, o);
	/* Every 128th (VMAP_HEAP_STEP), the count's step and the fold the
	 * general paths make every 128 calls: the clock, and the age purge
	 * once it is due (alloc.c). */
	if (__builtin_expect(--h->mallocs_left == 0, 0))
		return vmap_fast_malloc_step(h, o);
	return o;
}

__attribute__((always_inline)) static inline void *vmap_fast_malloc(size_t size)
{
	return vmap_fast_malloc_via(size, vmap_malloc_slow, vmap_malloc_refill, vmap_malloc_fast_refill);
}

/*
 * calloc's and the aligned calls' fast path (alignments up to 16, which every
 * slab object has): the same pop as malloc's, counted in the heap by kind
 * (fast_callocs, fast_memaligns), with every tick of malloc's.  NULL: not
 * served here (no heap, not a slab size, profiling, re-entered, or the
 * class's current slab is empty): the caller takes its general path, which
 * decides again from the start.
 */
__attribute__((always_inline)) static inline void *vmap_fast_pop(size_t size, size_t align,
								 uint64_t *count)
{
	struct vmap_heap *h = vmap_tls.heap;
	if (align > 16 && size < align)
		size = align;
	if (__builtin_expect(!h || size - 1 >= __atomic_load_n(&vmap_fast_limit, __ATOMIC_RELAXED) ||
				     vmap_reentered_or_parked(),
			     0))
		return NULL;
	unsigned c = vmap_slab_class_fast(size);
	if (align > 16 && (c = vmap_slab_align_tab[__builtin_ctzll(align) - 5][c]) >= NCLASSES)
		return NULL;
	vmap_depth_enter();
	struct vmap_slab *d = h->cur[c];
	void **o = (void **)d->free;
	if (__builtin_expect(o != NULL, 1))
		vmap_slab_pop(d, o);
	vmap_depth_leave();
	if (__builtin_expect(o != NULL, 1)) {
		uint64_t n = *count + 1;
		__atomic_store_n(count, n, __ATOMIC_RELAXED);
		if (__builtin_expect(!(n & 127), 0))
			vmap_fold_and_tick();
	}
	return o;
}

__attribute__((always_inline)) static inline void *vmap_fast_calloc(size_t n, size_t size)
{
	size_t total;
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!__builtin_mul_overflow(n, size, &total) && h, 1)) {
		void *p = vmap_fast_pop(total, 0, &h->fast_callocs);
		if (__builtin_expect(p != NULL, 1))
			return __builtin_memset(p, 0, total);
	}
	return vmap_calloc(n, size);
}

/* An object for an aligned call whose alignment the caller has checked to
 * be a power of two up to 4 KiB (up to 16: every slab object's; larger: a
 * class whose objects all have it, vmap_slab_align_tab), counted as such;
 * NULL: not here. */
__attribute__((always_inline)) static inline void *vmap_fast_aligned(size_t size, size_t align)
{
	struct vmap_heap *h = vmap_tls.heap;
	return __builtin_expect(h != NULL, 1) ? vmap_fast_pop(size, align, &h->fast_memaligns) : NULL;
}

/*
 * realloc's fast path: p an object of one of this thread's slabs that size
 * still fits, and at least half fills (what the general path keeps in place
 * too), with the general path's checks (an object's start, not freed).
 * Anything else, and every misuse, takes vmap_realloc, which decides again
 * from the start.  A string or buffer grown a few bytes at a time stays in
 * its object for most calls: those need no entry, no lock and no copy.
 */
__attribute__((always_inline)) static inline void *vmap_fast_realloc(void *p, size_t size)
{
	uintptr_t a = (uintptr_t)p, off = a - vmap_slab0.base;
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(off >= __atomic_load_n(&vmap_slab0.size, __ATOMIC_ACQUIRE) || !h ||
				     size - 1 >= __atomic_load_n(&vmap_fast_limit, __ATOMIC_RELAXED) ||
				     vmap_reentered_or_parked(),
			     0))
		return vmap_realloc(p, size); /* NULL, size 0, large, glibc's, profiling, a handler */
	struct vmap_slab *d = __atomic_load_n(&vmap_slab0.tab[off >> VMAP_SLAB_UNIT_SHIFT].head,
					      __ATOMIC_RELAXED);
	if (__builtin_expect(!d || __atomic_load_n(&d->owner, __ATOMIC_RELAXED) != h ||
				     size > d->size || size < d->size / 2 ||
				     vmap_slab_index(d, p) >= __atomic_load_n(&d->bump, __ATOMIC_RELAXED) ||
				     (uintptr_t)((void **)p)[1] == (vmap_slab_key ^ a),
			     0))
		return vmap_realloc(p, size);
	uint64_t n = h->fast_reallocs + 1;
	__atomic_store_n(&h->fast_reallocs, n, __ATOMIC_RELAXED);
	if (__builtin_expect(!(n & 127), 0))
		vmap_fold_and_tick();
	return p;
}

__attribute__((always_inline)) static inline void vmap_fast_free(void *p)
{
	uintptr_t a = (uintptr_t)p, off = a - vmap_slab0.base;
	if (__builtin_expect(off >= __atomic_load_n(&vmap_slab0.size, __ATOMIC_ACQUIRE), 0))
		return vmap_free_slow(p); /* NULL, glibc's, another region's */
	struct vmap_slab *d = __atomic_load_n(&vmap_slab0.tab[off >> VMAP_SLAB_UNIT_SHIFT].head,
					      __ATOMIC_RELAXED);
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!d || vmap_reentered_or_parked(), 0))
		return vmap_free_slow(p); /* a large block */
	/* (no heap: h NULL, which no slab's owner is) */
	if (__builtin_expect(__atomic_load_n(&d->owner, __ATOMIC_RELAXED) != h, 0))
		return vmap_free_remote(p, d); /* another thread's slab (or an exited one's) */
	/* vmap_slab_mark_free, with its stops a jump (vmap_fast_bad_free). */
	void **o = (void **)p;
	uintptr_t mark = vmap_slab_key ^ a;
	if (__builtin_expect(vmap_slab_index(d, p) >= __atomic_load_n(&d->bump, __ATOMIC_RELAXED) ||
				     (uintptr_t)o[1] == mark,
			     0))
		return vmap_fast_bad_free(d, p);
	o[1] = (void *)mark;
	vmap_depth_enter();
	if (vmap_slab_push(d, o))
		return vmap_free_fast_move(h, d);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(--vmap_tls.reentry != 0, 0))
		return vmap_free_fast_leave(h);
	if (__builtin_expect(--h->frees_left == 0, 0))
		return vmap_fast_free_step(h);
}

#endif
