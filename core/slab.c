/*
 * slab.c — the builtin small backend (VMAPALLOC_BACKEND=builtin).
 *
 * Requests of up to 64 KiB are rounded to one of 44 size classes (16-byte
 * steps to 128, then four classes per power of two) and served from slabs:
 * blocks of 64 KiB (256 KiB for objects over 1 KiB of a class the thread
 * uses much: slab_bytes) that the range allocator hands out aligned to their
 * size, so that they come from the same arena, pools and lazy purge as large
 * blocks.  Each thread has a heap (mapped, never malloc'd; recycled when
 * threads exit) with, per class, a current slab and lists of its other slabs,
 * partial and full.
 *
 *   malloc: pop the current slab's free list (no lock, no atomic)
 *   free by the owner: push onto the slab's free list (no lock, no atomic)
 *   free by another thread: push onto the slab's remote stack (one CAS); the
 *     owner takes the whole stack with one exchange when its list runs dry
 *
 * An empty slab other than the current one is kept as its class's spare
 * (one per class, at most 1 MiB of spares a thread);
 * the others go back to the range allocator, whose thread caches and pools
 * keep them resident for the next slab.
 * A slab is carved lazily, a page of objects at a time, so that a fresh slab
 * faults in only the pages used.
 *
 * Owns: the descriptors (struct vmap_slab, one per 64 KiB unit of a region,
 * in their own mapping: vmap_region.slabs, out of band: an overflow of user
 * data cannot reach them), the lists of abandoned slabs.  The heaps, other
 * threads' frees and a thread's exit are slab_heap.c's.
 *
 * Invariants:
 *  - Only a slab's owner touches its free list, used, bump, state and list
 *    links; other threads touch only `remote` (and read the geometry, owner
 *    and state).  owner is VMAP_SLAB_ORPHAN while a slab is abandoned (its
 *    thread exited) and once it is given back.
 *  - used = objects handed out - owner frees - remote frees collected; a slab
 *    with used 0 has no live object, so no legitimate free can race with
 *    giving it back.
 *  - A full slab is on its owner's full list; the remote free that finds its
 *    remote stack empty bumps the owner's hint for the class (later ones
 *    find the stack as that one left it), and the owner looks at its full
 *    slabs only when the hint moved.  Setting FULL and checking remote
 *    (owner), pushing and checking FULL (remote) are sequentially consistent,
 *    so one of the two sees the other: no full slab is left with frees
 *    nobody looks at.
 *  - A freed object's second word holds key ^ address (key from AT_RANDOM);
 *    malloc clears it.  A free that finds it there is a double free: one line
 *    and abort, in O(1), before any list is touched.  Free-list links are
 *    checked to stay inside their slab before they are followed.
 *  - Fast paths are bracketed like the range path (alloc.h, re-entry): a
 *    signal handler that interrupts one goes to glibc (malloc) or is deferred
 *    (free) instead of touching the same lists.
 *  - fork: the child keeps its own heap; other threads' heaps stay as they
 *    were (possibly half way through an operation: not walked), so the
 *    memory of their slabs is not reused in the child.
 *
 * Called by: alloc.c (the facade), slab_heap.c, profile.c (vmap_in_slab).
 */
#include "slab.h"

#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "alloc.h"
#include "counter.h"
#include "fmt.h"
#include "lock.h"
#include "slab_impl.h"

#define CARVE_BYTES 4096 /* objects made ready per carve: about a page */

bool vmap_slab_on;
uint64_t vmap_slab_key;
/* Per class: size = odd << shift, and odd's inverse mod 2^32 (vmap_slab_index). */
static uint32_t class_inv[NCLASSES];
static uint8_t class_shift[NCLASSES];
/* The current slab of a class that has none: its free list is always empty,
 * so the fast path needs no NULL test. */
struct vmap_slab vmap_slab_none;

struct vmap_lock vmap_slab_lock = VMAP_LOCK_INIT; /* leaf: the lists below */
struct vmap_slab *vmap_slab_abandoned[NCLASSES];
/* Remote frees into abandoned slabs, and the count when they were last reaped. */
uint64_t vmap_slab_abandoned_frees, vmap_slab_abandoned_reaped;

