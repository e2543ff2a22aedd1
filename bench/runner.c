/* bench/runner.c — runs PROGRAM and writes its exit status,
 * wall time and resource usage (wait4) to RESULT-FILE.  Python's own wait4
 * would report at least python's peak RSS: Linux carries the peak RSS of the
 * process that forks into the child across exec. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double secs(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: runner RESULT-FILE PROGRAM [ARG]...\n");
        return 127;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        perror("runner: fork");
        return 127;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "runner: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("runner: wait4");
            return 127;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FILE *f = fopen(argv[1], "w");
    if (f == NULL) {
        perror(argv[1]);
        return 127;
    }
    fprintf(f, "status=%d wall=%.6f user=%.6f sys=%.6f maxrss_kib=%ld\n", status,
            (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
            secs(ru.ru_utime), secs(ru.ru_stime), ru.ru_maxrss);
    return fclose(f) == 0 ? 0 : 127;
}
