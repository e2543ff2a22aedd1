/*
 * large.c — a user-space analogue of the kernel's lib/test_vmalloc.c for
 * malloc/free of large blocks.
 *
 * The same binary is run under several allocators with LD_PRELOAD (see
 * scripts/bench).  It never links against an allocator: vmapalloc's
 * counters are looked up with dlsym(RTLD_DEFAULT, ...) and are printed as
 * "-" when the symbol is absent.
 *
 *   large --shape S [--threads N] [--touch none|page|full]
 *         [--seconds T | --ops K] [--seed X] [--busy-mb M]
 *
 * One line is printed on stdout, as space separated key=value pairs:
 *
 *   shape= threads= touch= ops= seconds= ops_per_s= maxrss_kib= hwm_kib= minflt=
 *   minflt_total= majflt= shared_lock_acquisitions= shard_lock_acquisitions=
 *   shard_lock_contended= vmap_ops= vmap_calls= malloc_lib= verify=ok
 *
 * ops, seconds, minflt and the vmapalloc counters cover the timed phase
 * only (per-thread setup, such as filling a live window, and teardown are
 * excluded); minflt_total, maxrss_kib (ru_maxrss) and hwm_kib (VmHWM, the
 * better peak RSS: see vm_hwm_kib) are for the whole process.  With
 * --ops K every thread does K operations (every producer, for xthread).
 *
 * Every block gets a pattern derived from its address, size and a serial
 * number at the touched positions; it is checked before the block is freed
 * and a mismatch aborts with a message (exit by SIGABRT).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PAGE      4096u
#define KIB       ((size_t)1024)
#define MIB       ((size_t)1024 * 1024)
#define WINDOW    64          /* live blocks per thread: random, calloc, aligned */
#define RING_CAP  64          /* xthread ring capacity */

/*
 * The allocator is called through volatile function pointers so that the
 * compiler cannot elide a malloc/free pair, merge malloc+memset into calloc,
 * or otherwise reason about the allocator: every call reaches whatever
 * malloc the dynamic linker bound (the preloaded one).
 */
static void *(*volatile p_malloc)(size_t) = malloc;
static void *(*volatile p_calloc)(size_t, size_t) = calloc;
static void *(*volatile p_realloc)(void *, size_t) = realloc;
static int (*volatile p_posix_memalign)(void **, size_t, size_t) = posix_memalign;
static void (*volatile p_free)(void *) = free;

enum touch { TOUCH_NONE, TOUCH_PAGE, TOUCH_FULL };
enum shape_kind {
	SH_FIX_SIZE, SH_FULL_FIT, SH_LONG_BUSY, SH_RANDOM, SH_CALLOC,
	SH_ALIGNED, SH_REALLOC, SH_XTHREAD,
};

static const char *const touch_names[] = { "none", "page", "full" };

static struct {
	const char *shape_name;
	enum shape_kind shape;
	size_t fix_pages;
	int threads;
	enum touch touch;
	double seconds;
	unsigned long long ops_per_thread; /* 0: run for seconds */
	uint64_t seed;
	size_t busy_bytes;
} cfg = {
	.threads = 1, .touch = TOUCH_PAGE, .seconds = 1.0, .seed = 0x5eedf00dcafeULL,
	.busy_bytes = 64 * MIB,
};

static atomic_int stop_flag;

/* ------------------------------------------------------------------ utils */

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("large: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fflush(stderr);
	abort();
}

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* xorshift64* with a fixed per-thread seed: runs are reproducible. */
typedef struct { uint64_t s; } rng_t;

static void rng_init(rng_t *r, uint64_t seed, unsigned idx)
{
	r->s = mix64(seed + 0x9e3779b97f4a7c15ULL * (idx + 1));
	if (r->s == 0)
		r->s = 1;
}

