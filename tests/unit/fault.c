/*
 * fault.c — fault-injection tests of the core through the OS seam (fake_os.c).
 *
 * The system refuses something (address space, a page-table mapping, madvise,
 * mremap); the core must report failure where it documents it and keep every
 * structure consistent (the VMAP_DEBUG model check runs after each range
 * operation), so that once the fault is gone everything works again.
 */
#include "unit.h"

#include <sys/mman.h>

#include "fake_os.h"
#include "mmap.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

TestSuite(fault, .timeout = 30);

static void parse_ok(const char *const *env)
{
	cr_assert_eq(unit_parse(env), 0);
	vmap_counter_init(2);
}

/* ---- init ------------------------------------------------------------------ */

Test(fault, refused_reservation_is_halved)
{
	const char *env[] = {"VMAPALLOC_RESERVE=1G", NULL};
	parse_ok(env);
	fake_fail_nth(FAKE_RESERVE, 1, ENOMEM);
	cr_assert_eq(vmap_range_init(), 0);
	size_t sizes[8];
	cr_assert_eq(fake_reserve_sizes(sizes, 8), 2);
	cr_assert_eq(sizes[0], GiB);
	cr_assert_eq(sizes[1], 512 * MiB);
	cr_assert_eq(vmap_nregions, 1);
	cr_assert_eq(vmap_regions[0].size, 512 * MiB, "the region is the halved size");
	cr_assert_eq(vmap_regions[0].nchunks, 8);
	bool zero;
	void *p = vmap_range_alloc(MiB, VMAP_PAGE, &zero);
	cr_assert_not_null(p);
	vmap_range_free(p, "free");
}

Test(fault, default_reservation_halves_until_accepted)
{
	parse_ok(NULL);
	fake_fail_next(FAKE_RESERVE, 3, ENOMEM); /* 64G, 32G, 16G refused */
	cr_assert_eq(vmap_range_init(), 0);
	size_t sizes[8];
	cr_assert_eq(fake_reserve_sizes(sizes, 8), 4);
	cr_assert_eq(sizes[3], 8 * GiB);
	cr_assert_eq(vmap_regions[0].size, 8 * GiB);
}

Test(fault, reservation_gives_up_at_the_floor)
{
	const char *env[] = {"VMAPALLOC_RESERVE=512M", NULL};
	parse_ok(env);
	fake_fail_always(FAKE_RESERVE, ENOMEM);
	/* 0 or an error code; the sign is not part of the contract. */
	cr_assert_neq(vmap_range_init(), 0);
	size_t sizes[8];
	cr_assert_eq(fake_reserve_sizes(sizes, 8), 2, "512M, then 256M, then no further");
	cr_assert_eq(sizes[1], 256 * MiB);
	cr_assert_eq(vmap_nregions, 0);
	bool zero;
	cr_assert_null(vmap_range_alloc(MiB, VMAP_PAGE, &zero), "no arena: NULL, no crash");
	cr_assert_not(vmap_range_owns(&zero));
}

Test(fault, shard_table_mapping_failure_fails_init)
{
	parse_ok(NULL);
	fake_fail_nth(FAKE_MMAP, 1, ENOMEM);
	cr_assert_neq(vmap_range_init(), 0);
	cr_assert_eq(fake_calls(FAKE_RESERVE), 0, "nothing reserved after the first failure");
}

Test(fault, page_table_mapping_failure_releases_the_reservation)
{
	const char *env[] = {"VMAPALLOC_RESERVE=1G", NULL};
	parse_ok(env);
	fake_fail_nth(FAKE_MMAP, 2, ENOMEM); /* 1: shards, 2: the region's page table */
	cr_assert_neq(vmap_range_init(), 0);
	cr_assert_eq(fake_failures(FAKE_MMAP), 1);
	cr_assert_eq(fake_calls(FAKE_MUNMAP), 1, "the reservation is given back");
	cr_assert_eq(vmap_nregions, 0);
	cr_assert_eq(ctr(VMAP_STAT_regions), 0);
	bool zero;
	cr_assert_null(vmap_range_alloc(MiB, VMAP_PAGE, &zero));
}

