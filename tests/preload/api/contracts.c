/*
 * contracts.c — the malloc-family contracts, checked under LD_PRELOAD=libvmapalloc.so.
 *
 * Expected behaviour is glibc's (this is a drop-in replacement): where glibc's
 * behaviour is implementation-defined (aligned_alloc/memalign with odd
 * alignments) the test asks glibc itself, calling libc.so.6's own definitions
 * through dlopen(RTLD_NOLOAD) + dlsym(handle), and asserts that the
 * interposed function agrees.
 *
 * Exit 0 on success; "FAIL: file:line: what" and exit 1 otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmtest.h"

#include <gnu/libc-version.h>
#include <malloc.h>
#include <stddef.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t page;
static size_t small_max;

typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);
typedef void (*cfree_fn)(void *);

static int is_aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static size_t pow2_ceil(size_t a)
{
    size_t r = 1;
    while (r < a && r < ((size_t)1 << 63))
        r <<= 1;
    return r;
}

/* 1 if vmapalloc is expected to own an allocation of n bytes at alignment a. */
/* Page-aligned blocks the slabs serve are slab objects (vmt_owned). */
static int expect_large(size_t n, size_t a)
{
    return n > vmt_large_above() || a > 4096 || (a == 4096 && !(vmt_builtin() && n <= 65536));
}

