/*
 * tight_limit.c — an arena under a tight RLIMIT_AS set before vmapalloc
 * starts, in the shape of glibc's tst-malloc-thread-fail.
 *
 *   tight_limit [MIB...]        (default 64 128 200 300)
 *
 * For each limit the parent forks a child that sets RLIMIT_AS and execs this
 * program again (`child MIB`), so that vmapalloc initialises under the limit
 * (LD_PRELOAD and the VMAPALLOC_* variables pass through, VMAPALLOC_STATS=1
 * is added).  The child:
 *  - checks that a 1 MiB block is vmapalloc's: the arena was reserved;
 *  - runs 8 threads (256 KiB stacks) for 3 rounds, started together: each
 *    allocates in turn small blocks (malloc, calloc), large ones of 64 KiB to
 *    4 MiB (malloc, calloc, realloc of a small block, posix_memalign,
 *    aligned_alloc, memalign, valloc; alignments of 64 B to 64 KiB),
 *    keeping every block, until each kind has failed at least once.  Every
 *    failure returns NULL with errno ENOMEM (posix_memalign: returns ENOMEM,
 *    errno ENOMEM as glibc's leaves it, or untouched), a failed realloc
 *    keeps its block; every block is aligned, zeroed where asked and keeps
 *    its contents until all are freed at the end of the round;
 *  - checks that a 1 MiB block is vmapalloc's again after the rounds.
 * The parent then reads the child's stderr: exit 0, no "could not reserve"
 * line from vmapalloc, and a report whose arena has a region and served
 * large blocks.  A child that hangs is killed after 120 s (a deadlock).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define THREADS 8
#define ROUNDS 3
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

enum kind {
    K_MALLOC_SMALL, K_CALLOC_SMALL, K_MALLOC, K_CALLOC, K_REALLOC, K_POSIX_MEMALIGN,
    K_ALIGNED_ALLOC, K_MEMALIGN, K_VALLOC, K_KINDS
};
static const char *const kind_name[K_KINDS] = {
    "malloc(small)", "calloc(small)", "malloc", "calloc", "realloc", "posix_memalign",
    "aligned_alloc", "memalign", "valloc",
};

/* Every block starts with this header; its last byte repeats `mark`. */
struct block {
    struct block *next;
    size_t size;
    unsigned mark;
};

static pthread_barrier_t round_start;
static atomic_ulong blocks_made, failures_seen;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 64 KiB to 4 MiB, log-uniform. */
static size_t large_size(uint64_t *s)
{
    unsigned shift = 16 + (unsigned)(next_rand(s) % 7); /* 64 KiB .. 4 MiB */
    size_t base = (size_t)1 << shift;
    size_t n = base + (size_t)(next_rand(s) % base);
    return n > 4 * MiB ? 4 * MiB : n;
}

static int is_zero(const unsigned char *p, size_t n)
{
    for (size_t off = 0; off < n; off += 4096)
        if (p[off])
            return 0;
    return p[n - 1] == 0;
}

