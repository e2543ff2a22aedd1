/*
 * slab.c — unit tests of core/slab.c, the builtin small backend, through the
 * facade (VMAPALLOC_BACKEND=builtin): size classes, reuse, slabs given back,
 * remote frees into current and full slabs, abandoned slabs adopted, aligned
 * objects, and a cross-thread stress with every object's contents checked.
 */
#include "unit.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "alloc.h"
#include "counter.h"
#include "range.h"
#include "slab.h"
#include "stats.h"

static void setup(void)
{
	unsetenv("VMAPALLOC_SMALL_MAX");
	setenv("VMAPALLOC_BACKEND", "builtin", 1);
	setenv("VMAPALLOC_SHARDS", "1", 1);
	setenv("VMAPALLOC_PURGE_DELAY_MS", "0", 1);
	vmap_init();
	cr_assert(vmap_slab_on, "VMAPALLOC_BACKEND=builtin turns the slabs on");
}

static int64_t stat_of(enum vmap_stat s)
{
	return vmap_stat_read(s);
}

static void pat_fill(void *p, size_t n, unsigned seed)
{
	unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		c[i] = (unsigned char)(seed * 131 + i * 7);
}

static bool pat_intact(const void *p, size_t n, unsigned seed)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		if (c[i] != (unsigned char)(seed * 131 + i * 7))
			return false;
	return true;
}

Test(slab, size_classes_are_tight_and_cover_every_size)
{
	unsigned n = vmap_slab_nclasses();
	cr_assert_eq(vmap_slab_class_size(n - 1), VMAP_SLAB_MAX);
	for (unsigned c = 0; c < n; c++) {
		cr_assert_eq(vmap_slab_class_size(c) % 16, 0, "class %u", c);
		if (c)
			cr_assert_gt(vmap_slab_class_size(c), vmap_slab_class_size(c - 1));
	}
	for (size_t s = 0; s <= VMAP_SLAB_MAX; s++) {
		unsigned c = vmap_slab_class_of(s);
		cr_assert_lt(c, n, "size %zu", s);
		cr_assert_geq(vmap_slab_class_size(c), s, "size %zu in class %u", s, c);
		if (c)
			cr_assert_lt(vmap_slab_class_size(c - 1), s, "size %zu could use class %u", s,
				     c - 1);
		/* at most 25% (and 15 bytes) wasted */
		cr_assert_leq(vmap_slab_class_size(c), s + s / 4 + 16, "size %zu", s);
	}
}

Test(slab, objects_are_distinct_aligned_and_sized, .init = setup)
{
	enum { N = 600 };
	static void *p[N];
	static size_t sz[N];
	for (unsigned i = 0; i < N; i++) {
		sz[i] = (size_t)(i * 97) % 70000;
		if (sz[i] > VMAP_SLAB_MAX)
			sz[i] = i;
		p[i] = vmap_malloc(sz[i]);
		cr_assert_not_null(p[i]);
		cr_assert_eq((uintptr_t)p[i] % 16, 0);
		cr_assert(vmap_in_slab((uintptr_t)p[i]), "%zu bytes from a slab", sz[i]);
		size_t u = vmap_usable_size(p[i]);
		cr_assert_eq(u, vmap_slab_class_size(vmap_slab_class_of(sz[i])));
		pat_fill(p[i], u, i);
	}
	for (unsigned i = 0; i < N; i++)
		cr_assert(pat_intact(p[i], vmap_usable_size(p[i]), i), "object %u overlapped", i);
	for (unsigned i = 0; i < N; i++)
		vmap_free(p[i]);
	cr_assert_eq(stat_of(VMAP_STAT_large_blocks_in_use), 0, "slabs are not large blocks");
}

Test(slab, a_freed_object_is_reused_first, .init = setup)
{
	void *a = vmap_malloc(40);
	vmap_free(a);
	void *b = vmap_malloc(48);
	cr_assert_eq(a, b, "same class: the last freed object comes back");
	vmap_free(b);
}

