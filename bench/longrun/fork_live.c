/*
 * fork_live.c — the `fork1g` workload of bench/longrun.py: fork() of a
 * process with 1 GiB of live large blocks, as a server that forks workers or
 * runs a child program.  fork copies the page tables and one VMA per mapping,
 * so its cost grows with the mappings and the resident pages an allocator
 * lays the same data out in.
 *
 *   fork_live [BLOCKS [FORKS]]      (default 512 blocks of 2 MiB, 200 forks)
 *
 * BLOCKS x 2 MiB allocated with malloc, every page written; FORKS times
 * fork() + waitpid() (the child only _exit(0)s), timed as a whole; the blocks
 * checked (a stamp per page, folded into a checksum) and freed; then one line
 * (the end figures: report.h):
 *
 *   blocks=N forks=N checksum=HEX fork_us=F maps=N rss_kib=N hwm_kib=N
 *
 * fork_us is the mean wall time of one fork + waitpid, in microseconds.
 * Not linked against any allocator: bench/longrun.py preloads one.
 */
#include <sys/wait.h>

#include "report.h"

#define PAGE  ((size_t)4096)
#define BLOCK ((size_t)2 * 1024 * 1024)
#define MAXB  65536

static unsigned char *blk[MAXB];

static unsigned char stamp(long i, size_t off)
{
	return (unsigned char)(i * 13 + (long)(off / PAGE) * 5 + 3);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 512;
	long forks = argc > 2 ? strtol(argv[2], NULL, 10) : 200;
	uint64_t checksum = 0xcbf29ce484222325ULL;
	if (n <= 0 || n > MAXB || forks <= 0) {
		fprintf(stderr, "usage: fork_live [BLOCKS (1..%d) [FORKS]]\n", MAXB);
		return 2;
	}

	for (long i = 0; i < n; i++) {
		blk[i] = malloc(BLOCK);
		if (!blk[i]) {
			fprintf(stderr, "fork_live: malloc of block %ld failed\n", i);
			return 1;
		}
		for (size_t off = 0; off < BLOCK; off += PAGE)
			blk[i][off] = stamp(i, off);
	}

	double t0 = longrun_now();
	for (long k = 0; k < forks; k++) {
		int status;
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork_live: fork");
			return 1;
		}
		if (pid == 0)
			_exit(0);
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "fork_live: child %d failed\n", (int)pid);
			return 1;
		}
	}
	double fork_us = (longrun_now() - t0) * 1e6 / (double)forks;

	for (long i = 0; i < n; i++) {
		for (size_t off = 0; off < BLOCK; off += PAGE) {
			if (blk[i][off] != stamp(i, off)) {
				fprintf(stderr, "fork_live: block %ld lost its stamp at %zu\n", i, off);
				return 1;
			}
			checksum = (checksum ^ blk[i][off]) * 0x100000001b3ULL;
		}
		free(blk[i]);
	}

	struct end_figures e = longrun_end_figures();
	char results[160];
	snprintf(results, sizeof results, "blocks=%ld forks=%ld checksum=%016llx fork_us=%.1f", n,
		 forks, (unsigned long long)checksum, fork_us);
	longrun_print_end(results, e);
	return 0;
}
