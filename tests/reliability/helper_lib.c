/*
 * helper_lib.c — a shared library for lifecycle.c, built twice:
 *   librel_early.so   (built without REL_LATE) linked into rel_lifecycle: its constructor runs before
 *                     libvmapalloc.so's (a dependency's constructor comes
 *                     first) and allocates, frees and
 *                     keeps blocks that main() later frees and reallocates;
 *                     with REL_ATFORK=1, it registers pthread_atfork
 *                     handlers that allocate (before vmapalloc registers
 *                     its own)
 *   librel_late.so    (-DREL_LATE) dlopen()ed by main() after vmapalloc is running: the
 *                     same atfork handlers, registered after vmapalloc's;
 *                     and rel_deep_free()/_malloc()/_realloc() for RTLD_DEEPBIND
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#ifndef REL_LATE
EXPORT void *rel_early_small, *rel_early_large;
#endif

static unsigned long atfork_calls;
/* Per thread: glibc (2.36 at least) drops its atfork lock around each
 * handler, so two threads forking at once run these concurrently. */
static __thread void *held[3];

/* Named after the library so that the two copies never interpose each other. */
#ifdef REL_LATE
EXPORT unsigned long rel_late_atfork_calls(void)
#else
EXPORT unsigned long rel_early_atfork_calls(void)
#endif
{
	return atfork_calls;
}

static void prepare(void)
{
	held[0] = malloc(100);
	held[1] = malloc(300 << 10);
	held[2] = calloc(1, 2 << 20);
	atfork_calls++;
}

static void after(void)
{
	for (int i = 0; i < 3; i++) {
		free(held[i]);
		held[i] = NULL;
	}
	void *p = malloc(1 << 20);
	if (p)
		memset(p, 1, 1 << 20);
	free(p);
}

__attribute__((constructor)) static void helper_init(void)
{
	/* Only for `lifecycle atfork` (REL_ATFORK=1): these handlers allocate,
	 * and the other modes fork too.  Registered before this constructor's
	 * first malloc, i.e. before vmapalloc has initialised and registered its
	 * own handlers (the early library); the late one registers after. */
	const char *a = getenv("REL_ATFORK");
	if (a && a[0] == '1')
		pthread_atfork(prepare, after, after);
#ifndef REL_LATE
	void *x = malloc(200000), *y = malloc(50);
	free(x);
	free(y);
	rel_early_small = strdup("allocated by a constructor that ran before vmapalloc's");
	rel_early_large = malloc(1 << 20);
	if (rel_early_large)
		memset(rel_early_large, 0x5a, 1 << 20);
#endif
}

#ifdef REL_LATE
EXPORT void rel_deep_free(void *p)
{
	free(p);
}

EXPORT void *rel_deep_malloc(size_t n)
{
	return malloc(n);
}

EXPORT void *rel_deep_realloc(void *p, size_t n)
{
	return realloc(p, n);
}
#endif
