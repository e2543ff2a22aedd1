/*
 * small.c — small-block malloc/free workloads (8 bytes .. 8 KiB), the
 * companion of large.c: the patterns of larson, xmalloc, cache-scratch and
 * glibc's thread benchmark, plus realloc chains, calloc and the aligned
 * allocation calls.
 *
 * The same binary is run under several allocators with LD_PRELOAD (see
 * scripts/bench --program small); harness.h, shared with large.c, has the
 * threads, the timed phase and the one key=value line printed on stdout
 * (touch=- : there is no --touch here).
 *
 *   small --shape S [--threads N] [--seconds T | --ops K] [--seed X]
 *
 * Per-thread setup (filling the live blocks) and teardown are not timed.
 * With --ops K every thread does K operations (every producer for xfree;
 * for handover, the successive threads of one array together).
 *
 * Every block gets 8-byte stamps derived from its address, size and a serial
 * number at its start, middle and end (see stamp_offsets); they are checked
 * before the block is freed and a mismatch aborts with a message.
 */
#define BENCH_NAME "small"
#include "harness.h"
#include <malloc.h>

#define HANDOVER_SLOTS 1000   /* live blocks per array */
#define HANDOVER_OPS   10000  /* ops of one thread before it hands its array over */
#define XFREE_BATCH    64     /* blocks per batch passed to a consumer */
#define XFREE_RING     16     /* batches in the ring */
#define CHAINS         64     /* live realloc chains per thread */
#define CHAIN_MAX      4096   /* a chain is freed once it reaches this size */
#define WINDOW         256    /* live blocks per thread: calloc, memalign */
#define SCRATCH_WRITES 100    /* writes to each scratch object */
#define ONECLASS_LIVE  16
#define ONECLASS_SIZE  64

static void *(*volatile p_aligned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile p_memalign)(size_t, size_t) = memalign;

enum shape_kind {
	SH_HANDOVER, SH_XFREE, SH_REALLOC, SH_CALLOC, SH_MEMALIGN, SH_SCRATCH, SH_ONECLASS,
};

static const struct { const char *name; enum shape_kind k; } shape_names[] = {
	{ "handover", SH_HANDOVER }, { "xfree", SH_XFREE }, { "realloc", SH_REALLOC },
	{ "calloc", SH_CALLOC }, { "memalign", SH_MEMALIGN }, { "scratch", SH_SCRATCH },
	{ "oneclass", SH_ONECLASS },
};

static enum shape_kind shape;

/* ----------------------------------------------------- patterns & checks */

static _Noreturn void mismatch(const char *what, const blk_t *b, size_t off, uint64_t want,
			       uint64_t got)
{
	die("verification failed (%s): shape=%s block=%p size=%zu offset=%zu "
	    "expected=%016" PRIx64 " got=%016" PRIx64,
	    what, bench.shape_name, (const void *)b->p, b->size, off, want, got);
}

/*
 * The stamped 8-byte words of a block of n >= 8 bytes: the first, the one in
 * the middle (at a multiple of 8) and the last (at n - 8), leaving out those
 * that would overlap another.  Returns how many, in off[].
 */
static inline unsigned stamp_offsets(size_t n, size_t off[3])
{
	size_t tail = n - 8, mid = (n / 2) & ~(size_t)7;
	unsigned k = 0;
	off[k++] = 0;
	if (mid >= 8 && mid + 8 <= tail)
		off[k++] = mid;
	if (tail >= 8)
		off[k++] = tail;
	return k;
}

static void mark(const blk_t *b)
{
	size_t off[3];
	unsigned k = stamp_offsets(b->size, off);
	for (unsigned i = 0; i < k; i++)
		st64(b->p + off[i], stamp(b->tag, off[i]));
}

static void check(const blk_t *b)
{
	size_t off[3];
	unsigned k = stamp_offsets(b->size, off);
	for (unsigned i = 0; i < k; i++) {
		uint64_t want = stamp(b->tag, off[i]), got = ld64(b->p + off[i]);
		if (got != want)
			mismatch("stamp", b, off[i], want, got);
	}
}

/* ------------------------------------------------------------- allocation */

/* A block the allocator returned at p: tagged and stamped. */
static blk_t blk_new(thr_t *t, void *p, size_t size, const char *fn)
{
	if (!p)
		oom(fn, size);
	blk_t b = { p, size, 0 };
	b.tag = make_tag(t, b.p, size);
	mark(&b);
	return b;
}

static blk_t blk_malloc(thr_t *t, size_t size)
{
	return blk_new(t, p_malloc(size), size, "malloc");
}

static void blk_free(blk_t *b)
{
	check(b);
	p_free(b->p);
	b->p = NULL;
}

/* Uniform in [lo, hi], any byte count. */
static inline size_t rng_bytes(rng_t *r, size_t lo, size_t hi)
{
	return lo + (size_t)(rng_next(r) % (hi - lo + 1));
}

