/*
 * sites_prog.c — three allocation sites of known bytes, for the
 * collapsed-stack export (collapsed_check.py):
 *
 *   make_kept    3 x 1 MiB    never freed: live at exit
 *   make_freed   5 x 256 KiB  freed
 *   make_big     2 x 3 MiB    freed
 *
 * Large blocks only, page multiples, so that with
 * VMAPALLOC_PROFILE_LARGE_SAMPLE=0 the profile records every one exactly.
 * Built with -O0, -fno-builtin and -fno-inline: the calls stay calls (no
 * tail call), each function a frame of its own, each loop one call site.
 */
#include <stdio.h>
#include <stdlib.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void *(*volatile p_malloc)(size_t) = malloc;
static void (*volatile p_free)(void *) = free;
static void *volatile kept[3];

__attribute__((noinline)) static void make_kept(int i)
{
	kept[i] = p_malloc(MiB);
}

__attribute__((noinline)) static void *make_freed(void)
{
	return p_malloc(256 * KiB);
}

__attribute__((noinline)) static void *make_big(void)
{
	return p_malloc(3 * MiB);
}

int main(void)
{
	for (int i = 0; i < 3; i++)
		make_kept(i);
	for (int i = 0; i < 5; i++)
		p_free(make_freed());
	for (int i = 0; i < 2; i++)
		p_free(make_big());
	printf("{\"make_kept\": %zu, \"make_freed\": %zu, \"make_big\": %zu, \"live\": %zu}\n", 3 * MiB,
	       5 * 256 * KiB, 2 * 3 * MiB, 3 * MiB);
	return 0;
}
