/*
 * exhaust.c — out of memory, cleanly: allocate until NULL, keep everything
 * intact, free it all, allocate again.  Run under LD_PRELOAD=libvmapalloc.so
 * by the drivers of tests/reliability (prlimit, VMAPALLOC_RESERVE).
 *
 *   exhaust fill [CAP_MIB]        one thread: malloc, calloc, posix_memalign
 *                                 and realloc growth, small and large, until
 *                                 everything returns NULL (or CAP_MIB of
 *                                 blocks, default 64 GiB)
 *   exhaust threads N [CAP_MIB]   N threads at once (tst-malloc-thread-fail)
 *   exhaust setrlimit HEAD_MIB    lowers RLIMIT_AS to the address space in
 *                                 use + HEAD_MIB first, then fills; prints how
 *                                 much it got past HEAD_MIB ("over-limit N
 *                                 MiB") and the address space in use when
 *                                 full; with REL_STRICT_AS=1 fails if that
 *                                 exceeds the limit or the fill got more than
 *                                 HEAD_MIB + 128 MiB.  In use = VmSize less
 *                                 the arena's unclaimed reservation
 *                                 (counter unclaimed_bytes): reserved once,
 *                                 before the limit, it is in VmSize but holds
 *                                 nothing of the program's; a limit of VmSize
 *                                 + HEAD_MIB would give the program the whole
 *                                 64 GiB arena more
 *   exhaust headroom              (under a finite RLIMIT_AS, e.g. 8 GiB)
 *                                 1 GiB-aligned blocks, small and big, on
 *                                 both CPUs, 4 rounds, each freed at once:
 *                                 every one succeeds, and then the kernel
 *                                 still has 1 GiB for a mapping that is not
 *                                 the arena's (a shared one), a thread can
 *                                 be created, and aligned_alloc(1 GiB)
 *                                 works on both CPUs: the arena's regions
 *                                 leave glibc and the rest of the program
 *                                 room; run with
 *                                 VMAPALLOC_PURGE_DELAY_MS=0 and a big
 *                                 LAZY_MAX so freed runs stay with their
 *                                 shard and the arena grows
 *   exhaust regions MIN           fill, and require at least MIN arena
 *                                 regions in the end (VMAPALLOC_RESERVE=256M
 *                                 makes the arena add regions)
 *
 * At the first NULL of each kind: errno is ENOMEM; posix_memalign returned
 * ENOMEM and left *memptr untouched; a failed realloc left its block intact.
 * Every block's pattern is checked before it is freed; the VMAs the first
 * fill added are at most 64 per GiB it held (REQUIREMENTS.md #28).  After freeing
 * everything, a second fill must reach at least half of the first one's bytes
 * (nothing lost for good) — and a few blocks of every size must succeed.
 * Blocks are marked on their first 64 bytes and their last byte only
 * (REL_TOUCH=1: every page), so that address space, not memory, runs out.
 * REL_FIRST_CPU=n / REL_SECOND_CPU=n pin the two fills to CPUs (shards).
 */
#include "rel.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

struct blk {
	void *p;
	size_t n;
	uint64_t seed;
};

struct fill {
	struct blk *b;
	size_t nb, cap;
	size_t bytes;
	size_t cap_bytes;
	unsigned nulls; /* kinds that returned NULL */
	unsigned long calls;
	uint64_t rng;
	bool touch_all;
};

static void mark(void *p, size_t n, uint64_t seed, bool all)
{
	if (all) {
		rel_mark(p, n, seed);
		return;
	}
	unsigned char *c = p;
	for (size_t i = 0; i < n && i < 64; i++)
		c[i] = (unsigned char)(seed + i * 7);
	c[n - 1] = (unsigned char)(seed * 3 + 1);
}

static int marked(const void *p, size_t n, uint64_t seed, bool all)
{
	if (all)
		return rel_marked(p, n, seed);
	const unsigned char *c = p;
	for (size_t i = 0; i + 1 < n && i < 64; i++)
		if (c[i] != (unsigned char)(seed + i * 7))
			return 0;
	return c[n - 1] == (unsigned char)(seed * 3 + 1);
}

static size_t pick(struct fill *f, unsigned kind)
{
	uint64_t r = rel_rnd(&f->rng);
	switch (kind) {
	case 0: return 16 + r % (60 * KiB);           /* small: glibc */
	case 1: return 128 * KiB + r % (8 * MiB);     /* large: the arena */
	case 2: return 64 * MiB + r % (64 * MiB);     /* very large: chunks */
	default: return 1 + r % (256 * KiB);
	}
}

