/*
 * stress.c — many threads, random operations, cross-thread frees, every
 * block's pattern verified; run under LD_PRELOAD=libvmapalloc.so.
 *
 *   stress [threads] [seconds] [max_size]
 *
 * Threads share a table of slots; each operation picks a random slot and
 * atomically exchanges its block with a new one (malloc, calloc, aligned,
 * realloc of the old one; or the program's own mmap, grown or shrunk with
 * mremap and unmapped in two pieces) or NULL, verifies the pattern of
 * whatever it took out (written by whichever thread allocated it) and frees
 * it.  So a block is often freed by another thread than the one that
 * allocated it.  Some threads exit and are replaced (thread churn).  At the
 * end every slot is verified and freed; with vmapalloc the live-block and
 * served-mmap counters must be back at their starting values, and VmRSS
 * back near nothing after malloc_trim.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 4096

struct block {
	size_t size;
	uint64_t seed;
	uint64_t mapped; /* 1: the program's own mmap (munmap/mremap), 0: malloc family */
	/* pattern bytes follow, over the whole block */
};

static _Atomic(struct block *) slots[SLOTS];
static atomic_ulong ops, bytes_checked;
static atomic_int stop;
static size_t max_size = 8u << 20;
static int (*counter_get)(const char *, uint64_t *);

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(struct block *b)
{
	unsigned char *p = (unsigned char *)b;
	/* Header, first/last bytes and one byte per page: enough to catch overlap. */
	for (size_t i = sizeof *b; i < b->size; i += (i < 4096 ? 1 : 4093))
		p[i] = (unsigned char)(b->seed + i);
	p[b->size - 1] = (unsigned char)(b->seed + b->size - 1);
}

static void check(struct block *b)
{
	unsigned char *p = (unsigned char *)b;
	for (size_t i = sizeof *b; i < b->size; i += (i < 4096 ? 1 : 4093))
		if (p[i] != (unsigned char)(b->seed + i)) {
			fprintf(stderr, "FAIL: block %p size %zu corrupted at %zu\n", (void *)b, b->size, i);
			abort();
		}
	if (p[b->size - 1] != (unsigned char)(b->seed + b->size - 1)) {
		fprintf(stderr, "FAIL: block %p size %zu: last byte corrupted\n", (void *)b, b->size);
		abort();
	}
	atomic_fetch_add_explicit(&bytes_checked, b->size, memory_order_relaxed);
}

static size_t pick_size(uint64_t *s)
{
	uint64_t r = rnd(s);
	switch (r % 8) {
	case 0: case 1: case 2: return sizeof(struct block) + 1 + r % 512;      /* small: the last byte is past the header */
	case 3: return sizeof(struct block) + 1 + r % (64 << 10);                /* medium */
	case 4: case 5: return (64 << 10) + r % (1 << 20);                       /* large */
	default: return (1 << 20) + r % max_size;                               /* larger */
	}
}

#define PAGE_UP(n) (((n) + 4095) & ~(size_t)4095)

