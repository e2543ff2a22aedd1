/*
 * counter.c — what one statistics-counter update costs.
 *
 * Linked with the core (vmap_core + vmap_os) like the unit tests, not
 * preloaded.  Every row is one way of counting; every thread does N updates
 * of the same counter; each (row, threads) cell is the median of R runs:
 *
 *   shared        __atomic_add_fetch(&word, 1) on one global word: the baseline
 *   atomic        vmap_stat_add_cpu(hint, C, 1), counters in atomic mode
 *   percpu        vmap_stat_add_cpu(vmap_os_cpu(), C, 1) after
 *                 vmap_counter_go_percpu(): the CPU looked up on every update
 *   percpu-hint   per-CPU mode, the CPU hint looked up once per 256 updates
 *                 (what a caller holding a shard id or a cached CPU pays)
 *   rseq-bare     the core's restartable per-CPU add (no lock prefix) alone,
 *                 on a static slot array: the floor of a per-CPU update
 *   local         vmap_stat_inc_local(C): the per-thread batched event count
 *                 (per-CPU mode underneath)
 *   atomic-bytes  byte gauge in atomic mode: bursts of 8 allocations of
 *                 64 KiB..1 MiB then 8 frees, on large_bytes_in_use
 *   percpu-bytes  the same in per-CPU mode (slots fold at vmap_counter_batch)
 *   percpu-bytes-4M  the same with vmap_counter_batch set to 4 MiB
 * Rows other than `percpu` refresh their CPU hint every 256 updates, so that
 * they show the counter's cost and not sched_getcpu()'s (printed apart).
 *
 * "cpu ns/op" is the summed thread CPU time (CLOCK_THREAD_CPUTIME_ID) over
 * the number of updates: what an update costs the thread making it.  "wall
 * ns/op" is first start to last end over the number of updates: machine
 * throughput (on 2 CPUs it is about half the CPU cost once 2+ threads run).
 * After every run the exact read (and the shared word) must equal the sum of
 * the updates; a mismatch is printed and the exit status is 1.
 *
 * Then: the cost of the switch itself (vmap_counter_go_percpu, the slot
 * block's first-touch fault), and, in a forked child that initialises the
 * facade, what detecting the second thread on its first allocator call
 * costs against interposing pthread_create.
 *
 *   counter [-n UPDATES_PER_THREAD] [-r RUNS] [-t 1,2,4,8,16] [-q]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "counter.h"
#include "options.h"
#include "os.h"

#define C VMAP_STAT_purge_ns /* nothing else in this program counts it */
#define G VMAP_STAT_large_bytes_in_use
#define MAX_THREADS 64
#define MAX_RUNS 31

enum row {
	R_SHARED, R_ATOMIC, R_PERCPU, R_PERCPU_HINT, R_RSEQ, R_LOCAL,
	R_ATOMIC_BYTES, R_PERCPU_BYTES, R_PERCPU_BYTES_4M, R_COUNT
};
static const char *const row_name[R_COUNT] = {
	"shared", "atomic", "percpu", "percpu-hint", "rseq-bare", "local",
	"atomic-bytes", "percpu-bytes", "percpu-bytes-4M",
};
static const char *const row_doc[R_COUNT] = {
	"__atomic_add_fetch(&word, 1), one shared word",
	"vmap_stat_add_cpu(hint, C, 1), atomic mode",
	"vmap_stat_add_cpu(vmap_os_cpu(), C, 1), per-CPU mode: CPU looked up on every update",
	"vmap_stat_add_cpu(hint, C, 1), per-CPU mode",
	"the core's rseq add alone, on a static slot array (the floor of a per-CPU update)",
	"vmap_stat_inc_local(C): per-thread batch of 128, then per-CPU",
	"large_bytes_in_use +-64K..1M (8 up, 8 down), atomic mode",
	"large_bytes_in_use +-64K..1M (8 up, 8 down), per-CPU mode, batch as configured",
	"the same with vmap_counter_batch = 4 MiB",
};
static bool row_percpu(enum row r)
{
	return r == R_PERCPU || r == R_PERCPU_HINT || r == R_LOCAL || r == R_PERCPU_BYTES ||
	       r == R_PERCPU_BYTES_4M;
}
static bool row_bytes(enum row r)
{
	return r == R_ATOMIC_BYTES || r == R_PERCPU_BYTES || r == R_PERCPU_BYTES_4M;
}

