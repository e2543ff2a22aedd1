/*
 * range.c — unit tests of the large allocator (core/arena.c, runs.c, pool.c, large.c, move.c): arena, chunks, shards, areas, pools.
 *
 * Linked with the VMAP_DEBUG core: every vmap_range_alloc/free runs the slow
 * model check vmap_range_check(), which aborts on any inconsistency, so every
 * Test here also checks the structures after each operation.  (Threaded tests
 * are in range_threads.c: the model check is not safe to run while other
 * threads allocate.)
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>

#include "cache.h"
#include "range_impl.h"

/* One shard, no age purge: deterministic reuse whatever CPU we run on. */
static const char *const one_shard[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
static const char *const one_shard_thp[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
					    "VMAPALLOC_HUGEPAGE=1", "VMAPALLOC_HUGEPAGE_MIN=2M", NULL};


TestSuite(range, .timeout = 30);

static void *alloc_ok(size_t size, size_t align, bool *zero)
{
	bool z = false;
	void *p = vmap_range_alloc(size, align, &z);
	cr_assert_not_null(p, "vmap_range_alloc(%zu, %zu) failed", size, align);
	if (zero)
		*zero = z;
	return p;
}

/* ---- basic shape ------------------------------------------------------- */

Test(range, init_reserves_one_region_of_the_requested_size)
{
	range_setup(one_shard);
	cr_assert_eq(vmap_nregions, 1);
	cr_assert_eq(vmap_regions[0].size, 64 * GiB);
	cr_assert_eq(vmap_regions[0].base % VMAP_CHUNK, 0, "regions are chunk aligned");
	cr_assert_eq(ctr(VMAP_STAT_regions), 1);
	cr_assert(ctr(VMAP_STAT_mapped_bytes) > (int64_t)(64 * GiB));
	cr_assert_eq(vmap_range_nshards(), 1);
}

Test(range, shard_count_follows_the_option)
{
	const char *env[] = {"VMAPALLOC_SHARDS=5", NULL};
	range_setup(env);
	cr_assert_eq(vmap_range_nshards(), 5);
}

Test(range, shard_count_defaults_to_cpus)
{
	range_setup(NULL);
	cr_assert_eq(vmap_range_nshards(), vmap_os_ncpu() < VMAP_MAX_SHARDS ? vmap_os_ncpu()
									     : VMAP_MAX_SHARDS);
}

Test(range, small_sizes_are_page_aligned)
{
	range_setup(one_shard);
	static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 65537, 300000, MiB, 2 * MiB - 1};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		void *p = alloc_ok(sizes[i], VMAP_PAGE, NULL);
		cr_assert_eq((uintptr_t)p % VMAP_PAGE, 0, "%zu -> %p", sizes[i], p);
		cr_assert(vmap_range_owns(p));
	}
}

Test(range, sizes_from_2mib_are_2mib_aligned)
{
	range_setup(one_shard_thp); /* VMAPALLOC_HUGEPAGE=1: the big kind exists */
	/* First, while only fresh small chunks could serve it: */
	void *small = alloc_ok(2 * MiB - 4096, VMAP_PAGE, NULL);
	cr_assert_not(tag_of(small) & VMAP_TAG_BIG, "just under 2 MiB is small");
	static const size_t sizes[] = {2 * MiB, 2 * MiB + 1, 3 * MiB, 5 * MiB + 4096, 64 * MiB,
				       100 * MiB};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		void *p = alloc_ok(sizes[i], VMAP_PAGE, NULL);
		cr_assert_eq((uintptr_t)p % (2 * MiB), 0, "%zu -> %p", sizes[i], p);
		cr_assert(tag_of(p) & VMAP_TAG_BIG, "%zu bytes live in a big chunk", sizes[i]);
	}
}

Test(range, alignments_4k_to_1g_are_honoured, .timeout = 60)
{
	range_setup(one_shard);
	for (size_t align = 4 * KiB; align <= GiB; align <<= 1) {
		void *p = alloc_ok(5000, align, NULL);
		cr_assert_eq((uintptr_t)p % align, 0, "align %zu -> %p", align, p);
		cr_assert(vmap_range_usable(p, "test") >= 5000);
		memset(p, 0x5a, 5000);
	}
	void *big = alloc_ok(3 * MiB, 64 * MiB, NULL);
	cr_assert_eq((uintptr_t)big % (64 * MiB), 0);
}

Test(range, usable_covers_the_request)
{
	range_setup(one_shard);
	for (size_t size = 1; size < 64 * MiB; size = size * 3 + 7) {
		void *p = alloc_ok(size, VMAP_PAGE, NULL);
		size_t u = vmap_range_usable(p, "test");
		cr_assert(u >= size, "usable %zu < %zu", u, size);
		cr_assert_eq(u % VMAP_PAGE, 0);
		/* Within the class rounding: at most 1/8 more, plus a page; big
		 * areas are also whole 2 MiB pages. */
		size_t slack = size / 8 + (size >= 2 * MiB ? 2 * MiB : VMAP_PAGE);
		cr_assert(u <= size + slack, "usable %zu for %zu", u, size);
		vmap_range_free(p, "free");
	}
}

Test(range, fresh_memory_is_zero_and_writable)
{
	range_setup(one_shard);
	static const size_t sizes[] = {4096, 70000, MiB, 3 * MiB, 17 * MiB};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		bool zero;
		unsigned char *p = alloc_ok(sizes[i], VMAP_PAGE, &zero);
		cr_assert(zero, "fresh area of %zu bytes is known zero", sizes[i]);
		size_t u = vmap_range_usable(p, "test");
		cr_assert(all_zero(p, u), "fresh memory of %zu bytes is zero", sizes[i]);
		memset(p, 0xee, u);
		cr_assert_eq(p[u - 1], 0xee);
	}
}

Test(range, guard_page_separates_neighbours)
{
	range_setup(one_shard);
	char *a = alloc_ok(4096, VMAP_PAGE, NULL);
	char *b = alloc_ok(4096, VMAP_PAGE, NULL);
	cr_assert_eq(b, a + 2 * VMAP_PAGE, "carved in address order, a guard page between");
}

Test(range, zero_size_gives_a_page)
{
	range_setup(one_shard);
	void *p = alloc_ok(0, VMAP_PAGE, NULL);
	cr_assert_eq(vmap_range_usable(p, "test"), VMAP_PAGE);
	vmap_range_free(p, "free");
}

Test(range, absurd_size_returns_null)
{
	range_setup(one_shard);
	bool zero;
	cr_assert_null(vmap_range_alloc((size_t)1 << 47, VMAP_PAGE, &zero));
	cr_assert_null(vmap_range_alloc(SIZE_MAX, VMAP_PAGE, &zero));
	cr_assert_null(vmap_range_alloc(SIZE_MAX - 4096, VMAP_PAGE, &zero));
	void *p = alloc_ok(4096, VMAP_PAGE, NULL); /* still fine afterwards */
	vmap_range_free(p, "free");
}

Test(range, counters_follow_allocs_and_frees)
{
	range_setup(one_shard);
	void *p = alloc_ok(100000, VMAP_PAGE, NULL);
	size_t u = vmap_range_usable(p, "test");
	cr_assert_eq(ctr(VMAP_STAT_large_allocs), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), (int64_t)u);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_allocated), (int64_t)u);
	cr_assert_eq(ctr(VMAP_STAT_pool_misses), 1);
	cr_assert_eq(ctr(VMAP_STAT_chunks_taken), 1);
	vmap_range_free(p, "free");
	cr_assert_eq(ctr(VMAP_STAT_large_frees), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), (int64_t)(u + VMAP_PAGE), "area with its guard");
}

/* ---- reuse ---------------------------------------------------------------- */