static uint64_t checksum(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* ------------------------------------------------------------------ */

static void test_api(void)
{
    if (!vmt_vm)
        return;
    static const char *names[] = {
        "malloc_calls", "free_calls", "calloc_calls", "realloc_calls", "memalign_calls",
        "large_allocs", "large_frees", "large_bytes_in_use", "small_frees",
    };
    uint64_t v;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        CHECK(vm.counter_get(names[i], &v) == 0, "counter \"%s\" unknown", names[i]);
    v = 777;
    CHECK(vm.counter_get("no_such_counter_xyz", &v) == -1, "unknown counter name accepted");
    if (vm.counter_name) {
        unsigned n = 0;
        while (vm.counter_name(n) && n < 100000)
            n++;
        CHECK(n >= sizeof names / sizeof *names, "vmapalloc_counter_name enumerates only %u", n);
        for (unsigned i = 0; i < n; i++)
            CHECK(vm.counter_get(vm.counter_name(i), &v) == 0,
                  "enumerated counter \"%s\" not readable", vm.counter_name(i));
    }
    if (vm.version) {
        const char *s = vm.version();
        CHECK(s && *s, "vmapalloc_version() empty");
    }
    FILE *f = fopen("/dev/null", "w");
    CHECK(f != NULL, "open /dev/null");
    CHECK(vm.stats_print(fileno(f), 0) == 0, "stats_print TEXT to /dev/null");
    CHECK(vm.stats_print(fileno(f), 1) == 0, "stats_print JSON to /dev/null");
    fclose(f);
    errno = 0;
    CHECK(vm.stats_print(-1, 0) == -1 && errno == EBADF,
          "stats_print(-1) must return -1/EBADF (errno=%d)", errno);
    int x = 0;
    static int y;
    CHECK(vm.owns(NULL) == 0, "owns(NULL)");
    CHECK(vm.owns(&x) == 0, "owns(stack)");
    CHECK(vm.owns(&y) == 0, "owns(static)");
}

static void test_malloc_zero(void)
{
    void *a = malloc(vmt_sz(0)), *b = malloc(vmt_sz(0));
    CHECK(a != NULL && b != NULL, "malloc(0) returned NULL");
    CHECK(a != b, "two malloc(0) returned the same pointer %p", a);
    CHECK(is_aligned(a, 16) && is_aligned(b, 16), "malloc(0) not 16-aligned");
    CHECK(malloc_usable_size(a) < 4096, "malloc(0) usable size %zu", malloc_usable_size(a));
    free(a);
    free(b);
    void *c = calloc(vmt_sz(0), 1), *d = calloc(1, vmt_sz(0));
    CHECK(c && d && c != d, "calloc(0,1)/calloc(1,0)");
    free(c);
    free(d);
    void *e = realloc(NULL, vmt_sz(0));
    CHECK(e != NULL, "realloc(NULL, 0) must behave as malloc(0)");
    free(e);
}

#define EXPECT_ENOMEM(expr, what)                                               \
    do {                                                                        \
        errno = 0;                                                              \
        void *r_ = (expr);                                                      \
        int e_ = errno;                                                         \
        CHECK(r_ == NULL, "%s returned %p, expected NULL", what, r_);           \
        CHECK(e_ == ENOMEM, "%s: errno %d, expected ENOMEM", what, e_);         \
    } while (0)

static void test_overflow(void)
{
    uint64_t in_use0 = CTR("large_bytes_in_use");
    EXPECT_ENOMEM(malloc(vmt_sz(SIZE_MAX)), "malloc(SIZE_MAX)");
    EXPECT_ENOMEM(malloc(vmt_sz((size_t)PTRDIFF_MAX + 1)), "malloc(PTRDIFF_MAX+1)");
    EXPECT_ENOMEM(malloc(vmt_sz(PTRDIFF_MAX)), "malloc(PTRDIFF_MAX)");
    EXPECT_ENOMEM(malloc(vmt_sz(SIZE_MAX - 4096)), "malloc(SIZE_MAX-4096)");
    EXPECT_ENOMEM(calloc(vmt_sz(SIZE_MAX / 2 + 1), 4), "calloc(SIZE_MAX/2+1, 4)");
    EXPECT_ENOMEM(calloc(4, vmt_sz(SIZE_MAX / 2 + 1)), "calloc(4, SIZE_MAX/2+1)");
    EXPECT_ENOMEM(calloc(vmt_sz(SIZE_MAX), vmt_sz(SIZE_MAX)), "calloc(SIZE_MAX, SIZE_MAX)");
    EXPECT_ENOMEM(calloc(vmt_sz((size_t)1 << 32), vmt_sz((size_t)1 << 32)), "calloc(2^32, 2^32)");
    EXPECT_ENOMEM(calloc(1, vmt_sz(SIZE_MAX)), "calloc(1, SIZE_MAX)");
    EXPECT_ENOMEM(reallocarray(NULL, vmt_sz(SIZE_MAX / 2 + 1), 4), "reallocarray(NULL, overflow)");
    EXPECT_ENOMEM(realloc(NULL, vmt_sz(SIZE_MAX)), "realloc(NULL, SIZE_MAX)");
    EXPECT_ENOMEM(valloc(vmt_sz(SIZE_MAX)), "valloc(SIZE_MAX)");
    EXPECT_ENOMEM(pvalloc(vmt_sz(SIZE_MAX)), "pvalloc(SIZE_MAX)");
    EXPECT_ENOMEM(pvalloc(vmt_sz(SIZE_MAX - 100)), "pvalloc(SIZE_MAX-100) (rounding overflows)");
    EXPECT_ENOMEM(memalign(4096, vmt_sz(SIZE_MAX)), "memalign(4096, SIZE_MAX)");
    EXPECT_ENOMEM(memalign(64, vmt_sz(SIZE_MAX - 64)), "memalign(64, SIZE_MAX-64)");
    EXPECT_ENOMEM(aligned_alloc(4096, vmt_sz(SIZE_MAX - 4095)), "aligned_alloc(4096, huge)");
    EXPECT_ENOMEM(aligned_alloc(vmt_sz((size_t)1 << 30), vmt_sz((size_t)PTRDIFF_MAX + 1)),
                  "aligned_alloc(1G, PTRDIFF_MAX+1)");

    /* reallocarray on a live block: NULL/ENOMEM, block untouched */
    for (int large = 0; large < 2; large++) {
        size_t n = large ? 300 * KiB : 300;
        unsigned char *p = malloc(n);
        CHECK(p != NULL, "malloc(%zu)", n);
        vmt_fill(p, 0, n, 11);
        EXPECT_ENOMEM(reallocarray(vmt_ptr(p), vmt_sz(SIZE_MAX / 2 + 1), 4), "reallocarray(p, overflow)");
        EXPECT_ENOMEM(reallocarray(vmt_ptr(p), vmt_sz((size_t)1 << 33), vmt_sz((size_t)1 << 33)),
                      "reallocarray(p, 2^33, 2^33)");
        CHECK(vmt_verify(p, 0, n, 11) == SIZE_MAX, "reallocarray failure damaged the block");
        unsigned char *q = reallocarray(p, n / 4, 8);
        CHECK(q != NULL, "reallocarray(p, n/4, 8)");
        CHECK(vmt_verify(q, 0, n, 11) == SIZE_MAX, "reallocarray lost content");
        free(q);
    }

    /* the allocator still works afterwards */
    void *a = malloc(100), *b = malloc(5 * MiB), *c = calloc(1000, 1000);
    CHECK(a && b && c, "allocations fail after the overflow battery");
    memset(a, 1, 100);
    memset(b, 2, 5 * MiB);
    free(a);
    free(b);
    free(c);
    if (vmt_vm)
        CHECK(CTR("large_bytes_in_use") == in_use0,
              "large_bytes_in_use changed across failed/freed allocations");
}

static void test_posix_memalign_errors(void)
{
    static const size_t bad[] = {
        0, 1, 2, 3, 4, 12, 24, 48, 100, 4097, 12288, 3 * MiB,
        SIZE_MAX / 2 + 2, SIZE_MAX,
    };
    void *sentinel = (void *)(uintptr_t)0x5a5a5a5a5a5a5a5aull;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        for (size_t n = 1; n <= 100 * KiB; n *= 100) {
            void *p = sentinel;
            int rc = posix_memalign(&p, vmt_sz(bad[i]), vmt_sz(n));
            CHECK(rc == EINVAL, "posix_memalign(align %zu, %zu) = %d, expected EINVAL", bad[i], n, rc);
            CHECK(p == sentinel, "posix_memalign(align %zu) touched *memptr on error", bad[i]);
        }
    }
    static const struct { size_t a, n; } nomem[] = {
        {64, SIZE_MAX}, {4096, SIZE_MAX}, {16, SIZE_MAX - 32}, {1 << 20, (size_t)PTRDIFF_MAX + 1},
        {(size_t)1 << 63, 1}, {(size_t)1 << 62, 100},
    };
    for (size_t i = 0; i < sizeof nomem / sizeof *nomem; i++) {
        void *p = sentinel;
        int rc = posix_memalign(&p, vmt_sz(nomem[i].a), vmt_sz(nomem[i].n));
        CHECK(rc == ENOMEM, "posix_memalign(align %zu, size %zu) = %d, expected ENOMEM",
              nomem[i].a, nomem[i].n, rc);
        CHECK(p == sentinel, "posix_memalign ENOMEM touched *memptr");
    }
    /* valid edge cases */
    void *p = sentinel;
    CHECK(posix_memalign(&p, sizeof(void *), 100) == 0 && p != sentinel && p != NULL,
          "posix_memalign(sizeof(void*), 100)");
    free(p);
    void *q = NULL;
    p = NULL;
    CHECK(posix_memalign(&p, 64, vmt_sz(0)) == 0 && posix_memalign(&q, 4096, vmt_sz(0)) == 0,
          "posix_memalign(size 0) must succeed (glibc)");
    CHECK(p != NULL && q != NULL && is_aligned(p, 64) && is_aligned(q, 4096),
          "posix_memalign(size 0) result");
    free(p);
    free(q);
}