/* ---- the bare rseq add ------------------------------------------------------ */

/* The core's own restartable per-CPU add (core/counter.h), on a static slot
 * array with nothing around it: the floor of what a per-CPU update can cost,
 * against which the "percpu" rows show the core's bookkeeping (mode check,
 * slot block pointer, batch test). */
#define RSEQ_SLOTS 256
static int64_t rseq_slot[RSEQ_SLOTS * VMAP_STAT_STRIDE] __attribute__((aligned(64)));
static int64_t rseq_overflow;

#ifdef VMAP_HAVE_RSEQ
static bool rseq_usable(void)
{
	/* 20 since glibc 2.36 (the original feature size), 32 in 2.35; 0 when
	 * registration failed or was disabled (glibc.pthread.rseq=0). */
	return __rseq_size >= 20 && vmap_counter_nslots <= RSEQ_SLOTS;
}

static inline void rseq_add(int64_t d)
{
	if (!vmap_rseq_slot_add(rseq_slot, (enum vmap_stat)0, d))
		__atomic_add_fetch(&rseq_overflow, d, __ATOMIC_RELAXED); /* (CPU beyond the slots) */
}
#else
static bool rseq_usable(void)
{
	return false;
}
static inline void rseq_add(int64_t d)
{
	(void)d;
}
#endif

static int64_t rseq_sum(void)
{
	int64_t v = __atomic_load_n(&rseq_overflow, __ATOMIC_RELAXED);
	for (int c = 0; c < RSEQ_SLOTS; c++)
		v += __atomic_load_n(&rseq_slot[c * VMAP_STAT_STRIDE], __ATOMIC_RELAXED);
	return v;
}

static int64_t shared_word __attribute__((aligned(64)));
static int failures;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct worker {
	pthread_t t;
	enum row row;
	unsigned idx;
	uint64_t n;
	pthread_barrier_t *bar;
	int64_t net;
	uint64_t start, end, cpu;
	char pad[64];
};

/* Sizes of 64 KiB .. 1 MiB, page multiples, for the byte-gauge rows. */
static int64_t gauge_size[1024];

static void *work(void *arg)
{
	struct worker *w = arg;
	const uint64_t n = w->n;
	int64_t net = 0;
	pthread_barrier_wait(w->bar);
	w->start = now_ns();
	uint64_t c0 = thread_cpu_ns();
	switch (w->row) {
	case R_SHARED:
		for (uint64_t i = 0; i < n; i++)
			__atomic_add_fetch(&shared_word, 1, __ATOMIC_RELAXED);
		net = (int64_t)n;
		break;
	case R_PERCPU:
		for (uint64_t i = 0; i < n; i++)
			vmap_stat_add_cpu(vmap_os_cpu(), C, 1);
		net = (int64_t)n;
		break;
	case R_ATOMIC:
	case R_PERCPU_HINT: {
		unsigned cpu = vmap_os_cpu();
		for (uint64_t i = 0; i < n; i++) {
			if ((i & 255) == 255)
				cpu = vmap_os_cpu();
			vmap_stat_add_cpu(cpu, C, 1);
		}
		net = (int64_t)n;
		break;
	}
	case R_RSEQ:
		for (uint64_t i = 0; i < n; i++)
			rseq_add(1);
		net = (int64_t)n;
		break;
	case R_LOCAL:
		for (uint64_t i = 0; i < n; i++)
			vmap_stat_inc_local(C);
		vmap_counter_flush_local(); /* what the thread-exit destructor does */
		net = (int64_t)n;
		break;
	case R_ATOMIC_BYTES:
	case R_PERCPU_BYTES:
	case R_PERCPU_BYTES_4M: {
		uint64_t off = w->idx * 64;
		unsigned cpu = vmap_os_cpu();
		for (uint64_t i = 0; i < n; i++) {
			int64_t sz = gauge_size[((i & ~(uint64_t)15) + (i & 7) + off) & 1023];
			int64_t d = (i & 8) ? -sz : sz;
			if ((i & 255) == 255)
				cpu = vmap_os_cpu();
			vmap_stat_add_cpu(cpu, G, d);
			net += d;
		}
		break;
	}
	case R_COUNT:
		break;
	}
	w->cpu = thread_cpu_ns() - c0;
	w->end = now_ns();
	w->net = net;
	return NULL;
}