Test(range, free_then_alloc_same_size_reuses_the_area)
{
	range_setup(one_shard);
	void *p = alloc_ok(300 * KiB, VMAP_PAGE, NULL);
	memset(p, 0x11, 300 * KiB);
	vmap_range_free(p, "free");
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_CACHED);
	int64_t hits = ctr(VMAP_STAT_pool_hits);
	bool zero = true;
	void *q = alloc_ok(300 * KiB, VMAP_PAGE, &zero);
	cr_assert_eq(q, p, "the pooled area is handed out again");
	cr_assert_eq(ctr(VMAP_STAT_pool_hits), hits + 1);
	cr_assert_not(zero, "a pooled area is dirty");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
}

Test(range, pool_reuse_is_lifo_and_by_page_count)
{
	range_setup(one_shard);
	void *a = alloc_ok(100 * KiB, VMAP_PAGE, NULL);
	void *b = alloc_ok(100 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	/* Any size of the same page count pops the newest. */
	void *c = alloc_ok(100 * KiB - 100, VMAP_PAGE, NULL);
	cr_assert_eq(c, b);
	void *d = alloc_ok(100 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq(d, a);
	cr_assert_eq(ctr(VMAP_STAT_pool_hits), 2);
}

Test(range, pooled_area_is_not_used_for_a_larger_class)
{
	range_setup(one_shard);
	void *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(a, "free");
	/* Not handed out as is: the larger block starts in its pages (the pool
	 * merged into the runs) and extends into the fresh space after them. */
	void *b = alloc_ok(128 * KiB, VMAP_PAGE, NULL);
	cr_assert(vmap_range_usable(b, "test") >= 128 * KiB);
	cr_assert_eq(ctr(VMAP_STAT_pool_hits), 0);
	cr_assert_eq(b, a);
	cr_assert_eq(ctr(VMAP_STAT_run_extends), 1);
}

Test(range, aligned_request_does_not_take_an_unaligned_pooled_area)
{
	range_setup(one_shard);
	void *a = alloc_ok(4096, VMAP_PAGE, NULL);
	void *b = alloc_ok(4096, VMAP_PAGE, NULL); /* a + 8 KiB: not 64 KiB aligned */
	vmap_range_free(b, "free");
	void *c = alloc_ok(4096, 64 * KiB, NULL);
	cr_assert_eq((uintptr_t)c % (64 * KiB), 0);
	(void)a;
}

Test(range, different_sizes_do_not_collide, .timeout = 60)
{
	range_setup(one_shard);
	enum { N = 400 };
	static void *p[N];
	static size_t sz[N];
	uint64_t x = 12345;
	for (int i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		/* Mostly small, some up to 8 MiB (big chunks). */
		sz[i] = x % 8 ? 1 + x % (512 * KiB) : 1 + x % (8 * MiB);
		p[i] = alloc_ok(sz[i], VMAP_PAGE, NULL);
		fill(p[i], sz[i], (uintptr_t)i);
	}
	for (int i = 0; i < N; i++)
		cr_assert(check(p[i], sz[i], (uintptr_t)i), "block %d (%zu bytes) overwritten", i, sz[i]);
	/* Free every third, reallocate with new sizes, check everything again. */
	for (int i = 0; i < N; i += 3) {
		cr_assert(check(p[i], sz[i], (uintptr_t)i));
		vmap_range_free(p[i], "free");
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		sz[i] = 1 + x % (1 * MiB);
		p[i] = alloc_ok(sz[i], VMAP_PAGE, NULL);
		fill(p[i], sz[i], (uintptr_t)i + 1000000);
	}
	for (int i = 0; i < N; i++) {
		uintptr_t seed = i % 3 == 0 ? (uintptr_t)i + 1000000 : (uintptr_t)i;
		cr_assert(check(p[i], sz[i], seed), "block %d (%zu bytes) overwritten", i, sz[i]);
	}
	/* No two live blocks overlap. */
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++) {
			uintptr_t a = (uintptr_t)p[i], b = (uintptr_t)p[j];
			cr_assert(a + sz[i] <= b || b + sz[j] <= a, "blocks %d and %d overlap", i, j);
		}
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free");
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), 0);
	vmap_range_purge(true);
	vmap_range_check();
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
}

/* ---- invalid pointers ------------------------------------------------------ */

Test(range, interior_pointer_free_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	char *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(p + VMAP_PAGE, "free");
}

Test(range, unaligned_pointer_free_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	char *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(p + 16, "free");
}

Test(range, double_free_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	void *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	vmap_range_free(p, "free");
}

Test(range, double_free_after_purge_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	void *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	alloc_ok(64 * KiB, VMAP_PAGE, NULL); /* live: the chunk is not given back whole */
	vmap_range_free(p, "free");
	vmap_range_purge(true);
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_FREE);
	vmap_range_free(p, "free");
}

Test(range, never_allocated_page_in_the_arena_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	void *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	(void)p;
	/* A chunk nobody claimed. */
	vmap_range_free((void *)(vmap_regions[0].base + 10 * GiB), "free");
}

Test(range, free_run_address_in_a_claimed_chunk_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	char *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	/* Just past p and its guard: the head of the chunk's free run. */
	vmap_range_free(p + 64 * KiB + VMAP_PAGE, "free");
}

Test(range, usable_of_a_freed_block_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	void *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	vmap_range_usable(p, "malloc_usable_size");
}

Test(range, resize_of_an_interior_pointer_aborts, .signal = SIGABRT)
{
	range_setup(one_shard);
	char *p = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_resize(p + 8192, 100 * KiB);
}

