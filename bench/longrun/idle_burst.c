/*
 * idle_burst.c — the `idle` workload of bench/longrun.py: a burst of
 * allocations, all freed, then a long quiet time.  It shows what an allocator
 * still holds (RSS, mappings) once a program has gone idle after a peak: the
 * memory of a daemon between two requests.  Allocators that return free
 * memory on a timer (or from a background thread) get the time to do it; the
 * sleep itself makes no allocator call.
 *
 *   idle_burst [BLOCKS [SLEEP_MS]]      (default 400 blocks, 4000 ms)
 *
 * BLOCKS blocks of 64 KiB..1 MiB (fixed-seed xorshift sizes), every page
 * written; all freed in a scrambled order (every byte written is checked
 * first and folded into a checksum); nanosleep(SLEEP_MS); then one line (the end figures: report.h):
 *
 *   blocks=N bytes=N checksum=HEX maps=N rss_kib=N hwm_kib=N
 *
 * Not linked against any allocator: bench/longrun.py preloads one.
 */
#include <errno.h>

#include "report.h"

#define PAGE ((size_t)4096)
#define KIB  ((size_t)1024)
#define MAXB 100000

static unsigned char *blk[MAXB];
static size_t sz[MAXB];
static long order[MAXB];

static unsigned char stamp(long i, size_t off)
{
	return (unsigned char)(i * 31 + (long)(off / PAGE) * 7 + 1);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 400;
	long sleep_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 4000;
	uint64_t rng = 0x9E3779B97F4A7C15ULL, checksum = 0xcbf29ce484222325ULL;
	unsigned long long bytes = 0;
	if (n <= 0 || n > MAXB || sleep_ms < 0) {
		fprintf(stderr, "usage: idle_burst [BLOCKS (1..%d) [SLEEP_MS]]\n", MAXB);
		return 2;
	}

	for (long i = 0; i < n; i++) {
		sz[i] = 64 * KIB + longrun_rand(&rng) % (960 * KIB + 1);
		blk[i] = malloc(sz[i]);
		if (!blk[i]) {
			fprintf(stderr, "idle_burst: malloc(%zu) failed\n", sz[i]);
			return 1;
		}
		for (size_t off = 0; off < sz[i]; off += PAGE)
			blk[i][off] = stamp(i, off);
		bytes += sz[i];
	}
	/* Free in a scrambled order (a Fisher-Yates shuffle), so that neighbours
	 * are not freed one after the other. */
	for (long k = 0; k < n; k++)
		order[k] = k;
	for (long k = n - 1; k > 0; k--) {
		long j = (long)(longrun_rand(&rng) % (uint64_t)(k + 1)), t = order[k];
		order[k] = order[j];
		order[j] = t;
	}
	for (long k = 0; k < n; k++) {
		long i = order[k];
		for (size_t off = 0; off < sz[i]; off += PAGE) {
			if (blk[i][off] != stamp(i, off)) {
				fprintf(stderr, "idle_burst: block %ld lost its stamp at %zu\n", i, off);
				return 1;
			}
			checksum = (checksum ^ blk[i][off]) * 0x100000001b3ULL;
		}
		free(blk[i]);
		blk[i] = NULL;
	}

	struct timespec t = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;

	struct end_figures e = longrun_end_figures();
	char results[128];
	snprintf(results, sizeof results, "blocks=%ld bytes=%llu checksum=%016llx", n, bytes,
		 (unsigned long long)checksum);
	longrun_print_end(results, e);
	return 0;
}
