/*
 * libc_internal.c — allocations made inside glibc reach vmapalloc.
 *
 * strdup/strndup/asprintf/getline/getdelim/open_memstream/qsort/fopen all
 * call malloc/realloc/free through the PLT, so under the preload large
 * buffers they make must be vmapalloc's (vmapalloc_owns) and the counters
 * must move.  Also: every malloc-family symbol resolves to libvmapalloc.so,
 * and large allocations never move the program break.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <gnu/libc-version.h>
#include <malloc.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t small_max;   /* VMAPALLOC_SMALL_MAX */
static size_t U;           /* a comfortably large size: 100 KiB by default */

static const char *const interposed[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "malloc_usable_size", "malloc_trim", "mallopt",
    "mallinfo2", "malloc_stats", "malloc_info", "free_sized", "free_aligned_sized", "cfree",
    "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign",
    "__libc_valloc", "__libc_pvalloc", "__posix_memalign",
};

static void test_resolution(void)
{
    if (!vmt_vm)
        return;
    for (size_t i = 0; i < sizeof interposed / sizeof *interposed; i++) {
        void *f = dlsym(RTLD_DEFAULT, interposed[i]);
        CHECK(f != NULL, "dlsym(RTLD_DEFAULT, \"%s\") found nothing", interposed[i]);
        Dl_info di;
        CHECK(dladdr(f, &di) != 0 && di.dli_fname && strstr(di.dli_fname, "libvmapalloc"),
              "%s resolves to %s, not libvmapalloc", interposed[i], di.dli_fname);
    }
    /* the program's own references agree with the dynamic lookup */
    CHECK((void *)malloc == dlsym(RTLD_DEFAULT, "malloc"), "&malloc differs from dlsym(malloc)");
    CHECK((void *)free == dlsym(RTLD_DEFAULT, "free"), "&free differs from dlsym(free)");
    CHECK((void *)realloc == dlsym(RTLD_DEFAULT, "realloc"), "&realloc differs");
    CHECK((void *)calloc == dlsym(RTLD_DEFAULT, "calloc"), "&calloc differs");
}

/* Counter movement across one libc call. */
struct snap { uint64_t malloc_calls, free_calls, realloc_calls, large_allocs, large_frees; };

static struct snap snap(void)
{
    struct snap s = {0};
    if (vmt_vm) {
        s.malloc_calls = CTR("malloc_calls");
        s.free_calls = CTR("free_calls");
        s.realloc_calls = CTR("realloc_calls");
        s.large_allocs = CTR("large_allocs");
        s.large_frees = CTR("large_frees");
    }
    return s;
}

static char *big_string(size_t n, char base)
{
    char *s = malloc(n + 1);
    CHECK(s != NULL, "malloc");
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(base + (char)(i % 23));
    s[n] = 0;
    return s;
}

static void check_large_free(void *p, const char *what)
{
    struct snap a = snap();
    free(p);
    struct snap b = snap();
    if (vmt_vm)
        CHECK(b.large_frees == a.large_frees + 1, "free of %s did not free a large block", what);
}

static void test_strdup(void)
{
    char *src = big_string(U, 'a');
    struct snap a = snap();
    char *d = strdup(src);
    struct snap b = snap();
    CHECK(d != NULL && strcmp(d, src) == 0, "strdup content");
    if (vmt_vm) {
        CHECK(b.malloc_calls >= a.malloc_calls + 1, "strdup did not call vmapalloc's malloc");
        CHECK(b.large_allocs >= a.large_allocs + 1, "strdup(%zu) not a large allocation", U);
        CHECK(vm.owns(d), "strdup(%zu) buffer not owned by vmapalloc", U);
    }
    check_large_free(d, "strdup buffer");

    a = snap();
    d = strndup(src, U - 10000);
    b = snap();
    CHECK(d != NULL && strlen(d) == U - 10000 && memcmp(d, src, U - 10000) == 0, "strndup content");
    if (vmt_vm) {
        CHECK(b.malloc_calls >= a.malloc_calls + 1, "strndup did not call malloc");
        CHECK(vm.owns(d), "strndup(%zu) buffer not owned", U - 10000);
    }
    check_large_free(d, "strndup buffer");

    char *s = NULL;
    int n = asprintf(&s, "<%s|%s>", src, src + U / 2);
    CHECK(n == (int)(U + U / 2 + 3) && s != NULL, "asprintf returned %d", n);
    CHECK(memcmp(s + 1, src, U) == 0 && s[n - 1] == '>', "asprintf content");
    CHECK_OWNS(s, 1, "asprintf(%zu) buffer not owned", U + U / 2 + 3);
    check_large_free(s, "asprintf buffer");

    /* small strdup stays with glibc */
    d = strdup("hello");
    CHECK(d && strcmp(d, "hello") == 0, "small strdup");
    CHECK_OWNS(d, vmt_owned(6, 16), "small strdup: wrong owner");
    free(d);
    free(src);
}

