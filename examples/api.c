/*
 * api.c — calling vmapalloc.h from a program.
 *
 * Linked with -lvmapalloc (pkg-config --libs vmapalloc), the program uses
 * vmapalloc for every allocation without LD_PRELOAD, and can read figures,
 * purge on demand and print the report.
 *
 *   cc api.c $(pkg-config --cflags --libs vmapalloc) -o api && ./api
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vmapalloc.h>

int main(void)
{
	printf("vmapalloc %s\n", vmapalloc_version());

	/* 32 blocks of 1 MiB: served by the range allocator. */
	char *blocks[32];
	for (int i = 0; i < 32; i++) {
		blocks[i] = malloc(1 << 20);
		memset(blocks[i], i, 1 << 20);
	}
	uint64_t in_use = 0;
	vmapalloc_counter_get("large_bytes_in_use", &in_use);
	printf("large bytes in use: %llu (block 0 is vmapalloc's: %s)\n", (unsigned long long)in_use,
	       vmapalloc_owns(blocks[0]) ? "yes" : "no");

	/* Freed blocks stay resident for reuse until a purge... */
	for (int i = 0; i < 32; i++)
		free(blocks[i]);
	uint64_t cached = 0;
	vmapalloc_counter_get("cached_bytes", &cached);
	printf("cached for reuse after free: %llu bytes\n", (unsigned long long)cached);

	/* ...which the program may ask for now. */
	size_t released = vmapalloc_purge();
	printf("purged now: %zu bytes\n", released);

	fflush(stdout);
	vmapalloc_stats_print(STDOUT_FILENO, VMAPALLOC_FORMAT_TEXT);
	return 0;
}
