/*
 * fuzz_slab.c — libFuzzer target: random byte strings as sequences of malloc
 * facade operations under the builtin small backend (core/slab.c), on two
 * threads, checked against a shadow model.
 *
 * The core is linked directly (its sources compiled into the fuzzer by
 * tests/fuzz/build.sh with clang, -DVMAP_DEBUG=1: the range allocator's model
 * check runs on every slab taken from it or given back).  Initialisation is
 * the unit tier's (tests/unit/slab.c): VMAPALLOC_BACKEND=builtin through
 * setenv, then vmap_init(); RESERVE=1G, SHARDS=2, PURGE_DELAY_MS=1,
 * LAZY_MAX=32M unless the environment sets them (another configuration).
 * Both threads are pinned to the first CPU the process may use (one shard,
 * the same counter slot), so that an input replays the same way.
 *
 * Input: a sequence of operations, each an opcode byte followed by its
 * argument bytes (missing bytes read as 0).  Bit 4 of the opcode runs the
 * operation on the worker, a second thread that lives across operations
 * until an `end` operation (or the end of the input) joins it, and starts
 * again when next needed; the main thread waits for it after each one.  An object freed on
 * the thread that did not allocate it is a remote free; the worker's exit
 * abandons its slabs to be adopted (by the next thread that needs their
 * class) or reaped (trim, or after enough remote frees).
 *
 *   malloc   slot sel size24            vmap_malloc into a slot (its old block freed)
 *   calloc   slot n sel size24          vmap_calloc(n, size / n): zero
 *   memalign slot align sel size24      vmap_memalign
 *   free     slot                       vmap_free
 *   realloc  slot sel size24            vmap_realloc (also across 64 KiB, both ways)
 *   query    slot                       usable size, slab geometry, pattern
 *   write    slot                       a new pattern
 *   galloc   g class n                  a group: n objects of one class, up to twice
 *                                       a slab's capacity (full slabs)
 *   gfree    g mode                     frees all of a group, or every other, or half
 *   end                                 joins the worker (its slabs abandoned)
 *   trim     pad                        vmap_trim
 *   reenter  slot mode sel size24       malloc / free / realloc inside a range
 *                                       section, as a signal handler would: glibc
 *                                       or an escape block, the free deferred
 *   check                               the full check below
 *
 * Shadow model: every live block (slots and groups) with its requested size,
 * usable size, alignment and pattern seed.  After every operation: the large
 * block counters equal the model's, and each live heap's lists are
 * consistent (states, owners, classes).  After group operations, trims and at
 * the end, the full check: no two live blocks overlap, every pattern is
 * intact, usable sizes match (a slab object's is its class's size), every
 * slab holding a live object has free-list length + used == objects carved,
 * no live object is on a free list or remote stack, and slabs_in_use covers
 * the slabs seen.  At the end of every input the worker is joined, everything
 * is freed and vmap_trim(0) run: then no large block is live, the main
 * thread's heap holds at most one slab per class (its current one), holding
 * nothing, and slabs_in_use / slab_bytes count exactly those.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "counter.h"
#include "options.h"
#include "range.h"
#include "slab.h"

/* This file is left out of the coverage instrumentation (the core's is what
 * guides the fuzzer): tracing the comparisons of the model's checks made
 * every input several times slower and is no feedback about the allocator. */
#pragma clang attribute push(__attribute__((no_sanitize("coverage"))), apply_to = function)

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define SLOTS 48
#define GROUPS 4
#define GROUP_MAX 8192
#define GROUP_BYTES (8 * MiB)     /* a group holds at most this much */
#define LIVE_BUDGET (160 * MiB)   /* the model refuses large blocks past this */

enum kind { K_NONE, K_SLAB, K_LARGE, K_OTHER /* glibc's or an escape block */ };

struct obj {
	unsigned char *p;
	size_t size;   /* requested */
	size_t usable; /* vmap_usable_size */
	size_t align;
	uint64_t seed;
	uint8_t kind;
};

struct group {
	struct obj o[GROUP_MAX];
	unsigned n;
};

static struct obj slots[SLOTS];
static struct group groups[GROUPS];
static size_t large_bytes; /* the model's live large bytes */
static uint64_t seed_next = 1;

static int main_cpu = -1;

#define FUZZ_NAME "fuzz_slab"
#include "fuzz_input.h"

/* ---- the worker thread ----------------------------------------------------- */

/*
 * One job at a time: main posts it and waits until the worker is done, so
 * the model is only ever touched by one thread.  The worker folds its counter
 * deltas after each job (they are per thread, vmap_stat_read sees only the
 * reader's own), and publishes its heap for the list checks.
 */
static pthread_mutex_t wlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcond = PTHREAD_COND_INITIALIZER;
static void (*wjob)(void *);
static void *wjob_arg;
static int wstate; /* 0 idle, 1 posted, 2 done */
static bool wquit;
static bool worker_alive;
static pthread_t worker;
static struct vmap_heap *worker_heap;