/* One attempt of kind k; the block, or NULL after checking the failure. */
static void *attempt(unsigned id, enum kind k, uint64_t *s, struct block **held)
{
    static const size_t aligns[] = {64, 128, 4096, 65536};
    size_t align = aligns[next_rand(s) % 4], n;
    void *p = NULL;
    errno = EDOM;
    switch (k) {
    case K_MALLOC_SMALL:
        n = 32 + (size_t)(next_rand(s) % 4065);
        p = malloc(vmt_sz(n));
        break;
    case K_CALLOC_SMALL:
        n = 32 + (size_t)(next_rand(s) % 4065);
        p = calloc(vmt_sz(n / 16), 16);
        n = n / 16 * 16;
        CHECK(!p || is_zero(p, n), "thread %u: calloc(%zu, 16) not zeroed", id, n / 16);
        break;
    case K_MALLOC:
        n = large_size(s);
        p = malloc(vmt_sz(n));
        break;
    case K_CALLOC:
        n = large_size(s);
        p = calloc(1, vmt_sz(n));
        CHECK(!p || is_zero(p, n), "thread %u: calloc(1, %zu) not zeroed", id, n);
        break;
    case K_REALLOC: {
        /* Grow the newest block if it is small, else a new small one. */
        struct block *b = *held;
        if (!b || b->size > 4096) {
            errno = EDOM;
            b = malloc(vmt_sz(64));
            if (!b) {
                CHECK(errno == ENOMEM, "thread %u: malloc(64) failed with errno %d (%s)", id,
                      errno, strerror(errno));
                return NULL;
            }
            b->size = 64;
            b->mark = id + 1;
            ((unsigned char *)b)[63] = (unsigned char)b->mark;
        } else {
            *held = b->next;
        }
        n = large_size(s);
        errno = EDOM;
        p = realloc(b, vmt_sz(n));
        if (!p) {
            CHECK(b->mark == id + 1 && ((unsigned char *)b)[b->size - 1] == (unsigned char)b->mark,
                  "thread %u: a failed realloc(%zu) lost its block's contents", id, n);
            b->next = *held; /* kept: it is freed with the others */
            *held = b;
        } else {
            struct block *q = p;
            CHECK(q->mark == id + 1, "thread %u: realloc to %zu lost the contents", id, n);
        }
        break;
    }
    case K_POSIX_MEMALIGN: {
        n = large_size(s);
        int rc = posix_memalign(&p, vmt_sz(align), vmt_sz(n));
        CHECK(rc == 0 || rc == ENOMEM, "thread %u: posix_memalign(%zu, %zu) returned %d", id,
              align, n, rc);
        if (rc) {
            /* glibc's leaves errno ENOMEM, vmapalloc's too (programs test
             * it); POSIX asks only for the return value. */
            CHECK(errno == ENOMEM || errno == EDOM, "thread %u: posix_memalign(%zu, %zu) "
                  "failed and set errno %d (%s)", id, align, n, errno, strerror(errno));
            atomic_fetch_add(&failures_seen, 1);
            return NULL;
        }
        CHECK(errno == EDOM, "thread %u: posix_memalign succeeded and set errno %d", id, errno);
        break;
    }
    case K_ALIGNED_ALLOC:
        align = align < 4096 ? 4096 : align;
        n = (large_size(s) + align - 1) & ~(align - 1);
        p = aligned_alloc(vmt_sz(align), vmt_sz(n));
        break;
    case K_MEMALIGN:
        n = large_size(s);
        p = memalign(vmt_sz(align), vmt_sz(n));
        break;
    case K_VALLOC:
        n = large_size(s);
        align = 4096;
        p = valloc(vmt_sz(n));
        break;
    default:
        return NULL;
    }
    if (!p) {
        CHECK(errno == ENOMEM, "thread %u: %s(%zu) returned NULL with errno %d (%s), expected "
              "ENOMEM", id, kind_name[k], n, errno, strerror(errno));
        atomic_fetch_add(&failures_seen, 1);
        return NULL;
    }
    if (k >= K_POSIX_MEMALIGN)
        CHECK(((uintptr_t)p & (align - 1)) == 0, "thread %u: %s(%zu, %zu) = %p misaligned", id,
              kind_name[k], align, n, p);
    CHECK(((uintptr_t)p & 15) == 0, "thread %u: %s(%zu) = %p not 16-aligned", id, kind_name[k],
          n, p);
    CHECK(malloc_usable_size(p) >= n, "thread %u: %s(%zu) usable %zu", id, kind_name[k], n,
          malloc_usable_size(p));
    struct block *b = p;
    b->size = n;
    b->mark = id + 1;
    ((unsigned char *)p)[n - 1] = (unsigned char)b->mark;
    b->next = *held;
    *held = b;
    atomic_fetch_add(&blocks_made, 1);
    return p;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ull * (id + 1);
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&round_start);
        struct block *held = NULL;
        unsigned failed = 0;
        unsigned long i;
        for (i = 0; failed != (1u << K_KINDS) - 1 && i < 4000000; i++) {
            enum kind k = (enum kind)(i % K_KINDS);
            if (!attempt(id, k, &s, &held))
                failed |= 1u << k;
        }
        CHECK(failed == (1u << K_KINDS) - 1, "thread %u, round %d: %lu attempts and not every "
              "kind failed (0x%x)", id, round, i, failed);
        while (held) {
            struct block *next = held->next;
            CHECK(held->mark == id + 1 &&
                  ((unsigned char *)held)[held->size - 1] == (unsigned char)held->mark,
                  "thread %u: a block of %zu lost its contents", id, held->size);
            free(held);
            held = next;
        }
    }
    return NULL;
}