/* ---- size classes ------------------------------------------------------ */

unsigned vmap_slab_nclasses(void)
{
	return NCLASSES;
}

unsigned vmap_slab_class_of(size_t size)
{
	return vmap_slab_class(size);
}

size_t vmap_slab_class_size(unsigned c)
{
	if (c < 8)
		return 16 * (size_t)(c + 1);
	unsigned lg = 7 + (c - 8) / 4;
	return ((size_t)1 << lg) + (size_t)((c - 8) % 4 + 1) * ((size_t)1 << (lg - 2));
}

/*
 * A slab's bytes: 64 KiB; 256 KiB for objects over 1 KiB once the thread has
 * turned to another slab of their class SMALL_SLABS times (vmap_slab_refill
 * counts, in the heap, from the thread's start).  A slab lives as long as
 * one of its objects, with every page its objects touched resident, and a
 * thread has a slab of every class it uses: a program whose short-lived
 * threads pass blocks on (mimalloc-bench's mstress) kept a 256 KiB slab per
 * class and thread for a few dozen objects of 1-64 KiB, and a third of its
 * peak RSS was theirs (22.6 MB against 15.2 with 64 KiB slabs throughout,
 * medians of 15 interleaved runs).  But a class in steady use changes slabs
 * every cap objects when its blocks are freed in the order they were made
 * (queues, sliding windows): 16 objects of 4 KiB to a slab cost 10 more
 * instructions a malloc/free pair than 64 (bench/pairs.sh fifo-4096).  So a
 * class's first slabs are small and, once it has turned 16 times, its new
 * ones large (and its small ones retired as they empty: vmap_slab_empty).
 * mstressN: 16.5 MB, pairs.sh as with 256 KiB slabs throughout.
 */
#define SMALL_SLABS 16

static size_t slab_bytes(const struct vmap_heap *h, unsigned c)
{
	if (vmap_slab_class_size(c) <= 1024 || h->turns[c] < SMALL_SLABS)
		return (size_t)64 << 10;
	return (size_t)256 << 10;
}

uint8_t vmap_slab_class_tab[VMAP_SLAB_CLASS_SLOTS];
uint8_t vmap_slab_align_tab[VMAP_SLAB_ALIGNS][64];

void vmap_slab_init(void)
{
	static const struct vmap_lock_set locks = {"slabs", VMAP_RANK_SLAB, &vmap_slab_lock, 0, NULL};
	vmap_lock_register(&locks);
	for (unsigned c = 0; c < NCLASSES; c++) {
		uint32_t size = (uint32_t)vmap_slab_class_size(c);
		unsigned shift = (unsigned)__builtin_ctz(size);
		uint32_t odd = size >> shift, inv = odd; /* Newton: each step doubles the bits */
		for (int i = 0; i < 5; i++)
			inv *= 2 - odd * inv;
		class_shift[c] = (uint8_t)shift;
		class_inv[c] = inv;
	}
	/* Slot i holds the sizes i * 16 - 15 .. i * 16, all in the class of
	 * the largest. */
	for (size_t i = 1; i < VMAP_SLAB_CLASS_SLOTS; i++)
		vmap_slab_class_tab[i] = (uint8_t)vmap_slab_class(i * 16);
	for (unsigned k = 0; k < VMAP_SLAB_ALIGNS; k++)
		for (unsigned c = NCLASSES, from = NCLASSES; from-- > 0;) {
			if (!(vmap_slab_class_size(from) % (1u << k)))
				c = from;
			vmap_slab_align_tab[k][from] = (uint8_t)c;
		}
	/* The kernel's 16 random bytes have no alignment (they sit among the
	 * strings at the top of the stack): copied, not loaded as words. */
	const void *rnd = (const void *)getauxval(AT_RANDOM);
	uint64_t k = 0x9e3779b97f4a7c15ull;
	if (rnd) {
		uint64_t w[2];
		memcpy(w, rnd, sizeof w);
		k = w[0] ^ (w[1] << 1);
	}
	vmap_slab_key = k | 1; /* never 0: a fresh object's second word is 0 */
	__atomic_store_n(&vmap_slab_on, true, __ATOMIC_RELEASE);
}