/* The metadata a malloc and a free touch stays off the L1 set of a
 * page-aligned object's first line (slab.h, slab_heap.c): for slabs at
 * every 64 KiB unit of a page of descriptors, the descriptor's used lines,
 * and the heap's counts and current slabs. */
Test(slab, metadata_stays_off_the_first_line_of_a_page, .init = setup)
{
	enum { N = 40 };
	void *p[N];
	for (unsigned i = 0; i < N; i++)
		p[i] = vmap_malloc(65536); /* 4 a slab: slabs at many units */
	bool at_page_start = false;
	for (unsigned i = 0; i < N; i++) {
		struct vmap_slab *d = vmap_slab_at((uintptr_t)p[i]);
		cr_assert_not_null(d);
		at_page_start |= ((uintptr_t)d & 4095) == 0;
		uintptr_t lo = (uintptr_t)&d->head, hi = (uintptr_t)(&d->remote + 1);
		for (uintptr_t a = lo; a < hi; a += 8)
			cr_assert_geq(a & 4095, 64, "descriptor field at %p in a page's first line",
				      (void *)a);
	}
	cr_assert(at_page_start, "some slab's descriptor starts a page of descriptors");
	struct vmap_heap *h = vmap_tls.heap;
	cr_assert_not_null(h);
	for (uintptr_t a = (uintptr_t)h; a < (uintptr_t)(h + 1); a += 8)
		cr_assert_geq(a & 4095, 64, "heap field at %p in a page's first line", (void *)a);
	for (unsigned i = 0; i < N; i++)
		vmap_free(p[i]);
}

/* vmap_slab_index (the division-free check of free, usable size and remote
 * frees): every offset of a slab of every class, carved in full, maps to its
 * object's index at an object's start and to no index below the slab's
 * count anywhere else. */
Test(slab, the_index_check_accepts_object_starts_only, .init = setup)
{
	for (unsigned c = 0; c < vmap_slab_nclasses(); c++) {
		size_t size = vmap_slab_class_size(c);
		void *p = vmap_malloc(size);
		struct vmap_slab *d = vmap_slab_at((uintptr_t)p);
		cr_assert_not_null(d, "class %u", c);
		size_t bytes = (size_t)d->units << VMAP_SLAB_UNIT_SHIFT;
		for (size_t off = 0; off < bytes; off++) {
			uint32_t idx = vmap_slab_index(d, (void *)(d->start + off));
			if (off % size == 0 && off / size < d->cap)
				cr_assert_eq(idx, off / size, "class %u offset %zu", c, off);
			else
				cr_assert_geq(idx, d->cap, "class %u offset %zu: index %u", c, off, idx);
		}
		vmap_free(p);
	}
}

/* A full slab takes mallocs again only once an eighth of its objects are
 * free: one free would make it the next refill's slab, which one malloc
 * runs dry again (random frees then took a refill every few mallocs). */
Test(slab, a_full_slab_serves_again_once_an_eighth_is_free, .init = setup)
{
	enum { PER = 64 }; /* 1 KiB objects: 64 per 64 KiB slab */
	static void *a[PER], *c[2 * PER];
	for (unsigned i = 0; i < PER; i++)
		a[i] = vmap_malloc(1024);
	uintptr_t lo = (uintptr_t)a[0], hi = lo;
	for (unsigned i = 0; i < PER; i++) {
		lo = (uintptr_t)a[i] < lo ? (uintptr_t)a[i] : lo;
		hi = (uintptr_t)a[i] > hi ? (uintptr_t)a[i] : hi;
	}
	cr_assert_eq(hi - lo, (PER - 1) * 1024, "the first 64 objects fill one slab");
	for (unsigned i = 0; i < PER; i++) /* a second slab, run dry */
		c[i] = vmap_malloc(1024);
	vmap_free(a[5]);
	void *x = vmap_malloc(1024);
	cr_assert((uintptr_t)x < lo || (uintptr_t)x > hi,
		  "one free object does not make the full slab the next refill's");
	for (unsigned i = 0; i < PER / 8; i++)
		if (i != 5)
			vmap_free(a[i]);
	for (unsigned i = PER; i < 2 * PER - 1; i++) /* the third slab, run dry */
		c[i] = vmap_malloc(1024);
	void *y = vmap_malloc(1024);
	cr_assert((uintptr_t)y >= lo && (uintptr_t)y <= hi,
		  "with an eighth of it free, the full slab serves the next refill");
	vmap_free(x);
	vmap_free(y);
	for (unsigned i = PER / 8; i < PER; i++)
		vmap_free(a[i]);
	for (unsigned i = 0; i < 2 * PER - 1; i++)
		vmap_free(c[i]);
}

