/*
 * rel.h — helpers for the tests/reliability programs (black box: they run
 * under LD_PRELOAD=libvmapalloc.so and reach vmapalloc only through the
 * malloc family and the vmapalloc_* API found with dlsym, like the API tier;
 * vmtest.h from tests/preload/api provides CHECK, the API and patterns).
 *
 * Adds: a watchdog that runs a workload in a child process and, if it does not
 * finish in time, prints a backtrace of every thread of the child with
 * `gdb -batch -p` (a hang is a finding: the backtrace is the reproduction),
 * then kills it; /proc readers; a tiny sparse pattern for big blocks.
 */
#ifndef REL_H
#define REL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

extern char **environ;

static inline double rel_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline uint64_t rel_rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Sparse pattern: the first 64 bytes, one byte per page and the last byte.
 * Cheap on huge blocks (touches each page once) and catches overlap. */
static inline void rel_mark(void *p, size_t n, uint64_t seed)
{
	unsigned char *c = p;
	for (size_t i = 0; i < n && i < 64; i++)
		c[i] = (unsigned char)(seed + i * 7);
	for (size_t i = 4096; i < n; i += 4096)
		c[i] = (unsigned char)(seed ^ (i >> 12));
	c[n - 1] = (unsigned char)(seed * 3 + 1);
}

static inline int rel_marked(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *c = p;
	for (size_t i = 0; i + 1 < n && i < 64; i++) /* the last byte has its own mark */
		if (c[i] != (unsigned char)(seed + i * 7))
			return 0;
	for (size_t i = 4096; i < n - 1; i += 4096)
		if (c[i] != (unsigned char)(seed ^ (i >> 12)))
			return 0;
	return c[n - 1] == (unsigned char)(seed * 3 + 1);
}

/* A numeric "Name:   N kB" field of a /proc file, in KiB; -1 if absent. */
static inline long rel_file_kb(const char *path, const char *field)
{
	char buf[8192];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = strstr(buf, field);
	return p ? strtol(p + strlen(field), NULL, 10) : -1;
}

/* A numeric field of /proc/self/status ("VmSize:", "VmRSS:"...) in KiB. */
static inline long rel_status_kb(const char *field)
{
	return rel_file_kb("/proc/self/status", field);
}

/* The process's VMAs as vm.max_map_count counts them: the lines of
 * /proc/self/maps, less the [vsyscall] gate area (not a VMA of the mm). */