/* ---- growth ------------------------------------------------------------------ */

static const char *const small_arena[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_RESERVE=256M",
					  "VMAPALLOC_PURGE_DELAY_MS=0", NULL};

/* Fills the 256 MiB region with two 100 MiB blocks (four chunks). */
static void fill_region(void **a, void **b)
{
	bool zero;
	*a = vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero);
	*b = vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero);
	cr_assert(*a && *b);
	cr_assert_eq(ctr(VMAP_STAT_chunks_taken), 4);
	cr_assert_eq(vmap_nregions, 1);
	mark(*a, 100 * MiB, 1);
	mark(*b, 100 * MiB, 2);
}

Test(fault, chunk_acquisition_failure_returns_null_and_recovers, .timeout = 60)
{
	range_setup(small_arena);
	void *a, *b;
	fill_region(&a, &b);
	fake_fail_always(FAKE_RESERVE, ENOMEM);
	int64_t blocks = ctr(VMAP_STAT_large_blocks_in_use);
	int64_t bytes = ctr(VMAP_STAT_large_bytes_in_use);
	bool zero;
	cr_assert_null(vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero), "no room and no new region");
	cr_assert(fake_failures(FAKE_RESERVE) >= 1);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), blocks);
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), bytes);
	cr_assert_eq(vmap_nregions, 1);
	vmap_range_check();
	/* What still fits is still served: 40 MiB in the big chunks' remainder. */
	void *s = vmap_range_alloc(40 * MiB, VMAP_PAGE, &zero);
	cr_assert_not_null(s, "a block that fits in the remainder is served");
	/* The fault goes away: the next allocation adds a region. */
	fake_fail_clear(FAKE_RESERVE);
	void *c = vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero);
	cr_assert_not_null(c);
	cr_assert(zero);
	cr_assert_eq(vmap_nregions, 2);
	cr_assert_eq(ctr(VMAP_STAT_regions), 2);
	mark(c, 100 * MiB, 3);
	cr_assert(marked(a, 100 * MiB, 1) && marked(b, 100 * MiB, 2) && marked(c, 100 * MiB, 3));
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	vmap_range_free(c, "free");
	vmap_range_free(s, "free");
	vmap_range_purge(true);
	vmap_range_check();
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), 0);
}

Test(fault, page_table_failure_while_growing_returns_null_and_recovers, .timeout = 60)
{
	range_setup(small_arena);
	void *a, *b;
	fill_region(&a, &b);
	fake_fail_always(FAKE_MMAP, ENOMEM);
	bool zero;
	unsigned unmaps = fake_calls(FAKE_MUNMAP);
	cr_assert_null(vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero));
	cr_assert(fake_calls(FAKE_MUNMAP) > unmaps, "each refused region's reservation is unmapped");
	cr_assert_eq(vmap_nregions, 1);
	vmap_range_check();
	fake_fail_clear(FAKE_MMAP);
	void *c = vmap_range_alloc(100 * MiB, VMAP_PAGE, &zero);
	cr_assert_not_null(c);
	cr_assert_eq(vmap_nregions, 2);
	vmap_range_free(c, "free");
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
}

/* ---- purge ---------------------------------------------------------------------- */

static const char *const quiet[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};

