/*
 * signal.c — a signal storm while the allocator is busy (REQUIREMENTS.md #21).
 *
 *   signal large|mixed|kill [SECONDS]      default 10 s; watchdog 60 s
 *
 * Allocation from a signal handler is not async-signal-safe in general; what
 * #21 asks is narrower: a handler that mallocs, frees or mmaps while the
 * interrupted thread is inside the allocator never self-deadlocks (it may get
 * NULL).  Modes:
 *   large  setitimer(ITIMER_REAL) at 1 kHz; the SIGALRM handler mallocs and
 *          frees large blocks (the range allocator: vmapalloc's own locks, no
 *          glibc lock involved) while 4 threads mix small, large, calloc,
 *          realloc and posix_memalign with pattern checks
 *   mixed  the same, but the handler allocates small (glibc) and large blocks
 *          and mmaps/munmaps, while the threads allocate only large blocks (so
 *          that a small allocation in the handler cannot meet a glibc arena lock
 *          held by the thread it interrupted: that deadlock would be glibc's)
 *   kill   a sender thread pthread_kill()s the 4 workers in turn (SIGUSR1,
 *          same handler as `large`) as fast as it can
 * The workload runs in a child process under a watchdog: no progress for 60 s
 * = deadlock, reported with gdb backtraces of every thread (the finding).
 */
#include "rel.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/time.h>

enum mode { M_LARGE, M_MIXED, M_KILL };
static enum mode mode;
static double seconds = 10;
static atomic_ulong handler_runs, handler_nulls, worker_ops;
static atomic_int stop;
static pthread_t workers[4];

static void handler(int sig)
{
	(void)sig;
	int saved = errno;
	static const size_t large[] = {100 * KiB, MiB, 3 * MiB};
	static const size_t small[] = {24, 1000, 30000};
	unsigned long n = atomic_fetch_add_explicit(&handler_runs, 1, memory_order_relaxed);
	size_t sz = large[n % 3];
	unsigned char *p = malloc(sz);
	if (p) {
		p[0] = 1;
		p[sz - 1] = 2;
		free(p);
	} else {
		atomic_fetch_add_explicit(&handler_nulls, 1, memory_order_relaxed);
	}
	if (mode == M_MIXED) {
		size_t s = small[n % 3];
		unsigned char *q = malloc(s);
		if (q) {
			q[0] = q[s - 1] = 3;
			free(q);
		} else {
			atomic_fetch_add_explicit(&handler_nulls, 1, memory_order_relaxed);
		}
		void *m = mmap(NULL, 64 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m != MAP_FAILED) {
			((volatile char *)m)[0] = 1;
			munmap(m, 64 * KiB);
		}
	}
	errno = saved;
}

static void *worker(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 7;
	unsigned long ops = 0;
	void *keep[16] = {0};
	size_t keepn[16] = {0};
	uint64_t keeps[16] = {0};
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned k = (unsigned)(rel_rnd(&s) % 16);
		if (keep[k]) {
			CHECK(rel_marked(keep[k], keepn[k], keeps[k]), "block of %zu damaged", keepn[k]);
			free(keep[k]);
			keep[k] = NULL;
		}
		uint64_t r = rel_rnd(&s);
		size_t n;
		if (mode == M_MIXED)
			n = 128 * KiB + r % (4 * MiB);
		else
			n = r % 4 ? 16 + r % (64 * KiB) : 128 * KiB + r % (4 * MiB);
		void *p = NULL;
		switch (r % 5) {
		case 0: p = calloc(1, n); break;
		case 1:
			if (posix_memalign(&p, 4096, n) != 0)
				p = NULL;
			break;
		case 2:
			p = malloc(n / 2 + 1);
			if (p) {
				void *q = realloc(p, n);
				if (q)
					p = q;
				else {
					free(p);
					p = NULL;
				}
			}
			break;
		default: p = malloc(n); break;
		}
		ops++;
		if (!p)
			continue;
		keeps[k] = rel_rnd(&s);
		keepn[k] = n;
		rel_mark(p, n, keeps[k]);
		keep[k] = p;
	}
	for (int k = 0; k < 16; k++)
		if (keep[k]) {
			CHECK(rel_marked(keep[k], keepn[k], keeps[k]), "block of %zu damaged", keepn[k]);
			free(keep[k]);
		}
	atomic_fetch_add(&worker_ops, ops);
	return NULL;
}

static void *sender(void *arg)
{
	(void)arg;
	unsigned long i = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pthread_kill(workers[i++ % 4], SIGUSR1);
		if (i % 64 == 0)
			usleep(100);
	}
	return NULL;
}

static int storm(void *arg)
{
	(void)arg;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigaction(mode == M_KILL ? SIGUSR1 : SIGALRM, &sa, NULL);
	uint64_t blocks0 = vmt_vm ? CTR("large_blocks_in_use") : 0;
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&workers[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0,
		      "pthread_create");
	pthread_t snd;
	if (mode == M_KILL) {
		CHECK(pthread_create(&snd, NULL, sender, NULL) == 0, "pthread_create");
	} else {
		struct itimerval it = {{0, 1000}, {0, 1000}}; /* 1 kHz */
		CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
	}
	double t0 = rel_now();
	while (rel_now() - t0 < seconds)
		usleep(10000);
	if (mode != M_KILL) {
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
	}
	atomic_store(&stop, 1);
	if (mode == M_KILL)
		pthread_join(snd, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(workers[i], NULL);
	printf("signal %s: %.0f s, %lu handler runs (%lu NULL), %lu worker operations\n",
	       mode == M_LARGE ? "large" : mode == M_MIXED ? "mixed" : "kill", seconds,
	       (unsigned long)handler_runs, (unsigned long)handler_nulls, (unsigned long)worker_ops);
	CHECK(handler_runs > 0, "no signal was handled");
	if (vmt_vm)
		CHECK(CTR("large_blocks_in_use") == blocks0, "large blocks in use %llu, %llu at the start",
		      (unsigned long long)CTR("large_blocks_in_use"), (unsigned long long)blocks0);
	vmt_done("signal");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("signal");
	const char *m = argc > 1 ? argv[1] : "large";
	mode = !strcmp(m, "mixed") ? M_MIXED : !strcmp(m, "kill") ? M_KILL : M_LARGE;
	if (argc > 2)
		seconds = atof(argv[2]);
	int st = rel_watchdog("signal storm", storm, NULL, seconds + 60);
	if (st == -1)
		return 1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL: signal storm: child %s\n", rel_status_str(st));
		return 1;
	}
	return 0;
}