Test(slab, empty_slabs_other_than_the_current_go_back, .init = setup)
{
	enum { N = 5000 }; /* 64-byte objects: 1024 per 64 KiB slab */
	static void *p[N];
	int64_t s0 = stat_of(VMAP_STAT_slabs_in_use);
	for (unsigned i = 0; i < N; i++)
		p[i] = vmap_malloc(64);
	int64_t s1 = stat_of(VMAP_STAT_slabs_in_use);
	cr_assert_geq(s1 - s0, 5, "%d slabs for %d objects", (int)(s1 - s0), N);
	cr_assert_geq(stat_of(VMAP_STAT_slab_bytes), (s1 - s0) * 65536);
	for (unsigned i = 0; i < N; i++)
		vmap_free(p[i]);
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use) - s0, 2,
		      "only the current slab and one spare stay");
	vmap_slab_trim();
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use) - s0, 1, "the trim gives the spare back");
}

/* Spares are resident memory no purge reaches: a thread keeps at most 1 MiB
 * of them (sixteen slabs of 64 KiB), whatever the number of classes it
 * empties.  Twenty classes of up to 1 KiB (64 KiB slabs), three slabs each:
 * the current slab of each stays, and sixteen spares. */
Test(slab, spare_slabs_are_capped_per_thread, .init = setup)
{
	enum { NS = 20, MAXN = 2 * 4096 + 1 };
	static void *p[MAXN]; /* (static: not an allocation of its own) */
	size_t sizes[NS];
	for (unsigned k = 0; k < NS; k++)
		sizes[k] = vmap_slab_class_size(k);
	cr_assert_eq(sizes[NS - 1], 1024, "the twentieth class is 1 KiB's");
	int64_t s0 = stat_of(VMAP_STAT_slabs_in_use);
	for (unsigned k = 0; k < NS; k++) {
		unsigned n = (unsigned)(2 * ((64u << 10) / sizes[k]) + 1); /* 3 slabs, the last current */
		for (unsigned i = 0; i < n; i++)
			p[i] = vmap_malloc(sizes[k]);
		for (unsigned i = 0; i < n; i++)
			vmap_free(p[i]);
	}
	int64_t n = stat_of(VMAP_STAT_slabs_in_use) - s0;
	cr_assert_eq(n, NS + 16, "the current slab of each class and 16 spares: %d", (int)n);
}

/* The sizes of the slabs made while a thread allocates n objects of one size
 * and keeps them: the first and the last. */
static void slabs_made_for(size_t size, unsigned n, int64_t *first, int64_t *last)
{
	void **p = vmap_malloc(n * sizeof(void *));
	cr_assert_not_null(p);
	*first = *last = 0;
	for (unsigned i = 0; i < n; i++) {
		int64_t b0 = stat_of(VMAP_STAT_slab_bytes);
		p[i] = vmap_malloc(size);
		cr_assert_not_null(p[i]);
		int64_t grew = stat_of(VMAP_STAT_slab_bytes) - b0;
		if (grew > 0 && !*first)
			*first = grew;
		if (grew > 0)
			*last = grew;
	}
	for (unsigned i = 0; i < n; i++)
		vmap_free(p[i]);
	vmap_free(p);
}

