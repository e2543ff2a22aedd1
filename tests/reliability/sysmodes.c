/*
 * sysmodes.c — vmapalloc under system-wide memory settings that tests/
 * reliability/system.sh switches (as root) and restores around each run.
 *
 *   sysmodes commit ROUNDS   run with vm.overcommit_memory=2 (#29)
 *   sysmodes thp DELAY_MS    run with transparent_hugepage/enabled=always (#31)
 *   sysmodes maps MOVES      run with a low vm.max_map_count (#28)
 *
 * commit: rounds of large blocks (64 KiB to 4 MiB, about 100 MiB live, every
 *   page written) allocated and freed.  Strict overcommit ignores
 *   MAP_NORESERVE, so a writable arena reservation would be charged in full
 *   against CommitLimit.  Checks: the blocks are
 *   vmapalloc's (its arena exists under strict overcommit), Committed_AS
 *   rises by at most 512 MiB for the first round and does not grow after it.
 * thp: 256 MiB of 4 MiB blocks written, freed; after DELAY_MS x 3 and one
 *   more large malloc/free (a call that can purge), VmRSS must be back within
 *   64 MiB (VMAPALLOC_LAZY_MAX, which system.sh sets) of what it was before.
 *   Huge pages must have been used at the peak (AnonHugePages > 0), or the
 *   test proves nothing.
 * maps: MOVES realloc moves (blocks grown past what fits in place, kept
 *   live) and partial munmaps of the program's own served mappings.  Moved
 *   pages keep VMAs of their own: vmapalloc must keep what it adds under half
 *   of vm.max_map_count (#28) and leave the program room for its own maps.
 */
#include "rel.h"

#include <dlfcn.h>
#include <stdio.h>

static long meminfo_kb(const char *field)
{
	return rel_file_kb("/proc/meminfo", field);
}

static long rollup_kb(const char *field)
{
	return rel_file_kb("/proc/self/smaps_rollup", field);
}

static int (*owns)(const void *);

/* vmapalloc's ownership test; none without the preload (the comparison run,
 * whose blocks are glibc's). */
static void need_owns(void)
{
	owns = (int (*)(const void *))dlsym(RTLD_DEFAULT, "vmapalloc_owns");
	const char *pre = getenv("LD_PRELOAD");
	CHECK(owns || !pre || !*pre, "vmapalloc_owns not found under LD_PRELOAD=%s", pre);
}

#define NB 48

static void round_of_blocks(uint64_t seed, bool check_owned)
{
	void *p[NB];
	size_t n[NB];
	for (int i = 0; i < NB; i++) {
		n[i] = (64 * KiB) << (i % 7); /* 64 KiB .. 4 MiB */
		p[i] = malloc(n[i]);
		CHECK(p[i], "malloc(%zu) failed: %s", n[i], strerror(errno));
		memset(p[i], (int)(seed + (uint64_t)i), n[i]);
		if (check_owned && owns && n[i] >= MiB)
			CHECK(owns(p[i]), "a %zu-byte block is not vmapalloc's: no arena?", n[i]);
	}
	for (int i = 0; i < NB; i++) {
		unsigned char *c = p[i];
		CHECK(c[0] == (unsigned char)(seed + (uint64_t)i) && c[n[i] - 1] == c[0],
		      "block %d lost its content", i);
		free(p[i]);
	}
}

static int do_commit(int rounds)
{
	need_owns();
	long c0 = meminfo_kb("Committed_AS:");
	CHECK(c0 >= 0, "no Committed_AS in /proc/meminfo");
	round_of_blocks(1, true);
	long c1 = meminfo_kb("Committed_AS:");
	for (int r = 1; r < rounds; r++)
		round_of_blocks((uint64_t)r + 1, r % 16 == 0);
	long cn = meminfo_kb("Committed_AS:");
	printf("commit: Committed_AS %ld kB at start, +%ld kB after round 1, +%ld kB after %d rounds\n",
	       c0, c1 - c0, cn - c0, rounds);
	CHECK(c1 - c0 <= 512 * 1024, "the first round raised Committed_AS by %ld kB (> 512 MiB)",
	      c1 - c0);
	CHECK(cn - c1 <= 32 * 1024, "rounds 2..%d raised Committed_AS by %ld kB more (> 32 MiB)",
	      rounds, cn - c1);
	return 0;
}

