/*
 * threads_fork.c — vmapalloc under threads, fork and posix_spawn.
 *
 *  A. 8 threads x 2000 iterations of mixed small/large malloc/calloc/
 *     posix_memalign/realloc/free with content checks.
 *  B. blocks handed between threads and freed by another thread, also after
 *     the allocating thread has exited; many short-lived threads.
 *  C. fork while other threads allocate; the child allocates, frees and forks
 *     again; the grandchild allocates; all exit 0 (a hang = deadlock is a
 *     failure, detected with a timeout).
 *  D. posix_spawn of /bin/true (and popen) in a loop while threads allocate.
 * Under vmapalloc, large_bytes_in_use is back to its start value at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

extern char **environ;

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Sizes: mostly small, a good share large, a few big. */
static size_t rnd_size(uint64_t *s)
{
    unsigned r = (unsigned)(rnd(s) % 100);
    if (r < 55)
        return 1 + rnd(s) % 4096;
    if (r < 65)
        return 4096 + rnd(s) % (60 * KiB);
    if (r < 95)
        return 64 * KiB + 1 + rnd(s) % (2 * MiB);
    return 2 * MiB + rnd(s) % (14 * MiB);
}

/* Up to 256 KiB: every byte.  Beyond: head, tail and one 64-byte run per page. */
#define FULL_LIMIT (256 * KiB)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    if (n <= FULL_LIMIT) {
        vmt_fill(p, 0, n, seed);
        return;
    }
    vmt_fill(p, 0, 4096, seed);
    for (size_t off = 4096; off + 64 <= n; off += 4096)
        vmt_fill(p, off, off + 64, seed);
    vmt_fill(p, n - 4096, n, seed);
}

/* Check the bytes fill(p, n, seed) wrote below limit. */
static int verify(const unsigned char *p, size_t n, size_t limit, unsigned seed)
{
    size_t lim = n < limit ? n : limit;
    if (n <= FULL_LIMIT)
        return vmt_verify(p, 0, lim, seed) == SIZE_MAX;
    if (vmt_verify(p, 0, lim < 4096 ? lim : 4096, seed) != SIZE_MAX)
        return 0;
    for (size_t off = 4096; off + 64 <= n && off < lim; off += 4096)
        if (vmt_verify(p, off, off + 64 < lim ? off + 64 : lim, seed) != SIZE_MAX)
            return 0;
    if (n - 4096 < lim && vmt_verify(p, n - 4096, lim, seed) != SIZE_MAX)
        return 0;
    return 1;
}

/* ---------------- A: mixed workload ---------------- */

enum { NSLOT = 32 };
struct slot { unsigned char *p; size_t n; unsigned seed; };

static void workload_step(struct slot *sl, uint64_t *rs, unsigned *seedctr)
{
    struct slot *s = &sl[rnd(rs) % NSLOT];
    if (!s->p) {
        size_t n = rnd_size(rs);
        unsigned kind = (unsigned)(rnd(rs) % 10);
        void *p = NULL;
        if (kind < 6) {
            p = malloc(n);
        } else if (kind < 8) {
            p = calloc(1, n);
            CHECK(p != NULL, "calloc(%zu)", n);
            CHECK(vmt_first_nonzero(p, n < 8192 ? n : 8192) == SIZE_MAX, "calloc(%zu) not zero", n);
        } else {
            size_t a = (size_t)16 << (rnd(rs) % 17);     /* 16 .. 1 MiB */
            CHECK(posix_memalign(&p, a, n) == 0, "posix_memalign(%zu, %zu)", a, n);
            CHECK(((uintptr_t)p & (a - 1)) == 0, "posix_memalign(%zu) misaligned", a);
        }
        CHECK(p != NULL, "allocation of %zu failed", n);
        CHECK(((uintptr_t)p & 15) == 0, "allocation not 16-aligned");
        s->p = p;
        s->n = n;
        s->seed = ++*seedctr;
        fill(s->p, n, s->seed);
        return;
    }
    CHECK(verify(s->p, s->n, s->n, s->seed), "block %p (%zu bytes) corrupted", (void *)s->p, s->n);
    if (rnd(rs) % 2) {
        free(s->p);
        s->p = NULL;
        return;
    }
    size_t m = rnd_size(rs);
    unsigned char *q = realloc(s->p, m);
    CHECK(q != NULL, "realloc(%zu -> %zu)", s->n, m);
    CHECK(verify(q, s->n, m, s->seed), "realloc %zu -> %zu lost content", s->n, m);
    s->p = q;
    s->n = m;
    s->seed = ++*seedctr;
    fill(q, m, s->seed);
}

