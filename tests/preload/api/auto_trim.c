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
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int main(void)
{
    vmt_init("auto_trim");
    CHECK(vm.owns, "vmapalloc is preloaded");
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
    for (int i = 0; i < 70000; i++)
        free(vmt_ptr(malloc(vmt_sz(48))));
    void *p = malloc(vmt_sz(48));
    CHECK(vm.owns(p), "the switch to the slabs came");
    free(p);

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
