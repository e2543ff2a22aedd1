/*
 * alloc.c — unit tests of core/alloc.c: the malloc-family facade.
 *
 * The facade initialises itself on its first call from `environ` (options)
 * and glibc's own allocator (found through dl_iterate_phdr), so each Test
 * sets its VMAPALLOC_* variables before calling any vmap_* function; Criterion
 * runs each Test in a fresh process.
 */
#include "unit.h"

#include <gnu/libc-version.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>

#include "alloc.h"
#include "counter.h"
#include "stats.h"

extern char **environ;

/* Drops inherited VMAPALLOC_* variables, then sets the given ones. */
static void env_set(const char *const *vars)
{
	for (;;) {
		char name[256] = "";
		for (char **e = environ; *e; e++) {
			if (strncmp(*e, "VMAPALLOC_", 10) == 0) {
				size_t n = strcspn(*e, "=");
				if (n < sizeof name) {
					memcpy(name, *e, n);
					name[n] = '\0';
				}
				break;
			}
		}
		if (!name[0])
			break;
		unsetenv(name);
	}
	setenv("VMAPALLOC_SHARDS", "1", 1);
	setenv("VMAPALLOC_PURGE_DELAY_MS", "0", 1);
	for (; vars && *vars; vars++) {
		char buf[256];
		snprintf(buf, sizeof buf, "%s", *vars);
		char *eq = strchr(buf, '=');
		cr_assert_not_null(eq);
		*eq = '\0';
		setenv(buf, eq + 1, 1);
	}
}

/* ... then initialises vmapalloc and sets the arena up. */
static void env_setup(const char *const *vars)
{
	env_set(vars);
	vmap_init();
	cr_assert(!vmap_range_enabled(), "the arena is set up on the first large request only");
	cr_assert(vmap_range_ready(), "the arena could be reserved");
	cr_assert(vmap_range_enabled());
}

static void setup(void)
{
	env_setup(NULL);
}

Test(alloc, malloc_zero_returns_unique_pointers, .init = setup)
{
	void *a = vmap_malloc(0), *b = vmap_malloc(0);
	cr_assert_not_null(a);
	cr_assert_not_null(b);
	cr_assert_neq(a, b);
	vmap_free(a);
	vmap_free(b);
}

static void small_and_large(size_t large_above)
{
	int64_t la = ctr(VMAP_STAT_large_allocs), sa = ctr(VMAP_STAT_small_allocs);
	int64_t lf = ctr(VMAP_STAT_large_frees), sf = ctr(VMAP_STAT_small_frees);
	void *s = vmap_malloc(1000);
	void *edge = vmap_malloc(large_above);
	void *l = vmap_malloc(large_above + 1);
	cr_assert(s && edge && l);
	cr_assert_not(vmap_range_owns(s));
	cr_assert_not(vmap_range_owns(edge), "the boundary itself is small");
	cr_assert(vmap_range_owns(l));
	cr_assert_eq(ctr(VMAP_STAT_large_allocs), la + 1);
	cr_assert_eq(ctr(VMAP_STAT_small_allocs), sa + 2);
	cr_assert(vmap_usable_size(s) >= 1000);
	cr_assert(vmap_usable_size(l) >= large_above + 1);
	cr_assert_eq(vmap_usable_size(NULL), 0);
	vmap_free(s);
	vmap_free(edge);
	vmap_free(l);
	cr_assert_eq(ctr(VMAP_STAT_large_frees), lf + 1);
	cr_assert_eq(ctr(VMAP_STAT_small_frees), sf + 2);
}

Test(alloc, small_requests_go_to_glibc_large_to_the_arena)
{
	const char *vars[] = {"VMAPALLOC_BACKEND=libc", NULL};
	env_setup(vars);
	small_and_large(64 * KiB); /* SMALL_MAX */
}

/* BACKEND=auto: as long as no arena is set up, glibc keeps what it would keep
 * in its heap (up to its first mmap threshold), so a short process sets up no
 * arena at all; once one is, blocks over SMALL_MAX go there. */
