/*
 * realloc_heavy.c — the `realloc` workload of bench/longrun.py: blocks that
 * grow by realloc, many steps at a time, as a parser's or a serialiser's
 * buffers do.  It shows how many mappings and how much RSS an allocator keeps
 * when blocks of every size from 4 KiB to 8 MiB are grown, moved and freed.
 *
 *   realloc_heavy [STEPS]        (default 20000)
 *
 * 64 slots; each step picks one with a fixed-seed xorshift:
 *   - empty: malloc 4 KiB..64 KiB and write all of it;
 *   - else, 1 in 8: free it;
 *   - else: realloc it to 1.5 x its size (at the 8 MiB cap: free it instead)
 *     and write one byte per 4 KiB page of the new part.
 * Every block carries a stamp at each page offset (derived from the step that
 * allocated it) and a fill byte in its first part; before a block is freed,
 * and for the live ones at the end, they are checked and folded into a
 * checksum, so a realloc that lost contents aborts, and the output line is the
 * same under every allocator.  Then the end figures (see report.h):
 *
 *   steps=N allocs=N reallocs=N frees=N bytes_freed=N checksum=HEX maps=N rss_kib=N hwm_kib=N
 *
 * Not linked against any allocator: bench/longrun.py preloads one.
 */
#include "report.h"

#define SLOTS 64
#define PAGE  ((size_t)4096)
#define KIB   ((size_t)1024)
#define MIB   ((size_t)1024 * 1024)
#define CAP   (8 * MIB)

struct slot {
	unsigned char *p;
	size_t size;  /* current size */
	size_t first; /* size at malloc: [0, first) holds the fill byte */
	uint64_t seed;
};

static struct slot slots[SLOTS];
static uint64_t checksum = 0xcbf29ce484222325ULL; /* FNV-1a over the checks */
static unsigned long long n_alloc, n_realloc, n_free, bytes_freed;

static void fold(uint64_t v)
{
	checksum = (checksum ^ v) * 0x100000001b3ULL;
}

static unsigned char fill_byte(uint64_t seed)
{
	return (unsigned char)(seed * 131 + 7);
}

static unsigned char stamp(uint64_t seed, size_t off)
{
	return (unsigned char)((seed * 0x9E3779B97F4A7C15ULL + (off / PAGE) * 0xFF51AFD7ED558CCDULL) >> 56);
}

static void fail(const struct slot *s, size_t off, const char *what)
{
	fprintf(stderr, "realloc_heavy: %s at offset %zu of a %zu-byte block (seed %llu)\n",
		what, off, s->size, (unsigned long long)s->seed);
	exit(1);
}

/* Stamp the pages of [from, to) (from rounded up to a page offset). */
static void stamp_range(struct slot *s, size_t from, size_t to)
{
	for (size_t off = (from + PAGE - 1) / PAGE * PAGE; off < to; off += PAGE)
		s->p[off] = stamp(s->seed, off);
}

/* Check the stamps and the last fill byte, fold them, free the block. */
static void retire(struct slot *s)
{
	for (size_t off = 0; off < s->size; off += PAGE) {
		if (s->p[off] != stamp(s->seed, off))
			fail(s, off, "stamp lost");
		fold(s->p[off]);
	}
	if (s->first % PAGE != 1 && s->p[s->first - 1] != fill_byte(s->seed))
		fail(s, s->first - 1, "fill byte lost");
	fold(s->p[s->first - 1]);
	fold(s->size);
	free(s->p);
	n_free++;
	bytes_freed += s->size;
	s->p = NULL;
}

int main(int argc, char **argv)
{
	long steps = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
	uint64_t rng = 0x5DEECE66DULL;
	if (steps <= 0) {
		fprintf(stderr, "usage: realloc_heavy [STEPS]\n");
		return 2;
	}
	for (long step = 0; step < steps; step++) {
		struct slot *s = &slots[longrun_rand(&rng) % SLOTS];
		uint64_t r = longrun_rand(&rng);
		if (!s->p) {
			s->size = s->first = 4 * KIB + r % (60 * KIB + 1);
			s->seed = (uint64_t)step;
			s->p = malloc(s->size);
			if (!s->p) {
				fprintf(stderr, "realloc_heavy: malloc(%zu) failed\n", s->size);
				return 1;
			}
			memset(s->p, fill_byte(s->seed), s->size);
			stamp_range(s, 0, s->size);
			n_alloc++;
		} else if (r % 8 == 0 || s->size * 3 / 2 > CAP) {
			retire(s);
		} else {
			size_t old = s->size, size = old * 3 / 2;
			unsigned char *p = realloc(s->p, size);
			if (!p) {
				fprintf(stderr, "realloc_heavy: realloc(%zu) failed\n", size);
				return 1;
			}
			s->p = p;
			s->size = size;
			stamp_range(s, old, size);
			n_realloc++;
		}
	}
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].p)
			retire(&slots[i]);

	struct end_figures e = longrun_end_figures();
	char results[256];
	snprintf(results, sizeof results,
		 "steps=%ld allocs=%llu reallocs=%llu frees=%llu bytes_freed=%llu checksum=%016llx",
		 steps, n_alloc, n_realloc, n_free, bytes_freed, (unsigned long long)checksum);
	longrun_print_end(results, e);
	return 0;
}