static void setup_live(thr_t *t, size_t n, blk_t (*make)(thr_t *))
{
	live_alloc(t, n);
	for (size_t i = 0; i < n; i++)
		t->live[i] = make(t);
}

/* One op: a random live block verified and freed, and a new one in its place. */
static inline void replace_one(thr_t *t, blk_t (*make)(thr_t *))
{
	size_t i = (size_t)(rng_next(&t->rng) % t->nlive);
	blk_free(&t->live[i]);
	t->live[i] = make(t);
	t->ops++;
}

/* ----------------------------------------------------------------- shapes */

/*
 * handover (larson): 1000 live blocks of 16..1024 bytes, a random one
 * replaced per op; after HANDOVER_OPS ops the thread exits and a new thread
 * takes the array over, freeing blocks that exited threads allocated.  The
 * benchmark's thread only starts each worker and waits for it.
 */
static blk_t handover_new(thr_t *t)
{
	return blk_malloc(t, rng_bytes(&t->rng, 16, 1024));
}

static void *handover_worker(void *arg)
{
	thr_t *t = arg;
	for (unsigned k = 0; k < HANDOVER_OPS && keep_going(t); k++)
		replace_one(t, handover_new);
	return NULL;
}

static void run_handover(thr_t *t)
{
	while (keep_going(t)) {
		pthread_t w;
		int rc = pthread_create(&w, NULL, handover_worker, t);
		if (rc)
			die("pthread_create: %s", strerror(rc));
		pthread_join(w, NULL);
	}
}

/* xfree (xmalloc): 16..512-byte blocks from producers, freed by consumers. */
static blk_t xfree_new(thr_t *t)
{
	return blk_malloc(t, rng_bytes(&t->rng, 16, 512));
}

static void run_xfree(thr_t *t)
{
	run_pipe(t, xfree_new, blk_free);
}

/*
 * realloc: 64 live chains, each a block grown from 8 bytes by 8..64 bytes a
 * step (one op: a random chain grows) until it reaches 4 KiB, then verified,
 * freed and started again.  Word i of a chain holds stamp(tag, 8 i), with a
 * tag that does not depend on the address (the block moves).  After a step
 * the first and last old words are checked, and every old word when the
 * block moved (the allocator copied it).
 */
static void chain_write(const blk_t *b, size_t from)
{
	for (size_t off = from; off < b->size; off += 8)
		st64(b->p + off, stamp(b->tag, off));
}

static void chain_check(const blk_t *b, size_t from, size_t to, size_t step)
{
	for (size_t off = from; off < to; off += step) {
		uint64_t want = stamp(b->tag, off), got = ld64(b->p + off);
		if (got != want)
			mismatch("realloc contents", b, off, want, got);
	}
}

static blk_t chain_new(thr_t *t)
{
	blk_t b = { p_malloc(8), 8, 0 };
	if (!b.p)
		oom("malloc", 8);
	b.tag = mix64(((uint64_t)t->idx << 48) ^ t->serial++ ^ bench.seed);
	chain_write(&b, 0);
	return b;
}

static void run_realloc(thr_t *t)
{
	while (keep_going(t)) {
		blk_t *b = &t->live[rng_next(&t->rng) % CHAINS];
		size_t old = b->size, size = old + 8 * (1 + rng_next(&t->rng) % 8);
		unsigned char *q = p_realloc(b->p, size);
		if (!q)
			oom("realloc", size);
		int moved = q != b->p;
		b->p = q;
		b->size = size;
		if (moved)
			chain_check(b, 0, old, 8);
		else
			chain_check(b, 0, old, old > 8 ? old - 8 : 8);
		chain_write(b, old);
		t->ops++;
		if (size >= CHAIN_MAX) {
			chain_check(b, 0, size, 8);
			p_free(b->p);
			*b = chain_new(t);
		}
	}
}

/*
 * calloc: 256 live blocks of calloc(n, size), n * size 8..8192 bytes (size
 * 1, 2, 4 or 8), a random one replaced per op.  A new block must read zero
 * at its stamp offsets and at one random word before it is stamped.
 */
static blk_t calloc_new(thr_t *t)
{
	size_t total = 8 * (1 + (size_t)(rng_next(&t->rng) % 1024));
	size_t elem = (size_t)1 << (rng_next(&t->rng) % 4);
	unsigned char *p = p_calloc(total / elem, elem);
	if (!p)
		oom("calloc", total);
	blk_t z = { p, total, 0 };
	size_t off[4];
	unsigned k = stamp_offsets(total, off);
	off[k++] = 8 * (size_t)(rng_next(&t->rng) % (total / 8));
	for (unsigned i = 0; i < k; i++)
		if (ld64(p + off[i]) != 0)
			mismatch("calloc not zero", &z, off[i], 0, ld64(p + off[i]));
	return blk_new(t, p, total, "calloc");
}