Test(alloc, auto_keeps_blocks_up_to_128k_in_glibc_until_there_is_an_arena)
{
	const char *vars[] = {"VMAPALLOC_BACKEND=auto", NULL};
	env_set(vars);
	vmap_init();
	void *early = vmap_malloc(64 * KiB + 1);
	cr_assert_not(vmap_range_owns(early), "glibc's while there is no arena");
	cr_assert_eq(ctr(VMAP_STAT_regions), 0, "no arena set up for it");
	small_and_large(128 * KiB);
	void *later = vmap_malloc(64 * KiB + 1);
	cr_assert(vmap_range_owns(later), "the arena's once it is set up");
	vmap_free(early);
	vmap_free(later);
}

Test(alloc, guard_keeps_the_boundary_at_small_max)
{
	const char *vars[] = {"VMAPALLOC_BACKEND=auto", "VMAPALLOC_GUARD=1", NULL};
	env_setup(vars);
	void *mid = vmap_malloc(64 * KiB + 1);
	cr_assert(vmap_range_owns(mid));
	vmap_free(mid);
}

Test(alloc, small_max_option_moves_the_boundary)
{
	const char *vars[] = {"VMAPALLOC_SMALL_MAX=1M", NULL};
	env_setup(vars);
	void *p = vmap_malloc(512 * KiB);
	void *q = vmap_malloc(MiB + 1);
	cr_assert_not(vmap_range_owns(p));
	cr_assert(vmap_range_owns(q));
	vmap_free(p);
	vmap_free(q);
}

Test(alloc, huge_malloc_fails_with_enomem, .init = setup)
{
	errno = 0;
	cr_assert_null(vmap_malloc((size_t)PTRDIFF_MAX + 1));
	cr_assert_eq(errno, ENOMEM);
	errno = 0;
	cr_assert_null(vmap_malloc(SIZE_MAX));
	cr_assert_eq(errno, ENOMEM);
}

Test(alloc, calloc_overflow_sets_enomem, .init = setup)
{
	errno = 0;
	cr_assert_null(vmap_calloc(SIZE_MAX / 2, 3));
	cr_assert_eq(errno, ENOMEM);
	errno = 0;
	cr_assert_null(vmap_calloc((size_t)1 << 32, (size_t)1 << 32));
	cr_assert_eq(errno, ENOMEM);
	errno = 0;
	cr_assert_null(vmap_calloc(1, (size_t)PTRDIFF_MAX + 1));
	cr_assert_eq(errno, ENOMEM);
}

Test(alloc, calloc_zero_is_valid, .init = setup)
{
	void *p = vmap_calloc(0, 100), *q = vmap_calloc(100, 0);
	cr_assert(p && q && p != q);
	vmap_free(p);
	vmap_free(q);
}

Test(alloc, large_calloc_is_zero_and_skips_the_memset_when_fresh, .init = setup)
{
	unsigned char *p = vmap_calloc(1, 8 * MiB);
	cr_assert_not_null(p);
	cr_assert(vmap_range_owns(p));
	cr_assert(all_zero(p, 8 * MiB));
	cr_assert_eq(ctr(VMAP_STAT_calloc_zero_skipped), 1);
	vmap_free(p);
}

Test(alloc, calloc_of_a_reused_dirty_block_is_zero, .init = setup)
{
	unsigned char *p = vmap_malloc(3 * MiB);
	memset(p, 0xff, 3 * MiB);
	vmap_free(p);
	unsigned char *q = vmap_calloc(3, MiB);
	cr_assert(all_zero(q, 3 * MiB), "calloc clears a reused area");
	if (q == p)
		cr_assert_eq(ctr(VMAP_STAT_calloc_zero_skipped), 0, "dirty memory needs the memset");
	vmap_free(q);
}

Test(alloc, calloc_after_trim_is_zero_without_memset, .init = setup)
{
	unsigned char *p = vmap_malloc(3 * MiB);
	memset(p, 0xff, 3 * MiB);
	vmap_free(p);
	cr_assert_eq(vmap_trim(0), 1, "something was released");
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	unsigned char *q = vmap_calloc(3, MiB);
	cr_assert(all_zero(q, 3 * MiB));
	cr_assert_eq(ctr(VMAP_STAT_calloc_zero_skipped), 1, "purged memory is known zero");
	vmap_free(q);
}

Test(alloc, realloc_null_is_malloc, .init = setup)
{
	void *p = vmap_realloc(NULL, 200 * KiB);
	cr_assert_not_null(p);
	cr_assert(vmap_range_owns(p));
	vmap_free(p);
}

