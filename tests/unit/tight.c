/*
 * tight.c — unit tests of the arena under a tight RLIMIT_AS (core/tight.c and
 * its chunks in arena.c): the first region's fit, the chunk size and shard
 * count that go with it, lending free chunks to the kernel when glibc is
 * refused and taking them back, and blocks growing in place across chunks.
 *
 * Each case runs in a child that sets RLIMIT_AS before the arena is set up
 * (the limit would starve Criterion's own mappings); the child prints the
 * check that failed and exits 1.  Linked with the VMAP_DEBUG core: the model
 * check vmap_range_check() runs after every range operation, lent chunks
 * included; and with the OS seam's fakes (fake_os.c), whose hooks put a
 * lend at a chosen point of a purge.
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "alloc.h"
#include "fake_os.h"
#include "mmap.h"
#include "range_impl.h"

TestSuite(tight, .timeout = 60);

#define SKIPPED 77

#define REQ(c)                                                                       \
	do {                                                                         \
		if (!(c)) {                                                          \
			fprintf(stderr, "tight.c:%d: failed: %s\n", __LINE__, #c);   \
			return 1;                                                    \
		}                                                                    \
	} while (0)

static uint64_t vsize(void)
{
	char buf[64] = {0};
	int fd = open("/proc/self/statm", O_RDONLY);
	if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0)
		return 0;
	close(fd);
	return strtoull(buf, NULL, 10) * 4096;
}

/* RLIMIT_AS at VmSize + room, then the arena with these options; 0 or -errno
 * from vmap_range_init. */
static int limited_setup(uint64_t room, const char *const *env)
{
	static const char *const none[] = {NULL};
	if (vsize() > 64 * GiB)
		_exit(SKIPPED); /* a sanitizer's shadow memory: its own mappings need more */
	uint64_t limit = vsize() + room;
	struct rlimit rl = {limit, limit};
	if (setrlimit(RLIMIT_AS, &rl) != 0 || unit_parse(env ? env : none) != 0)
		return -EINVAL;
	vmap_counter_init(2);
	return vmap_range_init();
}

/* Runs fn in a child; its exit status (SKIPPED: the test is skipped). */
static int run(int (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(fn());
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "child status %#x", st);
	if (WEXITSTATUS(st) == SKIPPED)
		cr_skip_test("VmSize over 64 GiB before the test (a sanitizer's shadow memory)");
	return WEXITSTATUS(st);
}

static bool zero;

/* ---- the fit ------------------------------------------------------------- */

static int fit_200m(void)
{
	REQ(limited_setup(200 * MiB, NULL) == 0);
	REQ(vmap_arena_tight());
	REQ(VMAP_CHUNK == 2 * MiB);
	size_t size = vmap_regions[0].size;
	/* Half of what the limit leaves (VmSize grew a little since), in chunks. */
	REQ(size % (2 * MiB) == 0 && size >= 90 * MiB && size <= 100 * MiB);
	REQ(vmap_area_max == size / 4);
	unsigned ncpu = vmap_os_ncpu();
	REQ(vmap_range_nshards() == (ncpu < size >> 24 ? ncpu : size >> 24));
	void *p = vmap_range_alloc(MiB, VMAP_PAGE, &zero);
	REQ(p && vmap_range_owns(p));
	REQ(!vmap_range_alloc(size / 4 + 1, VMAP_PAGE, &zero)); /* glibc's: over a quarter */
	vmap_range_free(p, "free");
	return 0;
}

/* Under 200 MiB the arena is half of what is left, in 2 MiB chunks, with
 * a shard per 16 MiB at most; before, no arena (a quarter was under 256 MiB). */
Test(tight, a_tight_limit_gets_half_the_room_in_small_chunks)
{
	cr_assert_eq(run(fit_200m), 0);
}

