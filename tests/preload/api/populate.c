/*
 * populate.c — VMAPALLOC_POPULATE=auto (the default) populates fresh large
 * blocks only while the program writes them whole, and never makes a program
 * that writes little of its blocks hold the rest.
 *
 *   populate auto     blocks written at one byte, then whole, then at one
 *                     byte again: resident memory and the populated count
 *   populate off      (VMAPALLOC_POPULATE=0) the same blocks: none populated
 *
 * Blocks of 1 MiB, kept live, so that each is carved fresh.
 */
#define _GNU_SOURCE
#include "vmtest.h"

#define MIB (1024L * 1024)
#define N 32

/* N fresh blocks of 1 MiB, written whole or at their first byte; returns
 * the blocks populated meanwhile. */
static uint64_t round_of(char **p, int whole, long *grew_kib)
{
    uint64_t before = CTR("populated");
    long rss = vmt_resident_kib();
    for (int i = 0; i < N; i++) {
        p[i] = malloc(vmt_sz(MIB));
        CHECK(p[i] != NULL, "malloc(1 MiB) failed");
        if (!p[i])
            continue;
        if (whole)
            memset(p[i], i + 1, MIB);
        else
            p[i][0] = (char)(i + 1);
    }
    *grew_kib = vmt_resident_kib() - rss;
    for (int i = 0; i < N; i++)
        if (p[i])
            CHECK(p[i][0] == (char)(i + 1) && (!whole || p[i][MIB - 1] == (char)(i + 1)),
                  "block %d lost what was written", i);
    return CTR("populated") - before;
}

int main(int argc, char **argv)
{
    vmt_init("populate");
    int off = argc > 1 && strcmp(argv[1], "off") == 0;
    static char *a[N], *b[N], *c[N];
    long grew;
    uint64_t n = round_of(a, 0, &grew);
    CHECK(n == 0, "%lu blocks written at one byte were populated", (unsigned long)n);
    CHECK(grew < 4 * 1024, "resident memory grew by %ld KiB for %d bytes written", grew, N);
    n = round_of(b, 1, &grew);
    if (off)
        CHECK(n == 0, "VMAPALLOC_POPULATE=0, yet %lu blocks populated", (unsigned long)n);
    else
        CHECK(n >= N - 8, "only %lu of %d blocks written whole were populated",
              (unsigned long)n, N);
    n = round_of(c, 0, &grew);
    CHECK(n <= 3, "%lu blocks populated after the program went back to one byte",
          (unsigned long)n);
    CHECK(grew < 4 * 1024 + 3 * 1024, "resident memory grew by %ld KiB for %d bytes written",
          grew, N);
    for (int i = 0; i < N; i++) {
        free(a[i]);
        free(b[i]);
        free(c[i]);
    }
    vmt_done("populate");
    return 0;
}