Test(alloc, realloc_to_zero_frees_and_returns_null, .init = setup)
{
	void *p = vmap_malloc(200 * KiB);
	cr_assert_null(vmap_realloc(p, 0));
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0, "the block was freed");
	void *s = vmap_malloc(100);
	cr_assert_null(vmap_realloc(s, 0));
}

Test(alloc, realloc_grow_chain_keeps_contents, .init = setup)
{
	size_t size = 64 * KiB;
	unsigned char *p = vmap_malloc(size);
	fill(p, size, size);
	for (size_t next = size * 2; next <= 64 * MiB; next *= 2) {
		unsigned char *q = vmap_realloc(p, next);
		cr_assert_not_null(q, "realloc to %zu", next);
		cr_assert(check(q, size, size), "contents lost growing %zu -> %zu", size, next);
		cr_assert(vmap_usable_size(q) >= next);
		p = q;
		size = next;
		fill(p, size, size);
	}
	int64_t in_place = ctr(VMAP_STAT_realloc_in_place);
	int64_t moved = ctr(VMAP_STAT_realloc_moved_pages);
	int64_t copied = ctr(VMAP_STAT_realloc_copied);
	cr_assert(in_place + moved + copied > 0);
	cr_assert(in_place > 0, "growing into the free rest of a chunk happens in place");
	cr_assert(moved > 0, "crossing into a big chunk moves page tables");
	cr_assert_eq(ctr(VMAP_STAT_realloc_calls), 10);
	vmap_free(p);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
}

Test(alloc, realloc_moving_a_big_block_keeps_contents, .init = setup)
{
	unsigned char *p = vmap_malloc(4 * MiB);
	unsigned char *blocker = vmap_malloc(4 * MiB); /* no room to grow in place */
	fill(p, 4 * MiB, 3);
	unsigned char *q = vmap_realloc(p, 24 * MiB);
	cr_assert_neq(q, p);
	cr_assert(check(q, 4 * MiB, 3));
	cr_assert_eq(ctr(VMAP_STAT_realloc_moved_pages), 1);
	vmap_free(q);
	vmap_free(blocker);
}

Test(alloc, realloc_shrinking_far_copies_to_a_smaller_block, .init = setup)
{
	unsigned char *p = vmap_malloc(8 * MiB);
	fill(p, 8 * MiB, 4);
	unsigned char *q = vmap_realloc(p, 100 * KiB);
	cr_assert_neq(q, p);
	cr_assert(check(q, 100 * KiB, 4));
	cr_assert(vmap_usable_size(q) < MiB);
	cr_assert_eq(ctr(VMAP_STAT_realloc_copied), 1);
	unsigned char *r = vmap_realloc(q, 1000); /* to glibc */
	cr_assert_not(vmap_range_owns(r));
	cr_assert_eq(r[0], pat(4, 0), "the kept part was copied");
	vmap_free(r);
}

Test(alloc, realloc_shrinking_a_little_stays_in_place, .init = setup)
{
	unsigned char *p = vmap_malloc(8 * MiB);
	unsigned char *q = vmap_realloc(p, 7 * MiB);
	cr_assert_eq(q, p);
	vmap_free(q);
}

