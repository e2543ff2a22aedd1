/*
 * vmtest.h — shared helpers for the tests/preload/api programs.
 *
 * Every program is meant to run under LD_PRELOAD=libvmapalloc.so.  The public
 * API is looked up with dlsym(RTLD_DEFAULT, ...) so the programs are not linked
 * against vmapalloc; without the preload they fail loudly (exit 1, "FAIL: not
 * running under vmapalloc").  Setting VMTEST_CONTRACT_ONLY=1 instead
 * runs them in "contract-only" mode: every check that needs vmapalloc
 * (ownership, counters, purge) is skipped and only the malloc-family contracts
 * are checked — that is how the expectations are checked against glibc itself.
 *
 * Include after defining _GNU_SOURCE.
 */
#ifndef VMTEST_H
#define VMTEST_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong vmt_checks;
static atomic_ulong vmt_failures;
static int vmt_keep_going = -1;   /* VMTEST_KEEP_GOING=1: report every failure */

__attribute__((format(printf, 4, 5), unused))
static void vmt_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    /* stderr is unbuffered: vfprintf formats into a stack buffer. */
    fprintf(stderr, "FAIL: %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  [check: %s]\n", cond);
    if (vmt_keep_going < 0) {
        const char *k = getenv("VMTEST_KEEP_GOING");
        vmt_keep_going = k && strcmp(k, "1") == 0;
    }
    if (vmt_keep_going) {
        atomic_fetch_add(&vmt_failures, 1);
        return;
    }
    fflush(stdout);
    _exit(1);                  /* also from threads and forked children */
}

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        atomic_fetch_add_explicit(&vmt_checks, 1, memory_order_relaxed);        \
        if (!(cond))                                                            \
            vmt_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                   \
    } while (0)

/* Hide values from the optimiser: no constant folding of malloc(SIZE_MAX),
 * no -Walloc-size-larger-than, no elision of malloc/free pairs, no
 * -Wuse-after-free on the deliberate misuse in bad_free.c. */
static inline size_t vmt_sz(size_t n) { __asm__ volatile("" : "+r"(n)); return n; }
static inline void *vmt_ptr(void *p) { __asm__ volatile("" : "+r"(p)); return p; }

/* ---- vmapalloc's public API, looked up at run time ---- */

struct vmt_api {
    int (*owns)(const void *p);
    int (*counter_get)(const char *name, uint64_t *value);
    size_t (*purge)(void);
    int (*stats_print)(int fd, int format);
    const char *(*version)(void);
    const char *(*counter_name)(unsigned i);
};
static struct vmt_api vm;
static int vmt_vm;             /* 1 = running under vmapalloc */

static void *vmt_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* Call first thing in main(). */
__attribute__((unused))
static void vmt_init(const char *prog)
{
    vm.owns = (int (*)(const void *))vmt_sym("vmapalloc_owns");
    vm.counter_get = (int (*)(const char *, uint64_t *))vmt_sym("vmapalloc_counter_get");
    vm.purge = (size_t (*)(void))vmt_sym("vmapalloc_purge");
    vm.stats_print = (int (*)(int, int))vmt_sym("vmapalloc_stats_print");
    vm.version = (const char *(*)(void))vmt_sym("vmapalloc_version");
    vm.counter_name = (const char *(*)(unsigned))vmt_sym("vmapalloc_counter_name");
    if (vm.owns && vm.counter_get && vm.purge && vm.stats_print) {
        vmt_vm = 1;
        return;
    }
    const char *co = getenv("VMTEST_CONTRACT_ONLY");
    if (co && strcmp(co, "1") == 0) {
        printf("%s: note: vmapalloc not found, contract-only mode (vmapalloc checks skipped)\n",
               prog);
        vmt_vm = 0;
        return;
    }
    fprintf(stderr, "FAIL: %s: not running under vmapalloc (dlsym(RTLD_DEFAULT, "
            "\"vmapalloc_owns\") found nothing; run with LD_PRELOAD=libvmapalloc.so)\n", prog);
    _exit(1);
}

/* A counter's current value; the name must exist. */
#define CTR(name) vmt_counter(__FILE__, __LINE__, (name))
__attribute__((unused))
static uint64_t vmt_counter(const char *file, int line, const char *name)
{
    uint64_t v = 0;
    if (!vmt_vm)
        return 0;
    atomic_fetch_add_explicit(&vmt_checks, 1, memory_order_relaxed);
    if (vm.counter_get(name, &v) != 0)
        vmt_fail(file, line, "counter_get(name) == 0", "vmapalloc_counter_get(\"%s\") failed", name);
    return v;
}

/* Ownership check, only under vmapalloc. */
#define CHECK_OWNS(p, expect, ...)                                              \
    do {                                                                        \
        if (vmt_vm)                                                             \
            CHECK(vm.owns(p) == (expect), __VA_ARGS__);                         \
    } while (0)

