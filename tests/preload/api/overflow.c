/*
 * overflow.c — writes `past` bytes beyond the usable end of a block of `n`
 * bytes (after recycling blocks of that size a few times, so pooled and
 * fresh areas are both exercised).  With VMAPALLOC_GUARD=1 it must die of
 * SIGSEGV; guard.sh checks.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	size_t n = strtoul(argv[1], NULL, 0), past = strtoul(argv[2], NULL, 0);
	for (int i = 0; i < 3; i++) {
		char *p = malloc(n);
		memset(p, 1, n);
		free(p);
	}
	volatile char *p = malloc(n);
	size_t usable = malloc_usable_size((void *)p);
	p[usable + past - 1] = 1;
	puts("no trap");
	return 0;
}
