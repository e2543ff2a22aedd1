/*
 * backends.c — the small backends side by side: run under every
 * VMAPALLOC_BACKEND (meson.build registers it once per backend).
 *
 *   api_backends            the contracts below, under the backend named by
 *                           VMAPALLOC_BACKEND (default auto)
 *   api_backends exit       blocks kept to the end, read, freed and allocated
 *                           again by a destructor (backend.sh runs it with
 *                           MIMALLOC_DESTROY_ON_EXIT=1)
 *
 * Under every backend: realloc across owners (a glibc block grown past
 * SMALL_MAX and back, a small block grown into a large one and back, contents
 * kept), malloc_usable_size of each kind, malloc_trim, mallinfo2, calloc and
 * aligned small blocks, threads that exit while their blocks live on, fork.
 * Under mimalloc besides: libmimalloc.so.2 is mapped, small blocks are its
 * (mi_is_in_heap_region), large ones are not, malloc and friends still bind
 * to libvmapalloc.so (also for names looked up now), a block glibc allocated
 * is freed by glibc (counted), the per-backend counters move, mimalloc's
 * segments come from a range that grows with its use, and once it cannot
 * grow glibc serves what mimalloc refuses.  Under the
 * others: libmimalloc is not mapped.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "vmtest.h"

static const char *backend;
static bool (*mi_owns)(const void *);
static void *(*glibc_malloc)(size_t);
static void (*glibc_free)(void *);

static bool mapped(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, needle))
            found = true;
    if (f)
        fclose(f);
    return found;
}

/* The object that defines the function at f. */
static const char *object_of(void *f)
{
    Dl_info info;
    return dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?";
}

static bool is_mi(const void *p)
{
    return mi_owns && mi_owns(p);
}

/* Whether a small block p is the backend's: mimalloc's, the slabs' (in the
 * arena), or glibc's (auto before its switch, libc). */
static bool backends_own(const void *p)
{
    if (!strcmp(backend, "mimalloc"))
        return is_mi(p) && !vm.owns(p);
    if (!strcmp(backend, "builtin"))
        return vm.owns(p) && !is_mi(p);
    if (!strcmp(backend, "auto")) /* glibc's, or the slabs' after the switch */
        return !is_mi(p);
    return !vm.owns(p) && !is_mi(p);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed);
}

static bool same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + seed))
            return false;
    return true;
}

static void check_binding(void)
{
    static const char *names[] = {"malloc", "free", "calloc", "realloc", "posix_memalign",
                                  "aligned_alloc", "malloc_usable_size", "mallinfo2",
                                  "malloc_trim", "__libc_malloc"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        CHECK(f && strstr(object_of(f), "libvmapalloc"), "%s binds to %s, not libvmapalloc",
              names[i], f ? object_of(f) : "nothing");
    }
    CHECK(strstr(object_of((void *)malloc), "libvmapalloc"), "the program's malloc is %s",
          object_of((void *)malloc));
}

/* A size served by the arena: above SMALL_MAX and, under auto while there is
 * no arena, above glibc's first mmap threshold (128 KiB). */
static size_t large_size(void)
{
    size_t small_max = vmt_small_max();
    return (small_max > 128 * 1024 ? small_max : 128 * 1024) + 64 * 1024;
}