static bool push(struct fill *f, void *p, size_t n)
{
	if (f->nb == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 4096;
		/* The table itself comes from mmap: malloc may be what failed. */
		void *nt = mmap(NULL, nc * sizeof *f->b, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (nt == MAP_FAILED)
			return false;
		if (f->b) {
			memcpy(nt, f->b, f->nb * sizeof *f->b);
			munmap(f->b, f->cap * sizeof *f->b);
		}
		f->b = nt;
		f->cap = nc;
	}
	uint64_t seed = rel_rnd(&f->rng);
	mark(p, n, seed, f->touch_all);
	f->b[f->nb++] = (struct blk){p, n, seed};
	f->bytes += n;
	return true;
}

/* Allocates until every kind fails (or the cap).  Returns the bytes held. */
static size_t fill_until_null(struct fill *f)
{
	bool dead[6] = {false};
	unsigned ndead = 0;
	while (ndead < 6 && f->bytes < f->cap_bytes) {
		unsigned kind = (unsigned)(rel_rnd(&f->rng) % 6);
		if (dead[kind])
			continue;
		void *p = NULL;
		size_t n;
		f->calls++;
		errno = 0;
		switch (kind) {
		case 0: /* small malloc */
		case 1: /* large malloc */
		case 2: /* very large malloc */
			n = pick(f, kind);
			p = malloc(n);
			break;
		case 3: /* calloc, large */
			n = pick(f, 1);
			p = calloc(1, n);
			if (p)
				CHECK(vmt_first_nonzero(p, n < 65536 ? n : 65536) == SIZE_MAX,
				      "calloc(%zu) not zero", n);
			break;
		case 4: { /* posix_memalign, 64 KiB aligned */
			n = pick(f, 3) + 64 * KiB;
			void *sentinel = (void *)0x1234;
			void *q = sentinel;
			int rc = posix_memalign(&q, 64 * KiB, n);
			if (rc == 0) {
				p = q;
				CHECK(((uintptr_t)p & (64 * KiB - 1)) == 0, "posix_memalign misaligned");
			} else {
				CHECK(rc == ENOMEM, "posix_memalign failed with %d, not ENOMEM", rc);
				CHECK(q == sentinel, "failed posix_memalign wrote *memptr");
				errno = ENOMEM;
			}
			break;
		}
		default: { /* realloc growth of the last block */
			if (!f->nb) {
				dead[kind] = true; /* nothing to grow */
				ndead++;
				continue;
			}
			struct blk *b = &f->b[f->nb - 1];
			n = b->n + pick(f, 1);
			void *q = realloc(b->p, n);
			if (!q) {
				CHECK(marked(b->p, b->n, b->seed, f->touch_all),
				      "failed realloc damaged its block");
				break;
			}
			CHECK(marked(q, b->n, b->seed, f->touch_all), "realloc(%zu -> %zu) lost content",
			      b->n, n);
			f->bytes += n - b->n;
			b->p = q;
			b->n = n;
			mark(q, n, b->seed, f->touch_all);
			continue;
		}
		}
		if (!p) {
			CHECK(errno == ENOMEM, "allocation of %zu (kind %u) failed with errno %d, not ENOMEM",
			      n, kind, errno);
			/* Retire this kind: the others (smaller ones) may still fit. */
			dead[kind] = true;
			ndead++;
			f->nulls |= 1u << kind;
			continue;
		}
		if (!push(f, p, n)) {
			free(p);
			break;
		}
	}
	return f->bytes;
}

static void verify_and_free(struct fill *f)
{
	for (size_t i = 0; i < f->nb; i++) {
		struct blk *b = &f->b[i];
		CHECK(marked(b->p, b->n, b->seed, f->touch_all), "block %zu (%zu bytes) damaged", i, b->n);
		int saved = errno = 4321;
		free(b->p);
		CHECK(errno == saved, "free changed errno to %d", errno);
	}
	f->nb = 0;
	f->bytes = 0;
}

static size_t cap_bytes(int argc, char **argv, int i)
{
	size_t mib = argc > i ? strtoull(argv[i], NULL, 0) : 64 * 1024;
	return mib * MiB;
}

static struct fill new_fill(uint64_t seed, size_t cap)
{
	const char *t = getenv("REL_TOUCH");
	return (struct fill){.rng = seed, .cap_bytes = cap, .touch_all = t && !strcmp(t, "1")};
}

/* The address space the program uses: VmSize less the arena's reserved
 * space no shard has claimed, the figure vmapalloc holds RLIMIT_AS against
 * (glibc alone: VmSize). */
static uint64_t as_used(void)
{
	uint64_t v = (uint64_t)rel_status_kb("VmSize:") * KiB;
	uint64_t u = CTR("unclaimed_bytes");
	return v > u ? v - u : 0;
}

/* Two rounds: fill, verify, free, fill again.  Returns the two byte counts. */
static long vmas_per_gib = -1; /* VMAs the first fill added, per GiB it held */
static uint64_t used_when_full; /* as_used() after the first fill */

static void two_rounds(struct fill *f, size_t *r1, size_t *r2)
{
	long v0 = rel_vmas();
	const char *cpu1 = getenv("REL_FIRST_CPU");
	if (cpu1) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(cpu1), &set);
		CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity");
	}
	*r1 = fill_until_null(f);
	used_when_full = as_used();
	long v1 = rel_vmas();
	if (*r1 >= GiB / 4)
		vmas_per_gib = (v1 - v0) * (long)GiB / (long)*r1;
	verify_and_free(f);
	if (vmt_vm)
		malloc_trim(0);
	/* A few of every size work right after the free. */
	static const size_t sizes[] = {1, 100, 4096, 70000, MiB, 8 * MiB, 100 * MiB};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		if (sizes[i] * 2 > *r1)
			continue;
		void *p = malloc(sizes[i]);
		CHECK(p != NULL, "malloc(%zu) failed right after freeing %zu bytes", sizes[i], *r1);
		free(p);
	}
	/* The second fill may run on another CPU (another shard) than the first:
	 * REL_SECOND_CPU=n pins it there. */
	const char *cpu = getenv("REL_SECOND_CPU");
	if (cpu) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(cpu), &set);
		CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity");
	}
	*r2 = fill_until_null(f);
	verify_and_free(f);
}

