/*
 * report.h — the end figures of a bench/longrun.py workload, shared by its C
 * programs (realloc_heavy, idle_burst, fork_live).
 *
 * Right before it exits, a workload prints one line of key=value pairs on
 * stdout: its results (which must be the same under every allocator) and
 *
 *   maps=N      lines of /proc/self/maps: the mappings the process has now
 *   rss_kib=N   VmRSS of /proc/self/status: what it still holds
 *   hwm_kib=N   VmHWM: its peak RSS (ru_maxrss is not usable: Linux carries
 *               it over from the parent across fork and exec)
 *
 * The files are read with open/read into static buffers, and the figures are
 * taken before the line is printed, so the reading itself neither allocates
 * nor maps anything (stdio's buffer for stdout comes afterwards).
 */
#ifndef LONGRUN_REPORT_H
#define LONGRUN_REPORT_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct end_figures {
	long maps;
	long rss_kib;
	long hwm_kib;
};

/* Lines of /proc/self/maps (read in pieces: it can be megabytes long). */
static long longrun_maps_count(void)
{
	static char buf[65536];
	long lines = 0;
	ssize_t n;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		for (ssize_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
	close(fd);
	return lines;
}

/* The value of "KEY:  N kB" in /proc/self/status, -1 if absent. */
static long longrun_status_kib(const char *status, const char *key)
{
	const char *p = strstr(status, key);
	if (!p)
		return -1;
	return strtol(p + strlen(key), NULL, 10);
}

static struct end_figures longrun_end_figures(void)
{
	static char status[8192];
	struct end_figures e = { longrun_maps_count(), -1, -1 };
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, status, sizeof status - 1);
		close(fd);
		if (n > 0) {
			status[n] = '\0';
			e.rss_kib = longrun_status_kib(status, "\nVmRSS:");
			e.hwm_kib = longrun_status_kib(status, "\nVmHWM:");
		}
	}
	return e;
}

/* Print "RESULTS maps=.. rss_kib=.. hwm_kib=..\n" (RESULTS: the program's
 * own key=value pairs) and flush it. */
static void longrun_print_end(const char *results, struct end_figures e)
{
	printf("%s maps=%ld rss_kib=%ld hwm_kib=%ld\n", results, e.maps, e.rss_kib, e.hwm_kib);
	fflush(stdout);
}

/* xorshift64*: the workloads' fixed-seed random numbers. */
static inline uint64_t longrun_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Monotonic time in seconds. */
static inline double longrun_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
