/*
 * slab_heap.c — the builtin backend's per-thread heaps (slab.c has the
 * classes, the slabs and the owner's paths): a heap for each thread that
 * allocates, recycled when it exits; the slabs an exited thread leaves with
 * live objects (abandoned), taken over by the next thread that frees into
 * them or needs their class; other threads' frees; the figures of every heap.
 *
 * Owns: the heaps (mapped, never malloc'd, never unmapped), the list of
 * recycled ones, a thread's heap state.
 *
 * Invariants: those of slab.c; an abandoned slab is on vmap_slab_abandoned
 * exactly while its state is SLAB_ABANDONED, and both change under
 * vmap_slab_lock.
 *
 * Called by: alloc.c (the facade: memalign, remote frees, trim), thread.c
 * (thread exit), stats (counts, usage).
 */
#include "slab.h"

#include <sys/mman.h>

#include "alloc.h"
#include "counter.h"
#include "lock.h"
#include "slab_impl.h"

enum { HEAP_NONE = 0, HEAP_ACTIVE = 1, HEAP_DEAD = 2 };
static __thread uint8_t vmap_tls_heap_state;

static struct vmap_heap *heap_free_list;
static struct vmap_heap *heap_all; /* pushed to, never popped: read without a lock */

/* ---- heaps ------------------------------------------------------------- */

/* Where in its page a heap starts: not at the page's first line, the L1 set
 * of every page-aligned object's (slab.h says why, of the descriptors), nor
 * at any multiple of 512 (the first lines of 512 B..2 KiB objects); its
 * counts and current slabs are read and written on every malloc and free. */
#define HEAP_OFFSET 0x840
_Static_assert(HEAP_OFFSET + sizeof(struct vmap_heap) <= 4096, "a heap fits its page");

static struct vmap_heap *heap_get(void)
{
	vmap_lock(&vmap_slab_lock, VMAP_RANK_SLAB);
	struct vmap_heap *h = heap_free_list;
	if (h)
		heap_free_list = h->next_free;
	vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
	if (h)
		return h;
	size_t len = (HEAP_OFFSET + sizeof *h + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	void *m = vmap_os_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);
	if (vmap_os_is_err(m))
		return NULL;
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)len);
	h = (struct vmap_heap *)((char *)m + HEAP_OFFSET);
	h->mallocs_left = h->frees_left = VMAP_HEAP_STEP;
	for (unsigned k = 0; k < VMAP_FAST_KINDS; k++)
		h->kinds_left[k] = VMAP_HEAP_STEP;
	for (unsigned c = 0; c < NCLASSES; c++)
		h->cur[c] = &vmap_slab_none;
	h->all_next = __atomic_load_n(&heap_all, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&heap_all, &h->all_next, h, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
	return h;
}

void vmap_slab_fast_counts(uint64_t *allocs, uint64_t *frees)
{
	uint64_t m = 0, f = 0;
	for (struct vmap_heap *h = __atomic_load_n(&heap_all, __ATOMIC_ACQUIRE); h; h = h->all_next) {
		m += __atomic_load_n(&h->fast_mallocs, __ATOMIC_RELAXED) +
		     __atomic_load_n(&h->fast_kinds[VMAP_FAST_CALLOC], __ATOMIC_RELAXED) +
		     __atomic_load_n(&h->fast_kinds[VMAP_FAST_MEMALIGN], __ATOMIC_RELAXED);
		f += __atomic_load_n(&h->fast_frees, __ATOMIC_RELAXED);
	}
	struct vmap_heap *own = vmap_tls.heap; /* its counts' rest: this thread's own */
	if (own) {
		m += (uint64_t)(VMAP_HEAP_STEP - own->mallocs_left) +
		     (uint64_t)(VMAP_HEAP_STEP - own->kinds_left[VMAP_FAST_CALLOC]) +
		     (uint64_t)(VMAP_HEAP_STEP - own->kinds_left[VMAP_FAST_MEMALIGN]);
		f += (uint64_t)(VMAP_HEAP_STEP - own->frees_left);
	}
	*allocs = m;
	*frees = f;
}

