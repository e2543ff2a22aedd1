/*
 * range_threads.c — threaded tests of the large allocator and its purge.
 *
 * Linked with the normal core: the VMAP_DEBUG model check walks every shard
 * without their locks, so it may only run at quiescent points, which these
 * tests do by calling vmap_range_check() after joining their threads.
 */
#include "unit.h"

#include <pthread.h>

enum { SLOTS = 256 };

struct shared {
	pthread_mutex_t mu;
	void *p[SLOTS];
	size_t size[SLOTS];
	uintptr_t seed[SLOTS];
	unsigned long bad; /* pattern mismatches found */
	unsigned long ops;
};

struct thread_arg {
	struct shared *sh;
	unsigned idx;
	unsigned iters;
	size_t max_size;
	bool purger;
};

/* Allocate, fill, swap into a random slot; verify and free what was there
 * (most often a block another thread allocated, on another shard). */
static void *churn(void *argp)
{
	struct thread_arg *a = argp;
	struct shared *sh = a->sh;
	uint64_t x = 0x2545f4914f6cdd1dull * (a->idx + 1);
	for (unsigned i = 0; i < a->iters; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t size = 1 + x % (x % 16 ? 256 * KiB : a->max_size);
		bool zero;
		void *p = vmap_range_alloc(size, VMAP_PAGE, &zero);
		if (!p) {
			__atomic_add_fetch(&sh->bad, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (zero && !all_zero(p, size < 8192 ? size : 8192))
			__atomic_add_fetch(&sh->bad, 1, __ATOMIC_RELAXED);
		uintptr_t seed = (uintptr_t)x;
		fill(p, size, seed);
		unsigned k = (unsigned)(x >> 33) % SLOTS;
		pthread_mutex_lock(&sh->mu);
		void *old = sh->p[k];
		size_t osize = sh->size[k];
		uintptr_t oseed = sh->seed[k];
		sh->p[k] = p;
		sh->size[k] = size;
		sh->seed[k] = seed;
		pthread_mutex_unlock(&sh->mu);
		if (old) {
			if (!check(old, osize, oseed))
				__atomic_add_fetch(&sh->bad, 1, __ATOMIC_RELAXED);
			vmap_range_free(old, "free");
		}
		if (a->purger && i % 64 == 0)
			vmap_range_purge(i % 128 == 0);
		__atomic_add_fetch(&sh->ops, 1, __ATOMIC_RELAXED);
	}
	vmap_counter_thread_exit(); /* what the facade's thread-exit hook does */
	return NULL;
}

static void run_churn(unsigned nthreads, unsigned iters, size_t max_size)
{
	cr_assert(vmap_counter_go_percpu(), "threads: counters per CPU, as alloc.c does");
	static struct shared sh;
	pthread_mutex_init(&sh.mu, NULL);
	struct thread_arg args[16];
	pthread_t t[16];
	cr_assert(nthreads <= 16);
	for (unsigned i = 0; i < nthreads; i++) {
		args[i] = (struct thread_arg){&sh, i, iters, max_size, i == 0};
		cr_assert_eq(pthread_create(&t[i], NULL, churn, &args[i]), 0);
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(sh.bad, 0, "%lu corrupted, non-zero or failed blocks", sh.bad);
	cr_assert_eq(sh.ops, (unsigned long)nthreads * iters);
	vmap_range_check();
	int64_t live = 0;
	for (unsigned k = 0; k < SLOTS; k++) {
		if (!sh.p[k])
			continue;
		cr_assert(check(sh.p[k], sh.size[k], sh.seed[k]), "slot %u", k);
		live++;
	}
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), live);
	for (unsigned k = 0; k < SLOTS; k++)
		if (sh.p[k])
			vmap_range_free(sh.p[k], "free");
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_allocs), ctr(VMAP_STAT_large_frees));
	vmap_range_purge(true);
	vmap_range_check();
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	for (unsigned s = 0; s < vmap_nshards; s++)
		cr_assert_eq(vmap_shards[s].cached_bytes, 0, "shard %u", s);
}

Test(range_threads, four_shards_cross_thread_frees_keep_every_block_intact, .timeout = 120)
{
	const char *env[] = {"VMAPALLOC_SHARDS=4", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	vmap_threads_seen = true; /* the debug model walk is single-threaded */
	run_churn(8, 3000, 4 * MiB);
}

Test(range_threads, one_shard_contended_by_many_threads, .timeout = 120)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_LAZY_MAX=8M",
			     "VMAPALLOC_PURGE_DELAY_MS=1", NULL};
	range_setup(env);
	vmap_threads_seen = true; /* the debug model walk is single-threaded */
	run_churn(16, 1500, 3 * MiB);
	cr_assert(ctr(VMAP_STAT_purges) > 0);
}

Test(range_threads, many_shards_more_than_cpus, .timeout = 120)
{
	const char *env[] = {"VMAPALLOC_SHARDS=128", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	vmap_threads_seen = true; /* the debug model walk is single-threaded */
	cr_assert_eq(vmap_range_nshards(), 128);
	run_churn(4, 2000, 8 * MiB);
}

struct race_arg {
	void **blocks;
	unsigned n;
	volatile bool *go;
};

static void *free_half(void *argp)
{
	struct race_arg *a = argp;
	while (!__atomic_load_n(a->go, __ATOMIC_ACQUIRE))
		;
	for (unsigned i = 0; i < a->n; i++)
		vmap_range_free(a->blocks[i], "free");
	vmap_counter_thread_exit(); /* what the facade's thread-exit hook does */
	return NULL;
}

Test(range_threads, concurrent_frees_of_neighbours_merge_correctly, .timeout = 60)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0",
			     "VMAPALLOC_LAZY_MAX=256K", NULL};
	range_setup(env);
	vmap_threads_seen = true; /* the debug model walk is single-threaded */
	cr_assert(vmap_counter_go_percpu());
	enum { N = 2000 };
	static void *even[N / 2], *odd[N / 2];
	for (int round = 0; round < 5; round++) {
		for (unsigned i = 0; i < N; i++) {
			bool zero;
			void *p = vmap_range_alloc(4096 * (1 + i % 3), VMAP_PAGE, &zero);
			cr_assert_not_null(p);
			(i % 2 ? odd : even)[i / 2] = p;
		}
		volatile bool go = false;
		struct race_arg a = {even, N / 2, &go}, b = {odd, N / 2, &go};
		pthread_t ta, tb;
		pthread_create(&ta, NULL, free_half, &a);
		pthread_create(&tb, NULL, free_half, &b);
		__atomic_store_n(&go, true, __ATOMIC_RELEASE);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		vmap_range_check();
		vmap_range_purge(true);
		vmap_range_check();
		cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
		cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	}
}
