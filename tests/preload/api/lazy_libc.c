/*
 * lazy_libc.c — under the preload, glibc's functions that vmapalloc calls
 * (core/backend.c: looked up on their first call, not at start) work from
 * the process's first call on, whichever call comes first, from many
 * threads at once, and in a child forked before any call.
 *
 *   api_lazy_libc          every case, each in a fresh process (exec of itself)
 *   api_lazy_libc CASE     one case, in this process
 *
 * No allocation before the case's first call: no stdio, no dlsym until the
 * case has made it.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails;
#define CHECK(cond, what)                                                              \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, (what)); \
			fails++;                                                       \
		}                                                                      \
	} while (0)

/* Every glibc route once, after the case's own first call. */
static int all_routes(unsigned salt)
{
	int bad = 0;
	size_t n = 40 + salt % 50;
	unsigned char *p = malloc(n);
	bad |= !p || malloc_usable_size(p) < n;
	memset(p, 0xab, n);
	p = realloc(p, 3 * n);
	bad |= !p || p[n - 1] != 0xab;
	free(p);
	int *z = calloc(8, sizeof(int));
	for (int i = 0; z && i < 8; i++)
		bad |= z[i] != 0;
	bad |= !z;
	free(z);
	void *a = memalign(128, n);
	bad |= !a || (uintptr_t)a % 128;
	free(a);
	bad |= mallopt(M_TRIM_THRESHOLD, 1 << 20) != 1;
	malloc_trim(0);
	struct mallinfo2 mi = mallinfo2(); /* glibc's figures and vmapalloc's */
	(void)mi;
	return bad;
}

static int first_call(const char *what, unsigned salt)
{
	if (!strcmp(what, "malloc")) {
		void *p = malloc(24);
		CHECK(p && malloc_usable_size(p) >= 24, "malloc first");
		free(p);
	} else if (!strcmp(what, "calloc")) {
		long *p = calloc(3, sizeof(long));
		CHECK(p && !p[0] && !p[1] && !p[2], "calloc first");
		free(p);
	} else if (!strcmp(what, "realloc")) {
		char *p = realloc(NULL, 10);
		CHECK(p != NULL, "realloc(NULL) first");
		free(p);
	} else if (!strcmp(what, "memalign")) {
		void *p = memalign(64, 10);
		CHECK(p && (uintptr_t)p % 64 == 0, "memalign first");
		free(p);
	} else if (!strcmp(what, "mallopt")) {
		CHECK(mallopt(M_TRIM_THRESHOLD, 1 << 20) == 1, "mallopt first");
	} else if (!strcmp(what, "malloc_trim")) {
		malloc_trim(0); /* 0 or 1: glibc's answer */
	} else if (!strcmp(what, "mallinfo2")) {
		struct mallinfo2 mi = mallinfo2();
		(void)mi;
	} else {
		return -1;
	}
	CHECK(all_routes(salt) == 0, what);
	return 0;
}

static const char *const firsts[] = {"malloc",  "calloc",      "realloc",  "memalign",
				     "mallopt", "malloc_trim", "mallinfo2"};
#define NFIRSTS (sizeof firsts / sizeof firsts[0])

#define THREADS 16
static pthread_barrier_t barrier;

static void *racer(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	pthread_barrier_wait(&barrier);
	first_call(firsts[i % NFIRSTS], (unsigned)i);
	for (int k = 0; k < 200; k++)
		if (all_routes((unsigned)(i * 1000 + k)))
			return NULL;
	return (void *)1;
}

static int run_case(const char *c)
{
	if (!strcmp(c, "threads")) {
		/* pthread_create allocates (glibc's TLS): the threads' first calls
		 * race with the main thread's resolutions, not before them. */
		pthread_t t[THREADS];
		pthread_barrier_init(&barrier, NULL, THREADS);
		for (uintptr_t i = 0; i < THREADS; i++)
			if (pthread_create(&t[i], NULL, racer, (void *)i))
				return 1;
		for (int i = 0; i < THREADS; i++) {
			void *r;
			pthread_join(t[i], &r);
			CHECK(r != NULL, "racing thread");
		}
	} else if (!strncmp(c, "fork-", 5)) {
		pid_t pid = fork(); /* before any call of the process */
		if (pid < 0)
			return 1;
		int rc = first_call(c + 5, (unsigned)getpid());
		if (pid == 0)
			_exit(rc || fails ? 1 : 0);
		int st;
		CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "forked child");
	} else if (first_call(c, 7) < 0) {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return run_case(argv[1]);
	char cases[2 * NFIRSTS + 1][32];
	int n = 0;
	for (size_t i = 0; i < NFIRSTS; i++) {
		snprintf(cases[n++], sizeof cases[0], "%s", firsts[i]);
		snprintf(cases[n++], sizeof cases[0], "fork-%s", firsts[i]);
	}
	snprintf(cases[n++], sizeof cases[0], "threads");
	int bad = 0;
	for (int i = 0; i < n; i++) {
		for (int rep = 0; rep < (strcmp(cases[i], "threads") ? 1 : 20); rep++) {
			pid_t pid = fork();
			if (pid == 0) {
				execl("/proc/self/exe", argv[0], cases[i], (char *)NULL);
				_exit(127);
			}
			int st;
			waitpid(pid, &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				printf("FAIL: case %s (status %#x)\n", cases[i], st);
				bad++;
				break;
			}
		}
	}
	printf("%s: %d cases, %d failed\n", argv[0], n, bad);
	return bad ? 1 : 0;
}