void vmap_slab_fast_kinds(uint64_t *callocs, uint64_t *memaligns, uint64_t *reallocs)
{
	uint64_t n[VMAP_FAST_KINDS] = {0};
	for (struct vmap_heap *h = __atomic_load_n(&heap_all, __ATOMIC_ACQUIRE); h; h = h->all_next)
		for (unsigned k = 0; k < VMAP_FAST_KINDS; k++)
			n[k] += __atomic_load_n(&h->fast_kinds[k], __ATOMIC_RELAXED);
	struct vmap_heap *own = vmap_tls.heap;
	if (own)
		for (unsigned k = 0; k < VMAP_FAST_KINDS; k++)
			n[k] += (uint64_t)(VMAP_HEAP_STEP - own->kinds_left[k]);
	*callocs = n[VMAP_FAST_CALLOC];
	*memaligns = n[VMAP_FAST_MEMALIGN];
	*reallocs = n[VMAP_FAST_REALLOC];
}

/* mallinfo's view of the slabs: bytes of objects in use (frees waiting on a
 * remote stack counted as used) and the rest of the slabs' bytes.  Reads the
 * descriptors of the chunks shards hold for small areas (1024 a chunk; the
 * table is readable throughout) and the owners' counts, without a lock. */
void vmap_slab_usage(uint64_t *in_use, uint64_t *rest)
{
	uint64_t used = 0, all = 0;
	const size_t per_chunk = VMAP_CHUNK >> VMAP_SLAB_UNIT_SHIFT;
	for (unsigned i = 0; i < __atomic_load_n(&vmap_nregions, __ATOMIC_ACQUIRE); i++) {
		struct vmap_region *r = &vmap_regions[i];
		struct vmap_slab *t = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
		for (size_t c = 0; t && c < r->nchunks; c++) {
			uint16_t o = __atomic_load_n(&r->chunk_owner[c], __ATOMIC_RELAXED);
			if (vmap_chunk_is_free(o) || (o & VMAP_CHUNK_WAS_BIG))
				continue; /* no slab there: slabs are small areas */
			for (struct vmap_slab *d = &t[c * per_chunk]; d < &t[(c + 1) * per_chunk]; d++) {
				if (__atomic_load_n(&d->head, __ATOMIC_ACQUIRE) != d)
					continue;
				/* over and wake change together on the owner's side:
				 * read apart, their sum may be off for a moment */
				int32_t u = __atomic_load_n(&d->over, __ATOMIC_RELAXED) +
					    __atomic_load_n(&d->wake, __ATOMIC_RELAXED);
				if (u > 0)
					used += (uint64_t)(u < (int32_t)d->cap ? (uint32_t)u : d->cap) * d->size;
				all += vmap_slab_bytes(d);
			}
		}
	}
	*in_use = used;
	*rest = all > used ? all - used : 0;
}

/* Every slab of h: collected; empty ones retired, the rest abandoned. */
static void heap_abandon(struct vmap_heap *h)
{
	for (unsigned c = 0; c < NCLASSES; c++) {
		struct vmap_slab *keep = NULL, *d, *next;
		struct vmap_slab *lists[3] = {h->cur[c] != &vmap_slab_none ? h->cur[c] : NULL,
					      h->partial[c], h->full[c]};
		h->cur[c] = &vmap_slab_none;
		h->partial[c] = h->full[c] = NULL;
		if ((d = vmap_slab_spare_take(h, c)) != NULL)
			vmap_slab_retire(d);
		for (unsigned l = 0; l < 3; l++) {
			for (d = lists[l]; d; d = next) {
				next = l ? d->next : NULL;
				vmap_slab_collect(d);
				if (vmap_slab_used(d) == 0) {
					vmap_slab_retire(d);
					continue;
				}
				__atomic_store_n(&d->owner, VMAP_SLAB_ORPHAN, __ATOMIC_SEQ_CST);
				vmap_slab_list_push(&keep, d);
			}
		}
		if (!keep)
			continue;
		/* ABANDONED only once on the list, under its lock: a free that
		 * sees the state may take the slab off the list (reclaim). */
		vmap_lock(&vmap_slab_lock, VMAP_RANK_SLAB);
		struct vmap_slab *tail = keep;
		for (;; tail = tail->next) {
			vmap_slab_set_state(tail, SLAB_ABANDONED, __ATOMIC_SEQ_CST);
			if (!tail->next)
				break;
		}
		tail->next = vmap_slab_abandoned[c];
		if (vmap_slab_abandoned[c])
			vmap_slab_abandoned[c]->prev = tail;
		vmap_slab_abandoned[c] = keep;
		vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
	}
}