static int fit_2g(void)
{
	REQ(limited_setup(2 * GiB, NULL) == 0);
	REQ(!vmap_arena_tight() && VMAP_CHUNK == 64 * MiB);
	size_t size = vmap_regions[0].size; /* a quarter, in 64 MiB chunks */
	REQ(size == 448 * MiB || size == 512 * MiB);
	REQ(vmap_area_max == SIZE_MAX);
	REQ(vmap_range_lend(GiB) == 0); /* a wide arena lends nothing */
	return 0;
}

Test(tight, a_wide_limit_keeps_the_quarter_in_64m_chunks)
{
	cr_assert_eq(run(fit_2g), 0);
}

static int fit_6m(void)
{
	REQ(limited_setup(6 * MiB, NULL) != 0); /* half is under 8 MiB */
	REQ(vmap_nregions == 0);
	REQ(!vmap_range_alloc(MiB, VMAP_PAGE, &zero));
	REQ(vmap_range_lend(MiB) == 0);
	return 0;
}

Test(tight, no_arena_below_eight_mib)
{
	cr_assert_eq(run(fit_6m), 0);
}

Test(tight, no_limit_lends_nothing)
{
	range_setup(NULL);
	cr_assert_not(vmap_arena_tight());
	cr_assert_eq(vmap_range_lend(GiB), 0);
}

/* ---- lending -------------------------------------------------------------- */

static int lend_and_take_back(void)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	REQ(limited_setup(200 * MiB, env) == 0);
	struct vmap_region *r = &vmap_regions[0];
	uintptr_t end = r->base + r->size;
	void *keep = vmap_range_alloc(MiB, VMAP_PAGE, &zero);
	REQ(keep);
	uint64_t unclaimed = (uint64_t)ctr(VMAP_STAT_unclaimed_bytes);
	/* 5 MiB asked: three chunks, from the end down. */
	REQ(vmap_range_lend(5 * MiB) == 6 * MiB);
	REQ(ctr(VMAP_STAT_lent_bytes) == (int64_t)(6 * MiB));
	REQ((uint64_t)ctr(VMAP_STAT_unclaimed_bytes) == unclaimed - 6 * MiB);
	REQ(vmap_lent_chunks == 3);
	REQ(r->chunk_owner[r->nchunks - 1] == VMAP_CHUNK_LENT);
	REQ(!vmap_range_owns((void *)(end - 1)) && vmap_range_owns((void *)(end - 6 * MiB - 1)));
	/* Unmapped: the kernel maps there at will.  Take the last chunk. */
	char *k = mmap((void *)(end - 2 * MiB), 2 * MiB, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	REQ(k == (char *)(end - 2 * MiB));
	memset(k, 0x5a, 2 * MiB);
	REQ(!vmap_range_owns(k) && !vmap_region_of((uintptr_t)k));
	/* Fill the arena: the claims take back the two lent chunks still
	 * empty, not the kernel's. */
	size_t n = 0;
	while (vmap_range_alloc(MiB, VMAP_PAGE, &zero))
		n++;
	REQ(vmap_lent_chunks == 1 && ctr(VMAP_STAT_lent_bytes) == (int64_t)(2 * MiB));
	REQ(n * MiB > r->size - 2 * MiB - 6 * MiB); /* (1 MiB blocks with a guard page each) */
	REQ(k[0] == 0x5a && k[2 * MiB - 1] == 0x5a);
	REQ(!vmap_range_owns(k));
	/* Given back, the chunk is taken back when a claim needs it. */
	REQ(munmap(k, 2 * MiB) == 0);
	REQ(vmap_range_alloc(MiB, VMAP_PAGE, &zero));
	REQ(vmap_lent_chunks == 0 && ctr(VMAP_STAT_lent_bytes) == 0);
	REQ(vmap_range_owns((void *)(end - 1)));
	return 0;
}

/* glibc refused: free chunks go back to the kernel (not the arena's from
 * then on), a claim maps them again unless the kernel put something there. */
Test(tight, lent_chunks_are_the_kernels_until_taken_back)
{
	cr_assert_eq(run(lend_and_take_back), 0);
}