static inline uint64_t rng_next(rng_t *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [lo, hi], rounded down to a multiple of 16 (at least lo). */
static inline size_t rng_size(rng_t *r, size_t lo, size_t hi)
{
	size_t v = lo + (size_t)(rng_next(r) % (hi - lo + 1));
	v &= ~(size_t)15;
	return v < lo ? lo : v;
}

/* ----------------------------------------------------- patterns & checks */

typedef struct {
	unsigned char *p;
	size_t size;
	uint64_t tag;
} blk_t;

typedef struct {
	unsigned idx;
	rng_t rng;
	uint64_t serial;
	unsigned long long ops;
	double t_end;
	/* shape state that must survive into teardown */
	blk_t *live;
	size_t nlive;
} thr_t;

static inline uint64_t make_tag(thr_t *t, const void *p, size_t size)
{
	uint64_t serial = ((uint64_t)t->idx << 48) ^ t->serial++;
	return mix64((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL ^
		     (uint64_t)size * 0xc2b2ae3d27d4eb4fULL ^ mix64(serial));
}

static inline uint64_t stamp(uint64_t tag, size_t off)
{
	return mix64(tag + (uint64_t)off * 0xff51afd7ed558ccdULL);
}

static inline unsigned char fill_byte(uint64_t tag)
{
	return (unsigned char)((tag >> 56) | 1);
}

static inline void st64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint64_t ld64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static _Noreturn void mismatch(const char *what, const unsigned char *base, size_t size,
			       size_t off, uint64_t want, uint64_t got)
{
	die("verification failed (%s): shape=%s touch=%s block=%p size=%zu offset=%zu "
	    "expected=%016" PRIx64 " got=%016" PRIx64,
	    what, cfg.shape_name, touch_names[cfg.touch], (const void *)base, size, off, want, got);
}

/* 1 if all n bytes at p equal c. */
static inline int all_bytes(const unsigned char *p, size_t n, unsigned char c)
{
	if (n == 0)
		return 1;
	if (p[0] != c)
		return 0;
	return n == 1 || memcmp(p, p + 1, n - 1) == 0;
}

static size_t first_diff(const unsigned char *p, size_t n, unsigned char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return i;
	return n;
}

/*
 * Layout of a touched region of n >= 16 bytes at p:
 *   none: an 8-byte stamp at offset 0 and one at n-8 (the tail);
 *   page: a stamp at every page offset (0, 4096, ...) below the tail, and
 *         the tail stamp;
 *   full: memset(p, fill_byte, n), then the page stamps and the tail stamp.
 */
static void fill_region(unsigned char *p, size_t n, uint64_t tag, enum touch touch)
{
	size_t tail = n - 8;
	if (touch == TOUCH_FULL)
		memset(p, fill_byte(tag), n);
	if (touch == TOUCH_NONE) {
		if (8 <= tail)
			st64(p, stamp(tag, 0));
	} else {
		for (size_t off = 0; off + 8 <= tail; off += PAGE)
			st64(p + off, stamp(tag, off));
	}
	st64(p + tail, stamp(tag, tail));
}

static void check_region(const unsigned char *p, size_t n, uint64_t tag, enum touch touch,
			 const unsigned char *base, size_t bsize)
{
	size_t tail = n - 8;
	size_t rel = (size_t)(p - base);
	if (touch == TOUCH_NONE) {
		if (8 <= tail && ld64(p) != stamp(tag, 0))
			mismatch("head stamp", base, bsize, rel, stamp(tag, 0), ld64(p));
	} else {
		unsigned char fb = fill_byte(tag);
		for (size_t off = 0; off < tail; off += PAGE) {
			size_t seg = off;
			if (off + 8 <= tail) {
				uint64_t want = stamp(tag, off), got = ld64(p + off);
				if (got != want)
					mismatch("page stamp", base, bsize, rel + off, want, got);
				seg = off + 8;
			}
			if (touch == TOUCH_FULL) {
				size_t end = off + PAGE < tail ? off + PAGE : tail;
				if (!all_bytes(p + seg, end - seg, fb)) {
					size_t d = first_diff(p + seg, end - seg, fb);
					mismatch("fill byte", base, bsize, rel + seg + d, fb, p[seg + d]);
				}
			}
		}
	}
	if (ld64(p + tail) != stamp(tag, tail))
		mismatch("tail stamp", base, bsize, rel + tail, stamp(tag, tail), ld64(p + tail));
}

static inline void fill_blk(const blk_t *b) { fill_region(b->p, b->size, b->tag, cfg.touch); }
static inline void check_blk(const blk_t *b) { check_region(b->p, b->size, b->tag, cfg.touch, b->p, b->size); }

/*
 * calloc: check that the touched positions read as zero before writing.  The
 * 8-byte probes use an atomic exchange, a write access, so that a fresh page
 * takes one write fault rather than a read fault on the zero page followed by
 * a copy-on-write fault.  Needs p and n to be multiples of 8 (calloc returns
 * 16-aligned memory and calloc sizes are multiples of 16).
 */
static inline void zero_probe(unsigned char *base, size_t bsize, size_t off, uint64_t v)
{
	uint64_t old = atomic_exchange_explicit((_Atomic uint64_t *)(void *)(base + off), v,
						memory_order_relaxed);
	if (old != 0)
		mismatch("calloc not zero", base, bsize, off, 0, old);
}

static void calloc_check_fill(const blk_t *b)
{
	unsigned char *p = b->p;
	size_t n = b->size, tail = n - 8;
	if (cfg.touch == TOUCH_NONE) {
		if (8 <= tail)
			zero_probe(p, n, 0, stamp(b->tag, 0));
	} else {
		for (size_t off = 0; off < tail; off += PAGE) {
			size_t seg = off;
			if (off + 8 <= tail) {
				zero_probe(p, n, off, stamp(b->tag, off));
				seg = off + 8;
			}
			if (cfg.touch == TOUCH_FULL) {
				size_t end = off + PAGE < tail ? off + PAGE : tail;
				if (!all_bytes(p + seg, end - seg, 0)) {
					size_t d = first_diff(p + seg, end - seg, 0);
					mismatch("calloc not zero", p, n, seg + d, 0, p[seg + d]);
				}
			}
		}
	}
	zero_probe(p, n, tail, stamp(b->tag, tail));
	if (cfg.touch == TOUCH_FULL)
		fill_blk(b); /* memset + stamps (the stamps again, same values) */
}

/* ------------------------------------------------------------- allocation */

static _Noreturn void oom(const char *fn, size_t size)
{
	die("%s(%zu) failed: %s (shape=%s)", fn, size, strerror(errno), cfg.shape_name);
}

static blk_t blk_malloc(thr_t *t, size_t size)
{
	blk_t b;
	b.p = p_malloc(size);
	if (!b.p)
		oom("malloc", size);
	b.size = size;
	b.tag = make_tag(t, b.p, size);
	fill_blk(&b);
	return b;
}

static blk_t blk_calloc(thr_t *t, size_t size)
{
	blk_t b;
	b.p = p_calloc(1, size);
	if (!b.p)
		oom("calloc", size);
	if ((uintptr_t)b.p % 16)
		die("calloc(%zu) returned %p, not 16-aligned", size, (void *)b.p);
	b.size = size;
	b.tag = make_tag(t, b.p, size);
	calloc_check_fill(&b);
	return b;
}

static blk_t blk_memalign(thr_t *t, size_t align, size_t size)
{
	blk_t b;
	void *p = NULL;
	int rc = p_posix_memalign(&p, align, size);
	if (rc != 0 || !p) {
		errno = rc;
		oom("posix_memalign", size);
	}
	if ((uintptr_t)p & (align - 1))
		die("posix_memalign(%zu, %zu) returned %p, misaligned", align, size, p);
	b.p = p;
	b.size = size;
	b.tag = make_tag(t, b.p, size);
	fill_blk(&b);
	return b;
}

static void blk_free(blk_t *b)
{
	check_blk(b);
	p_free(b->p);
	b->p = NULL;
}

static inline int keep_going(thr_t *t)
{
	if (cfg.ops_per_thread)
		return t->ops < cfg.ops_per_thread;
	return !atomic_load_explicit(&stop_flag, memory_order_relaxed);
}

/* ----------------------------------------------------------------- shapes */

/* fix_size_P: malloc(P pages), touch, verify, free. */
static void run_fix_size(thr_t *t)
{
	size_t size = cfg.fix_pages * PAGE;
	while (keep_going(t)) {
		blk_t b = blk_malloc(t, size);
		blk_free(&b);
		t->ops++;
	}
}

/*
 * full_fit: 100 blocks of 1..100 pages, every other one freed; the holes are
 * then refilled with blocks of exactly the same sizes and freed again, over
 * and over.  One op = one hole allocated and freed.
 */
#define FF_N 100
static void setup_full_fit(thr_t *t)
{
	t->live = calloc(FF_N, sizeof(blk_t));
	t->nlive = FF_N;
	for (size_t i = 0; i < FF_N; i++)
		t->live[i] = blk_malloc(t, (size_t)(1 + rng_next(&t->rng) % 100) * PAGE);
	for (size_t i = 0; i < FF_N; i += 2)
		blk_free(&t->live[i]);
}

static void run_full_fit(thr_t *t)
{
	while (keep_going(t)) {
		for (size_t i = 0; i < FF_N && keep_going(t); i += 2) {
			t->live[i] = blk_malloc(t, t->live[i].size);
			t->ops++;
		}
		for (size_t i = 0; i < FF_N; i += 2)
			if (t->live[i].p)
				blk_free(&t->live[i]);
	}
}

/* long_busy: 64 MiB (--busy-mb) of live 16..256 KiB blocks, then fix_size 16 pages. */
static void setup_long_busy(thr_t *t)
{
	size_t cap = cfg.busy_bytes / (16 * KIB) + 1, total = 0;
	t->live = calloc(cap, sizeof(blk_t));
	t->nlive = 0;
	while (total < cfg.busy_bytes && t->nlive < cap) {
		size_t sz = rng_size(&t->rng, 16 * KIB, 256 * KIB);
		t->live[t->nlive++] = blk_malloc(t, sz);
		total += sz;
	}
}

static void run_long_busy(thr_t *t)
{
	while (keep_going(t)) {
		blk_t b = blk_malloc(t, 16 * PAGE);
		blk_free(&b);
		t->ops++;
	}
}

/* random / calloc / aligned: a window of 64 live blocks; each op replaces a random slot. */
static blk_t window_new(thr_t *t)
{
	switch (cfg.shape) {
	case SH_CALLOC:
		return blk_calloc(t, rng_size(&t->rng, 64 * KIB, 4 * MIB));
	case SH_ALIGNED: {
		size_t align = (size_t)4096 << (rng_next(&t->rng) % 10); /* 4 KiB .. 2 MiB */
		return blk_memalign(t, align, rng_size(&t->rng, 64 * KIB, 4 * MIB));
	}
	default:
		return blk_malloc(t, rng_size(&t->rng, 64 * KIB, 4 * MIB));
	}
}

static void setup_window(thr_t *t)
{
	t->live = calloc(WINDOW, sizeof(blk_t));
	t->nlive = WINDOW;
	for (size_t i = 0; i < WINDOW; i++)
		t->live[i] = window_new(t);
}

static void run_window(thr_t *t)
{
	while (keep_going(t)) {
		size_t i = (size_t)(rng_next(&t->rng) % WINDOW);
		blk_free(&t->live[i]);
		t->live[i] = window_new(t);
		t->ops++;
	}
}

/*
 * realloc: one block grown from 64 KiB to 64 MiB by doubling; each realloc
 * is an op.  Segment [s, 2s) is written when the block reaches 2s, with its
 * own tag, and every earlier segment is verified after each step (the block
 * may move, so the tag does not depend on the address here).
 */
static void check_grown(unsigned char *p, size_t size, uint64_t tag)
{
	check_region(p, 64 * KIB, tag, cfg.touch, p, size);
	for (size_t s = 64 * KIB; s < size; s *= 2)
		check_region(p + s, s, tag ^ mix64(s), cfg.touch, p, size);
}

static void run_realloc(thr_t *t)
{
	while (keep_going(t)) {
		size_t size = 64 * KIB;
		uint64_t tag = mix64(((uint64_t)t->idx << 48) ^ t->serial++ ^ cfg.seed);
		unsigned char *p = p_malloc(size);
		if (!p)
			oom("malloc", size);
		fill_region(p, size, tag, cfg.touch);
		while (size < 64 * MIB && keep_going(t)) {
			unsigned char *q = p_realloc(p, size * 2);
			if (!q)
				oom("realloc", size * 2);
			p = q;
			check_grown(p, size, tag);
			fill_region(p + size, size, tag ^ mix64(size), cfg.touch);
			size *= 2;
			t->ops++;
		}
		check_grown(p, size, tag);
		p_free(p);
	}
}

/* xthread: producers -> ring -> consumers (verify + free). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t not_empty, not_full;
	blk_t ring[RING_CAP];
	unsigned head, count;
	int producers_active;
	int producers, consumers;
} xq = { .mu = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER,
	 .not_full = PTHREAD_COND_INITIALIZER };

static blk_t xthread_new(thr_t *t)
{
	return blk_malloc(t, rng_size(&t->rng, 64 * KIB, 1 * MIB));
}

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

static void run_xthread(thr_t *t)
{
	if (cfg.threads == 1) { /* produce and consume alternately */
		while (keep_going(t)) {
			blk_t b = xthread_new(t);
			blk_free(&b);
			t->ops++;
		}
		return;
	}
	int producer = (int)t->idx < xq.producers;
	if (producer) {
		unsigned long long made = 0;
		for (;;) {
			if (cfg.ops_per_thread ? made >= cfg.ops_per_thread
					       : atomic_load_explicit(&stop_flag, memory_order_relaxed))
				break;
			blk_t b = xthread_new(t);
			made++;
			pthread_mutex_lock(&xq.mu);
			while (xq.count == RING_CAP &&
			       !(cfg.ops_per_thread == 0 && atomic_load(&stop_flag))) {
				struct timespec ts;
				deadline_in(&ts, 10);
				pthread_cond_timedwait(&xq.not_full, &xq.mu, &ts);
			}
			if (xq.count < RING_CAP) {
				xq.ring[(xq.head + xq.count) % RING_CAP] = b;
				xq.count++;
				pthread_cond_signal(&xq.not_empty);
				pthread_mutex_unlock(&xq.mu);
			} else { /* stopping with a full ring: dispose of it here */
				pthread_mutex_unlock(&xq.mu);
				blk_free(&b);
			}
		}
		pthread_mutex_lock(&xq.mu);
		xq.producers_active--;
		pthread_cond_broadcast(&xq.not_empty);
		pthread_mutex_unlock(&xq.mu);
	} else {
		for (;;) {
			pthread_mutex_lock(&xq.mu);
			while (xq.count == 0 && xq.producers_active > 0)
				pthread_cond_wait(&xq.not_empty, &xq.mu);
			if (xq.count == 0) {
				pthread_mutex_unlock(&xq.mu);
				break;
			}
			blk_t b = xq.ring[xq.head];
			xq.head = (xq.head + 1) % RING_CAP;
			xq.count--;
			pthread_cond_signal(&xq.not_full);
			pthread_mutex_unlock(&xq.mu);
			blk_free(&b);
			t->ops++;
		}
	}
}

