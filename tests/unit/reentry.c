/*
 * reentry.c — unit tests of the facade's re-entry paths (core/alloc.c,
 * "re-entry"; core/mmap.c, "re-entered"): what a call does when it finds
 * this thread already inside a range-allocator section, as a signal handler
 * or a fork handler would.  The tests enter a section by hand
 * (vmap_depth_enter) instead of racing a real signal, so that each outcome
 * is checked every time; tests/reliability's signal storms race the real
 * thing.  Criterion runs every Test in its own process.
 */
#include "unit.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "alloc.h"
#include "mmap.h"
#include "stats.h"

extern char **environ;

static void setup(void)
{
	setenv("VMAPALLOC_SHARDS", "1", 1);
	setenv("VMAPALLOC_PURGE_DELAY_MS", "0", 1);
	vmap_init();
	cr_assert(vmap_range_ready(), "the arena could be reserved");
}

static int64_t blocks(void)
{
	return vmap_stat_read(VMAP_STAT_large_blocks_in_use);
}

/* mincore fails with ENOMEM on unmapped pages: the block is really gone. */
static bool mapped(void *p)
{
	unsigned char v;
	return mincore(p, 4096, &v) == 0;
}

Test(reentry, large_malloc_reentered_maps_an_escape_block, .init = setup)
{
	int64_t b0 = blocks();
	vmap_depth_enter();
	unsigned char *p = vmap_malloc(MiB + 100);
	cr_assert_not_null(p);
	cr_assert(!vmap_range_owns(p), "not carved from the arena");
	cr_assert_eq((uintptr_t)p % 4096, 0);
	cr_assert_geq(vmap_usable_size(p), MiB + 100);
	memset(p, 7, MiB + 100);
	cr_assert_eq(blocks(), b0, "the range allocator's counters are not touched");
	vmap_free(p);
	cr_assert(!mapped(p), "freed at once: a munmap, no lock");
	vmap_depth_leave();
}

Test(reentry, escape_blocks_are_zeroed_aligned_and_freed_from_depth_zero, .init = setup)
{
	vmap_depth_enter();
	unsigned char *c = vmap_calloc(1, 3 * MiB);
	void *a = NULL;
	cr_assert_eq(vmap_posix_memalign(&a, 2 * MiB, 300 * KiB), 0);
	void *s = vmap_malloc(100); /* small: glibc's, as without vmapalloc */
	vmap_depth_leave();
	cr_assert_not_null(c);
	for (size_t i = 0; i < 3 * MiB; i += 4093)
		cr_assert_eq(c[i], 0);
	cr_assert_eq((uintptr_t)a % (2 * MiB), 0);
	cr_assert(!vmap_range_owns(a));
	cr_assert_not_null(s);
	/* glibc's own answer: under ASan, malloc_usable_size is ASan's. */
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	cr_assert_not_null(libc);
	size_t (*libc_usable)(void *) = (size_t (*)(void *))dlsym(libc, "malloc_usable_size");
	cr_assert_not_null(libc_usable);
	cr_assert_eq(vmap_usable_size(s), libc_usable(s), "glibc's block");
	dlclose(libc);
	/* A realloc at depth 0 moves an escape block into the arena. */
	c[5] = 42;
	unsigned char *r = vmap_realloc(c, 4 * MiB);
	cr_assert_not_null(r);
	cr_assert(vmap_range_owns(r));
	cr_assert_eq(r[5], 42);
	cr_assert(!mapped(c), "the escape block was unmapped");
	vmap_free(a);
	cr_assert(!mapped(a));
	vmap_free(r);
	vmap_free(s);
}

Test(reentry, free_of_an_arena_block_waits_for_the_section_to_end, .init = setup)
{
	int64_t b0 = blocks();
	void *p = vmap_malloc(MiB);
	cr_assert(vmap_range_owns(p));
	cr_assert_eq(blocks(), b0 + 1);
	int saved = errno = 1234;
	vmap_depth_enter();
	vmap_free(p);
	cr_assert_eq(blocks(), b0 + 1, "deferred: the interrupted code may hold the shard lock");
	vmap_depth_leave();
	cr_assert_eq(blocks(), b0, "done when the outermost section ended");
	cr_assert_eq(errno, saved, "free keeps errno, deferred too");
}