static FILE *file_with_lines(const size_t *lens, int n, char *path)
{
    strcpy(path, "/tmp/vmapalloc-api-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    unlink(path);
    FILE *f = fdopen(fd, "w+");
    CHECK(f != NULL, "fdopen");
    for (int l = 0; l < n; l++) {
        for (size_t i = 0; i < lens[l]; i++)
            fputc('A' + (int)((i + (size_t)l) % 26), f);
        fputc('\n', f);
    }
    CHECK(fflush(f) == 0, "fflush");
    rewind(f);
    return f;
}

static void test_getline(void)
{
    char path[64];
    const size_t lens[] = {2 * U, 10, 3 * U};
    FILE *f = file_with_lines(lens, 3, path);

    char *buf = NULL;
    size_t cap = 0;
    struct snap a = snap();
    ssize_t r = getline(&buf, &cap, f);
    struct snap b = snap();
    CHECK(r == (ssize_t)(2 * U + 1), "getline returned %zd", r);
    CHECK(buf && cap >= 2 * U + 2, "getline buffer");
    CHECK(buf[0] == 'A' && buf[2 * U - 1] == 'A' + (int)((2 * U - 1) % 26) &&
          buf[2 * U] == '\n', "getline content");
    if (vmt_vm) {
        CHECK(b.malloc_calls + b.realloc_calls > a.malloc_calls + a.realloc_calls,
              "getline did not allocate through vmapalloc");
        CHECK(vm.owns(buf), "getline's %zu-byte buffer not owned by vmapalloc", 2 * U);
    }
    r = getline(&buf, &cap, f);
    CHECK(r == 11, "second getline returned %zd", r);
    check_large_free(buf, "getline buffer");

    /* getdelim growing a buffer the program allocated (libc reallocs it) */
    buf = malloc(vmt_large_above() + 1);
    CHECK(buf != NULL, "malloc");
    cap = vmt_large_above() + 1;
    CHECK_OWNS(buf, 1, "malloc(%zu) not owned", cap);
    r = getdelim(&buf, &cap, '\n', f);
    CHECK(r == (ssize_t)(3 * U + 1), "getdelim returned %zd", r);
    CHECK(buf[1] == 'A' + (1 + 2) % 26 && buf[3 * U] == '\n', "getdelim content");
    CHECK_OWNS(buf, 1, "getdelim's grown buffer not owned");
    check_large_free(buf, "getdelim buffer");
    fclose(f);
}

static void test_memstream(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL, "open_memstream");
    char chunk[1000];
    const size_t nchunks = 3 * U / 1000;        /* 300 KB by default */
    const size_t total = nchunks * 1000;
    for (size_t i = 0; i < nchunks; i++) {
        memset(chunk, 'a' + (int)(i % 26), sizeof chunk);
        CHECK(fwrite(chunk, 1, sizeof chunk, f) == sizeof chunk, "fwrite to memstream");
    }
    CHECK(fflush(f) == 0, "fflush memstream");
    CHECK(len == total, "memstream length %zu", len);
    CHECK_OWNS(buf, 1, "open_memstream buffer (%zu bytes) not owned by vmapalloc (after fflush)",
               total);
    CHECK(fclose(f) == 0, "fclose memstream");
    CHECK(len == total && buf[0] == 'a' && buf[total - 1] == 'a' + (int)((nchunks - 1) % 26) &&
          buf[total] == 0, "memstream content");
    CHECK_OWNS(buf, 1, "open_memstream buffer not owned by vmapalloc (after fclose)");
    check_large_free(buf, "open_memstream buffer");
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void test_qsort(void)
{
    const size_t n = 200000 > small_max / 2 ? 200000 : small_max / 2;
    int *v = malloc(n * sizeof *v);
    CHECK(v != NULL, "malloc");
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        v[i] = (int)(x >> 1);
    }
    struct snap a = snap();
    qsort(v, n, sizeof *v, cmp_int);
    struct snap b = snap();
    for (size_t i = 1; i < n; i++)
        if (v[i - 1] > v[i]) {
            CHECK(0, "qsort result not sorted at %zu", i);
            break;
        }
    if (vmt_vm) {
        unsigned maj = 0, min = 0;
        sscanf(gnu_get_libc_version(), "%u.%u", &maj, &min);
        if (maj == 2 && min <= 36) {
            /* glibc <= 2.36: msort mallocs a temporary buffer of n*size */
            CHECK(b.malloc_calls >= a.malloc_calls + 1, "qsort did not call malloc");
            CHECK(b.large_allocs >= a.large_allocs + 1, "qsort's 800 KB buffer not large");
            CHECK(b.large_frees >= a.large_frees + 1, "qsort's buffer not freed");
        } else if (b.malloc_calls == a.malloc_calls) {
            printf("libc_internal: note: glibc %s qsort did not malloc\n", gnu_get_libc_version());
        }
    }
    free(v);
}

