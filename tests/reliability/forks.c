/*
 * forks.c — fork, posix_spawn and vfork while threads allocate
 * (REQUIREMENTS.md #15, #17, #18).
 *
 *   forks threads [SECONDS]   4 allocator threads + 2 forking threads: each
 *                             fork's child allocates, frees and mmaps at once
 *                             (small, large, calloc, realloc), forks a
 *                             grandchild that does the same, and exits; the
 *                             parent's blocks keep their patterns
 *   forks sigfork [SECONDS]   one thread allocating; SIGALRM at 1 kHz whose
 *                             handler forks, the child _exits at once
 *                             (tst-mallocfork): the child must not hang and
 *                             the parent continues
 *   forks _fork [SECONDS]     4 allocator threads + 2 threads calling
 *                             _Fork() (glibc 2.34+: no atfork handler runs,
 *                             neither the program's nor glibc's own malloc
 *                             locking): each child verifies and frees blocks
 *                             the parent handed it (small and large, made
 *                             by the forking thread and by main), allocates
 *                             small, large, calloc, realloc and mmap, and
 *                             exits; a child that hangs is a lock another
 *                             thread held at the fork, and one that prints
 *                             (vmapalloc's lock take-over, meant for raw
 *                             clone children) means the handlers did not
 *                             run: both fail
 *   forks clone [SECONDS]     the same with a raw clone(2) system call
 *                             (syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0): no
 *                             glibc fork code at all)
 *   forks spawn [SECONDS]     4 allocator threads + a thread running
 *                             posix_spawn(/bin/true), vfork+execve(/bin/true)
 *                             and popen("true") in turn; every child exits 0
 *                             and the parent's heap stays intact
 * Each mode runs under a watchdog (SECONDS + 60 s): a hang prints gdb
 * backtraces of every thread and fails.  At the end: every block verified,
 * large_blocks_in_use back at its start value.
 */
#include "rel.h"

#include <malloc.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>

static double seconds = 10;
static atomic_int stop;
static atomic_ulong ops, forks_done, children_failed, children_said;
static atomic_ulong churned; /* allocator operations completed, one by one */

struct kept {
	void *p;
	size_t n;
	uint64_t seed;
};

static void churn(uint64_t *s, struct kept *keep, unsigned nkeep, unsigned iters)
{
	for (unsigned it = 0; it < iters; it++) {
		unsigned k = (unsigned)(rel_rnd(s) % nkeep);
		if (keep[k].p) {
			CHECK(rel_marked(keep[k].p, keep[k].n, keep[k].seed), "block of %zu damaged",
			      keep[k].n);
			free(keep[k].p);
			keep[k].p = NULL;
		}
		uint64_t r = rel_rnd(s);
		size_t n = r % 3 ? 16 + r % (64 * KiB) : 100 * KiB + r % (3 * MiB);
		void *p;
		switch (r % 4) {
		case 0: p = calloc(1, n); break;
		case 1:
			p = malloc(n / 2 + 1);
			if (p) {
				void *q = realloc(p, n);
				if (!q)
					free(p);
				p = q;
			}
			break;
		default: p = malloc(n); break;
		}
		CHECK(p != NULL, "allocation of %zu failed", n);
		keep[k] = (struct kept){p, n, rel_rnd(s)};
		rel_mark(p, n, keep[k].seed);
		atomic_fetch_add_explicit(&churned, 1, memory_order_relaxed);
	}
}

static void release(struct kept *keep, unsigned nkeep)
{
	for (unsigned k = 0; k < nkeep; k++)
		if (keep[k].p) {
			CHECK(rel_marked(keep[k].p, keep[k].n, keep[k].seed), "block of %zu damaged",
			      keep[k].n);
			free(keep[k].p);
			keep[k].p = NULL;
		}
}

/* What a fork child does right away. */
static void child_work(uint64_t seed)
{
	struct kept keep[8] = {{0}};
	churn(&seed, keep, 8, 40);
	void *m = mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED, "mmap in the child");
	memset(m, 7, MiB);
	munmap(m, MiB);
	release(keep, 8);
}

static void *allocator(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 3;
	struct kept keep[32] = {{0}};
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		churn(&s, keep, 32, 64);
		atomic_fetch_add_explicit(&ops, 64, memory_order_relaxed);
	}
	release(keep, 32);
	return NULL;
}

static bool wait_child(pid_t pid, double limit)
{
	double t0 = rel_now();
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) && WEXITSTATUS(st) == 0;
		if (r < 0 && errno != EINTR)
			return false;
		if (rel_now() - t0 > limit) {
			fprintf(stderr, "FAIL: child %d hung; its backtrace:\n", (int)pid);
			rel_backtrace(pid);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return false;
		}
		usleep(1000);
	}
}

