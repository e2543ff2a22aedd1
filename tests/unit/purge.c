/*
 * purge.c — unit tests of core/purge.c: lazy, batched purge.
 *
 * Linked with the VMAP_DEBUG core (model check after every range operation)
 * and with fake_os.c wrapping madvise/process_madvise, so the tests can see
 * which ranges were advised and in how many system calls.
 */
#include "unit.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include "alloc.h"
#include "fake_os.h"
#include "mmap.h"
#include "purge.h"

#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif

#define A64K (64 * KiB)                    /* 16 pages + guard = 17 */
#define AREA64K ((int64_t)(17 * VMAP_PAGE)) /* the area of a 64 KiB block */

/* The pressure limit of a 2-CPU machine before it was made small: these tests
 * fill the cache with a few blocks of MiBs and purge them themselves. */
static const char *const quiet[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
				    "VMAPALLOC_LAZY_MAX=64M", NULL};

static void *alloc_ok(size_t size)
{
	bool zero;
	void *p = vmap_range_alloc(size, VMAP_PAGE, &zero);
	cr_assert_not_null(p, "vmap_range_alloc(%zu) failed", size);
	return p;
}

TestSuite(purge, .timeout = 30);

/* The pressure limit when the user set none: the adaptive limit, or the
 * bytes in use if more. */
static int64_t limit_in_effect(void)
{
	int64_t in_use = ctr(VMAP_STAT_large_bytes_in_use) + ctr(VMAP_STAT_mmap_bytes_in_use);
	return in_use > (int64_t)vmap_lazy_limit ? in_use : (int64_t)vmap_lazy_limit;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0)
		;
}

Test(purge, purge_all_empties_the_cache_and_memory_comes_back_zero)
{
	range_setup(quiet);
	enum { N = 24 };
	void *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = alloc_ok(A64K);
		memset(p[i], 0xa5, A64K);
	}
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), N * AREA64K);
	int64_t purged0 = ctr(VMAP_STAT_purged_bytes);
	size_t released = vmap_range_purge(true);
	cr_assert_eq(released, (size_t)(N * AREA64K));
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	cr_assert_eq(ctr(VMAP_STAT_purged_bytes), purged0 + N * AREA64K);
	cr_assert_eq(ctr(VMAP_STAT_purges), 1);
	cr_assert_eq(vmap_shards[0].cached_bytes, 0);
	for (int i = 0; i < N; i++) {
		bool zero = false;
		void *q = vmap_range_alloc(A64K, VMAP_PAGE, &zero);
		cr_assert_eq(q, p[i], "purged areas are carved again in address order");
		cr_assert(zero, "purged with MADV_DONTNEED: known zero");
		cr_assert(all_zero(q, A64K), "block %d reads zero after the purge", i);
	}
}

Test(purge, purge_of_an_empty_cache_does_nothing)
{
	range_setup(quiet);
	fake_reset();
	cr_assert_eq(vmap_range_purge(true), 0);
	cr_assert_eq(vmap_range_purge(false), 0);
	cr_assert_eq(fake_calls(FAKE_MADVISE) + fake_calls(FAKE_MADVISE_BATCH), 0);
	cr_assert_eq(ctr(VMAP_STAT_purge_syscalls), 0);
}

Test(purge, adjacent_areas_are_released_as_one_range)
{
	range_setup(quiet);
	enum { N = 64 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(A64K);
	for (int i = 1; i < N; i++)
		cr_assert_eq((char *)p[i], (char *)p[i - 1] + AREA64K, "carved back to back");
	/* Live after them: the chunk is not given back whole (see arena.c). */
	cr_assert_eq((char *)alloc_ok(A64K), (char *)p[N - 1] + AREA64K);
	/* Free in a scrambled order: the purge sorts by address. */
	for (int i = 0; i < N; i++)
		vmap_range_free(p[(i * 37) % N], "free");
	fake_reset();
	cr_assert_eq(vmap_range_purge(true), (size_t)(N * AREA64K));
	struct fake_range r[8];
	unsigned n = fake_advised(MADV_DONTNEED, r, 8);
	/* Besides: the records of the whole 2 MiB spans the run now covers,
	 * mapped afresh (purge_drops_the_tables_of_the_spans_it_completes). */
	struct vmap_region *reg = vmap_region_of((uintptr_t)p[0]);
	while (n > 0 && r[n - 1].addr - reg->base >= reg->size)
		n--;
	cr_assert_eq(n, 1, "64 adjacent areas -> %u ranges", n);
	cr_assert_eq(r[0].addr, (uintptr_t)p[0]);
	cr_assert_eq(r[0].len, (size_t)(N * AREA64K));
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 0, "one run needs no batch");
	cr_assert_eq(ctr(VMAP_STAT_purge_syscalls), 1);
	/* And the areas became one free run (with any free space before them). */
	cr_assert_eq(vmap_tag_state(tag_of(p[0])), VMAP_ST_FREE);
	for (int i = 1; i < N; i++)
		cr_assert_eq(tag_of(p[i]), 0, "merged: no tag inside the run");
}

/* Allocates 2n blocks of 64 KiB and frees the even ones: n separate runs. */
static void make_runs(void **p, int n)
{
	for (int i = 0; i < 2 * n; i++) {
		p[i] = alloc_ok(A64K);
		memset(p[i], 0x3c, A64K);
	}
	for (int i = 0; i < 2 * n; i += 2)
		vmap_range_free(p[i], "free");
}

/* Allocates the n/2 purged areas of make_runs again: each comes back known
 * zero and reads zero, and each is one of the even blocks. */
static void realloc_purged(void **p, int n)
{
	for (int k = 0; k < n / 2; k++) {
		bool zero = false;
		void *q = vmap_range_alloc(A64K, VMAP_PAGE, &zero);
		cr_assert_not_null(q);
		int found = -1;
		for (int i = 0; i < n; i += 2)
			if (q == p[i])
				found = i;
		cr_assert(found >= 0, "%p is not one of the purged areas", q);
		cr_assert(zero, "purged area %d is known zero", found);
		cr_assert(all_zero(q, A64K), "purged area %d reads zero", found);
		p[found] = NULL; /* taken */
	}
}

Test(purge, separate_runs_go_in_one_batch_call)
{
	range_setup(quiet);
	void *p[20];
	make_runs(p, 10);
	fake_reset();
	fake_batch_mode(FAKE_BATCH_EMULATE);
	cr_assert_eq(vmap_range_purge(true), (size_t)(10 * AREA64K));
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 1);
	cr_assert_eq(fake_madvise_calls(MADV_DONTNEED), 0, "no per-run madvise after a full batch");
	struct fake_range r[16];
	cr_assert_eq(fake_advised(MADV_DONTNEED, r, 16), 10, "one iovec per run");
	for (int i = 0; i < 10; i++) {
		cr_assert(r[i].batch);
		cr_assert_eq(r[i].addr, (uintptr_t)p[2 * i], "iovecs sorted by address");
		cr_assert_eq(r[i].len, (size_t)AREA64K);
	}
	cr_assert_eq(ctr(VMAP_STAT_purge_syscalls), 1);
	realloc_purged(p, 20);
}

Test(purge, batch_on_the_running_kernel_releases_the_pages)
{
	range_setup(quiet);
	void *p[8];
	make_runs(p, 4);
	fake_reset(); /* FAKE_BATCH_REAL: whatever this kernel does */
	cr_assert_eq(vmap_range_purge(true), (size_t)(4 * AREA64K));
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 1);
	unsigned fallback = fake_madvise_calls(MADV_DONTNEED);
	cr_assert(fallback == 0 || fallback == 4, "batch or one madvise per run, got %u", fallback);
	realloc_purged(p, 8);
}