Test(fault, madvise_failure_in_purge_loses_no_area)
{
	range_setup(quiet);
	enum { N = 12 };
	void *p[N];
	bool zero;
	for (int i = 0; i < N; i++)
		p[i] = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
	for (int i = 0; i < N; i += 2)
		vmap_range_free(p[i], "free");
	fake_fail_always(FAKE_MADVISE, EAGAIN);
	fake_fail_always(FAKE_MADVISE_BATCH, ENOMEM);
	size_t released = vmap_range_purge(true);
	cr_assert_eq(released, (size_t)(N / 2 * 17 * VMAP_PAGE));
	cr_assert(fake_failures(FAKE_MADVISE) + fake_failures(FAKE_MADVISE_BATCH) > 0);
	cr_assert_eq(ctr(VMAP_STAT_cached_bytes), 0);
	for (int i = 0; i < N; i += 2)
		cr_assert_eq(vmap_tag_state(tag_of(p[i])), VMAP_ST_FREE, "area %d is a free run", i);
	vmap_range_check();
	fake_fail_clear(FAKE_MADVISE);
	fake_fail_clear(FAKE_MADVISE_BATCH);
	/* Every area can be had again. */
	for (int k = 0; k < N / 2; k++) {
		void *q = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
		bool known = false;
		for (int i = 0; i < N; i += 2)
			known |= q == p[i];
		cr_assert(known, "%p: the free runs are reused first", q);
		memset(q, 1, 64 * KiB);
	}
	for (int i = 1; i < N; i += 2)
		vmap_range_free(p[i], "free");
}

Test(fault, failed_madvise_does_not_make_memory_known_zero)
{
	range_setup(quiet);
	bool zero;
	unsigned char *p = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
	memset(p, 0xab, 64 * KiB);
	vmap_range_free(p, "free");
	fake_fail_always(FAKE_MADVISE, EINVAL); /* e.g. mlock()ed memory */
	fake_fail_always(FAKE_MADVISE_BATCH, EINVAL);
	vmap_range_purge(true);
	fake_fail_clear(FAKE_MADVISE);
	fake_fail_clear(FAKE_MADVISE_BATCH);
	unsigned char *q = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
	cr_assert_eq(q, p);
	/* calloc() skips its memset when zero is set: it must be true. */
	cr_assert(!zero || all_zero(q, 64 * KiB),
		  "area reported zero but still holds 0x%02x: madvise failed, the pages were kept", q[0]);
}

Test(fault, failed_batch_falls_back_to_per_run_madvise)
{
	range_setup(quiet);
	bool zero;
	void *p[8];
	for (int i = 0; i < 8; i++) {
		p[i] = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
		memset(p[i], 0x5e, 64 * KiB);
	}
	for (int i = 0; i < 8; i += 2)
		vmap_range_free(p[i], "free");
	fake_fail_always(FAKE_MADVISE_BATCH, EAGAIN);
	vmap_range_purge(true);
	cr_assert_eq(fake_calls(FAKE_MADVISE_BATCH), 1);
	cr_assert_eq(fake_madvise_calls(MADV_DONTNEED), 4, "one madvise per run after the batch failed");
	for (int i = 0; i < 8; i += 2) {
		unsigned char *q = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
		cr_assert(zero && all_zero(q, 64 * KiB));
	}
}

/* ---- move ---------------------------------------------------------------------- */

Test(fault, mremap_failure_leaves_the_block_for_the_caller_to_copy)
{
	range_setup(quiet);
	bool zero;
	unsigned char *p = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	size_t old = vmap_range_usable(p, "test");
	fill(p, old, 77);
	void *blocker = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	fake_fail_always(FAKE_MREMAP, ENOMEM);
	bool moved = true;
	unsigned char *q = vmap_range_move(p, 16 * MiB, &moved);
	cr_assert_not_null(q);
	cr_assert_not(moved);
	cr_assert_eq(fake_calls(FAKE_MREMAP), 1);
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_LIVE, "p is still the caller's");
	cr_assert(check(p, old, 77), "p intact");
	cr_assert_eq(ctr(VMAP_STAT_realloc_moved_pages), 0);
	/* What realloc does next: copy and free. */
	memcpy(q, p, old);
	vmap_range_free(p, "free");
	cr_assert(check(q, old, 77));
	vmap_range_free(q, "free");
	vmap_range_free(blocker, "free");
	vmap_range_check();
}

/* F11: since Linux 6.17 mremap moves a source of several VMAs one VMA at a
 * time, and near vm.max_map_count it can fail after moving the first pieces
 * (their old range left empty by MREMAP_DONTUNMAP) with the destination of
 * the next one unmapped.  The bytes moved must come back: realloc used to
 * map the destination afresh over them and copy the emptied source. */