static void *forker(void *arg)
{
	uint64_t s = (uintptr_t)arg * 77 + 1;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pid_t pid = fork();
		if (pid == 0) {
			child_work(rel_rnd(&s));
			pid_t g = fork();
			if (g == 0) {
				child_work(rel_rnd(&s) + 1);
				_exit(0);
			}
			_exit(g > 0 && wait_child(g, 30) ? 0 : 1);
		}
		CHECK(pid > 0, "fork failed: %s", strerror(errno));
		if (!wait_child(pid, 40))
			atomic_fetch_add(&children_failed, 1);
		atomic_fetch_add(&forks_done, 1);
	}
	return NULL;
}

/*
 * _Fork and raw clone (#18): the child inherits the allocator's locks as the
 * other threads held them at that instant, and runs no fork handler.  The
 * parent hands each child blocks to free: PARENT_BLOCKS made by this thread
 * just before the fork (small and large: thread cache, pools, slabs) and
 * the SHARED ones main made at start.
 */
#define PARENT_BLOCKS 12
#define SHARED_BLOCKS 8
static struct kept shared[SHARED_BLOCKS];
static bool use_clone;

static pid_t raw_fork(void)
{
	if (use_clone)
		return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	return _Fork();
}

static void *raw_forker(void *arg)
{
	uint64_t s = (uintptr_t)arg * 131 + 7;
	struct kept mine[PARENT_BLOCKS] = {{0}};
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (unsigned k = 0; k < PARENT_BLOCKS; k++) {
			uint64_t r = rel_rnd(&s);
			size_t n = k % 2 ? 16 + r % 4096 : 64 * KiB + r % (2 * MiB);
			mine[k] = (struct kept){malloc(n), n, rel_rnd(&s)};
			CHECK(mine[k].p != NULL, "allocation of %zu failed", n);
			rel_mark(mine[k].p, n, mine[k].seed);
		}
		uint64_t cseed = rel_rnd(&s);
		/* The child's stderr, to read what vmapalloc said there. */
		int err = memfd_create("child-stderr", MFD_CLOEXEC);
		CHECK(err >= 0, "memfd_create: %s", strerror(errno));
		pid_t pid = raw_fork();
		if (pid == 0) {
			dup2(err, 2);
			/* The parent's blocks: intact, then freed (some after the
			 * child's own work, so that they meet a used cache). */
			for (unsigned k = 0; k < PARENT_BLOCKS; k++)
				if (!rel_marked(mine[k].p, mine[k].n, mine[k].seed))
					_exit(3);
			for (unsigned k = 0; k < PARENT_BLOCKS; k += 2)
				free(mine[k].p);
			child_work(cseed);
			for (unsigned k = 1; k < PARENT_BLOCKS; k += 2)
				free(mine[k].p);
			for (unsigned k = 0; k < SHARED_BLOCKS; k++) {
				if (!rel_marked(shared[k].p, shared[k].n, shared[k].seed))
					_exit(4);
				free(shared[k].p);
			}
			child_work(cseed + 1);
			_exit(0);
		}
		CHECK(pid > 0, "%s failed: %s", use_clone ? "clone" : "_Fork", strerror(errno));
		for (unsigned k = 0; k < PARENT_BLOCKS; k++) {
			CHECK(rel_marked(mine[k].p, mine[k].n, mine[k].seed), "block of %zu damaged",
			      mine[k].n);
			free(mine[k].p);
		}
		if (!wait_child(pid, 20))
			atomic_fetch_add(&children_failed, 1);
		char said[512];
		ssize_t n = pread(err, said, sizeof said - 1, 0);
		close(err);
		if (n > 0) {
			/* The lock take-over of lock.c (the raw clone's way out):
			 * a _Fork child must not need it, its locks are free. */
			said[n] = '\0';
			atomic_fetch_add(&children_said, 1);
			if (!use_clone)
				fprintf(stderr, "FAIL: a _Fork child said: %s", said);
		}
		atomic_fetch_add(&forks_done, 1);
	}
	return NULL;
}

static void *spawner(void *arg)
{
	(void)arg;
	static char *const argv_true[] = {"true", NULL};
	unsigned long i = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pid_t pid = -1;
		switch (i++ % 3) {
		case 0:
			CHECK(posix_spawn(&pid, "/bin/true", NULL, NULL, argv_true, environ) == 0,
			      "posix_spawn");
			break;
		case 1:
			pid = vfork();
			if (pid == 0) {
				execve("/bin/true", argv_true, environ);
				_exit(127);
			}
			break;
		default: {
			FILE *f = popen("true", "r");
			CHECK(f != NULL, "popen");
			if (f && pclose(f) != 0)
				atomic_fetch_add(&children_failed, 1);
			atomic_fetch_add(&forks_done, 1);
			continue;
		}
		}
		CHECK(pid > 0, "spawn failed");
		if (!wait_child(pid, 30))
			atomic_fetch_add(&children_failed, 1);
		atomic_fetch_add(&forks_done, 1);
	}
	return NULL;
}

