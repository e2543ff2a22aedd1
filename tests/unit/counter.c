/*
 * counter.c — unit tests of core/counter.c: atomic -> per-CPU counters.
 *
 * The exact read (base + every slot) must equal the sum of everything added,
 * whatever the mode, the number of threads, the CPU hints given and the
 * moment of the switch.
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>

/* A counter nothing else in these tests touches. */
#define C VMAP_STAT_purge_ns

struct worker {
	pthread_t t;
	unsigned idx;
	unsigned iters;
	int64_t net; /* what this worker added in total */
	volatile bool *go;
};

/* Adds a mix of small, batch-sized and negative deltas with varied CPU hints. */
static void *adder(void *arg)
{
	struct worker *w = arg;
	while (w->go && !__atomic_load_n(w->go, __ATOMIC_ACQUIRE))
		sched_yield();
	uint64_t x = 0x9e3779b97f4a7c15ull * (w->idx + 1);
	for (unsigned i = 0; i < w->iters; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t d;
		switch (x % 4) {
		case 0: d = 1; break;
		case 1: d = 4096; break;
		case 2: d = -(int64_t)(x % 5000); break;
		default: d = (int64_t)(x % 300000); break; /* above the batch: folds */
		}
		unsigned cpu = (x >> 20) % 2 ? w->idx : vmap_os_cpu();
		vmap_stat_add_cpu(cpu, C, d);
		w->net += d;
	}
	return NULL;
}

static void run_threads(unsigned n, unsigned iters, bool percpu)
{
	vmap_counter_init(2);
	if (percpu)
		cr_assert(vmap_counter_go_percpu());
	cr_assert_eq(vmap_counter_is_percpu(), percpu);
	int64_t base = vmap_stat_read(C);
	volatile bool go = false;
	struct worker *w = calloc(n, sizeof *w);
	cr_assert_not_null(w);
	for (unsigned i = 0; i < n; i++) {
		w[i] = (struct worker){.idx = i, .iters = iters, .go = &go};
		cr_assert_eq(pthread_create(&w[i].t, NULL, adder, &w[i]), 0);
	}
	__atomic_store_n(&go, true, __ATOMIC_RELEASE);
	int64_t want = base;
	for (unsigned i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		want += w[i].net;
	}
	free(w);
	cr_assert_eq(vmap_stat_read(C), want, "%u threads, %s mode: read %ld, added %ld", n,
		     percpu ? "per-CPU" : "atomic", (long)vmap_stat_read(C), (long)want);
	if (!percpu)
		cr_assert_eq(vmap_stat_read_approx(C), want, "atomic mode has no slots");
}

Test(counter, atomic_sum_exact_1_thread) { run_threads(1, 200000, false); }
Test(counter, atomic_sum_exact_2_threads) { run_threads(2, 100000, false); }
Test(counter, atomic_sum_exact_16_threads) { run_threads(16, 20000, false); }
Test(counter, atomic_sum_exact_64_threads) { run_threads(64, 5000, false); }
Test(counter, percpu_sum_exact_1_thread) { run_threads(1, 200000, true); }
Test(counter, percpu_sum_exact_2_threads) { run_threads(2, 100000, true); }
Test(counter, percpu_sum_exact_16_threads) { run_threads(16, 20000, true); }
Test(counter, percpu_sum_exact_64_threads) { run_threads(64, 5000, true); }

Test(counter, starts_in_atomic_mode_and_switches_once)
{
	vmap_counter_init(4);
	cr_assert_not(vmap_counter_is_percpu());
	cr_assert_eq(vmap_counter_switch_ns(), 0);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_counter_mode_switches), 0);
	int64_t mapped = vmap_stat_read(VMAP_STAT_mapped_bytes);
	cr_assert(vmap_counter_go_percpu());
	cr_assert(vmap_counter_is_percpu());
	cr_assert_neq(vmap_counter_switch_ns(), 0);
	int64_t *slots = vmap_counter_slots;
	cr_assert(vmap_counter_go_percpu(), "idempotent");
	cr_assert_eq(vmap_counter_slots, slots, "the slot block is never replaced");
	cr_assert_eq(vmap_stat_read(VMAP_STAT_counter_mode_switches), 1);
	cr_assert(vmap_stat_read(VMAP_STAT_mapped_bytes) > mapped, "the slot block is counted");
}