static void pin_to(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof set, &set);
}

static void *worker_main(void *arg)
{
	(void)arg;
	pin_to(main_cpu); /* the same shard as main: replays the same way */
	for (;;) {
		pthread_mutex_lock(&wlock);
		while (wstate != 1)
			pthread_cond_wait(&wcond, &wlock);
		bool quit = wquit;
		pthread_mutex_unlock(&wlock);
		if (quit)
			break;
		wjob(wjob_arg);
		vmap_counter_flush_local();
		worker_heap = vmap_tls.heap;
		pthread_mutex_lock(&wlock);
		wstate = 2;
		pthread_cond_broadcast(&wcond);
		pthread_mutex_unlock(&wlock);
	}
	return NULL; /* the facade's key destructor abandons this thread's slabs */
}

static void post(void (*fn)(void *), void *arg, bool quit)
{
	pthread_mutex_lock(&wlock);
	wjob = fn;
	wjob_arg = arg;
	wquit = quit;
	wstate = 1;
	pthread_cond_broadcast(&wcond);
	if (!quit) {
		while (wstate != 2)
			pthread_cond_wait(&wcond, &wlock);
		wstate = 0;
	}
	pthread_mutex_unlock(&wlock);
}

static void on_worker(void (*fn)(void *), void *arg)
{
	if (!worker_alive) {
		wstate = 0;
		if (pthread_create(&worker, NULL, worker_main, NULL) != 0)
			FAIL("pthread_create");
		worker_alive = true;
	}
	post(fn, arg, false);
}

static void worker_end(void)
{
	if (!worker_alive)
		return;
	post(NULL, NULL, true);
	pthread_join(worker, NULL);
	worker_alive = false;
	worker_heap = NULL;
}

/* ---- patterns ------------------------------------------------------------ */

/* Positions written: every byte of a small object; of a larger one the first
 * and last 64 bytes and three per page (the allocator writes only the first
 * two words of a freed object, and a wrong geometry shifts whole objects). */
static inline unsigned char pat(uint64_t seed, size_t off)
{
	uint64_t x = (seed ^ (off >> 6)) * 0x9e3779b97f4a7c15ull;
	return (unsigned char)((x >> 56) ^ off);
}

#define FOR_PATTERN(n, off, body)                                                   \
	do {                                                                        \
		size_t n_ = (n);                                                    \
		if (n_ <= 256) {                                                    \
			for (size_t off = 0; off < n_; off++)                       \
				body;                                               \
		} else {                                                            \
			for (size_t off = 0; off < 64; off++)                       \
				body;                                               \
			for (size_t off = n_ - 64; off < n_; off++)                 \
				body;                                               \
			for (size_t b_ = 0; b_ < n_; b_ += 4096) {                  \
				size_t o_[3] = {b_ + 1000, b_ + 2048, b_ + 4095};   \
				for (int k_ = 0; k_ < 3; k_++) {                    \
					size_t off = o_[k_];                        \
					if (off < n_)                               \
						body;                               \
				}                                                   \
			}                                                           \
		}                                                                   \
	} while (0)

static void fill(struct obj *o)
{
	unsigned char *c = o->p;
	uint64_t seed = o->seed;
	FOR_PATTERN(o->usable, off, c[off] = pat(seed, off));
}

/* The pattern over the first n bytes (a realloc keeps that much). */
static void verify_n(const struct obj *o, size_t n, const char *when)
{
	const unsigned char *c = o->p;
	uint64_t seed = o->seed;
	size_t usable = o->usable;
	FOR_PATTERN(usable, off, {
		if (off < n && c[off] != pat(seed, off))
			FAIL("%s: block %p (size %zu, usable %zu) corrupted at offset %zu: %#x, "
			     "expected %#x",
			     when, (void *)o->p, o->size, o->usable, off, c[off], pat(seed, off));
	});
}

static void verify(const struct obj *o, const char *when)
{
	verify_n(o, o->usable, when);
}

/* ---- the model's view of blocks ------------------------------------------------ */

static struct vmap_slab *slab_at(const void *p)
{
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	return r ? vmap_slab_of(r, (uintptr_t)p) : NULL;
}

static enum kind kind_of(const void *p)
{
	if (slab_at(p))
		return K_SLAB;
	return vmap_range_owns(p) ? K_LARGE : K_OTHER;
}

/* The main thread's heap, noted by main after each operation (checks also
 * run on the worker, whose vmap_tls.heap is its own). */
static struct vmap_heap *main_h;

static struct vmap_heap *main_heap(void)
{
	return main_h;
}

static bool heap_live(const struct vmap_heap *h)
{
	return h && (h == vmap_tls.heap || h == main_h || (worker_alive && h == worker_heap));
}