static size_t first_nonzero(const unsigned char *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (c[i])
			return i;
	return SIZE_MAX;
}

static const char *const one_shard[] = {"VMAPALLOC_SHARDS=1", NULL};

static void partial_move(bool dirty_destination)
{
	range_setup(dirty_destination ? one_shard : quiet);
	bool zero;
	unsigned char *p = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	size_t old = vmap_range_usable(p, "test");
	fill(p, 3 * MiB, 66); /* the last MiB is never touched: it reads zero */
	unsigned char *d = NULL;
	if (dirty_destination) { /* a resident, written area for the move to get */
		d = vmap_range_alloc(16 * MiB, VMAP_PAGE, &zero);
		fill(d, 16 * MiB, 99);
		vmap_range_free(d, "free");
	}
	fake_fail_next(FAKE_MREMAP, 1, ENOMEM);
	fake_mremap_partial(1 * MiB + 3 * VMAP_PAGE, 512 * KiB);
	bool moved = true;
	unsigned char *q = vmap_range_move(p, 16 * MiB, &moved);
	cr_assert_not_null(q);
	if (dirty_destination)
		cr_assert_eq(q, d, "the test's premise: the move gets the written area");
	cr_assert_not(moved);
	cr_assert_eq(fake_failures(FAKE_MREMAP), 1);
	/* The hole the moved pieces left in p is mapped again in two calls
	 * (it spans two of the undo's 256-page windows), q's in one. */
	cr_assert_eq(fake_calls(FAKE_MAP_HOLE), 3, "the holes in p and q are mapped again (%u calls)",
		     fake_calls(FAKE_MAP_HOLE));
	cr_assert(check(p, 3 * MiB, 66), "the moved pieces are back in p");
	cr_assert_eq(first_nonzero(p + 3 * MiB, old - 3 * MiB), SIZE_MAX, "nothing from q's past");
	memcpy(q, p, old); /* what realloc does next */
	vmap_range_free(p, "free");
	cr_assert(check(q, 3 * MiB, 66));
	cr_assert_eq(first_nonzero(q + 3 * MiB, old - 3 * MiB), SIZE_MAX);
	cr_assert_eq(vmap_tag_state(tag_of(q)), VMAP_ST_LIVE);
	vmap_range_free(q, "free");
	vmap_range_check();
}

Test(fault, move_failing_part_way_loses_nothing)
{
	partial_move(false);
}

Test(fault, move_failing_part_way_into_a_written_area_loses_nothing)
{
	partial_move(true);
}

/* F3: ... and when the hole cannot be mapped again (the VMA limit), the move
 * gives up with p whole.  The destination is retired (foreign: never handed
 * out again while its pages may be missing), and no longer counted live. */
Test(fault, move_whose_destination_cannot_be_mapped_again_is_not_counted_live)
{
	range_setup(quiet);
	bool zero;
	unsigned char *p = vmap_range_alloc(4 * MiB, VMAP_PAGE, &zero);
	size_t old = vmap_range_usable(p, "test");
	fill(p, old, 55);
	int64_t blocks = ctr(VMAP_STAT_large_blocks_in_use);
	int64_t bytes = ctr(VMAP_STAT_large_bytes_in_use);
	/* What a kernel's failing move of one VMA leaves: the source whole,
	 * the destination unmapped (mremap unmaps it first). */
	fake_fail_always(FAKE_MREMAP, ENOMEM);
	fake_mremap_partial(0, 256 * KiB);
	fake_fail_always(FAKE_MAP_HOLE, ENOMEM);
	bool moved = true;
	cr_assert_null(vmap_range_move(p, 16 * MiB, &moved));
	cr_assert_not(moved);
	cr_assert_eq(fake_calls(FAKE_MAP_HOLE), 1);
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), blocks, "the retired destination is not live");
	cr_assert_eq(ctr(VMAP_STAT_large_bytes_in_use), bytes);
	cr_assert_eq(vmap_tag_state(tag_of(p)), VMAP_ST_LIVE, "p is still the caller's");
	cr_assert(check(p, old, 55), "p intact, its moved half back");
	fake_fail_clear(FAKE_MREMAP);
	fake_fail_clear(FAKE_MAP_HOLE);
	vmap_range_free(p, "free");
	cr_assert_eq(ctr(VMAP_STAT_large_blocks_in_use), blocks - 1);
	vmap_range_check();
}