Test(reentry, realloc_reentered_copies_and_defers_the_old_block, .init = setup)
{
	int64_t b0 = blocks();
	unsigned char *p = vmap_malloc(MiB);
	for (size_t i = 0; i < MiB; i++)
		p[i] = (unsigned char)(i * 7);
	vmap_depth_enter();
	unsigned char *q = vmap_realloc(p, 2 * MiB);
	cr_assert_not_null(q);
	cr_assert(!vmap_range_owns(q), "an escape block: no range call while re-entered");
	cr_assert_eq(blocks(), b0 + 1, "the old block is still there");
	vmap_depth_leave();
	cr_assert_eq(blocks(), b0);
	for (size_t i = 0; i < MiB; i++)
		cr_assert_eq(q[i], (unsigned char)(i * 7));
	vmap_free(q);
}

Test(reentry, munmap_of_arena_pages_is_deferred_and_mmap_goes_to_the_kernel, .init = setup)
{
	void *m = vmap_mmap(NULL, 256 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(!vmap_os_is_err(m));
	cr_assert(vmap_range_owns(m), "served from the arena");
	int64_t in_use = vmap_stat_read(VMAP_STAT_mmap_bytes_in_use);
	vmap_depth_enter();
	void *k = vmap_mmap_reentered(NULL, 64 * KiB, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(!vmap_os_is_err(k));
	cr_assert(!vmap_range_owns(k), "the kernel's mapping");
	cr_assert_eq(vmap_mmap_reentered(m, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
					 -1, 0),
		     (void *)(intptr_t)-ENOMEM, "MAP_FIXED into the arena would need its locks");
	cr_assert_eq(vmap_munmap_reentered(k, 64 * KiB), 0);
	cr_assert(!mapped(k));
	cr_assert_eq(vmap_munmap_reentered(m, 256 * KiB), 0);
	cr_assert_eq(vmap_stat_read(VMAP_STAT_mmap_bytes_in_use), in_use, "not yet");
	vmap_depth_leave();
	cr_assert_eq(vmap_stat_read(VMAP_STAT_mmap_bytes_in_use), in_use - (int64_t)(256 * KiB));
}

/* F6: fork() from a handler that interrupted this (only) thread while it
 * held a shard lock.  Before the fix, fork_prepare waited for that lock for
 * ever (the Test's timeout). */
Test(reentry, fork_from_a_section_holding_a_lock_does_not_wait_for_it, .init = setup,
     .timeout = 20)
{
	vmap_depth_enter();
	vmap_shard_lock(&vmap_shards[0]);
	pid_t pid = fork();
	if (pid == 0) {
		/* The child's handler may allocate: re-entered, without locks. */
		void *p = vmap_malloc(MiB);
		vmap_free(p);
		_exit(p ? 0 : 3);
	}
	cr_assert_gt(pid, 0);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	vmap_shard_unlock(&vmap_shards[0]);
	vmap_depth_leave();
	void *p = vmap_malloc(MiB);
	cr_assert(vmap_range_owns(p));
	vmap_free(p);
}

/* F5: a prepare handler registered before vmapalloc's runs after it, while
 * fork_prepare holds every lock; it and its parent/child twins allocate and
 * free.  Before the fix: a deadlock on the shard lock (the timeout). */
static void *held[2];
static void early_prepare(void)
{
	held[0] = vmap_malloc(300 * KiB);
	held[1] = vmap_malloc(100);
}
static void early_after(void)
{
	vmap_free(held[0]);
	vmap_free(held[1]);
	void *p = vmap_malloc(2 * MiB);
	if (p)
		memset(p, 1, 2 * MiB);
	vmap_free(p);
}
static void *touch(void *arg)
{
	vmap_free(vmap_malloc(MiB)); /* a second thread: fork_prepare takes the locks */
	return arg;
}

Test(reentry, fork_handlers_registered_before_ours_may_allocate, .timeout = 20)
{
	pthread_atfork(early_prepare, early_after, early_after);
	setup();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, touch, NULL), 0);
	pthread_join(t, NULL);
	cr_assert(vmap_threads_seen);
	int64_t b0 = blocks();
	void *kept = vmap_malloc(MiB);
	for (int i = 0; i < 3; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			vmap_free(kept);
			_exit(blocks() == b0 ? 0 : 4);
		}
		cr_assert_gt(pid, 0);
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	}
	cr_assert_eq(blocks(), b0 + 1, "no block of the handlers left behind");
	vmap_free(kept);
}