struct result {
	double cpu_ns, wall_ns;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct result run_once(enum row row, unsigned nthreads, uint64_t n)
{
	static struct worker w[MAX_THREADS];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, nthreads);
	enum vmap_stat s = row_bytes(row) ? G : C;
	int64_t before = row == R_SHARED ? __atomic_load_n(&shared_word, __ATOMIC_RELAXED)
			 : row == R_RSEQ ? rseq_sum()
					 : vmap_stat_read(s);
	for (unsigned i = 0; i < nthreads; i++) {
		w[i] = (struct worker){.row = row, .idx = i, .n = n, .bar = &bar};
		if (pthread_create(&w[i].t, NULL, work, &w[i]) != 0) {
			fprintf(stderr, "counter: pthread_create: %s\n", strerror(errno));
			exit(2);
		}
	}
	uint64_t start = UINT64_MAX, end = 0, cpu = 0;
	int64_t want = before;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(w[i].t, NULL);
		start = w[i].start < start ? w[i].start : start;
		end = w[i].end > end ? w[i].end : end;
		cpu += w[i].cpu;
		want += w[i].net;
	}
	pthread_barrier_destroy(&bar);
	int64_t got = row == R_SHARED ? __atomic_load_n(&shared_word, __ATOMIC_RELAXED)
		      : row == R_RSEQ ? rseq_sum()
				      : vmap_stat_read(s);
	if (got != want) {
		fprintf(stderr, "counter: NOT EXACT: %s, %u threads: read %" PRId64 ", expected %" PRId64 "\n",
			row_name[row], nthreads, got, want);
		failures++;
	}
	double ops = (double)n * nthreads;
	return (struct result){(double)cpu / ops, (double)(end - start) / ops};
}

/* ---- the switch ------------------------------------------------------------ */