/* Runs fn in a child with stderr captured; returns its signal and message. */
static int child_message(void (*fn)(void), char *msg, size_t cap)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	fflush(stderr);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		fn();
		_exit(0);
	}
	close(pfd[1]);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(pfd[0], msg + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	msg[n] = '\0';
	close(pfd[0]);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void *victim;

static void double_free_child(void)
{
	vmap_range_free(victim, "free");
	vmap_range_free(victim, "free");
}

static void interior_child(void)
{
	vmap_range_free((char *)victim + 3 * VMAP_PAGE, "realloc");
}

Test(range, double_free_message_names_the_caller_and_the_cause)
{
	range_setup(one_shard);
	victim = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char msg[512], want[128];
	cr_assert_eq(child_message(double_free_child, msg, sizeof msg), SIGABRT);
	snprintf(want, sizeof want, "vmapalloc: free(): invalid pointer %p (double free", victim);
	cr_assert(strncmp(msg, want, strlen(want)) == 0, "message: %s", msg);
	cr_assert_eq(count_lines(msg), 1, "%s", msg);
}

Test(range, interior_pointer_message_names_the_caller)
{
	range_setup(one_shard);
	victim = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char msg[512], want[128];
	cr_assert_eq(child_message(interior_child, msg, sizeof msg), SIGABRT);
	snprintf(want, sizeof want, "vmapalloc: realloc(): invalid pointer %p (not the start",
		 (void *)((char *)victim + 3 * VMAP_PAGE));
	cr_assert(strncmp(msg, want, strlen(want)) == 0, "message: %s", msg);
	cr_assert_eq(count_lines(msg), 1, "%s", msg);
}

/* ---- resize and move --------------------------------------------------------- */

/* Free runs only (no pools, no thread cache): placement is the runs' alone. */
static const char *const runs_only[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
					"VMAPALLOC_POOL_PAGES=0", "VMAPALLOC_CACHE=0", NULL};

/* Two blocks of na and nb bytes, each followed by a live page (seps), so
 * that freeing them leaves two runs apart. */
static void two_apart(size_t na, size_t nb, char **a, char **b, void *seps[2])
{
	*a = alloc_ok(na, VMAP_PAGE, NULL);
	seps[0] = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	*b = alloc_ok(nb, VMAP_PAGE, NULL);
	seps[1] = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert(*a < *b);
}

Test(range, grown_copy_takes_the_lowest_run_other_requests_the_best_fit)
{
	range_setup(runs_only);
	/* Two resident runs: 250 pages low, 120 pages high (areas carry a
	 * guard page: 249 and 119 usable), live blocks between them. */
	char *low, *high;
	void *seps[2];
	two_apart(249 * VMAP_PAGE, 119 * VMAP_PAGE, &low, &high, seps);
	memset(low, 1, 249 * VMAP_PAGE);
	memset(high, 2, 119 * VMAP_PAGE);
	vmap_range_free(low, "free");
	vmap_range_free(high, "free");
	cr_assert_eq(vmap_tag_state(tag_of(low)), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_state(tag_of(high)), VMAP_ST_FREE);
	/* 100 pages: best fit is the 120-page run; a growing realloc's copy
	 * takes the lowest run in its bin or the next. */
	bool zero = true;
	void *g = vmap_range_alloc_grown(99 * VMAP_PAGE, &zero);
	cr_assert_eq(g, low, "the grown copy at %p, the low run at %p", g, (void *)low);
	cr_assert_not(zero, "resident memory is dirty");
	vmap_range_free(g, "free");
	void *b = alloc_ok(99 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(b, high, "best fit at %p, the high run at %p", b, (void *)high);
	vmap_range_free(b, "free");
	vmap_range_free(seps[0], "free");
	vmap_range_free(seps[1], "free");
}

Test(range, outgrown_area_goes_to_the_runs_not_the_thread_cache)
{
	range_setup(one_shard);
	char *a, *b;
	void *seps[2];
	two_apart(100 * KiB, 100 * KiB, &a, &b, seps);
	/* A plain free keeps the area whole for its size (the thread's cache
	 * or a pool: tag CACHED); the area a realloc outgrew becomes a free
	 * run, merged with its free neighbours. */
	vmap_range_free(a, "free");
	cr_assert_eq(vmap_tag_state(tag_of(a)), VMAP_ST_CACHED, "a plain free is cached");
	vmap_range_free_outgrown(b);
	cr_assert_eq(vmap_tag_state(tag_of(b)), VMAP_ST_FREE, "the outgrown area is a free run");
	/* A smaller request is carved from it (the cached area waits for its
	 * own size). */
	void *c = alloc_ok(40 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq(c, (void *)b, "the smaller block at %p, the outgrown area at %p", c,
		     (void *)b);
	vmap_range_free(c, "free");
	vmap_range_free(seps[0], "free");
	vmap_range_free(seps[1], "free");
}

Test(range, resize_grows_in_place_into_a_free_neighbour)
{
	range_setup(one_shard);
	char *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char *b = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char *c = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq(b, a + 64 * KiB + VMAP_PAGE, "A and B adjacent");
	fill(a, 64 * KiB, 1);
	vmap_range_free(b, "free");
	vmap_range_purge(true); /* B becomes a free run */
	cr_assert_eq(vmap_tag_state(tag_of(b)), VMAP_ST_FREE);
	size_t before = vmap_range_usable(a, "test");
	int64_t in_use = ctr(VMAP_STAT_large_bytes_in_use);
	cr_assert(vmap_range_resize(a, 100 * KiB));
	size_t after = vmap_range_usable(a, "test");
	cr_assert(after >= 100 * KiB && after > before, "usable %zu -> %zu", before, after);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), in_use + (int64_t)(after - before));
	cr_assert(check(a, 64 * KiB, 1), "contents kept");
	memset(a, 0x77, after);
	vmap_range_check();
	/* The rest of B is still a free run, usable by others. */
	void *d = alloc_ok(4096, VMAP_PAGE, NULL);
	cr_assert(d >= (void *)(a + after + VMAP_PAGE) && d < (void *)c, "d=%p", d);
	vmap_range_free(a, "free");
	vmap_range_free(c, "free");
	vmap_range_free(d, "free");
}

Test(range, resize_uses_the_whole_neighbour_run)
{
	range_setup(one_shard);
	char *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char *b = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	char *c = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(b, "free");
	vmap_range_purge(true);
	/* A (16 pages + guard) + B (17 pages) = 34 pages: 33 usable. */
	cr_assert(vmap_range_resize(a, 132 * KiB));
	cr_assert_eq(vmap_range_usable(a, "test"), 132 * KiB);
	vmap_range_check();
	cr_assert_not(vmap_range_resize(a, 132 * KiB + 1), "C is live: no room");
	cr_assert_eq(vmap_range_usable(a, "test"), 132 * KiB);
	vmap_range_free(c, "free");
	vmap_range_free(a, "free");
}

Test(range, resize_fails_when_the_neighbour_is_live)
{
	range_setup(one_shard);
	void *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	void *b = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	cr_assert_not(vmap_range_resize(a, 65 * KiB));
	cr_assert_eq(vmap_range_usable(a, "test"), 64 * KiB);
	vmap_range_check();
	(void)b;
}

Test(range, resize_fails_when_the_neighbour_is_only_cached)
{
	range_setup(one_shard);
	void *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	void *b = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	vmap_range_free(b, "free");
	cr_assert_not(vmap_range_resize(a, 65 * KiB), "B is in a pool, not free space");
	vmap_range_check();
}

Test(range, resize_within_the_usable_size_succeeds_without_change)
{
	range_setup(one_shard);
	void *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	cr_assert(vmap_range_resize(a, 1));
	cr_assert(vmap_range_resize(a, 64 * KiB));
	cr_assert_eq(vmap_range_usable(a, "test"), 64 * KiB, "never shrinks");
}

Test(range, resize_of_a_small_area_into_the_big_kind_refuses)
{
	range_setup(one_shard_thp);
	void *a = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	/* The rest of the chunk is free, but 2 MiB blocks belong in big chunks. */
	cr_assert_not(vmap_range_resize(a, 2 * MiB));
	cr_assert(vmap_range_resize(a, 2 * MiB - VMAP_PAGE));
	vmap_range_check();
}

Test(range, resize_grows_big_areas_in_place)
{
	range_setup(one_shard_thp);
	char *a = alloc_ok(4 * MiB, VMAP_PAGE, NULL);
	fill(a, 4 * MiB, 9);
	cr_assert(vmap_range_resize(a, 20 * MiB), "the rest of the big chunk is free");
	cr_assert(vmap_range_usable(a, "test") >= 20 * MiB);
	cr_assert(check(a, 4 * MiB, 9));
	memset(a + 4 * MiB, 1, 16 * MiB);
	vmap_range_check();
	vmap_range_free(a, "free");
}

Test(range, move_keeps_contents_and_frees_the_old_range)
{
	range_setup(one_shard);
	char *p = alloc_ok(4 * MiB, VMAP_PAGE, NULL);
	size_t old = vmap_range_usable(p, "test");
	fill(p, old, 42);
	/* Something live right after p so that it cannot grow in place. */
	void *blocker = alloc_ok(4 * MiB, VMAP_PAGE, NULL);
	bool moved = false;
	char *q = vmap_range_move(p, 16 * MiB, &moved);
	cr_assert_not_null(q);
	cr_assert(moved, "pages moved with mremap");
	cr_assert_neq(q, p);
	cr_assert(vmap_range_usable(q, "test") >= 16 * MiB);
	cr_assert(check(q, old, 42), "contents moved");
	cr_assert(all_zero(q + old, 16 * MiB - old), "the grown part is zero");
	cr_assert_eq(ctr(VMAP_STAT_realloc_moved_pages), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 2);
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_FREE, "the old range is free space");
	vmap_range_check();
	/* The old range comes back zero. */
	bool zero = false;
	char *r = alloc_ok(4 * MiB, VMAP_PAGE, &zero);
	cr_assert_eq(r, p);
	cr_assert(zero);
	cr_assert(all_zero(r, old), "moved-from pages read as zero");
	vmap_range_free(q, "free");
	vmap_range_free(r, "free");
	vmap_range_free(blocker, "free");
}

