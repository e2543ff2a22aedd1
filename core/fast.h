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
/* free of a pointer of the first region outside its slabs (direct.c). */
void vmap_free_large(void *p) VMAP_HIDDEN;
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
/* The exits of calloc's and the aligned calls' pop (vmap_fast_pop_via),
 * each the call's end: leaving the section with something parked, then the
 * count; a kind's count reaching its step (struct vmap_heap), the fold and
 * tick (realloc's fast path's too); both clear zero bytes of o and return
 * it.  The class's current slab empty with something parked: the leave,
 * then miss(a, b). */
__attribute__((returns_nonnull)) void *vmap_fast_pop_leave(void *o, enum vmap_fast_kind k,
							   size_t zero) VMAP_HIDDEN;
__attribute__((returns_nonnull)) void *vmap_fast_kind_step(void *o, enum vmap_fast_kind k,
							   size_t zero) VMAP_HIDDEN;
void *vmap_fast_pop_empty(void *(*miss)(size_t a, size_t b), size_t a, size_t b) VMAP_HIDDEN;

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
	void *bad = vmap_slab_pop_checked(d, o); /* its stop a jump: no frame */
	if (__builtin_expect(bad != NULL, 0))
		return vmap_fast_corrupt(bad);
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
 * calloc's and the aligned calls' fast path: the same pop as malloc's, from
 * the class of size (already the alignment at least) that row of
 * vmap_slab_align_tab gives (the alignment's log2: a class whose objects all
 * have it; rows up to 4 change nothing, every slab object is 16-aligned),
 * counted in the heap by kind (VMAP_FAST_CALLOC when zeroed, or MEMALIGN),
 * with every tick of malloc's.  Anything it does not serve (no heap, not a
 * slab size, profiling, re-entered, or the class's current slab is empty)
 * goes to miss(a, b), the caller's general path, which decides again from
 * the start.  Every exit is a jump, as malloc's are: no stack frame.
 */
typedef void *(*vmap_pop_exit)(size_t a, size_t b);

__attribute__((always_inline)) static inline void *
vmap_fast_pop_via(size_t size, unsigned row, bool zeroed, vmap_pop_exit miss, size_t a, size_t b)
{
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!h || size - 1 >= __atomic_load_n(&vmap_fast_limit, __ATOMIC_RELAXED) ||
				     vmap_reentered_or_parked(),
			     0))
		return miss(a, b);
	unsigned c = vmap_slab_class_fast(size);
	if (!(__builtin_constant_p(row) && row == 0) && (c = vmap_slab_align_tab[row][c]) >= NCLASSES)
		return miss(a, b);
	vmap_depth_enter();
	struct vmap_slab *d = h->cur[c];
	void **o = (void **)d->free;
	if (__builtin_expect(!o, 0)) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (--vmap_tls.reentry != 0)
			return vmap_fast_pop_empty(miss, a, b);
		return miss(a, b);
	}
	void *bad = vmap_slab_pop_checked(d, o); /* its stop a jump: no frame */
	if (__builtin_expect(bad != NULL, 0))
		return vmap_fast_corrupt(bad);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	enum vmap_fast_kind k = zeroed ? VMAP_FAST_CALLOC : VMAP_FAST_MEMALIGN;
	size_t zero = zeroed ? size : 0;
	if (__builtin_expect(--vmap_tls.reentry != 0, 0))
		return vmap_fast_pop_leave(o, k, zero);
	if (__builtin_expect(--h->kinds_left[k] == 0, 0))
		return vmap_fast_kind_step(o, k, zero);
	return zeroed ? __builtin_memset(o, 0, size) : (void *)o;
}

__attribute__((always_inline)) static inline void *vmap_fast_calloc(size_t n, size_t size)
{
	size_t total;
	if (__builtin_expect(__builtin_mul_overflow(n, size, &total), 0))
		return vmap_calloc(n, size);
	return vmap_fast_pop_via(total, 0, true, vmap_calloc, n, size);
}

/* The aligned calls, the alignment a power of two up to 4 KiB that the
 * caller has checked, with their general paths. */
__attribute__((always_inline)) static inline void *vmap_fast_aligned(size_t align, size_t size,
								     vmap_pop_exit miss)
{
	return vmap_fast_pop_via(size < align ? align : size, (unsigned)__builtin_ctzll(align), false,
				 miss, align, size);
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
	if (__builtin_expect(--h->kinds_left[VMAP_FAST_REALLOC] == 0, 0))
		return vmap_fast_kind_step(p, VMAP_FAST_REALLOC, 0);
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
	if (__builtin_expect(!d, 0))
		return vmap_free_large(p); /* a large block (or a lent chunk's pointer) */
	if (__builtin_expect(vmap_reentered_or_parked(), 0))
		return vmap_free_slow(p);
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
