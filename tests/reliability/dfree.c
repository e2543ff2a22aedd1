/*
 * dfree.c — double frees of large blocks the way hardened_malloc's probes do
 * them (REQUIREMENTS.md #40): immediate, delayed (after 100 other frees and a
 * purge), interleaved (A, B, A), through realloc, through free_sized, and of
 * a block that went through the thread cache and the shard pool.  Each case
 * runs in a child: it must die of SIGABRT after exactly one stderr line that
 * starts "vmapalloc: " and says "double free" or "invalid pointer", in O(1)
 * (well within a second).  Run under the preload.
 */
#include "rel.h"

#include <malloc.h>

typedef void (*free_sized_fn)(void *, size_t);

static void misuse(int c)
{
	void *a = malloc(MiB), *b = malloc(300 * KiB);
	memset(a, 1, MiB);
	memset(b, 2, 300 * KiB);
	void *others[100];
	switch (c) {
	case 0: /* immediate */
		free(a);
		free(a);
		break;
	case 1: /* delayed: many frees and a purge in between */
		for (int i = 0; i < 100; i++)
			others[i] = malloc((size_t)(i + 1) * 70 * KiB);
		free(a);
		for (int i = 0; i < 100; i++)
			free(others[i]);
		if (vmt_vm)
			vm.purge();
		free(a);
		break;
	case 2: /* interleaved */
		free(a);
		free(b);
		free(a);
		break;
	case 3: /* realloc of a freed block */
		free(a);
		a = realloc(a, 2 * MiB);
		break;
	case 4: { /* free_sized twice */
		free_sized_fn fs = (free_sized_fn)dlsym(RTLD_DEFAULT, "free_sized");
		if (!fs)
			_exit(3);
		fs(b, 300 * KiB);
		fs(b, 300 * KiB);
		break;
	}
	default: /* through the thread cache and the pool: reused, then the stale pointer freed */
		free(b);
		void *c2 = malloc(300 * KiB); /* likely b's area again */
		free(c2);
		free(b);
		break;
	}
	_exit(4); /* survived the misuse */
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("dfree");
	static const char *const names[] = {"immediate", "delayed", "interleaved", "realloc-freed",
					    "free_sized-twice", "via-cache"};
	int fails = 0;
	for (int c = 0; c < 6; c++) {
		int pfd[2];
		if (pipe(pfd) != 0)
			return 1;
		fflush(NULL);
		double t0 = rel_now();
		pid_t pid = fork();
		if (pid == 0) {
			dup2(pfd[1], 2);
			close(pfd[0]);
			misuse(c);
		}
		close(pfd[1]);
		char buf[4096];
		size_t n = 0;
		ssize_t r;
		while (n < sizeof buf - 1 && (r = read(pfd[0], buf + n, sizeof buf - 1 - n)) > 0)
			n += (size_t)r;
		buf[n] = '\0';
		close(pfd[0]);
		int st;
		waitpid(pid, &st, 0);
		double dt = rel_now() - t0;
		unsigned lines = 0;
		for (size_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
		bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && lines == 1 &&
			  !strncmp(buf, "vmapalloc: ", 11) &&
			  (strstr(buf, "double free") || strstr(buf, "invalid pointer"));
		if (ok)
			printf("ok: %s: %.3f s: %s", names[c], dt, buf);
		else {
			printf("FAIL: %s: %s, %u stderr line(s): %s\n", names[c], rel_status_str(st), lines, buf);
			fails++;
		}
	}
	if (fails)
		return 1;
	printf("dfree: OK, 6 cases\n");
	return 0;
}