Test(range, move_of_a_small_block_into_the_big_kind)
{
	range_setup(one_shard_thp);
	char *p = alloc_ok(300 * KiB, VMAP_PAGE, NULL);
	fill(p, 300 * KiB, 5);
	bool moved = false;
	char *q = vmap_range_move(p, 3 * MiB, &moved);
	cr_assert_not_null(q);
	cr_assert(moved);
	cr_assert_eq((uintptr_t)q % (2 * MiB), 0);
	cr_assert(tag_of(q) & VMAP_TAG_BIG);
	cr_assert(check(q, 300 * KiB, 5));
	vmap_range_check();
	vmap_range_free(q, "free");
}

/* VMAs of this process that overlap the arena's first region. */
static unsigned arena_vmas(void)
{
	uintptr_t lo = vmap_regions[0].base, hi = lo + vmap_regions[0].size;
	FILE *f = fopen("/proc/self/maps", "r");
	cr_assert_not_null(f);
	char line[512];
	unsigned n = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && b > lo && a < hi)
			n++;
	}
	fclose(f);
	return n;
}

/* Two live 4 MiB blocks side by side, the second one a blocker: the first
 * can only grow by moving. */
static char *movable(char **blocker, uintptr_t seed)
{
	char *p = alloc_ok(4 * MiB, VMAP_PAGE, NULL);
	fill(p, 4 * MiB, seed);
	*blocker = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	return p;
}

Test(range, a_moved_block_is_a_vma_until_its_pages_are_purged)
{
	range_setup(one_shard);
	char *blocker;
	char *p = movable(&blocker, 7);
	unsigned before = arena_vmas();
	bool moved = false;
	char *q = vmap_range_move(p, 6 * MiB, &moved);
	cr_assert(moved);
	cr_assert(tag_of(q) & VMAP_TAG_MOVED);
	cr_assert(check(q, 4 * MiB, 7));
	unsigned during = arena_vmas();
	cr_assert(during > before && during <= before + 2, "a move adds at most two VMAs (%u -> %u)",
		  before, during);
	cr_assert_eq(vmap_moves, 2, "counted");
	vmap_range_free(q, "free");
	cr_assert_eq(arena_vmas(), during, "freed, its pages stay cached, in their VMA");
	vmap_range_purge(true);
	cr_assert_eq(arena_vmas(), before, "purged: mapped afresh, merged back");
	vmap_range_check();
	vmap_range_free(blocker, "free");
}

Test(range, a_moved_block_moved_again_leaves_one_vma)
{
	range_setup(one_shard);
	char *blocker, *blocker2;
	char *p = movable(&blocker, 9);
	unsigned before = arena_vmas();
	bool moved = false;
	char *q = vmap_range_move(p, 6 * MiB, &moved);
	cr_assert(moved);
	blocker2 = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	cr_assert(!vmap_range_resize(q, 7 * MiB), "a moved block does not grow in place");
	char *r = vmap_range_move(q, 12 * MiB, &moved);
	cr_assert(moved);
	cr_assert(check(r, 4 * MiB, 9));
	cr_assert(all_zero(r + 4 * MiB, 8 * MiB), "the grown part reads zero");
	cr_assert(arena_vmas() <= before + 2, "the first move's VMA merged back (%u -> %u)", before,
		  arena_vmas());
	vmap_range_free(r, "free");
	vmap_range_free(blocker2, "free");
	vmap_range_purge(true);
	cr_assert_eq(arena_vmas(), before);
	vmap_range_free(blocker, "free");
}

Test(range, moves_stop_at_the_vma_budget_and_copy_instead, .timeout = 60)
{
	range_setup(one_shard);
	enum { N = 64 };
	char *p[N], *b[N];
	for (int i = 0; i < N; i++)
		p[i] = movable(&b[i], (uintptr_t)i);
	unsigned before = arena_vmas();
	uint64_t budget = vmap_vma_budget() / 3 * 2;
	int moves = 0;
	for (int i = 0; i < N; i++) {
		bool moved = false;
		char *q = vmap_range_move(p[i], 6 * MiB, &moved);
		cr_assert_not_null(q);
		if (!moved) { /* the caller copies and frees */
			memcpy(q, p[i], 4 * MiB);
			vmap_range_free(p[i], "free");
		}
		moves += moved;
		p[i] = q;
		cr_assert(check(p[i], 4 * MiB, (uintptr_t)i));
		cr_assert(arena_vmas() <= before + budget, "%u VMAs after %d moves, %u before, budget %lu",
			  arena_vmas(), moves, before, (unsigned long)budget);
		usleep(11000); /* past the recount's rate limit: every decision counts again */
	}
	cr_assert(moves >= (int)budget / 2 && moves < N, "moves while they fit the budget (%d)", moves);
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		vmap_range_free(b[i], "free");
	}
	vmap_range_purge(true);
	cr_assert(arena_vmas() <= before, "all merged back: %u VMAs, %u before", arena_vmas(), before);
}

Test(range, a_block_below_the_move_size_is_copied)
{
	range_setup(one_shard);
	char *p = alloc_ok(128 * KiB, VMAP_PAGE, NULL);
	void *blocker = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	bool moved = true;
	char *q = vmap_range_move(p, 512 * KiB, &moved);
	cr_assert_not_null(q);
	cr_assert(!moved, "copying 128 KiB costs less than a VMA");
	vmap_range_free(p, "free");
	vmap_range_free(q, "free");
	vmap_range_free(blocker, "free");
}

/* ---- chunks, regions, exhaustion ------------------------------------------------- */

Test(range, fresh_big_block_is_not_carved_from_a_small_chunk)
{
	/* arena.c: areas of 2 MiB and more live in big chunks (THP); a clean
	 * small run is never used for a big request. */
	range_setup(one_shard_thp);
	void *s = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	void *b = alloc_ok(4 * MiB, VMAP_PAGE, NULL);
	cr_assert_neq((uintptr_t)s >> VMAP_CHUNK_SHIFT, (uintptr_t)b >> VMAP_CHUNK_SHIFT);
	cr_assert_eq(ctr(VMAP_STAT_chunks_taken), 2);
}

Test(range, a_request_larger_than_a_chunk_takes_several)
{
	range_setup(one_shard);
	char *p = alloc_ok(200 * MiB, VMAP_PAGE, NULL);
	cr_assert(vmap_range_usable(p, "test") >= 200 * MiB);
	p[0] = 1;
	p[200 * MiB - 1] = 2;
	cr_assert(ctr(VMAP_STAT_chunks_taken) >= 4);
	vmap_range_free(p, "free");
}

Test(range, exhausted_region_adds_another, .timeout = 60)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_RESERVE=256M",
			     "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	cr_assert_eq(vmap_regions[0].size, 256 * MiB);
	static void *p[16];
	for (int i = 0; i < 16; i++) {
		p[i] = alloc_ok(40 * MiB, VMAP_PAGE, NULL);
		mark(p[i], 40 * MiB, (uintptr_t)i);
	}
	cr_assert(ctr(VMAP_STAT_regions) > 1, "regions: %ld", (long)ctr(VMAP_STAT_regions));
	cr_assert_eq((int64_t)vmap_nregions, ctr(VMAP_STAT_regions));
	for (int i = 0; i < 16; i++) {
		cr_assert(vmap_range_owns(p[i]));
		cr_assert(marked(p[i], 40 * MiB, (uintptr_t)i), "block %d", i);
	}
	for (int i = 0; i < 16; i++)
		vmap_range_free(p[i], "free");
	vmap_range_purge(true);
	vmap_range_check();
}