/* Pages of [p, p + len) that are resident. */
static size_t resident_pages(const void *p, size_t len)
{
	unsigned char vec[1024];
	size_t n = len / 4096, r = 0;
	cr_assert(n <= sizeof vec);
	cr_assert_eq(mincore((void *)p, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		r += vec[i] & 1;
	return r;
}

/* Shrinking in place by 4 pages or more hands the tail back: its pages are
 * no longer resident, the block's usable size and the bytes in use drop, and
 * the tail serves the next request; by fewer, the block stays as it was. */
Test(alloc, realloc_shrinking_in_place_returns_the_tail, .init = setup)
{
	unsigned char *p = vmap_malloc(512 * KiB);
	fill(p, 512 * KiB, 6);
	int64_t in_use = ctr(VMAP_STAT_large_bytes_in_use);
	unsigned char *q = vmap_realloc(p, 512 * KiB - 3 * 4096);
	cr_assert_eq(q, p);
	cr_assert_eq(vmap_usable_size(q), 512 * KiB, "3 pages fewer: kept");
	cr_assert_eq(ctr(VMAP_STAT_realloc_tails_released), 0);
	q = vmap_realloc(p, 300 * KiB);
	cr_assert_eq(q, p, "at least half of it stays used: in place");
	cr_assert(check(q, 300 * KiB, 6), "the kept part is intact");
	cr_assert_eq(vmap_usable_size(q), 300 * KiB);
	cr_assert_eq(ctr(VMAP_STAT_realloc_tails_released), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), in_use - 212 * KiB);
	cr_assert_eq(resident_pages(q + 76 * 4096, 53 * 4096), 0, "the tail was purged");
	unsigned char *r = vmap_malloc(200 * KiB);
	cr_assert_eq(r, q + 76 * 4096, "the tail, after the guard page, is free space");
	vmap_free(r);
	vmap_free(q);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
}

Test(alloc, realloc_shrinking_keeps_the_tail_with_guard_pages)
{
	env_setup((const char *const[]){"VMAPALLOC_GUARD=1", NULL});
	unsigned char *p = vmap_malloc(512 * KiB);
	cr_assert_eq(vmap_realloc(p, 300 * KiB), p);
	cr_assert_eq(vmap_usable_size(p), 512 * KiB, "the guard page stays where it was");
	cr_assert_eq(ctr(VMAP_STAT_realloc_tails_released), 0);
	vmap_free(p);
}

Test(alloc, realloc_of_a_glibc_block_into_the_arena, .init = setup)
{
	unsigned char *p = vmap_malloc(1000);
	memset(p, 0x61, 1000);
	unsigned char *q = vmap_realloc(p, MiB);
	cr_assert(vmap_range_owns(q));
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(q[i], 0x61);
	vmap_free(q);
}

Test(alloc, reallocarray_overflow_sets_enomem, .init = setup)
{
	void *p = vmap_malloc(100);
	errno = 0;
	cr_assert_null(vmap_reallocarray(p, SIZE_MAX / 2, 3));
	cr_assert_eq(errno, ENOMEM);
	void *q = vmap_reallocarray(p, 10, 20); /* p was left alone */
	cr_assert_not_null(q);
	vmap_free(q);
}

Test(alloc, realloc_huge_fails_and_keeps_the_block, .init = setup)
{
	unsigned char *p = vmap_malloc(200 * KiB);
	memset(p, 7, 200 * KiB);
	errno = 0;
	cr_assert_null(vmap_realloc(p, (size_t)PTRDIFF_MAX + 1));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_eq(p[200 * KiB - 1], 7);
	vmap_free(p);
}

Test(alloc, posix_memalign_rejects_bad_alignments, .init = setup)
{
	static const size_t bad[] = {0, 1, 2, 3, 4, 12, 24, 48, 4097, SIZE_MAX};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		void *out = (void *)0x1234;
		errno = 0;
		cr_assert_eq(vmap_posix_memalign(&out, bad[i], 100), EINVAL, "align %zu", bad[i]);
		cr_assert_eq(out, (void *)0x1234, "*out untouched on error");
		cr_assert_eq(errno, 0, "posix_memalign does not set errno");
	}
}

Test(alloc, posix_memalign_honours_alignments, .init = setup)
{
	for (size_t align = sizeof(void *); align <= 64 * MiB; align <<= 1) {
		void *p = NULL;
		size_t size = align < 4096 ? 100 : 5000;
		cr_assert_eq(vmap_posix_memalign(&p, align, size), 0, "align %zu", align);
		cr_assert_eq((uintptr_t)p % align, 0, "align %zu -> %p", align, p);
		memset(p, 1, size);
		vmap_free(p);
	}
}

Test(alloc, posix_memalign_failure_returns_and_sets_enomem, .init = setup)
{
	void *out = NULL;
	errno = 1234;
	cr_assert_eq(vmap_posix_memalign(&out, 4096, (size_t)PTRDIFF_MAX + 1), ENOMEM);
	cr_assert_eq(errno, ENOMEM, "glibc sets errno too");
	errno = 1234;
	cr_assert_eq(vmap_posix_memalign(&out, 4096, 100), 0);
	cr_assert_eq(errno, 1234, "a success leaves errno alone");
	vmap_free(out);
}