/* A slab lives as long as any of its objects, with every page they touched:
 * a thread's first slabs of a class are 64 KiB, so that the few objects of
 * 1-64 KiB a short-lived thread leaves behind hold no more; a class the
 * thread keeps needing slabs of takes 256 KiB ones for objects over 1 KiB
 * (fewer slab changes), and keeps 64 KiB ones for smaller objects. */
Test(slab, slabs_grow_for_the_classes_a_thread_uses_most, .init = setup)
{
	static const struct {
		size_t size, later;
	} cases[] = {{1024, 64 << 10}, {1040, 256 << 10}, {8192, 256 << 10}, {65536, 256 << 10}};
	for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int64_t first, last;
		/* forty slabs of 64 KiB; after the growth, more than one of 256 */
		unsigned n = (unsigned)(40 * ((64u << 10) / cases[k].size));
		slabs_made_for(cases[k].size, n, &first, &last);
		cr_assert_eq(first, 64 << 10, "a %zu-byte object's first slab: %lld bytes",
			     cases[k].size, (long long)first);
		cr_assert_eq(last, (int64_t)cases[k].later, "a %zu-byte object's later slabs: %lld bytes",
			     cases[k].size, (long long)last);
	}
}

/* A window of live blocks freed in the order they were made (a FIFO) empties
 * one slab every cap allocations: the empty slab is kept as the class's spare
 * and reused, instead of going back to the range allocator and a new one
 * being made and carved for the next allocation.  (The class's first slabs
 * are small: once it has grown, the small ones emptied go back.) */
Test(slab, a_fifo_window_reuses_its_slabs, .init = setup)
{
	enum { W = 64, N = 20000 }; /* 4 KiB objects: 64 per 256 KiB slab */
	static void *p[W];
	int64_t made = 0, s0 = stat_of(VMAP_STAT_slabs_in_use);
	for (unsigned i = 0; i < W; i++)
		p[i] = vmap_malloc(4096);
	for (unsigned i = 0; i < N; i++) {
		if (i == 16 * W) /* settled: grown, the small slabs gone */
			made = stat_of(VMAP_STAT_slabs_made);
		void *q = vmap_malloc(4096); /* then the oldest goes */
		memset(q, (int)i, 4096);
		vmap_free(p[i % W]);
		p[i % W] = q;
	}
	cr_assert_eq(stat_of(VMAP_STAT_slabs_made), made, "no slab made in the steady state");
	int64_t n = stat_of(VMAP_STAT_slabs_in_use) - s0;
	cr_assert_leq(n, 3, "the window in slabs of 256 KiB (two, and the spare): %d", (int)n);
	for (unsigned i = 0; i < W; i++)
		vmap_free(p[i]);
}

struct handoff {
	void **p;
	unsigned n;
	size_t size;
};

static void *free_all(void *arg)
{
	struct handoff *h = arg;
	for (unsigned i = 0; i < h->n; i++)
		vmap_free(h->p[i]);
	return NULL;
}

static void *alloc_all(void *arg)
{
	struct handoff *h = arg;
	for (unsigned i = 0; i < h->n; i++) {
		h->p[i] = vmap_malloc(h->size);
		cr_assert_not_null(h->p[i]);
		pat_fill(h->p[i], h->size, i);
	}
	return NULL;
}

Test(slab, remote_frees_are_collected_by_the_owner, .init = setup)
{
	enum { N = 20000 }; /* 100-byte objects: ~30 full slabs */
	static void *p[N];
	struct handoff h = {p, N, 100};
	for (int round = 0; round < 5; round++) {
		alloc_all(&h);
		int64_t in_use = stat_of(VMAP_STAT_slabs_in_use);
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, free_all, &h), 0);
		pthread_join(t, NULL);
		/* the owner collects the remote frees (emptied full slabs go back
		 * to the range allocator and come again): no growth */
		alloc_all(&h);
		cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use), in_use + 1,
			      "round %d: %lld slabs, %lld before the remote frees", round,
			      (long long)stat_of(VMAP_STAT_slabs_in_use), (long long)in_use);
		for (unsigned i = 0; i < N; i++) {
			cr_assert(pat_intact(p[i], 100, i));
			vmap_free(p[i]);
		}
	}
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use), 4);
}