Test(counter, batch_scales_with_cpus)
{
	vmap_counter_init(2);
	cr_assert_eq(vmap_counter_batch, 32 * 4096);
	cr_assert_eq(vmap_counter_nslots, 2);
	vmap_counter_init(64);
	cr_assert_eq(vmap_counter_batch, 128 * 4096);
	vmap_counter_init(0);
	cr_assert_eq(vmap_counter_nslots, 1);
	vmap_counter_init(100000);
	cr_assert_eq(vmap_counter_nslots, 256);
}

Test(counter, percpu_small_adds_stay_in_slots_until_the_batch)
{
	vmap_counter_init(2);
	cr_assert(vmap_counter_go_percpu());
	int64_t b0 = vmap_stat_read_approx(C);
	vmap_stat_add_cpu(0, C, 100);
	vmap_stat_add_cpu(1, C, 100);
	cr_assert_eq(vmap_stat_read_approx(C), b0, "below the batch nothing is folded");
	cr_assert_eq(vmap_stat_read(C), b0 + 200);
	vmap_stat_add_cpu(0, C, vmap_counter_batch);
	/* Through rseq both adds went to the slot of the CPU this runs on (the
	 * hint is not used); otherwise to the hinted slots 0 and 1. */
	int64_t with_first = vmap_counter_rseq ? 200 : 100;
	cr_assert_eq(vmap_stat_read_approx(C), b0 + with_first + vmap_counter_batch, "the slot folded");
	cr_assert_eq(vmap_stat_read(C), b0 + 200 + vmap_counter_batch);
	vmap_stat_add_cpu(1, C, -vmap_counter_batch - 100);
	cr_assert_eq(vmap_stat_read(C), b0 + 100);
	cr_assert_eq(vmap_stat_read_approx(C), b0 + 100, "negative batches fold too");
}

Test(counter, cached_bytes_fold_against_the_pressure_limit)
{
	vmap_counter_init(2);
	vmap_counter_set_batch(64u << 20, 8u << 20);
	cr_assert_eq(vmap_counter_batch, 4 << 20);
	cr_assert_eq(vmap_counter_batch_cached, 512 << 10, "an eighth of the limit over 2 slots");
	cr_assert(vmap_counter_go_percpu());
	enum vmap_stat k = VMAP_STAT_cached_bytes;
	int64_t b0 = vmap_stat_read_approx(k), c0 = vmap_stat_read_approx(C);
	/* 1 MiB on each CPU: folded at 512 KiB, whatever CPU the adds ran on;
	 * the other counters still wait for 4 MiB. */
	for (unsigned i = 0; i < 16; i++) {
		vmap_stat_add_cpu(i & 1, k, 128 << 10);
		vmap_stat_add_cpu(i & 1, C, 128 << 10);
	}
	cr_assert_geq(vmap_stat_read_approx(k), b0 + (1 << 20), "the approximate read is within "
			"a batch per slot of the 2 MiB added");
	cr_assert_eq(vmap_stat_read_approx(C), c0, "2 MiB stay under a 4 MiB batch");
	cr_assert_eq(vmap_stat_read(k), b0 + (2 << 20));
	vmap_stat_add_cpu(0, k, -(2 << 20));
	vmap_stat_add_cpu(0, C, -(2 << 20));
	vmap_counter_set_batch(64u << 20, 64u << 20);
}

Test(counter, any_cpu_hint_is_accepted)
{
	vmap_counter_init(2);
	cr_assert(vmap_counter_go_percpu());
	vmap_stat_add_cpu(0, C, 1);
	vmap_stat_add_cpu(7, C, 2);
	vmap_stat_add_cpu(UINT32_MAX, C, 3);
	vmap_stat_add_cpu(1000000, C, 4);
	cr_assert_eq(vmap_stat_read(C), 10);
}

/* ---- the switch under load ---------------------------------------------- */

