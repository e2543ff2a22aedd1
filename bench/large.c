/*
 * large.c — a user-space analogue of the kernel's lib/test_vmalloc.c for
 * malloc/free of large blocks.
 *
 * The same binary is run under several allocators with LD_PRELOAD (see
 * scripts/bench); harness.h, shared with small.c, has the threads, the timed
 * phase and the one key=value line printed on stdout.
 *
 *   large --shape S [--threads N] [--touch none|page|full]
 *         [--seconds T | --ops K] [--seed X] [--busy-mb M]
 *
 * Per-thread setup, such as filling a live window, is not timed.  With
 * --ops K every thread does K operations (every producer, for xthread).
 *
 * Every block gets a pattern derived from its address, size and a serial
 * number at the touched positions; it is checked before the block is freed
 * and a mismatch aborts with a message (exit by SIGABRT).
 */
#define BENCH_NAME "large"
#include "harness.h"

#define PAGE      4096u
#define KIB       ((size_t)1024)
#define MIB       ((size_t)1024 * 1024)
#define WINDOW    64          /* live blocks per thread: random, calloc, aligned */
#define RING_CAP  64          /* xthread ring capacity */

enum touch { TOUCH_NONE, TOUCH_PAGE, TOUCH_FULL };
enum shape_kind {
	SH_FIX_SIZE, SH_FULL_FIT, SH_LONG_BUSY, SH_RANDOM, SH_CALLOC,
	SH_ALIGNED, SH_REALLOC, SH_XTHREAD,
};

static const char *const touch_names[] = { "none", "page", "full" };

static struct {
	enum shape_kind shape;
	size_t fix_pages;
	enum touch touch;
	size_t busy_bytes;
} cfg = { .touch = TOUCH_PAGE, .busy_bytes = 64 * MIB };

/* ----------------------------------------------------- patterns & checks */

static inline unsigned char fill_byte(uint64_t tag)
{
	return (unsigned char)((tag >> 56) | 1);
}

static _Noreturn void mismatch(const char *what, const unsigned char *base, size_t size,
			       size_t off, uint64_t want, uint64_t got)
{
	die("verification failed (%s): shape=%s touch=%s block=%p size=%zu offset=%zu "
	    "expected=%016" PRIx64 " got=%016" PRIx64,
	    what, bench.shape_name, touch_names[cfg.touch], (const void *)base, size, off, want, got);
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
	live_alloc(t, FF_N);
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
	live_alloc(t, cap);
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
	live_alloc(t, WINDOW);
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
		uint64_t tag = mix64(((uint64_t)t->idx << 48) ^ t->serial++ ^ bench.seed);
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

/* xthread: producers -> ring -> consumers (verify + free), one block at a time. */
static blk_t xthread_new(thr_t *t)
{
	return blk_malloc(t, rng_size(&t->rng, 64 * KIB, 1 * MIB));
}

static void run_xthread(thr_t *t)
{
	run_pipe(t, xthread_new, blk_free);
}

/* --------------------------------------------------------------- harness */

static void *thread_main(void *arg)
{
	thr_t *t = arg;
	void (*run)(thr_t *) = NULL;
	switch (cfg.shape) {
	case SH_FULL_FIT: setup_full_fit(t); break;
	case SH_LONG_BUSY: setup_long_busy(t); break;
	case SH_RANDOM: case SH_CALLOC: case SH_ALIGNED: setup_window(t); break;
	default: break;
	}
	switch (cfg.shape) {
	case SH_FIX_SIZE: run = run_fix_size; break;
	case SH_FULL_FIT: run = run_full_fit; break;
	case SH_LONG_BUSY: run = run_long_busy; break;
	case SH_RANDOM: case SH_CALLOC: case SH_ALIGNED: run = run_window; break;
	case SH_REALLOC: run = run_realloc; break;
	case SH_XTHREAD: run = run_xthread; break;
	}
	return timed_phase(t, run, blk_free);
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
	bench.shape_name = s;
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

/* The options of large's own (see bench_parse). */
static int large_option(const char *a, const char *v)
{
	char *end = NULL;
	if (strcmp(a, "--shape") == 0) {
		if (parse_shape(v) != 0) {
			fprintf(stderr, "large: unknown shape '%s'\n", v);
			usage(stderr);
			return 2;
		}
	} else if (strcmp(a, "--touch") == 0) {
		if (strcmp(v, "none") == 0) cfg.touch = TOUCH_NONE;
		else if (strcmp(v, "page") == 0) cfg.touch = TOUCH_PAGE;
		else if (strcmp(v, "full") == 0) cfg.touch = TOUCH_FULL;
		else { fprintf(stderr, "large: bad --touch '%s'\n", v); return 2; }
	} else if (strcmp(a, "--busy-mb") == 0) {
		unsigned long long m = strtoull(v, &end, 10);
		if (*end || m == 0 || m > (1ULL << 20)) { fprintf(stderr, "large: bad --busy-mb\n"); return 2; }
		cfg.busy_bytes = (size_t)m * MIB;
	} else {
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rc = bench_parse(argc, argv, large_option, usage);
	if (rc >= 0)
		return rc;
	if (cfg.shape == SH_XTHREAD)
		xq_init(RING_CAP, 1);
	bench_run(threads_new(), thread_main, touch_names[cfg.touch]);
	return 0;
}
