/*
 * harness.h — what the LD_PRELOAD benchmarks bench/large.c and bench/small.c
 * share: the allocator pointers, random numbers and stamps, the common
 * options, the threads and the timed phase, the producer/consumer ring, and
 * the result line.  The includer defines BENCH_NAME ("large", "small"), the
 * prefix of its messages, before including this file.
 *
 * Neither program links against an allocator: vmapalloc's counters are
 * looked up with dlsym(RTLD_DEFAULT, ...) and are printed as "-" when the
 * symbol is absent.  The result is one line on stdout, as space separated
 * key=value pairs:
 *
 *   shape= threads= touch= ops= seconds= ops_per_s= maxrss_kib= hwm_kib= minflt=
 *   minflt_total= majflt= shared_lock_acquisitions= shard_lock_acquisitions=
 *   shard_lock_contended= vmap_ops= vmap_calls= malloc_lib= verify=ok
 *
 * ops, seconds, minflt and the vmapalloc counters cover the timed phase
 * only (per-thread setup and teardown are excluded); minflt_total,
 * maxrss_kib (ru_maxrss) and hwm_kib (VmHWM, the better peak RSS: see
 * vm_hwm_kib) are for the whole process.
 */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#ifndef BENCH_NAME
#error "define BENCH_NAME before including harness.h"
#endif

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

#include "libinfo.h"

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

/* The options both programs take, and the shape's name. */
static struct {
	const char *shape_name;
	int threads;
	double seconds;
	unsigned long long ops_per_thread; /* 0: run for seconds */
	uint64_t seed;
	void *th_base; /* what own_lines allocated for the threads' states */
} bench = { .threads = 1, .seconds = 1.0, .seed = 0x5eedf00dcafeULL };

static atomic_int stop_flag;

/* ------------------------------------------------------------------ utils */

static inline double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static _Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(BENCH_NAME ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fflush(stderr);
	abort();
}

static inline _Noreturn void oom(const char *fn, size_t size)
{
	die("%s(%zu) failed: %s (shape=%s)", fn, size, strerror(errno), bench.shape_name);
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

static inline void rng_init(rng_t *r, uint64_t seed, unsigned idx)
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

/* ------------------------------------------------------- blocks & threads */

typedef struct {
	unsigned char *p;
	size_t size;
	uint64_t tag;
} blk_t;

/*
 * A thread's state, written on every op.  Each one has cache lines of its
 * own (LINE_PAD, and placed by own_lines), whatever the allocator under test
 * returns: packed side by side in one calloc'd array, two threads' counters
 * shared a line or not depending on where that allocator put the array, and
 * a shape at 2 threads ran 15% slower under one allocator than under
 * another for that alone.
 */
#define LINE_PAD 128 /* two lines: adjacent-line prefetch pairs them */
typedef struct {
	unsigned idx;
	rng_t rng;
	uint64_t serial;
	unsigned long long ops;
	double t_end;
	/* shape state that must survive into teardown */
	blk_t *live;
	size_t nlive;
	void *live_base; /* what own_lines allocated for live */
} __attribute__((aligned(LINE_PAD))) thr_t;

/* n zeroed bytes starting on a LINE_PAD boundary and ending on one, from
 * calloc whatever its alignment; *base is what to free. */
static void *own_lines(size_t n, void **base)
{
	n = (n + LINE_PAD - 1) & ~(size_t)(LINE_PAD - 1);
	unsigned char *b = calloc(1, n + LINE_PAD);
	if (!b)
		die("out of memory");
	*base = b;
	return b + (LINE_PAD - (uintptr_t)b % LINE_PAD) % LINE_PAD;
}

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

static inline void st64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint64_t ld64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline int keep_going(thr_t *t)
{
	if (bench.ops_per_thread)
		return t->ops < bench.ops_per_thread;
	return !atomic_load_explicit(&stop_flag, memory_order_relaxed);
}

/* The thread's array of n live blocks, all empty (in setup: not timed). */
static inline void live_alloc(thr_t *t, size_t n)
{
	t->live = own_lines(n * sizeof(blk_t), &t->live_base);
	t->nlive = n;
}

/* --------------------------------------------- producers -> ring -> consumers */

/*
 * A mutex ring of batches: with N threads, the first N/2 produce blocks with
 * make() and pass them on in batches of up to `batch` blocks; the others take
 * batches and hand every block to drop() (verify and free), one op each.  With
 * one thread, a batch is produced and then dropped, alternately.  --ops K is
 * per producer.
 */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t not_empty, not_full;
	blk_t *slots;    /* cap batches of `batch` blocks */
	unsigned *len;   /* blocks in each batch */
	unsigned cap, batch, head, count;
	int producers_active;
	int producers;
} xq = { .mu = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER,
	 .not_full = PTHREAD_COND_INITIALIZER };