/* aligned_alloc / memalign with odd alignments: compare against glibc's own. */
static void test_odd_alignments(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL, "dlopen(libc.so.6, RTLD_NOLOAD): %s", dlerror());
    void *(*g_aligned_alloc)(size_t, size_t) =
        (void *(*)(size_t, size_t))dlsym(libc, "aligned_alloc");
    void *(*g_memalign)(size_t, size_t) = (void *(*)(size_t, size_t))dlsym(libc, "memalign");
    void (*g_free)(void *) = (void (*)(void *))dlsym(libc, "free");
    CHECK(g_aligned_alloc && g_memalign && g_free, "glibc's own aligned_alloc/memalign/free");
    if (vmt_vm) {
        Dl_info di;
        CHECK(dladdr((void *)aligned_alloc, &di) && strstr(di.dli_fname, "vmapalloc"),
              "aligned_alloc is not vmapalloc's (%s)", di.dli_fname);
        CHECK((void *)g_aligned_alloc != (void *)aligned_alloc, "oracle is the interposer");
    }

    static const size_t al[] = {
        0, 1, 2, 3, 4, 8, 12, 16, 24, 48, 100, 1000, 4095, 4097, 12288, 5000, (1 << 20) + 1,
        (size_t)1 << 62, (size_t)1 << 63, SIZE_MAX / 2 + 2, SIZE_MAX - 4095, SIZE_MAX,
    };
    static const size_t sz[] = {0, 1, 100, 100 * KiB};
    for (int fn = 0; fn < 2; fn++) {
        const char *name = fn ? "memalign" : "aligned_alloc";
        for (size_t i = 0; i < sizeof al / sizeof *al; i++) {
            for (size_t j = 0; j < sizeof sz / sizeof *sz; j++) {
                size_t a = al[i], n = sz[j];
                errno = 0;
                void *o = fn ? g_memalign(vmt_sz(a), vmt_sz(n)) : g_aligned_alloc(vmt_sz(a), vmt_sz(n));
                int oe = errno;
                g_free(o);
                errno = 0;
                void *r = fn ? memalign(vmt_sz(a), vmt_sz(n)) : aligned_alloc(vmt_sz(a), vmt_sz(n));
                int re = errno;
                CHECK((r == NULL) == (o == NULL), "%s(%zu, %zu) = %p, glibc gives %p",
                      name, a, n, r, o);
                if (!r) {
                    CHECK(re == oe, "%s(%zu, %zu): errno %d, glibc's %d", name, a, n, re, oe);
                    continue;
                }
                size_t eff = a <= 16 ? 16 : pow2_ceil(a);
                CHECK(is_aligned(r, eff), "%s(%zu, %zu) = %p not %zu-aligned", name, a, n, r, eff);
                CHECK(malloc_usable_size(r) >= n, "%s(%zu, %zu) usable %zu", name, a, n,
                      malloc_usable_size(r));
                CHECK_OWNS(r, vmt_owned(n, eff), "%s(%zu, %zu) ownership", name, a, n);
                memset(r, 0x5c, malloc_usable_size(r));
                free(r);
            }
        }
    }

    /* On glibc 2.36 itself (aligned_alloc is memalign there), also pin the
     * known answers so the oracle cannot drift silently. */
    if (strcmp(gnu_get_libc_version(), "2.36") == 0) {
        void *p;
        p = aligned_alloc(vmt_sz(0), 100);
        CHECK(p != NULL, "glibc 2.36: aligned_alloc(0, 100) succeeds");
        free(p);
        p = aligned_alloc(vmt_sz(3), 100);
        CHECK(p != NULL && is_aligned(p, 16), "glibc 2.36: aligned_alloc(3, 100) succeeds");
        free(p);
        p = aligned_alloc(vmt_sz(24), 100);
        CHECK(p != NULL && is_aligned(p, 32), "glibc 2.36: aligned_alloc(24, 100) is 32-aligned");
        free(p);
        p = aligned_alloc(vmt_sz(64), vmt_sz(100));
        CHECK(p != NULL && is_aligned(p, 64), "aligned_alloc(64, 100): size need not be a multiple");
        free(p);
        EXPECT_ENOMEM(aligned_alloc(vmt_sz((size_t)1 << 63), 100), "aligned_alloc(2^63, 100)");
        errno = 0;
        p = aligned_alloc(vmt_sz(SIZE_MAX / 2 + 2), 100);
        CHECK(p == NULL && errno == EINVAL, "glibc 2.36: aligned_alloc(2^63+1) -> EINVAL");
    }

    /* memalign rounds a non-power-of-two alignment up */
    static const struct { size_t a, want; } up[] = {
        {24, 32}, {48, 64}, {100, 128}, {3000, 4096}, {5000, 8192}, {12288, 16384},
        {(1 << 20) + 1, 2 << 20}, {(3 << 20), 4 << 20},
    };
    for (size_t i = 0; i < sizeof up / sizeof *up; i++) {
        for (size_t n = 1; n <= 200 * KiB; n *= 200) {
            void *p = memalign(vmt_sz(up[i].a), n);
            CHECK(p != NULL && is_aligned(p, up[i].want), "memalign(%zu, %zu) = %p not %zu-aligned",
                  up[i].a, n, p, up[i].want);
            memset(p, 0x33, n);
            free(p);
        }
    }
}

