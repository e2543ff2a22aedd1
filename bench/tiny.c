/*
 * tiny.c — the "small C program" of the start-up and footprint benchmarks
 * (bench/startup.sh, bench/footprint.sh).  Never linked against an allocator:
 * the scripts preload one.
 *
 *   tiny                 100 allocations of mixed sizes (16 B .. 128 KiB), the
 *                        first and last byte of each written, then all freed
 *                        in a scrambled order; exit 0
 *   tiny pause           no allocation: write "ready\n" to stdout, pause()
 *   tiny alloc-pause     the 100 allocations and frees, then "ready\n", pause()
 *   tiny thread-noalloc  start and join one thread that never calls the
 *   tiny thread-alloc    allocator (or that makes one malloc/free), then print
 *                        "counter_mode_switches=N" from vmapalloc's counters
 *                        (vmapalloc_counter_get through dlsym; "-" when
 *                        vmapalloc is not loaded)
 *
 * Every output goes through write(2): stdio would allocate its buffer.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NALLOC 100

static void say(const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(1, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void hundred_allocations(void)
{
	static unsigned char *p[NALLOC];
	static size_t sz[NALLOC];
	uint32_t x = 2463534242u;
	for (int i = 0; i < NALLOC; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		/* 16 << 0..13 = 16 B .. 128 KiB, plus up to 1/8 more, capped at
		 * 128 KiB: every size class of a small allocator and a few blocks
		 * above 64 KiB (the range allocator's side of vmapalloc). */
		size_t base = (size_t)16 << (i % 14);
		size_t s = base + (x % (base / 8 + 1));
		sz[i] = s > 131072 ? 131072 : s;
		p[i] = malloc(sz[i]);
		if (!p[i]) {
			say("tiny: malloc failed\n");
			exit(1);
		}
		p[i][0] = (unsigned char)i;
		p[i][sz[i] - 1] = (unsigned char)i;
	}
	/* Free in a scrambled order (stride 37 is coprime with 100). */
	for (int k = 0, i = 0; k < NALLOC; k++, i = (i + 37) % NALLOC) {
		if (p[i][0] != (unsigned char)i || p[i][sz[i] - 1] != (unsigned char)i) {
			say("tiny: block corrupted\n");
			exit(1);
		}
		free(p[i]);
	}
}

static void *thread_noalloc(void *arg)
{
	volatile unsigned long s = 0;
	for (unsigned long i = 0; i < 1000; i++)
		s += i;
	return arg;
}

static void *thread_alloc(void *arg)
{
	void *volatile q = malloc(64);
	free(q);
	return arg;
}

static void print_switches(void)
{
	int (*get)(const char *, uint64_t *) =
		(int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "vmapalloc_counter_get");
	uint64_t v = 0;
	if (!get || get("counter_mode_switches", &v) != 0) {
		say("counter_mode_switches=-\n");
		return;
	}
	char buf[64] = "counter_mode_switches=";
	char digits[24];
	int n = 0;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	size_t len = strlen(buf);
	while (n > 0)
		buf[len++] = digits[--n];
	buf[len++] = '\n';
	buf[len] = '\0';
	say(buf);
}

static int run_thread(void *(*fn)(void *))
{
	pthread_t t;
	if (pthread_create(&t, NULL, fn, NULL) != 0 || pthread_join(t, NULL) != 0) {
		say("tiny: pthread_create failed\n");
		return 1;
	}
	print_switches();
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "alloc";
	if (strcmp(mode, "alloc") == 0) {
		hundred_allocations();
		return 0;
	}
	if (strcmp(mode, "pause") == 0 || strcmp(mode, "alloc-pause") == 0) {
		if (mode[0] == 'a')
			hundred_allocations();
		say("ready\n");
		for (;;)
			pause();
	}
	if (strcmp(mode, "thread-noalloc") == 0)
		return run_thread(thread_noalloc);
	if (strcmp(mode, "thread-alloc") == 0)
		return run_thread(thread_alloc);
	say("usage: tiny [alloc|pause|alloc-pause|thread-noalloc|thread-alloc]\n");
	return 2;
}