struct thr {
	pthread_t t;
	struct fill f;
	size_t r1, r2;
	pthread_barrier_t *bar;
};

static void pin_cpu(int c)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(c % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
	sched_setaffinity(0, sizeof set, &set);
}

static void *thread_nop(void *arg)
{
	return arg;
}

static void *thread_fill(void *arg)
{
	struct thr *t = arg;
	pthread_barrier_wait(t->bar); /* every thread exists before any fills */
	t->r1 = fill_until_null(&t->f);
	pthread_barrier_wait(t->bar); /* the fills are simultaneous: nobody frees early */
	verify_and_free(&t->f);
	pthread_barrier_wait(t->bar);
	t->r2 = fill_until_null(&t->f);
	pthread_barrier_wait(t->bar);
	verify_and_free(&t->f);
	return NULL;
}

static void report(const char *what, size_t r1, size_t r2)
{
	uint64_t regions = vmt_vm ? CTR("regions") : 0;
	printf("exhaust %s: first fill %zu MiB, second %zu MiB (%.0f%%), arena regions %llu\n", what,
	       r1 >> 20, r2 >> 20, r1 ? 100.0 * (double)r2 / (double)r1 : 0.0,
	       (unsigned long long)regions);
	if (vmas_per_gib >= 0) {
		printf("exhaust %s: the first fill added %ld VMAs per GiB held\n", what, vmas_per_gib);
		/* REQUIREMENTS.md #28: a bounded number of VMAs per GiB (K = 64 here;
		 * measured 17-26 with vmapalloc 0.1). */
		CHECK(vmas_per_gib <= 64, "%ld VMAs per GiB held", vmas_per_gib);
	}
	CHECK(r1 > 0, "nothing could be allocated");
	CHECK(r2 * 2 >= r1, "second fill reached %zu of %zu bytes: memory was lost", r2, r1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("exhaust");
	const char *mode = argc > 1 ? argv[1] : "fill";
	uint64_t blocks0 = vmt_vm ? CTR("large_blocks_in_use") : 0;
	if (!strcmp(mode, "fill") || !strcmp(mode, "regions")) {
		struct fill f = new_fill(88172645463325252ull, !strcmp(mode, "fill")
								  ? cap_bytes(argc, argv, 2)
								  : 64 * GiB);
		size_t r1, r2;
		two_rounds(&f, &r1, &r2);
		report(mode, r1, r2);
		if (!strcmp(mode, "regions")) {
			unsigned long min = argc > 2 ? strtoul(argv[2], NULL, 0) : 2;
			CHECK(CTR("regions") >= min, "only %llu arena region(s), expected >= %lu",
			      (unsigned long long)CTR("regions"), min);
		}
	} else if (!strcmp(mode, "threads")) {
		int n = argc > 2 ? atoi(argv[2]) : 8;
		if (n < 1 || n > 64)
			n = 8;
		/* Every thread is created (small stacks: they need address space
		 * too) before any of them fills; they free only when all are full. */
		struct thr t[64];
		size_t cap = cap_bytes(argc, argv, 3) / (size_t)n;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 256 * KiB);
		int started = 0;
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, (unsigned)n);
		for (int i = 0; i < n; i++) {
			t[i] = (struct thr){.f = new_fill(0x9E3779B97F4A7C15ull * (uint64_t)(i + 1), cap),
					    .bar = &bar};
			if (pthread_create(&t[i].t, &attr, thread_fill, &t[i]) != 0)
				break;
			started++;
		}
		/* (A thread that cannot be created leaves the others at the first
		 * barrier: the failed check ends the process.) */
		CHECK(started == n, "only %d of %d threads could be created", started, n);
		size_t r1 = 0, r2 = 0;
		for (int i = 0; i < started; i++) {
			pthread_join(t[i].t, NULL);
			r1 += t[i].r1;
			r2 += t[i].r2;
		}
		report("threads", r1, r2);
	} else if (!strcmp(mode, "setrlimit")) {
		size_t head = (argc > 2 ? strtoull(argv[2], NULL, 0) : 256) * MiB;
		/* Settle the allocator first (arena reserved, first chunks). */
		free(malloc(MiB));
		free(malloc(100));
		uint64_t used0 = as_used();
		CHECK(used0 > 0, "no VmSize");
		struct rlimit rl = {(rlim_t)(used0 + head), (rlim_t)(used0 + head)};
		CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit(RLIMIT_AS) failed: %s", strerror(errno));
		/* Past the limit, only untouched address space: first/last bytes. */
		struct fill f = new_fill(12345, 256 * GiB);
		f.touch_all = false;
		size_t r1, r2;
		two_rounds(&f, &r1, &r2);
		long over = (long)(r1 >> 20) - (long)(head >> 20);
		printf("exhaust setrlimit: RLIMIT_AS = in use (%llu MiB) + %zu MiB; allocated %zu MiB: "
		       "over-limit %ld MiB; in use when full %llu MiB\n",
		       (unsigned long long)(used0 >> 20), head >> 20, r1 >> 20, over > 0 ? over : 0,
		       (unsigned long long)(used_when_full >> 20));
		report("setrlimit", r1, r2);
		const char *strict = getenv("REL_STRICT_AS");
		if (strict && !strcmp(strict, "1")) {
			CHECK(used_when_full <= used0 + head,
			      "address space in use %llu MiB past the lowered RLIMIT_AS (REQUIREMENTS.md #25)",
			      (unsigned long long)((used_when_full - used0 - head) >> 20));
			/* Chunks claimed before the limit may still serve: slack. */
			CHECK(over <= 128, "allocations got %ld MiB past the lowered RLIMIT_AS "
			      "(REQUIREMENTS.md #25)", over);
		}
	} else if (!strcmp(mode, "headroom")) {
		static const size_t sizes[] = {1, 3 * MiB, 100 * KiB};
		unsigned nulls = 0;
		free(malloc(MiB)); /* the arena set up before pinning: a shard per CPU */
		for (int round = 0; round < 4; round++)
			for (int c = 0; c < 2; c++)
				for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
					pin_cpu(c);
					void *p = aligned_alloc(GiB, sizes[k]);
					if (!p) {
						nulls++;
						continue;
					}
					memset(p, 1, sizes[k]);
					free(p);
				}
		uint64_t regions = CTR("regions");
		long vm_kb = rel_status_kb("VmSize:");
		void *m = mmap(NULL, GiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		bool mapped = m != MAP_FAILED;
		if (mapped)
			munmap(m, GiB);
		pthread_t t;
		bool thread = pthread_create(&t, NULL, thread_nop, NULL) == 0;
		if (thread)
			pthread_join(t, NULL);
		unsigned late = 0;
		for (int c = 0; c < 2; c++) {
			pin_cpu(c);
			void *p = aligned_alloc(GiB, 3 * MiB);
			late += p == NULL;
			free(p);
		}
		printf("exhaust headroom: %u of 24 aligned_alloc(1 GiB) NULL; then arena regions %llu, "
		       "VmSize %ld MiB; a 1 GiB shared mapping %s, a thread %s, %u of 2 late "
		       "aligned_alloc(1 GiB) NULL\n",
		       nulls, (unsigned long long)regions, vm_kb >> 10, mapped ? "ok" : "REFUSED",
		       thread ? "ok" : "REFUSED", late);
		CHECK(nulls == 0, "%u aligned_alloc(1 GiB) returned NULL", nulls);
		CHECK(mapped, "no room left for a 1 GiB mapping outside the arena");
		CHECK(thread, "no room left for a thread");
		CHECK(late == 0, "aligned_alloc(1 GiB) failed after the arena grew");
	} else {
		fprintf(stderr, "usage: exhaust fill|threads|setrlimit|regions|headroom ...\n");
		return 2;
	}
	if (vmt_vm)
		CHECK(CTR("large_blocks_in_use") == blocks0, "large blocks in use: %llu at the end, %llu at the start",
		      (unsigned long long)CTR("large_blocks_in_use"), (unsigned long long)blocks0);
	vmt_done("exhaust");
	return 0;
}