/* The program's own anonymous mmap (served from vmapalloc's arena). */
static struct block *make_mapped(size_t size)
{
	struct block *b = mmap(NULL, PAGE_UP(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED) {
		fprintf(stderr, "FAIL: mmap(%zu) failed\n", size);
		abort();
	}
	for (size_t i = 0; i < size; i += 4096)
		if (((unsigned char *)b)[i]) {
			fprintf(stderr, "FAIL: mmap(%zu) not zero at %zu\n", size, i);
			abort();
		}
	return b;
}

/* free, or munmap in two pieces (the tail first: a partial munmap). */
static void release(struct block *b)
{
	if (!b->mapped) {
		free(b);
		return;
	}
	size_t len = PAGE_UP(b->size), head = len > 8192 ? (len / 2) & ~(size_t)4095 : len;
	if ((head < len && munmap((char *)b + head, len - head) != 0) || munmap(b, head) != 0) {
		fprintf(stderr, "FAIL: munmap of %zu bytes failed\n", len);
		abort();
	}
}

static struct block *make(uint64_t *s)
{
	size_t size = pick_size(s);
	struct block *b;
	switch (rnd(s) % 5) {
	case 4:
		b = make_mapped(size);
		b->size = size;
		b->seed = rnd(s);
		b->mapped = 1;
		fill(b);
		return b;
	case 0:
		b = calloc(1, size);
		if (b)
			for (size_t i = 0; i < size; i += 4096)
				if (((unsigned char *)b)[i]) {
					fprintf(stderr, "FAIL: calloc(%zu) not zero at %zu\n", size, i);
					abort();
				}
		break;
	case 1: {
		void *p = NULL;
		size_t align = (size_t)16 << (rnd(s) % 18);
		if (posix_memalign(&p, align, size) != 0)
			p = NULL;
		if (p && ((uintptr_t)p & (align - 1))) {
			fprintf(stderr, "FAIL: posix_memalign(%zu) misaligned\n", align);
			abort();
		}
		b = p;
		break;
	}
	default:
		b = malloc(size);
	}
	if (!b) {
		fprintf(stderr, "FAIL: allocation of %zu failed\n", size);
		abort();
	}
	if (malloc_usable_size(b) < size) {
		fprintf(stderr, "FAIL: usable size %zu < %zu\n", malloc_usable_size(b), size);
		abort();
	}
	b->size = size;
	b->seed = rnd(s);
	b->mapped = 0;
	fill(b);
	return b;
}

static void *worker(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
	unsigned long n = 0;
	unsigned long life = 2000 + rnd(&s) % 20000; /* then exit: thread churn */
	while (!atomic_load_explicit(&stop, memory_order_relaxed) && n < life) {
		unsigned i = (unsigned)(rnd(&s) % SLOTS);
		struct block *nb = NULL;
		uint64_t op = rnd(&s) % 10;
		if (op < 6)
			nb = make(&s);
		struct block *old = atomic_exchange(&slots[i], nb);
		if (old) {
			check(old);
			if (op == 9) {
				/* realloc: grow or shrink, content kept up to min(old,new). */
				size_t ns = pick_size(&s), keep = old->size < ns ? old->size : ns;
				uint64_t seed = old->seed;
				size_t osize = old->size;
				uint64_t mapped = old->mapped;
				struct block *r;
				if (mapped) {
					r = mremap(old, PAGE_UP(osize), PAGE_UP(ns), MREMAP_MAYMOVE);
					if (r == MAP_FAILED)
						r = NULL;
				} else {
					r = realloc(old, ns);
				}
				if (!r) {
					fprintf(stderr, "FAIL: realloc to %zu failed\n", ns);
					abort();
				}
				unsigned char *p = (unsigned char *)r;
				for (size_t k = sizeof *r; k < keep && k < osize - 1; k += (k < 4096 ? 1 : 4093))
					if (p[k] != (unsigned char)(seed + k)) {
						fprintf(stderr, "FAIL: realloc lost content at %zu\n", k);
						abort();
					}
				r->size = ns;
				r->seed = rnd(&s);
				r->mapped = mapped;
				fill(r);
				struct block *o2 = atomic_exchange(&slots[i], r);
				if (o2) {
					check(o2);
					release(o2);
				}
			} else {
				release(old);
			}
		}
		n++;
	}
	atomic_fetch_add(&ops, n);
	return NULL;
}

/* A "Name:   N kB" line of /proc/self/status, in KiB (0 if absent). */
/* A crash names its address and thread before dying by the same signal (a
 * core dump, where enabled, has the rest). */
static void on_fault(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char line[128];
	int n = snprintf(line, sizeof line, "stress: signal %d at address %p (thread %ld)\n", sig,
			 si->si_addr, (long)gettid());
	if (write(2, line, (size_t)n) < 0)
		_exit(99);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* The mappings with more than min_kib resident, from /proc/self/smaps (the
 * failure's diagnosis: whose pages stayed). */
static void show_resident(unsigned long min_kib)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return;
	int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "vmapalloc_owns");
	char line[512], head[512] = "";
	unsigned long lo = 0, hi = 0, in_arena = 0, other = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long kib;
		/* "7f12...-7f13... rw-p ..." heads a mapping; fields are "Rss: ..." */
		if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
			snprintf(head, sizeof head, "%s", line);
			char *dash;
			lo = strtoul(line, &dash, 16);
			hi = strtoul(dash + 1, NULL, 16);
		} else if (sscanf(line, "Rss: %lu kB", &kib) == 1) {
			/* (The last page: a small mapping of ours can merge in front
			 * of the arena's first chunk.) */
			bool ours = owns && (owns((void *)lo) || owns((void *)(hi - 1)));
			*(ours ? &in_arena : &other) += kib;
			if (kib > min_kib)
				fprintf(stderr, "  %8lu KiB  %s%s", kib, ours ? "(vmapalloc's arena) " : "", head);
		}
	}
	fclose(f);
	fprintf(stderr, "  in all: %lu KiB resident in vmapalloc's arena, %lu KiB elsewhere\n", in_arena,
		other);
}

