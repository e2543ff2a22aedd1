/*
 * profile_small.c — the small-allocation workload of bench/profile_overhead.sh:
 * OPS times, free a random one of 256 live blocks and replace it with a
 * malloc of 16..4096 random bytes (first byte written).  Prints
 * "ops=N seconds=S ns_per_op=X".  Built by the script (-O2 -fno-builtin),
 * never linked against an allocator: the script preloads one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *(*volatile p_malloc)(size_t) = malloc;
static void (*volatile p_free)(void *) = free;

int main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : 10000000;
	void *slot[256] = {0};
	uint64_t x = 88172645463325252ull;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < ops; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned k = (unsigned)(x & 255);
		p_free(slot[k]);
		size_t n = 16 + (size_t)((x >> 8) % 4081);
		char *p = p_malloc(n);
		if (!p)
			return 1;
		p[0] = (char)i;
		slot[k] = p;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	for (int k = 0; k < 256; k++)
		p_free(slot[k]);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	printf("ops=%ld seconds=%.6f ns_per_op=%.2f\n", ops, s, s * 1e9 / (double)ops);
	return 0;
}