Test(fault, move_without_an_area_returns_null_and_keeps_the_block)
{
	range_setup(small_arena);
	void *a, *b;
	fill_region(&a, &b);
	fake_fail_always(FAKE_RESERVE, ENOMEM);
	bool moved = true;
	cr_assert_null(vmap_range_move(a, 200 * MiB, &moved));
	cr_assert_not(moved);
	cr_assert_eq(vmap_tag_state(tag_of(a)), VMAP_ST_LIVE);
	cr_assert(marked(a, 100 * MiB, 1));
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
}

/* ---- counters, advice ------------------------------------------------------------ */

Test(fault, counters_stay_atomic_when_slots_cannot_be_mapped)
{
	vmap_counter_init(2);
	fake_fail_always(FAKE_MMAP, ENOMEM);
	cr_assert_not(vmap_counter_go_percpu());
	cr_assert_not(vmap_counter_is_percpu());
	vmap_stat_add_cpu(1, VMAP_STAT_purge_ns, 5);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_purge_ns), 5);
	fake_fail_clear(FAKE_MMAP);
	cr_assert(vmap_counter_go_percpu(), "a later attempt succeeds");
	vmap_stat_add_cpu(1, VMAP_STAT_purge_ns, 5);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_purge_ns), 10);
}

Test(fault, big_chunks_are_advised_hugepage_once)
{
	static const char *const thp[] = {"VMAPALLOC_HUGEPAGE=1", "VMAPALLOC_HUGEPAGE_MIN=2M",
					  "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(thp);
	fake_reset();
	bool zero;
	for (int i = 0; i < 4; i++)
		cr_assert_not_null(vmap_range_alloc(3 * MiB, VMAP_PAGE, &zero));
	cr_assert_eq(fake_madvise_calls(MADV_HUGEPAGE), 1, "one chunk, one advice");
	cr_assert_not_null(vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero));
	cr_assert_eq(fake_madvise_calls(MADV_HUGEPAGE), 1, "small chunks are not advised");
}

Test(fault, hugepage_off_means_no_advice)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	range_setup(env);
	fake_reset();
	bool zero;
	cr_assert_not_null(vmap_range_alloc(3 * MiB, VMAP_PAGE, &zero));
	cr_assert_eq(fake_madvise_calls(MADV_HUGEPAGE), 0);
}

Test(fault, populate_prefaults_fresh_areas_only)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_POPULATE=1",
			     "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	fake_reset();
	bool zero;
	void *p = vmap_range_alloc(256 * KiB, VMAP_PAGE, &zero);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 1);
	struct fake_range r[2];
	cr_assert_eq(fake_advised(MADV_POPULATE_WRITE, r, 2), 1);
	cr_assert_eq(r[0].addr, (uintptr_t)p);
	cr_assert_eq(r[0].len, 256 * KiB, "the usable part, not the guard");
	vmap_range_free(p, "free");
	void *q = vmap_range_alloc(256 * KiB, VMAP_PAGE, &zero);
	cr_assert_eq(q, p);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 1, "a pooled area is resident already");
}