/* The slab geometry of a live object. */
static void check_slab_obj(const struct obj *o, const char *when)
{
	struct vmap_slab *d = slab_at(o->p);
	uintptr_t a = (uintptr_t)o->p;
	if (!d || d->head != d)
		FAIL("%s: object %p: descriptor %p is not a slab head", when, (void *)o->p, (void *)d);
	if (a < d->start || a - d->start >= d->span || (a - d->start) % d->size)
		FAIL("%s: object %p is not an object of slab %#lx (size %u, span %u)", when,
		     (void *)o->p, (unsigned long)d->start, d->size, d->span);
	if ((a - d->start) / d->size >= d->bump)
		FAIL("%s: object %p lies past the slab's carved part (bump %u)", when, (void *)o->p,
		     d->bump);
	if (d->size != o->usable || d->size != vmap_slab_class_size(d->cls))
		FAIL("%s: object %p: slab object size %u, class %u of %zu, usable %zu", when,
		     (void *)o->p, d->size, d->cls, vmap_slab_class_size(d->cls), o->usable);
	struct vmap_heap *h = d->owner == VMAP_SLAB_ORPHAN ? NULL : d->owner;
	if (h ? d->state == SLAB_ABANDONED || d->state == SLAB_NONE : d->state != SLAB_ABANDONED)
		FAIL("%s: object %p: slab state %u with owner %p", when, (void *)o->p, d->state,
		     (void *)h);
	if (h && !heap_live(h))
		FAIL("%s: object %p: slab owned by heap %p, not a live thread's (main %p, worker "
		     "%p%s)",
		     when, (void *)o->p, (void *)h, (void *)main_heap(), (void *)worker_heap,
		     worker_alive ? "" : ", ended");
}

static void check_obj(const struct obj *o, const char *when)
{
	if (o->usable < o->size)
		FAIL("%s: usable %zu < requested %zu", when, o->usable, o->size);
	if ((uintptr_t)o->p % o->align)
		FAIL("%s: %p not aligned to %zu", when, (void *)o->p, o->align);
	size_t u = vmap_usable_size(o->p);
	if (u != o->usable)
		FAIL("%s: usable of %p changed from %zu to %zu", when, (void *)o->p, o->usable, u);
	enum kind k = kind_of(o->p);
	if (k != o->kind)
		FAIL("%s: block %p was kind %d, is %d now", when, (void *)o->p, o->kind, k);
	if (k == K_SLAB)
		check_slab_obj(o, when);
}

/* Where the facade sends a request: the range allocator above SMALL_MAX
 * (64 KiB unless the environment sets it) or for alignments over a page, the
 * slabs up to 64 KiB, glibc in between when SMALL_MAX is larger (the range
 * allocator for page alignment). */
static enum kind expected_kind(size_t size, size_t align)
{
	if (align > VMAP_PAGE || size > vmap_opt.small_max)
		return K_LARGE;
	if (size <= VMAP_SLAB_MAX)
		return K_SLAB;
	return align == VMAP_PAGE ? K_LARGE : K_OTHER;
}

/* Records a new block into o (checked, pattern written); may_be_other: glibc's
 * or an escape block is allowed too (re-entered, or realloc of glibc's). */
/* What realloc asks for when it moves a block: a small one that grows takes a
 * quarter more room than asked, if that stays small (alloc.c realloc_copy). */
static size_t realloc_served(size_t old_usable, size_t size)
{
	size_t roomy = old_usable + old_usable / 4;
	return size > old_usable && roomy > size && roomy <= vmap_opt.small_max ? roomy : size;
}

/* served: the size the allocator was asked for (realloc_served for a moved
 * realloc), which decides the block's kind and class. */
static void take(struct obj *o, void *p, size_t size, size_t served, size_t align,
		 bool may_be_other, bool in_place, const char *when)
{
	o->p = p;
	o->size = size;
	o->align = align;
	o->seed = seed_next++ * 0x2545f4914f6cdd1dull;
	o->usable = vmap_usable_size(p);
	enum kind k = kind_of(p);
	o->kind = (uint8_t)k;
	enum kind want = expected_kind(served, align);
	if (!in_place && k != want && !(k == K_OTHER && may_be_other))
		FAIL("%s(%zu, align %zu) = %p: kind %d (1 slab, 2 large, 3 glibc), expected %d",
		     when, size, align, p, k, want);
	/* (realloc keeps an object in place while the request fits in its
	 * class and uses at least half of it: its class is then an older one) */
	if (k == K_SLAB && align <= 16 && !in_place &&
	    o->usable != vmap_slab_class_size(vmap_slab_class_of(served)))
		FAIL("%s(%zu) = %p: usable %zu, its class's size is %zu", when, served, p, o->usable,
		     vmap_slab_class_size(vmap_slab_class_of(served)));
	if (k == K_SLAB && o->usable % align)
		FAIL("%s(%zu, align %zu) = %p: class size %zu not a multiple of the alignment", when,
		     size, align, p, o->usable);
	check_obj(o, when);
	if (k == K_LARGE)
		large_bytes += o->usable;
}

