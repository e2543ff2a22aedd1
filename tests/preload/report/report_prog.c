/*
 * report_prog.c — a program whose allocations are known, run under
 * LD_PRELOAD=libvmapalloc.so by report.sh; check.py compares the report
 * vmapalloc writes with what this program says it did.
 *
 *   report_prog MODE
 *
 * MODE: basic (return from main), exit (exit() from a nested call), fork (a
 * child that exits through exit()), signal (kill(getpid(), SIGUSR2) while
 * running), ownhandler (the program installs its own SIGUSR2 handler first),
 * sampling (many small blocks of one size from one site), threads (4 threads,
 * small and large blocks, signals to itself meanwhile), api (the report
 * through vmapalloc_stats_print, malloc_info, counters), mmap (served
 * mappings from one site cut by munmap and resized/moved by mremap),
 * large_sampling (many 256 KiB blocks from one site, all freed), plain
 * (almost nothing: for the destination tests).
 *
 * Prints one JSON object on stdout: what it did ("expect"), its pid, and the
 * pids of its children.  Built with -fno-builtin so that malloc/free pairs
 * stay real calls, and leaky_function is noinline so that it is a frame of
 * its own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void *(*volatile p_malloc)(size_t) = malloc;
static void (*volatile p_free)(void *) = free;

/* What the program did, printed at the end. */
static struct {
	size_t large_asked;     /* bytes asked in large (> 64 KiB) requests */
	unsigned large_allocs;  /* large requests */
	unsigned large_frees;
	unsigned large_live;    /* large blocks still live at exit */
	size_t large_live_asked;
	size_t large_peak_asked; /* the most large bytes live at once (asked) */
	unsigned mallocs, frees, callocs, reallocs, aligned;
	unsigned small_allocs, small_frees;
	size_t small_bytes;     /* sampling mode: bytes of small blocks */
} ex;

static void die(const char *what)
{
	fprintf(stderr, "report_prog: %s: %s\n", what, strerror(errno));
	exit(99);
}

static void touch(void *p, size_t n)
{
	if (!p)
		die("allocation failed");
	memset(p, 0xa5, n < 4096 ? n : 4096);
}

/* The leak the profile must find at its real call site: 3 x 1 MiB. */
__attribute__((noinline)) void leaky_function(void)
{
	for (int i = 0; i < 3; i++) {
		void *p = p_malloc(MiB);
		touch(p, MiB);
		__asm__ volatile("" : : "r"(p) : "memory");
	}
	ex.large_asked += 3 * MiB;
	ex.large_allocs += 3;
	ex.mallocs += 3;
	ex.large_live += 3;
	ex.large_live_asked += 3 * MiB;
}

static void *kept[2];

__attribute__((noinline)) static void known_work(void)
{
	void *p[8];
	size_t live = 0;
	for (int i = 0; i < 8; i++) {
		size_t n = 256 * KiB + (size_t)i * 4096;
		p[i] = p_malloc(n);
		touch(p[i], n);
		ex.large_asked += n;
		live += n;
	}
	ex.large_peak_asked = live;
	ex.large_allocs += 8;
	ex.mallocs += 8;
	for (int i = 0; i < 6; i++)
		p_free(p[i]);
	ex.large_frees += 6;
	ex.frees += 6;
	kept[0] = p[6];
	kept[1] = p[7];
	ex.large_live += 2;
	ex.large_live_asked += 2 * 256 * KiB + 13 * 4096;

	void *c = calloc(1, MiB);
	touch(c, MiB);
	free(c);
	void *a = NULL;
	if (posix_memalign(&a, 64 * KiB, 512 * KiB))
		die("posix_memalign");
	touch(a, 512 * KiB);
	free(a);
	void *r = p_malloc(200 * KiB);
	touch(r, 200 * KiB);
	r = realloc(r, 600 * KiB);
	touch(r, 600 * KiB);
	free(r);
	ex.large_asked += MiB + 512 * KiB + 200 * KiB;
	ex.large_allocs += 3;
	ex.large_frees += 3;
	ex.callocs++, ex.aligned++, ex.mallocs++, ex.reallocs++, ex.frees += 3;

	for (int i = 0; i < 5000; i++) {
		void *q = p_malloc(100);
		touch(q, 100);
		p_free(q);
	}
	ex.small_allocs += 5000, ex.small_frees += 5000, ex.mallocs += 5000, ex.frees += 5000;
	ex.small_bytes += 5000 * 100;
}