static void check_owners(void)
{
    uint64_t mi_allocs = CTR("small_mimalloc_allocs"), mi_frees = CTR("small_mimalloc_frees");
    uint64_t g_frees = CTR("small_glibc_frees");
    void *p = malloc(vmt_sz(100));
    CHECK(p && backends_own(p), "the small block is the backend's (arena %d, mimalloc %d)",
          vm.owns(p), is_mi(p));
    void *big = malloc(vmt_sz(large_size()));
    CHECK(big && vm.owns(big) && !is_mi(big), "a large block is the arena's");
    free(big);
    free(p);
    if (!strcmp(backend, "mimalloc")) {
        CHECK(CTR("small_mimalloc_allocs") > mi_allocs, "mimalloc's allocations are counted");
        CHECK(CTR("small_mimalloc_frees") > mi_frees, "mimalloc's frees are counted");
    }
    /* Blocks of glibc's own (as if allocated before mimalloc was loaded):
     * freed by glibc, whatever the backend (counted in batches of 128). */
    static void *g[300];
    for (int i = 0; i < 300; i++) {
        g[i] = glibc_malloc(vmt_sz(200));
        CHECK(g[i] && !is_mi(g[i]) && !vm.owns(g[i]), "glibc's block is glibc's");
        CHECK(malloc_usable_size(g[i]) >= 200, "usable size of glibc's block");
    }
    for (int i = 0; i < 300; i++)
        free(g[i]);
    CHECK(CTR("small_glibc_frees") >= g_frees + 300 - 128, "glibc's blocks went to glibc's free");
}

/* realloc across owners; sizes around SMALL_MAX. */
static void check_realloc(void)
{
    size_t large = large_size();
    /* glibc's block grown past SMALL_MAX: into the arena, contents kept. */
    unsigned char *g = glibc_malloc(vmt_sz(1000));
    fill(g, 1000, 1);
    unsigned char *q = realloc(g, vmt_sz(large));
    CHECK(q && vm.owns(q) && same(q, 1000, 1), "glibc block grown into a large one");
    q = realloc(q, vmt_sz(500));
    CHECK(q && backends_own(q) && same(q, 500, 1), "and back into a small one, the backend's");
    free(q);
    /* The backend's own small block, to large and back. */
    unsigned char *p = malloc(vmt_sz(3000));
    fill(p, 3000, 2);
    CHECK(malloc_usable_size(p) >= 3000, "usable size of a small block");
    p = realloc(p, vmt_sz(5000));
    CHECK(p && same(p, 3000, 2) && malloc_usable_size(p) >= 5000, "small block grown");
    fill(p, 5000, 3);
    p = realloc(p, vmt_sz(large + 4096 * 10));
    CHECK(p && vm.owns(p) && !is_mi(p) && same(p, 5000, 3), "grown into a large block");
    CHECK(malloc_usable_size(p) >= large + 4096 * 10, "usable size of the large block");
    p = realloc(p, vmt_sz(64));
    CHECK(p && backends_own(p) && same(p, 64, 3), "shrunk back into a small block, the backend's");
    free(p);
}

static void check_family(void)
{
    unsigned char *c = calloc(vmt_sz(100), 10);
    bool zero = c != NULL;
    for (int i = 0; c && i < 1000; i++)
        zero &= c[i] == 0;
    CHECK(zero, "calloc zeroes");
    CHECK(backends_own(c), "calloc's block is the backend's");
    free(c);
    void *a = NULL;
    CHECK(posix_memalign(&a, 256, vmt_sz(1000)) == 0 && ((uintptr_t)a & 255) == 0,
          "posix_memalign(256)");
    CHECK(backends_own(a), "the aligned block is the backend's");
    CHECK(malloc_usable_size(a) >= 1000, "usable size of an aligned block");
    free(a);
    CHECK(malloc_usable_size(NULL) == 0, "usable size of NULL");

    /* mallinfo2: 64 MB of small blocks show in uordblks (glibc's heap or
     * mimalloc's committed memory, which it takes 32 MiB at a time; not yet
     * the slabs'). */
    enum { N = 16000 };
    static void *blocks[N];
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < N; i++)
        blocks[i] = malloc(vmt_sz(4000));
    struct mallinfo2 after = mallinfo2();
    if (strcmp(backend, "builtin") != 0)
        CHECK(after.uordblks >= before.uordblks + (size_t)N * 4000 / 2,
              "mallinfo2 uordblks grew by %zu after %d blocks of 4000 bytes",
              after.uordblks - before.uordblks, N);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    int t = malloc_trim(0);
    CHECK(t == 0 || t == 1, "malloc_trim returns 0 or 1");
    void *p = malloc(vmt_sz(100));
    CHECK(p != NULL, "malloc after malloc_trim");
    free(p);
}