static void drop(struct obj *o)
{
	if (o->kind == K_LARGE)
		large_bytes -= o->usable;
	memset(o, 0, sizeof *o);
}

static void release(struct obj *o, const char *when)
{
	if (!o->p)
		return;
	verify(o, when);
	vmap_free(o->p);
	drop(o);
}

/* ---- heap walks ------------------------------------------------------------ */

static void check_slab_lists(struct vmap_slab *d);
static bool deep; /* the full check: every listed slab's free list too */

struct census {
	unsigned slabs;  /* on the heap's lists */
	unsigned extra;  /* slabs other than the current one of their class */
	int64_t bytes;
	uint64_t busy;   /* objects used but not waiting on a remote stack */
};

static unsigned remote_len(struct vmap_slab *d)
{
	unsigned n = 0;
	uintptr_t w = __atomic_load_n(&d->remote, __ATOMIC_ACQUIRE);
	for (void **r = vmap_slab_remote_top(w); r; r = r[0])
		if (++n > d->cap)
			FAIL("slab %#lx: remote stack longer than its capacity", (unsigned long)d->start);
	if (n != vmap_slab_remote_count(w))
		FAIL("slab %#lx: %u objects on the remote stack, its word counts %u",
		     (unsigned long)d->start, n, vmap_slab_remote_count(w));
	return n;
}

static void check_list_slab(struct vmap_heap *h, struct vmap_slab *d, unsigned c, uint8_t st,
			    struct census *cs)
{
	if (d->head != d || d->owner != h || d->cls != c || d->state != st)
		FAIL("heap %p class %u: slab %#lx (head %p owner %p cls %u state %u) on the list of "
		     "state %u",
		     (void *)h, c, (unsigned long)d->start, (void *)d->head, (void *)d->owner, d->cls,
		     d->state, st);
	uint32_t used = vmap_slab_used(d);
	if (used > d->bump || d->bump > d->cap || d->size != vmap_slab_class_size(c))
		FAIL("slab %#lx: used %u bump %u cap %u size %u", (unsigned long)d->start, used,
		     d->bump, d->cap, d->size);
	/* the owner's free that brings over to 0 moves the slab: never below 1 on a list */
	if (d->over < 1)
		FAIL("slab %#lx (state %u): over %d, wake %d", (unsigned long)d->start, st, d->over,
		     d->wake);
	if (st == SLAB_PARTIAL && used == 0)
		FAIL("slab %#lx: partial and empty (should have gone back)", (unsigned long)d->start);
	cs->slabs++;
	cs->bytes += (int64_t)vmap_range_usable((void *)d->start, "fuzz");
	unsigned r = remote_len(d);
	if (r > used)
		FAIL("slab %#lx: %u objects on the remote stack, %u used", (unsigned long)d->start, r,
		     used);
	cs->busy += used - r;
	if (deep)
		check_slab_lists(d);
}

static void census_heap(struct vmap_heap *h, struct census *cs)
{
	for (unsigned c = 0; c < NCLASSES; c++) {
		if (h->cur[c] != &vmap_slab_none)
			check_list_slab(h, h->cur[c], c, SLAB_CUR, cs);
		unsigned n = 0;
		for (int l = 0; l < 2; l++) {
			struct vmap_slab *prev = NULL;
			for (struct vmap_slab *d = l ? h->full[c] : h->partial[c]; d; d = d->next) {
				if (d->prev != prev)
					FAIL("heap %p class %u: broken prev link", (void *)h, c);
				check_list_slab(h, d, c, l ? SLAB_FULL : SLAB_PARTIAL, cs);
				prev = d;
				if (++n > 100000)
					FAIL("heap %p class %u: a list loops", (void *)h, c);
			}
		}
		cs->extra += n;
	}
	if (vmap_slab_none.free || vmap_slab_none.head)
		FAIL("vmap_slab_none was written");
}

/* ---- counters ---------------------------------------------------------------- */

static void model_large(int64_t *blocks, int64_t *bytes)
{
	*blocks = 0;
	*bytes = 0;
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].kind == K_LARGE) {
			++*blocks;
			*bytes += (int64_t)slots[i].usable;
		}
	for (int g = 0; g < GROUPS; g++) /* (large when SMALL_MAX is below their class) */
		for (unsigned j = 0; j < groups[g].n; j++)
			if (groups[g].o[j].kind == K_LARGE) {
				++*blocks;
				*bytes += (int64_t)groups[g].o[j].usable;
			}
	if ((size_t)*bytes != large_bytes)
		FAIL("model: large bytes %lld, tracked %zu", (long long)*bytes, large_bytes);
}

