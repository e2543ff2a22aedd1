/*
 * idle_return.c — cached memory goes back after VMAPALLOC_PURGE_DELAY_MS:
 * by the purger thread while the program makes no calls
 * (VMAPALLOC_BACKGROUND=1), or on the program's next calls, small ones too.
 *
 *   idle_return bg       the thread starts on the first large free, returns
 *                        a freed burst while the program sleeps; a forked
 *                        child has no thread until it caches a block, then
 *                        its own; forks racing the thread's passes and a
 *                        second thread's large blocks do not hang
 *   idle_return nowork   small blocks only: no thread is ever started
 *   idle_return inline   no thread: after the delay, 300 small calls
 *                        return the burst (each 128th call looks)
 *
 * Run with VMAPALLOC_PURGE_DELAY_MS=200.  `bg` without BACKGROUND=1 must
 * fail (meson: should_fail): the memory stays while the program sleeps.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "vmtest.h"

#define MIB (1024L * 1024)
#define BURST 48 /* blocks of 64 KiB .. 1 MiB and of 2 .. 4 MiB */

/* Threads of this process named vmapalloc-purge. */
static int purgers(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        long r = read(fd, name, sizeof name - 1);
        close(fd);
        if (r > 0 && strncmp(name, "vmapalloc-purge", 15) == 0)
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A burst of large blocks, every page written, all freed: returns the
 * bytes, which are now cached (RSS stays up). */
static long burst(unsigned seed)
{
    static char *p[BURST];
    long bytes = 0;
    for (int i = 0; i < BURST; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = i % 4 == 3 ? 2 * MIB + seed % (2 * MIB) : 64 * 1024 + seed % (960 * 1024);
        p[i] = malloc(n);
        CHECK(p[i] != NULL, "malloc(%zu)", n);
        memset(p[i], i + 1, n);
        bytes += (long)n;
    }
    for (int i = 0; i < BURST; i++)
        free(p[(i * 7) % BURST]);
    return bytes;
}

/* Waits up to ms for RSS to fall to `below` KiB; returns the last reading. */
static long wait_rss(long below, long ms)
{
    long r = vmt_resident_kib();
    for (long t = 0; t < ms && r > below; t += 50) {
        sleep_ms(50);
        r = vmt_resident_kib();
    }
    return r;
}

/* The purger threads once a started one has had a second to name itself
 * (it does so when it first runs). */
static int started_purgers(void)
{
    for (int t = 0; t < 100 && purgers() == 0; t++)
        sleep_ms(10);
    return purgers();
}

static volatile int stop_churn;

static void *churn(void *arg)
{
    (void)arg;
    while (!stop_churn) {
        char *volatile q = malloc(300 * 1024);
        q[0] = 1;
        free(q);
    }
    return NULL;
}

static int run_bg(void)
{
    long base = vmt_resident_kib();
    long bytes = burst(1);
    long high = vmt_resident_kib();
    CHECK(high - base > bytes / 1024 / 4, "the burst is cached (RSS %ld -> %ld KiB)", base, high);
    CHECK(started_purgers() == 1, "one purger thread after the first large free (%d)", purgers());
    /* Sleeping: no call.  The thread returns it within ~1.5 delays. */
    long after = wait_rss(base + 3 * 1024, 3000);
    CHECK(after <= base + 3 * 1024, "idle: RSS back to %ld KiB (base %ld, burst %ld)", after,
          base, high);

    /* A child: no thread until it caches a block, then its own. */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        CHECK(purgers() == 0, "the child has no purger thread before its first free");
        long cb = vmt_resident_kib();
        burst(2);
        CHECK(started_purgers() == 1, "the child's own purger after its first large free");
        long ca = wait_rss(cb + 3 * 1024, 3000);
        CHECK(ca <= cb + 3 * 1024, "child idle: RSS back to %ld KiB (base %ld)", ca, cb);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the child's checks passed (status %#x)", st);

    /* Forks racing the thread's passes and another thread's large blocks:
     * the fork handlers take the purger's lock; no child hangs. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "pthread_create");
    alarm(60);
    for (int i = 0; i < 60; i++) {
        pid = fork();
        CHECK(pid >= 0, "fork %d", i);
        if (pid == 0) {
            burst(3 + (unsigned)i);
            _exit(0);
        }
        if (i % 10 == 0)
            burst(100 + (unsigned)i);
        sleep_ms(i % 3 * 40);
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d exited (status %#x)", i, st);
    }
    stop_churn = 1;
    pthread_join(t, NULL);
    alarm(0);
    CHECK(purgers() == 1, "still one purger thread (%d)", purgers());
    return 0;
}

static int run_nowork(void)
{
    for (int i = 0; i < 100000; i++) {
        char *volatile q = malloc((size_t)(i % 4000) + 1);
        q[0] = 1;
        free(q);
    }
    sleep_ms(500);
    CHECK(purgers() == 0, "no purger thread without a large block (%d)", purgers());
    return 0;
}

static int run_inline(void)
{
    long base = vmt_resident_kib();
    burst(1);
    long high = vmt_resident_kib();
    sleep_ms(700); /* three delays and a half: what is cached is due */
    CHECK(vmt_resident_kib() > base + 3 * 1024, "no call, no thread: still cached (%ld KiB)",
          vmt_resident_kib());
    for (int i = 0; i < 300; i++) {
        char *volatile q = malloc(24);
        q[0] = 1;
        free(q);
    }
    long after = vmt_resident_kib();
    CHECK(after <= base + 3 * 1024, "after 300 small calls: RSS %ld KiB (base %ld, burst %ld)",
          after, base, high);
    CHECK(purgers() == 0, "no purger thread without BACKGROUND (%d)", purgers());
    return 0;
}

int main(int argc, char **argv)
{
    vmt_init("idle_return");
    const char *mode = argc > 1 ? argv[1] : "";
    int rc = strcmp(mode, "bg") == 0       ? run_bg()
             : strcmp(mode, "nowork") == 0 ? run_nowork()
             : strcmp(mode, "inline") == 0 ? run_inline()
                                           : 2;
    if (rc == 2)
        fprintf(stderr, "usage: idle_return bg|nowork|inline\n");
    return rc;
}
