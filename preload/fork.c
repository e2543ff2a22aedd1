/*
 * fork.c — _Fork() with vmapalloc's fork handlers (tests/reliability/REQUIREMENTS.md #18).
 *
 * glibc 2.34's _Fork() forks without running any atfork handler (it is the
 * async-signal-safe fork).  Programs call malloc in its child anyway (setenv
 * before exec, gperftools #1570).  Without vmapalloc's handlers the child
 * inherits the shard and global locks as the other threads held them at that
 * instant: its first large malloc or free on such a shard waited for ever
 * (rel-fork-_Fork: 2 children of 49 hung in 10 s).  So _Fork takes them as
 * fork() does (alloc.c fork_prepare: not when single-threaded, not from a
 * signal handler that interrupted the allocator) and releases or resets them
 * after; the program's and other libraries' handlers still do not run.
 * glibc's own fork() calls its _Fork internally, not through this symbol.
 *
 * glibc's _Fork is found in libc.so.6's symbol table (GLIBC_2.34), never
 * with dlsym (core/backend.c).  A raw clone(2) cannot be caught: lock.c
 * takes over a lock whose holder does not exist in the child instead.
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/types.h>

#include "alloc.h"
#include "backend.h"

#define EXPORT __attribute__((visibility("default")))

typedef pid_t fork_fn(void);
static fork_fn *real_fork;

EXPORT pid_t _Fork(void)
{
	fork_fn *f = __atomic_load_n(&real_fork, __ATOMIC_ACQUIRE);
	if (!f) {
		/* Racing threads store the same value. */
		f = (fork_fn *)vmap_elf_symbol_version("libc.so.6", "_Fork", "GLIBC_2.34");
		if (!f) {
			errno = ENOSYS;
			return -1;
		}
		__atomic_store_n(&real_fork, f, __ATOMIC_RELEASE);
	}
	vmap_fork_hook_prepare();
	pid_t pid = f();
	vmap_fork_hook_after(pid == 0);
	return pid;
}