Test(purge, einval_from_the_batch_falls_back_to_one_madvise_per_run)
{
	range_setup(quiet);
	void *p[20];
	make_runs(p, 10);
	fake_reset();
	fake_batch_mode(FAKE_BATCH_EINVAL);
	cr_assert_eq(vmap_range_purge(true), (size_t)(10 * AREA64K));
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 1);
	cr_assert_eq(fake_madvise_calls(MADV_DONTNEED), 10);
	cr_assert_eq(ctr(VMAP_STAT_purge_syscalls), 11); /* the refused batch call counts too */
	realloc_purged(p, 20);
	/* The kernel said no once: later purges do not ask again. */
	for (int i = 1; i < 10; i += 2)
		vmap_range_free(p[i], "free");
	cr_assert(vmap_range_purge(true) > 0);
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 1, "batch not retried");
	cr_assert_eq(fake_madvise_calls(MADV_DONTNEED), 15);
}

Test(purge, decay_takes_a_quarter_oldest_first)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_LAZY_MAX=64M", NULL};
	range_setup(env);
	void *p[8];
	for (int i = 0; i < 8; i++)
		p[i] = alloc_ok(A64K);
	for (int i = 0; i < 8; i++)
		vmap_range_free(p[i], "free");
	/* 8 areas in cache, a limit of 9: one pressure pass brings the cache
	 * under 3/4 of the limit by taking a quarter of the pool. */
	vmap_lazy_max = vmap_lazy_limit = 9 * AREA64K;
	size_t released = vmap_range_purge(false);
	cr_assert_eq(released, (size_t)(2 * AREA64K), "a quarter of 8 areas, rounded up");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 6 * AREA64K);
	cr_assert_eq(vmap_tag_state(tag_of(p[0])), VMAP_ST_FREE, "the oldest went first");
	for (int i = 2; i < 8; i++)
		cr_assert_eq(vmap_tag_state(tag_of(p[i])), VMAP_ST_CACHED, "area %d kept", i);
}

Test(purge, decay_rounds_up_for_small_pools)
{
	range_setup(quiet);
	void *p = alloc_ok(A64K);
	void *q = alloc_ok(200 * KiB);
	vmap_range_free(p, "free");
	vmap_range_free(q, "free");
	/* One area in each of two pools: (1 + 3) / 4 = 1 from each. */
	vmap_lazy_max = vmap_lazy_limit = VMAP_PAGE;
	cr_assert(vmap_range_purge(false) > 0);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
}

Test(purge, pressure_purge_keeps_the_cache_under_lazy_max)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_LAZY_MAX=1M", NULL};
	range_setup(env);
	cr_assert_eq(vmap_lazy_max, MiB);
	enum { N = 32 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(128 * KiB); /* 33 pages each: 4.1 MiB in all */
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		cr_assert(ctr(VMAP_STAT_cached_bytes) <= (int64_t)MiB,
			  "after free %d: %ld cached, limit 1 MiB", i, (long)ctr(VMAP_STAT_cached_bytes));
	}
	cr_assert(ctr(VMAP_STAT_purges) >= 1);
	cr_assert(ctr(VMAP_STAT_purged_bytes) >= (int64_t)(3 * MiB));
	/* Calling it again with the cache under the limit does nothing. */
	int64_t purges = ctr(VMAP_STAT_purges);
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_purges), purges);
}

Test(purge, pressure_limit_adapts_to_refaulting_and_decays_back)
{
	/* A delay of a minute: no age purge happens during the test by itself. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB; /* the automatic limit, made small */
	/* A burst of frees passes the limit again and again: that is not
	 * refaulting, and the limit stays. */
	enum { N = 32 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(128 * KiB); /* 33 pages each: 4.1 MiB in use */
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		cr_assert(ctr(VMAP_STAT_cached_bytes) <= limit_in_effect(),
			  "after free %d: %ld cached over the limit %lu (in use %ld)", i,
			  (long)ctr(VMAP_STAT_cached_bytes), (unsigned long)vmap_lazy_limit,
			  (long)ctr(VMAP_STAT_large_bytes_in_use));
	}
	cr_assert_eq(ctr(VMAP_STAT_lazy_limit_raised), 0, "frees alone do not raise the limit");
	/* One 4 MiB block freed and allocated again: the purge makes the next
	 * allocation fault it in, and the next pressure raises the limit to
	 * hold it, never beyond the peak in use plus the base. */
	for (int i = 0; i < 4; i++) {
		void *b = alloc_ok(4 * MiB);
		memset(b, i, 4 * MiB);
		vmap_range_free(b, "free");
	}
	cr_assert(ctr(VMAP_STAT_lazy_limit_raised) >= 1);
	int64_t purges = ctr(VMAP_STAT_purges);
	cr_assert(vmap_lazy_limit >= 4 * MiB, "limit %lu", (unsigned long)vmap_lazy_limit);
	cr_assert(vmap_lazy_limit <= 4 * MiB + VMAP_PAGE + MiB + (uint64_t)N * 33 * VMAP_PAGE,
		  "limit %lu", (unsigned long)vmap_lazy_limit);
	/* A delay without pressure: the limit halves, and the age purge returns
	 * everything older than the delay. */
	uint64_t raised = vmap_lazy_limit;
	cr_assert(ctr(VMAP_STAT_cached_bytes) > 0);
	vmap_purge_maybe(vmap_os_now_ns() + 61000000000ull);
	cr_assert_eq(vmap_lazy_limit, raised / 2 > MiB ? raised / 2 : MiB);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	cr_assert_eq(ctr(VMAP_STAT_purges), purges + 1);
}

Test(purge, a_cache_smaller_than_the_bytes_in_use_is_not_purged_under_pressure)
{
	/* A heap of random sizes keeps free fragments between its live blocks;
	 * purging them only makes the next allocations fault them in again. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB; /* the automatic limit, made small */
	enum { LIVE = 4, N = 32 };
	void *live[LIVE], *p[N];
	for (int i = 0; i < LIVE; i++)
		live[i] = alloc_ok(2 * MiB); /* 8 MiB in use */
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(128 * KiB);
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free"); /* 4.1 MiB cached: over the limit, under the in-use */
	cr_assert(ctr(VMAP_STAT_cached_bytes) > (int64_t)(4 * MiB));
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "purged %ld bytes", (long)ctr(VMAP_STAT_purged_bytes));
	/* The live blocks go: now the cache is over both, and purged. */
	for (int i = 0; i < LIVE; i++)
		vmap_range_free(live[i], "free");
	cr_assert(ctr(VMAP_STAT_purges) >= 1);
	cr_assert(ctr(VMAP_STAT_cached_bytes) <= (int64_t)vmap_lazy_limit, "%ld cached, limit %lu",
		  (long)ctr(VMAP_STAT_cached_bytes), (unsigned long)vmap_lazy_limit);
}

/* Fragments of 256 KiB cached between live blocks of the same size (none can
 * merge with another), 2 MiB in all, beside 4 MiB more in use: under the
 * bytes in use, so neither pressure nor a small fresh carve purges them. */
enum { FRAGS = 8 };
static void *frag_live[FRAGS], *frag_big;

static void cache_fragments(void)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB; /* FRESH_FLOOR: 32 KiB */
	void *freed[FRAGS];
	frag_big = alloc_ok(4 * MiB);
	for (int i = 0; i < FRAGS; i++) {
		freed[i] = alloc_ok(256 * KiB);
		frag_live[i] = alloc_ok(256 * KiB);
	}
	for (int i = 0; i < FRAGS; i++)
		vmap_range_free(freed[i], "free");
	cr_assert_eq(ctr(VMAP_STAT_purges), 0);
}

static int64_t cached_anywhere(void)
{
	return ctr(VMAP_STAT_cached_bytes) + ctr(VMAP_STAT_thread_cached_bytes);
}

Test(purge, a_fresh_block_larger_than_the_cache_pays_for_all_of_it)
{
	/* CPython's json.dumps joins an 8 MiB string while the last round's
	 * blocks are cached: no cached area could serve it, and resident memory
	 * is at its peak.  The cache goes, bytes in use or not. */
	cache_fragments();
	int64_t before = cached_anywhere();
	cr_assert(before >= (int64_t)(2 * MiB), "%ld cached", (long)before);
	void *q = alloc_ok(3 * MiB); /* fresh: more than the 2 MiB cached */
	cr_assert(cached_anywhere() <= (int64_t)(MiB / 32), "%ld still cached",
		  (long)cached_anywhere());
	cr_assert_geq(ctr(VMAP_STAT_purged_bytes), before - (int64_t)(MiB / 32));
	vmap_range_free(q, "free");
}