/* glibc >= 2.38 rejects a non-power-of-two alignment (C17); older ones round
 * it up like memalign.  vmapalloc behaves as the running glibc does. */
static bool glibc_strict_aligned_alloc(void)
{
	int major = 0, minor = 0;
	sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
	return major > 2 || (major == 2 && minor >= 38);
}

Test(alloc, aligned_alloc_follows_the_running_glibc, .init = setup)
{
	errno = 0;
	void *p = vmap_aligned_alloc(3, 64);
	if (glibc_strict_aligned_alloc()) {
		cr_assert_null(p);
		cr_assert_eq(errno, EINVAL);
	} else {
		cr_assert_not_null(p, "glibc %s rounds the alignment up", gnu_get_libc_version());
		cr_assert_eq((uintptr_t)p % 4, 0);
		vmap_free(p);
	}
	void *q = vmap_aligned_alloc(64, 100); /* any size (C17 DR 460) */
	cr_assert_not_null(q);
	cr_assert_eq((uintptr_t)q % 64, 0);
	vmap_free(q);
	void *r = vmap_aligned_alloc(2 * MiB, 10);
	cr_assert_eq((uintptr_t)r % (2 * MiB), 0);
	vmap_free(r);
}

Test(alloc, memalign_rounds_alignment_up, .init = setup)
{
	void *p = vmap_memalign(24, 100);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 32, 0);
	vmap_free(p);
	void *q = vmap_memalign(3000, 100);
	cr_assert_eq((uintptr_t)q % 4096, 0);
	vmap_free(q);
	errno = 0;
	cr_assert_null(vmap_memalign(SIZE_MAX, 100));
	cr_assert_eq(errno, EINVAL);
}

Test(alloc, valloc_and_pvalloc_are_page_aligned, .init = setup)
{
	void *a = vmap_valloc(100);
	void *b = vmap_pvalloc(100);
	void *c = vmap_pvalloc(0);
	cr_assert(a && b && c);
	cr_assert_eq((uintptr_t)a % 4096, 0);
	cr_assert_eq((uintptr_t)b % 4096, 0);
	cr_assert(vmap_usable_size(b) >= 4096, "pvalloc rounds the size to pages");
	cr_assert(vmap_usable_size(c) >= 4096);
	errno = 0;
	cr_assert_null(vmap_pvalloc(SIZE_MAX - 100));
	cr_assert_eq(errno, ENOMEM);
	vmap_free(a);
	vmap_free(b);
	vmap_free(c);
}

Test(alloc, free_preserves_errno, .init = setup)
{
	void *l = vmap_malloc(MiB);
	void *s = vmap_malloc(10);
	errno = 4321;
	vmap_free(l);
	cr_assert_eq(errno, 4321);
	vmap_free(s);
	cr_assert_eq(errno, 4321);
	vmap_free(NULL);
	cr_assert_eq(errno, 4321);
}

Test(alloc, free_of_a_large_block_twice_aborts, .init = setup, .signal = SIGABRT)
{
	void *p = vmap_malloc(MiB);
	vmap_free(p);
	vmap_free(p);
}

Test(alloc, trim_releases_the_cache, .init = setup)
{
	void *p[8];
	for (int i = 0; i < 8; i++)
		p[i] = vmap_malloc(512 * KiB);
	for (int i = 0; i < 8; i++)
		vmap_free(p[i]);
	cr_assert(ctr(VMAP_STAT_cached_bytes) > 0);
	cr_assert_eq(vmap_trim(0), 1);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	cr_assert(ctr(VMAP_STAT_purged_bytes) >= (int64_t)(4 * MiB));
}

Test(alloc, mallinfo2_counts_large_blocks, .init = setup)
{
	void *p = vmap_malloc(5 * MiB);
	struct mallinfo2 mi = vmap_mallinfo2();
	cr_assert(mi.hblks >= 1);
	cr_assert(mi.hblkhd >= 5 * MiB);
	cr_assert(mi.uordblks >= 5 * MiB);
	vmap_free(p);
}