static int lend_after_free(void)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	REQ(limited_setup(200 * MiB, env) == 0);
	void *p[32];
	for (int i = 0; i < 32; i++)
		REQ((p[i] = vmap_range_alloc(MiB + MiB / 2, VMAP_PAGE, &zero)));
	for (int i = 0; i < 32; i++)
		vmap_range_free(p[i], "free");
	/* Freed areas are cached, their chunks claimed: a lend purges first. */
	size_t size = vmap_regions[0].size;
	REQ(vmap_range_lend(SIZE_MAX) == size);
	REQ(vmap_lent_chunks == size / VMAP_CHUNK);
	void *q = vmap_range_alloc(3 * MiB, VMAP_PAGE, &zero);
	REQ(q && vmap_range_owns(q) && vmap_lent_chunks == size / VMAP_CHUNK - 2);
	return 0;
}

Test(tight, a_lend_gives_back_freed_areas_first)
{
	cr_assert_eq(run(lend_after_free), 0);
}

/* ---- realloc in place across chunks ----------------------------------------- */

static int grow_in_place(void)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	REQ(limited_setup(200 * MiB, env) == 0);
	char *a = vmap_range_alloc(3 * MiB, VMAP_PAGE, &zero);
	REQ(a);
	memset(a, 0x11, 3 * MiB);
	/* Every free chunk lent: growing takes the next ones back. */
	REQ(vmap_range_lend(SIZE_MAX) > 0);
	REQ(vmap_range_resize(a, 9 * MiB));
	REQ(vmap_range_usable(a, "realloc") >= 9 * MiB);
	REQ(a[0] == 0x11 && a[3 * MiB - 1] == 0x11);
	memset(a, 0x22, 9 * MiB);
	REQ(vmap_range_resize(a, 20 * MiB)); /* and again, with no lend */
	REQ(a[9 * MiB - 1] == 0x22);
	vmap_range_free(a, "free");
	return 0;
}

/* A block grows in place past its chunk, where moving it would need both
 * sizes at once under the limit. */
Test(tight, realloc_grows_in_place_into_the_next_chunks)
{
	cr_assert_eq(run(grow_in_place), 0);
}

/* The whole facade under the limit (the program's mmap served too), and a
 * first block of 1 MiB, guard page included, at the start of the first
 * chunk. */
static char *facade_block(void)
{
	static char *const env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0",
				    "VMAPALLOC_LAZY_MAX=1M", "VMAPALLOC_POOL_PAGES=16",
				    "VMAPALLOC_CACHE=0", NULL};
	if (vsize() > 64 * GiB)
		_exit(SKIPPED);
	uint64_t limit = vsize() + 200 * MiB;
	struct rlimit rl = {limit, limit};
	if (setrlimit(RLIMIT_AS, &rl) != 0)
		return NULL;
	for (char *const *e = env; *e; e++)
		putenv(*e);
	vmap_init();
	if (!vmap_range_ready() || !vmap_arena_tight())
		return NULL;
	char *a = vmap_range_alloc(MiB - VMAP_PAGE, VMAP_PAGE, &zero);
	if (!a || ((uintptr_t)a & (VMAP_CHUNK - 1)))
		return NULL;
	memset(a, 0x11, MiB - VMAP_PAGE);
	return a;
}

/* a, 1 MiB, grows to 3 MiB: past the run after it, to the chunk's end, and
 * into the next chunk.  The run was read as tight.c's hint, not merged. */
static int grow_to_3m(char *a, unsigned run_state)
{
	uint64_t t = vmap_pte_at((uintptr_t)a + MiB)->tag;
	REQ(vmap_tag_state(t) == VMAP_ST_FREE && vmap_tag_run_state(t) == run_state);
	REQ(vmap_tag_pages(t) == MiB >> VMAP_PAGE_SHIFT);
	uint64_t taken = (uint64_t)ctr(VMAP_STAT_chunks_taken);
	REQ(vmap_range_resize(a, 3 * MiB));
	REQ(vmap_range_usable(a, "realloc") >= 3 * MiB);
	REQ((uint64_t)ctr(VMAP_STAT_chunks_taken) == taken + 1);
	REQ(a[0] == 0x11 && a[MiB - VMAP_PAGE - 1] == 0x11);
	memset(a, 0x22, 3 * MiB); /* every page writable: the guarded ones too */
	vmap_range_free(a, "free");
	return 0;
}