static size_t slot_block_len(void)
{
	size_t len = (size_t)vmap_counter_nslots * VMAP_STAT_STRIDE * sizeof(int64_t);
	return (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
}

/* Back to atomic mode (bench only: the core never goes back): fold every slot
 * into the base so that the exact value is kept, unmap the block. */
static void unswitch(void)
{
	int64_t *slots = vmap_counter_slots;
	if (!slots)
		return;
	__atomic_store_n(&vmap_counter_slots, NULL, __ATOMIC_RELEASE);
	for (unsigned c = 0; c < vmap_counter_nslots; c++)
		for (unsigned s = 0; s < VMAP_STAT_COUNT; s++)
			vmap_counter_base[s] += slots[c * VMAP_STAT_STRIDE + s];
	munmap(slots, slot_block_len());
}

static void measure_switch(int reps)
{
	double sw[1000], first[1000], later[1000];
	if (reps > 1000)
		reps = 1000;
	int64_t want = vmap_stat_read(C);
	for (int r = 0; r < reps; r++) {
		unswitch();
		uint64_t t0 = now_ns();
		bool ok = vmap_counter_go_percpu();
		uint64_t t1 = now_ns();
		vmap_stat_add_cpu(vmap_os_cpu(), C, 1); /* first touch of the slot block */
		uint64_t t2 = now_ns();
		vmap_stat_add_cpu(vmap_os_cpu(), C, 1);
		uint64_t t3 = now_ns();
		want += 2;
		if (!ok) {
			fprintf(stderr, "counter: vmap_counter_go_percpu failed\n");
			failures++;
		}
		sw[r] = (double)(t1 - t0);
		first[r] = (double)(t2 - t1);
		later[r] = (double)(t3 - t2);
	}
	if (vmap_stat_read(C) != want) {
		fprintf(stderr, "counter: NOT EXACT across %d switches\n", reps);
		failures++;
	}
	uint64_t t0 = now_ns();
	bool again = vmap_counter_go_percpu();
	uint64_t t1 = now_ns();
	printf("\n## The switch (median of %d; slot block %zu bytes = %u CPUs x %u counters, "
	       "batch %" PRId64 " bytes)\n\n",
	       reps, slot_block_len(), vmap_counter_nslots, (unsigned)VMAP_STAT_COUNT, vmap_counter_batch);
	printf("| step | ns |\n|---|---:|\n");
	printf("| vmap_counter_go_percpu() (mmap of the slot block, CAS) | %.0f |\n", median(sw, reps));
	printf("| first update after it (page fault on the slot block) | %.0f |\n", median(first, reps));
	printf("| next update | %.0f |\n", median(later, reps));
	printf("| go_percpu() once switched (idempotent) | %" PRIu64 " |\n", again ? t1 - t0 : 0);
	printf("exact after %d switches: %s\n", reps, vmap_stat_read(C) == want ? "yes" : "NO");
}

/* ---- detecting the second thread -------------------------------------------- */

static double ns_per(uint64_t t0, uint64_t t1, uint64_t n)
{
	return (double)(t1 - t0) / (double)n;
}

static void *nothing(void *arg)
{
	return arg;
}

struct first_call {
	double first, second, third;
};

static void *first_calls(void *arg)
{
	struct first_call *fc = arg;
	/* glibc's own first call on this thread (arena attach, tcache) first, so
	 * that what is timed below is vmapalloc's part only. */
	void *volatile warm = malloc(32);
	free(warm);
	uint64_t t0 = now_ns();
	void *p = vmap_malloc(32);
	uint64_t t1 = now_ns();
	vmap_free(p);
	uint64_t t2 = now_ns();
	p = vmap_malloc(32);
	uint64_t t3 = now_ns();
	vmap_free(p);
	uint64_t t4 = now_ns();
	p = vmap_malloc(32);
	uint64_t t5 = now_ns();
	vmap_free(p);
	fc->first = (double)(t1 - t0);
	fc->second = (double)(t3 - t2);
	fc->third = (double)(t5 - t4);
	(void)t4;
	return NULL;
}

/* The alternative: a pthread_create wrapper whose trampoline marks the new
 * thread before it runs (what interposing pthread_create would add). */
static __thread bool emu_seen;
struct tramp {
	void *(*fn)(void *);
	void *arg;
};
static void *trampoline(void *p)
{
	struct tramp t = *(struct tramp *)p;
	free(p);
	emu_seen = true;
	return t.fn(t.arg);
}
static int wrapped_create(pthread_t *th, void *(*fn)(void *), void *arg)
{
	struct tramp *t = malloc(sizeof *t);
	if (!t)
		return ENOMEM;
	*t = (struct tramp){fn, arg};
	vmap_counter_go_percpu(); /* the parent switches before the thread exists */
	int rc = pthread_create(th, NULL, trampoline, t);
	if (rc)
		free(t);
	return rc;
}

/* The fast-path check that detection adds to every allocator call, emulated:
 * one initial-exec TLS byte and a branch. */
static __thread bool emu_tls_seen = true;
__attribute__((noinline, cold)) static void emu_first_call(void)
{
	emu_tls_seen = true;
}
__attribute__((noinline)) static uint64_t with_check(uint64_t x)
{
	if (__builtin_expect(!emu_tls_seen, 0))
		emu_first_call();
	return x * 3 + 1;
}
__attribute__((noinline)) static uint64_t without_check(uint64_t x)
{
	return x * 3 + 1;
}

static void detection(int threads)
{
	enum { K = 7 };
	double v[K];
	printf("\n## Detecting the second thread (forked child, facade initialised)\n\n");
	printf("| what | ns |\n|---|---:|\n");

	/* gettid + getpid, the pair thread_first_call makes. */
	for (int k = 0; k < K; k++) {
		uint64_t t0 = now_ns();
		for (int i = 0; i < 20000; i++) {
			vmap_os_gettid();
			vmap_os_getpid();
		}
		v[k] = ns_per(t0, now_ns(), 20000);
	}
	printf("| raw gettid + getpid pair (thread_first_call's check) | %.0f |\n", median(v, K));

	/* Emulated fast-path check. */
	volatile uint64_t sink = 0;
	double a[K], b[K];
	for (int k = 0; k < K; k++) {
		uint64_t x = 1, t0 = now_ns();
		for (int i = 0; i < 20000000; i++)
			x = with_check(x);
		uint64_t t1 = now_ns();
		for (int i = 0; i < 20000000; i++)
			x = without_check(x);
		uint64_t t2 = now_ns();
		sink += x;
		a[k] = ns_per(t0, t1, 20000000);
		b[k] = ns_per(t1, t2, 20000000);
	}
	double ma = median(a, K), mb = median(b, K);
	printf("| per allocator call: TLS 'seen' check + branch, emulated (%.2f - %.2f) | %.2f |\n", ma, mb,
	       ma - mb);
	(void)sink;

	vmap_init();
	const char *mode = vmap_opt.counter == VMAP_COUNTER_AUTO     ? "auto"
			   : vmap_opt.counter == VMAP_COUNTER_ATOMIC ? "atomic"
								     : "percpu";
	bool before = vmap_counter_is_percpu();

	/* A thread that never calls the allocator. */
	pthread_t t;
	pthread_create(&t, NULL, nothing, NULL);
	pthread_join(t, NULL);
	bool after_idle = vmap_counter_is_percpu();

	/* Steady state of the same call on the main thread. */
	for (int k = 0; k < K; k++) {
		uint64_t t0 = now_ns();
		for (int i = 0; i < 100000; i++)
			vmap_free(vmap_malloc(32));
		v[k] = ns_per(t0, now_ns(), 100000);
	}
	double steady = median(v, K);

	/* First calls of new threads: the second thread switches. */
	static struct first_call fc[2000];
	if (threads > 2000)
		threads = 2000;
	double first[2000], second[2000], third[2000];
	for (int i = 0; i < threads; i++) {
		pthread_create(&t, NULL, first_calls, &fc[i]);
		pthread_join(t, NULL);
		first[i] = fc[i].first;
		second[i] = fc[i].second;
		third[i] = fc[i].third;
	}
	double switching = first[0];
	bool after_alloc = vmap_counter_is_percpu();
	double mf = median(first + 1, threads - 1), ms = median(second, threads),
	       mt = median(third, threads);

	/* Thread creation, plain and through a pthread_create wrapper. */
	double plain[2000], wrapped[2000];
	for (int i = 0; i < threads; i++) {
		uint64_t t0 = now_ns();
		pthread_create(&t, NULL, nothing, NULL);
		pthread_join(t, NULL);
		uint64_t t1 = now_ns();
		wrapped_create(&t, nothing, NULL);
		pthread_join(t, NULL);
		uint64_t t2 = now_ns();
		plain[i] = (double)(t1 - t0);
		wrapped[i] = (double)(t2 - t1);
	}
	double mp = median(plain, threads), mw = median(wrapped, threads);

	printf("| vmap_malloc(32)+vmap_free, main thread, steady state (per pair) | %.0f |\n", steady);
	printf("| first vmap_malloc(32) of the 2nd thread (detect + switch + setspecific) | %.0f |\n",
	       switching);
	printf("| first vmap_malloc(32) of later threads, median of %d | %.0f |\n", threads - 1, mf);
	printf("| second / third vmap_malloc(32) of a thread, median | %.0f / %.0f |\n", ms, mt);
	printf("| => first-call cost of detection, later threads (first - third) | %.0f |\n", mf - mt);
	printf("| pthread_create + join, empty thread, median of %d | %.0f |\n", threads, mp);
	printf("| the same through an emulated pthread_create wrapper (malloc'd trampoline) | %.0f |\n", mw);
	printf("\ncounter mode option: %s; per-CPU before any thread: %s; after a thread that never "
	       "allocates: %s; after a thread that allocates: %s\n",
	       mode, before ? "yes" : "no", after_idle ? "yes" : "no", after_alloc ? "yes" : "no");
	if (vmap_opt.counter == VMAP_COUNTER_AUTO && (before || after_idle || !after_alloc)) {
		fprintf(stderr, "counter: auto mode did not switch exactly on the first allocating thread\n");
		failures++;
	}
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	uint64_t n = 2000000;
	int runs = 5;
	unsigned threads[16] = {1, 2, 4, 8, 16}, nthr = 5;
	int opt;
	while ((opt = getopt(argc, argv, "n:r:t:q")) != -1) {
		switch (opt) {
		case 'n':
			n = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			runs = atoi(optarg);
			break;
		case 't': {
			nthr = 0;
			for (char *s = optarg; *s && nthr < 16;) {
				unsigned v = (unsigned)strtoul(s, &s, 10);
				if (v >= 1 && v <= MAX_THREADS)
					threads[nthr++] = v;
				if (*s == ',')
					s++;
				else if (*s)
					break;
			}
			break;
		}
		case 'q':
			n = 200000;
			runs = 3;
			break;
		default:
			fprintf(stderr, "usage: counter [-n UPDATES_PER_THREAD] [-r RUNS] [-t 1,2,4,8,16] [-q]\n");
			return 2;
		}
	}
	if (runs < 1 || runs > MAX_RUNS || n < 16 || nthr == 0) {
		fprintf(stderr, "counter: bad -n/-r/-t\n");
		return 2;
	}
	n &= ~(uint64_t)15; /* whole bursts: the byte rows end where they started */
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned ncpu = vmap_os_ncpu();
	vmap_counter_init(ncpu);
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < 1024; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		gauge_size[i] = (int64_t)(16 + x % 241) * 4096; /* 64 KiB .. 1 MiB */
	}

	printf("# vmapalloc counter benchmark: %u CPUs, %" PRIu64 " updates per thread, median of %d runs\n\n",
	       ncpu, n, runs);
	for (int r = 0; r < R_COUNT; r++)
		printf("- `%s`: %s\n", row_name[r], row_doc[r]);

	char load[64] = "?";
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (!fgets(load, sizeof load, lf))
			strcpy(load, "?");
		fclose(lf);
		load[strcspn(load, "\n")] = '\0';
	}
	printf("\nload average at start: %s\n", load);

	/* sched_getcpu() alone: what `percpu` pays on top of `percpu-hint`. */
	{
		double v[7];
		volatile unsigned sink = 0;
		for (int k = 0; k < 7; k++) {
			uint64_t t0 = now_ns();
			for (int i = 0; i < 1000000; i++)
				sink += vmap_os_cpu();
			v[k] = (double)(now_ns() - t0) / 1e6;
		}
		printf("vmap_os_cpu() (sched_getcpu through glibc's rseq area): %.2f ns\n", median(v, 7));
	}
	measure_switch(200);
	unswitch();

	/* Cells are interleaved: for every thread count, run i of every row is
	 * made before run i+1 of any, so that all rows see the same machine. */
	static struct result res[R_COUNT][16];
	static double cs[R_COUNT][MAX_RUNS], ws[R_COUNT][MAX_RUNS];
	const int64_t batch = vmap_counter_batch;
	for (unsigned ti = 0; ti < nthr; ti++) {
		for (int i = 0; i < runs; i++) {
			for (int r = 0; r < R_COUNT; r++) {
				if (r == R_RSEQ && !rseq_usable())
					continue;
				if (row_percpu((enum row)r)) {
					if (!vmap_counter_go_percpu()) {
						fprintf(stderr, "counter: could not switch to per-CPU mode\n");
						return 1;
					}
				} else {
					unswitch();
				}
				vmap_counter_batch = r == R_PERCPU_BYTES_4M ? (int64_t)4 << 20 : batch;
				struct result one = run_once((enum row)r, threads[ti], n);
				cs[r][i] = one.cpu_ns;
				ws[r][i] = one.wall_ns;
			}
		}
		for (int r = 0; r < R_COUNT; r++)
			res[r][ti] = (struct result){median(cs[r], runs), median(ws[r], runs)};
	}
	vmap_counter_batch = batch;
	unswitch();

	for (int kind = 0; kind < 2; kind++) {
		printf("\n## %s ns per update (median of %d runs; exact after every run: %s)\n\n",
		       kind ? "wall" : "CPU", runs, failures ? "NO" : "yes");
		printf("| row |");
		for (unsigned ti = 0; ti < nthr; ti++)
			printf(" %u thr |", threads[ti]);
		printf("\n|---|");
		for (unsigned ti = 0; ti < nthr; ti++)
			printf("---:|");
		printf("\n");
		for (int r = 0; r < R_COUNT; r++) {
			printf("| %s |", row_name[r]);
			for (unsigned ti = 0; ti < nthr; ti++) {
				if (r == R_RSEQ && !rseq_usable())
					printf(" n/a |");
				else
					printf(" %.2f |", kind ? res[r][ti].wall_ns : res[r][ti].cpu_ns);
			}
			printf("\n");
		}
	}
	printf("\nCPUs busy during the `shared` runs (CPU time / wall time):");
	bool diluted = false;
	for (unsigned ti = 0; ti < nthr; ti++) {
		double par = res[R_SHARED][ti].cpu_ns / res[R_SHARED][ti].wall_ns;
		printf(" %u thr %.2f;", threads[ti], par);
		if (threads[ti] > 1 && par < 0.8 * (ncpu < threads[ti] ? ncpu : threads[ti]))
			diluted = true;
	}
	printf("\n");
	if (diluted)
		printf("WARNING: fewer CPUs than threads ran at once (another process held a CPU): "
		       "the contention figures are understated.\n");
	printf("\n## shared atomic / per-CPU, CPU ns per update (goal >= 5x under contention)\n\n");
	printf("| ratio |");
	for (unsigned ti = 0; ti < nthr; ti++)
		printf(" %u thr |", threads[ti]);
	printf("\n|---|");
	for (unsigned ti = 0; ti < nthr; ti++)
		printf("---:|");
	printf("\n");
	const enum row vs[] = {R_ATOMIC, R_PERCPU, R_PERCPU_HINT, R_RSEQ, R_LOCAL};
	for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
		if (vs[k] == R_RSEQ && !rseq_usable())
			continue;
		printf("| shared / %s |", row_name[vs[k]]);
		for (unsigned ti = 0; ti < nthr; ti++)
			printf(" %.2fx |", res[R_SHARED][ti].cpu_ns / res[vs[k]][ti].cpu_ns);
		printf("\n");
	}
	printf("| atomic-bytes / percpu-bytes |");
	for (unsigned ti = 0; ti < nthr; ti++)
		printf(" %.2fx |", res[R_ATOMIC_BYTES][ti].cpu_ns / res[R_PERCPU_BYTES][ti].cpu_ns);
	printf("\n| atomic-bytes / percpu-bytes-4M |");
	for (unsigned ti = 0; ti < nthr; ti++)
		printf(" %.2fx |", res[R_ATOMIC_BYTES][ti].cpu_ns / res[R_PERCPU_BYTES_4M][ti].cpu_ns);
	printf("\n");

	/* The facade part runs in a child: it initialises vmapalloc, which reads
	 * the options and reserves the arena, and switches the counters. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		unswitch(); /* the child starts where a new process starts: atomic */
		detection(200);
		fflush(stdout);
		_exit(failures ? 1 : 0);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		failures++;
	if (failures)
		fprintf(stderr, "counter: %d failure(s)\n", failures);
	return failures ? 1 : 0;
}