/* VmSize less the arena's unclaimed reservation: the address space the
 * range allocator holds RLIMIT_AS against. */
static uint64_t as_used(void)
{
	char buf[64] = {0};
	int fd = open("/proc/self/statm", O_RDONLY);
	cr_assert(fd >= 0);
	cr_assert(read(fd, buf, sizeof buf - 1) > 0);
	close(fd);
	return strtoull(buf, NULL, 10) * 4096 - (uint64_t)ctr(VMAP_STAT_unclaimed_bytes);
}

/* Runs fn in a child (the limits below would starve Criterion's own
 * mappings) and returns its exit status. */
static int in_child(int (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(fn());
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "child status %#x", st);
	return WEXITSTATUS(st);
}

/* Allocates 16 MiB blocks (kept) until NULL or 4 GiB; MiB got / 16. */
static int fill_16m(void)
{
	int n = 0;
	while (n < 256 && vmap_range_alloc(16 * MiB, VMAP_PAGE, &(bool){false}))
		n++;
	return n;
}

static int lowered_limit_child(void)
{
	uint64_t used = as_used();
	struct rlimit rl = {used + 256 * MiB, used + 256 * MiB};
	if (setrlimit(RLIMIT_AS, &rl) != 0)
		return 255;
	int n = fill_16m();
	return as_used() <= used + 256 * MiB ? n : 254;
}

/* F1: RLIMIT_AS lowered after the arena was reserved.  The reservation is in
 * VmSize but holds nothing; the address space in use (VmSize less the
 * unclaimed reservation) plus what a claim adds must stay under the limit.
 * Before the fix: 256 blocks (the cap; the arena would give 64 GiB). */
Test(range, a_lowered_address_space_limit_stops_chunk_claims, .timeout = 60)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	range_setup(env);
	vmap_range_free(alloc_ok(MiB, VMAP_PAGE, NULL), "free"); /* a chunk claimed */
	int n = in_child(lowered_limit_child);
	cr_assert(n < 254, "child: %s", n == 255 ? "setrlimit failed" : "in use past the limit");
	/* 256 MiB of new chunks, plus what is left of the chunk claimed
	 * before (under 64 MiB). */
	cr_assert(n >= 14 && n <= 20, "%d blocks of 16 MiB under a limit 256 MiB above use", n);
}

static int headroom_child(void)
{
	char buf[64] = {0};
	int fd = open("/proc/self/statm", O_RDONLY);
	if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0)
		return 255;
	close(fd);
	uint64_t vsize = strtoull(buf, NULL, 10) * 4096;
	if (vsize > 64 * GiB)
		return 251; /* a sanitizer's shadow: a quarter of the limit is terabytes */
	uint64_t limit = vsize + 4 * GiB;
	struct rlimit rl = {limit, limit};
	if (setrlimit(RLIMIT_AS, &rl) != 0)
		return 255;
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_RESERVE=256M", NULL};
	if (unit_parse(env) != 0)
		return 255;
	vmap_counter_init(2);
	if (vmap_range_init() != 0)
		return 253;
	int n = fill_16m();
	/* A quarter of the limit is left to the kernel's other customers. */
	void *m = mmap(NULL, limit / 4 - 128 * MiB, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return m == MAP_FAILED ? 252 : n;
}

/* F2: under a finite RLIMIT_AS the arena adds regions only while they leave
 * a quarter of the limit to what is not the arena (glibc's fallback, thread
 * stacks, other mappings).  Before the fix: regions until the kernel refused,
 * and no room left for the mapping. */
Test(range, new_regions_leave_a_quarter_of_the_limit, .timeout = 60)
{
	int n = in_child(headroom_child);
	if (n == 251)
		cr_skip_test("VmSize over 64 GiB before the test (a sanitizer's shadow memory)");
	cr_assert(n != 252, "no room left outside the arena under the limit");
	cr_assert(n < 250, "child failed: %d", n);
	/* 3 GiB for the arena, less tables and chunk rounding. */
	cr_assert(n >= 150 && n <= 192, "%d blocks of 16 MiB under a 4 GiB limit", n);
}

/* Pins the calling thread to the nth CPU it may run on; false if there is none. */
static bool pin_to_nth_allowed_cpu(int nth)
{
	cpu_set_t all, one;
	if (sched_getaffinity(0, sizeof all, &all) != 0)
		return false;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all) && nth-- == 0) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			return sched_setaffinity(0, sizeof one, &one) == 0;
		}
	return false;
}

/* F9: a program frees everything it allocated on one CPU; the purge leaves
 * whole known-zero chunks, which must go back to the arena so that another
 * CPU's shard can claim them (rather than a new region, or NULL under an
 * address-space limit). */
Test(range, purged_whole_chunks_go_back_to_the_arena_for_any_shard, .timeout = 60)
{
	const char *env[] = {"VMAPALLOC_SHARDS=2", "VMAPALLOC_RESERVE=256M",
			     "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	bool two_cpus = pin_to_nth_allowed_cpu(0) && pin_to_nth_allowed_cpu(1);
	if (two_cpus)
		pin_to_nth_allowed_cpu(0);
	range_setup(env);
	struct vmap_region *r = &vmap_regions[0];
	cr_assert_eq(r->nchunks, 4);
	/* 60 MiB areas: one per chunk, so four fill the region. */
	static void *p[4];
	for (int i = 0; i < 4; i++) {
		p[i] = alloc_ok(60 * MiB, VMAP_PAGE, NULL);
		fill(p[i], 60 * MiB, (uintptr_t)i);
	}
	cr_assert_eq(vmap_nregions, 1, "four 60 MiB blocks fit the 256 MiB region");
	unsigned first_shard = vmap_tag_shard(tag_of(p[0]));
	for (int i = 0; i < 4; i++)
		vmap_range_free(p[i], "free");
	vmap_range_purge(true);
	vmap_range_check();
	for (size_t c = 0; c < r->nchunks; c++)
		cr_assert(vmap_chunk_is_free(r->chunk_owner[c]),
			  "chunk %zu still owned (%#x) after everything was freed and purged", c,
			  r->chunk_owner[c]);
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 4);
	/* Another CPU (shard), where there is one: the same four blocks fit the
	 * region again, its chunks are zero, and no region is added. */
	if (two_cpus)
		pin_to_nth_allowed_cpu(1);
	for (int i = 0; i < 4; i++) {
		bool zero;
		p[i] = alloc_ok(60 * MiB, VMAP_PAGE, &zero);
		cr_assert(zero, "a chunk given back after a purge is known zero");
		cr_assert_eq(((char *)p[i])[0], 0);
		cr_assert_eq(((char *)p[i])[60 * MiB - 1], 0);
		if (two_cpus && vmap_os_cpu() % 2 != first_shard)
			cr_assert_neq(vmap_tag_shard(tag_of(p[i])), first_shard);
	}
	cr_assert_eq(vmap_nregions, 1, "the second fill reused the chunks given back");
	for (int i = 0; i < 4; i++)
		vmap_range_free(p[i], "free");
}

/* Only whole chunks go back: a purged run that covers part of a chunk stays
 * with its shard, and a chunk with a live block in it is never given back. */