struct hammer {
	pthread_t t;
	unsigned idx;
	volatile bool *stop;
	int64_t net;
	unsigned long iters;
};

static void *hammerer(void *arg)
{
	struct hammer *h = arg;
	int64_t d = h->idx % 2 ? 1 : 40000; /* odd: never fold; even: fold often */
	while (!__atomic_load_n(h->stop, __ATOMIC_ACQUIRE)) {
		for (int i = 0; i < 64; i++)
			vmap_stat_add_cpu(h->idx, C, d);
		h->net += 64 * d;
		__atomic_store_n(&h->iters, h->iters + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Waits until every hammerer has done more than since[i] iterations. */
static void wait_progress(struct hammer *h, const unsigned long *since, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		while (__atomic_load_n(&h[i].iters, __ATOMIC_ACQUIRE) <= since[i] + 8)
			sched_yield();
}

Test(counter, no_update_lost_while_switching_under_load, .timeout = 60)
{
	for (int round = 0; round < 20; round++) {
		/* Each round restarts from a fresh atomic mode. */
		vmap_counter_slots = NULL;
		vmap_counter_base[C] = 0;
		vmap_counter_init(2);
		volatile bool stop = false;
		struct hammer h[8];
		unsigned long at[8] = {0};
		for (unsigned i = 0; i < 8; i++) {
			h[i] = (struct hammer){.idx = i, .stop = &stop};
			cr_assert_eq(pthread_create(&h[i].t, NULL, hammerer, &h[i]), 0);
		}
		/* Every thread adds in atomic mode, then the switch comes mid-way,
		 * then every thread adds in per-CPU mode. */
		wait_progress(h, at, 8);
		struct timespec ts = {0, round * 100000};
		nanosleep(&ts, NULL);
		for (unsigned i = 0; i < 8; i++)
			at[i] = __atomic_load_n(&h[i].iters, __ATOMIC_ACQUIRE);
		cr_assert(vmap_counter_go_percpu());
		wait_progress(h, at, 8);
		__atomic_store_n(&stop, true, __ATOMIC_RELEASE);
		int64_t want = 0;
		for (unsigned i = 0; i < 8; i++) {
			pthread_join(h[i].t, NULL);
			want += h[i].net;
		}
		cr_assert_eq(vmap_stat_read(C), want, "round %d: read %ld, added %ld", round,
			     (long)vmap_stat_read(C), (long)want);
	}
}

struct pair_worker {
	pthread_t t;
	unsigned idx;
};

static void *add_then_sub(void *arg)
{
	struct pair_worker *w = arg;
	for (int i = 0; i < 20000; i++) {
		int64_t d = (i % 7 + 1) * 12345;
		vmap_stat_add_cpu(w->idx, VMAP_STAT_large_bytes_in_use, d);
		vmap_stat_add_cpu(w->idx * 3 + 1, VMAP_STAT_large_blocks_in_use, 1);
		vmap_stat_add_cpu(w->idx + 1, VMAP_STAT_large_bytes_in_use, -d);
		vmap_stat_add_cpu(w->idx, VMAP_STAT_large_blocks_in_use, -1);
	}
	return NULL;
}

static void back_to_baseline(bool percpu)
{
	vmap_counter_init(2);
	if (percpu)
		cr_assert(vmap_counter_go_percpu());
	vmap_stat_add_cpu(0, VMAP_STAT_large_bytes_in_use, 5000);
	vmap_stat_add_cpu(0, VMAP_STAT_large_blocks_in_use, 3);
	int64_t b0 = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	int64_t b1 = vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	struct pair_worker w[16];
	for (unsigned i = 0; i < 16; i++) {
		w[i].idx = i;
		cr_assert_eq(pthread_create(&w[i].t, NULL, add_then_sub, &w[i]), 0);
	}
	for (unsigned i = 0; i < 16; i++)
		pthread_join(w[i].t, NULL);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_large_bytes_in_use), b0);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_large_blocks_in_use), b1);
}

Test(counter, matched_add_sub_returns_to_baseline_atomic) { back_to_baseline(false); }
Test(counter, matched_add_sub_returns_to_baseline_percpu) { back_to_baseline(true); }