Test(alloc, malloc_info_writes_xml_and_rejects_options, .init = setup)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert_eq(vmap_malloc_info(0, f), 0);
	fclose(f);
	cr_assert(len > 0);
	cr_assert(strstr(buf, "<malloc") != NULL, "%s", buf);
	free(buf);
	errno = 0;
	cr_assert_eq(vmap_malloc_info(1, stdout), -1);
	cr_assert_eq(errno, EINVAL);
}

static void *second_thread(void *arg)
{
	(void)arg;
	void *p = vmap_malloc(MiB);
	vmap_free(p);
	return NULL;
}

Test(alloc, a_second_thread_switches_counters_to_per_cpu, .init = setup)
{
	void *p = vmap_malloc(MiB);
	vmap_free(p);
	cr_assert_not(vmap_counter_is_percpu(), "one thread: atomic counters");
	pthread_t t;
	pthread_create(&t, NULL, second_thread, NULL);
	pthread_join(t, NULL);
	cr_assert(vmap_counter_is_percpu());
	cr_assert_eq(ctr(VMAP_STAT_counter_mode_switches), 1);
	cr_assert_eq(ctr(VMAP_STAT_malloc_calls), 2, "malloc_calls %ld", (long)ctr(VMAP_STAT_malloc_calls));
	cr_assert_eq(ctr(VMAP_STAT_free_calls), 2);
}

struct mt_arg {
	unsigned idx;
	unsigned long bad;
};

static void *mt_worker(void *argp)
{
	struct mt_arg *a = argp;
	uint64_t x = 88172645463325252ull + a->idx;
	for (int i = 0; i < 2000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t size = 1 + x % (x % 4 ? 4096 : 2 * MiB);
		unsigned char *p = vmap_malloc(size);
		fill(p, size, x);
		if (x % 3 == 0) {
			size_t n2 = size * 2 + 1;
			unsigned char *q = vmap_realloc(p, n2);
			if (!check(q, size, x))
				a->bad++;
			p = q;
			size = n2;
			fill(p, size, x);
		}
		if (!check(p, size, x))
			a->bad++;
		vmap_free(p);
	}
	return NULL;
}

Test(alloc, threads_through_the_facade, .init = setup, .timeout = 120)
{
	struct mt_arg a[8];
	pthread_t t[8];
	for (unsigned i = 0; i < 8; i++) {
		a[i] = (struct mt_arg){i, 0};
		pthread_create(&t[i], NULL, mt_worker, &a[i]);
	}
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(a[i].bad, 0, "thread %u saw corrupted blocks", i);
	}
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq((int64_t)vmap_stat_value(VMAP_STAT_malloc_calls), 8 * 2000, "malloc_calls %lld", (long long)vmap_stat_value(VMAP_STAT_malloc_calls));
}

/* Lazy set-up: small allocations reserve nothing and map no shard;
 * the first large one sets the arena up. */
Test(alloc, small_only_process_reserves_nothing)
{
	setenv("VMAPALLOC_PURGE_DELAY_MS", "0", 1);
	vmap_init();
	void *p[64];
	for (int i = 0; i < 64; i++)
		cr_assert_not_null(p[i] = vmap_malloc(16 + (size_t)i * 100));
	for (int i = 0; i < 64; i++)
		vmap_free(p[i]);
	cr_assert(!vmap_range_enabled());
	cr_assert_null(vmap_shards);
	cr_assert_eq(vmap_nshards, 0);
	cr_assert_eq(vmap_nregions, 0);
	void *big = vmap_malloc(1 << 20);
	cr_assert_not_null(big);
	cr_assert(vmap_range_enabled());
	cr_assert(vmap_range_owns(big));
	cr_assert(vmap_nregions >= 1 && vmap_nshards >= 1);
	vmap_free(big);
}

/* A freed area serves a smaller request at its start (the thread's hot area,
 * split), and comes back whole when that block is freed. */
Test(alloc, thread_cache_serves_a_smaller_request_from_the_hot_area, .init = setup)
{
	void *p = vmap_malloc(100 * 4096);
	cr_assert_not_null(p);
	memset(p, 1, 100 * 4096);
	vmap_free(p);
	void *q = vmap_malloc(95 * 4096);
	cr_assert_eq(q, p, "the freed area comes back for a smaller request");
	cr_assert_eq(vmap_usable_size(q), 95 * 4096, "with the size asked for");
	vmap_free(q);
	void *r = vmap_malloc(60 * 4096);
	cr_assert_eq(r, p, "merged back, split again");
	vmap_free(r);
	void *s = vmap_malloc(100 * 4096);
	cr_assert_eq(s, p, "whole again");
	cr_assert_eq(vmap_usable_size(s), 100 * 4096);
	vmap_free(s);
}