Test(range, partly_used_chunks_are_not_given_back)
{
	/* Both blocks of the big kind, so that they share a chunk. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_HUGEPAGE_MIN=8M", NULL};
	range_setup(env);
	void *keep = alloc_ok(8 * MiB, VMAP_PAGE, NULL);
	void *gone = alloc_ok(40 * MiB, VMAP_PAGE, NULL);
	vmap_range_free(gone, "free");
	vmap_range_purge(true);
	vmap_range_check();
	struct vmap_region *r = vmap_region_of((uintptr_t)keep);
	cr_assert_not(vmap_chunk_is_free(r->chunk_owner[((uintptr_t)keep - r->base) >> VMAP_CHUNK_SHIFT]));
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 0);
	vmap_range_free(keep, "free");
	vmap_range_purge(true);
	vmap_range_check();
	cr_assert_eq(ctr(VMAP_STAT_chunks_returned), 1);
}

Test(range, small_reservation_fits_a_request_of_most_of_it)
{
	/* 160 MiB in a 256 MiB arena: three of its four chunks. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_RESERVE=256M", NULL};
	range_setup(env);
	void *p = alloc_ok(160 * MiB, VMAP_PAGE, NULL);
	cr_assert_eq(vmap_nregions, 1);
	vmap_range_free(p, "free");
}

Test(range, aligned_request_is_carved_from_the_chunks_taken_for_it, .timeout = 60)
{
	range_setup(one_shard);
	/* 1 GiB alignment from a 64 MiB-aligned arena needs 17 chunks. */
	void *p = alloc_ok(4096, GiB, NULL);
	cr_assert_eq((uintptr_t)p % GiB, 0);
	cr_assert_eq(ctr(VMAP_STAT_chunks_taken), 17, "chunks taken: %ld (17 are enough)",
		     (long)ctr(VMAP_STAT_chunks_taken));
	cr_assert_eq(ctr(VMAP_STAT_purges), 0, "an allocation with free space at hand must not purge");
}

Test(range, gigabyte_alignment_in_a_2g_reservation, .timeout = 60)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_RESERVE=2G", NULL};
	range_setup(env);
	void *p = alloc_ok(4096, GiB, NULL);
	cr_assert_eq((uintptr_t)p % GiB, 0);
	vmap_range_free(p, "free");
}

Test(range, owns_only_arena_addresses)
{
	range_setup(one_shard);
	int local;
	cr_assert_not(vmap_range_owns(&local));
	cr_assert_not(vmap_range_owns(NULL));
	void *m = malloc(100);
	cr_assert_not(vmap_range_owns(m));
	free(m);
	cr_assert(vmap_range_owns((void *)vmap_regions[0].base));
	cr_assert(vmap_range_owns((void *)(vmap_regions[0].base + vmap_regions[0].size - 1)));
	cr_assert_not(vmap_range_owns((void *)(vmap_regions[0].base + vmap_regions[0].size)));
}

Test(range, every_pooled_size_is_reused_by_the_same_request)
{
	/* Every freed area stays pooled: no pressure purge under 1 GiB. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_LAZY_MAX=1G", NULL};
	range_setup(env);
	/* Areas up to POOL_PAGES (256) pages, guard included, are pooled. */
	for (size_t size = 1; size <= 255 * VMAP_PAGE; size = size * 5 / 4 + 1000) {
		void *p = alloc_ok(size, VMAP_PAGE, NULL);
		vmap_range_free(p, "free");
		int64_t hits = ctr(VMAP_STAT_pool_hits);
		void *q = alloc_ok(size, VMAP_PAGE, NULL);
		cr_assert_eq(q, p, "size %zu: freed area not reused", size);
		cr_assert_eq(ctr(VMAP_STAT_pool_hits), hits + 1);
		vmap_range_free(q, "free");
	}
}

Test(range, pool_pages_option_is_honoured)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_POOL_PAGES=8",
			     "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	/* Up to POOL_PAGES pages: exact pools, reused by the same page count. */
	void *a = alloc_ok(5 * 4096, VMAP_PAGE, NULL);
	cr_assert_eq(vmap_range_usable(a, "test"), 5 * 4096);
	vmap_range_free(a, "free");
	cr_assert_eq(alloc_ok(5 * 4096 - 10, VMAP_PAGE, NULL), a);
	/* Larger ones are served too. */
	void *c = alloc_ok(16 * 4096, VMAP_PAGE, NULL);
	cr_assert(vmap_range_usable(c, "test") >= 16 * 4096);
	vmap_range_free(c, "free");
	void *d = alloc_ok(16 * 4096, VMAP_PAGE, NULL);
	cr_assert(vmap_range_usable(d, "test") >= 16 * 4096);
	vmap_range_free(d, "free");
}

/* ---- resident memory before fresh memory ------------------------------- */

/* A thread the scheduler moves to another CPU frees into one shard and
 * allocates from another: the resident run of the first shard is carved
 * before any fresh memory of the second (which would fault page by page). */
struct steal_job {
	int cpu;
	unsigned shard;
	void *p;
	bool zero;
};

static void *steal_alloc(void *arg)
{
	struct steal_job *j = arg;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(j->cpu, &one);
	if (sched_setaffinity(0, sizeof one, &one) != 0)
		return NULL;
	j->shard = vmap_os_cpu() % 2;
	j->zero = true;
	j->p = vmap_range_alloc(1536 * KiB, VMAP_PAGE, &j->zero);
	vmap_counter_flush_local(); /* (this thread's counts, before it exits) */
	return NULL;
}

Test(range, another_shards_resident_run_comes_before_fresh_memory)
{
	const char *env[] = {"VMAPALLOC_SHARDS=2", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	cpu_set_t all, one;
	int cpus[2], n = 0;
	cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &all))
			cpus[n++] = c;
	if (n < 2)
		cr_skip_test("needs two CPUs to run on");
	CPU_ZERO(&one);
	CPU_SET(cpus[0], &one);
	cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
	range_setup(env);
	/* 1.5 MiB: past the pools, so the freed area becomes a resident run. */
	void *a = alloc_ok(1536 * KiB, VMAP_PAGE, NULL);
	fill(a, 1536 * KiB, 1);
	unsigned owner = vmap_tag_shard(tag_of(a));
	vmap_range_free(a, "free");
	/* A thread started on the other CPU allocates from that CPU's shard (a
	 * thread keeps the shard it started on). */
	struct steal_job job = {.cpu = cpus[1]};
	int64_t fresh = ctr(VMAP_STAT_pool_misses);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, steal_alloc, &job), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	if (job.shard == owner)
		cr_skip_test("both allowed CPUs map to one shard");
	void *b = job.p;
	cr_assert_eq(b, a, "the other shard's resident run, not fresh memory");
	cr_assert(!job.zero, "resident memory is not known zero");
	cr_assert_eq(vmap_tag_shard(tag_of(b)), owner, "the area stays with its chunk's shard");
	cr_assert_eq(ctr(VMAP_STAT_run_steals), 1);
	cr_assert_eq(ctr(VMAP_STAT_pool_misses), fresh);
	vmap_range_free(b, "free"); /* back to its owner, from another thread */
	cr_assert_eq(vmap_tag_state(tag_of(b)), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_shard(tag_of(b)), owner);
}

/* A request larger than the resident run just before fresh space starts in
 * the run and takes only the missing pages from the fresh space. */