/* ---- peak --------------------------------------------------------------- */

Test(counter, peak_only_grows_until_reset)
{
	vmap_counter_init(2);
	cr_assert_eq(vmap_stat_peak_large_bytes, 0);
	vmap_stat_note_peak(100);
	vmap_stat_note_peak(50);
	cr_assert_eq(vmap_stat_peak_large_bytes, 100);
	vmap_stat_note_peak(300);
	cr_assert_eq(vmap_stat_peak_large_bytes, 300);
	vmap_stat_add_cpu(0, VMAP_STAT_large_bytes_in_use, 42);
	vmap_stat_reset_peak();
	cr_assert_eq(vmap_stat_peak_large_bytes, 42, "reset sets the peak to the current value");
}

static void *note_peaks(void *arg)
{
	int64_t base = (int64_t)(uintptr_t)arg;
	for (int64_t i = 0; i < 100000; i++)
		vmap_stat_note_peak(base + i);
	return NULL;
}

Test(counter, concurrent_peaks_keep_the_maximum)
{
	vmap_counter_init(2);
	pthread_t t[8];
	for (uintptr_t i = 0; i < 8; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, note_peaks, (void *)(i * 1000)), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(vmap_stat_peak_large_bytes, 7000 + 99999);
}

Test(counter, percpu_folds_of_bytes_in_use_update_the_peak)
{
	vmap_counter_init(2);
	cr_assert(vmap_counter_go_percpu());
	int64_t big = 3 * vmap_counter_batch;
	vmap_stat_add_cpu(0, VMAP_STAT_large_bytes_in_use, big);
	cr_assert(vmap_stat_peak_large_bytes >= big, "peak %ld after a fold of %ld",
		  (long)vmap_stat_peak_large_bytes, (long)big);
	vmap_stat_add_cpu(0, VMAP_STAT_large_bytes_in_use, -big);
	cr_assert(vmap_stat_peak_large_bytes >= big, "the peak stays after the drop");
	cr_assert_eq(vmap_stat_read(VMAP_STAT_large_bytes_in_use), 0);
}

Test(counter, range_allocations_raise_the_peak)
{
	range_setup(NULL);
	bool zero;
	void *a = vmap_range_alloc(8 * MiB, VMAP_PAGE, &zero);
	void *b = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	cr_assert(a && b);
	int64_t in_use = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	cr_assert(in_use >= (int64_t)(12 * MiB));
	cr_assert_eq(vmap_stat_peak_large_bytes, in_use);
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	cr_assert_eq(vmap_stat_read(VMAP_STAT_large_bytes_in_use), 0);
	cr_assert_eq(vmap_stat_peak_large_bytes, in_use, "the peak survives the frees");
}

/* ---- forced modes (VMAPALLOC_COUNTER) and the facade ------------------------ */

#include "alloc.h"
#include "stats.h"

extern char **environ;

/* Drops inherited VMAPALLOC_* variables, sets the given ones, initialises the
 * facade (which reads them) and checks that the arena is there. */
static void facade_setup(const char *counter)
{
	for (;;) {
		char name[256] = "";
		for (char **e = environ; *e; e++) {
			size_t n = strcspn(*e, "=");
			if (strncmp(*e, "VMAPALLOC_", 10) == 0 && n < sizeof name) {
				memcpy(name, *e, n);
				name[n] = '\0';
				break;
			}
		}
		if (!name[0])
			break;
		unsetenv(name);
	}
	setenv("VMAPALLOC_SHARDS", "2", 1);
	setenv("VMAPALLOC_PURGE_DELAY_MS", "0", 1);
	if (counter)
		setenv("VMAPALLOC_COUNTER", counter, 1);
	vmap_init();
	cr_assert(!vmap_range_enabled(), "the arena is set up on the first large request only");
	cr_assert(vmap_range_ready(), "the arena could be reserved");
	cr_assert(vmap_range_enabled());
}