/* Threads allocate and exit; their blocks are freed afterwards by others. */
enum { THREADS = 4, PER = 2000 };
static void *kept[THREADS][PER];

static void *worker(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < PER; i++) {
        kept[t][i] = malloc(vmt_sz(16 + (size_t)(i % 500) * 8));
        fill(kept[t][i], 16, (unsigned)(t + i));
        if (i % 3 == 0) {
            free(kept[t][i]);
            kept[t][i] = NULL;
        }
    }
    return NULL;
}

static void check_threads(void)
{
    for (int round = 0; round < 2; round++) {
        pthread_t th[THREADS];
        uint64_t mallocs = CTR("malloc_calls"), frees = CTR("free_calls");
        for (long t = 0; t < THREADS; t++)
            CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create");
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
        /* Every call of the exited threads is counted, the last ones (fewer
         * than a fold's batch) at their exit. */
        uint64_t m = CTR("malloc_calls") - mallocs, f = CTR("free_calls") - frees;
        CHECK(m >= (uint64_t)THREADS * PER && m < (uint64_t)THREADS * PER + 64,
              "the exited threads' %d mallocs counted: %llu", THREADS * PER,
              (unsigned long long)m);
        CHECK(f >= (uint64_t)THREADS * ((PER + 2) / 3) && f < (uint64_t)THREADS * ((PER + 2) / 3) + 64,
              "the exited threads' %d frees counted: %llu", THREADS * ((PER + 2) / 3),
              (unsigned long long)f);
        for (int t = 0; t < THREADS; t++)
            for (int i = 0; i < PER; i++) {
                if (!kept[t][i])
                    continue;
                CHECK(same(kept[t][i], 16, (unsigned)(t + i)), "an exited thread's block kept");
                free(kept[t][i]);
            }
    }
}