Test(purge, a_fresh_mapping_of_the_program_leaves_the_cache_alone)
{
	/* CPython maps its arenas afresh each round: served apart from the
	 * blocks, they cannot take the cache, and purging it for them made the
	 * blocks refault (20% more page faults than glibc's). */
	cache_fragments();
	int64_t before = cached_anywhere();
	char *m = vmap_mmap(NULL, 3 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			    0);
	cr_assert(!vmap_os_is_err(m));
	cr_assert_eq(vmap_tag_shard(tag_of(m)), 1, "served from the mmap shard");
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "the mapping purged the blocks' cache");
	cr_assert_eq(cached_anywhere(), before);
}

Test(purge, a_fresh_mapping_of_the_program_is_no_refault)
{
	/* The limit grows when pressure comes again soon after a purge and
	 * fresh memory was carved in between: the blocks refault what was
	 * given back.  A mapping of the program's, served apart, cannot have
	 * used the blocks' cache, so it is no such sign. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB;
	uint64_t t0 = vmap_os_now_ns();
	fake_clock_set(t0);
	enum { LIVE = 4 };
	void *live[LIVE];
	for (int i = 0; i < LIVE; i++)
		live[i] = alloc_ok(MiB);
	vmap_range_free(alloc_ok(4 * MiB), "free"); /* pressure: purged */
	cr_assert_eq(ctr(VMAP_STAT_purges), 1);
	char *m = vmap_mmap(NULL, 3 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			    0);
	cr_assert(!vmap_os_is_err(m));
	cr_assert_eq(vmap_tag_shard(tag_of(m)), 1, "served from the mmap shard");
	fake_clock_set(t0 + 1000000); /* 1 ms later: within the refault window */
	for (int i = 0; i < LIVE; i++)
		vmap_range_free(live[i], "free"); /* pressure again */
	fake_clock_set(0);
	cr_assert_eq(ctr(VMAP_STAT_lazy_limit_raised), 0, "the mapping raised the limit to %lu",
		     (unsigned long)vmap_lazy_limit);
	cr_assert(ctr(VMAP_STAT_purges) >= 2, "%ld purges", (long)ctr(VMAP_STAT_purges));
	cr_assert(ctr(VMAP_STAT_cached_bytes) <= (int64_t)MiB, "%ld cached over the limit",
		  (long)ctr(VMAP_STAT_cached_bytes));
	cr_assert_eq(vmap_munmap(m, 3 * MiB), 0);
}

Test(purge, a_fresh_block_smaller_than_the_cache_keeps_the_fragments)
{
	/* A heap of random sizes: the fragments are what its next requests
	 * reuse; a fresh block that some of them could have served does not
	 * purge them while the cache stays under the bytes in use. */
	cache_fragments();
	int64_t before = cached_anywhere();
	void *q = alloc_ok(512 * KiB); /* fresh: no 256 KiB fragment fits */
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "purged %ld bytes", (long)ctr(VMAP_STAT_purged_bytes));
	cr_assert_eq(cached_anywhere(), before);
	vmap_range_free(q, "free");
}

Test(purge, a_fresh_block_near_the_size_of_a_cached_one_keeps_the_cache)
{
	/* Blocks of 5-25 MiB replaced at random: the next block is as likely
	 * to fit what is cached as this one was not to.  A fresh area larger
	 * than the cache but not twice its largest area keeps it. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB;
	void *live[3];
	live[0] = alloc_ok(2 * MiB);
	void *freed = alloc_ok(2 * MiB);
	live[1] = alloc_ok(2 * MiB);
	vmap_range_free(freed, "free"); /* one resident run of 2 MiB, between live blocks */
	int64_t before = cached_anywhere();
	cr_assert(before >= (int64_t)(2 * MiB), "%ld cached", (long)before);
	live[2] = alloc_ok(3 * MiB); /* fresh: more than the cache, not twice its area */
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "purged %ld bytes", (long)ctr(VMAP_STAT_purged_bytes));
	cr_assert_eq(cached_anywhere(), before);
	for (int i = 0; i < 3; i++)
		vmap_range_free(live[i], "free");
}

Test(purge, the_limit_grows_with_the_peak_when_the_big_block_is_freed_each_time)
{
	/* bench realloc: grow to a big block, free it, again.  The pressure comes
	 * at the free, when nothing is in use: the ceiling is the peak. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB;
	int64_t purges = 0;
	for (int round = 0; round < 8; round++) {
		void *p = alloc_ok(4 * MiB);
		vmap_range_free(p, "free");
		if (round == 4)
			purges = ctr(VMAP_STAT_purges);
	}
	/* The limit doubles at each pressure (1, 2, 4, 8 MiB): then the block
	 * stays cached and later rounds reuse it. */
	cr_assert(ctr(VMAP_STAT_lazy_limit_raised) >= 1);
	cr_assert(vmap_lazy_limit > 4 * MiB, "limit %lu", (unsigned long)vmap_lazy_limit);
	cr_assert(vmap_lazy_limit <= 2 * (4 * MiB + 2 * MiB), "limit %lu over twice the peak",
		  (unsigned long)vmap_lazy_limit);
	cr_assert_eq(ctr(VMAP_STAT_purges), purges, "still purging after round 4 (%ld purges)",
		     (long)ctr(VMAP_STAT_purges));
}

Test(purge, a_raised_limit_keeps_fragments_up_to_twice_the_peak)
{
	/* A realloc-heavy run: blocks move to bigger areas, and the areas they
	 * leave fit none of the next requests for a while.  Purged at once,
	 * they were faulted in again by the blocks grown later (a benchmark of
	 * 64 blocks grown by 1.5 up to 8 MiB purged 1.1 GiB in 5 s).  While
	 * the limit is raised the cache keeps them, up to in use and cached
	 * together at twice the peak in use plus the base; past that it pays. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB;
	enum { N = 4, ROUNDS = 5 };
	void *pin[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		size_t size = (size_t)(r + 1) * MiB; /* fits no single area freed before */
		void *p[N];
		for (int i = 0; i < N; i++) {
			p[i] = alloc_ok(size);
			memset(p[i], r, size);
		}
		pin[r] = alloc_ok(A64K);
		if (r == 0)
			vmap_lazy_limit = 1024 * MiB; /* as refaulting raised it */
		for (int i = 0; i < N; i++)
			vmap_range_free(p[i], "free");
	}
	int64_t cached = ctr(VMAP_STAT_cached_bytes);
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "%ld cached purged, under twice the peak %ld",
		     (long)cached, (long)vmap_stat_peak_large_bytes);
	cr_assert(cached >= 4 * N * (int64_t)MiB, "%ld cached", (long)cached);
	/* The peak starts again from what is in use now (vmapalloc_stats_reset
	 * does that): the fragments are past twice it, and the next free pays. */
	vmap_stat_reset_peak();
	int64_t peak = vmap_stat_peak_large_bytes;
	vmap_range_free(pin[0], "free");
	int64_t total = ctr(VMAP_STAT_large_bytes_in_use) + ctr(VMAP_STAT_cached_bytes);
	cr_assert(ctr(VMAP_STAT_purges) >= 1, "%ld cached against a peak of %ld, never purged",
		  (long)ctr(VMAP_STAT_cached_bytes), (long)peak);
	cr_assert(total <= 2 * peak + (int64_t)MiB + (int64_t)(256 * KiB),
		  "%ld in use + %ld cached over twice the peak %ld plus the base",
		  (long)ctr(VMAP_STAT_large_bytes_in_use), (long)ctr(VMAP_STAT_cached_bytes),
		  (long)peak);
	/* The limit itself stays raised: the loop that raised it still fits. */
	cr_assert_eq(vmap_lazy_limit, 1024 * MiB);
	for (int r = 1; r < ROUNDS; r++)
		vmap_range_free(pin[r], "free");
}

/* An area made a slab and back, as slab.c counts it: its bytes leave the
 * large bytes in use for the slab bytes while it is one. */