/* With per-CPU counters, the peak of large bytes in use is noted at counter
 * folds; a block of tens of MiB that lives between two folds escaped it, the
 * purge limit (up to twice the peak) never grew, and every free of the block
 * purged it.  Blocks of 8 MiB and more now note the peak exactly. */
Test(alloc, a_big_block_freed_and_allocated_again_is_not_purged_each_time)
{
	const char *vars[] = {"VMAPALLOC_COUNTER=percpu", "VMAPALLOC_PURGE_DELAY_MS=2000", NULL};
	env_setup(vars);
	for (int i = 0; i < 24; i++) {
		char *p = vmap_malloc(64 << 20);
		cr_assert_not_null(p);
		p[0] = p[(64 << 20) - 1] = (char)i;
		vmap_free(p);
	}
	int64_t purges = vmap_stat_read(VMAP_STAT_purges);
	cr_assert_leq(purges, 2, "%lld purges in 24 cycles of one 64 MiB block", (long long)purges);
}

/* REQUIREMENTS.md #4 (tests/reliability): a pointer that is nobody's block
 * (on this stack) goes to glibc's free, which stops the program ("free():
 * invalid pointer"), as it would without vmapalloc; glibc's blocks of every
 * kind still go to glibc and come back. */
static void *opaque(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

Test(alloc, glibc_blocks_go_to_glibc, .init = setup)
{
	int64_t sf = ctr(VMAP_STAT_small_frees);
	for (size_t n = 16; n <= 64 * KiB; n *= 4) {
		void *p = vmap_malloc(n), *q = vmap_memalign(256, n);
		cr_assert(p && q && !vmap_range_owns(p) && !vmap_range_owns(q));
		cr_assert(vmap_usable_size(p) >= n);
		p = vmap_realloc(p, n + 8);
		cr_assert_not_null(p);
		vmap_free(p);
		vmap_free(q);
	}
	cr_assert(ctr(VMAP_STAT_small_frees) > sf);
}

Test(alloc, a_pointer_on_the_stack_goes_to_glibcs_free, .init = setup, .signal = SIGABRT)
{
	/* A zero size word before it: glibc's "free(): invalid pointer". */
	_Alignas(16) size_t local[8] = {0};
	vmap_free(opaque(&local[2]));
}

/* ---- the express path (core/express.c) ------------------------------------ */

#include "express.h"
#include "slab.h"
#include "pte.h"

/* A 128 KiB block, allocated and freed once through the facade: the thread's
 * cache then holds it as its hot area (the first free takes the general
 * path, which makes the area hot). */
static void *warm_block(void)
{
	void *p = vmap_malloc(128 * KiB);
	cr_assert(p && vmap_range_owns(p));
	vmap_free(p);
	return p;
}

Test(alloc, express_lends_and_takes_back_the_hot_area, .init = setup)
{
	void *p = warm_block();
	int64_t cached = ctr(VMAP_STAT_thread_cached_bytes), hits = ctr(VMAP_STAT_pool_hits);
	int64_t allocs = ctr(VMAP_STAT_large_allocs), frees = ctr(VMAP_STAT_large_frees);
	cr_assert_eq(cached, 33 * 4096, "the area and its guard page cached");
	void *q = vmap_express_alloc(128 * KiB);
	cr_assert_eq(q, p, "the hot area, lent");
	cr_assert_eq(vmap_tag_state(tag_of(q)), VMAP_ST_LIVE);
	cr_assert_eq(vmap_usable_size(q), 128 * KiB);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), (int64_t)(128 * KiB));
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), 0);
	cr_assert_eq(ctr(VMAP_STAT_pool_hits), hits + 1);
	cr_assert_eq(ctr(VMAP_STAT_large_allocs), allocs + 1);
	cr_assert_null(vmap_express_alloc(128 * KiB), "nothing more cached of that size");
	memset(q, 7, 128 * KiB);
	cr_assert(vmap_express_free(q, vmap_region_of((uintptr_t)q)));
	cr_assert_eq(vmap_tag_state(tag_of(q)), VMAP_ST_CACHED);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), cached);
	cr_assert_eq(ctr(VMAP_STAT_large_frees), frees + 1);
	/* Through the facade, the same block round and round. */
	for (int i = 0; i < 1000; i++) {
		void *r = vmap_malloc(128 * KiB);
		cr_assert_eq(r, p);
		vmap_free(r);
	}
	cr_assert_eq(ctr(VMAP_STAT_large_allocs), allocs + 1001);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), cached);
}

