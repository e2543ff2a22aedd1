/*
 * fork_stdio.c [SECONDS] — fork against getline and fflush(NULL).
 *
 * The shape that deadlocks an allocator whose fork handlers take its locks
 * before fork() takes glibc's stdio list lock: 4 threads fork in a loop (the
 * child allocates, flushes, and has a thread of its own open a file), 8
 * threads getline() a 256 KiB line from files of their own (the buffer grows
 * through small and large sizes while the FILE is locked), one thread calls
 * fflush(NULL) (the list lock, then each FILE's lock).  The cycle: the
 * forking thread holds the allocator's locks and waits for the list lock;
 * the flushing thread holds the list lock and waits for a FILE lock; that
 * FILE's reader waits in realloc for an allocator lock.
 *
 * Runs SECONDS (default 6); a watchdog fails the run when no fork and no
 * line completes for 10 s, or when the threads do not stop within 10 s of
 * the end: a deadlock is a failure, not a hang.  After the threads stop, a
 * new thread must still take the list lock (fopen, fflush(NULL)): the lock's
 * recursive count must be back to zero in the parent, as in each child.
 * Children hung anyway die of an alarm.  Exit 0 when every fork, child and
 * line completed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define FORKERS 4
#define READERS 8
#define LINE_LEN (256u << 10)
#define STALL_S 10

static atomic_int stop;
static atomic_ulong forks, lines, flushes;
static char path[] = "/tmp/vmtest-fork-stdio-XXXXXX";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *open_close(void *arg)
{
    (void)arg;
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    fflush(NULL);
    return f;
}

static void child(void)
{
    alarm(STALL_S); /* hung: die rather than wait for ever */
    void *p = malloc(200000), *q = malloc(100);
    if (!p || !q)
        _exit(2);
    memset(p, 1, 200000);
    free(q);
    free(p);
    fflush(NULL);
    /* The list lock must be free in the child: another thread takes it. */
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, NULL, open_close, NULL) != 0 || pthread_join(t, &r) != 0 || !r)
        _exit(3);
    _exit(0);
}

static void *forker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pid_t pid = fork();
        if (pid == 0)
            child();
        CHECK(pid > 0, "fork: %s", strerror(errno));
        int st;
        CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "a child did not exit 0 (status 0x%x: killed by its alarm = hung)", st);
        atomic_fetch_add(&forks, 1);
    }
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "fopen %s: %s", path, strerror(errno));
    while (!atomic_load(&stop)) {
        char *line = NULL;
        size_t n = 0;
        rewind(f);
        ssize_t got = getline(&line, &n, f);
        CHECK(got == (ssize_t)LINE_LEN + 1, "getline read %zd bytes, expected %u", got,
              LINE_LEN + 1);
        CHECK(line[0] == 'x' && line[LINE_LEN - 1] == 'x', "getline: wrong contents");
        free(line);
        atomic_fetch_add(&lines, 1);
        /* A gap for the flusher: glibc's FILE lock is not fair. */
        usleep(50);
    }
    fclose(f);
    return NULL;
}

static void *flusher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        fflush(NULL);
        atomic_fetch_add(&flushes, 1);
    }
    return NULL;
}

/* Joins t within the stall limit, or fails the run. */
static void join_or_fail(pthread_t t, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += STALL_S;
    int e = pthread_timedjoin_np(t, NULL, &ts);
    CHECK(e == 0, "a %s thread did not stop within %d s: deadlock (forks %lu, lines %lu, "
          "flushes %lu)", what, STALL_S, atomic_load(&forks), atomic_load(&lines),
          atomic_load(&flushes));
}

int main(int argc, char **argv)
{
    vmt_init("fork_stdio");
    double seconds = argc > 1 ? atof(argv[1]) : 6;
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    char *buf = malloc(LINE_LEN + 1);
    CHECK(buf != NULL, "malloc");
    memset(buf, 'x', LINE_LEN);
    buf[LINE_LEN] = '\n';
    CHECK(write(fd, buf, LINE_LEN + 1) == (ssize_t)LINE_LEN + 1, "write: %s", strerror(errno));
    close(fd);
    free(buf);

    pthread_t f[FORKERS], r[READERS], fl;
    for (int i = 0; i < READERS; i++)
        CHECK(pthread_create(&r[i], NULL, reader, NULL) == 0, "pthread_create");
    CHECK(pthread_create(&fl, NULL, flusher, NULL) == 0, "pthread_create");
    for (int i = 0; i < FORKERS; i++)
        CHECK(pthread_create(&f[i], NULL, forker, NULL) == 0, "pthread_create");

    double start = now(), last = start;
    unsigned long seen = 0;
    while (now() - start < seconds) {
        usleep(100 * 1000);
        unsigned long s = atomic_load(&forks) + atomic_load(&lines);
        if (s != seen) {
            seen = s;
            last = now();
        }
        if (now() - last > STALL_S) {
            fprintf(stderr, "FAIL: no fork and no line completed for %d s: deadlock "
                    "(forks %lu, lines %lu, flushes %lu)\n", STALL_S, atomic_load(&forks),
                    atomic_load(&lines), atomic_load(&flushes));
            unlink(path);
            _exit(1);
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < FORKERS; i++)
        join_or_fail(f[i], "forking");
    for (int i = 0; i < READERS; i++)
        join_or_fail(r[i], "getline");
    join_or_fail(fl, "fflush");

    /* The list lock is free again in the parent. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, open_close, NULL) == 0, "pthread_create");
    join_or_fail(t, "fopen after the forks");
    unlink(path);
    printf("fork_stdio: %lu forks, %lu lines, %lu flushes in %.0f s\n", atomic_load(&forks),
           atomic_load(&lines), atomic_load(&flushes), seconds);
    CHECK(atomic_load(&forks) > 0 && atomic_load(&lines) > 0, "nothing ran");
    return 0;
}