/* --------------------------------------------------------------- harness */

static pthread_barrier_t bar_ready, bar_go, bar_done, bar_teardown;

static void *thread_main(void *arg)
{
	thr_t *t = arg;
	switch (cfg.shape) {
	case SH_FULL_FIT: setup_full_fit(t); break;
	case SH_LONG_BUSY: setup_long_busy(t); break;
	case SH_RANDOM: case SH_CALLOC: case SH_ALIGNED: setup_window(t); break;
	default: break;
	}
	pthread_barrier_wait(&bar_ready);
	pthread_barrier_wait(&bar_go);
	switch (cfg.shape) {
	case SH_FIX_SIZE: run_fix_size(t); break;
	case SH_FULL_FIT: run_full_fit(t); break;
	case SH_LONG_BUSY: run_long_busy(t); break;
	case SH_RANDOM: case SH_CALLOC: case SH_ALIGNED: run_window(t); break;
	case SH_REALLOC: run_realloc(t); break;
	case SH_XTHREAD: run_xthread(t); break;
	}
	t->t_end = now_sec();
	pthread_barrier_wait(&bar_done);
	pthread_barrier_wait(&bar_teardown);
	for (size_t i = 0; i < t->nlive; i++)
		if (t->live && t->live[i].p)
			blk_free(&t->live[i]);
	free(t->live);
	return NULL;
}