static void print_expect(const char *mode, int child)
{
	printf("{\"mode\": \"%s\", \"pid\": %d, \"child\": %d, \"expect\": {"
	       "\"large_asked\": %zu, \"large_allocs\": %u, \"large_frees\": %u, "
	       "\"large_live\": %u, \"large_live_asked\": %zu, \"large_peak_asked\": %zu, "
	       "\"mallocs\": %u, \"frees\": %u, \"callocs\": %u, \"reallocs\": %u, \"aligned\": %u, "
	       "\"small_allocs\": %u, \"small_frees\": %u, \"small_bytes\": %zu}}\n",
	       mode, (int)getpid(), child, ex.large_asked, ex.large_allocs, ex.large_frees,
	       ex.large_live, ex.large_live_asked, ex.large_peak_asked, ex.mallocs, ex.frees,
	       ex.callocs, ex.reallocs, ex.aligned, ex.small_allocs, ex.small_frees, ex.small_bytes);
	fflush(stdout);
}

__attribute__((noinline, noreturn)) static void leave_through_exit(const char *mode)
{
	print_expect(mode, 0);
	exit(0);
}

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig)
{
	(void)sig;
	own_handler_ran = 1;
}

/* ---- threads ------------------------------------------------------------ */

static void *thread_main(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	void *slot[16] = {0};
	for (int i = 0; i < 20000; i++) {
		seed = seed * 1103515245u + 12345u;
		unsigned k = (seed >> 8) % 16;
		p_free(slot[k]);
		size_t n = (seed >> 16) % 8 == 0 ? 64 * KiB + (seed % 200) * 1024 : 16 + seed % 2000;
		slot[k] = p_malloc(n);
		touch(slot[k], n);
	}
	for (int k = 0; k < 16; k++)
		p_free(slot[k]);
	return NULL;
}

/* ---- api ------------------------------------------------------------------ */

static void api(void)
{
	int (*stats_print)(int, int) = (int (*)(int, int))dlsym(RTLD_DEFAULT, "vmapalloc_stats_print");
	int (*counter_get)(const char *, uint64_t *) =
		(int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	void (*reset_peaks)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "vmapalloc_reset_peaks");
	if (!stats_print || !counter_get || !reset_peaks) {
		fprintf(stderr, "report_prog: not running under vmapalloc\n");
		exit(98);
	}
	void *big = p_malloc(4 * MiB);
	touch(big, 4 * MiB);
	p_free(big);
	void *hold = p_malloc(300 * KiB);
	touch(hold, 300 * KiB);
	const char *dir = getenv("REPORT_DIR");
	char path[512];
	snprintf(path, sizeof path, "%s/api.json", dir);
	FILE *f = fopen(path, "w");
	if (!f || stats_print(fileno(f), 1) != 0)
		die("vmapalloc_stats_print");
	fclose(f);
	snprintf(path, sizeof path, "%s/api.xml", dir);
	f = fopen(path, "w");
	if (!f || malloc_info(0, f) != 0)
		die("malloc_info");
	fclose(f);
	uint64_t in_use = 0, peak = 0, peak_after = 0, blocks = 0;
	if (counter_get("large_bytes_in_use", &in_use) || counter_get("large_bytes_peak", &peak) ||
	    counter_get("large_blocks_in_use", &blocks))
		die("vmapalloc_counter_get");
	reset_peaks();
	if (counter_get("large_bytes_peak", &peak_after))
		die("vmapalloc_counter_get");
	uint64_t dummy;
	int unknown = counter_get("no_such_counter", &dummy);
	printf("{\"mode\": \"api\", \"pid\": %d, \"in_use\": %llu, \"blocks\": %llu, \"peak\": %llu, "
	       "\"peak_after_reset\": %llu, \"unknown_rc\": %d}\n",
	       (int)getpid(), (unsigned long long)in_use, (unsigned long long)blocks,
	       (unsigned long long)peak, (unsigned long long)peak_after, unknown);
	p_free(hold);
}

/* Every mapping of the mmap mode comes from here: one profile site. */
__attribute__((noinline)) static char *map_pages(size_t pages)
{
	char *p = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	touch(p, pages * 4096);
	return p;
}