Test(counter, option_values_parse)
{
	static const char *const atomic[] = {"VMAPALLOC_COUNTER=atomic", NULL};
	static const char *const percpu[] = {"VMAPALLOC_COUNTER=percpu", NULL};
	static const char *const autom[] = {"VMAPALLOC_COUNTER=auto", NULL};
	static const char *const bad[] = {"VMAPALLOC_COUNTER=percore", NULL};
	cr_assert_eq(unit_parse(atomic), 0);
	cr_assert_eq(vmap_opt.counter, VMAP_COUNTER_ATOMIC);
	cr_assert_eq(unit_parse(percpu), 0);
	cr_assert_eq(vmap_opt.counter, VMAP_COUNTER_PERCPU);
	cr_assert_eq(unit_parse(autom), 0);
	cr_assert_eq(vmap_opt.counter, VMAP_COUNTER_AUTO);
	int devnull = open("/dev/null", O_WRONLY), saved = dup(2);
	cr_assert(devnull >= 0 && saved >= 0);
	dup2(devnull, 2); /* the complaint about the bad value */
	int problems = unit_parse(bad);
	dup2(saved, 2);
	close(saved);
	close(devnull);
	cr_assert_eq(problems, 1, "a bad value is reported");
	cr_assert_eq(vmap_opt.counter, VMAP_COUNTER_AUTO, "and the default kept");
}

struct facade_worker {
	pthread_t t;
	unsigned idx;
	int64_t allocs;
	unsigned failed; /* Criterion asserts only on the test's own thread */
};

/* Large (range allocator) and small blocks, all freed before returning. */
static void *facade_churn(void *arg)
{
	struct facade_worker *w = arg;
	void *p[16];
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 16; i++) {
			size_t size = (i % 2) ? (size_t)(w->idx + 1) * 100 : (size_t)(i + 1) * 64 * KiB + 1;
			p[i] = vmap_malloc(size);
			w->allocs++;
			if (!p[i]) {
				w->failed++;
				continue;
			}
			memset(p[i], 0xa5, 64);
		}
		for (int i = 15; i >= 0; i--)
			vmap_free(p[i]);
	}
	return NULL;
}

/* A call count as the report reads it: the shared counters and what the
 * slabs' fast paths counted in the heaps (the workers' 400 small calls each
 * take the process off glibc). */
static int64_t calls(enum vmap_stat s)
{
	return (int64_t)vmap_stat_value(s);
}

/* Every block freed: the gauges are back where they were, the call counts
 * exact, and the mode is what the option asked for. */
static void facade_baseline(const char *counter, bool percpu_after)
{
	facade_setup(counter);
	void *warm = vmap_malloc(MiB); /* main thread: counters already moving */
	vmap_free(warm);
	int64_t bytes0 = ctr(VMAP_STAT_large_bytes_in_use);
	int64_t blocks0 = ctr(VMAP_STAT_large_blocks_in_use);
	int64_t mallocs0 = calls(VMAP_STAT_malloc_calls);
	int64_t frees0 = calls(VMAP_STAT_free_calls);
	struct facade_worker w[8];
	for (unsigned i = 0; i < 8; i++) {
		w[i] = (struct facade_worker){.idx = i};
		cr_assert_eq(pthread_create(&w[i].t, NULL, facade_churn, &w[i]), 0);
	}
	int64_t allocs = 0;
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(w[i].t, NULL);
		cr_assert_eq(w[i].failed, 0, "thread %u: malloc failed", i);
		allocs += w[i].allocs;
	}
	cr_assert_eq(vmap_counter_is_percpu(), percpu_after, "mode %s", counter ? counter : "(default)");
	cr_assert_eq(ctr(VMAP_STAT_counter_mode_switches), percpu_after ? 1 : 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), bytes0, "bytes in use %ld, baseline %ld",
		     (long)ctr(VMAP_STAT_large_bytes_in_use), (long)bytes0);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), blocks0);
	/* Worker threads fold their batched call counts at exit (key destructor). */
	cr_assert_eq(calls(VMAP_STAT_malloc_calls), mallocs0 + allocs, "mallocs %ld, want %ld",
		     (long)calls(VMAP_STAT_malloc_calls), (long)(mallocs0 + allocs));
	cr_assert_eq(calls(VMAP_STAT_free_calls), frees0 + allocs);
}