typedef int (*counter_get_fn)(const char *, uint64_t *);
/*
 * vmapalloc statistics read around the timed phase; the deltas are printed
 * under the key given (vmapalloc's "ops" as vmap_ops).  The *_calls counters
 * are summed into vmap_calls, the denominator that scripts/bench uses when
 * the library has no "ops" counter.
 */
static const struct { const char *name, *key; } counters[] = {
	{ "shared_lock_acquisitions", "shared_lock_acquisitions" },
	{ "shard_lock_acquisitions", "shard_lock_acquisitions" },
	{ "shard_lock_contended", "shard_lock_contended" },
	{ "ops", "vmap_ops" },
	{ "malloc_calls", NULL }, { "free_calls", NULL }, { "calloc_calls", NULL },
	{ "realloc_calls", NULL }, { "memalign_calls", NULL },
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])
#define FIRST_CALLS 4 /* counters[FIRST_CALLS..] are summed into vmap_calls */

/* have[i]: 1 read, 0 unknown name, -1 no vmapalloc. */
static void read_counters(counter_get_fn fn, uint64_t *v, int *have)
{
	for (size_t i = 0; i < NCOUNTERS; i++) {
		v[i] = 0;
		if (!fn)
			have[i] = -1;
		else
			have[i] = fn(counters[i].name, &v[i]) == 0;
	}
}