static void as_slab(void *p, int64_t sign)
{
	int64_t bytes = (int64_t)vmap_range_usable(p, "free");
	vmap_stat_add_local(VMAP_STAT_slab_bytes, sign * bytes);
	vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, -sign * bytes);
	vmap_counter_flush_local();
}

Test(purge, the_limit_grows_to_hold_the_slabs_threads_refault)
{
	/* mstress: each round's threads make their slabs, free everything and
	 * exit; the empty slabs go back to the cache, where the next round's
	 * slabs are carved from -- if a pressure purge has not released them.
	 * No large block is ever in use beyond one slab being made, so a
	 * limit that may grow only up to the large bytes' peak kept purging
	 * 8 MiB a round and the next round faulted it in again. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000", NULL};
	range_setup(env);
	vmap_lazy_max = vmap_lazy_limit = MiB;
	enum { SLABS = 8 };
	int64_t purges = 0;
	/* A round takes 1 ms on the core's clock, whatever its page faults
	 * take on this machine (the policy's window is 50 ms). */
	uint64_t t0 = vmap_os_now_ns();
	for (int round = 0; round < 8; round++) {
		fake_clock_set(t0 + (uint64_t)(round + 1) * 1000000);
		void *d[SLABS];
		for (int i = 0; i < SLABS; i++) {
			d[i] = alloc_ok(MiB);
			as_slab(d[i], 1);
			memset(d[i], round, MiB);
		}
		for (int i = 0; i < SLABS; i++) {
			as_slab(d[i], -1);
			vmap_range_free(d[i], "free");
		}
		if (round == 4)
			purges = ctr(VMAP_STAT_purges);
	}
	fake_clock_set(0);
	cr_assert(ctr(VMAP_STAT_lazy_limit_raised) >= 1);
	cr_assert(vmap_lazy_limit >= SLABS * MiB, "limit %lu under the slabs' %d MiB",
		  (unsigned long)vmap_lazy_limit, SLABS);
	cr_assert(vmap_lazy_limit <= 2 * (SLABS + 1) * MiB + SLABS * 4 * VMAP_PAGE,
		  "limit %lu over twice the slabs' most plus the base",
		  (unsigned long)vmap_lazy_limit);
	cr_assert_eq(ctr(VMAP_STAT_purges), purges, "still purging after round 4 (%ld purges)",
		     (long)ctr(VMAP_STAT_purges));
}

Test(purge, a_lazy_max_set_by_the_user_is_a_hard_cap)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=60000",
			     "VMAPALLOC_LAZY_MAX=1M", NULL};
	range_setup(env);
	enum { N = 32 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(128 * KiB);
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		cr_assert(ctr(VMAP_STAT_cached_bytes) <= (int64_t)MiB, "after free %d: %ld cached", i,
			  (long)ctr(VMAP_STAT_cached_bytes));
	}
	cr_assert_eq(vmap_lazy_limit, MiB);
	cr_assert_eq(ctr(VMAP_STAT_lazy_limit_raised), 0);
	cr_assert(ctr(VMAP_STAT_purges) >= 2, "pressure purged again instead of raising the limit");
}

Test(purge, a_negative_approximate_cache_is_no_pressure)
{
	/* Per-CPU mode: the base alone may be below zero while the slots hold
	 * the rest (frees counted on one CPU, allocations on another). */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	cr_assert(vmap_counter_go_percpu());
	void *p = alloc_ok(A64K);
	vmap_range_free(p, "free");
	int64_t exact = ctr(VMAP_STAT_cached_bytes);
	__atomic_add_fetch(&vmap_counter_base[VMAP_STAT_cached_bytes], -(int64_t)(4 * MiB),
			   __ATOMIC_RELAXED);
	__atomic_add_fetch(&vmap_counter_slots[VMAP_STAT_cached_bytes], (int64_t)(4 * MiB),
			   __ATOMIC_RELAXED);
	cr_assert(vmap_stat_read_approx(VMAP_STAT_cached_bytes) < 0);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), exact);
	int64_t purges = ctr(VMAP_STAT_purges);
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_purges), purges, "-4 MiB cached read as over the limit");
}

Test(purge, pressure_purge_through_purge_maybe)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	enum { N = 64 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(A64K);
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free"); /* 4.25 MiB: under the default limit */
	cr_assert_eq(ctr(VMAP_STAT_purges), 0);
	vmap_lazy_max = vmap_lazy_limit = MiB; /* the limit drops under the cache */
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_purges), 1);
	/* Rounds of a quarter (16, 12, 9, 7 areas), then the bound on rounds:
	 * one allocating thread does bounded work, the cache is not emptied. */
	int64_t purged = ctr(VMAP_STAT_purged_bytes);
	cr_assert(purged >= 16 * AREA64K, "at least a quarter: purged %ld", (long)purged);
	cr_assert(purged < 64 * AREA64K, "bounded: not all in one call (purged %ld)", (long)purged);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 64 * AREA64K - purged);
	/* The next free goes on from there. */
	void *q = alloc_ok(A64K);
	vmap_range_free(q, "free");
	cr_assert(ctr(VMAP_STAT_cached_bytes) <= (int64_t)MiB);
}

Test(purge, advice_free_purged_areas_are_not_known_zero)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_PURGE_ADVICE=free", NULL};
	range_setup(env);
	void *p = alloc_ok(A64K);
	memset(p, 0x99, A64K);
	vmap_range_free(p, "free");
	fake_reset();
	cr_assert(vmap_range_purge(true) > 0);
	struct fake_range r[4];
	cr_assert_eq(fake_advised(MADV_FREE, r, 4), 1, "advised with MADV_FREE");
	cr_assert_eq(fake_advised(MADV_DONTNEED, r, 4), 0);
	bool zero = true;
	void *q = vmap_range_alloc(A64K, VMAP_PAGE, &zero);
	cr_assert_eq(q, p);
	cr_assert_not(zero, "MADV_FREE pages may keep their contents");
}

Test(purge, age_purge_after_the_delay)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=50", NULL};
	range_setup(env);
	void *p[4];
	for (int i = 0; i < 4; i++)
		p[i] = alloc_ok(A64K);
	for (int i = 0; i < 4; i++)
		vmap_range_free(p[i], "free");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 4 * AREA64K, "young areas stay");
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 4 * AREA64K, "still younger than the delay");
	sleep_ms(120);
	vmap_purge_maybe(vmap_os_now_ns()); /* the first call may only arm the timer */
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	cr_assert_eq(ctr(VMAP_STAT_purged_bytes), 4 * AREA64K);
}

Test(purge, age_purge_takes_only_old_areas)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=50", NULL};
	range_setup(env);
	void *old = alloc_ok(A64K);
	void *young = alloc_ok(A64K);
	vmap_range_free(old, "free"); /* arms the timer */
	sleep_ms(120);
	vmap_range_free(young, "free"); /* the delay has passed: purges what is old */
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(vmap_tag_state(tag_of(old)), VMAP_ST_FREE, "old area purged");
	cr_assert_eq(vmap_tag_state(tag_of(young)), VMAP_ST_CACHED, "young area kept");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), AREA64K);
}

Test(purge, a_fresh_purge_does_not_postpone_the_age_purge)
{
	/* A program that keeps growing carves fresh memory, and each carve's
	 * purge takes a batch of the oldest areas.  The rest, freed long ago,
	 * still goes when the delay has passed. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=100", NULL};
	range_setup(env);
	void *p[4]; /* of four sizes: four pools, so that the purge takes one */
	for (int i = 0; i < 4; i++)
		p[i] = alloc_ok(A64K + (size_t)i * VMAP_PAGE);
	for (int i = 0; i < 4; i++)
		vmap_range_free(p[i], "free"); /* the first arms the age purge */
	int64_t cached = ctr(VMAP_STAT_cached_bytes);
	uint64_t due = __atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED);
	cr_assert(due != 0);
	sleep_ms(60);
	vmap_purge_run(PURGE_FRESH, vmap_os_now_ns(), (uint64_t)AREA64K);
	cr_assert_lt(ctr(VMAP_STAT_cached_bytes), cached, "nothing paid");
	cr_assert_gt(ctr(VMAP_STAT_cached_bytes), 0, "everything paid");
	cr_assert_eq(__atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED), due,
		     "the fresh purge moved the age purge back");
	sleep_ms(70);
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0, "the old areas went with age");
}