static void check_fork(void)
{
    unsigned char *p = malloc(vmt_sz(700)), *g = glibc_malloc(vmt_sz(300));
    fill(p, 700, 5);
    fill(g, 300, 6);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        CHECK(same(p, 700, 5) && same(g, 300, 6), "the child sees the parent's blocks");
        p = realloc(p, vmt_sz(900));
        CHECK(p && same(p, 700, 5), "realloc in the child");
        free(p);
        free(g);
        for (int i = 0; i < 10000; i++)
            free(malloc(vmt_sz((size_t)i % 4000 + 1)));
        _exit(vmt_failures ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child exited 0 (status %#x)", st);
    CHECK(same(p, 700, 5), "the parent's block is unchanged");
    free(p);
    free(g);
}

/* At exit, after the program's atexit handlers, in a destructor: blocks
 * still in use are read and freed, new ones made (mimalloc's own atexit
 * handler, registered when vmapalloc's constructor loaded it, runs later). */
static unsigned char *late[64];

__attribute__((destructor)) static void late_frees(void)
{
    if (!late[0])
        return;
    for (int i = 0; i < 64; i++) {
        if (!same(late[i], 4000, (unsigned)i)) {
            fprintf(stderr, "FAIL: block %d changed after mimalloc's exit handler\n", i);
            _exit(1);
        }
        free(late[i]);
    }
    for (int i = 0; i < 1000; i++) {
        unsigned char *p = malloc(vmt_sz(100));
        fill(p, 100, 9);
        free(p);
    }
    printf("late frees: ok\n");
    fflush(stdout);
}

static void at_exit_alloc(void)
{
    for (int i = 0; i < 64; i++)
        free(malloc(vmt_sz(2000)));
}

/* Under mimalloc: its segments come from a range vmapalloc reserved, which
 * grows as mimalloc fills it (about 120 MiB of small blocks here); every
 * block stays mimalloc's, whole, and is freed by mimalloc. */
static void check_mi_range(void)
{
    enum { N = 160000 };
    static unsigned char *b[N];
    uint64_t range0 = CTR("mimalloc_range_bytes"), frees0 = CTR("small_mimalloc_frees");
    CHECK(range0 >= 32u << 20, "a range for mimalloc's segments: %lu bytes",
          (unsigned long)range0);
    bool all_mi = true, all_same = true;
    for (unsigned i = 0; i < N; i++) {
        size_t n = 512 + i % 512;
        b[i] = malloc(vmt_sz(n));
        CHECK(b[i] != NULL, "malloc(%zu)", n);
        fill(b[i], n < 64 ? n : 64, i);
        all_mi &= is_mi(b[i]);
    }
    uint64_t range = CTR("mimalloc_range_bytes");
    CHECK(range >= 128u << 20, "the range grew with mimalloc's use: %lu bytes",
          (unsigned long)range);
    for (unsigned i = 0; i < N; i++) {
        size_t n = 512 + i % 512;
        all_same &= same(b[i], n < 64 ? n : 64, i);
        free(b[i]);
    }
    CHECK(all_mi, "every block is mimalloc's");
    CHECK(all_same, "every block kept its contents");
    CHECK(CTR("small_mimalloc_frees") - frees0 >= N, "mimalloc freed them: %lu",
          (unsigned long)(CTR("small_mimalloc_frees") - frees0));
}

/* Reserves what is free of [at, at + len) (len a power of two, at aligned
 * to it), PROT_NONE, in aligned halves down to 32 MiB; the pieces go to
 * out[n...], the new count is returned. */
static unsigned block_out(uintptr_t at, size_t len, uintptr_t (*out)[2], unsigned n, unsigned max)
{
    if (n >= max)
        return n;
    void *p = mmap((void *)at, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == (void *)at) {
        out[n][0] = at;
        out[n][1] = len;
        return n + 1;
    }
    if (p != MAP_FAILED)
        munmap(p, len); /* an old kernel took it as a hint */
    if (len <= (32u << 20))
        return n;
    n = block_out(at, len / 2, out, n, max);
    return block_out(at + len / 2, len / 2, out, n, max);
}

/* The first mapping of /proc/self/maps that starts in [lo, hi): its
 * bounds, or 0 and 0. */
static void mapping_in(uintptr_t lo, uintptr_t hi, uintptr_t *start, uintptr_t *end)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    *start = *end = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a >= lo && a < hi) {
            *start = a;
            *end = b;
            break;
        }
    }
    if (f)
        fclose(f);
}

/* Under mimalloc, with its range full and unable to grow (the address space
 * after it taken, and with it every place mimalloc's own mmap hints would
 * try): mimalloc maps no segment of its own, which its segment map might not
 * know (it covers only addresses under 20 TiB); it refuses, and glibc
 * serves.  Every block, whoever's, has its usable size, keeps its contents
 * and is freed by its owner. */
