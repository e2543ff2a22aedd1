/*
 * late_init.c — with no VMAPALLOC_* variable at start, vmapalloc's init waits
 * for the process's first call (core/alloc.c vmap_init_at_start); nothing
 * else may change.
 *
 *   api_late_init env      environ replaced (no allocation) by one holding a
 *                          bad VMAPALLOC_* value before the first call: the
 *                          options are those of the start, so no line is said
 *   api_late_init atfork   fork handlers that allocate, registered before the
 *                          first call (so before vmapalloc's), with threads
 *                          making large and small blocks while the main thread
 *                          forks: no child hangs, every child allocates
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int case_env(void)
{
	/* stderr to a file, before any allocation (open and dup2 allocate nothing). */
	char path[] = "/tmp/vmap-late-init-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 77;
	int saved = dup(2);
	dup2(fd, 2);
	static char *fresh[] = {"VMAPALLOC_SMALL_MAX=12Q", "PATH=/usr/bin:/bin", NULL};
	environ = fresh;
	void *p = malloc(100); /* the first call */
	void *q = malloc(1 << 20);
	free(q);
	free(p);
	dup2(saved, 2);
	char buf[512] = "";
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	close(fd);
	unlink(path);
	if (n > 0) {
		printf("FAIL: vmapalloc read an option set after start: %s", buf);
		return 1;
	}
	printf("ok: options are read at start, not at the first call\n");
	return 0;
}

static atomic_int stop;

static void prepare(void) { free(malloc(200)); }
static void parent(void) { free(malloc(300)); }
static void child(void) { free(malloc(2 << 20)); }

static void *worker(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg;
	while (!atomic_load(&stop)) {
		size_t n = (k++ % 3 == 0) ? (size_t)(256 << 10) + k % 4096 : 16 + k % 2000;
		char *p = malloc(n);
		if (p)
			p[0] = 1;
		free(p);
	}
	return NULL;
}

static int case_atfork(void)
{
	if (pthread_atfork(prepare, parent, child) != 0)
		return 1;
	pthread_t t[3];
	for (uintptr_t i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	int bad = 0;
	for (int i = 0; i < 100 && !bad; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			alarm(10);
			char *p = malloc(3 << 20);
			char *s = malloc(50);
			_exit(p && s ? 0 : 3);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
			printf("FAIL: fork %d: child status %#x\n", i, st);
			bad = 1;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	if (!bad)
		printf("ok: 100 forks with allocating handlers registered before the first call\n");
	return bad;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "env"))
		return case_env();
	if (argc > 1 && !strcmp(argv[1], "atfork"))
		return case_atfork();
	fprintf(stderr, "usage: %s env|atfork\n", argv[0]);
	return 2;
}