static void test_alignment_matrix(void)
{
    static const size_t sizes[] = {1, 100, 4096, 70000, 3 * MiB};
    unsigned seed = 100;
    for (int shift = 4; shift <= 30; shift++) {
        size_t a = (size_t)1 << shift;
        for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
            size_t n = sizes[j];
            for (int fn = 0; fn < 3; fn++) {
                static const char *const names[] = {"posix_memalign", "aligned_alloc", "memalign"};
                void *p = NULL;
                if (fn == 0)
                    CHECK(posix_memalign(&p, a, n) == 0, "posix_memalign(%zu, %zu) failed", a, n);
                else if (fn == 1)
                    p = aligned_alloc(a, n);
                else
                    p = memalign(a, n);
                CHECK(p != NULL, "%s(%zu, %zu) = NULL", names[fn], a, n);
                CHECK(is_aligned(p, a), "%s(%zu, %zu) = %p misaligned", names[fn], a, n, p);
                size_t us = malloc_usable_size(p);
                CHECK(us >= n, "%s(%zu, %zu) usable %zu < requested", names[fn], a, n, us);
                CHECK_OWNS(p, vmt_owned(n, a), "%s(%zu, %zu) ownership (owns=%d)", names[fn],
                           a, n, vm.owns(p));
                seed++;
                /* glibc's usable size after a big alignment can be ~the
                 * alignment: pattern-fill the request plus 256 KiB, touch the
                 * rest of the usable area sparsely and at its last byte. */
                size_t lim = us < n + 256 * KiB ? us : n + 256 * KiB;
                vmt_fill(p, 0, lim, seed);
                if (lim < us) {
                    for (size_t off = lim; off < us; off += MiB)
                        ((volatile unsigned char *)p)[off] = 0x42;
                    ((volatile unsigned char *)p)[us - 1] = 0x42;
                }
                size_t bad = vmt_verify(p, 0, lim, seed);
                CHECK(bad == SIZE_MAX, "%s(%zu, %zu): byte %zu of usable area not kept", names[fn],
                      a, n, bad);
                if ((shift + fn) % 2 == 0) {
                    size_t m = 2 * n + 1;
                    void *q = realloc(p, m);
                    CHECK(q != NULL, "realloc of %s(%zu, %zu) to %zu failed", names[fn], a, n, m);
                    CHECK(is_aligned(q, 16), "realloc of aligned block returned %p", q);
                    CHECK(malloc_usable_size(q) >= m, "realloc of aligned block usable");
                    bad = vmt_verify(q, 0, n, seed);
                    CHECK(bad == SIZE_MAX, "realloc of %s(%zu, %zu) lost byte %zu", names[fn], a,
                          n, bad);
                    vmt_fill(q, 0, m, seed);
                    free(q);
                } else {
                    free(p);
                }
            }
        }
    }
}

static void test_valloc(void)
{
    static const size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 70000, 3 * MiB + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        void *p = valloc(vmt_sz(n));
        CHECK(p && is_aligned(p, page), "valloc(%zu) = %p not page aligned", n, p);
        CHECK(malloc_usable_size(p) >= n, "valloc(%zu) usable %zu", n, malloc_usable_size(p));
        CHECK_OWNS(p, 1, "valloc(%zu) not owned by vmapalloc", n);
        memset(p, 0x11, malloc_usable_size(p));
        free(p);

        void *q = pvalloc(vmt_sz(n));
        size_t want = (n + page - 1) & ~(page - 1);
        CHECK(q && is_aligned(q, page), "pvalloc(%zu) = %p not page aligned", n, q);
        CHECK(malloc_usable_size(q) >= want, "pvalloc(%zu) usable %zu < rounded %zu", n,
              malloc_usable_size(q), want);
        CHECK_OWNS(q, 1, "pvalloc(%zu) not owned by vmapalloc", n);
        memset(q, 0x22, malloc_usable_size(q));
        void *r = realloc(q, want + 10);
        CHECK(r != NULL, "realloc of pvalloc block");
        free(r);
    }
}

/* Made, 16-aligned, usable for n bytes and written at both ends; owned by
 * vmapalloc or not as `owned` says. */
static void check_block(const char *what, void *p, size_t n, int owned)
{
    CHECK(p != NULL, "%s(%zu) = NULL", what, n);
    CHECK(is_aligned(p, 16), "%s(%zu) = %p not 16-aligned", what, n, p);
    size_t us = malloc_usable_size(p);
    CHECK(us >= n, "%s(%zu) usable %zu", what, n, us);
    CHECK_OWNS(p, owned, "%s(%zu) ownership (owns=%d)", what, n, vm.owns(p));
    unsigned char *c = p;
    c[0] = 1;
    c[us - 1] = 2;
}

/* A block made anew: its owner follows from its size and the backend. */
static void check_basic(const char *what, void *p, size_t n)
{
    check_block(what, p, n, vmt_owned(n, 16));
}

static size_t large_sizes[200];
static size_t n_large_sizes;