/* Blocks that do not take the hot slot go to the LIFO of their size, and
 * come back newest first. */
Test(alloc, express_keeps_smaller_areas_in_their_lifo, .init = setup)
{
	void *big = vmap_malloc(256 * KiB), *a = vmap_malloc(128 * KiB), *b = vmap_malloc(128 * KiB);
	void *keep = vmap_malloc(128 * KiB); /* (b's right neighbour stays live) */
	cr_assert(big && a && b && keep);
	vmap_free(big); /* the hot area (general path) */
	int64_t cached = ctr(VMAP_STAT_thread_cached_bytes);
	cr_assert(vmap_express_free(a, vmap_region_of((uintptr_t)a)));
	cr_assert(vmap_express_free(b, vmap_region_of((uintptr_t)b)));
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), cached + 2 * 33 * 4096);
	cr_assert_eq(vmap_express_alloc(128 * KiB), b, "newest first");
	cr_assert_eq(vmap_express_alloc(128 * KiB), a);
	cr_assert_null(vmap_express_alloc(128 * KiB), "the hot area is larger: the general path splits it");
	void *c = vmap_malloc(128 * KiB);
	cr_assert_eq(c, big, "split from the hot area");
	vmap_free(c);
	vmap_free(b);
	vmap_free(a);
	vmap_free(keep);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), 0);
}

/* What the express path must leave alone, it leaves as it was: the general
 * path then serves it, or stops the program. */
Test(alloc, express_refuses_what_is_not_a_live_block_start, .init = setup)
{
	char *p = warm_block();
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	int64_t cached = ctr(VMAP_STAT_thread_cached_bytes);
	cr_assert_not(vmap_express_free(p, r), "already cached: a double free");
	p = vmap_malloc(128 * KiB);
	cr_assert_not(vmap_express_free(p + 4096, r), "an interior page");
	cr_assert_not(vmap_express_free(p + 16, r), "inside the first page");
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_LIVE, "untouched");
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), 0);
	cr_assert_null(vmap_express_alloc(256 * KiB), "a size the cache does not hold");
	vmap_free(p);
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), cached);
	/* A trim the cache has not seen yet: the general path drains it first. */
	cr_assert_eq(vmap_trim(0), 1);
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), 0);
	cr_assert_null(vmap_express_alloc(128 * KiB));
}

Test(alloc, express_double_free_aborts, .init = setup, .signal = SIGABRT)
{
	void *p = warm_block();
	p = vmap_malloc(128 * KiB); /* lent by the express path */
	vmap_free(p);               /* taken back by it */
	vmap_free(p);
}

/* With the slabs on, free's fast path sends a large block of the first
 * region straight to the express path (fast.h, direct.c vmap_free_large). */
Test(alloc, express_behind_the_slabs_fast_free)
{
	static const char *const env[] = {"VMAPALLOC_BACKEND=builtin", NULL};
	env_setup(env);
	void *s = vmap_malloc(64);
	cr_assert(s && vmap_in_slab((uintptr_t)s), "the slabs are on");
	void *p = warm_block();
	int64_t frees = ctr(VMAP_STAT_large_frees), calls = ctr(VMAP_STAT_free_calls);
	for (int i = 0; i < 100; i++) {
		void *q = vmap_malloc(128 * KiB);
		cr_assert_eq(q, p);
		vmap_free(q);
	}
	cr_assert_eq(ctr(VMAP_STAT_large_frees), frees + 100);
	cr_assert_eq(ctr(VMAP_STAT_free_calls), calls + 100);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
	cr_assert_eq(ctr(VMAP_STAT_thread_cached_bytes), 33 * 4096);
	vmap_free(s);
}