static unsigned long status_kib(const char *name)
{
	char line[256];
	unsigned long v = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	size_t n = strlen(name);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, name, n) == 0) {
			v = strtoul(line + n, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 8;
	double seconds = argc > 2 ? atof(argv[2]) : 5;
	if (argc > 3)
		max_size = strtoull(argv[3], NULL, 0);
	struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO};
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	counter_get = (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	uint64_t blocks0 = 0;
	if (counter_get)
		counter_get("large_blocks_in_use", &blocks0);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_t *tid = calloc((size_t)threads, sizeof *tid);
	unsigned long spawned = 0;
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)++spawned);
	for (;;) {
		/* Replace threads as they finish their lives, until time is up. */
		for (int i = 0; i < threads; i++) {
			if (pthread_tryjoin_np(tid[i], NULL) == 0)
				pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)++spawned);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
			break;
		usleep(10000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	free(tid);
	for (int i = 0; i < SLOTS; i++) {
		struct block *b = atomic_exchange(&slots[i], NULL);
		if (b) {
			check(b);
			release(b);
		}
	}
	if (counter_get) {
		uint64_t blocks1 = 0;
		counter_get("large_blocks_in_use", &blocks1);
		if (blocks1 != blocks0) {
			fprintf(stderr, "FAIL: %llu large blocks live at the end, %llu at the start\n",
				(unsigned long long)blocks1, (unsigned long long)blocks0);
			return 1;
		}
		uint64_t mapped = 0, served = 0;
		counter_get("mmap_bytes_in_use", &mapped);
		counter_get("mmap_served", &served);
		if (mapped != 0) {
			fprintf(stderr, "FAIL: %llu bytes of served mmaps left after every munmap (%llu served)\n",
				(unsigned long long)mapped, (unsigned long long)served);
			return 1;
		}
		malloc_trim(0);
	}
	/* RSS back after the peak: with every block freed and malloc_trim done,
	 * what stays resident is the program and the allocators' bookkeeping,
	 * not the blocks (tests/reliability/REQUIREMENTS.md #23): at most
	 * 64 MiB or 1/32 of the peak (zero pages of split huge pages are
	 * what would stay otherwise). */
	unsigned long rss = status_kib("VmRSS:"), hwm = status_kib("VmHWM:");
	if (counter_get && rss > 65536 && rss > hwm / 32) {
		fprintf(stderr, "FAIL: VmRSS %lu KiB after every block was freed and trimmed "
			"(peak %lu KiB); mappings with more than 4 MiB resident:\n", rss, hwm);
		show_resident(4096);
		return 1;
	}
	printf("stress: %d threads (%lu started), %.1f s, %lu operations, %.1f GiB verified, "
	       "RSS %lu KiB after trim (peak %lu KiB), ok\n",
	       threads, spawned, seconds, (unsigned long)ops,
	       (double)bytes_checked / (1 << 30), rss, hwm);
	return 0;
}