static int child(size_t mib)
{
    vmt_init("tight_limit");
    alarm(120); /* a deadlock ends the run */
    void *first = malloc(vmt_sz(MiB));
    CHECK(first != NULL, "malloc(1 MiB) under a %zu MiB RLIMIT_AS", mib);
    CHECK_OWNS(first, 1, "under a %zu MiB RLIMIT_AS the first 1 MiB block is glibc's: no arena",
               mib);
    free(first);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * KiB);
    pthread_barrier_init(&round_start, NULL, THREADS);
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], &attr, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create under a %zu MiB RLIMIT_AS", mib);
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
    void *again = malloc(vmt_sz(MiB));
    CHECK(again != NULL, "malloc(1 MiB) after every block was freed");
    CHECK_OWNS(again, 1, "after the rounds the 1 MiB block is glibc's: the arena was lost");
    free(again);
    fprintf(stderr, "tight_limit: %zu MiB: %lu blocks, %lu failures (all ENOMEM) in %d rounds "
            "of %d threads\n", mib, (unsigned long)blocks_made, (unsigned long)failures_seen,
            ROUNDS, THREADS);
    return 0;
}

/* The number after `key` on the report's line labelled `label`, or -1. */
static long report_number(const char *text, const char *label, const char *key)
{
    const char *l = strstr(text, label);
    if (!l)
        return -1;
    const char *eol = strchr(l, '\n');
    const char *k = strstr(l, key);
    if (!k || (eol && k > eol))
        return -1;
    return strtol(k + strlen(key), NULL, 10);
}

/* Runs `self child MIB` under RLIMIT_AS = MIB MiB; 0 when all held. */
static int run_limit(const char *self, size_t mib)
{
    char path[] = "/tmp/vmt-tight-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    unlink(path);
    char arg[32];
    snprintf(arg, sizeof arg, "%zu", mib);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        struct rlimit rl = {(rlim_t)mib << 20, (rlim_t)mib << 20};
        if (setrlimit(RLIMIT_AS, &rl) != 0 || dup2(fd, 2) < 0 ||
            setenv("VMAPALLOC_STATS", "1", 1) != 0)
            _exit(3);
        execl(self, self, "child", arg, (char *)NULL);
        _exit(4);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
    static char text[1 << 16];
    ssize_t len = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[len > 0 ? len : 0] = '\0';
    int ok = 1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "FAIL: under a %zu MiB RLIMIT_AS the child %s %d; its stderr:\n%s\n", mib,
                WIFEXITED(st) ? "exited with" : "was killed by signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), text);
        return 0;
    }
    if (strstr(text, "could not reserve an arena")) {
        fprintf(stderr, "FAIL: under a %zu MiB RLIMIT_AS vmapalloc reserved no arena\n", mib);
        ok = 0;
    }
    const char *summary = strstr(text, "tight_limit: ");
    summary = summary ? summary : "";
    long regions = report_number(text, "address space reserved", " in ");
    long large = report_number(text, "/ large", " / ");
    if (regions < 1 || large < 1) {
        fprintf(stderr, "FAIL: under a %zu MiB RLIMIT_AS the report shows %ld region(s) and "
                "%ld large allocations served by the arena\n", mib, regions, large);
        ok = 0;
    }
    if (!ok)
        fprintf(stderr, "%s\n", text);
    else
        printf("ok: %zu MiB: %ld region(s), %ld large allocations from the arena; %.*s\n", mib,
               regions, large, (int)strcspn(summary, "\n"), summary);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(strtoul(argv[2], NULL, 10));
    vmt_init("tight_limit");
    static const size_t limits[] = {64, 128, 200, 300};
    int ok = 1;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            ok &= run_limit("/proc/self/exe", strtoul(argv[i], NULL, 10));
    } else {
        for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
            ok &= run_limit("/proc/self/exe", limits[i]);
    }
    return ok ? 0 : 1;
}