static void check_counters(const char *when)
{
	int64_t blocks, bytes;
	model_large(&blocks, &bytes);
	int64_t cb = vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	int64_t cy = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	if (cb != blocks || cy != bytes)
		FAIL("%s: counters say %lld large blocks / %lld bytes in use, the model %lld / %lld",
		     when, (long long)cb, (long long)cy, (long long)blocks, (long long)bytes);
	int64_t slabs = vmap_stat_read(VMAP_STAT_slabs_in_use);
	int64_t sbytes = vmap_stat_read(VMAP_STAT_slab_bytes);
	struct census cs = {0};
	if (main_heap())
		census_heap(main_heap(), &cs);
	if (worker_alive && worker_heap)
		census_heap(worker_heap, &cs);
	if (slabs < cs.slabs || sbytes < cs.bytes)
		FAIL("%s: slabs_in_use %lld / slab_bytes %lld, the live heaps hold %u / %lld", when,
		     (long long)slabs, (long long)sbytes, cs.slabs, (long long)cs.bytes);
	if (sbytes < slabs * (int64_t)(64 * KiB) || sbytes > slabs * (int64_t)MiB)
		FAIL("%s: slab_bytes %lld for %lld slabs", when, (long long)sbytes, (long long)slabs);
}

/* ---- the full check ---------------------------------------------------------- */

struct span {
	uintptr_t a, e;
};

static struct span spans[SLOTS + GROUPS * GROUP_MAX];
static struct vmap_slab *seen[SLOTS + GROUPS * GROUP_MAX];

static int span_cmp(const void *x, const void *y)
{
	const struct span *a = x, *b = y;
	return a->a < b->a ? -1 : a->a > b->a;
}

static int ptr_cmp(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t) * (void *const *)x, b = (uintptr_t) * (void *const *)y;
	return a < b ? -1 : a > b;
}

static unsigned nspans;

static bool live_at(uintptr_t a)
{
	size_t lo = 0, hi = nspans;
	while (lo < hi) {
		size_t m = (lo + hi) / 2;
		if (spans[m].a == a)
			return true;
		if (spans[m].a < a)
			lo = m + 1;
		else
			hi = m;
	}
	return false;
}

/* A slab some live object is in: its free list and remote stack hold only
 * free objects of its own, and free + used == carved. */
static void check_slab_lists(struct vmap_slab *d)
{
	unsigned n = 0;
	for (void **f = d->free; f; f = f[0]) {
		uintptr_t a = (uintptr_t)f;
		if (a - d->start >= d->span || (a - d->start) % d->size ||
		    (a - d->start) / d->size >= d->bump)
			FAIL("slab %#lx: free-list entry %p is not a carved object", (unsigned long)d->start,
			     (void *)f);
		if (live_at(a))
			FAIL("slab %#lx: live object %p is on the free list", (unsigned long)d->start,
			     (void *)f);
		if (++n > d->cap)
			FAIL("slab %#lx: the free list loops", (unsigned long)d->start);
	}
	for (void **r = vmap_slab_remote_top(__atomic_load_n(&d->remote, __ATOMIC_ACQUIRE)); r; r = r[0])
		if (live_at((uintptr_t)r))
			FAIL("slab %#lx: live object %p is on the remote stack", (unsigned long)d->start,
			     (void *)r);
	if (n + vmap_slab_used(d) != d->bump)
		FAIL("slab %#lx (class %u, state %u): %u free + %u used != %u carved",
		     (unsigned long)d->start, d->cls, d->state, n, vmap_slab_used(d), d->bump);
}

static void full_check(const char *when, bool patterns)
{
	nspans = 0;
	unsigned nseen = 0;
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].p) {
			check_obj(&slots[i], when);
			verify(&slots[i], when);
			spans[nspans++] = (struct span){(uintptr_t)slots[i].p,
							(uintptr_t)slots[i].p + slots[i].usable};
		}
	for (int g = 0; g < GROUPS; g++)
		for (unsigned j = 0; j < groups[g].n; j++) {
			struct obj *o = &groups[g].o[j];
			check_obj(o, when);
			if (patterns) /* else at their free */
				verify(o, when);
			spans[nspans++] = (struct span){(uintptr_t)o->p, (uintptr_t)o->p + o->usable};
		}
	qsort(spans, nspans, sizeof spans[0], span_cmp);
	for (unsigned i = 1; i < nspans; i++)
		if (spans[i].a < spans[i - 1].e)
			FAIL("%s: live blocks [%#lx,%#lx) and [%#lx,%#lx) overlap", when,
			     (unsigned long)spans[i - 1].a, (unsigned long)spans[i - 1].e,
			     (unsigned long)spans[i].a, (unsigned long)spans[i].e);
	for (unsigned i = 0; i < nspans; i++) {
		struct vmap_slab *d = slab_at((void *)spans[i].a);
		if (d)
			seen[nseen++] = d;
	}
	qsort(seen, nseen, sizeof seen[0], ptr_cmp);
	unsigned distinct = 0;
	for (unsigned i = 0; i < nseen; i++)
		if (i == 0 || seen[i] != seen[i - 1]) {
			distinct++;
			check_slab_lists(seen[i]);
		}
	if (vmap_stat_read(VMAP_STAT_slabs_in_use) < distinct)
		FAIL("%s: slabs_in_use %lld, live objects are in %u slabs", when,
		     (long long)vmap_stat_read(VMAP_STAT_slabs_in_use), distinct);
	deep = patterns; /* the long walk, with the patterns */
	check_counters(when);
	deep = false;
}

