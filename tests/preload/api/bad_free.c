/*
 * bad_free.c CASE — misuse that vmapalloc must catch (driven by bad_free.sh).
 *
 *   double-free          free a large block twice
 *   double-free-aligned  free a large 64 KiB-aligned block twice
 *   interior             free(p + 4096) of a large block
 *   realloc-freed        realloc of a freed large block
 *   glibc-ptr            free of a small (glibc) block: must just work, exit 0
 *   glibc-blocks         glibc's blocks of every kind go to glibc and come
 *                        back: small malloc, memalign 32-2048, blocks of
 *                        another thread, blocks freed from a signal handler
 *                        running on an alternate stack that is itself a glibc
 *                        block with the freed blocks right above it; each is
 *                        freed and its size class allocated again, and the
 *                        program's blocks keep their contents; exit 0
 *   foreign              free of an address on this thread's stack (a zero
 *                        size word before it): glibc's free stops the program
 *                        as it would without vmapalloc ("free(): invalid
 *                        pointer", SIGABRT), with no line of vmapalloc's
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
 * exits 3.  Without the preload it exits 1 ("not running under vmapalloc"),
 * but for the foreign case, which runs either way.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
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

/* ---- glibc's blocks, and pointers that are nobody's -------------------- */

/* glibc blocks of one thread, freed by another (and some by itself). */
static void *glibc_blocks(void *arg)
{
    void **b = arg;
    for (int i = 0; i < 16; i++) {
        b[i] = malloc(24 + 40 * (size_t)i);
        CHECK(b[i] != NULL && !vm.owns(b[i]), "a small block is not glibc's");
        memset(b[i], i, 24 + 40 * (size_t)i);
    }
    return NULL;
}

/* The signal handler runs on an alternate stack that is a glibc block; the
 * blocks it frees were allocated right after it (above it in glibc's heap). */
static void *above[8];
static volatile int handler_ran;
static void free_above(int sig)
{
    (void)sig;
    for (int i = 0; i < 8; i++)
        free(above[i]);
    handler_ran = 1;
}

static unsigned char *pattern_block(size_t n, int c)
{
    unsigned char *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu)", n);
    memset(p, c, n);
    return p;
}

static int intact(const unsigned char *p, size_t n, int c)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)c)
            return 0;
    return 1;
}

static int glibc_blocks_case(void)
{
    /* The program's blocks: small (glibc) and large (vmapalloc). */
    unsigned char *small = pattern_block(100, 0x41), *large = pattern_block(3 * MiB, 0x42);
    CHECK(!vm.owns(small) && vm.owns(large), "small is glibc's, large vmapalloc's");

    /* glibc blocks go to glibc: freed, then their sizes again. */
    for (size_t a = 32; a <= 2048; a *= 2) {
        void *p = memalign(a, 200);
        CHECK(p != NULL && !vm.owns(p), "memalign(%zu, 200) is glibc's", a);
        free(p);
    }
    void *b[16];
    pthread_t t;
    CHECK(pthread_create(&t, NULL, glibc_blocks, b) == 0, "pthread_create");
    pthread_join(t, NULL);
    for (int i = 0; i < 16; i++)
        free(b[i]);

    /* The alternate-stack handler. */
    size_t alt = 64 << 10;
    void *altstack = malloc(alt);
    for (int i = 0; i < 8; i++)
        above[i] = malloc(4000); /* no freed chunk of that size: from the top */
    CHECK(altstack && !vm.owns(altstack) && (uintptr_t)above[7] > (uintptr_t)altstack,
          "the alternate stack is a glibc block below the others");
    stack_t ss = {.ss_sp = altstack, .ss_size = alt};
    struct sigaction sa = {.sa_handler = free_above, .sa_flags = SA_ONSTACK};
    CHECK(sigaltstack(&ss, NULL) == 0 && sigaction(SIGUSR1, &sa, NULL) == 0, "sigaltstack");
    raise(SIGUSR1);
    CHECK(handler_ran, "the handler ran");
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    free(altstack);

    CHECK(intact(small, 100, 0x41) && intact(large, 3 * MiB, 0x42), "the blocks are intact");
    free(small);
    free(large);
    for (int i = 0; i < 100; i++)
        free(pattern_block((size_t)i * 97 + 1, i));
    printf("bad_free glibc-blocks: ok\n");
    return 0;
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
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);          /* the aborts must not leave cores */
    if (strcmp(argv[1], "foreign") == 0) {
        /* Runs with and without the preload: the same fate.  A zero size
         * word before the address: glibc's "free(): invalid pointer". */
        _Alignas(16) size_t local[8] = {0};
        free(vmt_ptr(&local[2]));
        return survived(argv[1]);
    }
    vmt_init("bad_free");
    if (!vmt_vm) {              /* VMTEST_CONTRACT_ONLY makes no sense here */
        fprintf(stderr, "FAIL: bad_free: not running under vmapalloc\n");
        return 1;
    }
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
    if (strcmp(c, "glibc-blocks") == 0)
        return glibc_blocks_case();

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
