/*
 * bad_free.c CASE — misuse that vmapalloc must catch (driven by bad_free.sh).
 *
 *   double-free          free a large block twice
 *   double-free-aligned  free a large 64 KiB-aligned block twice
 *   interior             free(p + 4096) of a large block
 *   realloc-freed        realloc of a freed large block
 *   glibc-ptr            free of a small (glibc) block: must just work, exit 0
 * and with VMAPALLOC_BACKEND=builtin, the same misuse of small objects:
 *   small-double-free    free a 48-byte object twice
 *   small-double-free-remote  freed twice by a thread that does not own it
 *   small-interior       free(p + 16) of a 64-byte object
 *   small-realloc-freed  realloc of a freed 200-byte object
 *   small-never-given    free of an object-aligned address the slab never handed out
 *
 * The misuse cases must die with SIGABRT after exactly one stderr line
 * "vmapalloc: ... invalid pointer|double free ...".  This program writes
 * nothing to stderr itself before the misuse; if it survives the misuse it
 * exits 3.  Without the preload it exits 1 ("not running under vmapalloc").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)

static unsigned char *large_block(void)
{
    unsigned char *p = malloc(MiB);
    CHECK(p != NULL, "malloc(1 MiB)");
    CHECK(vm.owns(p), "a 1 MiB block is not vmapalloc's");
    memset(p, 0x5a, MiB);
    return p;
}

static void *remote_free_twice(void *p)
{
    free(p);
    free(vmt_ptr(p));
    return NULL;
}

static int survived(const char *what)
{
    printf("bad_free: survived %s\n", what);
    return 3;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bad_free double-free|double-free-aligned|interior|"
                "realloc-freed|glibc-ptr\n");
        return 2;
    }
    vmt_init("bad_free");
    if (!vmt_vm) {              /* VMTEST_CONTRACT_ONLY makes no sense here */
        fprintf(stderr, "FAIL: bad_free: not running under vmapalloc\n");
        return 1;
    }
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);          /* the aborts must not leave cores */
    const char *c = argv[1];

    if (strcmp(c, "double-free") == 0) {
        unsigned char *p = large_block();
        free(p);
        free(vmt_ptr(p));
        return survived(c);
    }
    if (strcmp(c, "double-free-aligned") == 0) {
        void *p = NULL;
        CHECK(posix_memalign(&p, 1 << 16, 3 * MiB) == 0 && vm.owns(p), "posix_memalign");
        free(p);
        free(vmt_ptr(p));
        return survived(c);
    }
    if (strcmp(c, "interior") == 0) {
        unsigned char *p = large_block();
        free(vmt_ptr(p + 4096));
        return survived(c);
    }
    if (strcmp(c, "realloc-freed") == 0) {
        unsigned char *p = large_block();
        free(p);
        void *q = realloc(vmt_ptr(p), 2 * MiB);
        printf("realloc returned %p\n", q);
        return survived(c);
    }
    if (strncmp(c, "small-", 6) == 0) {
        CHECK(vmt_builtin(), "the small cases need VMAPALLOC_BACKEND=builtin");
        unsigned char *p = malloc(48), *q = malloc(64), *r = malloc(200);
        CHECK(p && q && r && vm.owns(p) && vm.owns(q) && vm.owns(r), "small objects");
        memset(p, 0x11, 48);
        memset(q, 0x22, 64);
        memset(r, 0x33, 200);
        if (strcmp(c, "small-double-free") == 0) {
            free(p);
            free(vmt_ptr(p));
        } else if (strcmp(c, "small-double-free-remote") == 0) {
            pthread_t t;
            CHECK(pthread_create(&t, NULL, remote_free_twice, p) == 0, "pthread_create");
            pthread_join(t, NULL);
        } else if (strcmp(c, "small-interior") == 0) {
            free(vmt_ptr(q + 16));
        } else if (strcmp(c, "small-realloc-freed") == 0) {
            free(r);
            void *x = realloc(vmt_ptr(r), 300);
            printf("realloc returned %p\n", x);
        } else if (strcmp(c, "small-never-given") == 0) {
            /* 48-byte objects come from 64 KiB slabs carved a page at a
             * time: the slab's last object has not been handed out yet */
            unsigned char *slab = (unsigned char *)((uintptr_t)p & ~(uintptr_t)65535);
            free(vmt_ptr(slab + (65536 / 48 - 1) * 48));
        } else {
            fprintf(stderr, "bad_free: unknown case '%s'\n", c);
            return 2;
        }
        return survived(c);
    }
    if (strcmp(c, "glibc-ptr") == 0) {
        for (size_t n = 1; n <= 65536; n = n * 3 + 1) {
            void *p = malloc(n);
            CHECK(p != NULL, "malloc(%zu)", n);
            CHECK(vm.owns(p) == vmt_owned(n, 16), "malloc(%zu): wrong owner", n);
            memset(p, 1, n);
            free(p);
        }
        void *q = calloc(10, 10);
        CHECK(q != NULL && vm.owns(q) == vmt_owned(100, 16), "small calloc");
        free(q);
        vmt_done("bad_free glibc-ptr");
        return 0;
    }
    fprintf(stderr, "bad_free: unknown case '%s'\n", c);
    return 2;
}