Test(purge, zero_delay_never_purges_by_age)
{
	range_setup(quiet);
	void *p = alloc_ok(A64K);
	vmap_range_free(p, "free");
	sleep_ms(60);
	vmap_purge_maybe(vmap_os_now_ns());
	vmap_purge_maybe(vmap_os_now_ns());
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), AREA64K);
	cr_assert_eq(ctr(VMAP_STAT_purges), 0);
}

Test(purge, purged_runs_merge_with_free_neighbours)
{
	range_setup(quiet);
	void *a = alloc_ok(A64K);
	void *b = alloc_ok(A64K);
	void *c = alloc_ok(A64K);
	vmap_range_free(a, "free");
	vmap_range_free(c, "free");
	vmap_range_purge(true);
	/* a is its own run; c merged with the free rest of the chunk. */
	cr_assert_eq(vmap_tag_pages(tag_of(a)), 17);
	cr_assert(vmap_tag_pages(tag_of(c)) > 17);
	vmap_range_free(b, "free");
	vmap_range_purge(true);
	/* The whole chunk was one zero run again: so it went back to the arena
	 * (owner free, no tag left in it), for any shard to claim. */
	struct vmap_region *r = vmap_region_of((uintptr_t)a);
	cr_assert(vmap_chunk_is_free(r->chunk_owner[((uintptr_t)a - r->base) >> VMAP_CHUNK_SHIFT]));
	cr_assert_eq(tag_of(a), 0);
	cr_assert_eq(vmap_shards[0].free_pages[0], 0);
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 1);
	vmap_range_check();
}

Test(purge, big_areas_purge_and_merge_too)
{
	range_setup(quiet);
	void *p[4];
	for (int i = 0; i < 4; i++) {
		p[i] = alloc_ok(3 * MiB);
		memset(p[i], 0x42, 3 * MiB);
	}
	size_t area = vmap_range_usable(p[0], "test") + VMAP_PAGE;
	unsigned runs = 1; /* areas that do not touch their predecessor start a run */
	for (int i = 1; i < 4; i++)
		runs += (char *)p[i] != (char *)p[i - 1] + area;
	bool big = tag_of(p[0]) & VMAP_TAG_BIG;
	for (int i = 0; i < 4; i++)
		vmap_range_free(p[i], "free");
	fake_reset();
	fake_batch_mode(FAKE_BATCH_EMULATE);
	cr_assert_eq(vmap_range_purge(true), 4 * area);
	struct fake_range r[8];
	unsigned n = fake_advised(MADV_DONTNEED, r, 8), in_arena = 0;
	/* Areas (and any gaps) merged into the whole chunk, which went back to
	 * the arena (marked with its kind); the next claim takes it again.  Its
	 * slice of the page table was dropped too: the one range outside. */
	struct vmap_region *reg = vmap_region_of((uintptr_t)p[0]);
	for (unsigned i = 0; i < n; i++)
		in_arena += r[i].addr - reg->base < reg->size;
	cr_assert_eq(in_arena, runs);
	cr_assert_eq(n, runs + 1);
	/* (All of it but the page it shares with the previous chunk's: VMAP_PT_SHIFT.) */
	uintptr_t slice = (uintptr_t)vmap_pte_of(reg, (uintptr_t)p[0] & ~(VMAP_CHUNK - 1)) - VMAP_PT_SHIFT;
	cr_assert_eq(r[n - 1].addr, slice + VMAP_PAGE);
	cr_assert_eq(r[n - 1].len, VMAP_CHUNK_PAGES * sizeof(struct vmap_pte) - VMAP_PAGE);
	uint16_t owner = reg->chunk_owner[((uintptr_t)p[0] - reg->base) >> VMAP_CHUNK_SHIFT];
	cr_assert(vmap_chunk_is_free(owner));
	cr_assert_eq(owner, big ? VMAP_CHUNK_WAS_BIG : 0);
	cr_assert_eq(tag_of(p[0]), 0);
	bool zero = false;
	void *q = vmap_range_alloc(3 * MiB, VMAP_PAGE, &zero);
	cr_assert_eq(q, p[0]);
	cr_assert(zero && all_zero(q, 3 * MiB));
}

/* malloc_trim drops pages resident in zero runs of chunks that stay (F18):
 * a huge page an area faulted reaches past its end, and the area's purge
 * frees only its own range.  Simulated with zero bytes written into the run. */
Test(purge, trim_drops_pages_left_resident_in_zero_runs)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	void *a = alloc_ok(MiB), *keep = alloc_ok(MiB); /* keep: the chunk does not go back */
	memset(a, 7, MiB);
	vmap_range_free(a, "free");
	vmap_range_purge(true);
	memset(a, 0, 64 * 1024); /* resident, reading zero: what a split huge page leaves */
	unsigned char vec[16];
	cr_assert_eq(mincore(a, sizeof vec * 4096, vec), 0);
	cr_assert_eq(vec[0] & 1, 1);
	vmap_range_purge(true);
	cr_assert_eq(mincore(a, sizeof vec * 4096, vec), 0);
	cr_assert_eq(vec[0] & 1, 1, "a purge does not look at zero runs");
	vmap_range_trim();
	cr_assert_eq(mincore(a, sizeof vec * 4096, vec), 0);
	for (unsigned i = 0; i < sizeof vec; i++)
		cr_assert_eq(vec[i] & 1, 0, "page %u still resident after the trim", i);
	cr_assert(all_zero(a, MiB));
	vmap_range_free(keep, "free");
}

/* The protection /proc/self/maps gives the page at a ("rw-p", "---p"). */
static void maps_perms(uintptr_t a, char out[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	cr_assert(f);
	unsigned long lo, hi;
	char perms[5] = "";
	strcpy(out, "none");
	while (fscanf(f, "%lx-%lx %4s%*[^\n]", &lo, &hi, perms) == 3)
		if (a >= lo && a < hi) {
			memcpy(out, perms, 5);
			break;
		}
	fclose(f);
}

/* A chunk going back to the arena is mapped afresh, read-write: no advice,
 * no page resident, no VMA of a realloc move left (F17, F20). */
Test(purge, a_chunk_given_back_is_mapped_afresh)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_RESERVE=256M", "VMAPALLOC_HUGEPAGE=1",
			     "VMAPALLOC_HUGEPAGE_MIN=32M", NULL};
	range_setup(env);
	fake_fail_always(FAKE_RESERVE, ENOMEM); /* no second region: 4 chunks */
	void *b = alloc_ok(40 * MiB);
	struct vmap_region *r = vmap_region_of((uintptr_t)b);
	uintptr_t c0 = (uintptr_t)b & ~(uintptr_t)(VMAP_CHUNK - 1);
	size_t bc = (c0 - r->base) >> VMAP_CHUNK_SHIFT;
	char perms[5];
	maps_perms(c0, perms);
	cr_assert_str_eq(perms, "rw-p");
	memset(b, 1, 40 * MiB);
	vmap_range_free(b, "free");
	vmap_range_purge(true);
	cr_assert_eq(r->chunk_owner[bc], 0, "no advice kept: the mapping is new");
	maps_perms(c0, perms);
	cr_assert_str_eq(perms, "rw-p");
	unsigned char vec[4];
	cr_assert_eq(mincore((void *)c0, 4 * 4096, vec), 0);
	cr_assert_eq(vec[0] & 1, 0, "nothing resident");
	void *again = alloc_ok(40 * MiB);
	cr_assert_eq((uintptr_t)again & ~(uintptr_t)(VMAP_CHUNK - 1), c0);
	maps_perms(c0, perms);
	cr_assert_str_eq(perms, "rw-p");
	cr_assert(all_zero(again, 40 * MiB));
	vmap_range_free(again, "free");
}