static inline long rel_vmas(void)
{
	char buf[65536 + 16];
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	long lines = 0;
	ssize_t n;
	bool gate = false;
	while ((n = read(fd, buf, 65536)) > 0) {
		buf[n] = '\0';
		for (ssize_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
		gate = gate || strstr(buf, "[vsyscall]");
	}
	close(fd);
	return lines - (gate ? 1 : 0);
}

__attribute__((unused)) static inline long rel_read_long(const char *path)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/* A SIGSEGV/SIGBUS handler that names the faulting address and prints the
 * mappings around it (from /proc/self/maps, with raw reads and writes), then
 * dies by the same signal: the report of a crash is its reproduction aid. */
__attribute__((unused)) static void rel_fault_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char line[256];
	uintptr_t a = (uintptr_t)si->si_addr;
	int n = snprintf(line, sizeof line, "rel: %s at address %#lx; mappings within 16 MiB:\n",
			 sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", (unsigned long)a);
	if (write(2, line, (size_t)n) < 0)
		_exit(99);
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	static char buf[1 << 16];
	size_t have = 0;
	ssize_t r;
	while (fd >= 0 && (r = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
		have += (size_t)r;
		buf[have] = '\0';
		char *start = buf, *nl;
		while ((nl = strchr(start, '\n'))) {
			unsigned long lo = strtoul(start, NULL, 16);
			unsigned long hi = strtoul(strchr(start, '-') + 1, NULL, 16);
			if (a + (16ul << 20) >= lo && a < hi + (16ul << 20) && write(2, start, (size_t)(nl - start + 1)) < 0)
				_exit(99);
			start = nl + 1;
		}
		have = strlen(start);
		memmove(buf, start, have);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

__attribute__((unused)) static void rel_catch_faults(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = rel_fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
}

/* Backtraces of every thread of pid, by gdb, without the preload. */
__attribute__((unused)) static void rel_backtrace(pid_t pid)
{
	char spid[32];
	snprintf(spid, sizeof spid, "%d", (int)pid);
	fflush(NULL);
	pid_t g = fork();
	if (g == 0) {
		/* gdb must not run under vmapalloc itself. */
		static char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
		int fd = open("/dev/null", O_RDONLY);
		if (fd >= 0)
			dup2(fd, 0);
		dup2(2, 1);
		execle("/usr/bin/gdb", "gdb", "-batch", "-nx", "-p", spid, "-ex", "set pagination off",
		       "-ex", "info threads", "-ex", "thread apply all bt", (char *)NULL, env);
		fprintf(stderr, "rel: cannot run gdb: %s\n", strerror(errno));
		_exit(127);
	}
	if (g > 0) {
		int st;
		double t0 = rel_now();
		while (waitpid(g, &st, WNOHANG) == 0) {
			if (rel_now() - t0 > 60) {
				kill(g, SIGKILL);
				waitpid(g, &st, 0);
				break;
			}
			usleep(100000);
		}
	}
}

/*
 * A watchdog inside the process, for tests where fork() itself may hang (it
 * runs the atfork handlers): a thread that, after `seconds`, posix_spawns gdb
 * on this very process (posix_spawn runs no atfork handler), prints every
 * thread's backtrace and exits 1.
 */
static double rel_selfwatch_limit;
static void *rel_selfwatch_thread(void *arg)
{
	(void)arg;
	double t0 = rel_now();
	while (rel_now() - t0 < rel_selfwatch_limit)
		usleep(100000);
	char spid[32];
	snprintf(spid, sizeof spid, "%d", (int)getpid());
	fprintf(stderr, "FAIL: no progress after %.0f s (deadlock?); backtraces of pid %s:\n",
		rel_selfwatch_limit, spid);
	char *const argv[] = {"gdb", "-batch", "-nx", "-p", spid, "-ex", "set pagination off", "-ex",
			      "thread apply all bt", NULL};
	char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	pid_t g;
	if (posix_spawn(&g, "/usr/bin/gdb", &fa, NULL, argv, env) == 0) {
		int st;
		waitpid(g, &st, 0);
	}
	_exit(1);
}

__attribute__((unused)) static void rel_selfwatch(double seconds)
{
	pthread_t t;
	rel_selfwatch_limit = seconds;
	pthread_create(&t, NULL, rel_selfwatch_thread, NULL);
	pthread_detach(t);
}

/*
 * Runs fn(arg) in a child process with a watchdog of `seconds`.  Returns the
 * child's wait status, or -1 after a hang (backtrace printed, child killed).
 */
__attribute__((unused)) static int rel_watchdog(const char *what, int (*fn)(void *), void *arg, double seconds)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return -2;
	}
	if (pid == 0)
		_exit(fn(arg));
	double t0 = rel_now();
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (r < 0 && errno != EINTR)
			return -2;
		if (rel_now() - t0 > seconds)
			break;
		usleep(20000);
	}
	fprintf(stderr, "FAIL: %s: no progress after %.0f s (deadlock?); backtraces of pid %d:\n", what,
		seconds, (int)pid);
	kill(pid, SIGSTOP);
	rel_backtrace(pid);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

/* "exit 0" / "killed by signal N" / "exit N" for a wait status. */
__attribute__((unused)) static const char *rel_status_str(int st)
{
	static char buf[64];
	if (st == -1)
		return "hung (killed by the watchdog)";
	if (WIFSIGNALED(st))
		snprintf(buf, sizeof buf, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(st));
	return buf;
}

#endif