void vmap_slab_thread_exit(void)
{
	struct vmap_heap *h = vmap_tls.heap;
	vmap_tls.heap = NULL;
	vmap_tls_heap_state = HEAP_DEAD; /* later mallocs of this thread: glibc */
	if (!h)
		return;
	/* the counts' rest into the totals (the statistics read only a
	 * running thread's own rest) */
	__atomic_store_n(&h->fast_mallocs, h->fast_mallocs + (uint64_t)(VMAP_HEAP_STEP - h->mallocs_left),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&h->fast_frees, h->fast_frees + (uint64_t)(VMAP_HEAP_STEP - h->frees_left),
			 __ATOMIC_RELAXED);
	h->mallocs_left = h->frees_left = VMAP_HEAP_STEP;
	for (unsigned k = 0; k < VMAP_FAST_KINDS; k++) {
		__atomic_store_n(&h->fast_kinds[k],
				 h->fast_kinds[k] + (uint64_t)(VMAP_HEAP_STEP - h->kinds_left[k]),
				 __ATOMIC_RELAXED);
		h->kinds_left[k] = VMAP_HEAP_STEP;
	}
	heap_abandon(h);
	__builtin_memset(h->turns, 0, sizeof h->turns); /* the next thread's slabs start small */
	vmap_lock(&vmap_slab_lock, VMAP_RANK_SLAB);
	h->next_free = heap_free_list;
	heap_free_list = h;
	vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
}

__attribute__((noinline, cold)) struct vmap_heap *vmap_slab_heap_first(void)
{
	if (vmap_tls_heap_state == HEAP_DEAD)
		return NULL;
	struct vmap_heap *h = heap_get();
	if (h) {
		vmap_tls.heap = h;
		vmap_tls_heap_state = HEAP_ACTIVE;
	}
	return h;
}

/* ---- malloc and free ------------------------------------------------------- */

void *vmap_slab_memalign(size_t align, size_t size)
{
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!h, 0) && !(h = vmap_slab_heap_first()))
		return NULL;
	/* Slabs start 64 KiB-aligned, objects at multiples of their size: a
	 * class whose size is a multiple of align gives aligned objects (every
	 * class for 16 and less; vmap_slab_align_tab for the rest, up to a
	 * page: the caller's). */
	unsigned c = vmap_slab_class(size > align ? size : align);
	if (align > 16)
		c = vmap_slab_align_tab[__builtin_ctzll(align)][c];
	return c < NCLASSES ? vmap_slab_take(h, c) : NULL;
}

/*
 * A free into a slab an exited thread left: the freeing thread takes the slab
 * over, so that its further frees into it (and mallocs from it) are its own,
 * on the fast paths.  A program that hands its blocks to a new thread when
 * one ends (servers' worker pools; larson) frees them in that thread: before,
 * every such free was a remote push, and the abandoned slabs were reaped
 * under the one slab lock by every thread at once.  The lock is only tried:
 * when another thread holds it (adopting, reaping, abandoning), the free
 * stays a remote one, collected by whoever takes the slab.  Called in a
 * section (the heap's lists change), with o already on d's remote stack.
 */
