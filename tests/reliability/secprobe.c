/*
 * secprobe.c — what a process sees of vmapalloc (run setuid by secure.sh).
 *
 * Prints one line: "secprobe: at_secure=N vmapalloc=0|1 large_owned=0|1
 * help_would_exit=..." — whether AT_SECURE is set, whether libvmapalloc.so
 * is loaded (its API found with dlsym), and whether a 1 MiB block comes from
 * its arena.  Exit 0.  It is not linked with vmapalloc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

int main(void)
{
	int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "vmapalloc_owns");
	void *p = malloc(1 << 20);
	memset(p, 1, 1 << 20);
	printf("secprobe: at_secure=%lu vmapalloc=%d large_owned=%d\n", getauxval(AT_SECURE),
	       owns != NULL, owns ? owns(p) : 0);
	free(p);
	return 0;
}