static void make_large_sizes(void)
{
    static const size_t fixed[] = {
        4097, 8191, 16384, 65535, 65536, 65537, 65552, 100000, 131071, 131072, 131073,
        262145, MiB - 1, MiB, MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 3 * MiB,
        4 * MiB + 17, 8 * MiB, 16 * MiB - 1, 32 * MiB + 1, 64 * MiB,
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        large_sizes[n_large_sizes++] = fixed[i];
    for (size_t n = 65536 + 16; n <= 64 * MiB && n_large_sizes < 200; n = n * 9 / 8 + 7)
        large_sizes[n_large_sizes++] = n;
    large_sizes[n_large_sizes++] = small_max;
    large_sizes[n_large_sizes++] = small_max + 1;
}

static void test_alignment16(void)
{
    /* Each checked right after it is made: under BACKEND=auto the next
     * call may be the one that switches to the slabs. */
    for (size_t n = 1; n <= 4096; n++) {
        void *a = malloc(n);
        check_basic("malloc", a, n);
        void *b = calloc(1, n);
        check_basic("calloc", b, n);
        void *c = realloc(NULL, n);
        check_basic("realloc(NULL)", c, n);
        free(a);
        free(b);
        free(c);
    }
    void *g = NULL;
    for (size_t n = 1; n <= 4096; n++) {
        /* A glibc block that stays small stays glibc's (its owner resizes
         * it), also after a switch to the slabs. */
        int was_glibc = g && vmt_vm && !vm.owns(g);
        g = realloc(g, n);
        check_block("realloc(grow)", g, n, was_glibc ? n > vmt_large_above() : vmt_owned(n, 16));
    }
    free(g);
    for (size_t i = 0; i < n_large_sizes; i++) {
        size_t n = large_sizes[i];
        void *a = malloc(n), *b = calloc(n / 16 + 1, 16), *c = realloc(NULL, n);
        check_basic("malloc", a, n);
        check_basic("calloc", b, (n / 16 + 1) * 16);
        check_basic("realloc(NULL)", c, n);
        void *d = realloc(a, n + n / 3 + 1);
        check_basic("realloc(large)", d, n + n / 3 + 1);
        free(d);
        free(b);
        free(c);
    }
}

static void test_realloc(void)
{
    /* realloc(p, 0) frees and returns NULL (glibc), small and large */
    for (int large = 0; large < 2; large++) {
        size_t n = large ? 2 * MiB : 100;
        uint64_t f0 = CTR("large_frees"), u0 = CTR("large_bytes_in_use");
        void *p = malloc(n);
        CHECK(p != NULL, "malloc");
        void *r = realloc(p, vmt_sz(0));
        CHECK(r == NULL, "realloc(p, 0) of %zu bytes returned %p, glibc returns NULL", n, r);
        if (vmt_vm && large) {
            CHECK(CTR("large_frees") == f0 + 1, "realloc(p, 0) did not free the large block");
            CHECK(CTR("large_bytes_in_use") == u0, "realloc(p, 0): large_bytes_in_use not restored");
        }
    }

    /* content preservation across classes */
    static const struct { size_t from, to; } tr[] = {
        {100, 200 * KiB},  {1000, 70000},       {200 * KiB, 100},    {3 * MiB, 1000},
        {200 * KiB, 5 * MiB}, {70000, 65537},   {65537, 70000},      {5 * MiB, 5 * MiB},
        {5 * MiB, 5 * MiB - 4096}, {5 * MiB, 4 * MiB}, {8 * MiB, 9 * MiB}, {100, 50},
        {65536, 65537}, {65537, 65536}, {1 * MiB, 64 * MiB}, {64 * MiB, 10},
    };
    for (size_t i = 0; i < sizeof tr / sizeof *tr; i++) {
        size_t a = tr[i].from, b = tr[i].to, keep = a < b ? a : b;
        unsigned char *p = malloc(a);
        CHECK(p != NULL, "malloc(%zu)", a);
        vmt_fill(p, 0, a, 200 + (unsigned)i);
        unsigned char *q = realloc(p, b);
        CHECK(q != NULL, "realloc %zu -> %zu failed", a, b);
        CHECK(is_aligned(q, 16), "realloc %zu -> %zu misaligned", a, b);
        CHECK(malloc_usable_size(q) >= b, "realloc %zu -> %zu usable %zu", a, b,
              malloc_usable_size(q));
        size_t bad = vmt_verify(q, 0, keep, 200 + (unsigned)i);
        CHECK(bad == SIZE_MAX, "realloc %zu -> %zu lost byte %zu", a, b, bad);
        if (b > vmt_large_above())
            CHECK_OWNS(q, 1, "realloc %zu -> %zu result ownership (owns=%d)", a, b, vm.owns(q));
        memset(q, 0x77, malloc_usable_size(q));
        free(q);
    }

    /* grow chain x1.5 from 1 KiB to 100 MiB, then shrink back, with checksums */
    size_t n = KiB;
    unsigned char *p = malloc(n);
    CHECK(p != NULL, "malloc 1 KiB");
    vmt_fill(p, 0, n, 300);
    int steps = 0;
    while (n < 100 * MiB) {
        size_t m = n + n / 2;
        if (m > 100 * MiB)
            m = 100 * MiB;
        uint64_t before = checksum(p, n);
        unsigned char *q = realloc(p, m);
        CHECK(q != NULL, "grow chain: realloc %zu -> %zu failed", n, m);
        CHECK(is_aligned(q, 16), "grow chain: misaligned");
        CHECK(checksum(q, n) == before, "grow chain: checksum of %zu bytes changed at -> %zu", n, m);
        vmt_fill(q, n, m, 300);
        p = q;
        n = m;
        steps++;
    }
    CHECK(vmt_verify(p, 0, n, 300) == SIZE_MAX, "grow chain: final content");
    while (n > KiB) {
        size_t m = n * 2 / 3;
        if (m < KiB)
            m = KiB;
        unsigned char *q = realloc(p, m);
        CHECK(q != NULL, "shrink chain: realloc %zu -> %zu failed", n, m);
        size_t bad = vmt_verify(q, 0, m, 300);
        CHECK(bad == SIZE_MAX, "shrink chain: %zu -> %zu lost byte %zu", n, m, bad);
        p = q;
        n = m;
        steps++;
    }
    free(p);
    CHECK(steps > 40, "chain too short");

    /* realloc failure leaves the block alone */
    for (int large = 0; large < 2; large++) {
        size_t sz = large ? 3 * MiB : 300;
        unsigned char *b = malloc(sz);
        CHECK(b != NULL, "malloc");
        vmt_fill(b, 0, sz, 400);
        EXPECT_ENOMEM(realloc(vmt_ptr(b), vmt_sz(SIZE_MAX)), "realloc(p, SIZE_MAX)");
        EXPECT_ENOMEM(realloc(vmt_ptr(b), vmt_sz((size_t)PTRDIFF_MAX + 1)), "realloc(p, PTRDIFF_MAX+1)");
        EXPECT_ENOMEM(realloc(vmt_ptr(b), vmt_sz(SIZE_MAX - 4096)), "realloc(p, SIZE_MAX-4096)");
        CHECK(vmt_verify(b, 0, sz, 400) == SIZE_MAX, "failed realloc damaged the block");
        CHECK(malloc_usable_size(b) >= sz, "failed realloc changed usable size");
        unsigned char *c = realloc(b, sz + 1);
        CHECK(c != NULL && vmt_verify(c, 0, sz, 400) == SIZE_MAX, "block unusable after failed realloc");
        free(c);
    }
}

static void test_usable_size(void)
{
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu", malloc_usable_size(NULL));
    static const size_t sizes[] = {
        1, 8, 24, 25, 100, 1000, 4096, 65535, 65536, 65537, 100000, MiB + 3, 3 * MiB,
    };
    enum { K = 8 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *b[K];
        size_t us[K];
        for (int k = 0; k < K; k++) {
            b[k] = malloc(sizes[i]);
            CHECK(b[k] != NULL, "malloc(%zu)", sizes[i]);
            us[k] = malloc_usable_size(b[k]);
            CHECK(us[k] >= sizes[i], "malloc_usable_size(malloc(%zu)) = %zu", sizes[i], us[k]);
            CHECK(malloc_usable_size(b[k]) == us[k], "malloc_usable_size not stable");
        }
        for (int k = 0; k < K; k++)
            vmt_fill(b[k], 0, us[k], 500 + (unsigned)k);
        for (int k = 0; k < K; k++) {
            size_t bad = vmt_verify(b[k], 0, us[k], 500 + (unsigned)k);
            CHECK(bad == SIZE_MAX, "size %zu block %d: byte %zu of %zu usable overwritten by a "
                  "neighbour", sizes[i], k, bad, us[k]);
        }
        for (int k = 0; k < K; k += 2)
            free(b[k]);
        for (int k = 1; k < K; k += 2) {
            CHECK(vmt_verify(b[k], 0, us[k], 500 + (unsigned)k) == SIZE_MAX,
                  "freeing a neighbour damaged a block of %zu", sizes[i]);
            free(b[k]);
        }
    }
    /* mixed small and large neighbours */
    enum { M = 24 };
    unsigned char *b[M];
    size_t us[M];
    for (int k = 0; k < M; k++) {
        size_t n = (k % 3 == 0) ? 90000 + (size_t)k * 4096 : (k % 3 == 1) ? 40 + (size_t)k : 65536;
        b[k] = malloc(n);
        CHECK(b[k] != NULL, "malloc");
        us[k] = malloc_usable_size(b[k]);
        vmt_fill(b[k], 0, us[k], 600 + (unsigned)k);
    }
    for (int k = 0; k < M; k++) {
        CHECK(vmt_verify(b[k], 0, us[k], 600 + (unsigned)k) == SIZE_MAX,
              "mixed neighbours: block %d damaged", k);
        free(b[k]);
    }
}

static void calloc_check(size_t nmemb, size_t size, const char *what)
{
    size_t n = nmemb * size;
    unsigned char *p = calloc(nmemb, size);
    CHECK(p != NULL, "calloc(%zu, %zu) %s", nmemb, size, what);
    size_t nz = vmt_first_nonzero(p, n);
    CHECK(nz == SIZE_MAX, "calloc(%zu, %zu) %s: byte %zu is 0x%02x", nmemb, size, what, nz,
          nz == SIZE_MAX ? 0 : p[nz]);
    memset(p, 0xAA, malloc_usable_size(p));
    free(p);
}

static void test_calloc(void)
{
    for (size_t n = 1; n <= 512; n++)
        calloc_check(1, n, "fresh");
    for (size_t n = 600; n <= 64 * MiB; n = n * 5 / 4 + 3)
        calloc_check(n, 1, "fresh");
    calloc_check(64 * MiB, 1, "fresh");
    calloc_check(4 * MiB, 16, "fresh");

    /* recycled memory: fill 0xAA, free, calloc the same size */
    static const size_t sizes[] = {
        1, 16, 24, 100, 1000, 4096, 4097, 60000, 65536, 65537, 70000, 100000, 128 * KiB,
        200 * KiB, 300 * KiB + 5, MiB - 1, MiB, MiB + 1, 2 * MiB, 3 * MiB + 77, 8 * MiB,
        17 * MiB, 64 * MiB,
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        int reps = n >= 8 * MiB ? 2 : 6;
        for (int r = 0; r < reps; r++) {
            unsigned char *p = malloc(n);
            CHECK(p != NULL, "malloc(%zu)", n);
            memset(p, 0xAA, malloc_usable_size(p));
            free(p);
            calloc_check(1, n, "after fill/free");
            if (n % 8 == 0)
                calloc_check(n / 8, 8, "after fill/free (n/8 x 8)");
        }
        /* nearby sizes re-use the same area */
        unsigned char *p = malloc(n + n / 8);
        CHECK(p != NULL, "malloc");
        memset(p, 0xAA, malloc_usable_size(p));
        free(p);
        calloc_check(1, n, "after a bigger fill/free");
        p = malloc(n);
        CHECK(p != NULL, "malloc");
        memset(p, 0xAA, malloc_usable_size(p));
        free(p);
        calloc_check(1, n + n / 8 + 1, "after a smaller fill/free");
    }

    /* many blocks at once, then the same number of callocs */
    enum { K = 32 };
    for (size_t n = 1000; n <= 4 * MiB; n *= 4) {
        unsigned char *b[K];
        for (int k = 0; k < K; k++) {
            b[k] = malloc(n);
            CHECK(b[k] != NULL, "malloc");
            memset(b[k], 0xAA, malloc_usable_size(b[k]));
        }
        for (int k = 0; k < K; k++)
            free(b[k]);
        for (int k = 0; k < K; k++) {
            b[k] = calloc(1, n);
            CHECK(b[k] != NULL, "calloc");
            size_t nz = vmt_first_nonzero(b[k], n);
            CHECK(nz == SIZE_MAX, "batch calloc(%zu) #%d: byte %zu nonzero", n, k, nz);
        }
        for (int k = 0; k < K; k++) {
            memset(b[k], 0xAA, n);
            free(b[k]);
        }
    }

    /* after an explicit purge */
    if (vmt_vm) {
        for (size_t n = 100 * KiB; n <= 16 * MiB; n *= 3) {
            unsigned char *p = malloc(n);
            CHECK(p != NULL, "malloc");
            memset(p, 0xAA, malloc_usable_size(p));
            free(p);
            (void)vm.purge();
            calloc_check(1, n, "after fill/free/purge");
        }
    }
}

static void test_free_errno(void)
{
    static const int vals[] = {EDOM, 1234, ERANGE};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        void *s = malloc(100), *l = malloc(2 * MiB), *al = aligned_alloc(1 << 16, 100000);
        void *huge = malloc(200 * MiB);
        CHECK(s && l && al && huge, "malloc");
        memset(huge, 1, 200 * MiB);
        errno = vals[i];
        free(s);
        CHECK(errno == vals[i], "free(small) changed errno to %d", errno);
        free(l);
        CHECK(errno == vals[i], "free(large) changed errno to %d", errno);
        free(NULL);
        CHECK(errno == vals[i], "free(NULL) changed errno to %d", errno);
        free(al);
        CHECK(errno == vals[i], "free(aligned large) changed errno to %d", errno);
        free(huge);
        CHECK(errno == vals[i], "free(200 MiB) changed errno to %d", errno);
    }
    if (vmt_vm) {
        for (int i = 0; i < 64; i++) {      /* fill the caches past their limits */
            void *p = malloc(3 * MiB + (size_t)i * 4096);
            memset(p, 1, 4096);
            errno = EDOM;
            free(p);
            CHECK(errno == EDOM, "free(large #%d) changed errno", i);
        }
        errno = EDOM;
        (void)vm.purge();
        CHECK(errno == EDOM, "vmapalloc_purge changed errno (not required, but free must not)");
    }
}

