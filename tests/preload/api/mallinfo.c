/*
 * mallinfo.c — mallinfo/mallinfo2 count every small block, whichever backend
 * holds it, and malloc_info says the same.
 *
 *  1. After a calloc, uordblks is not 0 (glibc's tst-malloc-tcache-leak
 *     asserts it); mallinfo's int fields are mallinfo2's, truncated.
 *  2. 100000 blocks of 200 bytes (past BACKEND=auto's switch to the slabs):
 *     uordblks grows by at least their bytes, arena by at least as much;
 *     freed, uordblks comes back to within 256 KiB of where it was and
 *     fordblks holds free space.
 *  3. 20000 threads each malloc(1) a block the main thread frees: uordblks
 *     grows by less than one byte a thread (glibc's criterion for a leak).
 *  4. A 1 MiB block counts in hblkhd (and, vmapalloc's, in uordblks).
 *  5. malloc_info's XML agrees with mallinfo2: uordblks + hblkhd equal
 *     small_bytes_in_use + slab_bytes_in_use + 2 * large_bytes_in_use +
 *     cached_bytes (large blocks are in both, cached areas in hblkhd).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <malloc.h>
#include <pthread.h>

#define N 100000
#define THREADS 20000

static void *one_byte(void *arg)
{
    (void)arg;
    return malloc(vmt_sz(1));
}

/* The value of <stat|system name="NAME" value="V"/> in xml; fails if absent. */
static uint64_t xml_value(const char *xml, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "name=\"%s\" value=\"", name);
    const char *p = strstr(xml, key);
    CHECK(p != NULL, "malloc_info does not say %s", name);
    return strtoull(p + strlen(key), NULL, 10);
}

int main(void)
{
    vmt_init("mallinfo");
    void *keep = calloc(1, 16);
    struct mallinfo2 a = mallinfo2();
    struct mallinfo ai = mallinfo();
    CHECK(a.uordblks != 0, "uordblks is 0 with a block allocated");
    CHECK((int)a.uordblks == ai.uordblks && (int)a.arena == ai.arena &&
          (int)a.fordblks == ai.fordblks && (int)a.hblkhd == ai.hblkhd,
          "mallinfo and mallinfo2 disagree");

    static void *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(vmt_sz(200));
        CHECK(blocks[i] != NULL, "malloc(200)");
    }
    struct mallinfo2 b = mallinfo2();
    CHECK(b.uordblks >= a.uordblks + (size_t)N * 200, "uordblks grew by %zu for %d blocks of "
          "200 bytes", b.uordblks - a.uordblks, N);
    CHECK(b.arena >= a.arena + (size_t)N * 200, "arena grew by %zu for %d blocks of 200 bytes",
          b.arena - a.arena, N);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    struct mallinfo2 c = mallinfo2();
    CHECK(c.uordblks < a.uordblks + (256 << 10), "uordblks %zu after the frees, %zu before",
          c.uordblks, a.uordblks);
    CHECK(c.fordblks > 0, "no free space after %d frees", N);

    for (int i = 0; i < THREADS; i++) {
        pthread_t t;
        void *r;
        CHECK(pthread_create(&t, NULL, one_byte, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, &r) == 0 && r, "pthread_join");
        free(r);
    }
    struct mallinfo2 d = mallinfo2();
    CHECK(d.uordblks < c.uordblks + THREADS, "uordblks grew by %zd over %d threads that leak "
          "nothing", (ssize_t)(d.uordblks - c.uordblks), THREADS);

    void *big = malloc(vmt_sz(1 << 20));
    CHECK(big != NULL, "malloc(1 MiB)");
    struct mallinfo2 e = mallinfo2();
    /* (Under vmapalloc hblkhd holds the cache too: a block taken from it
     * moves bytes from fordblks to uordblks, not into hblkhd.) */
    CHECK(e.hblkhd >= (1 << 20) && (vmt_vm || e.hblkhd >= d.hblkhd + (1 << 20)),
          "a 1 MiB block: hblkhd %zu (+%zd)", e.hblkhd, (ssize_t)(e.hblkhd - d.hblkhd));
    if (vmt_vm) /* glibc leaves its mmapped chunks out of uordblks */
        CHECK(e.uordblks >= d.uordblks + (1 << 20), "a 1 MiB block: uordblks +%zd",
              (ssize_t)(e.uordblks - d.uordblks));

    if (vmt_vm) {
        static char xml[1 << 16];
        FILE *f = fmemopen(xml, sizeof xml - 1, "w");
        CHECK(f != NULL, "fmemopen");
        setvbuf(f, NULL, _IONBF, 0); /* no buffer to allocate between the figures */
        struct mallinfo2 m = mallinfo2();
        CHECK(malloc_info(0, f) == 0, "malloc_info");
        struct mallinfo2 m2 = mallinfo2();
        fclose(f);
        CHECK(m.uordblks == m2.uordblks && m.hblkhd == m2.hblkhd,
              "the figures moved while nothing was allocated");
        uint64_t sum = xml_value(xml, "small_bytes_in_use") + xml_value(xml, "slab_bytes_in_use") +
                       2 * xml_value(xml, "large_bytes_in_use") + xml_value(xml, "cached_bytes");
        CHECK(m.uordblks + m.hblkhd == sum, "mallinfo2 uordblks + hblkhd = %zu, malloc_info "
              "says %llu", m.uordblks + m.hblkhd, (unsigned long long)sum);
    }
    free(big);
    free(keep);
    printf("mallinfo: uordblks %zu, %zu with %d blocks, %zu freed, %zu after %d threads\n",
           a.uordblks, b.uordblks, N, c.uordblks, d.uordblks, THREADS);
    return 0;
}