static inline void xq_init(unsigned cap, unsigned batch)
{
	xq.cap = cap;
	xq.batch = batch;
	xq.slots = calloc((size_t)cap * batch, sizeof(blk_t));
	xq.len = calloc(cap, sizeof(unsigned));
	if (!xq.slots || !xq.len)
		die("out of memory");
	xq.producers = bench.threads > 1 ? bench.threads / 2 : 0;
	xq.producers_active = xq.producers;
}

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

static inline void run_pipe(thr_t *t, blk_t (*make)(thr_t *), void (*drop)(blk_t *))
{
	blk_t *b = calloc(xq.batch, sizeof(blk_t));
	if (!b)
		die("out of memory");
	if (bench.threads == 1) { /* produce and consume alternately */
		while (keep_going(t)) {
			unsigned n = xq.batch;
			if (bench.ops_per_thread && bench.ops_per_thread - t->ops < n)
				n = (unsigned)(bench.ops_per_thread - t->ops);
			for (unsigned i = 0; i < n; i++)
				b[i] = make(t);
			for (unsigned i = 0; i < n; i++) {
				drop(&b[i]);
				t->ops++;
			}
		}
	} else if ((int)t->idx < xq.producers) {
		unsigned long long made = 0;
		for (;;) {
			if (bench.ops_per_thread ? made >= bench.ops_per_thread
						 : atomic_load_explicit(&stop_flag, memory_order_relaxed))
				break;
			unsigned n = 0;
			while (n < xq.batch && (!bench.ops_per_thread || made < bench.ops_per_thread)) {
				b[n++] = make(t);
				made++;
			}
			pthread_mutex_lock(&xq.mu);
			while (xq.count == xq.cap &&
			       !(bench.ops_per_thread == 0 && atomic_load(&stop_flag))) {
				struct timespec ts;
				deadline_in(&ts, 10);
				pthread_cond_timedwait(&xq.not_full, &xq.mu, &ts);
			}
			if (xq.count < xq.cap) {
				unsigned s = (xq.head + xq.count) % xq.cap;
				memcpy(xq.slots + (size_t)s * xq.batch, b, n * sizeof(blk_t));
				xq.len[s] = n;
				xq.count++;
				pthread_cond_signal(&xq.not_empty);
				pthread_mutex_unlock(&xq.mu);
			} else { /* stopping with a full ring: dispose of them here */
				pthread_mutex_unlock(&xq.mu);
				for (unsigned i = 0; i < n; i++)
					drop(&b[i]);
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
			unsigned n = xq.len[xq.head];
			memcpy(b, xq.slots + (size_t)xq.head * xq.batch, n * sizeof(blk_t));
			xq.head = (xq.head + 1) % xq.cap;
			xq.count--;
			pthread_cond_signal(&xq.not_full);
			pthread_mutex_unlock(&xq.mu);
			for (unsigned i = 0; i < n; i++) {
				drop(&b[i]);
				t->ops++;
			}
		}
	}
	free(b);
}

/* ----------------------------------------------------------- measurement */

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

/* "-": no vmapalloc in the process; "?": it does not know the name. */
static void format_counters(char *buf, size_t cap, const uint64_t *c0, const int *h0,
			    const uint64_t *c1, const int *h1)
{
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
			cl += (size_t)snprintf(buf + cl, cap - cl, " %s=-", counters[i].key);
		else if (st == 0)
			cl += (size_t)snprintf(buf + cl, cap - cl, " %s=?", counters[i].key);
		else
			cl += (size_t)snprintf(buf + cl, cap - cl, " %s=%" PRIu64,
					       counters[i].key, c1[i] - c0[i]);
	}
	if (calls_state < 0)
		snprintf(buf + cl, cap - cl, " vmap_calls=-");
	else if (calls_state == 0)
		snprintf(buf + cl, cap - cl, " vmap_calls=?");
	else
		snprintf(buf + cl, cap - cl, " vmap_calls=%" PRIu64, calls);
}

/* ----------------------------------------------------------------- options */

/*
 * Parses the options both programs take (--threads, --seconds, --ops, --seed,
 * -h/--help) into bench; every other "--option value" goes to opt(), which
 * returns 0 when it took it, 1 when it does not know the option and 2 when
 * the value is bad (having said why).  Returns -1 to go on, or the status to
 * exit with.
 */