static const char *malloc_lib(void)
{
	Dl_info info;
	void *sym = dlsym(RTLD_DEFAULT, "malloc");
	if (!sym || !dladdr(sym, &info) || !info.dli_fname || !*info.dli_fname)
		return "?";
	const char *slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

/*
 * The peak RSS of this process image, from VmHWM.  ru_maxrss is printed too,
 * but Linux carries it over from the parent across fork and exec, so a child
 * of a large process (python running scripts/bench) reports at least the
 * parent's RSS there; VmHWM belongs to the address space, new at exec.
 */
static long vm_hwm_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: large --shape S [--threads N] [--touch none|page|full]\n"
		"             [--seconds T | --ops K] [--seed X] [--busy-mb M]\n"
		"shapes: fix_size_P (P pages; e.g. 1 4 16 64 256 1024 4096 8192), full_fit,\n"
		"        long_busy, random, calloc, aligned, realloc, xthread\n"
		"--ops K: K operations per thread (per producer for xthread)\n");
}

static int parse_shape(const char *s)
{
	static const struct { const char *name; enum shape_kind k; } names[] = {
		{ "full_fit", SH_FULL_FIT }, { "long_busy", SH_LONG_BUSY }, { "random", SH_RANDOM },
		{ "calloc", SH_CALLOC }, { "aligned", SH_ALIGNED }, { "realloc", SH_REALLOC },
		{ "xthread", SH_XTHREAD },
	};
	cfg.shape_name = s;
	if (strncmp(s, "fix_size_", 9) == 0) {
		char *end;
		errno = 0;
		unsigned long long p = strtoull(s + 9, &end, 10);
		if (errno || *end || p == 0 || p > (1ULL << 20))
			return -1;
		cfg.shape = SH_FIX_SIZE;
		cfg.fix_pages = (size_t)p;
		return 0;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i].name) == 0) {
			cfg.shape = names[i].k;
			return 0;
		}
	return -1;
}