/*
 * memalign: 256 live blocks of 16..4096 bytes, alignment 16..4096 (a random
 * power of two), from posix_memalign, aligned_alloc (the size rounded up to
 * a multiple of the alignment, as C11 asks) and memalign in turn; the
 * alignment is checked.
 */
static blk_t memalign_new(thr_t *t)
{
	size_t align = (size_t)16 << (rng_next(&t->rng) % 9);
	size_t size = rng_bytes(&t->rng, 16, 4096);
	void *p = NULL;
	const char *fn;
	switch (t->serial % 3) {
	case 0:
		fn = "posix_memalign";
		if (p_posix_memalign(&p, align, size) != 0)
			p = NULL;
		break;
	case 1:
		fn = "aligned_alloc";
		size = (size + align - 1) & ~(align - 1);
		p = p_aligned_alloc(align, size);
		break;
	default:
		fn = "memalign";
		p = p_memalign(align, size);
		break;
	}
	if (p && ((uintptr_t)p & (align - 1)))
		die("%s(%zu, %zu) returned %p, misaligned", fn, align, size, p);
	return blk_new(t, p, size, fn);
}

/*
 * scratch (cache-scratch): the main thread allocates one object of 8..64
 * bytes per thread, side by side, before the threads start; each thread
 * frees its object, then per op mallocs one of the same size, writes it
 * SCRATCH_WRITES times, verifies and frees it.  An allocator that hands a
 * thread memory in a cache line another thread writes loses here.
 */
static void setup_scratch(thr_t *th)
{
	for (int i = 0; i < bench.threads; i++)
		live_alloc(&th[i], 1);
	for (int i = 0; i < bench.threads; i++) /* nothing else in between */
		th[i].live[0] = blk_malloc(&th[i], 8 * (1 + (size_t)(rng_next(&th[i].rng) % 8)));
}

static void run_scratch(thr_t *t)
{
	size_t size = t->live[0].size;
	blk_free(&t->live[0]);
	while (keep_going(t)) {
		blk_t b = blk_malloc(t, size);
		volatile uint64_t *w = (volatile uint64_t *)(void *)b.p;
		for (unsigned k = 0; k < SCRATCH_WRITES; k++)
			w[k % (size / 8)] = b.tag + k;
		mark(&b);
		blk_free(&b);
		t->ops++;
	}
}

/* oneclass (glibc's thread benchmark): 16 live 64-byte blocks, one replaced per op. */
static blk_t oneclass_new(thr_t *t)
{
	return blk_malloc(t, ONECLASS_SIZE);
}

static blk_t (*const window_make[])(thr_t *) = {
	[SH_HANDOVER] = handover_new, [SH_CALLOC] = calloc_new,
	[SH_MEMALIGN] = memalign_new, [SH_ONECLASS] = oneclass_new,
};

static void run_window(thr_t *t)
{
	while (keep_going(t))
		replace_one(t, window_make[shape]);
}

/* --------------------------------------------------------------- harness */

static void *thread_main(void *arg)
{
	thr_t *t = arg;
	void (*run)(thr_t *) = run_window;
	switch (shape) {
	case SH_HANDOVER: setup_live(t, HANDOVER_SLOTS, handover_new); run = run_handover; break;
	case SH_XFREE: run = run_xfree; break;
	case SH_REALLOC: setup_live(t, CHAINS, chain_new); run = run_realloc; break;
	case SH_CALLOC: case SH_MEMALIGN: setup_live(t, WINDOW, window_make[shape]); break;
	case SH_SCRATCH: run = run_scratch; break; /* set up by main */
	case SH_ONECLASS: setup_live(t, ONECLASS_LIVE, oneclass_new); break;
	}
	return timed_phase(t, run, blk_free);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: small --shape S [--threads N] [--seconds T | --ops K] [--seed X]\n"
		"shapes: handover, xfree, realloc, calloc, memalign, scratch, oneclass\n"
		"--ops K: K operations per thread (per producer for xfree, per array\n"
		"         for handover)\n");
}

/* The options of small's own (see bench_parse). */
static int small_option(const char *a, const char *v)
{
	if (strcmp(a, "--shape") != 0)
		return 1;
	for (size_t i = 0; i < sizeof shape_names / sizeof shape_names[0]; i++)
		if (strcmp(v, shape_names[i].name) == 0) {
			shape = shape_names[i].k;
			bench.shape_name = shape_names[i].name;
			return 0;
		}
	fprintf(stderr, "small: unknown shape '%s'\n", v);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	int rc = bench_parse(argc, argv, small_option, usage);
	if (rc >= 0)
		return rc;
	if (shape == SH_XFREE)
		xq_init(XFREE_RING, XFREE_BATCH);
	thr_t *th = threads_new();
	if (shape == SH_SCRATCH)
		setup_scratch(th);
	bench_run(th, thread_main, "-");
	return 0;
}
