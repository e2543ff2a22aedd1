/*
 * auto_trim.c — under VMAPALLOC_BACKEND=auto, once the process has switched
 * from glibc to the slabs, glibc's heap is trimmed as the program frees the
 * blocks glibc made before the switch: their pages leave the resident set.
 *
 * 24 MiB of 1 KiB blocks are made before the switch (glibc's), then the
 * switch (malloc/free pairs up to AUTO_AFTER), then every glibc block is
 * freed but the last one made (so that glibc's own trim of its heap's top
 * cannot give the others back); a pause and a second, small batch of glibc
 * frees later, VmRSS must have dropped by at least 16 MiB and the report's
 * small_glibc_trims moved.  Without the trim it drops by a few pages.
 *
 * Then the trim goes by bytes, not by the count of frees: 96 blocks of
 * 100 KiB, also glibc's (made first, before the switch), are freed a pause
 * after that trim -- fewer frees than any count worth a trim, but 9.4 MiB --
 * and a few calls later VmRSS must have dropped by at least 7 MiB more.
 *
 * `api_auto_trim small`: a small heap is trimmed too.  160 blocks of 1 KiB
 * before the switch, 120 of them freed after it (less than a large heap's
 * step of 256 KiB, more than an eighth of this heap): the trims must move
 * and, of the pages the freed blocks span, at least 16 leave the resident
 * set (mincore: VmRSS moves with the slabs' own pages as much).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vmtest.h"

enum { BLOCK = 1024, MANY = 24 * 1024, SECOND = 4096, BIG = 100 * 1024, NBIG = 96 };

static void *first[MANY], *second[SECOND], *big[NBIG];

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

/* Small pairs past AUTO_AFTER: the slabs serve from then on. */
static void switch_to_slabs(void)
{
    for (int i = 0; i < 70000; i++)
        free(vmt_ptr(malloc(vmt_sz(48))));
    void *p = malloc(vmt_sz(48));
    CHECK(vm.owns(p), "the switch to the slabs came");
    free(p);
}

enum { SMALL = 160, SMALL_FREED = 120 };

/* Resident pages wholly between a and b. */
static long resident_pages(const void *a, const void *b)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = (uintptr_t)b & ~(pg - 1);
    static unsigned char vec[1024];
    if (hi <= lo || (hi - lo) / pg > sizeof vec)
        return -1;
    CHECK(mincore((void *)lo, hi - lo, vec) == 0, "mincore");
    long n = 0;
    for (uintptr_t i = 0; i < (hi - lo) / pg; i++)
        n += vec[i] & 1;
    return n;
}

static int small_heap(void)
{
    static void *b[SMALL];
    for (int i = 0; i < SMALL; i++) {
        b[i] = malloc(vmt_sz(BLOCK));
        CHECK(b[i] && !vm.owns(b[i]), "block %d is glibc's (before the switch)", i);
        memset(b[i], 0x5a, BLOCK);
    }
    switch_to_slabs();
    /* glibc made them one after the other: the pages between the first
     * and the last freed one hold nothing else */
    for (int i = 1; i < SMALL_FREED; i++)
        CHECK((char *)b[i] > (char *)b[i - 1], "glibc's blocks %d and %d in order", i - 1, i);
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL); /* the trims are 100 ms apart */
    uint64_t trims = CTR("small_glibc_trims");
    long before = resident_pages(b[0], b[SMALL_FREED - 1]);
    for (int i = 0; i < SMALL_FREED; i++)
        free(b[i]);
    for (int r = 0; r < 2; r++) { /* one trim may come amid the frees */
        nanosleep(&pause, NULL);
        for (int i = 0; i < 1024; i++) /* folds: where the trim is decided */
            free(vmt_ptr(malloc(vmt_sz(48))));
    }
    long after = resident_pages(b[0], b[SMALL_FREED - 1]);
    CHECK(CTR("small_glibc_trims") > trims, "%d frees of 1 KiB trimmed a small heap",
          SMALL_FREED);
    CHECK(before - after >= 16, "%ld of the %ld resident pages under the freed blocks left",
          before - after, before);
    for (int i = SMALL_FREED; i < SMALL; i++)
        free(b[i]);
    vmt_done("auto_trim");
    return 0;
}

int main(int argc, char **argv)
{
    vmt_init("auto_trim");
    CHECK(vm.owns, "vmapalloc is preloaded");
    if (argc > 1 && !strcmp(argv[1], "small"))
        return small_heap();
    for (int i = 0; i < NBIG; i++) {
        big[i] = malloc(vmt_sz(BIG));
        CHECK(big[i] && !vm.owns(big[i]), "block %d of %d bytes is glibc's (before the switch)",
              i, BIG);
        memset(big[i], 0x69, BIG);
    }
    for (int i = 0; i < MANY; i++) {
        first[i] = malloc(vmt_sz(BLOCK));
        CHECK(first[i] && !vm.owns(first[i]), "block %d is glibc's (before the switch)", i);
        memset(first[i], 0x5a, BLOCK);
    }
    for (int i = 0; i < SECOND; i++) {
        second[i] = malloc(vmt_sz(BLOCK));
        memset(second[i], 0x3c, BLOCK);
    }
    switch_to_slabs();

    uint64_t trims = CTR("small_glibc_trims");
    long before = rss_kib();
    for (int i = 0; i < MANY; i++)
        free(first[i]);
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    for (int i = 0; i < SECOND - 1; i++)
        free(second[i]); /* the last one made stays: glibc's top stays */
    long after = rss_kib();
    CHECK(CTR("small_glibc_trims") > trims, "glibc's heap was trimmed (%llu trims)",
          (unsigned long long)(CTR("small_glibc_trims") - trims));
    CHECK(before - after >= 16 * 1024, "VmRSS fell by %ld KiB of the %d KiB freed (%ld -> %ld)",
          before - after, MANY * BLOCK / 1024, before, after);

    nanosleep(&pause, NULL); /* the trims are 100 ms apart */
    trims = CTR("small_glibc_trims");
    before = rss_kib();
    for (int i = 0; i < NBIG; i++)
        free(big[i]);
    for (int i = 0; i < 1024; i++) /* folds: where the trim is decided */
        free(vmt_ptr(malloc(vmt_sz(48))));
    after = rss_kib();
    CHECK(CTR("small_glibc_trims") > trims, "%d frees of %d KiB trimmed glibc's heap", NBIG,
          BIG / 1024);
    CHECK(before - after >= 7 * 1024, "VmRSS fell by %ld KiB of the %d KiB freed (%ld -> %ld)",
          before - after, NBIG * BIG / 1024, before, after);
    free(second[SECOND - 1]);
    vmt_done("auto_trim");
    return 0;
}