static void test_stdio(void)
{
    struct snap a = snap();
    FILE *f = fopen("/dev/null", "r");
    struct snap b = snap();
    CHECK(f != NULL, "fopen /dev/null");
    if (vmt_vm)
        CHECK(b.malloc_calls >= a.malloc_calls + 1, "fopen did not call vmapalloc's malloc");
    a = snap();
    CHECK(fclose(f) == 0, "fclose");
    b = snap();
    if (vmt_vm)
        CHECK(b.free_calls >= a.free_calls + 1, "fclose did not call vmapalloc's free");
}

static void test_brk(void)
{
    enum { N = 200 };
    static void *blk[N];
    /* warm up (one-time initialisation may use the heap), then no stdio
     * or small allocations between the two sbrk(0) */
    free(malloc(MiB));
    free(memalign(8192, 70000));
    void *brk0 = sbrk(0);
    size_t large = vmt_large_above() > small_max ? vmt_large_above() : small_max;
    for (int i = 0; i < N; i++) {
        blk[i] = malloc(large + 1 + (size_t)i * 331);  /* glibc would put these on the heap */
        CHECK(blk[i] != NULL, "malloc");
        memset(blk[i], i, large + 1);
    }
    for (int i = 0; i < N; i += 2)
        free(blk[i]);
    for (int i = 1; i < N; i += 2) {
        blk[i] = realloc(blk[i], large + 56 * KiB);
        CHECK(blk[i] != NULL, "realloc");
    }
    for (int i = 0; i < N; i += 2) {
        blk[i] = calloc(1, U);
        CHECK(blk[i] != NULL, "calloc");
    }
    void *m = memalign(8192, 70000), *big = malloc(10 * MiB);
    CHECK(m && big, "memalign/malloc");
    free(m);
    free(big);
    for (int i = 0; i < N; i++)
        free(blk[i]);
    void *brk1 = sbrk(0);
    if (vmt_vm)
        CHECK(brk0 == brk1, "program break moved from %p to %p during large allocations",
              brk0, brk1);
}

#define RUN(fn) vmt_run("libc_internal", fn, #fn)

int main(void)
{
    vmt_init("libc_internal");
    small_max = vmt_small_max();
    U = 100 * KiB > vmt_large_above() + 32 * KiB ? 100 * KiB : vmt_large_above() + 32 * KiB;
    RUN(test_resolution);
    RUN(test_brk);              /* first: before stdio buffers exist */
    RUN(test_strdup);
    RUN(test_getline);
    RUN(test_memstream);
    RUN(test_qsort);
    RUN(test_stdio);
    vmt_done("libc_internal");
    return 0;
}