static void test_sized_frees(void)
{
    free_sized_fn fs = (free_sized_fn)vmt_sym("free_sized");
    free_aligned_sized_fn fas = (free_aligned_sized_fn)vmt_sym("free_aligned_sized");
    cfree_fn cf = (cfree_fn)vmt_sym("cfree");
    if (vmt_vm) {
        CHECK(fs != NULL, "free_sized not exported by vmapalloc");
        CHECK(fas != NULL, "free_aligned_sized not exported by vmapalloc");
        CHECK(cf != NULL, "cfree not exported by vmapalloc");
    }
    if (fs) {
        static const size_t sizes[] = {1, 100, 65536, 65537, 300 * KiB, 5 * MiB};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            size_t n = sizes[i];
            uint64_t lf = CTR("large_frees"), u0 = CTR("large_bytes_in_use");
            void *p = malloc(n);
            CHECK(p != NULL, "malloc");
            memset(p, 3, n);
            errno = EDOM;
            fs(p, n);
            CHECK(errno == EDOM, "free_sized changed errno");
            if (vmt_vm && n > vmt_large_above()) {
                CHECK(CTR("large_frees") == lf + 1, "free_sized(%zu) did not free a large block", n);
                CHECK(CTR("large_bytes_in_use") == u0, "free_sized(%zu): bytes in use", n);
            }
            p = calloc(n, 1);
            CHECK(p != NULL, "calloc");
            fs(p, n);
        }
        fs(NULL, 0);
        fs(NULL, 100);
    } else {
        printf("contracts: note: free_sized not available, skipped\n");
    }
    if (fas) {
        static const struct { size_t a, n; } c[] = {
            {16, 16}, {64, 128}, {64, 100}, {4096, 4096}, {4096, 8192}, {1 << 16, 1 << 17},
            {1 << 20, 3 * MiB}, {1 << 21, 1 << 21},
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            uint64_t lf = CTR("large_frees");
            void *p = aligned_alloc(c[i].a, c[i].n);
            CHECK(p && is_aligned(p, c[i].a), "aligned_alloc(%zu, %zu)", c[i].a, c[i].n);
            memset(p, 4, c[i].n);
            errno = EDOM;
            fas(p, c[i].a, c[i].n);
            CHECK(errno == EDOM, "free_aligned_sized changed errno");
            if (vmt_vm && expect_large(c[i].n, c[i].a))
                CHECK(CTR("large_frees") == lf + 1, "free_aligned_sized(%zu, %zu) did not free",
                      c[i].a, c[i].n);
        }
        fas(NULL, 64, 0);
    } else {
        printf("contracts: note: free_aligned_sized not available, skipped\n");
    }
    if (cf) {
        void *s = malloc(100), *l = malloc(vmt_large_above() + 4096);
        CHECK(s && l, "malloc");
        uint64_t lf = CTR("large_frees");
        cf(s);
        cf(l);
        cf(NULL);
        if (vmt_vm)
            CHECK(CTR("large_frees") == lf + 1 + (100 > vmt_large_above()),
                  "cfree did not free the large block");
    } else {
        printf("contracts: note: cfree not available (glibc >= 2.26 has no default cfree), skipped\n");
    }
}