/* ---- misuse ------------------------------------------------------------ */

__attribute__((noinline, cold, noreturn)) void vmap_slab_die(const char *who, const void *p,
								     const char *what)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_invalid_pointer(&b, who, p);
	vmap_buf_str(&b, " (");
	vmap_buf_str(&b, what);
	vmap_buf_str(&b, ")\n");
	vmap_buf_flush(&b);
	vmap_os_abort();
}

/* ---- descriptors --------------------------------------------------------- */

static struct vmap_slab *region_slabs(struct vmap_region *r)
{
	struct vmap_slab *t = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
	if (t)
		return t;
	if (r->base + r->size > VMAP_SLAB_REMOTE_ONE) /* (the remote stacks' word: slab.h) */
		return NULL;
	size_t len = (r->size >> VMAP_SLAB_UNIT_SHIFT) * sizeof(struct vmap_slab);
	len = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	/* Read-only but for the slices of claimed chunks (the arena makes
	 * them writable when a shard claims the chunk: no commit charge). */
	void *m = vmap_os_reserve(len, VMAP_PAGE, PROT_READ);
	if (vmap_os_is_err(m))
		return NULL;
	size_t each = (VMAP_CHUNK >> VMAP_SLAB_UNIT_SHIFT) * sizeof(struct vmap_slab);
	struct vmap_slab *in = vmap_region_slabs_publish(r, m, each);
	if (in != m) {
		vmap_os_munmap(m, len);
		return in;
	}
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)len);
	return m;
}

/* Makes up to a page of never-used objects ready (the slab's list is empty). */
static void carve(struct vmap_slab *d)
{
	uint32_t b = d->bump, n = CARVE_BYTES / d->size;
	if (n == 0)
		n = 1;
	if (n > d->cap - b)
		n = d->cap - b;
	uintptr_t first = d->start + (uintptr_t)b * d->size;
	uintptr_t o = first;
	for (uint32_t i = 1; i < n; i++, o += d->size)
		*(void **)o = (void *)(o + d->size);
	*(void **)o = NULL;
	d->free = (void *)first;
	__atomic_store_n(&d->bump, b + n, __ATOMIC_RELAXED);
}

/* Moves the remote stack onto the free list; returns how many objects.  An
 * empty free list (a refill's) takes the stack as it is, without a walk: the
 * pops check each link as they follow it.  Otherwise the stack is walked to
 * its last object, links checked, and put in front of the list. */
uint32_t vmap_slab_collect(struct vmap_slab *d)
{
	uintptr_t w = __atomic_exchange_n(&d->remote, 0, __ATOMIC_ACQUIRE);
	if (!w)
		return 0;
	void **r = vmap_slab_remote_top(w);
	uint32_t n = vmap_slab_remote_count(w);
	if (d->free) {
		void **t = r;
		uintptr_t span = d->span;
		while (t[0]) {
			if ((uintptr_t)t[0] - d->start >= span)
				vmap_slab_die("free", t[0], "heap corruption: a freed object was overwritten");
			t = t[0];
		}
		t[0] = d->free;
	}
	d->free = r;
	d->over -= (int32_t)n;
	return n;
}

void vmap_slab_list_push(struct vmap_slab **head, struct vmap_slab *d)
{
	d->prev = NULL;
	d->next = *head;
	if (*head)
		(*head)->prev = d;
	*head = d;
}

void vmap_slab_list_unlink(struct vmap_slab **head, struct vmap_slab *d)
{
	if (d->prev)
		d->prev->next = d->next;
	else
		*head = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->next = d->prev = NULL;
}

/* A slab is counted as one, not as a large block (the range allocator
 * counted it as one when it handed it out, and will when it takes it back). */
