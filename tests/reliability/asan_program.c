/*
 * asan_program.c — a program built with -fsanitize=address, run under
 * LD_PRELOAD=libvmapalloc.so by loading.sh (REQUIREMENTS.md #45): allocations
 * of every size, then "asan program: ok".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	for (size_t i = 0; i < 1000; i++) {
		size_t n = i * 4099 + 1;
		char *p = malloc(n);
		if (!p)
			return 1;
		memset(p, 1, n);
		free(p);
	}
	char *q = malloc(2 << 20);
	if (!q)
		return 1;
	q[0] = 1;
	free(q);
	puts("asan program: ok");
	return 0;
}