static void *mixed_thread(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    struct slot sl[NSLOT] = {{0}};
    uint64_t rs = 0x9E3779B97F4A7C15ull * (id + 1);
    unsigned seedctr = id << 24;
    for (int it = 0; it < 2000; it++)
        workload_step(sl, &rs, &seedctr);
    for (int i = 0; i < NSLOT; i++) {
        if (sl[i].p) {
            CHECK(verify(sl[i].p, sl[i].n, sl[i].n, sl[i].seed), "final check");
            free(sl[i].p);
        }
    }
    return NULL;
}

static void test_mixed(void)
{
    enum { T = 8 };
    pthread_t th[T];
    for (unsigned i = 0; i < T; i++)
        CHECK(pthread_create(&th[i], NULL, mixed_thread, (void *)(uintptr_t)i) == 0,
              "pthread_create");
    for (unsigned i = 0; i < T; i++)
        CHECK(pthread_join(th[i], NULL) == 0, "pthread_join");
}

/* ---------------- B: cross-thread frees ---------------- */

enum { RING = 256, HANDOFF = 3000 };
struct ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct slot q[RING];
    unsigned head, tail;
    int done;
};

static void *producer(void *arg)
{
    struct ring *r = arg;
    uint64_t rs = (uintptr_t)arg | 1;
    unsigned seed = 0x40000000u + (unsigned)((uintptr_t)arg >> 4);
    for (int i = 0; i < HANDOFF; i++) {
        size_t n = rnd_size(&rs);
        unsigned char *p = malloc(n);
        CHECK(p != NULL, "producer malloc(%zu)", n);
        fill(p, n, ++seed);
        pthread_mutex_lock(&r->mu);
        while (r->head - r->tail == RING)
            pthread_cond_wait(&r->cv, &r->mu);
        r->q[r->head++ % RING] = (struct slot){p, n, seed};
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&r->mu);
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void *consumer(void *arg)
{
    struct ring *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->head == r->tail && !r->done)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->head == r->tail && r->done) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        struct slot s = r->q[r->tail++ % RING];
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        CHECK(verify(s.p, s.n, s.n, s.seed), "handed-off block of %zu corrupted", s.n);
        if (s.n % 3 == 0) {             /* sometimes realloc in the other thread first */
            unsigned char *q = realloc(s.p, s.n + 100000);
            CHECK(q != NULL && verify(q, s.n, s.n, s.seed), "cross-thread realloc");
            s.p = q;
        }
        free(s.p);
    }
}

enum { ORPHANS = 64 };
static struct slot orphans[ORPHANS];

static void *orphan_maker(void *arg)
{
    (void)arg;
    for (int i = 0; i < ORPHANS; i++) {
        size_t n = (i % 4 == 0) ? 100 + (size_t)i : 65 * KiB + (size_t)i * 40000;
        orphans[i].p = malloc(n);
        CHECK(orphans[i].p != NULL, "malloc");
        orphans[i].n = n;
        orphans[i].seed = 0x50000000u + (unsigned)i;
        fill(orphans[i].p, n, orphans[i].seed);
    }
    /* and free a few so this thread's cache is not empty when it exits */
    for (int i = 0; i < 8; i++)
        free(malloc(100 * KiB + (size_t)i * 4096));
    return NULL;
}

static void *short_lived(void *arg)
{
    uint64_t rs = (uintptr_t)arg * 7919 + 1;
    void *keep[10];
    for (int i = 0; i < 10; i++) {
        size_t n = 64 * KiB + 1 + rnd(&rs) % MiB;
        keep[i] = malloc(n);
        CHECK(keep[i] != NULL, "malloc");
        memset(keep[i], i, 4096);
    }
    for (int i = 0; i < 10; i++)
        if (i != 1)
            free(keep[i]);
    return keep[1];      /* returned to main, which frees it */
}