static void slab_account(uintptr_t start, int64_t sign)
{
	int64_t bytes = (int64_t)vmap_range_usable((void *)start, "free");
	vmap_stat_add_local(VMAP_STAT_slabs_in_use, sign);
	vmap_stat_add_local(VMAP_STAT_slab_bytes, sign * bytes);
	vmap_stat_add_local(VMAP_STAT_large_blocks_in_use, -sign);
	vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, -sign * bytes);
	if (sign > 0) {
		vmap_stat_add_local(VMAP_STAT_large_allocs, -1);
		vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, -bytes);
	} else {
		vmap_stat_add_local(VMAP_STAT_large_frees, -1); /* the range's free counts one */
	}
}

/* An empty slab goes back to the range allocator. */
void vmap_slab_retire(struct vmap_slab *d)
{
	uintptr_t start = d->start;
	vmap_slab_set_state(d, SLAB_NONE, __ATOMIC_RELAXED);
	d->owner = VMAP_SLAB_ORPHAN;
	for (unsigned i = 1; i < d->units; i++)
		__atomic_store_n(&d[i].head, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&d->head, NULL, __ATOMIC_RELEASE);
	slab_account(start, -1);
	vmap_range_free((void *)start, "free");
}

static struct vmap_slab *slab_new(struct vmap_heap *h, unsigned c)
{
	if (!vmap_range_ready())
		return NULL;
	size_t bytes = slab_bytes(h, c);
	bool zero;
	void *m = vmap_range_alloc_slab(bytes, &zero);
	if (!m)
		return NULL;
	struct vmap_region *r = vmap_region_of((uintptr_t)m);
	struct vmap_slab *t = r ? region_slabs(r) : NULL;
	if (!t) {
		vmap_range_free(m, "free");
		return NULL;
	}
	struct vmap_slab *d = &t[((uintptr_t)m - r->base) >> VMAP_SLAB_UNIT_SHIFT];
	uint32_t size = (uint32_t)vmap_slab_class_size(c);
	d->free = NULL;
	d->owner = h;
	d->start = (uintptr_t)m;
	d->size = size;
	d->ahead = size & 4095 ? 0 : 64; /* vmap_slab_prefetch */
	d->cap = (uint32_t)(bytes / size);
	d->span = d->cap * size;
	d->over = 0;
	d->wake = 0;
	__atomic_store_n(&d->bump, 0, __ATOMIC_RELAXED);
	d->cls = (uint8_t)c;
	vmap_slab_set_state(d, SLAB_CUR, __ATOMIC_RELAXED);
	d->units = (uint8_t)(bytes >> VMAP_SLAB_UNIT_SHIFT);
	d->shift = class_shift[c];
	d->inv = class_inv[c];
	d->next = d->prev = NULL;
	__atomic_store_n(&d->remote, 0, __ATOMIC_RELAXED);
	for (unsigned i = 1; i < d->units; i++)
		__atomic_store_n(&d[i].head, d, __ATOMIC_RELAXED);
	__atomic_store_n(&d->head, d, __ATOMIC_RELEASE);
	slab_account((uintptr_t)m, 1);
	vmap_stat_inc_local(VMAP_STAT_slabs_made);
	carve(d);
	return d;
}

/* ---- the owner's slow paths ------------------------------------------------ */

/* d (no free object, nothing left to carve) goes on the full list, unless a
 * remote free slipped in: then it is collected and stays usable (false). */
bool vmap_slab_file_full(struct vmap_heap *h, struct vmap_slab *d)
{
	vmap_slab_set_state(d, SLAB_FULL, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&d->remote, __ATOMIC_SEQ_CST) && vmap_slab_collect(d)) {
		vmap_slab_set_state(d, SLAB_CUR, __ATOMIC_RELAXED);
		return false;
	}
	vmap_slab_list_push(&h->full[d->cls], d);
	return true;
}

/* Full slabs that received remote frees since the hint was last seen move to
 * the partial list (or go back, if they are empty now). */