/* The figures the site of map_pages must show at exit, in pages. */
static void mappings(void)
{
	size_t pg = 4096;
	static const size_t pages[6] = {16, 16, 8, 8, 8, 8};
	char *m[6];
	for (int i = 0; i < 6; i++) /* one call site: one stack */
		m[i] = map_pages(pages[i]);
	if (munmap(m[0], 16 * pg)) /* gone */
		die("munmap a");
	if (munmap(m[1] + 4 * pg, 4 * pg)) /* a hole in the middle: two pieces, 12 pages */
		die("munmap b");
	if (mremap(m[2], 8 * pg, 16 * pg, MREMAP_MAYMOVE) == MAP_FAILED) /* 16, in place or moved */
		die("mremap c");
	if (munmap(m[3], 2 * pg)) /* head cut: 6 pages */
		die("munmap d");
	/* Moved, the old pages kept then unmapped: 8 pages (16 allocated). */
	if (mremap(m[4], 8 * pg, 8 * pg, MREMAP_MAYMOVE | MREMAP_DONTUNMAP) == MAP_FAILED)
		die("mremap e");
	if (munmap(m[4], 8 * pg))
		die("munmap e");
	if (mremap(m[5], 8 * pg, 4 * pg, 0) == MAP_FAILED) /* shrunk to 4 */
		die("mremap f");
	printf("{\"mode\": \"mmap\", \"pid\": %d, \"expect\": {\"live_pages\": %d, "
	       "\"live_count\": %d, \"pages\": %d, \"count\": %d}}\n",
	       (int)getpid(), 12 + 16 + 6 + 8 + 4, 2 + 1 + 1 + 1 + 1, 16 + 16 + 16 + 8 + 16 + 8, 6);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (!strcmp(mode, "plain")) {
		void *p = p_malloc(128 * KiB);
		touch(p, 128 * KiB);
		p_free(p);
		return 0;
	}
	if (!strcmp(mode, "large_sampling")) {
		/* 8000 blocks of 256 KiB from one site, all freed. */
		for (int i = 0; i < 8000; i++) {
			void *q = p_malloc(256 * KiB);
			touch(q, 256 * KiB);
			p_free(q);
		}
		ex.large_allocs += 8000, ex.large_frees += 8000, ex.mallocs += 8000, ex.frees += 8000;
		ex.large_asked += 8000 * 256 * KiB;
		print_expect(mode, 0);
		return 0;
	}
	if (!strcmp(mode, "mmap")) {
		mappings();
		return 0;
	}
	if (!strcmp(mode, "api")) {
		api();
		return 0;
	}
	if (!strcmp(mode, "sampling")) {
		/* 200000 blocks of 1000 bytes from one site, all freed. */
		for (int i = 0; i < 200000; i++) {
			void *q = p_malloc(1000);
			touch(q, 1000);
			p_free(q);
		}
		ex.small_allocs = ex.small_frees = ex.mallocs = ex.frees = 200000;
		ex.small_bytes = 200000 * (size_t)1000;
		print_expect(mode, 0);
		return 0;
	}
	if (!strcmp(mode, "threads")) {
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			if (pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)(i + 1)))
				die("pthread_create");
		for (int i = 0; i < 5; i++) {
			usleep(2000);
			kill(getpid(), SIGUSR2);
		}
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		print_expect(mode, 0);
		return 0;
	}
	if (!strcmp(mode, "ownhandler")) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = own_handler;
		sigaction(SIGUSR2, &sa, NULL);
		known_work();
		leaky_function();
		kill(getpid(), SIGUSR2);
		if (!own_handler_ran) {
			fprintf(stderr, "report_prog: the program's own handler did not run\n");
			return 97;
		}
		print_expect(mode, 0);
		return 0;
	}
	known_work();
	if (!strcmp(mode, "signal")) {
		kill(getpid(), SIGUSR2); /* the report is written before kill returns */
		void *after = p_malloc(2 * MiB);
		touch(after, 2 * MiB);
		p_free(after);
		ex.large_asked += 2 * MiB, ex.large_allocs++, ex.large_frees++;
		ex.mallocs++, ex.frees++;
	}
	leaky_function();
	if (!strcmp(mode, "fork")) {
		fflush(stdout);
		pid_t c = fork();
		if (c < 0)
			die("fork");
		if (c == 0) {
			/* The child's own work, then exit() (not _exit): its report. */
			void *mine = p_malloc(5 * MiB);
			touch(mine, 5 * MiB);
			__asm__ volatile("" : : "r"(mine) : "memory");
			exit(0);
		}
		int st;
		if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			die("child");
		print_expect(mode, (int)c);
		return 0;
	}
	if (!strcmp(mode, "exit"))
		leave_through_exit(mode);
	print_expect(mode, 0);
	return 0;
}