static void test_counters(void)
{
    if (!vmt_vm)
        return;
    const size_t n = 3 * MiB;
    uint64_t m0 = CTR("malloc_calls"), f0 = CTR("free_calls"), la0 = CTR("large_allocs"),
             lf0 = CTR("large_frees"), u0 = CTR("large_bytes_in_use");
    void *p = malloc(n);
    uint64_t m1 = CTR("malloc_calls"), la1 = CTR("large_allocs"), u1 = CTR("large_bytes_in_use");
    CHECK(p != NULL, "malloc");
    CHECK(m1 == m0 + 1, "one malloc: malloc_calls +%llu", (unsigned long long)(m1 - m0));
    CHECK(la1 == la0 + 1, "one large malloc: large_allocs +%llu", (unsigned long long)(la1 - la0));
    CHECK(u1 >= u0 + n, "large_bytes_in_use grew by %llu < %zu", (unsigned long long)(u1 - u0), n);
    CHECK(u1 <= u0 + n + n / 4 + (2u << 20), "large_bytes_in_use grew by %llu for %zu",
          (unsigned long long)(u1 - u0), n);
    free(p);
    uint64_t f1 = CTR("free_calls"), lf1 = CTR("large_frees"), u2 = CTR("large_bytes_in_use");
    CHECK(f1 == f0 + 1, "one free: free_calls +%llu", (unsigned long long)(f1 - f0));
    CHECK(lf1 == lf0 + 1, "one large free: large_frees +%llu", (unsigned long long)(lf1 - lf0));
    CHECK(u2 == u0, "large_bytes_in_use not back after free");

    if (small_max >= 100) {
        m0 = CTR("malloc_calls");
        la0 = CTR("large_allocs");
        p = malloc(100);
        m1 = CTR("malloc_calls");
        la1 = CTR("large_allocs");
        CHECK(m1 == m0 + 1 && la1 == la0,
              "small malloc counted as malloc_calls+%llu large_allocs+%llu",
              (unsigned long long)(m1 - m0), (unsigned long long)(la1 - la0));
        CHECK(vm.owns(p) == vmt_owned(100, 16), "small malloc: wrong owner");
        free(p);
    }

    uint64_t c0 = CTR("calloc_calls");
    p = calloc(1, n);
    CHECK(CTR("calloc_calls") == c0 + 1, "calloc_calls");
    uint64_t r0 = CTR("realloc_calls");
    p = realloc(p, 2 * n);
    CHECK(p && CTR("realloc_calls") == r0 + 1, "realloc_calls");
    free(p);
    uint64_t a0 = CTR("memalign_calls");
    p = memalign(4096, n);
    CHECK(p && CTR("memalign_calls") == a0 + 1, "memalign_calls after memalign");
    free(p);
    a0 = CTR("memalign_calls");
    CHECK(posix_memalign(&p, 4096, n) == 0, "posix_memalign");
    CHECK(CTR("memalign_calls") == a0 + 1, "memalign_calls after posix_memalign");
    free(p);
    a0 = CTR("memalign_calls");
    p = aligned_alloc(4096, n);
    CHECK(p && CTR("memalign_calls") == a0 + 1, "memalign_calls after aligned_alloc");
    free(p);

    /* realloc's fast path (a small block kept in its object) and the aligned
     * calls' (alignments below a page from a class that has them) count too */
    p = malloc(100);
    r0 = CTR("realloc_calls");
    void *q = realloc(p, 104);
    CHECK(q && CTR("realloc_calls") == r0 + 1, "realloc_calls after a realloc in place");
    free(q);
    for (size_t al = 32; al < 4096; al *= 2) {
        void *m[3] = {NULL, NULL, NULL};
        a0 = CTR("memalign_calls");
        m[0] = memalign(al, 24);
        CHECK(posix_memalign(&m[1], al, 40) == 0, "posix_memalign(%zu, 40)", al);
        m[2] = aligned_alloc(al, al);
        CHECK(CTR("memalign_calls") == a0 + 3, "memalign_calls after three aligned calls of %zu", al);
        for (int i = 0; i < 3; i++) {
            CHECK(m[i] && is_aligned(m[i], al), "aligned call %d of %zu: %p", i, al, m[i]);
            memset(m[i], 7, 24);
            free(m[i]);
        }
    }
    /* a string grown a byte at a time keeps its bytes, whether the block
     * stays or moves (a moved one gets a quarter more room) */
    char *str = NULL;
    for (size_t len = 1; len <= 5000; len++) {
        char *t = realloc(str, len + 1);
        CHECK(t, "realloc(%zu)", len + 1);
        str = t;
        str[len - 1] = (char)('a' + len % 26);
        str[len] = 0;
        if (len % 97 == 0)
            for (size_t i = 1; i <= len; i++)
                CHECK(str[i - 1] == (char)('a' + i % 26), "grown string: byte %zu of %zu", i, len);
    }
    CHECK(malloc_usable_size(str) >= 5001, "grown string: usable size %zu", malloc_usable_size(str));
    free(str);

    /* the small/large boundary */
    size_t large = vmt_large_above();
    void *s = malloc(large), *l = malloc(large + 1);
    CHECK(s && l, "malloc at the boundary");
    CHECK(vm.owns(s) == vmt_owned(large, 16), "malloc(%zu) at the boundary: wrong owner", large);
    CHECK(vm.owns(l) == 1, "malloc(%zu) past the boundary must go to vmapalloc", large + 1);
    free(s);
    free(l);
}