void vmap_slab_rescan_full(struct vmap_heap *h, unsigned c)
{
	h->hint_seen[c] = __atomic_load_n(&h->hint[c], __ATOMIC_RELAXED);
	struct vmap_slab *d = h->full[c], *next;
	for (; d; d = next) {
		next = d->next;
		if (!__atomic_load_n(&d->remote, __ATOMIC_RELAXED))
			continue;
		vmap_slab_list_unlink(&h->full[c], d);
		vmap_slab_collect(d);
		if (vmap_slab_used(d) == 0) {
			vmap_slab_retire(d);
		} else {
			vmap_slab_set_state(d, SLAB_PARTIAL, __ATOMIC_RELAXED);
			vmap_slab_list_push(&h->partial[c], d);
		}
	}
}

/* A slab some exited thread left with live objects, now this heap's. */
static struct vmap_slab *adopt(struct vmap_heap *h, unsigned c)
{
	if (!__atomic_load_n(&vmap_slab_abandoned[c], __ATOMIC_RELAXED))
		return NULL;
	vmap_lock(&vmap_slab_lock, VMAP_RANK_SLAB);
	struct vmap_slab *d = vmap_slab_abandoned[c];
	if (d) {
		/* Off the list and no longer ABANDONED in one step, under the
		 * lock: a free that saw the state would take it off again. */
		vmap_slab_list_unlink(&vmap_slab_abandoned[c], d);
		vmap_slab_set_state(d, SLAB_CUR, __ATOMIC_SEQ_CST);
	}
	vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
	if (d) {
		__atomic_store_n(&d->owner, h, __ATOMIC_SEQ_CST);
		vmap_slab_collect(d);
		vmap_stat_inc_local(VMAP_STAT_slabs_adopted);
	}
	return d;
}

/* Abandoned slabs that remote frees emptied go back to the range allocator
 * (else they would wait for a thread that needs their class).  Under the
 * lock, which keeps adopters away; given back after it (a leaf lock). */
__attribute__((noinline, cold)) void vmap_slab_reap_abandoned(void)
{
	struct vmap_slab *empty = NULL;
	vmap_lock(&vmap_slab_lock, VMAP_RANK_SLAB);
	__atomic_store_n(&vmap_slab_abandoned_reaped, __atomic_load_n(&vmap_slab_abandoned_frees, __ATOMIC_RELAXED),
			 __ATOMIC_RELAXED);
	for (unsigned c = 0; c < NCLASSES; c++) {
		struct vmap_slab *d, *next;
		for (d = vmap_slab_abandoned[c]; d; d = next) {
			next = d->next;
			if (!__atomic_load_n(&d->remote, __ATOMIC_RELAXED))
				continue;
			vmap_slab_collect(d);
			if (vmap_slab_used(d) == 0) {
				vmap_slab_list_unlink(&vmap_slab_abandoned[c], d);
				vmap_slab_set_state(d, SLAB_NONE, __ATOMIC_SEQ_CST);
				d->next = empty;
				empty = d;
			}
		}
	}
	vmap_unlock(&vmap_slab_lock, VMAP_RANK_SLAB);
	while (empty) {
		struct vmap_slab *d = empty;
		empty = d->next;
		d->next = NULL;
		vmap_slab_retire(d);
	}
}

/*
 * A slab of the owner's that became empty: kept back as the class's spare if
 * it has none, the thread's spares stay within SPARE_MAX (resident memory
 * no purge reaches) and it is of the size the class's new slabs now take
 * (slab_bytes), else retired.  A program that keeps N blocks of a class
 * live and frees them in the order it made them (a FIFO: queues, sliding
 * windows) empties one slab every cap allocations; retiring each at once made
 * the next allocation ask the range allocator for a new slab and carve it
 * again, several times the cost of a malloc/free pair served from the slab.
 */
#define SPARE_MAX ((size_t)1 << 20)