static bool reclaim(struct vmap_heap *h, struct vmap_slab *d)
{
	unsigned c = d->cls;
	if (!vmap_trylock(&vmap_slab_lock, VMAP_RANK_SLAB))
		return false;
	/* Only a slab whose carved objects are mostly live: the freeing thread
	 * is likely to free the rest itself (a hand-over).  A slab the exited
	 * thread had mostly emptied stays on the list, where any thread that
	 * needs its class adopts it and the reaper finds it once empty: taken
	 * over by whichever thread freed into it, such slabs sat on that
	 * thread's lists while other threads made new ones (mstress: 36 slabs
	 * at exit became 187). */
	bool mine = __atomic_load_n(&d->state, __ATOMIC_RELAXED) == SLAB_ABANDONED &&
		    __atomic_load_n(&d->head, __ATOMIC_RELAXED) == d &&
		    2 * (uint64_t)vmap_slab_used(d) >= __atomic_load_n(&d->bump, __ATOMIC_RELAXED);
	if (mine) { /* off the list and no longer ABANDONED in one step (adopt) */
		vmap_slab_list_unlink(&vmap_slab_abandoned[c], d);
		vmap_slab_set_state(d, SLAB_PARTIAL, __ATOMIC_SEQ_CST);
	}
	vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
	if (!mine)
		return false;
	__atomic_store_n(&d->owner, h, __ATOMIC_SEQ_CST);
	vmap_slab_collect(d);
	vmap_stat_inc_local(VMAP_STAT_slabs_adopted);
	if (vmap_slab_used(d) == 0) {
		vmap_slab_empty(h, d);
	} else if (d->free || d->bump < d->cap || !vmap_slab_file_full(h, d)) {
		/* something to hand out (file_full false: a remote free came) */
		vmap_slab_set_state(d, SLAB_PARTIAL, __ATOMIC_RELAXED);
		vmap_slab_list_push(&h->partial[c], d);
	}
	return true;
}

__attribute__((noinline)) void vmap_slab_remote_free(struct vmap_slab *d, void **o)
{
	uintptr_t old = __atomic_load_n(&d->remote, __ATOMIC_RELAXED);
	do
		o[0] = vmap_slab_remote_top(old);
	while (!__atomic_compare_exchange_n(&d->remote, &old,
					    (uintptr_t)o + (old & ~(VMAP_SLAB_REMOTE_ONE - 1)) + VMAP_SLAB_REMOTE_ONE,
					    true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
	unsigned st = __atomic_load_n(&d->state, __ATOMIC_SEQ_CST);
	if (st == SLAB_FULL) {
		if (old)
			return; /* (the push that found the stack empty told the owner) */
		struct vmap_heap *h = __atomic_load_n(&d->owner, __ATOMIC_RELAXED);
		if (h != VMAP_SLAB_ORPHAN)
			__atomic_fetch_add(&h->hint[d->cls], 1, __ATOMIC_RELAXED);
	} else if (st == SLAB_ABANDONED) {
		struct vmap_heap *h = vmap_tls.heap;
		if (h && !vmap_reentered()) {
			vmap_depth_enter();
			bool taken = reclaim(h, d);
			vmap_depth_leave();
			if (taken)
				return;
		}
		__atomic_fetch_add(&vmap_slab_abandoned_frees, 1, __ATOMIC_RELAXED);
	}
}

size_t vmap_slab_usable(struct vmap_slab *d, const void *p, const char *who, bool live)
{
	void **o = vmap_slab_check(d, p, who);
	if (live && (uintptr_t)o[1] == (vmap_slab_key ^ (uintptr_t)p))
		vmap_slab_die(who, p, "double free: the block was already freed");
	return d->size;
}

/* The caller's own slabs that other threads' frees emptied: their objects
 * wait on the remote stacks, counted as used, until this thread next needs
 * their class, which may be never; collected now, and the empty ones given
 * back (the current slabs stay, as they always do). */
static void trim_own(struct vmap_heap *h)
{
	for (unsigned c = 0; c < NCLASSES; c++) {
		vmap_slab_rescan_full(h, c); /* full -> partial or given back */
		struct vmap_slab *d = vmap_slab_spare_take(h, c), *next;
		if (d)
			vmap_slab_retire(d);
		d = h->partial[c];
		for (; d; d = next) {
			next = d->next;
			if (!__atomic_load_n(&d->remote, __ATOMIC_RELAXED) || !vmap_slab_collect(d) || vmap_slab_used(d))
				continue;
			vmap_slab_list_unlink(&h->partial[c], d);
			vmap_slab_retire(d);
		}
	}
}

void vmap_slab_trim(void)
{
	if (!__atomic_load_n(&vmap_slab_on, __ATOMIC_RELAXED))
		return;
	vmap_slab_reap_abandoned();
	if (vmap_tls.heap)
		trim_own(vmap_tls.heap);
}