/* ---- operations ---------------------------------------------------------- */

/* Biased to the slab sizes; some large, some on the borders. */
static size_t pick_size(uint8_t sel, uint32_t v)
{
	switch (sel % 10) {
	case 0: return v % 129;
	case 1: return v % 1025;
	case 2: return v % 8193;
	case 3: return v % (VMAP_SLAB_MAX + 1);
	case 4: { /* a class's size, or one byte either side */
		size_t s = vmap_slab_class_size(v % NCLASSES) + (v >> 8) % 3 - 1;
		return s;
	}
	case 5: return VMAP_SLAB_MAX - 8 + v % 17; /* the border with the range allocator */
	case 6: return vmap_opt.small_max - 8 + v % 17; /* the facade's border (if not 64 KiB) */
	case 7: return VMAP_SLAB_MAX + 1 + v % MiB;
	case 8: return v % (2 * MiB); /* (the range fuzzer covers larger ones) */
	default: return v % 4096;
	}
}

struct op {
	uint8_t code;
	int slot;
	uint8_t a, b;
	uint32_t v;
};

static bool budget_ok(size_t size)
{
	return size <= VMAP_SLAB_MAX || large_bytes + size <= LIVE_BUDGET;
}

static void op_malloc(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	release(s, "before malloc");
	size_t size = pick_size(o->a, o->v);
	if (!budget_ok(size))
		return;
	void *p = vmap_malloc(size);
	if (!p)
		FAIL("malloc(%zu) = NULL", size);
	take(s, p, size, size, 16, false, false, "malloc");
	fill(s);
}

static void op_calloc(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	release(s, "before calloc");
	size_t n = 1 + o->a % 8;
	size_t each = pick_size(o->b, o->v) / n;
	if (!budget_ok(n * each))
		return;
	unsigned char *p = vmap_calloc(n, each);
	if (!p)
		FAIL("calloc(%zu, %zu) = NULL", n, each);
	take(s, p, n * each, n * each, 16, false, false, "calloc");
	for (size_t i = 0; i < n * each; i++)
		if (p[i])
			FAIL("calloc(%zu, %zu) = %p: byte %zu is %#x", n, each, (void *)p, i, p[i]);
	fill(s);
}

static void op_memalign(const struct op *o)
{
	static const size_t table[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 48, 8192,
				       32, 64, 256, 24, 16 * KiB, 64 * KiB, 2048, 1024};
	struct obj *s = &slots[o->slot];
	release(s, "before memalign");
	size_t align = table[o->a % (sizeof table / sizeof table[0])];
	size_t size = pick_size(o->b, o->v);
	if (!budget_ok(size))
		return;
	void *p = vmap_memalign(align, size);
	if (!p)
		FAIL("memalign(%zu, %zu) = NULL", align, size);
	size_t eff = align < 16 ? 16 : align;
	if (eff & (eff - 1))
		eff = (size_t)1 << (64 - __builtin_clzll(eff)); /* glibc rounds up */
	take(s, p, size, size, eff, false, false, "memalign");
	fill(s);
}

static void op_free(const struct op *o)
{
	release(&slots[o->slot], "before free");
}

static void op_realloc(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	size_t size = pick_size(o->a, o->v);
	if (o->b % 16 == 0)
		size = 0; /* glibc: frees, returns NULL */
	if (!budget_ok(size))
		return;
	if (!s->p) {
		void *p = vmap_realloc(NULL, size);
		if (!p)
			FAIL("realloc(NULL, %zu) = NULL", size);
		take(s, p, size, size, 16, false, false, "realloc(NULL)");
		fill(s);
		return;
	}
	verify(s, "before realloc");
	struct obj old = *s;
	void *q = vmap_realloc(s->p, size);
	if (size == 0) {
		if (q)
			FAIL("realloc(%p, 0) = %p, not NULL", (void *)old.p, q);
		drop(s);
		return;
	}
	if (!q)
		FAIL("realloc(%p, %zu) = NULL", (void *)old.p, size);
	drop(s);
	take(s, q, size, realloc_served(old.usable, size), 16, old.kind == K_OTHER, q == old.p,
	     "realloc");
	if (old.kind == K_SLAB && q == old.p && s->usable != old.usable)
		FAIL("realloc(%p, %zu) in place: usable %zu -> %zu", q, size, old.usable, s->usable);
	if (old.kind == K_SLAB && s->kind == K_SLAB && size <= old.usable &&
	    size >= old.usable / 2 && q != old.p)
		FAIL("realloc(%p, %zu) moved an object of size %zu that still fits", (void *)old.p,
		     size, old.usable);
	/* The kept part, then the pattern over the whole block. */
	struct obj kept = old; /* the old pattern's positions, at the new address */
	kept.p = s->p;
	verify_n(&kept, old.usable < size ? old.usable : size, "realloc");
	fill(s);
}