/* Where the chunk cannot be mapped afresh (the VMA limit), a big chunk given
 * back keeps its MADV_HUGEPAGE: small claims take other free chunks first,
 * and one that must take it advises it back, so that transparent huge pages
 * cannot inflate small blocks. */
Test(purge, a_big_chunk_given_back_goes_to_small_blocks_last_and_unadvised)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_RESERVE=256M", "VMAPALLOC_HUGEPAGE=1",
			     "VMAPALLOC_HUGEPAGE_MIN=32M", NULL};
	range_setup(env);
	fake_fail_always(FAKE_RESERVE, ENOMEM); /* no second region: 4 chunks */
	void *b = alloc_ok(40 * MiB);
	cr_assert(tag_of(b) & VMAP_TAG_BIG);
	struct vmap_region *r = vmap_region_of((uintptr_t)b);
	size_t bc = ((uintptr_t)b - r->base) >> VMAP_CHUNK_SHIFT;
	fake_fail_always(FAKE_MAP_FRESH, ENOMEM); /* the chunk is not mapped afresh */
	vmap_range_free(b, "free");
	vmap_range_purge(true);
	fake_fail_clear(FAKE_MAP_FRESH);
	cr_assert_eq(r->chunk_owner[bc], VMAP_CHUNK_WAS_BIG, "owner %#x", r->chunk_owner[bc]);
	/* 30 MiB small blocks, two per chunk: the three other chunks first. */
	void *s[7];
	for (int i = 0; i < 6; i++) {
		s[i] = alloc_ok(30 * MiB);
		cr_assert_not(tag_of(s[i]) & VMAP_TAG_BIG);
		cr_assert_neq(((uintptr_t)s[i] - r->base) >> VMAP_CHUNK_SHIFT, bc);
	}
	fake_reset();
	s[6] = alloc_ok(30 * MiB);
	cr_assert_eq(((uintptr_t)s[6] - r->base) >> VMAP_CHUNK_SHIFT, bc, "the last free chunk");
	struct fake_range adv[4];
	cr_assert_eq(fake_advised(MADV_NOHUGEPAGE, adv, 4), 1);
	cr_assert_eq(adv[0].addr, r->base + (bc << VMAP_CHUNK_SHIFT));
	cr_assert_eq(adv[0].len, VMAP_CHUNK);
	for (int i = 0; i < 7; i++)
		vmap_range_free(s[i], "free");
}

Test(purge, purge_covers_every_shard)
{
	const char *env[] = {"VMAPALLOC_SHARDS=3", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	/* Areas land in the shard of the CPU the test runs on. */
	enum { N = 30 };
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = alloc_ok(A64K);
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free");
	vmap_range_purge(true);
	for (unsigned s = 0; s < 3; s++)
		cr_assert_eq(vmap_shards[s].cached_bytes, 0, "shard %u", s);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
}

/* The whole allocator, as the preload starts it (the program's mmap needs
 * it), with the options of env. */
static void facade_setup(const char *const *env)
{
	for (; *env; env++)
		cr_assert_eq(putenv((char *)*env), 0);
	vmap_init();
	cr_assert(vmap_range_ready(), "the arena could be reserved");
}

/* facade_setup with the program's mmap in the malloc shards, as in a tight
 * arena: mappings and blocks side by side, the runs they leave joined. */
static void side_by_side_setup(const char *const *env)
{
	vmap_mmap_apart = false;
	facade_setup(env);
}

/* The program's own mapping of len bytes, served from the arena. */
static void *served(size_t len)
{
	void *m = vmap_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(!vmap_os_is_err(m), "vmap_mmap(%zu) failed", len);
	cr_assert(tag_of(m) & VMAP_TAG_MMAP, "not served from the arena");
	return m;
}

/* The program's mappings come from shards of their own, in chunks apart
 * from malloc's blocks: a language runtime's arenas between the blocks kept
 * a growing realloc from growing in place (CPython's peak RSS). */
Test(purge, the_programs_mappings_take_chunks_apart_from_the_blocks)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	facade_setup(env);
	cr_assert_eq(vmap_range_nshards(), 1);
	cr_assert_eq(vmap_nshards, 2, "one malloc shard and one for the program's mmap");
	char *a = alloc_ok(A64K);
	char *m = served(A64K);
	char *b = alloc_ok(A64K);
	cr_assert_eq(vmap_tag_shard(tag_of(a)), 0);
	cr_assert_eq(vmap_tag_shard(tag_of(b)), 0);
	cr_assert_eq(vmap_tag_shard(tag_of(m)), 1);
	cr_assert_eq(b, a + AREA64K, "the blocks side by side");
	cr_assert_neq((uintptr_t)m >> VMAP_CHUNK_SHIFT, (uintptr_t)a >> VMAP_CHUNK_SHIFT,
		      "the mapping in a chunk of its own");
	memset(m, 1, A64K);
	cr_assert_eq(vmap_munmap(m, A64K), 0);
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	/* Freed memory stays with its kind: a block does not take the
	 * mapping's pages, nor a mapping the blocks'. */
	char *c = alloc_ok(A64K);
	cr_assert_eq(vmap_tag_shard(tag_of(c)), 0);
	char *n = served(A64K);
	cr_assert_eq(vmap_tag_shard(tag_of(n)), 1);
	vmap_range_free(c, "free");
	cr_assert_eq(vmap_munmap(n, A64K), 0);
	vmap_range_check();
}

/* Without VMAPALLOC_LAZY_MAX, pages the program unmaps go back at once, as
 * the kernel's munmap gives them back: a guarded run, nothing cached. */
/* A 256 KiB mapping written and unmapped; *cached: the cache before. */
static char *unmapped_written(const char *const *env, int64_t *cached)
{
	facade_setup(env);
	char *m = served(4 * A64K);
	memset(m, 1, 4 * A64K);
	*cached = ctr(VMAP_STAT_cached_bytes);
	cr_assert_eq(vmap_munmap(m, 4 * A64K), 0);
	return m;
}

Test(purge, unmapped_pages_go_back_at_once_by_default)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	int64_t cached;
	char *m = unmapped_written(env, &cached);
	uint64_t t = tag_of(m);
	cr_assert_eq(vmap_tag_state(t), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), cached, "nothing kept resident");
	unsigned char vec[64];
	cr_assert_eq(mincore(m, 4 * A64K, vec), 0);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(vec[i] & 1, 0, "page %d still resident", i);
	vmap_range_check();
}

/* With VMAPALLOC_LAZY_MAX set, they may stay resident (PROT_NONE) for the
 * next mmap, which reuses them. */
Test(purge, unmapped_pages_stay_for_the_next_mmap_with_lazy_max)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0",
			     "VMAPALLOC_LAZY_MAX=8M", NULL};
	int64_t cached;
	char *m = unmapped_written(env, &cached);
	uint64_t t = tag_of(m);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_PROTECTED);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), cached + 4 * A64K);
	char *n = served(4 * A64K);
	cr_assert_eq(n, m, "the next mapping reuses them");
	cr_assert(all_zero(n, 4 * A64K), "zero-filled");
	cr_assert_eq(vmap_munmap(n, 4 * A64K), 0);
	vmap_range_check();
}

/* A zero run beside one guarded run (pages the program unmapped) stays
 * apart: joined, the zero pages became PROT_NONE with nothing gained, and
 * aligned areas carved there cut the mapping into pieces. */
Test(purge, a_zero_run_beside_one_guarded_run_stays_apart)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_CACHE=0", NULL};
	side_by_side_setup(env);
	void *a = alloc_ok(A64K);
	char *m = served(A64K);
	void *keep = alloc_ok(A64K); /* the chunk does not go back */
	cr_assert_eq(m, (char *)a + AREA64K, "the mapping follows the block");
	memset(a, 1, A64K);
	memset(m, 2, A64K);
	vmap_range_free(a, "free");
	cr_assert_eq(vmap_munmap(m, A64K), 0);
	vmap_range_purge(true); /* a: zero; m: lazily unmapped, now guarded */
	uint64_t t = tag_of(a);
	cr_assert_eq(vmap_tag_state(t), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_ZERO);
	cr_assert_eq(vmap_tag_pages(t), 17);
	t = tag_of(m);
	cr_assert_eq(vmap_tag_state(t), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), 16);
	char perms[5];
	maps_perms((uintptr_t)a, perms);
	cr_assert_str_eq(perms, "rw-p", "the zero run stays writable");
	vmap_range_free(keep, "free");
	vmap_range_check();
}

