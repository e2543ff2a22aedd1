/*
 * mmap.c — the program's own anonymous mmap: mmap, touch every page, munmap.
 *
 * Every thread runs its own loop of cycles; one cycle (one "op") is
 *
 *   p = mmap(NULL, n, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)
 *   for every page: write a stamp, checking that the word it replaces is 0
 *   check the first and last page's stamps
 *   munmap(p, n)
 *
 * with n a random multiple of 4096 in [64 KiB, 4 MiB] (xorshift, fixed seed
 * per thread).  It is never linked against an allocator: bench/mmap.sh runs
 * the same binary without a preload (the kernel's mmap) and with
 * LD_PRELOAD=libvmapalloc.so.  vmapalloc's counters are looked up with
 * dlsym(RTLD_DEFAULT, ...) and printed as "-" when absent.
 *
 *   mmap [--threads N] [--seconds T | --ops K] [--seed X]
 *        [--min-kib A] [--max-kib B]
 *
 * One line on stdout, space separated key=value pairs:
 *
 *   threads= ops= seconds= ops_per_s= mib_per_s= hwm_kib= minflt=
 *   minflt_total= mmap_served= mmap_passed= mmap_lib= verify=ok
 *
 * ops, seconds, minflt and the counters cover the timed phase only;
 * hwm_kib (VmHWM: peak RSS) and minflt_total cover the whole process.  A
 * fresh mapping that is not zero, or a stamp that does not read back, aborts
 * with a message (exit by SIGABRT).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "libinfo.h"

#define PAGE ((size_t)4096)
#define KIB  ((size_t)1024)

static struct {
	int threads;
	double seconds;
	unsigned long long ops_per_thread; /* 0: run for seconds */
	uint64_t seed;
	size_t min_pages, max_pages;
} cfg = { 1, 1.0, 0, 1, 64 * KIB / PAGE, 4096 * KIB / PAGE };

static atomic_int stop;
static pthread_barrier_t bar_ready, bar_go, bar_done;

struct worker {
	pthread_t tid;
	int id;
	unsigned long long ops;
	unsigned long long bytes;
} __attribute__((aligned(64)));

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(stderr, "mmap: %s\n", buf);
	abort();
}

static void one_cycle(struct worker *w, uint64_t *s)
{
	size_t np = cfg.min_pages + rnd(s) % (cfg.max_pages - cfg.min_pages + 1);
	size_t len = np * PAGE;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap(%zu) failed: %s", len, strerror(errno));
	uint64_t stamp = ((uint64_t)w->id << 48) ^ (w->ops * 0x9E3779B97F4A7C15ull);
	for (size_t i = 0; i < np; i++) {
		/* One write access returns the old word: a single fault per page,
		 * as a program that just writes would take (a read first would map
		 * the zero page and then fault again on the write). */
		uint64_t old = __atomic_exchange_n((uint64_t *)(p + i * PAGE), stamp + i, __ATOMIC_RELAXED);
		if (old != 0)
			die("fresh mapping not zero: page %zu of %zu (thread %d, op %llu)", i, np, w->id, w->ops);
	}
	if (*(volatile uint64_t *)p != stamp ||
	    *(volatile uint64_t *)(p + (np - 1) * PAGE) != stamp + np - 1)
		die("stamp lost (thread %d, op %llu)", w->id, w->ops);
	if (munmap(p, len) != 0)
		die("munmap(%zu) failed: %s", len, strerror(errno));
	w->ops++;
	w->bytes += len;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)w->id * 0xD1B54A32D192ED03ull + 1;
	pthread_barrier_wait(&bar_ready);
	pthread_barrier_wait(&bar_go);
	if (cfg.ops_per_thread) {
		while (w->ops < cfg.ops_per_thread)
			one_cycle(w, &s);
	} else {
		while (!atomic_load_explicit(&stop, memory_order_relaxed))
			one_cycle(w, &s);
	}
	pthread_barrier_wait(&bar_done);
	return NULL;
}

typedef int (*counter_get_fn)(const char *, uint64_t *);

static const char *const counter_names[] = { "mmap_served", "mmap_passed" };
#define NCOUNTERS (sizeof counter_names / sizeof counter_names[0])