Test(slab, slabs_of_an_exited_thread_are_adopted, .init = setup)
{
	enum { N = 3000 };
	static void *p[N];
	struct handoff h = {p, N, 200};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, alloc_all, &h), 0);
	pthread_join(t, NULL); /* its slabs are abandoned, every object live */
	for (unsigned i = 0; i < N; i += 2)
		vmap_free(p[i]);
	int64_t made = stat_of(VMAP_STAT_slabs_made);
	static void *q[N / 2];
	for (unsigned i = 0; i < N / 2; i++) {
		q[i] = vmap_malloc(200);
		pat_fill(q[i], 200, 7 * i);
	}
	cr_assert_geq(stat_of(VMAP_STAT_slabs_adopted), 1);
	cr_assert_leq(stat_of(VMAP_STAT_slabs_made) - made, 1, "the freed halves were reused");
	for (unsigned i = 1; i < N; i += 2) {
		cr_assert(pat_intact(p[i], 200, i), "a live object of the exited thread changed");
		vmap_free(p[i]);
	}
	for (unsigned i = 0; i < N / 2; i++) {
		cr_assert(pat_intact(q[i], 200, 7 * i));
		vmap_free(q[i]);
	}
}

/* A free into a slab an exited thread left takes the slab over: the thread's
 * further frees into it are its own (the fast path's), and slabs emptied so
 * go back or stay as the spare. */
Test(slab, a_free_into_an_exited_threads_slab_takes_it_over, .init = setup)
{
	enum { N = 3000 }; /* 200-byte objects: ~10 slabs */
	static void *p[N];
	struct handoff h = {p, N, 200};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, alloc_all, &h), 0);
	pthread_join(t, NULL); /* its slabs are abandoned, every object live */
	vmap_free(vmap_malloc(16)); /* this thread has a heap (a thread that only frees has none) */
	int64_t adopted = stat_of(VMAP_STAT_slabs_adopted);
	int64_t in_use = stat_of(VMAP_STAT_slabs_in_use);
	uint64_t m0, f0, m1, f1;
	vmap_slab_fast_counts(&m0, &f0);
	for (unsigned i = 0; i < N; i += 2)
		vmap_free(p[i]);
	vmap_slab_fast_counts(&m1, &f1);
	int64_t taken = stat_of(VMAP_STAT_slabs_adopted) - adopted;
	cr_assert_geq(taken, in_use - 1, "%lld of %lld abandoned slabs taken over", (long long)taken,
		      (long long)in_use);
	cr_assert_geq(f1 - f0, N / 2 - (uint64_t)taken - 1,
		      "after the first free into each, the frees are the owner's: %llu of %u",
		      (unsigned long long)(f1 - f0), N / 2);
	for (unsigned i = 1; i < N; i += 2) {
		cr_assert(pat_intact(p[i], 200, i), "a live object of the exited thread changed");
		vmap_free(p[i]);
	}
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use), 2, "emptied slabs went back");
}

/* A thread that never allocated (no heap) frees into an exited thread's
 * slabs (no owner) and into this thread's: remote frees, the slabs left to
 * whoever needs them; no owner's path for a thread without a heap.  The
 * objects come back whole, the emptied slabs go back once reaped. */
