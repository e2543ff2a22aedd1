/*
 * fork.c — the allocator's fork handlers: registered at init (so that they
 * run last among prepare handlers and first after fork), they take glibc's
 * stdio list lock, then the purge lock, every shard lock, then the global
 * lock — the rank order of lock.h.
 * Not when no second thread ever called in (nobody else can hold them; glibc
 * skips its own malloc locks then too) or when fork() comes from a signal
 * handler that interrupted this thread inside the range allocator (it holds
 * them itself).  From prepare to parent/child the forking thread counts as
 * re-entered, so that fork handlers which run inside that window may
 * allocate (see "re-entry").
 *
 * The stdio list lock comes first, as in glibc's own fork (before its malloc
 * locks): fork() takes it after the prepare handlers, and its holder
 * (fflush(NULL), fopen, exit) may wait for a FILE lock whose owner is in
 * getline's realloc, waiting for a lock of ours.  Holding ours while fork
 * waits for the list lock closed that circle.  It is a recursive lock:
 * prepare takes it once, fork() once more; in the parent fork() releases its
 * count and fork_parent ours; in the child fork() resets it (when it took
 * it: more than one thread) and fork_child resets it too (_Fork, or a
 * process glibc counts single-threaded, leaves it to us).
 */
#include "alloc_impl.h"

#include <gnu/lib-names.h>

#include "background.h"
#include "fmt.h"
#include "lock.h"
#include "range.h"
#include "stats.h"
#include "thread.h"

/*
 * glibc's __register_atfork (what pthread_atfork, from libc_nonshared.a,
 * calls) looked up by init rather than imported: an import cost every
 * process, allocating or not, a symbol look-up and a version (GLIBC_2.3.2)
 * check at load.  No DSO handle: the library is never unloaded
 * (-z nodelete), so the handlers need no unregistering.
 */
void vmap_fork_register(void)
{
	/* (read at every start: section.h VMAP_START_DATA) */
	static const char libc_so[] VMAP_START_DATA = LIBC_SO;
	static const char register_atfork[] VMAP_START_DATA = "__register_atfork";
	int (*reg)(void (*)(void), void (*)(void), void (*)(void), void *) =
		(__typeof__(reg))vmap_elf_symbol(libc_so, register_atfork);
	if (!reg || reg(vmap_fork_prepare, vmap_fork_parent, vmap_fork_child, NULL) != 0)
		vmap_say("cannot register fork handlers (glibc's __register_atfork): ",
			 "a child forked while another thread allocates may hang", NULL);
}

/*
 * glibc's stdio list lock (genops.c): lock, unlock, reset.  Looked up at the
 * first fork that takes the locks, not at init: a process that never forks
 * writes no page of the library's data for them.  Racing first forks store
 * the same values; `looked` is published last.  lock NULL: a libc without
 * them, not taken.
 */
static struct {
	void (*lock)(void), (*unlock)(void), (*reset)(void);
	bool looked;
} stdio_list;

static void stdio_list_find(void)
{
	if (__atomic_load_n(&stdio_list.looked, __ATOMIC_ACQUIRE))
		return;
	void *l = vmap_elf_symbol(LIBC_SO, "_IO_list_lock");
	void *u = vmap_elf_symbol(LIBC_SO, "_IO_list_unlock");
	void *r = vmap_elf_symbol(LIBC_SO, "_IO_list_resetlock");
	stdio_list.lock = l && u && r ? (void (*)(void))l : NULL;
	stdio_list.unlock = (void (*)(void))u;
	stdio_list.reset = (void (*)(void))r;
	__atomic_store_n(&stdio_list.looked, true, __ATOMIC_RELEASE);
}

/* Whether vmap_fork_prepare took the locks, read by the parent/child ones on
 * the same thread: per thread, since glibc runs the handlers of two forking
 * threads concurrently (the second waits in prepare for our locks). */
static __thread bool fork_locked;

void vmap_fork_prepare(void)
{
	/* Single-threaded: nobody else can hold a lock, and this thread holds
	 * some when fork() comes from a signal handler that interrupted it in
	 * the allocator (tst-mallocfork): taking them would wait for ever.
	 * Re-entered with other threads: the interrupted code holds locks we
	 * cannot name; taking none leaves the child those the other threads
	 * hold — glibc's own malloc has the same limit there. */
	vmap_stats_fork_prepare();
	/* The cache goes before the copy.  fork copies the page-table entry
	 * of every resident page (about 37 us per MiB here, and the child's exit
	 * as much again), and write-protects them: reusing a cached page after
	 * the fork takes a fault anyway, about what a fresh page costs.  Cached
	 * memory kept across a fork is paid for and buys nothing. */
	if (!vmap_reentered())
		vmap_range_purge_for_fork();
	fork_locked = __atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED) && !vmap_reentered();
	/* From here to fork_parent/fork_child this thread counts as re-entered:
	 * the prepare handlers registered before ours run after it, and the
	 * parent/child ones registered before ours run before them; when they
	 * allocate they get escape blocks or glibc's, and their frees wait. */
	vmap_depth_enter();
	if (!fork_locked)
		return;
	stdio_list_find();
	if (stdio_list.lock)
		stdio_list.lock(); /* first: see the head of this file */
	/* Another thread setting up the arena finishes first (the child could
	 * not: it would wait for it forever). */
	vmap_range_setup_wait();
	vmap_locks_fork_prepare();
}

void vmap_fork_parent(void)
{
	if (fork_locked) {
		vmap_locks_fork_parent();
		if (stdio_list.lock)
			stdio_list.unlock();
	}
	vmap_depth_leave();
}

void vmap_fork_child(void)
{
	/* Not taken: free already, or held by the interrupted code of this very
	 * thread, which releases them when the handler returns. */
	if (fork_locked) {
		vmap_locks_fork_child();
		if (stdio_list.lock)
			stdio_list.reset();
	}
	vmap_background_fork_child();
	vmap_stats_fork_child(); /* the child's report is labelled with its parent */
	vmap_depth_leave();
}