static void check_mi_stuck(void)
{
    enum { PIECES = 256 };
    static uintptr_t taken[PIECES][2];
    uintptr_t lo, hi;
    mapping_in((uintptr_t)16 << 40, (uintptr_t)20 << 40, &lo, &hi);
    CHECK(hi > lo, "the range for mimalloc's segments is mapped under 20 TiB");
    uint64_t range = CTR("mimalloc_range_bytes");
    hi = lo + range;
    unsigned pieces = 0;
    for (uintptr_t t = 2; t < 32; t++)
        pieces = block_out(t << 40, (size_t)1 << 40, taken, pieces, PIECES);
    size_t n = vmt_small_max() / 2;
    n = n > 32768 ? 32768 : n;
    size_t count = (size_t)(range + (64u << 20)) / n;
    unsigned char **b = mmap(NULL, count * sizeof *b, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(b != MAP_FAILED, "room for %zu pointers", count);
    if (b == MAP_FAILED)
        return;
    uint64_t glibc0 = CTR("small_glibc_allocs");
    size_t mi_outside = 0, short_usable = 0, glibc_blocks = 0, same_all = 1;
    for (size_t i = 0; i < count; i++) {
        b[i] = malloc(vmt_sz(n));
        CHECK(b[i] != NULL, "malloc(%zu) number %zu", n, i);
        if (!b[i])
            break;
        uintptr_t a = (uintptr_t)b[i];
        if (is_mi(b[i]))
            mi_outside += a < lo || a >= hi;
        else if (!vm.owns(b[i]))
            glibc_blocks++;
        short_usable += malloc_usable_size(b[i]) < n;
        fill(b[i], 64, (unsigned)i);
    }
    CHECK(pieces > 0, "the address space from 2 TiB to 32 TiB blocked in %u pieces", pieces);
    CHECK(CTR("mimalloc_range_bytes") == range, "the range could not grow: %lu -> %lu bytes",
          (unsigned long)range, (unsigned long)CTR("mimalloc_range_bytes"));
    CHECK(glibc_blocks > 0 && CTR("small_glibc_allocs") > glibc0,
          "glibc served what the full range refused: %zu blocks", glibc_blocks);
    CHECK(mi_outside == 0, "mimalloc's blocks all in its range: %zu outside", mi_outside);
    CHECK(short_usable == 0, "every block's usable size covers it: %zu short", short_usable);
    for (size_t i = 0; i < count && b[i]; i++) {
        same_all &= same(b[i], 64, (unsigned)i);
        free(b[i]);
    }
    CHECK(same_all, "every block kept its contents");
    munmap(b, count * sizeof *b);
    for (unsigned i = 0; i < pieces; i++)
        munmap((void *)taken[i][0], taken[i][1]);
}

int main(int argc, char **argv)
{
    vmt_init("api_backends");
    /* The backend expected in use: VMAPALLOC_BACKEND's, unless VMTEST_BACKEND
     * says otherwise (backend.sh: the default, after a refused mimalloc). */
    backend = getenv("VMTEST_BACKEND");
    if (!backend || !*backend)
        backend = getenv("VMAPALLOC_BACKEND");
    if (!backend || !*backend)
        backend = "auto";
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    glibc_malloc = (void *(*)(size_t))dlsym(libc, "__libc_malloc");
    glibc_free = (void (*)(void *))dlsym(libc, "__libc_free");
    CHECK(glibc_malloc && glibc_free && !strstr(object_of((void *)glibc_malloc), "vmapalloc"),
          "glibc's own __libc_malloc");
    bool mi = !strcmp(backend, "mimalloc");
    CHECK(mapped("/libmimalloc.so") == mi, "libmimalloc mapped: %d under %s",
          mapped("/libmimalloc.so"), backend);
    void *mh = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_NOLOAD);
    CHECK((mh != NULL) == mi, "libmimalloc loaded: %d", mh != NULL);
    if (mh)
        mi_owns = (bool (*)(const void *))dlsym(mh, "mi_is_in_heap_region");
    CHECK(!mi || mi_owns, "mi_is_in_heap_region found");

    if (argc > 1 && !strcmp(argv[1], "exit")) {
        for (int i = 0; i < 64; i++) {
            late[i] = malloc(vmt_sz(4000));
            fill(late[i], 4000, (unsigned)i);
            CHECK(is_mi(late[i]) == mi, "the late block is the backend's");
        }
        atexit(at_exit_alloc);
        printf("api_backends exit (%s): ok\n", backend);
        return 0;
    }
    check_binding();
    check_owners();
    check_realloc();
    check_family();
    check_threads();
    check_fork();
    if (mi) {
        check_mi_range();
        check_mi_stuck();
    }
    CHECK(mapped("/libmimalloc.so") == mi, "libmimalloc still mapped only under mimalloc");
    printf("api_backends (%s): %lu checks ok\n", backend, (unsigned long)vmt_checks);
    return vmt_failures ? 1 : 0;
}