Test(slab, a_thread_without_a_heap_frees_into_ownerless_slabs, .init = setup)
{
	enum { N = 3000 };
	static void *p[N], *q[N];
	struct handoff a = {p, N, 200}, b = {q, N, 200};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, alloc_all, &a), 0);
	pthread_join(t, NULL); /* its slabs are abandoned, every object live */
	alloc_all(&b);         /* and as many of this thread's */
	int64_t adopted = stat_of(VMAP_STAT_slabs_adopted);
	uint64_t m0, f0, m1, f1;
	vmap_slab_fast_counts(&m0, &f0);
	struct handoff half_p = {p, N / 2, 200}, half_q = {q, N / 2, 200};
	cr_assert_eq(pthread_create(&t, NULL, free_all, &half_p), 0);
	pthread_join(t, NULL);
	cr_assert_eq(pthread_create(&t, NULL, free_all, &half_q), 0);
	pthread_join(t, NULL);
	vmap_slab_fast_counts(&m1, &f1);
	cr_assert_eq(f1 - f0, 0, "no free of a thread without a heap is an owner's");
	cr_assert_eq(stat_of(VMAP_STAT_slabs_adopted), adopted, "nothing taken over");
	for (unsigned i = N / 2; i < N; i++) {
		cr_assert(pat_intact(p[i], 200, i), "a live object of the exited thread changed");
		cr_assert(pat_intact(q[i], 200, i), "a live object of this thread changed");
		vmap_free(p[i]);
		vmap_free(q[i]);
	}
	vmap_slab_trim();
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use), 2, "emptied slabs went back");
}

/* Threads racing to free into the same abandoned slabs, each of them also
 * allocating (so each has a heap and may take a slab over), while others
 * exit and abandon theirs: one slab is taken by one thread only, and the
 * abandoned lists stay whole (a slab on two lists made a thread exit spin). */
struct race {
	void **p;
	unsigned n, k, ways;
};

static void *free_share(void *arg)
{
	struct race *r = arg;
	for (unsigned i = r->k; i < r->n; i += r->ways) {
		vmap_free(r->p[i]);
		void *q = vmap_malloc(48 + 16 * (i % 8));
		cr_assert_not_null(q);
		vmap_free(q);
	}
	return NULL;
}

Test(slab, threads_racing_to_take_over_abandoned_slabs, .init = setup, .timeout = 120)
{
	enum { N = 4000, WAYS = 4 };
	static void *p[N];
	for (int round = 0; round < 200; round++) {
		struct handoff h = {p, N, 16 + 16 * (unsigned)(round % 6)};
		pthread_t t, f[WAYS];
		cr_assert_eq(pthread_create(&t, NULL, alloc_all, &h), 0);
		pthread_join(t, NULL); /* every slab of its class abandoned, mostly live */
		struct race r[WAYS];
		for (unsigned k = 0; k < WAYS; k++) {
			r[k] = (struct race){p, N, k, WAYS};
			cr_assert_eq(pthread_create(&f[k], NULL, free_share, &r[k]), 0);
		}
		for (unsigned k = 0; k < WAYS; k++)
			pthread_join(f[k], NULL);
	}
	vmap_slab_trim();
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use), 16, "%lld slabs left",
		      (long long)stat_of(VMAP_STAT_slabs_in_use));
}

Test(slab, aligned_objects_come_from_classes_of_aligned_size, .init = setup)
{
	/* Page alignment too: a page-aligned buffer of up to 64 KiB is a slab
	 * object of a class of whole pages, as glibc's is a chunk among others. */
	for (size_t a = 32; a <= 4096; a *= 2) {
		for (size_t n = 1; n < 20000; n = n * 3 + 5) {
			void *p = vmap_memalign(a, n);
			cr_assert_not_null(p);
			cr_assert_eq((uintptr_t)p % a, 0, "memalign(%zu, %zu) = %p", a, n, p);
			cr_assert_geq(vmap_usable_size(p), n);
			cr_assert(vmap_in_slab((uintptr_t)p));
			pat_fill(p, n, (unsigned)n);
			vmap_free(p);
		}
	}
}