void vmap_slab_empty(struct vmap_heap *h, struct vmap_slab *d)
{
	unsigned c = d->cls;
	size_t bytes = vmap_slab_bytes(d);
	if (h->spare[c] || h->spare_bytes + bytes > SPARE_MAX || bytes < slab_bytes(h, c)) {
		vmap_slab_retire(d);
		return;
	}
	vmap_slab_set_state(d, SLAB_PARTIAL, __ATOMIC_RELAXED); /* (on no list) */
	d->next = d->prev = NULL;
	h->spare[c] = d;
	h->spare_bytes += bytes;
}

/* Takes class c's spare slab (NULL if none) out of h's spares. */
struct vmap_slab *vmap_slab_spare_take(struct vmap_heap *h, unsigned c)
{
	struct vmap_slab *d = h->spare[c];
	if (d) {
		h->spare[c] = NULL;
		h->spare_bytes -= vmap_slab_bytes(d);
	}
	return d;
}

/* The current slab of class c has an empty list: make it (or another) ready.
 * Returns the slab now current, with a non-empty list, or NULL. */
__attribute__((noinline)) struct vmap_slab *vmap_slab_refill(struct vmap_heap *h, unsigned c)
{
	struct vmap_slab *d = h->cur[c];
	if (d != &vmap_slab_none) {
		if (__atomic_load_n(&d->remote, __ATOMIC_RELAXED) && vmap_slab_collect(d))
			return d;
		if (d->bump < d->cap) {
			carve(d);
			return d;
		}
		h->cur[c] = &vmap_slab_none;
		if (!vmap_slab_file_full(h, d)) {
			h->cur[c] = d;
			return d;
		}
	}
	if (h->turns[c] < SMALL_SLABS)
		h->turns[c]++;
	if (__atomic_load_n(&h->hint[c], __ATOMIC_RELAXED) != h->hint_seen[c])
		vmap_slab_rescan_full(h, c);
	if (__atomic_load_n(&vmap_slab_abandoned_frees, __ATOMIC_RELAXED) -
		    __atomic_load_n(&vmap_slab_abandoned_reaped, __ATOMIC_RELAXED) >= 64)
		vmap_slab_reap_abandoned();
	while ((d = h->partial[c]) != NULL) {
		vmap_slab_list_unlink(&h->partial[c], d);
		vmap_slab_set_state(d, SLAB_CUR, __ATOMIC_RELAXED);
		if (__atomic_load_n(&d->remote, __ATOMIC_RELAXED))
			vmap_slab_collect(d);
		if (!d->free && d->bump < d->cap)
			carve(d);
		if (d->free) {
			h->cur[c] = d;
			return d;
		}
		vmap_slab_file_full(h, d); /* cannot happen: a partial slab has a free object */
	}
	if ((d = vmap_slab_spare_take(h, c)) != NULL) {
		vmap_slab_set_state(d, SLAB_CUR, __ATOMIC_RELAXED);
		if (!d->free && d->bump < d->cap)
			carve(d);
		h->cur[c] = d;
		return d;
	}
	while ((d = adopt(h, c)) != NULL) {
		if (!d->free && d->bump < d->cap)
			carve(d);
		if (d->free || !vmap_slab_file_full(h, d)) {
			h->cur[c] = d;
			return d;
		}
	}
	d = slab_new(h, c);
	if (d)
		h->cur[c] = d;
	return d;
}

/* An owner's free made d non-full, or empty. */
__attribute__((noinline)) void vmap_slab_owner_free_slow(struct vmap_heap *h, struct vmap_slab *d)
{
	unsigned c = d->cls;
	if (d->state == SLAB_FULL) {
		vmap_slab_list_unlink(&h->full[c], d);
		if (vmap_slab_used(d) == 0) {
			vmap_slab_empty(h, d);
			return;
		}
		vmap_slab_set_state(d, SLAB_PARTIAL, __ATOMIC_RELAXED);
		vmap_slab_list_push(&h->partial[c], d);
	} else if (vmap_slab_used(d) == 0 && d->state == SLAB_PARTIAL) {
		vmap_slab_list_unlink(&h->partial[c], d);
		vmap_slab_empty(h, d);
	}
}