static void test_misc_glibc_api(void)
{
    /* the glibc extras vmapalloc exports must still work */
    void *p = malloc(MiB), *q = malloc(100);
    CHECK(p && q, "malloc");
    int t = malloc_trim(0);
    CHECK(t == 0 || t == 1, "malloc_trim returned %d", t);
    struct mallinfo2 mi = mallinfo2();
    (void)mi;
    FILE *f = fopen("/dev/null", "w");
    CHECK(f != NULL, "fopen /dev/null");
    CHECK(malloc_info(0, f) == 0, "malloc_info(0, f)");
    errno = 0;
    CHECK(malloc_info(1, f) != 0, "malloc_info(1, f) must fail (glibc: returns EINVAL)");
    fclose(f);
    CHECK(mallopt(M_CHECK_ACTION, 3) == 1, "mallopt(M_CHECK_ACTION)");
    free(p);
    free(q);
}

#define RUN(fn) vmt_run("contracts", fn, #fn)

int main(void)
{
    vmt_init("contracts");
    page = (size_t)sysconf(_SC_PAGESIZE);
    small_max = vmt_small_max();
    make_large_sizes();

    RUN(test_api);
    RUN(test_malloc_zero);
    RUN(test_overflow);
    RUN(test_posix_memalign_errors);
    RUN(test_odd_alignments);
    RUN(test_alignment_matrix);
    RUN(test_valloc);
    RUN(test_alignment16);
    RUN(test_realloc);
    RUN(test_usable_size);
    RUN(test_calloc);
    RUN(test_free_errno);
    RUN(test_sized_frees);
    RUN(test_counters);
    RUN(test_misc_glibc_api);

    vmt_done("contracts");
    return 0;
}