Test(counter, forced_atomic_never_switches_and_returns_to_baseline, .timeout = 60)
{
	facade_baseline("atomic", false);
}

Test(counter, forced_percpu_returns_to_baseline, .timeout = 60)
{
	facade_baseline("percpu", true);
}

Test(counter, auto_switches_with_threads_and_returns_to_baseline, .timeout = 60)
{
	facade_baseline("auto", true);
}

Test(counter, forced_percpu_is_per_cpu_from_init)
{
	facade_setup("percpu");
	cr_assert(vmap_counter_is_percpu(), "per-CPU before any second thread");
	cr_assert_eq(ctr(VMAP_STAT_counter_mode_switches), 1);
	cr_assert_neq(vmap_counter_switch_ns(), 0);
}

Test(counter, forced_atomic_is_atomic_with_threads)
{
	facade_setup("atomic");
	pthread_t t;
	struct facade_worker w = {.idx = 1};
	cr_assert_eq(pthread_create(&t, NULL, facade_churn, &w), 0);
	pthread_join(t, NULL);
	cr_assert_eq(w.failed, 0);
	cr_assert_not(vmap_counter_is_percpu());
	cr_assert_null(vmap_counter_slots, "no slot block was mapped");
}

static void *never_allocates(void *arg)
{
	volatile unsigned long s = 0;
	for (unsigned long i = 0; i < 10000; i++)
		s += i;
	return arg;
}

Test(counter, auto_ignores_a_thread_that_never_calls_the_allocator)
{
	facade_setup(NULL);
	void *p = vmap_malloc(MiB);
	vmap_free(p);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, never_allocates, NULL), 0);
	pthread_join(t, NULL);
	cr_assert_not(vmap_counter_is_percpu(), "a thread that never allocates does not switch");
	cr_assert_eq(ctr(VMAP_STAT_counter_mode_switches), 0);
}

/* Per-thread deltas (vmap_stat_add_local): folded every VMAP_LOCAL_BATCH
 * events, at the thread's exit, and at once for every event after it (glibc
 * frees after the key destructors). */
static void *local_adder(void *arg)
{
	(void)arg;
	for (int i = 0; i < VMAP_LOCAL_BATCH + 5; i++)
		vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, 3);
	vmap_counter_thread_exit();
	vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, 1000); /* after the exit hook */
	return NULL;
}

Test(counter, local_deltas_fold_in_batches_at_exit_and_after)
{
	int64_t base = vmap_stat_read_approx(VMAP_STAT_large_bytes_allocated);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, local_adder, NULL), 0);
	pthread_join(t, NULL);
	cr_assert_eq(vmap_stat_read_approx(VMAP_STAT_large_bytes_allocated) - base,
		     3 * (VMAP_LOCAL_BATCH + 5) + 1000);
	/* This thread: fewer than a batch stay local until a read folds them. */
	vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, 7);
	vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, 7);
	int64_t approx = vmap_stat_read_approx(VMAP_STAT_large_bytes_allocated) - base;
	/* (a thread's first event folds at once: its budget starts at 0) */
	cr_assert_eq(approx, 3 * (VMAP_LOCAL_BATCH + 5) + 1007);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_large_bytes_allocated) - base,
		     3 * (VMAP_LOCAL_BATCH + 5) + 1014);
}

/* The per-CPU adds go through rseq exactly when glibc registered it (the
 * meson test unit-counter-no-rseq runs this file with glibc.pthread.rseq=0). */
Test(counter, percpu_mode_uses_rseq_when_glibc_registered_it)
{
	vmap_counter_init(2);
	cr_assert(vmap_counter_go_percpu());
	const char *tun = getenv("GLIBC_TUNABLES");
	bool off = tun && strstr(tun, "glibc.pthread.rseq=0");
#ifdef VMAP_HAVE_RSEQ
	cr_assert_eq(vmap_counter_rseq, !off && __rseq_size >= 20);
	if (!off)
		cr_assert(vmap_counter_rseq, "rseq expected on this machine (kernel >= 4.18, glibc >= 2.35)");
#else
	(void)off;
	cr_assert(!vmap_counter_rseq);
#endif
}
