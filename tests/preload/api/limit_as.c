/*
 * limit_as.c — allocating until failure under a 200 MiB RLIMIT_AS.
 *
 * 8 threads allocate in turn malloc(512), posix_memalign(128, 512),
 * malloc(256 KiB) and posix_memalign(4096, 256 KiB), keeping every block,
 * until each kind has
 * failed: every failure returns NULL (ENOMEM from posix_memalign) with errno
 * ENOMEM, whatever errno was before.  The blocks keep their contents; after
 * they are freed, a large block can be had again.  Exit 0 when all held.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <pthread.h>
#include <sys/resource.h>

#define THREADS 8
#define LIMIT ((rlim_t)200 << 20)
#define LARGE ((size_t)256 << 10)

struct block {
    struct block *next;
    size_t size;
};

static pthread_barrier_t start; /* every thread exists before any fills the limit */

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    pthread_barrier_wait(&start);
    struct block *held = NULL;
    unsigned failed = 0; /* one bit per kind */
    unsigned long n = 0;
    for (unsigned i = 0; failed != 15 && i < 50u * 1000 * 1000; i++) {
        unsigned kind = i % 4;
        size_t size = kind < 2 ? 512 : LARGE;
        void *p = NULL;
        errno = 0;
        if (kind == 0 || kind == 2) {
            p = malloc(vmt_sz(size));
            if (!p)
                CHECK(errno == ENOMEM, "thread %u: malloc(%zu) failed with errno %d (%s), "
                      "expected ENOMEM", id, size, errno, strerror(errno));
        } else {
            int rc = posix_memalign(&p, kind == 1 ? 128 : 4096, vmt_sz(size));
            CHECK(rc == 0 || rc == ENOMEM, "thread %u: posix_memalign returned %d", id, rc);
            if (rc) {
                p = NULL;
                CHECK(errno == ENOMEM, "thread %u: posix_memalign(p, %d, %zu) failed: errno %d "
                      "(%s), expected ENOMEM", id, kind == 1 ? 128 : 4096, size, errno,
                      strerror(errno));
            } else if (vmt_vm) { /* glibc's may leave a failed mmap's errno */
                CHECK(errno == 0, "thread %u: posix_memalign succeeded and set errno %d", id,
                      errno);
            }
        }
        if (!p) {
            failed |= 1u << kind;
            continue;
        }
        struct block *b = p;
        b->next = held;
        b->size = size;
        memset(b + 1, (int)(id + 1), 64 - sizeof *b);
        held = b;
        n++;
    }
    CHECK(failed == 15, "thread %u: %lu blocks and not every kind failed (0x%x)", id, n, failed);
    while (held) {
        struct block *next = held->next;
        unsigned char *c = (unsigned char *)(held + 1);
        CHECK(c[0] == id + 1 && c[64 - sizeof *held - 1] == id + 1, "thread %u: a block lost "
              "its contents", id);
        free(held);
        held = next;
    }
    return (void *)n;
}

int main(void)
{
    vmt_init("limit_as");
    struct rlimit rl = {LIMIT, LIMIT};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
    void *first = malloc(vmt_sz(1 << 20));
    CHECK(first != NULL, "malloc(1 MiB) under the limit");
    free(first);
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0,
              "pthread_create: %s", strerror(errno));
    unsigned long total = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        void *n;
        CHECK(pthread_join(t[i], &n) == 0, "pthread_join");
        total += (unsigned long)(uintptr_t)n;
    }
    void *again = malloc(vmt_sz(1 << 20));
    CHECK(again != NULL, "malloc(1 MiB) after everything was freed");
    free(again);
    printf("limit_as: %lu blocks before every kind failed, in %d threads\n", total, THREADS);
    return 0;
}
