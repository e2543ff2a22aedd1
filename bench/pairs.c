/*
 * pairs.c — small malloc/free patterns for instruction counts (bench/pairs.sh
 * runs it under callgrind with each allocator preloaded).  Never linked
 * against an allocator; calls go through volatile pointers so that the
 * compiler cannot pair and drop them.
 *
 *   pairs lifo   N SIZE   N times: malloc(SIZE), write a byte, free it
 *   pairs fifo   N SIZE   a window of 64 live blocks, the oldest freed each time
 *   pairs random N        a random one of 256 live blocks freed, then a
 *                         malloc of 16..4096 random bytes (bench/profile_small.c)
 *
 * Each run first makes 100 000 pairs of the same pattern (so that an
 * allocator that switches backends after a count, as vmapalloc's
 * BACKEND=auto does, has switched), then N more; pairs.sh subtracts two
 * runs of different N, which leaves the cost of the pairs alone.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*volatile p_malloc)(size_t) = malloc;
static void (*volatile p_free)(void *) = free;

static unsigned long sink;

static void *get(size_t n)
{
	char *p = p_malloc(n);
	if (!p) {
		fprintf(stderr, "pairs: malloc(%zu) failed\n", n);
		exit(1);
	}
	p[0] = (char)n;
	sink += (unsigned char)p[0];
	return p;
}

static void lifo(long n, size_t size)
{
	for (long i = 0; i < n; i++)
		p_free(get(size));
}

static void fifo(long n, size_t size)
{
	void *w[64];
	for (int i = 0; i < 64; i++)
		w[i] = get(size);
	for (long i = 0; i < n; i++) {
		void *p = get(size);
		p_free(w[i & 63]);
		w[i & 63] = p;
	}
	for (int i = 0; i < 64; i++)
		p_free(w[i]);
}

static void random_sizes(long n)
{
	void *slot[256] = {0};
	uint64_t x = 88172645463325252ull;
	for (long i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned k = (unsigned)(x & 255);
		p_free(slot[k]);
		slot[k] = get(16 + (size_t)((x >> 8) % 4081));
	}
	for (int k = 0; k < 256; k++)
		p_free(slot[k]);
}

static void run(const char *mode, long n, size_t size)
{
	if (strcmp(mode, "lifo") == 0)
		lifo(n, size);
	else if (strcmp(mode, "fifo") == 0)
		fifo(n, size);
	else
		random_sizes(n);
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "lifo") && strcmp(argv[1], "fifo") &&
			 strcmp(argv[1], "random"))) {
		fprintf(stderr, "usage: pairs lifo|fifo|random N [SIZE]\n");
		return 2;
	}
	long n = atol(argv[2]);
	size_t size = argc > 3 ? (size_t)atol(argv[3]) : 4096;
	run(argv[1], 100000, size);
	run(argv[1], n, size);
	printf("%lu\n", sink);
	return 0;
}