Test(range, a_larger_block_extends_a_resident_run_into_fresh_space)
{
	range_setup(one_shard);
	void *a = alloc_ok(1536 * KiB, VMAP_PAGE, NULL);
	fill(a, 1536 * KiB, 2);
	vmap_range_free(a, "free");
	int64_t cached = ctr(VMAP_STAT_cached_bytes);
	cr_assert_eq(cached, (int64_t)(1536 * KiB + VMAP_PAGE));
	bool zero = true;
	void *b = alloc_ok(3 * MiB, VMAP_PAGE, &zero);
	cr_assert_eq(b, a);
	cr_assert(!zero, "partly resident: not known zero");
	cr_assert(check(b, 1536 * KiB, 2), "the resident pages are the old ones (not refaulted)");
	cr_assert(all_zero((char *)b + 1536 * KiB + VMAP_PAGE, 3 * MiB - 1536 * KiB - VMAP_PAGE));
	cr_assert_eq(ctr(VMAP_STAT_run_extends), 1);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0, "the resident pages left the cache");
	cr_assert_eq(vmap_range_usable(b, "test"), 3 * MiB);
	vmap_range_free(b, "free");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), (int64_t)(3 * MiB + VMAP_PAGE));
}

/* A block of a pooled size freed next to a resident run merges with it at
 * once instead of waiting in its pool for the same size. */
Test(range, a_pooled_size_freed_beside_a_resident_run_merges_with_it)
{
	range_setup(one_shard);
	void *x = alloc_ok(1536 * KiB, VMAP_PAGE, NULL);
	void *y = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	void *z = alloc_ok(64 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq((char *)y, (char *)x + 1536 * KiB + VMAP_PAGE, "carved one after the other");
	vmap_range_free(z, "free"); /* live neighbour before it, fresh space after: pooled */
	cr_assert_eq(vmap_tag_state(tag_of(z)), VMAP_ST_CACHED);
	vmap_range_free(x, "free"); /* past the pools: a resident run */
	vmap_range_free(y, "free");
	uint64_t t = tag_of(x);
	cr_assert_eq(vmap_tag_state(t), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_run_state(t), VMAP_RUN_DIRTY);
	cr_assert_eq(vmap_tag_pages(t), (1536 * KiB + 64 * KiB) / VMAP_PAGE + 2,
		     "y merged into x's run (and z stays in its pool)");
	cr_assert_eq(vmap_tag_state(tag_of(z)), VMAP_ST_CACHED);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), (int64_t)(1536 * KiB + 2 * 64 * KiB + 3 * VMAP_PAGE));
}

/* ---- the thread cache's hot area (cache.c) ---------------------------------- */

static void cache_setup(void)
{
	range_setup(one_shard);
	vmap_cache_init(2);
}

Test(range, hot_area_serves_a_smaller_request_at_its_start_and_merges_back)
{
	cache_setup();
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL); /* 101 pages with the guard */
	vmap_range_free(p, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL); /* 41 */
	cr_assert_eq(q, p, "the freed area's start serves the smaller request");
	cr_assert_eq(vmap_range_usable(q, "test"), 40 * VMAP_PAGE, "split: the block has its own size");
	uint64_t rt = tag_of((char *)p + 41 * VMAP_PAGE);
	cr_assert_eq(vmap_tag_state(rt), VMAP_ST_CACHED, "the rest is a cached area of its own");
	cr_assert_eq(vmap_tag_pages(rt), 60);
	vmap_range_free(q, "free");
	cr_assert_eq(tag_of((char *)p + 41 * VMAP_PAGE), 0, "merged back: no head inside");
	cr_assert_eq(vmap_tag_pages(tag_of(p)), 101);
	void *r = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(r, p, "the whole area again");
	vmap_range_free(r, "free");
	vmap_range_check();
}

/* A newer free takes the hot slot while the hot area's block is still out:
 * the rest goes back to the shard, where any request can take it (a window
 * of random sizes reused it; kept in the thread's cache under its exact page
 * count, it waited while requests of other sizes faulted fresh memory). */
Test(range, a_rest_displaced_from_the_hot_area_goes_back_to_the_shard)
{
	cache_setup();
	char *a = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL); /* 101 pages with the guard */
	void *b = alloc_ok(20 * VMAP_PAGE, VMAP_PAGE, NULL);
	void *wall = alloc_ok(4 * VMAP_PAGE, VMAP_PAGE, NULL); /* b cannot grow in place */
	vmap_range_free(a, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL); /* lent: 41 pages, 60 rest */
	cr_assert_eq(q, (void *)a);
	int64_t cached = ctr(VMAP_STAT_cached_bytes);
	vmap_range_free(b, "free"); /* b is hot now */
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), cached + (int64_t)(60 * VMAP_PAGE),
		     "the rest is the shard's");
	int64_t misses = ctr(VMAP_STAT_pool_misses);
	void *c = alloc_ok(50 * VMAP_PAGE, VMAP_PAGE, NULL); /* 51 pages: no exact size cached */
	cr_assert_eq(c, (void *)(a + 41 * VMAP_PAGE), "the rest serves it (%p, the rest at %p)", c,
		     (void *)(a + 41 * VMAP_PAGE));
	cr_assert_eq(ctr(VMAP_STAT_pool_misses), misses, "nothing carved fresh");
	vmap_range_free(c, "free");
	vmap_range_free(q, "free");
	vmap_range_free(wall, "free");
	vmap_range_check();
}

/* bench xthread at 1 thread: malloc of a random size, free, again.  The same
 * address serves every size up to the largest freed (glibc's top chunk does
 * the same), instead of cycling through areas of every size. */