static void test_cross_thread(void)
{
    enum { PAIRS = 2 };
    struct ring r[PAIRS];
    pthread_t p[PAIRS], c[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        memset(&r[i], 0, sizeof r[i]);
        pthread_mutex_init(&r[i].mu, NULL);
        pthread_cond_init(&r[i].cv, NULL);
        CHECK(pthread_create(&p[i], NULL, producer, &r[i]) == 0, "pthread_create");
        CHECK(pthread_create(&c[i], NULL, consumer, &r[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < PAIRS; i++) {
        pthread_join(p[i], NULL);
        pthread_join(c[i], NULL);
    }

    pthread_t t;
    CHECK(pthread_create(&t, NULL, orphan_maker, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);                 /* the allocating thread is gone */
    for (int i = 0; i < ORPHANS; i++) {
        CHECK(verify(orphans[i].p, orphans[i].n, orphans[i].n, orphans[i].seed),
              "block of an exited thread corrupted");
        if (i % 2) {
            unsigned char *q = realloc(orphans[i].p, orphans[i].n * 2);
            CHECK(q && verify(q, orphans[i].n, orphans[i].n, orphans[i].seed),
                  "realloc of an exited thread's block");
            orphans[i].p = q;
        }
        free(orphans[i].p);
    }

    /* many short-lived threads, two at a time */
    for (int round = 0; round < 100; round++) {
        pthread_t a, b;
        void *ra, *rb;
        CHECK(pthread_create(&a, NULL, short_lived, (void *)(uintptr_t)(2 * round)) == 0, "create");
        CHECK(pthread_create(&b, NULL, short_lived, (void *)(uintptr_t)(2 * round + 1)) == 0, "create");
        pthread_join(a, &ra);
        pthread_join(b, &rb);
        free(ra);
        free(rb);
    }
}

/* ---------------- background allocators for C and D ---------------- */

static atomic_int bg_stop;

static void *bg_thread(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    struct slot sl[NSLOT] = {{0}};
    uint64_t rs = 0xC2B2AE3D27D4EB4Full * (id + 11);
    unsigned seedctr = (id + 100) << 24;
    while (!atomic_load_explicit(&bg_stop, memory_order_relaxed))
        workload_step(sl, &rs, &seedctr);
    for (int i = 0; i < NSLOT; i++)
        free(sl[i].p);
    return NULL;
}

enum { BG = 4 };
static pthread_t bg[BG];

static void bg_start(void)
{
    atomic_store(&bg_stop, 0);
    for (unsigned i = 0; i < BG; i++)
        CHECK(pthread_create(&bg[i], NULL, bg_thread, (void *)(uintptr_t)i) == 0, "pthread_create");
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);                  /* let them get going */
}

static void bg_stop_all(void)
{
    atomic_store(&bg_stop, 1);
    for (unsigned i = 0; i < BG; i++)
        pthread_join(bg[i], NULL);
}

/* Wait for pid with a timeout; returns the wait status, or -1 on timeout (pid killed). */
static int wait_timeout(pid_t pid, int seconds)
{
    for (int i = 0; i < seconds * 100; i++) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return -2;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void describe(char *buf, size_t len, int st)
{
    if (st == -1)
        snprintf(buf, len, "hung (killed after timeout: deadlock after fork?)");
    else if (st == -2)
        snprintf(buf, len, "waitpid failed");
    else if (WIFEXITED(st))
        snprintf(buf, len, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(st));
    else
        snprintf(buf, len, "status 0x%x", st);
}

/* ---------------- C: fork ---------------- */

static void child_work(unsigned seed)
{
    unsigned char *l = malloc(3 * MiB), *s = malloc(200), *c = calloc(1, 5 * MiB);
    CHECK(l && s && c, "allocation in forked child");
    CHECK(vmt_first_nonzero(c, 5 * MiB) == SIZE_MAX, "calloc in child not zero");
    CHECK_OWNS(l, vmt_owned(3 * MiB, 16), "large block in child: wrong owner");
    CHECK_OWNS(s, vmt_owned(200, 16), "small block in child: wrong owner");
    fill(l, 3 * MiB, seed);
    fill(s, 200, seed + 1);
    l = realloc(l, 9 * MiB);
    CHECK(l && verify(l, 3 * MiB, 3 * MiB, seed), "realloc in child");
    void *a = NULL;
    CHECK(posix_memalign(&a, 1 << 20, 100 * KiB) == 0, "posix_memalign in child");
    CHECK(verify(s, 200, 200, seed + 1), "small block in child");
    free(a);
    free(l);
    free(s);
    free(c);
    if (vmt_vm)
        (void)CTR("large_bytes_in_use");
}

static void test_fork(void)
{
    const size_t PN = 4 * MiB;
    unsigned char *P = malloc(PN), *S = malloc(1000);
    CHECK(P && S, "malloc");
    fill(P, PN, 0x60000000u);
    fill(S, 1000, 0x60000001u);

    bg_start();
    for (int i = 0; i < 20; i++) {
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            alarm(60);                       /* last resort if the parent dies */
            CHECK(verify(P, PN, PN, 0x60000000u), "parent's block in child");
            CHECK(verify(S, 1000, 1000, 0x60000001u), "parent's small block in child");
            memset(P, 0xEE, 4096);           /* copy-on-write: parent must not see it */
            child_work(0x61000000u + (unsigned)i);
            free(P);
            free(S);
            pid_t g = fork();
            CHECK(g >= 0, "fork in child");
            if (g == 0) {
                child_work(0x62000000u + (unsigned)i);
                if (i % 2)
                    exit(atomic_load(&vmt_failures) ? 1 : 0);
                _exit(atomic_load(&vmt_failures) ? 1 : 0);
            }
            int st = wait_timeout(g, 30);
            char d[96];
            describe(d, sizeof d, st);
            CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "grandchild %d: %s", i, d);
            _exit(atomic_load(&vmt_failures) ? 1 : 0);
        }
        int st = wait_timeout(pid, 60);
        char d[96];
        describe(d, sizeof d, st);
        CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child %d: %s", i, d);
    }
    bg_stop_all();
    CHECK(verify(P, PN, PN, 0x60000000u), "parent's block changed by a child");
    free(P);
    free(S);

    /* fork while this thread is between allocations of its own, many times */
    bg_start();
    for (int i = 0; i < 50; i++) {
        void *x = malloc(200 * KiB);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            free(x);
            void *y = malloc(300 * KiB), *z = malloc(10);
            free(y);
            free(z);
            _exit(0);
        }
        CHECK(pid > 0, "fork");
        free(x);
        int st = wait_timeout(pid, 30);
        char d[96];
        describe(d, sizeof d, st);
        CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "quick child %d: %s", i, d);
    }
    bg_stop_all();
}

