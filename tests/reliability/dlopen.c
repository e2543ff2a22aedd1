/*
 * dlopen.c — libvmapalloc.so loaded with dlopen instead of LD_PRELOAD
 * (REQUIREMENTS.md #45): it must work harmlessly or say so in one line, and
 * never crash.
 *
 *   dlopen LIB local|global|deepbind
 *
 * Run WITHOUT LD_PRELOAD.  The program allocates (glibc) before and after
 * the dlopen, calls the library's API (version, owns, counter_get, purge,
 * stats_print to /dev/null), frees glibc blocks allocated before the dlopen
 * after it, and calls the library's own malloc/free pair through dlsym (a
 * block vmapalloc hands out must go back to vmapalloc).  Prints what it
 * observed; the driver checks the exit status and counts stderr lines.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;
#define CHECK(c, ...)                                                     \
	do {                                                              \
		if (!(c)) {                                               \
			fprintf(stdout, "FAIL: " __VA_ARGS__);            \
			fputc('\n', stdout);                              \
			fails++;                                          \
		}                                                         \
	} while (0)

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: dlopen LIB local|global|deepbind\n");
		return 2;
	}
	if (getenv("LD_PRELOAD") && *getenv("LD_PRELOAD")) {
		fprintf(stderr, "dlopen: run this without LD_PRELOAD\n");
		return 2;
	}
	int flags = RTLD_NOW;
	if (!strcmp(argv[2], "global"))
		flags |= RTLD_GLOBAL;
	else if (!strcmp(argv[2], "deepbind"))
		flags |= RTLD_LOCAL | RTLD_DEEPBIND;
	else
		flags |= RTLD_LOCAL;

	void *before_small = malloc(100), *before_large = malloc(1 << 20);
	CHECK(before_small && before_large, "malloc before dlopen");
	memset(before_large, 1, 1 << 20);

	void *h = dlopen(argv[1], flags);
	if (!h) {
		printf("dlopen %s: refused: %s\n", argv[2], dlerror());
		return 3;
	}
	const char *(*version)(void) = (const char *(*)(void))dlsym(h, "vmapalloc_version");
	int (*owns)(const void *) = (int (*)(const void *))dlsym(h, "vmapalloc_owns");
	int (*counter_get)(const char *, uint64_t *) =
		(int (*)(const char *, uint64_t *))dlsym(h, "vmapalloc_counter_get");
	size_t (*purge)(void) = (size_t(*)(void))dlsym(h, "vmapalloc_purge");
	int (*stats_print)(int, int) = (int (*)(int, int))dlsym(h, "vmapalloc_stats_print");
	void *(*lib_malloc)(size_t) = (void *(*)(size_t))dlsym(h, "malloc");
	void (*lib_free)(void *) = (void (*)(void *))dlsym(h, "free");
	CHECK(version && owns && counter_get && purge && stats_print && lib_malloc && lib_free,
	      "API symbols missing");
	if (fails)
		return 1;

	/* The program's own malloc is still glibc's (the library came too late
	 * to interpose): its blocks are not vmapalloc's. */
	void *after_large = malloc(4 << 20);
	CHECK(after_large != NULL, "malloc after dlopen");
	int own_before = owns(before_large), own_after = owns(after_large);
	uint64_t regions = 0, large = 0;
	counter_get("regions", &regions);
	counter_get("large_allocs", &large);

	/* vmapalloc's own malloc/free pair, through dlsym. */
	unsigned char *v = lib_malloc(8 << 20);
	CHECK(v != NULL, "the library's malloc(8 MiB) failed");
	int own_v = v ? owns(v) : -1;
	if (v) {
		memset(v, 2, 8 << 20);
		lib_free(v);
	}
	size_t purged = purge();
	int fd = open("/dev/null", O_WRONLY);
	int rc = stats_print(fd, 0);
	close(fd);

	free(before_small);
	free(before_large);
	free(after_large);
	for (int i = 0; i < 1000; i++)
		free(malloc((size_t)(i * 997) % (3 << 20) + 1));
	printf("dlopen %s: version %s; program blocks owned by vmapalloc: before %d, after %d; "
	       "arena regions %llu; the library's own malloc(8 MiB) owned %d; purge %zu bytes; "
	       "stats_print %d\n",
	       argv[2], version(), own_before, own_after, (unsigned long long)regions, own_v, purged, rc);
	CHECK(own_before == 0 && own_after == 0, "a glibc block is claimed by vmapalloc");
	CHECK(rc == 0, "stats_print failed");
	dlclose(h);
	for (int i = 0; i < 100; i++)
		free(malloc((size_t)i * 4096 + 1));
	return fails ? 1 : 0;
}