static void op_query(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	if (!s->p)
		return;
	check_obj(s, "query");
	verify(s, "query");
}

static void op_write(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	if (!s->p)
		return;
	verify(s, "before rewrite");
	s->seed = seed_next++ * 0x2545f4914f6cdd1dull;
	fill(s);
}

static void group_free(struct group *g, uint8_t mode)
{
	unsigned n = g->n, k = 0;
	switch (mode % 4) {
	case 0:
		for (unsigned j = 0; j < n; j++)
			release(&g->o[j], "group free");
		break;
	case 1:
		for (unsigned j = n; j-- > 0;)
			release(&g->o[j], "group free");
		break;
	case 2: /* every other: partial slabs with holes */
		for (unsigned j = 0; j < n; j++)
			if (j % 2)
				release(&g->o[j], "group free");
			else
				g->o[k++] = g->o[j];
		g->n = k;
		return;
	default: /* the first half */
		for (unsigned j = 0; j < n / 2; j++)
			release(&g->o[j], "group free");
		for (unsigned j = n / 2; j < n; j++)
			g->o[k++] = g->o[j];
		g->n = k;
		return;
	}
	g->n = 0;
}

/* Up to twice a slab's capacity of one class: full slabs, several of them. */
static void op_galloc(const struct op *o)
{
	struct group *g = &groups[o->slot % GROUPS];
	group_free(g, 0);
	unsigned c = o->a % NCLASSES;
	size_t csize = vmap_slab_class_size(c);
	size_t lo = c ? vmap_slab_class_size(c - 1) + 1 : 0;
	size_t slab = csize <= 1024 ? 64 * KiB : csize <= 8192 ? 256 * KiB : MiB;
	size_t cap = slab / csize;
	size_t n = 1 + cap * (1 + o->b % 8) / 4; /* a quarter .. twice a slab */
	if (n > GROUP_MAX)
		n = GROUP_MAX;
	if (n * csize > GROUP_BYTES)
		n = GROUP_BYTES / csize;
	for (size_t j = 0; j < n; j++) {
		size_t size = lo + (o->v + j) % (csize - lo + 1);
		void *p = vmap_malloc(size);
		if (!p)
			FAIL("malloc(%zu) = NULL (group)", size);
		take(&g->o[j], p, size, size, 16, false, false, "malloc (group)");
		fill(&g->o[j]);
		g->n = (unsigned)j + 1;
	}
}

static void op_gfree(const struct op *o)
{
	group_free(&groups[o->slot % GROUPS], o->a);
}

static void op_trim(const struct op *o)
{
	vmap_trim(o->a);
}

/* As a signal handler that interrupted a range section would: glibc or an
 * escape block for a new block, the free parked until the section ends. */
static void op_reenter(const struct op *o)
{
	struct obj *s = &slots[o->slot];
	size_t size = pick_size(o->b, o->v);
	if (size == 0)
		size = 1;
	switch (o->a % 3) {
	case 0: {
		release(s, "before reentered malloc");
		vmap_depth_enter();
		void *p = vmap_malloc(size);
		vmap_depth_leave();
		if (!p)
			FAIL("reentered malloc(%zu) = NULL", size);
		take(s, p, size, size, 16, true, false, "reentered malloc");
		if (s->kind != K_OTHER)
			FAIL("reentered malloc(%zu) = %p from the slabs or the arena", size, p);
		fill(s);
		break;
	}
	case 1:
		if (!s->p)
			return;
		verify(s, "before reentered free");
		vmap_depth_enter();
		vmap_free(s->p);
		vmap_depth_leave(); /* the parked free is done here */
		drop(s);
		break;
	default: {
		if (!s->p)
			return;
		verify(s, "before reentered realloc");
		struct obj old = *s;
		vmap_depth_enter();
		void *q = vmap_realloc(s->p, size);
		vmap_depth_leave();
		if (!q)
			FAIL("reentered realloc(%p, %zu) = NULL", (void *)old.p, size);
		drop(s);
		take(s, q, size, realloc_served(old.usable, size), 16, true, q == old.p,
	     "reentered realloc");
		struct obj kept = old; /* the old pattern's positions, at the new address */
		kept.p = s->p;
		verify_n(&kept, old.usable < size ? old.usable : size, "reentered realloc");
		fill(s);
		break;
	}
	}
}

