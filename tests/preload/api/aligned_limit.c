/*
 * aligned_limit.c — 1 GiB-aligned blocks under a 2 GiB RLIMIT_AS.
 *
 * glibc serves posix_memalign(1 GiB, 640 MiB) under the limit by mapping
 * size + alignment and trimming: 1.6 GiB.  With vmapalloc's arena reserved
 * (a quarter of the room) that no longer fits, and neither does the arena
 * place such an alignment; the request must still succeed as it does
 * without vmapalloc.  Each of posix_memalign, memalign and aligned_alloc in
 * turn, twice: aligned, writable to the last byte, malloc_usable_size at
 * least the size, the contents kept by a realloc, freed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <malloc.h>
#include <sys/resource.h>

#define GiB ((size_t)1 << 30)
#define MiB ((size_t)1 << 20)

int main(void)
{
    vmt_init("aligned_limit");
    struct rlimit rl = {2 * GiB, 2 * GiB};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
    void *first = malloc(vmt_sz(MiB)); /* the arena, when there is one, set up first */
    CHECK(first != NULL, "malloc(1 MiB)");
    size_t size = 640 * MiB;
    for (int round = 0; round < 6; round++) {
        void *p = NULL;
        errno = 0;
        switch (round % 3) {
        case 0: {
            int rc = posix_memalign(&p, vmt_sz(GiB), vmt_sz(size));
            CHECK(rc == 0, "posix_memalign(1 GiB, 640 MiB) under RLIMIT_AS=2G: %s", strerror(rc));
            break;
        }
        case 1:
            p = memalign(vmt_sz(GiB), vmt_sz(size));
            CHECK(p != NULL, "memalign(1 GiB, 640 MiB) under RLIMIT_AS=2G: %s", strerror(errno));
            break;
        default:
            p = aligned_alloc(vmt_sz(GiB), vmt_sz(size));
            CHECK(p != NULL, "aligned_alloc(1 GiB, 640 MiB) under RLIMIT_AS=2G: %s",
                  strerror(errno));
        }
        unsigned char *c = p;
        CHECK(((uintptr_t)p & (GiB - 1)) == 0, "%p is not 1 GiB-aligned", p);
        CHECK(malloc_usable_size(p) >= size, "malloc_usable_size %zu", malloc_usable_size(p));
        c[0] = 1;
        c[size / 2] = 2;
        c[size - 1] = 3;
        c = realloc(c, vmt_sz(size - 64 * MiB));
        CHECK(c != NULL && c[0] == 1 && c[size / 2] == 2, "realloc to 576 MiB lost the contents");
        free(c);
    }
    free(first);
    printf("aligned_limit: 6 blocks of 640 MiB, 1 GiB-aligned, under RLIMIT_AS=2G\n");
    return 0;
}