Test(slab, calloc_and_realloc, .init = setup)
{
	unsigned char *p = vmap_malloc(300);
	memset(p, 0xff, 300);
	vmap_free(p);
	unsigned char *c = vmap_calloc(30, 10);
	cr_assert_eq(c, p, "the freed object comes back");
	for (int i = 0; i < 300; i++)
		cr_assert_eq(c[i], 0);
	pat_fill(c, 300, 3);
	unsigned char *r = vmap_realloc(c, 260); /* same class (320): in place */
	cr_assert_eq(r, c);
	r = vmap_realloc(r, 5000);
	cr_assert(pat_intact(r, 260, 3));
	r = vmap_realloc(r, 200000); /* to a large block */
	cr_assert(pat_intact(r, 260, 3));
	cr_assert(!vmap_in_slab((uintptr_t)r) && vmap_range_owns(r));
	r = vmap_realloc(r, 100); /* and back */
	cr_assert(vmap_in_slab((uintptr_t)r));
	cr_assert(pat_intact(r, 100, 3));
	vmap_free(r);
}

/* Threads pass objects to each other through a shared table: every free is as
 * likely remote as local, objects of every class, contents checked. */
#define STRESS_SLOTS 4096
static _Atomic(uintptr_t) stress_slot[STRESS_SLOTS];

static void *stress(void *arg)
{
	uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	for (unsigned i = 0; i < 200000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned k = (unsigned)(x % STRESS_SLOTS);
		size_t n = (x >> 20) % 4 == 0 ? (x >> 24) % 65536 : (x >> 24) % 512;
		uintptr_t mine = 0;
		if ((x >> 40) & 1) {
			unsigned char *p = vmap_malloc(n + 8);
			cr_assert_not_null(p);
			memcpy(p, &n, sizeof n);
			memset(p + 8, (int)(n & 0xff), n);
			mine = (uintptr_t)p;
		}
		uintptr_t old = atomic_exchange(&stress_slot[k], mine);
		if (old) {
			unsigned char *p = (unsigned char *)old;
			size_t m;
			memcpy(&m, p, sizeof m);
			for (size_t j = 0; j < m; j += 61)
				cr_assert_eq(p[8 + j], (unsigned char)(m & 0xff), "object changed");
			vmap_free(p);
		}
	}
	return NULL;
}

Test(slab, threads_trading_objects, .init = setup, .timeout = 120)
{
	enum { T = 4 };
	pthread_t t[T];
	for (uintptr_t i = 0; i < T; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, stress, (void *)(i + 1)), 0);
	for (unsigned i = 0; i < T; i++)
		pthread_join(t[i], NULL);
	for (unsigned k = 0; k < STRESS_SLOTS; k++)
		if (stress_slot[k])
			vmap_free((void *)stress_slot[k]);
	vmap_trim(0); /* the exited threads' slabs, emptied by the frees above */
	int64_t slabs = stat_of(VMAP_STAT_slabs_in_use);
	cr_assert_leq(slabs, 44, "%lld slabs left with every object freed", (long long)slabs);
}

/* fuzz_slab: the caller's own slabs that another thread's frees emptied
 * stayed on its partial and full lists, counted in use, until it next
 * allocated from their class; malloc_trim gives them back now. */
Test(slab, trim_gives_back_own_slabs_emptied_by_remote_frees, .init = setup)
{
	enum { N = 3000 }; /* 200 bytes, class 224: 292 per slab, eleven slabs, ten full */
	static void *p[N];
	struct handoff h = {p, N, 200};
	int64_t s0 = stat_of(VMAP_STAT_slabs_in_use);
	alloc_all(&h);
	cr_assert_geq(stat_of(VMAP_STAT_slabs_in_use) - s0, 9);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, free_all, &h), 0);
	pthread_join(t, NULL);
	vmap_trim(0);
	cr_assert_leq(stat_of(VMAP_STAT_slabs_in_use) - s0, 1,
		      "%lld slabs stay with every object freed and trimmed (the current one may)",
		      (long long)(stat_of(VMAP_STAT_slabs_in_use) - s0));
	/* and the class still works from the slab that stayed */
	void *q = vmap_malloc(200);
	cr_assert(vmap_in_slab((uintptr_t)q));
	vmap_free(q);
}