int main(int argc, char **argv)
{
	int have_shape = 0, have_seconds = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "large: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		i++;
		char *end = NULL;
		if (strcmp(a, "--shape") == 0) {
			if (parse_shape(v) != 0) {
				fprintf(stderr, "large: unknown shape '%s'\n", v);
				usage(stderr);
				return 2;
			}
			have_shape = 1;
			continue;
		} else if (strcmp(a, "--touch") == 0) {
			if (strcmp(v, "none") == 0) cfg.touch = TOUCH_NONE;
			else if (strcmp(v, "page") == 0) cfg.touch = TOUCH_PAGE;
			else if (strcmp(v, "full") == 0) cfg.touch = TOUCH_FULL;
			else { fprintf(stderr, "large: bad --touch '%s'\n", v); return 2; }
			continue;
		} else if (strcmp(a, "--threads") == 0) {
			long n = strtol(v, &end, 10);
			if (*end || n < 1 || n > 1024) { fprintf(stderr, "large: bad --threads\n"); return 2; }
			cfg.threads = (int)n;
		} else if (strcmp(a, "--seconds") == 0) {
			cfg.seconds = strtod(v, &end);
			if (*end || !(cfg.seconds > 0) || cfg.seconds > 86400) {
				fprintf(stderr, "large: bad --seconds\n");
				return 2;
			}
			have_seconds = 1;
		} else if (strcmp(a, "--ops") == 0) {
			cfg.ops_per_thread = strtoull(v, &end, 10);
			if (*end || cfg.ops_per_thread == 0) { fprintf(stderr, "large: bad --ops\n"); return 2; }
		} else if (strcmp(a, "--seed") == 0) {
			cfg.seed = strtoull(v, &end, 0);
			if (*end) { fprintf(stderr, "large: bad --seed\n"); return 2; }
		} else if (strcmp(a, "--busy-mb") == 0) {
			unsigned long long m = strtoull(v, &end, 10);
			if (*end || m == 0 || m > (1ULL << 20)) { fprintf(stderr, "large: bad --busy-mb\n"); return 2; }
			cfg.busy_bytes = (size_t)m * MIB;
		} else {
			fprintf(stderr, "large: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!have_shape) {
		usage(stderr);
		return 2;
	}
	if (have_seconds && cfg.ops_per_thread) {
		fprintf(stderr, "large: --seconds and --ops are exclusive\n");
		return 2;
	}

	if (cfg.shape == SH_XTHREAD && cfg.threads > 1) {
		xq.producers = cfg.threads / 2;
		xq.consumers = cfg.threads - xq.producers;
		xq.producers_active = xq.producers;
	}

	/* POSIX's way to turn dlsym's object pointer into a function pointer. */
	counter_get_fn cget = NULL;
	void *sym = dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	if (sym)
		memcpy(&cget, &sym, sizeof cget);

	unsigned nb = (unsigned)cfg.threads + 1;
	pthread_barrier_init(&bar_ready, NULL, nb);
	pthread_barrier_init(&bar_go, NULL, nb);
	pthread_barrier_init(&bar_done, NULL, nb);
	pthread_barrier_init(&bar_teardown, NULL, nb);

	thr_t *th = calloc((size_t)cfg.threads, sizeof *th);
	pthread_t *tid = calloc((size_t)cfg.threads, sizeof *tid);
	if (!th || !tid)
		die("out of memory");
	for (int i = 0; i < cfg.threads; i++) {
		th[i].idx = (unsigned)i;
		rng_init(&th[i].rng, cfg.seed, (unsigned)i);
		int rc = pthread_create(&tid[i], NULL, thread_main, &th[i]);
		if (rc)
			die("pthread_create: %s", strerror(rc));
	}

	struct rusage ru0, ru1, ru2;
	uint64_t c0[NCOUNTERS], c1[NCOUNTERS];
	int h0[NCOUNTERS], h1[NCOUNTERS];

	pthread_barrier_wait(&bar_ready);
	getrusage(RUSAGE_SELF, &ru0);
	read_counters(cget, c0, h0);
	double t0 = now_sec();
	pthread_barrier_wait(&bar_go);

	if (!cfg.ops_per_thread) {
		struct timespec ts = { (time_t)cfg.seconds,
				       (long)((cfg.seconds - (double)(time_t)cfg.seconds) * 1e9) };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		atomic_store(&stop_flag, 1);
	}

	pthread_barrier_wait(&bar_done);
	getrusage(RUSAGE_SELF, &ru1);
	read_counters(cget, c1, h1);
	pthread_barrier_wait(&bar_teardown);
	for (int i = 0; i < cfg.threads; i++)
		pthread_join(tid[i], NULL);
	getrusage(RUSAGE_SELF, &ru2);

	unsigned long long ops = 0;
	double t_end = t0;
	for (int i = 0; i < cfg.threads; i++) {
		ops += th[i].ops;
		if (th[i].t_end > t_end)
			t_end = th[i].t_end;
	}
	double secs = t_end - t0;
	if (secs <= 0)
		secs = 1e-9;

	/* "-": no vmapalloc in the process; "?": it does not know the name. */
	char cbuf[512];
	size_t cl = 0;
	int calls_state = 1; /* 1 all known, 0 some unknown, -1 no vmapalloc */
	uint64_t calls = 0;
	for (size_t i = 0; i < NCOUNTERS; i++) {
		int st = (h0[i] < 0 || h1[i] < 0) ? -1 : (h0[i] && h1[i]);
		if (!counters[i].key) {
			if (st < calls_state)
				calls_state = st;
			calls += c1[i] - c0[i];
			continue;
		}
		if (st < 0)
			cl += (size_t)snprintf(cbuf + cl, sizeof cbuf - cl, " %s=-", counters[i].key);
		else if (st == 0)
			cl += (size_t)snprintf(cbuf + cl, sizeof cbuf - cl, " %s=?", counters[i].key);
		else
			cl += (size_t)snprintf(cbuf + cl, sizeof cbuf - cl, " %s=%" PRIu64,
					       counters[i].key, c1[i] - c0[i]);
	}
	if (calls_state < 0)
		snprintf(cbuf + cl, sizeof cbuf - cl, " vmap_calls=-");
	else if (calls_state == 0)
		snprintf(cbuf + cl, sizeof cbuf - cl, " vmap_calls=?");
	else
		snprintf(cbuf + cl, sizeof cbuf - cl, " vmap_calls=%" PRIu64, calls);

	printf("shape=%s threads=%d touch=%s ops=%llu seconds=%.6f ops_per_s=%.1f maxrss_kib=%ld "
	       "hwm_kib=%ld minflt=%ld minflt_total=%ld majflt=%ld%s malloc_lib=%s verify=ok\n",
	       cfg.shape_name, cfg.threads, touch_names[cfg.touch], ops, secs, (double)ops / secs,
	       ru2.ru_maxrss, vm_hwm_kib(), ru1.ru_minflt - ru0.ru_minflt, ru2.ru_minflt, ru2.ru_majflt,
	       cbuf, malloc_lib());
	fflush(stdout);

	free(th);
	free(tid);
	return 0;
}