static int bench_parse(int argc, char **argv, int (*opt)(const char *, const char *),
		       void (*usage)(FILE *))
{
	int have_seconds = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, BENCH_NAME ": %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		i++;
		char *end = NULL;
		if (strcmp(a, "--threads") == 0) {
			long n = strtol(v, &end, 10);
			if (*end || n < 1 || n > 1024) { fprintf(stderr, BENCH_NAME ": bad --threads\n"); return 2; }
			bench.threads = (int)n;
		} else if (strcmp(a, "--seconds") == 0) {
			bench.seconds = strtod(v, &end);
			if (*end || !(bench.seconds > 0) || bench.seconds > 86400) {
				fprintf(stderr, BENCH_NAME ": bad --seconds\n");
				return 2;
			}
			have_seconds = 1;
		} else if (strcmp(a, "--ops") == 0) {
			bench.ops_per_thread = strtoull(v, &end, 10);
			if (*end || bench.ops_per_thread == 0) { fprintf(stderr, BENCH_NAME ": bad --ops\n"); return 2; }
		} else if (strcmp(a, "--seed") == 0) {
			bench.seed = strtoull(v, &end, 0);
			if (*end) { fprintf(stderr, BENCH_NAME ": bad --seed\n"); return 2; }
		} else {
			int rc = opt(a, v);
			if (rc == 1) {
				fprintf(stderr, BENCH_NAME ": unknown option '%s'\n", a);
				usage(stderr);
			}
			if (rc)
				return 2;
		}
	}
	if (!bench.shape_name) {
		usage(stderr);
		return 2;
	}
	if (have_seconds && bench.ops_per_thread) {
		fprintf(stderr, BENCH_NAME ": --seconds and --ops are exclusive\n");
		return 2;
	}
	return -1;
}

/* ------------------------------------------------------------ timed phase */

static pthread_barrier_t bar_ready, bar_go, bar_done, bar_teardown;

/* bench.threads thread states, numbered, with their generators seeded. */
static thr_t *threads_new(void)
{
	thr_t *th = own_lines((size_t)bench.threads * sizeof *th, &bench.th_base);
	for (int i = 0; i < bench.threads; i++) {
		th[i].idx = (unsigned)i;
		rng_init(&th[i].rng, bench.seed, (unsigned)i);
	}
	return th;
}

/*
 * A thread's timed phase, run(t), after its setup; then its teardown: every
 * live block still held goes to drop() (verify and free).  Returns NULL, for
 * the thread's function to return.
 */
static void *timed_phase(thr_t *t, void (*run)(thr_t *), void (*drop)(blk_t *))
{
	pthread_barrier_wait(&bar_ready);
	pthread_barrier_wait(&bar_go);
	run(t);
	t->t_end = now_sec();
	pthread_barrier_wait(&bar_done);
	pthread_barrier_wait(&bar_teardown);
	for (size_t i = 0; i < t->nlive; i++)
		if (t->live && t->live[i].p)
			drop(&t->live[i]);
	free(t->live_base);
	return NULL;
}

/*
 * Runs one thread_main(&th[i]) per thread (each ends with timed_phase),
 * times the phase and prints the result line; frees th.
 */
static void bench_run(thr_t *th, void *(*thread_main)(void *), const char *touch_name)
{
	/* POSIX's way to turn dlsym's object pointer into a function pointer. */
	counter_get_fn cget = NULL;
	void *sym = dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	if (sym)
		memcpy(&cget, &sym, sizeof cget);

	unsigned nb = (unsigned)bench.threads + 1;
	pthread_barrier_init(&bar_ready, NULL, nb);
	pthread_barrier_init(&bar_go, NULL, nb);
	pthread_barrier_init(&bar_done, NULL, nb);
	pthread_barrier_init(&bar_teardown, NULL, nb);

	pthread_t *tid = calloc((size_t)bench.threads, sizeof *tid);
	if (!tid)
		die("out of memory");
	for (int i = 0; i < bench.threads; i++) {
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

	if (!bench.ops_per_thread) {
		struct timespec ts = { (time_t)bench.seconds,
				       (long)((bench.seconds - (double)(time_t)bench.seconds) * 1e9) };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		atomic_store(&stop_flag, 1);
	}

	pthread_barrier_wait(&bar_done);
	getrusage(RUSAGE_SELF, &ru1);
	read_counters(cget, c1, h1);
	pthread_barrier_wait(&bar_teardown);
	for (int i = 0; i < bench.threads; i++)
		pthread_join(tid[i], NULL);
	getrusage(RUSAGE_SELF, &ru2);

	unsigned long long ops = 0;
	double t_end = t0;
	for (int i = 0; i < bench.threads; i++) {
		ops += th[i].ops;
		if (th[i].t_end > t_end)
			t_end = th[i].t_end;
	}
	double secs = t_end - t0;
	if (secs <= 0)
		secs = 1e-9;

	char cbuf[512];
	format_counters(cbuf, sizeof cbuf, c0, h0, c1, h1);
	printf("shape=%s threads=%d touch=%s ops=%llu seconds=%.6f ops_per_s=%.1f maxrss_kib=%ld "
	       "hwm_kib=%ld minflt=%ld minflt_total=%ld majflt=%ld%s malloc_lib=%s verify=ok\n",
	       bench.shape_name, bench.threads, touch_name, ops, secs, (double)ops / secs,
	       ru2.ru_maxrss, vm_hwm_kib(), ru1.ru_minflt - ru0.ru_minflt, ru2.ru_minflt, ru2.ru_majflt,
	       cbuf, lib_of("malloc"));
	fflush(stdout);

	free(bench.th_base);
	free(tid);
}

#endif /* BENCH_HARNESS_H */