/* The fast paths' class table agrees with the class function everywhere. */
Test(slab, the_class_table_agrees_with_the_class_function, .init = setup)
{
	for (size_t s = 1; s <= VMAP_SLAB_MAX; s++)
		cr_assert_eq(vmap_slab_class_fast(s), vmap_slab_class(s), "size %zu", s);
}

static uint64_t value_of(enum vmap_stat s)
{
	return vmap_stat_value((unsigned)s);
}

static void *malloc_free_n(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	for (unsigned i = 0; i < n; i++) {
		void *volatile p = vmap_malloc(48);
		vmap_free(p);
	}
	return NULL;
}

/* What the fast paths count in the heaps reaches the statistics exactly, from
 * this thread and from an exited one. */
Test(slab, fast_path_calls_are_counted_exactly, .init = setup)
{
	malloc_free_n((void *)(uintptr_t)10); /* this thread's heap and current slab */
	uint64_t m0 = value_of(VMAP_STAT_malloc_calls), f0 = value_of(VMAP_STAT_free_calls);
	uint64_t a0 = value_of(VMAP_STAT_small_allocs), s0 = value_of(VMAP_STAT_small_frees);
	uint64_t fm0, ff0;
	vmap_slab_fast_counts(&fm0, &ff0);
	malloc_free_n((void *)(uintptr_t)1000);
	uint64_t fm1, ff1;
	vmap_slab_fast_counts(&fm1, &ff1);
	cr_assert_eq(fm1 - fm0, 1000, "every malloc took the fast path: %llu",
		     (unsigned long long)(fm1 - fm0));
	cr_assert_eq(ff1 - ff0, 1000, "every free took the fast path: %llu",
		     (unsigned long long)(ff1 - ff0));
	cr_assert_eq(value_of(VMAP_STAT_malloc_calls) - m0, 1000);
	cr_assert_eq(value_of(VMAP_STAT_free_calls) - f0, 1000);
	cr_assert_eq(value_of(VMAP_STAT_small_allocs) - a0, 1000);
	cr_assert_eq(value_of(VMAP_STAT_small_frees) - s0, 1000);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, malloc_free_n, (void *)(uintptr_t)777), 0);
	pthread_join(t, NULL);
	cr_assert_eq(value_of(VMAP_STAT_malloc_calls) - m0, 1777, "%llu",
		     (unsigned long long)(value_of(VMAP_STAT_malloc_calls) - m0));
	cr_assert_eq(value_of(VMAP_STAT_free_calls) - f0, 1777);
}

/* With the profile on, every call takes the general path (which has the
 * hooks); the counts stay exact. */
Test(slab, the_fast_paths_stand_aside_for_the_profile, .init = setup)
{
	malloc_free_n((void *)(uintptr_t)10);
	vmap_fast_paths_off(); /* what turning the profile on does after setting its flag */
	uint64_t m0 = value_of(VMAP_STAT_malloc_calls), f0 = value_of(VMAP_STAT_free_calls);
	uint64_t fm0, ff0, fm1, ff1;
	vmap_slab_fast_counts(&fm0, &ff0);
	malloc_free_n((void *)(uintptr_t)500);
	vmap_slab_fast_counts(&fm1, &ff1);
	cr_assert_eq(fm1, fm0, "no malloc took the fast path");
	cr_assert_eq(ff1, ff0, "no free took the fast path");
	cr_assert_eq(value_of(VMAP_STAT_malloc_calls) - m0, 500);
	cr_assert_eq(value_of(VMAP_STAT_free_calls) - f0, 500);
	void *p = vmap_malloc(48);
	cr_assert(vmap_in_slab((uintptr_t)p), "still from the slabs");
	vmap_free(p);
}