static void sigfork_handler(int sig)
{
	(void)sig;
	/* At least one allocator operation between two forks: a fork, its
	 * child's exit and the copy-on-write faults after it can take more than
	 * the 1 ms period on a loaded machine, and then the handler alone would
	 * run (the watchdog fired with the main loop starved, not deadlocked). */
	static unsigned long last;
	unsigned long now = atomic_load_explicit(&churned, memory_order_relaxed);
	if (now == last)
		return;
	last = now;
	int saved = errno;
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid > 0) {
		int st;
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			atomic_fetch_add(&children_failed, 1);
		atomic_fetch_add(&forks_done, 1);
	}
	errno = saved;
}

static const char *mode = "threads";

static int run(void *arg)
{
	(void)arg;
	uint64_t blocks0 = vmt_vm ? CTR("large_blocks_in_use") : 0;
	double t0 = rel_now();
	if (!strcmp(mode, "sigfork")) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = sigfork_handler;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, 1000}, {0, 1000}};
		setitimer(ITIMER_REAL, &it, NULL);
		uint64_t s = 99;
		struct kept keep[32] = {{0}};
		while (rel_now() - t0 < seconds) {
			churn(&s, keep, 32, 64);
			atomic_fetch_add(&ops, 64);
		}
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		release(keep, 32);
	} else {
		bool spawn = !strcmp(mode, "spawn");
		bool raw = !strcmp(mode, "_fork") || !strcmp(mode, "clone");
		use_clone = !strcmp(mode, "clone");
		uint64_t s = 5;
		for (unsigned k = 0; raw && k < SHARED_BLOCKS; k++) {
			size_t n = k % 2 ? 100 + k * 50 : 300 * KiB + k * 4096;
			shared[k] = (struct kept){malloc(n), n, rel_rnd(&s)};
			CHECK(shared[k].p != NULL, "allocation of %zu failed", n);
			rel_mark(shared[k].p, n, shared[k].seed);
		}
		pthread_t a[4], f[2];
		for (int i = 0; i < 4; i++)
			CHECK(pthread_create(&a[i], NULL, allocator, (void *)(uintptr_t)(i + 1)) == 0,
			      "pthread_create");
		int nf = spawn ? 1 : 2;
		for (int i = 0; i < nf; i++)
			CHECK(pthread_create(&f[i], NULL, spawn ? spawner : raw ? raw_forker : forker,
					     (void *)(uintptr_t)(i + 1)) == 0,
			      "pthread_create");
		while (rel_now() - t0 < seconds)
			usleep(10000);
		atomic_store(&stop, 1);
		for (int i = 0; i < nf; i++)
			pthread_join(f[i], NULL);
		for (int i = 0; i < 4; i++)
			pthread_join(a[i], NULL);
		for (unsigned k = 0; raw && k < SHARED_BLOCKS; k++) {
			CHECK(rel_marked(shared[k].p, shared[k].n, shared[k].seed), "block of %zu damaged",
			      shared[k].n);
			free(shared[k].p);
		}
	}
	printf("forks %s: %.0f s, %lu children (%lu failed), %lu allocator operations\n", mode, seconds,
	       (unsigned long)forks_done, (unsigned long)children_failed, (unsigned long)ops);
	CHECK(forks_done > 0, "no child was created");
	CHECK(children_failed == 0, "%lu children failed or hung", (unsigned long)children_failed);
	if (!strcmp(mode, "_fork") || !strcmp(mode, "clone"))
		printf("forks %s: %lu children printed a line (lock take-over)\n", mode,
		       (unsigned long)children_said);
	CHECK(strcmp(mode, "_fork") || children_said == 0,
	      "%lu _Fork children took a lock over: vmapalloc's fork handlers did not run",
	      (unsigned long)children_said);
	if (vmt_vm)
		CHECK(CTR("large_blocks_in_use") == blocks0, "large blocks in use %llu, %llu at the start",
		      (unsigned long long)CTR("large_blocks_in_use"), (unsigned long long)blocks0);
	vmt_done("forks");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("forks");
	if (argc > 1)
		mode = argv[1];
	if (argc > 2)
		seconds = atof(argv[2]);
	if (strcmp(mode, "threads") && strcmp(mode, "sigfork") && strcmp(mode, "spawn") &&
	    strcmp(mode, "_fork") && strcmp(mode, "clone")) {
		fprintf(stderr, "usage: forks threads|sigfork|spawn|_fork|clone [SECONDS]\n");
		return 2;
	}
	int st = rel_watchdog(mode, run, NULL, seconds + 60);
	if (st == -1)
		return 1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL: forks %s: %s\n", mode, rel_status_str(st));
		return 1;
	}
	return 0;
}