static int grow_past_guarded(void)
{
	char *a = facade_block();
	REQ(a);
	/* The program's mapping fills the rest of the chunk; unmapped, its
	 * pages are a guarded run (over LAZY_MAX / 4: not kept resident). */
	char *m = vmap_mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQ(m == a + MiB);
	memset(m, 0x5a, MiB);
	REQ(vmap_munmap(m, MiB) == 0);
	return grow_to_3m(a, VMAP_RUN_GUARDED);
}

static int grow_past_dirty(void)
{
	char *a = facade_block();
	REQ(a);
	/* A freed block fills the rest of the chunk: resident, a dirty run. */
	char *b = vmap_range_alloc(MiB - VMAP_PAGE, VMAP_PAGE, &zero);
	REQ(b == a + MiB);
	memset(b, 0x5a, MiB - VMAP_PAGE);
	vmap_range_free(b, "free");
	return grow_to_3m(a, VMAP_RUN_DIRTY);
}

/* The free run after a block, to its chunk's end, is in another state than
 * zero: the free chunks taken for the growth do not merge with it, and the
 * block grows across both (before, only a zero run got room made after it,
 * and since zero and guarded runs stopped merging, a guarded one did not:
 * realloc had to move, old and new size at once, under the limit). */
Test(tight, realloc_grows_past_a_guarded_run_into_the_next_chunks)
{
	cr_assert_eq(run(grow_past_guarded), 0);
}

Test(tight, realloc_grows_past_a_dirty_run_into_the_next_chunks)
{
	cr_assert_eq(run(grow_past_dirty), 0);
}

/* ---- a lend racing a purge ------------------------------------------------ */

/*
 * A purge gives a chunk back (arena.c), and the moment it releases the
 * global lock another thread lends that chunk to the kernel, as
 * vmap_range_lend does once its own trim is over: unmapped, its addresses
 * no longer the arena's.  The purge read the run it had just given back
 * after that, through vmap_region_of's NULL: a SIGSEGV, seen once under
 * tight_limit's 8 threads.  The schedule, made to order through the OS
 * seam: at the madvise of the chunk's page-table slice, the give-back's
 * last call before it takes the global lock, a helper thread takes that
 * lock first; the purge sleeps on it (futex wait) and the helper lets it
 * go; the purge's unlock then wakes (futex wake), and there, right after
 * the give-back's global section, the chunk is lent.
 */

/* Another thread's lend, as vmap_range_lend makes it after its trim: chunk
 * c, if free, marked lent (tight.c), then unmapped.  Whether it was. */