static sigjmp_buf fault_jmp;

static void on_fault(int sig)
{
	(void)sig;
	siglongjmp(fault_jmp, 1);
}

/* Does reading p fault? */
static bool faults(const volatile char *p)
{
	struct sigaction sa = {.sa_handler = on_fault}, old_segv, old_bus;
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
	bool faulted = true;
	if (!sigsetjmp(fault_jmp, 1)) {
		(void)*p;
		faulted = false;
	}
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	return faulted;
}

/* Mappings of len bytes on both sides of a 64 KiB block, unmapped, the
 * block freed and everything purged: m1 and m2 guarded, the block a zero
 * run between them (which joins them).  *keep holds the chunk. */
static void guarded_around_block(size_t len, char **m1, char **a, char **m2, void **keep)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_CACHE=0", NULL};
	side_by_side_setup(env);
	*m1 = served(len);
	*a = alloc_ok(A64K);
	*m2 = served(len);
	*keep = alloc_ok(A64K);
	cr_assert_eq(*a, *m1 + len, "the block follows the first mapping");
	cr_assert_eq(*m2, *a + AREA64K, "the second mapping follows the block");
	memset(*m1, 1, len);
	memset(*a, 2, A64K);
	memset(*m2, 3, len);
	cr_assert_eq(vmap_munmap(*m1, len), 0);
	cr_assert_eq(vmap_munmap(*m2, len), 0);
	vmap_range_free(*a, "free");
	vmap_range_purge(true);
}

/* A guarded run of small pieces (under 2 MiB) gets guard markers over it,
 * where the kernel has them, not a PROT_NONE mapping: no VMA of its own.  Programs that trim small
 * mappings to their alignment (Ruby's heap pages) made thousands of such
 * mappings.  Every page of it faults all the same, and it is reused whole. */
Test(purge, a_small_guarded_run_gets_markers_not_a_mapping)
{
	char *m1, *a, *m2;
	void *keep;
	guarded_around_block(A64K, &m1, &a, &m2, &keep);
	uint64_t t = tag_of(m1);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), 16 + 17 + 16, "one run over the three");
	char perms[5];
	maps_perms((uintptr_t)a + A64K / 2, perms);
	/* (a kernel without markers: one PROT_NONE mapping, as for large runs) */
	cr_assert_str_eq(perms, vmap_guard_markers() ? "rw-p" : "---p");
	cr_assert(faults(a + A64K / 2), "the block's pages fault");
	cr_assert(faults(m1), "the first piece faults");
	cr_assert(faults(m2 + A64K - 1), "the second piece faults");
	fake_reset();
	bool zero = false;
	char *p = vmap_range_alloc(48 * 4096, VMAP_PAGE, &zero);
	cr_assert_eq(p, m1, "the joined run is reused whole");
	cr_assert(zero);
	cr_assert(all_zero(p, 48 * 4096));
	memset(p, 4, 48 * 4096);
	vmap_range_free(p, "free");
	vmap_range_free(keep, "free");
	vmap_range_check();
}

/* A purged block that joins two guarded runs does not make the 2 MiB spans
 * it reaches into writable afresh (what a zero run's spans get, to drop
 * their page tables): the span around its start holds pages the program
 * unmapped, which must keep faulting. */
Test(purge, a_purge_that_joins_guarded_runs_keeps_their_pages_faulting)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_LAZY_MAX=1M", "VMAPALLOC_CACHE=0", NULL};
	side_by_side_setup(env);
	char *m1 = served(1 * MiB); /* > LAZY_MAX / 4: guarded at its munmap */
	char *a = alloc_ok(3 * MiB);
	char *m2 = served(1 * MiB);
	void *keep = alloc_ok(A64K);
	cr_assert_eq((uintptr_t)m1 & (VMAP_HUGE_PAGE - 1), 0, "the first mapping starts a span");
	cr_assert_eq(a, m1 + 1 * MiB);
	cr_assert_eq(m2, a + 3 * MiB + VMAP_PAGE);
	memset(m1, 1, 1 * MiB);
	memset(a, 2, 3 * MiB);
	cr_assert_eq(vmap_munmap(m1, 1 * MiB), 0);
	cr_assert_eq(vmap_munmap(m2, 1 * MiB), 0);
	vmap_range_free(a, "free");
	vmap_range_purge(true);
	uint64_t t = tag_of(m1);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), (5 * MiB >> VMAP_PAGE_SHIFT) + 1, "one run over the three");
	cr_assert(faults(m1), "the first unmapped page faults");
	cr_assert(faults(m1 + 1 * MiB - 1), "the last page before the block faults");
	cr_assert(faults(m2 + 1 * MiB - 1), "the second mapping's last page faults");
	vmap_range_free(keep, "free");
	vmap_range_check();
}

/* An aligned area (a slab's) is not carved inside a run of pages the program
 * unmapped when another run fits: it would leave a lead and a rest that both
 * keep faulting, two PROT_NONE pieces where there was one. */
Test(purge, an_aligned_area_does_not_split_a_guarded_run)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_LAZY_MAX=1M", "VMAPALLOC_CACHE=0", NULL};
	side_by_side_setup(env);
	void *b = alloc_ok(VMAP_PAGE);
	char *m = served(1 * MiB); /* > LAZY_MAX / 4: guarded at its munmap */
	void *keep = alloc_ok(A64K);
	cr_assert_eq(m, (char *)b + 2 * VMAP_PAGE, "the mapping follows the block");
	cr_assert_neq((uintptr_t)m & (A64K - 1), 0, "the mapping is not 64 KiB aligned");
	cr_assert_eq(vmap_munmap(m, 1 * MiB), 0);
	cr_assert_eq(vmap_tag_run_state(tag_of(m)), VMAP_RUN_GUARDED);
	bool zero;
	char *p = vmap_range_alloc(A64K, A64K, &zero);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p & (A64K - 1), 0);
	cr_assert(p >= m + 1 * MiB || p + A64K <= m, "carved outside the guarded run");
	uint64_t t = tag_of(m);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), 1 * MiB >> VMAP_PAGE_SHIFT, "the guarded run is whole");
	vmap_range_free(p, "free");
	vmap_range_free(keep, "free");
	vmap_range_free(b, "free");
	vmap_range_check();
}

/* A chunk that holds nothing but zero runs and pieces the program unmapped
 * (a row of runs, here a guarded one and the zero rest) goes back to the
 * arena at the trim, mapped afresh PROT_NONE (pages, markers
 * and its page-table slice dropped, the unmapped pages still faulting);
 * where it cannot be mapped afresh it stays guarded, claimed. */