static void read_counters(counter_get_fn fn, uint64_t *v, int *have)
{
	for (size_t i = 0; i < NCOUNTERS; i++)
		have[i] = fn && fn(counter_names[i], &v[i]) == 0;
}

static void usage(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: mmap [--threads N] [--seconds T | --ops K] [--seed X] [--min-kib A] [--max-kib B]\n"
		"  cycles of mmap / touch every page / munmap of random sizes in [A, B] KiB\n"
		"  (default 64..4096), every thread its own loop; one key=value line on stdout\n");
	exit(code);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			usage(0);
		if (!v)
			usage(2);
		if (!strcmp(a, "--threads"))
			cfg.threads = atoi(v);
		else if (!strcmp(a, "--seconds"))
			cfg.seconds = atof(v);
		else if (!strcmp(a, "--ops"))
			cfg.ops_per_thread = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--seed"))
			cfg.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--min-kib"))
			cfg.min_pages = (size_t)strtoull(v, NULL, 0) * KIB / PAGE;
		else if (!strcmp(a, "--max-kib"))
			cfg.max_pages = (size_t)strtoull(v, NULL, 0) * KIB / PAGE;
		else
			usage(2);
		i++;
	}
	if (cfg.threads < 1 || cfg.threads > 1024 || cfg.min_pages < 1 || cfg.max_pages < cfg.min_pages ||
	    (!cfg.ops_per_thread && !(cfg.seconds > 0)))
		usage(2);

	counter_get_fn cget = NULL;
	void *sym = dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	memcpy(&cget, &sym, sizeof cget);

	unsigned nb = (unsigned)cfg.threads + 1;
	pthread_barrier_init(&bar_ready, NULL, nb);
	pthread_barrier_init(&bar_go, NULL, nb);
	pthread_barrier_init(&bar_done, NULL, nb);
	struct worker *ws = calloc((size_t)cfg.threads, sizeof *ws);
	if (!ws)
		die("calloc failed");
	for (int i = 0; i < cfg.threads; i++) {
		ws[i].id = i;
		int e = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
		if (e)
			die("pthread_create: %s", strerror(e));
	}

	uint64_t c0[NCOUNTERS], c1[NCOUNTERS];
	int h0[NCOUNTERS], h1[NCOUNTERS];
	struct rusage ru0, ru1;
	pthread_barrier_wait(&bar_ready);
	read_counters(cget, c0, h0);
	getrusage(RUSAGE_SELF, &ru0);
	double t0 = now();
	pthread_barrier_wait(&bar_go);
	if (!cfg.ops_per_thread) {
		struct timespec ts;
		ts.tv_sec = (time_t)cfg.seconds;
		ts.tv_nsec = (long)((cfg.seconds - (double)ts.tv_sec) * 1e9);
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		atomic_store(&stop, 1);
	}
	pthread_barrier_wait(&bar_done);
	double t1 = now();
	getrusage(RUSAGE_SELF, &ru1);
	read_counters(cget, c1, h1);
	for (int i = 0; i < cfg.threads; i++)
		pthread_join(ws[i].tid, NULL);

	unsigned long long ops = 0, bytes = 0;
	for (int i = 0; i < cfg.threads; i++) {
		ops += ws[i].ops;
		bytes += ws[i].bytes;
	}
	double secs = t1 - t0;
	char cbuf[128];
	size_t o = 0;
	for (size_t i = 0; i < NCOUNTERS; i++) {
		if (h0[i] && h1[i])
			o += (size_t)snprintf(cbuf + o, sizeof cbuf - o, " %s=%" PRIu64, counter_names[i],
					      c1[i] - c0[i]);
		else
			o += (size_t)snprintf(cbuf + o, sizeof cbuf - o, " %s=-", counter_names[i]);
	}
	printf("threads=%d ops=%llu seconds=%.3f ops_per_s=%.0f mib_per_s=%.0f hwm_kib=%ld minflt=%ld "
	       "minflt_total=%ld%s mmap_lib=%s verify=ok\n",
	       cfg.threads, ops, secs, (double)ops / secs, (double)bytes / secs / (1024.0 * 1024.0),
	       vm_hwm_kib(), ru1.ru_minflt - ru0.ru_minflt, ru1.ru_minflt, cbuf, lib_of("mmap"));
	free(ws);
	return 0;
}