Test(fault, populate_auto_follows_what_the_program_writes)
{
	/* The default, VMAPALLOC_POPULATE=auto. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	fake_reset();
	enum { N = 8, PAGES = 128 }; /* 512 KiB: the last 16 pages watched while populating */
	size_t size = PAGES * VMAP_PAGE;
	unsigned char *p[N];
	bool zero;
	struct fake_range r[N];
	/* Nothing to go by yet: the first fresh block is watched whole. */
	p[0] = vmap_range_alloc(size, VMAP_PAGE, &zero);
	cr_assert(zero);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 0);
	memset(p[0], 1, size);
	/* Written whole: the next ones are populated but for their last eighth. */
	for (int i = 1; i < 3; i++) {
		p[i] = vmap_range_alloc(size, VMAP_PAGE, &zero);
		cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), (unsigned)i, "block %d: %u calls, zero %d", i, fake_madvise_calls(MADV_POPULATE_WRITE), zero);
		memset(p[i], 1, size);
	}
	cr_assert_eq(fake_advised(MADV_POPULATE_WRITE, r, N), 2);
	cr_assert_eq(r[1].addr, (uintptr_t)p[2]);
	cr_assert_eq(r[1].len, size - PAGES / 8 * VMAP_PAGE, "populated up to the watched tail");
	/* Then written at their first byte only: populating stops within two
	 * blocks, and the blocks after are left to fault. */
	for (int i = 3; i < N; i++) {
		p[i] = vmap_range_alloc(size, VMAP_PAGE, &zero);
		p[i][0] = 1;
	}
	unsigned populated = fake_madvise_calls(MADV_POPULATE_WRITE);
	cr_assert(populated <= 4, "%u blocks populated, of 2 written whole", populated);
	cr_assert_eq(fake_advised(MADV_POPULATE_WRITE, r, N), populated);
	cr_assert(r[populated - 1].addr < (uintptr_t)p[N - 2], "still populating at the end");
	for (int i = 0; i < N; i++)
		vmap_range_free(p[i], "free");
}

Test(fault, populate_auto_waits_for_blocks_of_a_size_written)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	fake_reset();
	size_t small = 512 * KiB, big = 8 * MiB;
	bool zero;
	unsigned char *a = vmap_range_alloc(small, VMAP_PAGE, &zero);
	memset(a, 1, small);
	unsigned char *b = vmap_range_alloc(small, VMAP_PAGE, &zero);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 1, "a block the size of one written");
	memset(b, 1, small);
	/* Sixteen times the largest written: watched whole, not populated. */
	unsigned char *c = vmap_range_alloc(big, VMAP_PAGE, &zero);
	cr_assert(zero);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 1, "a block 16x any written");
	memset(c, 1, big);
	/* Written whole: now blocks of its size are populated. */
	unsigned char *d = vmap_range_alloc(big, VMAP_PAGE, &zero);
	cr_assert(zero);
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 2, "once one of its size was written");
	struct fake_range r[2];
	cr_assert_eq(fake_advised(MADV_POPULATE_WRITE, r, 2), 2);
	cr_assert_eq(r[1].addr, (uintptr_t)d);
	vmap_range_free(a, "free");
	vmap_range_free(b, "free");
	vmap_range_free(c, "free");
	vmap_range_free(d, "free");
}

Test(fault, populate_auto_leaves_the_programs_mappings_alone)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	fake_reset();
	for (int i = 0; i < 4; i++) {
		void *m = vmap_mmap(NULL, 256 * KiB, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		cr_assert_neq(m, MAP_FAILED);
		memset(m, 1, 256 * KiB);
	}
	cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), 0);
}

Test(fault, populate_auto_looks_at_a_watched_block_as_it_is_freed)
{
	/* A loop of one big block, allocated, written, freed and purged: the
	 * look at the next carve would find the pages released. */
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_PURGE_DELAY_MS=0", NULL};
	range_setup(env);
	fake_reset();
	size_t size = 2 * MiB;
	bool zero;
	for (int i = 0; i < 3; i++) {
		void *p = vmap_range_alloc(size, VMAP_PAGE, &zero);
		cr_assert(zero, "round %d: not fresh", i);
		cr_assert_eq(fake_madvise_calls(MADV_POPULATE_WRITE), (unsigned)(i > 0),
			     "round %d", i);
		memset(p, 1, size);
		vmap_range_free(p, "free");
		vmap_range_purge(true);
		fake_reset();
	}
}