static void run_op(void *arg)
{
	const struct op *o = arg;
	switch (o->code) {
	case 0: case 1: op_malloc(o); break;
	case 2: op_calloc(o); break;
	case 3: op_memalign(o); break;
	case 4: case 5: op_free(o); break;
	case 6: case 7: op_realloc(o); break;
	case 8: op_query(o); break;
	case 9: op_write(o); break;
	case 10: op_galloc(o); break;
	case 11: op_gfree(o); break;
	case 13: op_trim(o); break;
	case 14: op_reenter(o); break;
	default: break;
	}
}

/* ---- libFuzzer entry points ------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* The environment's VMAPALLOC_* settings win, but for the backend. */
	setenv("VMAPALLOC_BACKEND", "builtin", 1);
	setenv("VMAPALLOC_RESERVE", "1G", 0);
	setenv("VMAPALLOC_SHARDS", "2", 0);
	setenv("VMAPALLOC_PURGE_DELAY_MS", "1", 0);
	setenv("VMAPALLOC_LAZY_MAX", "32M", 0);
	vmap_init();
	if (!vmap_slab_on)
		FAIL("VMAPALLOC_BACKEND=builtin did not turn the slabs on");
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &set)) {
				main_cpu = c;
				break;
			}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = {data, size, 0};
	pin_to(main_cpu);
	unsigned ops = 0;
	while (in.i < in.n && ops++ < 200) {
		uint8_t b = u8(&in);
		struct op o = {.code = b % 16};
		bool worker_side = b & 0x10;
		switch (o.code) {
		case 0: case 1: case 6: case 7: case 14: /* slot sel size24 / slot mode sel size24 */
			o.slot = u8(&in) % SLOTS;
			o.a = u8(&in);
			if (o.code == 14)
				o.b = u8(&in);
			o.v = u24(&in);
			if (o.code == 6 || o.code == 7)
				o.b = (uint8_t)(o.v >> 16 ^ o.v);
			break;
		case 2: case 3: /* slot a b size24 */
			o.slot = u8(&in) % SLOTS;
			o.a = u8(&in);
			o.b = u8(&in);
			o.v = u24(&in);
			break;
		case 4: case 5: case 8: case 9:
			o.slot = u8(&in) % SLOTS;
			break;
		case 10:
			o.slot = u8(&in);
			o.a = u8(&in);
			o.b = u8(&in);
			o.v = u8(&in);
			break;
		case 11:
			o.slot = u8(&in);
			o.a = u8(&in);
			break;
		case 13:
			o.a = u8(&in);
			break;
		default:
			break;
		}
		if (o.code == 12) {
			worker_end();
		} else if (o.code == 15) {
			full_check("check", true);
			continue;
		} else if (worker_side) {
			on_worker(run_op, &o);
		} else {
			run_op(&o);
			main_h = vmap_tls.heap;
		}
		if (o.code == 10 || o.code == 11 || o.code == 13)
			full_check("after a group op or trim", false);
		else
			check_counters("after an operation");
	}
	full_check("end", true);
	/* The worker joined (its slabs abandoned, some of them with live
	 * objects, or freed first: the last byte decides), everything freed
	 * from this thread, then trim: only this thread's current slabs stay. */
	bool free_first = size && (data[size - 1] & 1);
	struct op all = {.code = 4};
	if (free_first && worker_alive)
		for (int i = 0; i < SLOTS; i += 2) {
			all.slot = i;
			on_worker(run_op, &all); /* half of them from the worker */
		}
	worker_end();
	for (int i = 0; i < SLOTS; i++)
		release(&slots[i], "end");
	for (int g = 0; g < GROUPS; g++)
		group_free(&groups[g], 0);
	main_h = vmap_tls.heap;
	if (large_bytes)
		FAIL("model leak: %zu large bytes after freeing everything", large_bytes);
	vmap_trim(0);
	check_counters("at the end");
	int64_t lb = vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	if (lb)
		FAIL("%lld large blocks in use with everything freed", (long long)lb);
	struct census cs = {0};
	if (main_heap())
		census_heap(main_heap(), &cs);
	int64_t slabs = vmap_stat_read(VMAP_STAT_slabs_in_use);
	int64_t sbytes = vmap_stat_read(VMAP_STAT_slab_bytes);
	if (cs.busy)
		FAIL("%llu objects said in use with everything freed", (unsigned long long)cs.busy);
	if (slabs != cs.slabs || sbytes != cs.bytes)
		FAIL("with everything freed and trimmed, slabs_in_use %lld / slab_bytes %lld, but "
		     "this thread's heap holds %u / %lld (no other heap is live)",
		     (long long)slabs, (long long)sbytes, cs.slabs, (long long)cs.bytes);
	if (cs.extra)
		FAIL("with everything freed and trimmed, %u slabs besides the current ones stay",
		     cs.extra);
	return 0;
}

#pragma clang attribute pop
