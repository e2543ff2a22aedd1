/*
 * backend.c — unit tests of core/backend.c: the route to glibc's functions.
 *
 * glibc's functions that vmapalloc calls (vmap_libc) are looked up on their
 * first call, not at start: each slot starts as a resolver that
 * finds the function in libc.so.6's own tables, stores it and calls it.  No
 * preload here: the names the test binary binds to are glibc's, so the
 * looked-up addresses can be checked against them.
 */
#include "unit.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "backend.h"

/* glibc's definitions, as the test binary's references bind them. */
static void *expected(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	cr_assert_not_null(f, "dlsym(%s)", name);
	return f;
}

#define SLOT(field) (*(void *volatile *)&vmap_libc.field)

Test(backend, glibc_functions_are_looked_up_on_their_first_call)
{
	struct {
		void *slot_before;
		void **slot;
		const char *name;
	} s[] = {
		{SLOT(malloc), (void **)&vmap_libc.malloc, "__libc_malloc"},
		{SLOT(free), (void **)&vmap_libc.free, "__libc_free"},
		{SLOT(calloc), (void **)&vmap_libc.calloc, "__libc_calloc"},
		{SLOT(realloc), (void **)&vmap_libc.realloc, "__libc_realloc"},
		{SLOT(memalign), (void **)&vmap_libc.memalign, "__libc_memalign"},
		{SLOT(usable_size), (void **)&vmap_libc.usable_size, "malloc_usable_size"},
		{SLOT(trim), (void **)&vmap_libc.trim, "malloc_trim"},
		{SLOT(mallinfo2), (void **)&vmap_libc.mallinfo2, "mallinfo2"},
		{SLOT(mallopt), (void **)&vmap_libc.mallopt, "mallopt"},
	};
	/* Before any call: a resolver of vmapalloc's own, not glibc's function. */
	for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
		cr_assert_not_null(s[i].slot_before, "%s", s[i].name);
		cr_assert_neq(s[i].slot_before, expected(s[i].name), "%s resolved at start", s[i].name);
	}
	/* The first call works and fills its slot, and only its own. */
	void *p = vmap_libc.malloc(100);
	cr_assert_not_null(p);
	cr_assert_eq(*s[0].slot, expected("__libc_malloc"));
	cr_assert_eq(*s[6].slot, s[6].slot_before, "malloc_trim looked up by malloc's first call");
	cr_assert_geq(vmap_libc.usable_size(p), 100);
	p = vmap_libc.realloc(p, 5000);
	cr_assert_not_null(p);
	vmap_libc.free(p);
	int *z = vmap_libc.calloc(10, sizeof(int));
	for (int i = 0; i < 10; i++)
		cr_assert_eq(z[i], 0);
	vmap_libc.free(z);
	void *a = vmap_libc.memalign(256, 100);
	cr_assert_eq((uintptr_t)a % 256, 0);
	vmap_libc.free(a);
	vmap_libc.trim(0);
	cr_assert_eq(vmap_libc.mallopt(M_TRIM_THRESHOLD, 1 << 20), 1);
	struct mallinfo2 mi = vmap_libc.mallinfo2();
	cr_assert_gt(mi.arena, 0);
	for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
		cr_assert_eq(*s[i].slot, expected(s[i].name), "%s after its first call", s[i].name);
}

/* Many threads making their first call at once: each gets glibc's function. */
#define THREADS 16
static pthread_barrier_t start;

static void *first_calls(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	pthread_barrier_wait(&start);
	void *ok = (void *)1;
	switch (i % 4) {
	case 0: {
		void *p = vmap_libc.malloc(64 + i);
		if (!p || vmap_libc.usable_size(p) < 64 + i)
			ok = NULL;
		vmap_libc.free(p);
		break;
	}
	case 1:
		if (vmap_libc.mallopt(M_TRIM_THRESHOLD, 1 << 20) != 1)
			ok = NULL;
		break;
	case 2: {
		void *p = vmap_libc.calloc(4, 32);
		p = vmap_libc.realloc(p, 1000);
		if (!p)
			ok = NULL;
		vmap_libc.free(p);
		break;
	}
	case 3:
		vmap_libc.trim(0);
		(void)vmap_libc.mallinfo2();
		break;
	}
	return ok;
}

Test(backend, first_calls_racing_from_many_threads_all_work)
{
	pthread_t t[THREADS];
	pthread_barrier_init(&start, NULL, THREADS);
	for (uintptr_t i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, first_calls, (void *)i), 0);
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		cr_assert_not_null(r, "thread %d", i);
	}
	cr_assert_eq(*(void **)&vmap_libc.malloc, expected("__libc_malloc"));
	cr_assert_eq(*(void **)&vmap_libc.trim, expected("malloc_trim"));
}

/* A child forked before any call resolves on its own; so does the parent. */
Test(backend, first_call_in_a_forked_child_works)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		void *p = vmap_libc.malloc(200);
		int ok = p && vmap_libc.usable_size(p) >= 200 &&
			 *(void **)&vmap_libc.malloc == dlsym(RTLD_DEFAULT, "__libc_malloc");
		vmap_libc.free(p);
		_exit(ok ? 0 : 1);
	}
	void *p = vmap_libc.malloc(300);
	cr_assert_not_null(p);
	vmap_libc.free(p);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %#x", st);
}

/* The walk is made once: later calls get its first result. */
Test(backend, the_walk_to_libc_is_made_once)
{
	struct vmap_load a, b;
	vmap_backend_walk(&a);
	vmap_backend_walk(&b);
	cr_assert(a.libc_found);
	cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
	cr_assert_eq(vmap_backend_init(&b), 0);
	cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
	/* The core is linked into this program: the first object, before libc. */
	cr_assert_eq(a.self_index, 1);
	cr_assert_lt(a.exe_lo, (uintptr_t)&expected);
	cr_assert_gt(a.exe_hi, (uintptr_t)&expected);
}

Test(backend, symbols_of_libc_and_of_other_objects_are_found)
{
	cr_assert_eq(vmap_elf_symbol(LIBC_SO, "mallopt"), expected("mallopt"));
	cr_assert_null(vmap_elf_symbol(LIBC_SO, "no_such_symbol_in_glibc"));
	cr_assert_eq(vmap_elf_symbol_version(LIBC_SO, "_Fork", "GLIBC_2.34"), expected("_Fork"));
	cr_assert_null(vmap_elf_symbol("libno-such-object.so.1", "x"));
}