static bool lend_if_free(uintptr_t c)
{
	struct vmap_region *r = &vmap_regions[0];
	size_t i = (c - r->base) >> VMAP_CHUNK_SHIFT;
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	bool lend = vmap_chunk_is_free(r->chunk_owner[i]);
	if (lend) {
		__atomic_store_n(&r->chunk_owner[i], VMAP_CHUNK_LENT, __ATOMIC_RELAXED);
		vmap_lent_chunks++;
		__atomic_store_n(&r->whole, 0, __ATOMIC_RELEASE);
		if (munmap((void *)c, VMAP_CHUNK) == 0)
			vmap_unclaimed_add(0, -(int64_t)VMAP_CHUNK);
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	return lend;
}

static struct {
	uintptr_t chunk;  /* the chunk the purge gives back, and the helper lends */
	pthread_t purger; /* the thread that purges */
	int step;         /* 1 helper to lock, 2 locked, 3 purger asleep, 4 lent; 5 over */
} race;

/* Until the schedule reaches step (bounded: a schedule that never comes
 * fails the test, it does not hang it). */
static bool race_wait_for(int step)
{
	for (long i = 0; i < 5000000; i++) {
		if (__atomic_load_n(&race.step, __ATOMIC_ACQUIRE) >= step)
			return true;
		sched_yield();
	}
	return false;
}

static void race_madvise(void *addr, size_t len, int advice)
{
	struct vmap_region *r = &vmap_regions[0];
	size_t each = VMAP_CHUNK_PAGES * sizeof(struct vmap_pte);
	size_t c = (race.chunk - r->base) >> VMAP_CHUNK_SHIFT;
	(void)len;
	if (advice != MADV_DONTNEED || addr != (char *)vmap_region_tables(r) + c * each + VMAP_PAGE ||
	    __atomic_load_n(&race.step, __ATOMIC_ACQUIRE) != 0)
		return;
	__atomic_store_n(&race.step, 1, __ATOMIC_RELEASE);
	race_wait_for(2);
}

static void race_wait(volatile uint32_t *word)
{
	if (word == &vmap_global_lock.word && pthread_equal(pthread_self(), race.purger) &&
	    __atomic_load_n(&race.step, __ATOMIC_ACQUIRE) == 2)
		__atomic_store_n(&race.step, 3, __ATOMIC_RELEASE);
}

/* The purge's unlock, right after it gave the chunk back: lent. */
static void race_wake(volatile uint32_t *word)
{
	if (word != &vmap_global_lock.word || !pthread_equal(pthread_self(), race.purger) ||
	    __atomic_load_n(&race.step, __ATOMIC_ACQUIRE) != 3)
		return;
	if (lend_if_free(race.chunk))
		__atomic_store_n(&race.step, 4, __ATOMIC_RELEASE);
}

static void *race_helper(void *arg)
{
	(void)arg;
	if (!race_wait_for(1))
		return NULL;
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	int one = 1;
	if (__atomic_compare_exchange_n(&race.step, &one, 2, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		race_wait_for(3);
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	return NULL;
}

static int lend_during_purge(void)
{
	const char *env[] = {"VMAPALLOC_SHARDS=1", "VMAPALLOC_HUGEPAGE=0", NULL};
	REQ(limited_setup(200 * MiB, env) == 0);
	/* The first block starts the first chunk; freed, it waits in a pool,
	 * and its purge makes the whole chunk one zero run, which goes back. */
	void *p = vmap_range_alloc(64 * KiB, VMAP_PAGE, &zero);
	REQ(p && ((uintptr_t)p & (VMAP_CHUNK - 1)) == 0);
	vmap_range_free(p, "free");
	race.chunk = (uintptr_t)p;
	race.purger = pthread_self();
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * KiB);
	pthread_t helper;
	REQ(pthread_create(&helper, &attr, race_helper, NULL) == 0);
	fake_madvise_hook(race_madvise);
	fake_futex_hooks(race_wait, race_wake);
	vmap_range_purge(true);
	fake_madvise_hook(NULL);
	fake_futex_hooks(NULL, NULL);
	int reached = __atomic_exchange_n(&race.step, 5, __ATOMIC_ACQ_REL); /* (ends any wait) */
	REQ(pthread_join(helper, NULL) == 0);
	/* The schedule happened: the purge gave the chunk back, then it was lent. */
	REQ(reached == 4);
	REQ(ctr(VMAP_STAT_chunks_returned) == 1);
	REQ(vmap_lent_chunks == 1 && !vmap_range_owns(p));
	/* The arena goes on. */
	void *q = vmap_range_alloc(MiB, VMAP_PAGE, &zero);
	REQ(q && vmap_range_owns(q));
	vmap_range_free(q, "free");
	return 0;
}

Test(tight, a_chunk_lent_as_the_purge_gives_it_back_is_not_read_again)
{
	cr_assert_eq(run(lend_during_purge), 0);
}

/*
 * The trim's give-back of whole chunks lists the zero and guarded runs
 * first, then gives each back with the row of runs around it (arena.c): a
 * guarded run listed after the zero run beside it went back with the first
 * give-back, its chunk free, and another thread may lend that chunk before
 * the list reaches it.  Here the next give-back's madvise lends it.
 */
static struct {
	uintptr_t chunk; /* lent once free */
	bool lent;
} stale;

static void lend_when_free(void *addr, size_t len, int advice)
{
	(void)addr;
	(void)len;
	(void)advice;
	if (!stale.lent)
		stale.lent = lend_if_free(stale.chunk);
}

/* A chunk filled by a block of `first` bytes, guard page included, and the
 * program's mapping after it; *m: the mapping. */
static char *block_and_mapping(size_t first, char **m)
{
	char *a = vmap_range_alloc(first - VMAP_PAGE, VMAP_PAGE, &zero);
	if (!a || ((uintptr_t)a & (VMAP_CHUNK - 1)))
		return NULL;
	size_t rest = VMAP_CHUNK - first;
	*m = vmap_mmap(NULL, rest, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return *m == a + first ? a : NULL;
}

/* The block freed and purged is a zero run, the mapping unmapped a guarded
 * one: a row that covers the chunk (never a purge's victim: not given back
 * but by the trim). */
static bool zero_then_guarded(char *a, char *m)
{
	vmap_range_free(a, "free");
	vmap_range_purge(true);
	if (vmap_munmap(m, VMAP_CHUNK - (size_t)(m - a)) != 0)
		return false;
	uint64_t z = vmap_pte_at((uintptr_t)a)->tag, g = vmap_pte_at((uintptr_t)m)->tag;
	return vmap_tag_state(z) == VMAP_ST_FREE && vmap_tag_run_state(z) == VMAP_RUN_ZERO &&
	       vmap_tag_state(g) == VMAP_ST_FREE && vmap_tag_run_state(g) == VMAP_RUN_GUARDED;
}

static int trim_with_a_lend(void)
{
	char *a = facade_block();
	REQ(a);
	vmap_range_free(a, "free");
	vmap_range_purge(true); /* the chunk back: the next block starts it again */
	/* C: zero 512 KiB | guarded 1.5 MiB; D: zero 1 MiB | guarded 1 MiB.
	 * Listed by size, zero first: C's zero run, D's, C's guarded run. */
	char *cm, *dm;
	char *c = block_and_mapping(MiB / 2, &cm);
	REQ(c);
	/* A live chunk between the two: rows cross chunk ends, these must not. */
	char *e = vmap_range_alloc(VMAP_CHUNK - VMAP_PAGE, VMAP_PAGE, &zero);
	REQ(e == c + VMAP_CHUNK);
	char *d = block_and_mapping(MiB, &dm);
	REQ(d == e + VMAP_CHUNK);
	REQ(zero_then_guarded(c, cm) && zero_then_guarded(d, dm));
	REQ(ctr(VMAP_STAT_chunks_returned) == 1);
	stale.chunk = (uintptr_t)c;
	fake_madvise_hook(lend_when_free);
	vmap_range_trim();
	fake_madvise_hook(NULL);
	REQ(stale.lent && !vmap_range_owns(c));
	REQ(ctr(VMAP_STAT_chunks_returned) == 3);
	REQ(vmap_chunk_is_free(vmap_regions[0].chunk_owner[((uintptr_t)d - vmap_regions[0].base) >>
							     VMAP_CHUNK_SHIFT]));
	vmap_range_free(e, "free");
	void *q = vmap_range_alloc(MiB, VMAP_PAGE, &zero);
	REQ(q && vmap_range_owns(q));
	return 0;
}

Test(tight, the_trim_skips_a_listed_run_whose_chunk_went_back_and_was_lent)
{
	cr_assert_eq(run(trim_with_a_lend), 0);
}