/* ---------------- D: posix_spawn ---------------- */

static void test_spawn(void)
{
    bg_start();
    for (int i = 0; i < 60; i++) {
        pid_t pid;
        char *argv[] = {(char *)"true", NULL};
        int rc;
        if (i % 2) {
            posix_spawn_file_actions_t fa;
            CHECK(posix_spawn_file_actions_init(&fa) == 0, "file_actions_init");
            CHECK(posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) == 0,
                  "file_actions_addopen");
            rc = posix_spawnp(&pid, "true", &fa, NULL, argv, environ);
            posix_spawn_file_actions_destroy(&fa);
        } else {
            rc = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
        }
        CHECK(rc == 0, "posix_spawn #%d: %s", i, strerror(rc));
        int st = wait_timeout(pid, 30);
        char d[96];
        describe(d, sizeof d, st);
        CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "spawned /bin/true #%d: %s", i, d);
    }
    for (int i = 0; i < 10; i++) {
        FILE *f = popen("echo vmapalloc", "r");
        CHECK(f != NULL, "popen");
        char line[64] = "";
        CHECK(fgets(line, sizeof line, f) != NULL && strcmp(line, "vmapalloc\n") == 0,
              "popen output '%s'", line);
        int st = pclose(f);
        CHECK(st == 0, "pclose status %d", st);
    }
    bg_stop_all();
}

/* syscall(SYS_vfork) and a fork-like syscall(SYS_clone) while threads
 * allocate: libvmapalloc exports syscall() (for mseal), and a vfork child
 * returning through its C frames on the parent's stack would wreck the parent
 * (glibc's leaf assembly happens to survive it): it makes vfork a fork.
 * Without vmapalloc this is undefined, so it runs under the preload only. */
static void test_raw_fork_syscalls(void)
{
    if (!vmt_vm)
        return;
    bg_start();
    for (int i = 0; i < 40; i++) {
        long pid = syscall(i % 2 ? SYS_vfork : SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (pid == 0) {
            void *p = malloc(100 + (size_t)i);
            _exit(p ? 9 : 1);
        }
        CHECK(pid > 0, "syscall(%s) failed: %s", i % 2 ? "vfork" : "clone", strerror(errno));
        int st = wait_timeout((pid_t)pid, 30);
        char d[96];
        describe(d, sizeof d, st);
        CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 9, "raw %s child #%d: %s",
              i % 2 ? "vfork" : "clone", i, d);
    }
    bg_stop_all();
}

#define RUN(fn) vmt_run("threads_fork", fn, #fn)

int main(void)
{
    vmt_init("threads_fork");
    /* warm the thread machinery before taking the baseline */
    pthread_t t;
    pthread_create(&t, NULL, short_lived, NULL);
    void *r;
    pthread_join(t, &r);
    free(r);
    uint64_t in_use0 = CTR("large_bytes_in_use");

    RUN(test_mixed);
    RUN(test_cross_thread);
    RUN(test_fork);
    RUN(test_spawn);
    RUN(test_raw_fork_syscalls);

    /* with a tiny SMALL_MAX, glibc's own long-lived allocations (thread and
     * stdio bookkeeping) are large blocks too: compare only by default-ish */
    if (vmt_vm && vmt_small_max() >= 4096) {
        uint64_t in_use1 = CTR("large_bytes_in_use");
        CHECK(in_use1 == in_use0, "large_bytes_in_use %llu after all threads joined and all "
              "blocks freed, %llu at start", (unsigned long long)in_use1,
              (unsigned long long)in_use0);
    }
    vmt_done("threads_fork");
    return 0;
}