/* VMAPALLOC_SMALL_MAX as the allocator will read it (default 64 KiB). */
__attribute__((unused))
static size_t vmt_small_max(void)
{
    const char *s = getenv("VMAPALLOC_SMALL_MAX");
    if (!s || !*s)
        return 65536;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    case 't': case 'T': v <<= 40; break;
    default: break;
    }
    return (size_t)v;
}

/* Whether vmapalloc's own slabs serve small requests (of up to 64 KiB and
 * SMALL_MAX) now, so that those blocks lie in its regions too: always with
 * VMAPALLOC_BACKEND=builtin, never with libc, and with auto (the default)
 * once a thread has made VMAPALLOC_AUTO_AFTER small allocations.  Called
 * after an allocation: a thread's first slab object comes from a slab it
 * made itself, which its own (exact) reading of slabs_made shows. */
__attribute__((unused))
static int vmt_builtin(void)
{
    const char *b = getenv("VMAPALLOC_BACKEND");
    if (b && strcmp(b, "builtin") == 0)
        return 1;
    if (b && strcmp(b, "libc") == 0)
        return 0;
    uint64_t v = 0;
    return vmt_vm && vm.counter_get("slabs_made", &v) == 0 && v > 0;
}

/* Requests above this size are large (vmapalloc's arena): SMALL_MAX, but
 * with BACKEND=auto (the default), as long as no arena is set up, glibc keeps
 * blocks up to its first mmap threshold, 128 KiB (not with GUARD=1). */
__attribute__((unused))
static size_t vmt_large_above(void)
{
    size_t large = vmt_small_max();
    const char *b = getenv("VMAPALLOC_BACKEND"), *g = getenv("VMAPALLOC_GUARD");
    uint64_t regions = 0;
    if ((!b || !*b || strcmp(b, "auto") == 0) && !(g && strcmp(g, "1") == 0) && vmt_vm &&
        vm.counter_get("regions", &regions) == 0 && regions == 0 && large < 131072)
        large = 131072;
    return large;
}

/* Whether a block of n bytes aligned to a lies in vmapalloc's regions: a
 * large block (see vmt_large_above, or page-aligned: a slab object when the
 * slabs serve its size), or a builtin slab object. */
__attribute__((unused))
static int vmt_owned(size_t n, size_t a)
{
    return n > vmt_large_above() || a >= 4096 || (vmt_builtin() && n <= 65536);
}

/* Deterministic byte pattern: position- and seed-dependent. */
static inline unsigned char vmt_pat(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed * 0xD6E8FEB86659FD93ull;
    return (unsigned char)(x >> 56) ^ (unsigned char)(i >> 12);
}

__attribute__((unused))
static void vmt_fill(void *p, size_t from, size_t to, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = from; i < to; i++)
        c[i] = vmt_pat(i, seed);
}

/* Index of the first byte in [from,to) that does not match, or SIZE_MAX. */
__attribute__((unused))
static size_t vmt_verify(const void *p, size_t from, size_t to, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = from; i < to; i++)
        if (c[i] != vmt_pat(i, seed))
            return i;
    return SIZE_MAX;
}

/* Index of the first nonzero byte in [0,n), or SIZE_MAX. */
__attribute__((unused))
static size_t vmt_first_nonzero(const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i = 0;
    for (; i < n && ((uintptr_t)(c + i) & 7); i++)
        if (c[i])
            return i;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        if (w)
            break;
    }
    for (; i < n; i++)
        if (c[i])
            return i;
    return SIZE_MAX;
}

#include <time.h>
/* Run one section; with VMTEST_VERBOSE set, print its wall time. */
__attribute__((unused))
static void vmt_run(const char *prog, void (*fn)(void), const char *name)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    fn();
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (getenv("VMTEST_VERBOSE"))
        printf("%s: %-28s %8.3f s, %lu checks so far\n", prog, name,
               (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9,
               (unsigned long)atomic_load(&vmt_checks));
}

/* The process's resident memory (VmRSS) in KiB, from /proc/self/statm; -1
 * if it cannot be read. */
__attribute__((unused))
static long vmt_resident_kib(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    long n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    long size, res;
    if (sscanf(buf, "%ld %ld", &size, &res) != 2)
        return -1;
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

__attribute__((unused))
static void vmt_done(const char *prog)
{
    if (atomic_load(&vmt_failures)) {
        fprintf(stderr, "FAIL: %s: %lu of %lu checks failed\n", prog,
                (unsigned long)atomic_load(&vmt_failures), (unsigned long)atomic_load(&vmt_checks));
        fflush(stdout);
        _exit(1);
    }
    printf("%s: OK, %lu checks passed%s\n", prog,
           (unsigned long)atomic_load(&vmt_checks),
           vmt_vm ? "" : " (contract-only mode)");
    fflush(stdout);
}

#endif /* VMTEST_H */