Test(purge, a_guarded_chunk_goes_back_at_the_trim)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_LAZY_MAX=4M", "VMAPALLOC_CACHE=0", NULL};
	facade_setup(env);
	char *m = served(8 * MiB); /* > LAZY_MAX / 4: unmapped with markers, not lazily */
	struct vmap_region *r = vmap_region_of((uintptr_t)m);
	uintptr_t c0 = (uintptr_t)m & ~(uintptr_t)(VMAP_CHUNK - 1);
	size_t ci = (c0 - r->base) >> VMAP_CHUNK_SHIFT;
	cr_assert_eq((uintptr_t)m, c0, "the first mapping starts the chunk");
	memset(m, 5, 8 * MiB);
	cr_assert_eq(vmap_munmap(m, 8 * MiB), 0);
	uint64_t t = tag_of(m);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), 2048, "apart from the chunk's zero rest");
	t = tag_of(m + 8 * MiB);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_ZERO);
	cr_assert_eq(vmap_tag_pages(t), VMAP_CHUNK_PAGES - 2048, "the zero rest, after it");
	cr_assert(!vmap_chunk_is_free(r->chunk_owner[ci]), "an unmap gives nothing back");
	vmap_range_purge(true);
	cr_assert(!vmap_chunk_is_free(r->chunk_owner[ci]), "nor does a purge with no victim there");
	/* The system refuses the PROT_NONE mapping: the run stays as it is. */
	fake_fail_next(FAKE_MMAP, 1, ENOMEM);
	vmap_range_trim();
	cr_assert(!vmap_chunk_is_free(r->chunk_owner[ci]));
	cr_assert_eq(vmap_tag_run_state(tag_of(m)), VMAP_RUN_GUARDED);
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 0);
	fake_fail_clear(FAKE_MMAP);
	vmap_range_trim();
	cr_assert(vmap_chunk_is_free(r->chunk_owner[ci]));
	unsigned char vec[1]; /* (before tag_of reads it: the zero page would count) */
	/* (Its first page holds the previous chunk's last entries too: VMAP_PT_SHIFT.) */
	cr_assert_eq(mincore((char *)vmap_pte_of(r, c0) - VMAP_PT_SHIFT + VMAP_PAGE, 4096, vec), 0);
	cr_assert_eq(vec[0] & 1, 0, "the chunk's page-table slice is not resident");
	cr_assert_eq(tag_of(m), 0);
	const struct vmap_pte *e0 = vmap_pte_of(r, c0), *e1 = vmap_pte_of(r, c0 + 8 * MiB);
	cr_assert(!e0->next && !e0->prev && !e0->stamp && !e1->tag && !e1->stamp,
		  "entries on the page it shares read as dropped ones");
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 1);
	cr_assert_eq(vmap_shards[0].free_pages[vmap_run_list(false, VMAP_RUN_GUARDED)], 0);
	/* PROT_NONE, as reserved: the unmapped pages still fault, and the
	 * next claim makes the chunk writable again. */
	char perms[5];
	maps_perms(c0, perms);
	cr_assert_str_eq(perms, "---p");
	vmap_range_check();
}

/* A guarded run whose markers cannot be removed (the system refuses both the
 * madvise and a fresh mapping: vm.max_map_count on a kernel without markers)
 * is never handed out: the allocation fails cleanly and the pages stay out of
 * circulation; the next allocation, once the system agrees, works. */
Test(purge, a_guarded_run_that_cannot_be_unguarded_is_never_handed_out)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_LAZY_MAX=4M", "VMAPALLOC_CACHE=0",
			     NULL};
	side_by_side_setup(env);
	char *m = served(8 * MiB);
	void *keep = alloc_ok(A64K);
	cr_assert_eq((char *)keep, m + 8 * MiB, "the block follows the mapping");
	fake_fail_next(FAKE_MMAP, 1, ENOMEM); /* no PROT_NONE piece: markers */
	cr_assert_eq(vmap_munmap(m, 8 * MiB), 0);
	cr_assert_eq(vmap_tag_run_state(tag_of(m)), VMAP_RUN_GUARDED);
	fake_fail_always(FAKE_MADVISE, ENOMEM);
	fake_fail_always(FAKE_MAP_FRESH, ENOMEM);
	bool zero;
	cr_assert_null(vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero));
	cr_assert_eq(vmap_tag_state(tag_of(m)), VMAP_ST_FOREIGN, "kept out of circulation");
	fake_fail_clear(FAKE_MADVISE);
	fake_fail_clear(FAKE_MAP_FRESH);
	char *p = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	cr_assert_not_null(p);
	cr_assert(p < m || p >= m + 8 * MiB, "not in the pages that fault");
	memset(p, 1, 4 * MiB);
	vmap_range_free(p, "free");
	vmap_range_free(keep, "free");
	vmap_range_check();
}

/* VmPTE of /proc/self/status: the process's page tables, in KiB. */
static long page_tables_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	cr_assert(f);
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmPTE: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* Areas purged one by one, each smaller than the 2 MiB a page table maps,
 * leave that table in place however many of them merge into one zero run:
 * the kernel frees a table only when one call drops all it maps.  Fork
 * copies such tables, empty.  The purge that completes a whole span maps it
 * afresh, which frees its table, and drops the span's records. */
Test(purge, purge_drops_the_tables_of_the_spans_it_completes)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE=0", "VMAPALLOC_CACHE=0", NULL};
	range_setup(env);
	enum { N = 64 }; /* 64 x 68 KiB: over 4 MiB, at least one whole span */
	void *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = alloc_ok(A64K);
		memset(p[i], 0x5a, A64K);
	}
	void *keep = alloc_ok(A64K); /* the chunk does not go back */
	long before = page_tables_kib();
	fake_reset();
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		cr_assert_eq(vmap_range_purge(true), (size_t)AREA64K);
	}
	long after = page_tables_kib();
	cr_assert_gt(fake_calls(FAKE_MAP_FRESH), 0, "no span mapped afresh");
	cr_assert_leq(after, before - 4, "page tables %ld KiB before, %ld after", before, after);
	/* The spans' records went too: a range of the region's page table. */
	struct vmap_region *reg = vmap_region_of((uintptr_t)p[0]);
	struct fake_range r[64];
	unsigned n = fake_advised(MADV_DONTNEED, r, 64), records = 0;
	for (unsigned i = 0; i < n && i < 64; i++)
		records += r[i].addr >= (uintptr_t)reg->pt &&
			   r[i].addr < (uintptr_t)(reg->pt + (reg->size >> VMAP_PAGE_SHIFT));
	cr_assert_gt(records, 0, "no records dropped");
	/* Still one zero run, carved again whole and reading zero. */
	cr_assert_eq(vmap_tag_run_state(tag_of(p[0])), VMAP_RUN_ZERO);
	vmap_range_check();
	bool zero = false;
	void *q = vmap_range_alloc((size_t)N * AREA64K - VMAP_PAGE, VMAP_PAGE, &zero);
	cr_assert_eq(q, p[0]);
	cr_assert(zero && all_zero(q, (size_t)N * AREA64K - VMAP_PAGE));
	vmap_range_free(keep, "free");
}

/* Two unmapped pieces and the purged block between them merge into one
 * guarded run (a zero run between two guarded ones joins them), which is
 * one PROT_NONE mapping once it holds megabytes: the run cuts two VMAs out
 * of the arena's, as vmap_none_vmas counts it, not four, and the purged
 * block's pages fault like the pieces around them. */
Test(purge, a_guarded_run_of_several_pieces_is_one_prot_none_mapping)
{
	char *m1, *a, *m2;
	void *keep;
	guarded_around_block(1 * MiB, &m1, &a, &m2, &keep);
	uint64_t t = tag_of(m1);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_GUARDED);
	cr_assert_eq(vmap_tag_pages(t), 256 + 17 + 256, "one run over the pieces and the block");
	cr_assert_eq(tag_of(a), 0);
	cr_assert_eq(tag_of(m2), 0);
	cr_assert_eq(vmap_none_vmas, 2, "one guarded run: two VMAs at most");
	char perms[5];
	maps_perms((uintptr_t)a + A64K / 2, perms);
	cr_assert_str_eq(perms, "---p", "the purged block between the pieces is %s", perms);
	/* One mapping from the first piece to the end of the second. */
	FILE *f = fopen("/proc/self/maps", "r");
	cr_assert(f);
	unsigned long lo, hi, vlo = 0, vhi = 0;
	while (fscanf(f, "%lx-%lx%*[^\n]", &lo, &hi) == 2)
		if ((uintptr_t)a >= lo && (uintptr_t)a < hi)
			vlo = lo, vhi = hi;
	fclose(f);
	cr_assert_leq(vlo, (uintptr_t)m1);
	cr_assert_geq(vhi, (uintptr_t)m2 + 1 * MiB);
	bool zero = false;
	char *p = vmap_range_alloc(528 * 4096, VMAP_PAGE, &zero);
	cr_assert_eq(p, m1, "the guarded run is reused whole");
	cr_assert(zero && all_zero(p, 528 * 4096));
	memset(p, 4, 528 * 4096); /* writable over the parts that were unmapped */
	vmap_range_free(p, "free");
	vmap_range_free(keep, "free");
	vmap_range_check();
}
