/*
 * map_fixed.c — MAP_FIXED over a live malloc block gets the kernel's answer.
 *
 *  1. The shape of glibc's tst-free-errno: a 16 MiB block, a read-only
 *     anonymous page mapped with MAP_FIXED over every other page of it (2048
 *     mappings, each succeeding as without vmapalloc); free keeps errno.
 *     Then the program's pages are its own: blocks allocated after the free
 *     never overlap them, a purge leaves them mapped (read-only, zero), and
 *     the program can unmap the whole range, after which the allocator may
 *     use it again.
 *  2. realloc of a block the program mapped a page over copies it: the new
 *     block holds the old contents, the program's page stays where it was.
 *  3. Under the builtin backend, MAP_FIXED over a slab (other callers'
 *     objects share its pages) is still refused with EINVAL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <sys/mman.h>

#define MiB ((size_t)1 << 20)
#define BIG (16 * MiB)

static size_t pg;

static int overlaps(const char *a, size_t alen, const char *b, size_t blen)
{
    return a < b + blen && b < a + alen;
}

static void tst_free_errno_shape(void)
{
    char *p = malloc(vmt_sz(BIG - 0x100));
    CHECK(p != NULL, "malloc(16 MiB)");
    CHECK_OWNS(p, 1, "the 16 MiB block is not vmapalloc's");
    memset(p, 0x5a, BIG - 0x100);
    char *base = (char *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
    size_t maps = 0;
    for (size_t off = pg; off + pg <= BIG - 0x100 && maps < 2048; off += 2 * pg, maps++) {
        errno = 0;
        void *q = mmap(base + off, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        CHECK(q == base + off, "mmap(MAP_FIXED) over page %zu of a live malloc block: %s", off / pg,
              q == MAP_FAILED ? strerror(errno) : "another address");
    }
    CHECK(base[pg] == 0 && p[0] == 0x5a && base[2 * pg] == 0x5a,
          "the mapped pages read zero, the others keep the block's bytes");
    errno = 1789;
    free(p);
    CHECK(errno == 1789, "free changed errno to %d (%s)", errno, strerror(errno));

    /* The range is the program's: never handed out, never purged. */
    for (int round = 0; round < 2; round++) {
        char *got[6];
        for (int i = 0; i < 6; i++) {
            got[i] = malloc(vmt_sz(BIG - 0x100));
            CHECK(got[i] != NULL, "malloc(16 MiB) after the free");
            CHECK(!overlaps(got[i], BIG, base, BIG), "a new block %p overlaps the freed "
                  "mapped-over block at %p", (void *)got[i], (void *)base);
            memset(got[i], 0x33, BIG - 0x100);
        }
        for (int i = 0; i < 6; i++)
            free(got[i]);
        if (vm.purge)
            vm.purge();
    }
    /* (glibc's free unmapped the whole chunk, the program's pages with it.) */
    if (vmt_vm)
        CHECK(base[pg] == 0 && base[BIG / 2 + pg] == 0, "the program's pages changed");

    /* The program unmaps it all; the space may serve blocks again. */
    CHECK(munmap(base, BIG) == 0, "munmap of the program's range: %s", strerror(errno));
    char *again = malloc(vmt_sz(BIG - 0x100));
    CHECK(again != NULL, "malloc(16 MiB) after the munmap");
    memset(again, 0x44, BIG - 0x100);
    free(again);
}

static void realloc_mapped_over(void)
{
    size_t n = 4 * MiB;
    unsigned char *b = malloc(vmt_sz(n));
    CHECK(b != NULL, "malloc(4 MiB)");
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 7);
    unsigned char *page = (unsigned char *)(((uintptr_t)b + 8 * pg) & ~(uintptr_t)(pg - 1));
    void *q = mmap(page, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(q == page, "mmap(MAP_FIXED) over a page of a live 4 MiB block: %s", strerror(errno));
    memset(page, 0xee, pg);
    unsigned char *c = realloc(b, vmt_sz(3 * n));
    CHECK(c != NULL, "realloc to 12 MiB");
    if (!vmt_vm) { /* glibc's mremap took the program's page along */
        free(c);
        return;
    }
    CHECK(!overlaps((char *)c, 3 * n, (char *)page, pg), "the grown block covers the program's "
          "page");
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char want = (uintptr_t)(b + i) - (uintptr_t)page < pg ? 0xee : (unsigned char)(i * 7);
        bad += c[i] != want;
    }
    CHECK(bad == 0, "realloc lost %zu bytes of the block", bad);
    CHECK(page[0] == 0xee && page[pg - 1] == 0xee, "the program's page changed");
    free(c);
    CHECK(page[0] == 0xee, "the program's page changed after the free");
    CHECK(munmap(page, pg) == 0, "munmap of the program's page: %s", strerror(errno));
}

static void slab_refused(void)
{
    char *s = malloc(vmt_sz(100));
    CHECK(s != NULL, "malloc(100)");
    if (vmt_vm && vm.owns(s)) { /* a slab object (BACKEND=builtin) */
        char *page = (char *)((uintptr_t)s & ~(uintptr_t)(pg - 1));
        errno = 0;
        void *q = mmap(page, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        CHECK(q == MAP_FAILED && errno == EINVAL, "MAP_FIXED over a slab: %s",
              q == MAP_FAILED ? strerror(errno) : "mapped");
    }
    free(s);
}

int main(void)
{
    vmt_init("map_fixed");
    pg = (size_t)sysconf(_SC_PAGESIZE);
    tst_free_errno_shape();
    realloc_mapped_over();
    slab_refused();
    printf("map_fixed: ok\n");
    return 0;
}