static int do_thp(int delay_ms)
{
	need_owns();
	enum { N = 64 };
	void *p[N];
	long r0 = rel_status_kb("VmRSS:");
	for (int i = 0; i < N; i++) {
		p[i] = malloc(4 * MiB);
		CHECK(p[i], "malloc(4 MiB) failed");
		memset(p[i], i + 1, 4 * MiB);
	}
	long r1 = rel_status_kb("VmRSS:"), huge = rollup_kb("AnonHugePages:");
	for (int i = 0; i < N; i++)
		free(p[i]);
	struct timespec ts = {.tv_sec = delay_ms * 3 / 1000, .tv_nsec = (long)(delay_ms * 3 % 1000) * 1000000};
	nanosleep(&ts, NULL);
	void *q = malloc(4 * MiB);
	CHECK(q, "malloc(4 MiB) after the delay failed");
	free(q);
	long r2 = rel_status_kb("VmRSS:");
	printf("thp: VmRSS %ld kB before, %ld kB at the peak (AnonHugePages %ld kB), %ld kB %d ms after the free\n",
	       r0, r1, huge, r2, delay_ms * 3);
	CHECK(huge > 0, "no huge page at the peak: is transparent_hugepage/enabled 'always'?");
	CHECK(r2 - r0 <= 64 * 1024, "VmRSS still %ld kB above its start after the purge delay",
	      r2 - r0);
	return 0;
}

static int do_maps(long moves)
{
	long max = rel_read_long("/proc/sys/vm/max_map_count");
	CHECK(max > 0, "cannot read vm.max_map_count");
	long v0 = rel_vmas();
	enum { LIVE = 1024 };
	static void *b[LIVE];
	static size_t n[LIVE];
	uint64_t seed = 7;
	/* Realloc growth that cannot stay in place: a neighbour block is live
	 * (the next one allocated), so vmapalloc moves pages with mremap. */
	for (long m = 0; m < moves; m++) {
		int i = (int)(rel_rnd(&seed) % LIVE);
		if (!b[i]) {
			n[i] = 256 * KiB;
			b[i] = malloc(n[i]);
			CHECK(b[i], "malloc failed at move %ld: %s", m, strerror(errno));
			rel_mark(b[i], n[i], (uint64_t)i);
			continue;
		}
		CHECK(rel_marked(b[i], n[i], (uint64_t)i), "block %d lost its content", i);
		size_t grown = n[i] + 64 * KiB;
		if (grown > 2 * MiB)
			grown = 256 * KiB;
		void *q = realloc(b[i], grown);
		CHECK(q, "realloc to %zu failed at move %ld: %s", grown, m, strerror(errno));
		b[i] = q;
		n[i] = grown;
		rel_mark(b[i], n[i], (uint64_t)i);
	}
	/* The program's own mappings, partly unmapped (vmapalloc may keep the
	 * pieces PROT_NONE for reuse: more VMAs of its own). */
	enum { MAPS = 512 };
	static char *mp[MAPS];
	for (int i = 0; i < MAPS; i++) {
		mp[i] = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(mp[i] != MAP_FAILED, "mmap %d failed: %s", i, strerror(errno));
		mp[i][0] = 1;
		CHECK(munmap(mp[i] + 4 * 4096, 4096) == 0, "partial munmap %d failed: %s", i, strerror(errno));
	}
	long v1 = rel_vmas();
	/* Room for the program's own maps: a thousand single shared pages
	 * (never served by vmapalloc, and each its own VMA). */
	static char *own[1000];
	int got = 0;
	for (int i = 0; i < 1000 && (long)i < max / 4; i++, got++) {
		own[i] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (own[i] == MAP_FAILED)
			break;
	}
	long v2 = rel_vmas();
	printf("maps: vm.max_map_count %ld; VMAs %ld at start, %ld after %ld realloc moves and %d partly "
	       "unmapped mappings, %ld with %d single pages of the program's own\n",
	       max, v0, v1, moves, MAPS, v2, got);
	CHECK(v1 - v0 <= max / 2, "vmapalloc and the workload added %ld VMAs, over half of %ld",
	      v1 - v0, max);
	CHECK(got == 1000 || (long)got == max / 4, "the program could map only %d single pages", got);
	for (int i = 0; i < got; i++)
		munmap(own[i], 4096);
	for (int i = 0; i < MAPS; i++) {
		munmap(mp[i], 4 * 4096);
		munmap(mp[i] + 5 * 4096, 11 * 4096);
	}
	for (int i = 0; i < LIVE; i++)
		if (b[i]) {
			CHECK(rel_marked(b[i], n[i], (uint64_t)i), "block %d lost its content", i);
			free(b[i]);
		}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 3 && strcmp(argv[1], "commit") == 0)
		return do_commit(atoi(argv[2]));
	if (argc == 3 && strcmp(argv[1], "thp") == 0)
		return do_thp(atoi(argv[2]));
	if (argc == 3 && strcmp(argv[1], "maps") == 0)
		return do_maps(atol(argv[2]));
	fprintf(stderr, "usage: sysmodes commit ROUNDS | thp DELAY_MS | maps MOVES\n");
	return 2;
}