Test(range, random_sizes_reuse_one_address)
{
	cache_setup();
	void *p = alloc_ok(MiB, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	uint64_t x = 88172645463325252ull;
	int64_t misses = ctr(VMAP_STAT_pool_misses);
	for (int i = 0; i < 200; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t size = 64 * KiB + (size_t)(x % (MiB - 64 * KiB));
		void *q = alloc_ok(size, VMAP_PAGE, NULL);
		cr_assert_eq(q, p, "size %zu: another address", size);
		memset(q, 0x5a, size);
		vmap_range_free(q, "free");
	}
	cr_assert_eq(ctr(VMAP_STAT_pool_misses), misses, "nothing carved");
}

static void *free_elsewhere(void *p)
{
	vmap_range_free(p, "free");
	return NULL;
}

/* A block lent from the hot area and freed by another thread goes to its
 * shard like any other; the rest stays a cached area of this thread's until
 * it is displaced or drained, and everything tiles the arena as before. */
Test(range, hot_block_freed_by_another_thread)
{
	cache_setup();
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(q, p);
	pthread_t th;
	/* (The model check counts the calling thread's cache only: not run
	 * by the other thread, while this one's cache holds the rest.) */
	vmap_threads_seen = true;
	cr_assert_eq(pthread_create(&th, NULL, free_elsewhere, q), 0);
	pthread_join(th, NULL);
	vmap_threads_seen = false;
	cr_assert_eq(vmap_tag_state(tag_of(q)), VMAP_ST_CACHED);
	cr_assert_eq(vmap_tag_pages(tag_of(q)), 41, "not merged by the other thread");
	cr_assert_eq(vmap_tag_state(tag_of((char *)p + 41 * VMAP_PAGE)), VMAP_ST_CACHED);
	vmap_range_check();
	/* The hot area is lent: a request it would have served is served elsewhere. */
	void *r = alloc_ok(90 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_neq(r, p);
	vmap_range_check();
	vmap_range_free(r, "free"); /* displaces the rest: into the cache */
	vmap_range_check();
	vmap_range_flush_cached();
	vmap_range_check();
	cr_assert_eq(vmap_range_purge(true) > 0, true);
	vmap_range_check();
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
}

/* malloc_trim while a block is lent: the rest is drained; the block, freed
 * later, comes back as an ordinary area (no merge with drained space). */
Test(range, trim_while_a_hot_block_is_lent)
{
	cache_setup();
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(q, p);
	vmap_range_flush_cached();
	vmap_range_check();
	vmap_range_free(q, "free");
	/* Cached on its own (41 pages), or merged with the drained rest as a
	 * free run (a freed block beside a resident run joins it): never
	 * merged through the hot area's stale bookkeeping, which the model
	 * check would catch. */
	uint64_t t = tag_of(q);
	cr_assert_neq(vmap_tag_state(t), VMAP_ST_LIVE);
	cr_assert(vmap_tag_pages(t) == 41 || vmap_tag_pages(t) == 101, "%u pages",
		  (unsigned)vmap_tag_pages(t));
	vmap_range_check();
	vmap_range_flush_cached();
	vmap_range_check();
}

/* A double free of a lent block is caught like any other. */
Test(range, double_free_of_a_hot_block_aborts, .signal = SIGABRT)
{
	cache_setup();
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(q, "free");
	vmap_range_free(q, "free");
}

/* ---- placement in the free runs ------------------------------------------------ */

static const char *const no_pools[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
				       "VMAPALLOC_POOL_PAGES=0", NULL};

/* Dirty runs of 70 and 120 pages (the larger freed last, so at the head of
 * their bin): a 50-page request takes the 70-page run, the best fit. */
Test(range, carve_takes_the_best_fitting_dirty_run)
{
	range_setup(no_pools);
	void *a = alloc_ok(69 * VMAP_PAGE, VMAP_PAGE, NULL); /* 70 pages with the guard */
	void *sep1 = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	void *b = alloc_ok(119 * VMAP_PAGE, VMAP_PAGE, NULL); /* 120 */
	void *sep2 = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	cr_assert_eq(vmap_tag_state(tag_of(a)), VMAP_ST_FREE);
	cr_assert_eq(vmap_tag_state(tag_of(b)), VMAP_ST_FREE);
	void *c = alloc_ok(49 * VMAP_PAGE, VMAP_PAGE, NULL); /* 50 */
	cr_assert_eq(c, a, "the 70-page run, not the 120-page one");
	void *d = alloc_ok(110 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(d, b, "the larger run stayed whole for a larger request");
	(void)sep1, (void)sep2;
}

/* Pools hold at most a few MiB per shard: freed areas of many different
 * sizes beyond that become free runs (which merge and serve any size)
 * instead of waiting for their exact size. */
Test(range, pools_hold_a_bounded_number_of_bytes)
{
	range_setup(one_shard);
	enum { N = 24 };
	void *p[N], *sep[N];
	for (int i = 0; i < N; i++) {
		p[i] = alloc_ok((size_t)(60 + 3 * i) * VMAP_PAGE, VMAP_PAGE, NULL); /* 61..130 pages */
		sep[i] = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	}
	size_t freed = 0;
	for (int i = 0; i < N; i++) {
		vmap_range_free(p[i], "free");
		freed += (size_t)(61 + 3 * i) * VMAP_PAGE;
	}
	cr_assert_gt(freed, 6 * MiB);
	uint64_t pooled = 0;
	int runs = 0;
	for (int i = 0; i < N; i++) {
		uint64_t t = tag_of(p[i]);
		if (vmap_tag_state(t) == VMAP_ST_CACHED)
			pooled += vmap_tag_pages(t) << VMAP_PAGE_SHIFT;
		else if (vmap_tag_state(t) == VMAP_ST_FREE)
			runs++;
	}
	cr_assert_leq(pooled, 4 * MiB, "%lu bytes pooled", (unsigned long)pooled);
	cr_assert_gt(runs, 0, "the rest went to the free runs");
	cr_assert_eq(vmap_shards[0].pool_bytes, pooled);
	(void)sep;
}

/* A thread keeps allocating from the shard it started on when the scheduler
 * moves it to another CPU (until it has to wait for that shard's lock): its
 * frees go back to that shard, where its next requests find them. */
Test(range, a_thread_keeps_its_shard_across_cpus)
{
	const char *env[] = {"VMAPALLOC_SHARDS=2", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	cpu_set_t all, one;
	cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
	int cpus[2], n = 0;
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &all))
			cpus[n++] = c;
	if (n < 2)
		cr_skip_test("one CPU only");
	CPU_ZERO(&one);
	CPU_SET(cpus[0], &one);
	cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
	range_setup(env);
	void *p = alloc_ok(300 * KiB, VMAP_PAGE, NULL);
	unsigned first = vmap_tag_shard(tag_of(p));
	cr_assert_eq(first, vmap_os_cpu() % 2);
	CPU_ZERO(&one);
	CPU_SET(cpus[1], &one);
	cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
	cr_assert_neq(vmap_os_cpu() % 2, first, "moved to a CPU of the other shard");
	void *q = alloc_ok(700 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq(vmap_tag_shard(tag_of(q)), first, "the thread's shard, not the CPU's");
	vmap_range_free(p, "free");
	void *r = alloc_ok(300 * KiB, VMAP_PAGE, NULL);
	cr_assert_eq(r, p, "its freed area is found again");
	vmap_range_free(q, "free");
	vmap_range_free(r, "free");
}

/* The hot area grows in place into the free run after it (the way glibc's
 * top chunk grows) rather than a larger area being carved elsewhere while it
 * stays resident and unused; not over a live neighbour. */
Test(range, hot_area_grows_into_the_free_run_after_it)
{
	cache_setup();
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	int64_t misses = ctr(VMAP_STAT_pool_misses);
	void *q = alloc_ok(200 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(q, p, "grown in place");
	cr_assert_eq(vmap_range_usable(q, "test"), 200 * VMAP_PAGE);
	cr_assert_eq(ctr(VMAP_STAT_pool_misses), misses, "nothing carved");
	memset(q, 0x33, 200 * VMAP_PAGE);
	void *live = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL); /* right after q */
	cr_assert_eq((char *)live, (char *)q + 201 * VMAP_PAGE);
	vmap_range_free(q, "free");
	void *r = alloc_ok(250 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_neq(r, p, "a live block follows: carved elsewhere");
	vmap_range_check();
	vmap_range_free(r, "free");
	vmap_range_free(live, "free");
	vmap_range_check();
}

/* VMAPALLOC_GUARD=1: a cached area carries its guard marker on its last
 * page, so the hot area is not split (the block's own last page would not
 * trap); an exact fit still reuses it. */
Test(range, hot_area_is_not_split_under_guard_markers)
{
	static const char *const env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
					  "VMAPALLOC_GUARD=1", NULL};
	range_setup(env);
	if (!vmap_range_guard_on())
		cr_skip_test("no MADV_GUARD_INSTALL on this kernel");
	vmap_cache_init(2);
	void *p = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	vmap_range_free(p, "free");
	void *q = alloc_ok(40 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_neq(q, p, "not split");
	void *r = alloc_ok(100 * VMAP_PAGE, VMAP_PAGE, NULL);
	cr_assert_eq(r, p, "whole");
	vmap_range_free(q, "free");
	vmap_range_free(r, "free");
	vmap_range_check();
}

/* The same bound when a thread cache is drained (malloc_trim, thread exit,
 * overflow): its areas go to the pools only while there is room. */
Test(range, drained_thread_cache_respects_the_pool_bound)
{
	cache_setup();
	enum { N = 24 };
	void *p[N], *sep[N];
	for (int i = 0; i < N; i++) {
		p[i] = alloc_ok((size_t)(60 + 3 * i) * VMAP_PAGE, VMAP_PAGE, NULL);
		sep[i] = alloc_ok(VMAP_PAGE, VMAP_PAGE, NULL);
	}
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free");
	vmap_cache_trim();
	vmap_range_check();
	cr_assert_leq(vmap_shards[0].pool_bytes, 4 * MiB);
	int runs = 0;
	for (int i = 0; i < N; i++)
		runs += vmap_tag_state(tag_of(p[i])) == VMAP_ST_FREE;
	cr_assert_gt(runs, 0);
	(void)sep;
}
