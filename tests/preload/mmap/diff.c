/*
 * diff.c — differential harness for the interposed mmap family.
 *
 * One program, many named cases.  Each case makes a sequence of calls to
 * mmap, mmap64, munmap, mremap, mprotect, madvise, mincore, mlock (through
 * the ordinary dynamic symbols, so that LD_PRELOAD=libvmapalloc.so intercepts
 * them) and writes a transcript of what it observed: for every call its
 * result class and errno; which pages of a range are readable/writable
 * (probed from a forked child: a fault there cannot kill the harness);
 * checksums of ranges that must keep their content; whether fresh memory is
 * zero; and addresses only as relations that are deterministic for the case
 * ("=hint", "=old", "aligned") — never absolute addresses.
 *
 * diff.sh runs the program without the preload and with it, and compares the
 * transcripts case by case: the kernel is the oracle.
 *
 *   diff [--case NAME]...        run the differential cases (default: all)
 *   diff --seed N [--case NAME]... random-vmas-dontunmap with seed N alone (0x... or
 *                                decimal) instead of its fixed seeds
 *   diff --list                  list the cases, one line each
 *   diff --preload-only [--case NAME]...
 *                                run the cases that only make sense under
 *                                vmapalloc (misuse of its own memory); each in
 *                                a forked child; exit 1 if any fails
 *
 * Transcript format (stdout, written with write(2) one line at a time so that
 * a crash keeps everything before it; no stdio, no malloc between calls):
 *
 *   == case-name
 *   tag: mmap -> ok                    (" unaligned"; with an address
 *                                      argument " =addr"/" !=addr")
 *   tag: munmap -> -1 EINVAL
 *   tag: pages w*2 -*1 w*2             w = read+write, r = read only,
 *                                      - = SIGSEGV on read, B = SIGBUS on read,
 *                                      b = SIGBUS on write
 *   tag: content ok 1a2b...            (checksum of the bytes)
 *   tag: zero yes
 *   tag: resident 1*8                  (mincore, only where deterministic)
 *
 * A successful call that changed errno adds " errno-changed:NAME" (the
 * kernel's wrappers leave errno alone on success).  diff.sh merges stderr
 * into the transcript: a line the preload prints during a call comes just
 * before that call's own line.
 *
 * Determinism rules for case writers: the program is single-threaded except
 * in threads-churn (which prints only totals); an address is only compared
 * with something the case controls (a hole it made, a hint into a gap read
 * from /proc/self/maps); residency is only printed for pages the case
 * touched, populated or discarded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102      /* Linux 6.13 */
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4          /* Linux 5.7 */
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* The build may define _FILE_OFFSET_BITS=64, which turns mmap into mmap64 in
 * the headers.  Bind both symbols by name so that both exports are used. */
extern void *sym_mmap(void *, size_t, int, int, int, long) __asm__("mmap");
extern void *sym_mmap64(void *, size_t, int, int, int, long) __asm__("mmap64");

#define PG ((size_t)4096)
#define AT(p, i) ((char *)(p) + (size_t)(i) * PG)
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define RW (PROT_READ | PROT_WRITE)
#define PA (MAP_PRIVATE | MAP_ANONYMOUS)
#define ERRNO_SENTINEL 9999

/* ------------------------------------------------------------ transcript */

static void write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(99);
        s += w;
        n -= (size_t)w;
    }
}

__attribute__((format(printf, 1, 2)))
static void T(const char *fmt, ...)
{
    char buf[512];
    int e = errno;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof buf - 2)
        n = sizeof buf - 2;
    buf[n++] = '\n';
    write_all(1, buf, (size_t)n);
    errno = e;
}

static const char *ename(int e)
{
    if (e == 0)
        return "errno-0";
    const char *n = strerrorname_np(e);
    return n ? n : "E???";
}

/* " errno-changed:X" when a successful call changed errno, else "". */
static const char *errno_note(int e)
{
    static char b[64];
    if (e == ERRNO_SENTINEL)
        return "";
    snprintf(b, sizeof b, " errno-changed:%s", ename(e));
    return b;
}

/* ----------------------------------------------------- the calls, logged */

static unsigned long mmap_calls;   /* alternates between mmap and mmap64 */

static void *log_map(const char *tag, const char *sym, void *p, int e, void *addr)
{
    if (p == MAP_FAILED) {
        T("%s: %s -> MAP_FAILED %s", tag, sym, ename(e));
    } else {
        T("%s: %s -> ok%s%s%s", tag, sym,
          ((uintptr_t)p & (PG - 1)) ? " unaligned" : "",
          addr ? (p == addr ? " =addr" : " !=addr") : "", errno_note(e));
    }
    errno = e;
    return p;
}

static void *mm(const char *tag, void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    int use64 = (int)(mmap_calls++ & 1);
    errno = ERRNO_SENTINEL;
    void *p = use64 ? sym_mmap64(addr, len, prot, flags, fd, (long)off)
                    : sym_mmap(addr, len, prot, flags, fd, (long)off);
    return log_map(tag, use64 ? "mmap64" : "mmap", p, errno, addr);
}

static void *mm64(const char *tag, void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    errno = ERRNO_SENTINEL;
    void *p = sym_mmap64(addr, len, prot, flags, fd, (long)off);
    return log_map(tag, "mmap64", p, errno, addr);
}

static void *anon(const char *tag, size_t npages)
{
    return mm(tag, NULL, npages * PG, RW, PA, -1, 0);
}

static int log_int(const char *tag, const char *what, int r, int e)
{
    if (r == 0)
        T("%s: %s -> 0%s", tag, what, errno_note(e));
    else if (r == -1)
        T("%s: %s -> -1 %s", tag, what, ename(e));
    else
        T("%s: %s -> %d?", tag, what, r);
    errno = e;
    return r;
}

static int un(const char *tag, void *a, size_t len)
{
    errno = ERRNO_SENTINEL;
    int r = munmap(a, len);
    return log_int(tag, "munmap", r, errno);
}

static int mp(const char *tag, void *a, size_t len, int prot)
{
    errno = ERRNO_SENTINEL;
    int r = mprotect(a, len, prot);
    return log_int(tag, "mprotect", r, errno);
}

static int ma(const char *tag, void *a, size_t len, int adv)
{
    errno = ERRNO_SENTINEL;
    int r = madvise(a, len, adv);
    return log_int(tag, "madvise", r, errno);
}

static int ml(const char *tag, void *a, size_t len)
{
    errno = ERRNO_SENTINEL;
    int r = mlock(a, len);
    return log_int(tag, "mlock", r, errno);
}

static int mul(const char *tag, void *a, size_t len)
{
    errno = ERRNO_SENTINEL;
    int r = munlock(a, len);
    return log_int(tag, "munlock", r, errno);
}

/*
 * mremap.  " =old"/" !=old" is printed only where the case decides it: a
 * MAYMOVE grow whose next pages the case does not control may grow in place
 * or move, both correct — use mr_free() for those.
 */
static int mr_no_rel;

static void *mr(const char *tag, void *old, size_t ol, size_t nl, int flags, void *na)
{
    int show_rel = !mr_no_rel;
    mr_no_rel = 0;
    errno = ERRNO_SENTINEL;
    void *p = mremap(old, ol, nl, flags, na);
    int e = errno;
    if (p == MAP_FAILED) {
        T("%s: mremap -> MAP_FAILED %s", tag, ename(e));
    } else {
        T("%s: mremap -> ok%s%s%s%s", tag,
          ((uintptr_t)p & (PG - 1)) ? " unaligned" : "",
          !show_rel ? "" : p == old ? " =old" : " !=old",
          (flags & MREMAP_FIXED) ? (p == na ? " =new" : " !=new") : "",
          errno_note(e));
    }
    errno = e;
    return p;
}

static void *mr_free(const char *tag, void *old, size_t ol, size_t nl, int flags, void *na)
{
    mr_no_rel = 1;
    return mr(tag, old, ol, nl, flags, na);
}

/* Run-length text of a per-page vector ("w*3 -*1"). */
static void rle(char *out, size_t cap, const char *v, size_t n)
{
    size_t o = 0;
    snprintf(out, cap, "none");
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j] == v[i])
            j++;
        int k = snprintf(out + o, cap - o, "%s%c*%zu", o ? " " : "", v[i], j - i);
        if (k < 0 || (size_t)k >= cap - o) {
            snprintf(out + (cap > 5 ? cap - 5 : 0), 5, "...");
            return;
        }
        o += (size_t)k;
        i = j;
    }
}

static char vecbuf[(size_t)64 << 10];     /* one byte per page, up to 256 MiB */

/* mincore; on success prints the residency of every page. */
static int mc(const char *tag, void *a, size_t len, int show)
{
    size_t n = (len + PG - 1) / PG;
    unsigned char *v = (unsigned char *)vecbuf;
    if (n > sizeof vecbuf)
        n = sizeof vecbuf;
    errno = ERRNO_SENTINEL;
    int r = mincore(a, len, v);
    int e = errno;
    if (r == 0 && show) {
        char text[256];
        for (size_t i = 0; i < n; i++)
            vecbuf[i] = (v[i] & 1) ? '1' : '0';
        rle(text, sizeof text, vecbuf, n);
        T("%s: mincore -> 0 resident %s%s", tag, text, errno_note(e));
        errno = e;
        return 0;
    }
    return log_int(tag, "mincore", r, e);
}

static void rel(const char *tag, int yes)
{
    T("%s: %s", tag, yes ? "yes" : "no");
}

/* --------------------------------------------------------------- content */

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The pattern of page `page` (its index in the region it was written to). */
static inline uint64_t pat(uint64_t seed, size_t page, size_t word)
{
    return mix64(seed * 0x100000001B3ull ^ ((uint64_t)page << 9 | word));
}

static void fill(void *base, size_t first, size_t n, uint64_t seed)
{
    for (size_t p = first; p < first + n; p++) {
        uint64_t *w = (uint64_t *)AT(base, p);
        for (size_t i = 0; i < PG / 8; i++)
            w[i] = pat(seed, p, i);
    }
}

/* First page in [first, first+n) whose content is not the pattern, or -1. */
static long bad_page(const void *base, size_t first, size_t n, uint64_t seed)
{
    for (size_t p = first; p < first + n; p++) {
        const volatile uint64_t *w = (const volatile uint64_t *)AT(base, p);
        for (size_t i = 0; i < PG / 8; i++)
            if (w[i] != pat(seed, p, i))
                return (long)p;
    }
    return -1;
}

static uint64_t csum(const void *base, size_t first, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t p = first; p < first + n; p++) {
        const volatile uint64_t *w = (const volatile uint64_t *)AT(base, p);
        for (size_t i = 0; i < PG / 8; i++)
            h = (h ^ w[i]) * 0x100000001B3ull;
    }
    return h;
}

/* Pages [first, first+n) of base hold the pattern of seed. */
static void content(const char *tag, void *base, size_t first, size_t n, uint64_t seed)
{
    long b = bad_page(base, first, n, seed);
    uint64_t h = csum(base, first, n);
    if (b < 0)
        T("%s: content ok %016llx", tag, (unsigned long long)h);
    else
        T("%s: content BAD from page %ld %016llx", tag, b, (unsigned long long)h);
}

static long nonzero_page(const void *base, size_t first, size_t n)
{
    for (size_t p = first; p < first + n; p++) {
        const volatile uint64_t *w = (const volatile uint64_t *)AT(base, p);
        for (size_t i = 0; i < PG / 8; i++)
            if (w[i])
                return (long)p;
    }
    return -1;
}

static void zero(const char *tag, void *base, size_t first, size_t n)
{
    long b = nonzero_page(base, first, n);
    if (b < 0)
        T("%s: zero yes", tag);
    else
        T("%s: zero NO from page %ld", tag, b);
}

/* ---------------------------------------------------------- access probe */

static sigjmp_buf probe_jb;
static volatile sig_atomic_t probe_sig;

static void probe_handler(int sig)
{
    probe_sig = sig;
    siglongjmp(probe_jb, 1);
}

static __attribute__((noinline)) char probe_one(volatile char *q)
{
    volatile int stage = 0;
    if (sigsetjmp(probe_jb, 1) == 0) {
        char v = *q;
        stage = 1;
        *q = v;
        stage = 2;
    }
    if (stage == 2)
        return 'w';
    if (stage == 1)
        return probe_sig == SIGBUS ? 'b' : 'r';
    return probe_sig == SIGBUS ? 'B' : '-';
}

/* Reads up to n bytes from fd until end of file or an error, and closes it:
 * the bytes read. */
static size_t read_all(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got;
}

/* Reads up to n bytes of a child's answer from fd (read_all) and reaps the
 * child: the bytes read, *ok whether the child exited with status 0. */
static size_t child_answer(int fd, pid_t pid, char *buf, size_t n, int *ok)
{
    size_t got = read_all(fd, buf, n);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    return got;
}

/* Fills vecbuf[0..n) with the access class of each page, probed in a child. */
static int probe_vec(void *base, size_t n)
{
    int fds[2];
    if (n > sizeof vecbuf)
        n = sizeof vecbuf;
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = probe_handler;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        char buf[4096];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            buf[k++] = probe_one((volatile char *)AT(base, i));
            if (k == sizeof buf) {
                write_all(fds[1], buf, k);
                k = 0;
            }
        }
        write_all(fds[1], buf, k);
        _exit(0);
    }
    close(fds[1]);
    int ok;
    size_t got = child_answer(fds[0], pid, vecbuf, n, &ok);
    for (size_t i = got; i < n; i++)
        vecbuf[i] = '?';
    if (!ok)
        return -2;
    return got == n ? 0 : -2;
}

/*
 * The checksum random_vmas prints of a mapping's pages that vecbuf says a
 * child could write, computed in a child too: a read in the parent would map
 * a page and, on a kernel without the shared zero page, give a VMA that had
 * none an anon_vma, which decides later merges -- the observation would
 * change what it observes.  ~0 if the child failed.
 */
static uint64_t csum_vec(void *base, size_t n)
{
    int fds[2];
    uint64_t h = ~0ull;
    if (pipe(fds) != 0)
        return h;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return h;
    }
    if (pid == 0) {
        close(fds[0]);
        uint64_t c = 0;
        for (size_t i = 0; i < n; i++)
            c = c * 31 + (vecbuf[i] == 'w' ? csum(base, i, 1) : 0);
        write_all(fds[1], (const char *)&c, sizeof c);
        _exit(0);
    }
    close(fds[1]);
    uint64_t c;
    int ok;
    size_t got = child_answer(fds[0], pid, (char *)&c, sizeof c, &ok);
    return got == sizeof c && ok ? c : h;
}

static void probe(const char *tag, void *base, size_t n)
{
    char text[256];
    int r = probe_vec(base, n);
    if (r == -1) {
        T("%s: probe could not fork", tag);
        return;
    }
    rle(text, sizeof text, vecbuf, n);
    T("%s: pages %s%s", tag, text, r ? " (probe child died)" : "");
}

/* ------------------------------------------------------------- utilities */

/* Runs fn in a forked child; returns its exit status, or 128+signal. */
static int in_child(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(fn(arg));
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

static char procbuf[(size_t)256 << 10];

static size_t read_proc(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t n = read_all(fd, procbuf, sizeof procbuf - 1);
    procbuf[n] = 0;
    return n;
}

/* VmLck of this process in KiB. */
static long vmlck_kib(void)
{
    read_proc("/proc/self/status");
    char *s = strstr(procbuf, "VmLck:");
    return s ? strtol(s + 6, NULL, 10) : -1;
}

/*
 * An address at which len bytes are free: in the first gap of
 * /proc/self/maps above 1 TiB with 64 MiB of room on either side, 2 MiB
 * aligned.  Never returned to the transcript.
 */
static void *free_gap(size_t len)
{
    read_proc("/proc/self/maps");
    uintptr_t prev_end = (uintptr_t)1 << 40;
    char *s = procbuf;
    for (;;) {
        uintptr_t lo = 0, hi = 0;
        int have = s && *s;
        if (have) {
            lo = (uintptr_t)strtoull(s, &s, 16);
            hi = (uintptr_t)strtoull(s + 1, NULL, 16);
        } else {
            lo = (uintptr_t)0x7ff000000000ull;
        }
        if (lo > prev_end && lo - prev_end >= len + 128 * MiB) {
            uintptr_t a = (prev_end + 64 * MiB + 2 * MiB - 1) & ~(2 * MiB - 1);
            return (void *)a;
        }
        if (!have)
            return NULL;
        if (hi > prev_end)
            prev_end = hi;
        s = strchr(s, '\n');
        if (s)
            s++;
    }
}

static char tmpl_dir[256];

/* A temporary file of n pages holding the pattern of seed; unlinked. */
static int temp_file(size_t n, uint64_t seed, int flags)
{
    char path[300];
    const char *d = getenv("TMPDIR");
    snprintf(tmpl_dir, sizeof tmpl_dir, "%s", d && *d ? d : "/tmp");
    snprintf(path, sizeof path, "%s/mmapdiff.XXXXXX", tmpl_dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    static uint64_t page[PG / 8];
    for (size_t p = 0; p < n; p++) {
        for (size_t i = 0; i < PG / 8; i++)
            page[i] = pat(seed, p, i);
        if (pwrite(fd, page, PG, (off_t)(p * PG)) != (ssize_t)PG) {
            close(fd);
            unlink(path);
            return -1;
        }
    }
    if (flags != O_RDWR) {
        int fd2 = open(path, flags | O_CLOEXEC);
        close(fd);
        fd = fd2;
    }
    unlink(path);
    return fd;
}

/* Whether page p of the file holds the pattern of seed. */
static int file_page_is(int fd, size_t p, uint64_t seed)
{
    static uint64_t page[PG / 8];
    if (pread(fd, page, PG, (off_t)(p * PG)) != (ssize_t)PG)
        return 0;
    for (size_t i = 0; i < PG / 8; i++)
        if (page[i] != pat(seed, p, i))
            return 0;
    return 1;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#define NEED(p)                 \
    do {                        \
        if ((p) == MAP_FAILED)  \
            return;             \
    } while (0)

/* ===================================================== anonymous private */

static void basic(size_t n)
{
    char *p = anon("map", n);
    NEED(p);
    zero("fresh", p, 0, n);
    probe("access", p, n);
    fill(p, 0, n, n);
    content("filled", p, 0, n, n);
    un("unmap", p, n * PG);
    probe("after unmap", p, n);
}

static void c_anon_1page(void) { basic(1); }
static void c_anon_5pages(void) { basic(5); }
static void c_anon_2mib(void) { basic(2 * MiB / PG); }
static void c_anon_64mib(void) { basic(64 * MiB / PG); }

static void c_anon_len_4097(void)
{
    char *p = mm("map 4097 bytes", NULL, 4097, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 2);
    probe("access", p, 2);
    fill(p, 0, 2, 7);
    mr("mremap same rounded size", p, 4097, 2 * PG, 0, NULL);
    content("kept", p, 0, 2, 7);
    un("unmap 8192", p, 2 * PG);
    probe("after unmap", p, 2);
}

static void c_anon_len_1(void)
{
    char *p = mm("map 1 byte", NULL, 1, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 1);
    probe("access", p, 1);
    un("unmap 1 byte", p, 1);
    probe("after unmap", p, 1);
}

static void c_anon_len_0(void)
{
    mm("map 0 bytes", NULL, 0, RW, PA, -1, 0);
}

static void c_anon_len_huge(void)
{
    mm("SIZE_MAX", NULL, SIZE_MAX, RW, PA, -1, 0);
    mm("SIZE_MAX-4095", NULL, SIZE_MAX - 4095, RW, PA, -1, 0);
    mm("PTRDIFF_MAX", NULL, (size_t)PTRDIFF_MAX, RW, PA, -1, 0);
    mm("128 TiB", NULL, (size_t)1 << 47, RW, PA, -1, 0);
    mm("1 TiB", NULL, (size_t)1 << 40, RW, PA, -1, 0);
}

static void c_anon_populate(void)
{
    char *p = mm("map 64 pages populate", NULL, 64 * PG, RW, PA | MAP_POPULATE, -1, 0);
    NEED(p);
    mc("populated", p, 64 * PG, 1);
    zero("fresh", p, 0, 64);
    probe("access", p, 64);
    un("unmap", p, 64 * PG);
    p = mm("map 2 MiB populate", NULL, 2 * MiB, RW, PA | MAP_POPULATE, -1, 0);
    NEED(p);
    mc("populated", p, 2 * MiB, 1);
    zero("fresh", p, 0, 512);
    un("unmap", p, 2 * MiB);
}

static void c_anon_noreserve(void)
{
    char *p = mm("map 1 GiB noreserve", NULL, 1024 * MiB, RW, PA | MAP_NORESERVE, -1, 0);
    NEED(p);
    size_t n = 1024 * MiB / PG;
    for (size_t i = 0; i < n; i += n / 16)
        fill(p, i, 1, 3);
    int ok = 1;
    for (size_t i = 0; i < n; i += n / 16)
        ok &= bad_page(p, i, 1, 3) < 0 && nonzero_page(p, i + 1, 1) < 0;
    rel("sparse pages keep content, neighbours zero", ok);
    un("unmap", p, 1024 * MiB);
    p = mm("map 8 pages noreserve", NULL, 8 * PG, RW, PA | MAP_NORESERVE, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 8);
    probe("access", p, 8);
    un("unmap", p, 8 * PG);
}

static void c_anon_mmap64(void)
{
    char *p = mm64("mmap64 4 pages", NULL, 4 * PG, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 4);
    fill(p, 0, 4, 64);
    content("filled", p, 0, 4, 64);
    un("unmap", p, 4 * PG);
    probe("after unmap", p, 4);
}

static void c_anon_offset(void)
{
    char *p = mm("offset 4096", NULL, 2 * PG, RW, PA, -1, 4096);
    if (p != MAP_FAILED) {
        zero("fresh", p, 0, 2);
        un("unmap", p, 2 * PG);
    }
    mm("offset 123", NULL, 2 * PG, RW, PA, -1, 123);
    p = mm("fd 0 ignored", NULL, 2 * PG, RW, PA, 0, 0);
    if (p != MAP_FAILED) {
        probe("access", p, 2);
        un("unmap", p, 2 * PG);
    }
}

static void c_anon_odd_flags(void)
{
    char *p = mm("unknown flag 0x400000", NULL, 3 * PG, RW, PA | 0x400000, -1, 0);
    if (p != MAP_FAILED) {
        zero("fresh", p, 0, 3);
        probe("access", p, 3);
        un("unmap", p, 3 * PG);
    }
    p = mm("MAP_DENYWRITE|MAP_EXECUTABLE ignored", NULL, 3 * PG, RW,
           PA | MAP_DENYWRITE | MAP_EXECUTABLE, -1, 0);
    if (p != MAP_FAILED) {
        probe("access", p, 3);
        un("unmap", p, 3 * PG);
    }
    mm("no type", NULL, PG, RW, MAP_ANONYMOUS, -1, 0);
    mm("shared_validate unknown", NULL, PG, RW, MAP_SHARED_VALIDATE | MAP_ANONYMOUS | 0x400000, -1, 0);
}

static void c_anon_prot_variants(void)
{
    char *p = mm("PROT_WRITE only", NULL, 2 * PG, PROT_WRITE, PA, -1, 0);
    if (p != MAP_FAILED) {
        probe("access", p, 2);
        un("unmap", p, 2 * PG);
    }
    p = mm("prot 0x40", NULL, PG, PROT_READ | 0x40, PA, -1, 0);
    if (p != MAP_FAILED)
        un("unmap", p, PG);
    p = mm("prot 0x100000", NULL, PG, PROT_READ | 0x100000, PA, -1, 0);
    if (p != MAP_FAILED)
        un("unmap", p, PG);
}

/* ========================================================= passed through */

static int child_shared(void *arg)
{
    char *p = arg;
    int bits = 0;
    if (bad_page(p, 0, 1, 21) < 0)
        bits |= 1;                 /* sees the parent's write */
    fill(p, 1, 1, 22);            /* parent must see this */
    return bits;
}

static void c_pass_shared_anon(void)
{
    char *p = mm("shared anon 4 pages", NULL, 4 * PG, RW, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 4);
    probe("access", p, 4);
    fill(p, 0, 1, 21);
    T("child sees parent write: status %d", in_child(child_shared, p));
    content("parent sees child write", p, 1, 1, 22);
    un("unmap middle", AT(p, 1), PG);
    probe("after partial unmap", p, 4);
    un("unmap rest", p, 4 * PG);
}

static void c_pass_file_private(void)
{
    int fd = temp_file(3, 31, O_RDWR);
    T("temp file: %s", fd >= 0 ? "ok" : "failed");
    if (fd < 0)
        return;
    char *p = mm("private file", NULL, 3 * PG, RW, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        content("file content", p, 0, 3, 31);
        probe("access", p, 3);
        fill(p, 0, 1, 32);
        rel("file unchanged by private write", file_page_is(fd, 0, 31));
        un("unmap", p, 3 * PG);
    }
    p = mm("private file offset 1 page", NULL, 2 * PG, PROT_READ, MAP_PRIVATE, fd, (off_t)PG);
    if (p != MAP_FAILED) {
        uint64_t ok = (uint64_t)(bad_page(p - PG, 1, 2, 31) < 0);
        rel("offset content", (int)ok);
        probe("access", p, 2);
        un("unmap", p, 2 * PG);
    }
    close(fd);
}

static void c_pass_file_shared(void)
{
    int fd = temp_file(2, 33, O_RDWR);
    if (fd < 0) {
        T("temp file failed");
        return;
    }
    char *p = mm("shared file", NULL, 2 * PG, RW, MAP_SHARED, fd, 0);
    NEED(p);
    content("file content", p, 0, 2, 33);
    fill(p, 1, 1, 34);
    rel("file sees shared write", file_page_is(fd, 1, 34));
    un("unmap", p, 2 * PG);
    close(fd);
}

static void c_pass_file_beyond_eof(void)
{
    int fd = temp_file(1, 35, O_RDWR);
    if (fd < 0) {
        T("temp file failed");
        return;
    }
    char *p = mm("3 pages of a 1-page file", NULL, 3 * PG, RW, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        probe("access", p, 3);
        un("unmap", p, 3 * PG);
    }
    close(fd);
}

static void c_pass_file_errors(void)
{
    int fd = temp_file(2, 36, O_RDWR);
    if (fd < 0) {
        T("temp file failed");
        return;
    }
    mm("unaligned offset", NULL, PG, PROT_READ, MAP_PRIVATE, fd, 100);
    close(fd);
    fd = temp_file(2, 36, O_WRONLY);
    mm("O_WRONLY fd", NULL, PG, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    fd = temp_file(2, 36, O_RDONLY);
    mm("shared writable on O_RDONLY fd", NULL, PG, RW, MAP_SHARED, fd, 0);
    char *p = mm("private writable on O_RDONLY fd", NULL, PG, RW, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED)
        un("unmap", p, PG);
    close(fd);
    mm("bad fd", NULL, PG, PROT_READ, MAP_PRIVATE, 1000, 0);
    mm("fd -1 without MAP_ANONYMOUS", NULL, PG, PROT_READ, MAP_PRIVATE, -1, 0);
}

static void c_pass_prot_read(void)
{
    char *p = mm("PROT_READ", NULL, 3 * PG, PROT_READ, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 3);
    probe("access", p, 3);
    un("unmap", p, 3 * PG);
}

static void c_pass_prot_none(void)
{
    char *p = mm("PROT_NONE", NULL, 3 * PG, PROT_NONE, PA, -1, 0);
    NEED(p);
    probe("access", p, 3);
    mp("make RW", p, 3 * PG, RW);
    zero("fresh", p, 0, 3);
    probe("access", p, 3);
    un("unmap", p, 3 * PG);
}

static void c_pass_prot_exec(void)
{
    char *p = mm("READ|EXEC", NULL, 2 * PG, PROT_READ | PROT_EXEC, PA, -1, 0);
    if (p != MAP_FAILED) {
        probe("access", p, 2);
        un("unmap", p, 2 * PG);
    }
    p = mm("RWX", NULL, 2 * PG, RW | PROT_EXEC, PA, -1, 0);
    if (p != MAP_FAILED) {
        zero("fresh", p, 0, 2);
        probe("access", p, 2);
        un("unmap", p, 2 * PG);
    }
}

static void c_pass_stack(void)
{
    char *p = mm("MAP_STACK", NULL, 8 * PG, RW, PA | MAP_STACK, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 8);
    probe("access", p, 8);
    un("unmap", p, 8 * PG);
}

static void c_pass_growsdown(void)
{
    char *p = mm("MAP_GROWSDOWN", NULL, 4 * PG, RW, PA | MAP_GROWSDOWN, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 4);
    probe("access", p, 4);
    mp("PROT_GROWSDOWN|READ on top page", AT(p, 3), PG, PROT_READ | PROT_GROWSDOWN);
    probe("access", p, 4);
    un("unmap", p, 4 * PG);
}

static void c_pass_32bit(void)
{
    char *p = mm("MAP_32BIT", NULL, 4 * PG, RW, PA | MAP_32BIT, -1, 0);
    NEED(p);
    rel("below 2 GiB", (uintptr_t)p + 4 * PG <= ((uintptr_t)1 << 31));
    zero("fresh", p, 0, 4);
    probe("access", p, 4);
    un("unmap", p, 4 * PG);
}

static void c_pass_locked(void)
{
    long before = vmlck_kib();
    char *p = mm("MAP_LOCKED", NULL, 8 * PG, RW, PA | MAP_LOCKED, -1, 0);
    NEED(p);
    T("VmLck grew by %ld KiB", vmlck_kib() - before);
    mc("resident", p, 8 * PG, 1);
    zero("fresh", p, 0, 8);
    un("unmap", p, 8 * PG);
    T("VmLck back by %ld KiB", vmlck_kib() - before);
}

static void c_pass_hugetlb(void)
{
    char *p = mm("MAP_HUGETLB 2 MiB", NULL, 2 * MiB, RW, PA | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED)
        un("unmap", p, 2 * MiB);
    p = mm("MAP_HUGETLB 4 KiB", NULL, PG, RW, PA | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED)
        un("unmap", p, 2 * MiB);
}

static void c_pass_hint_free(void)
{
    char *h = free_gap(16 * PG);
    if (!h) {
        T("no free gap");
        return;
    }
    char *p = mm("hint at free gap", h, 16 * PG, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 16);
    probe("access", p, 16);
    un("unmap", p, 16 * PG);
    p = mm("unaligned hint at free gap", h + 123, 4 * PG, RW, PA, -1, 0);
    NEED(p);
    rel("result is the hint rounded down", p == h);
    un("unmap", p, 4 * PG);
}

static void c_pass_hint_occupied(void)
{
    char *a = anon("map 4 pages", 4);
    NEED(a);
    fill(a, 0, 4, 41);
    char *p = mm("hint at live mapping", a + PG, 2 * PG, RW, PA, -1, 0);
    if (p != MAP_FAILED) {
        zero("fresh", p, 0, 2);
        un("unmap", p, 2 * PG);
    }
    content("live mapping kept", a, 0, 4, 41);
    un("unmap", a, 4 * PG);
}

static void c_pass_fixed_errors(void)
{
    char *a = anon("map 4 pages", 4);
    NEED(a);
    fill(a, 0, 4, 42);
    mm("MAP_FIXED unaligned", a + 100, PG, RW, PA | MAP_FIXED, -1, 0);
    mm("MAP_FIXED_NOREPLACE on live", a + PG, PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    mm("MAP_FIXED_NOREPLACE overlapping end", a + 3 * PG, 2 * PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    mm("MAP_FIXED_NOREPLACE unaligned", a + 100, PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    content("live mapping kept", a, 0, 4, 42);
    probe("access", a, 4);
    un("unmap", a, 4 * PG);
}

static void c_fixed_over_whole(void)
{
    char *a = anon("map 6 pages", 6);
    NEED(a);
    fill(a, 0, 6, 43);
    char *p = mm("MAP_FIXED over all of it", a, 6 * PG, RW, PA | MAP_FIXED, -1, 0);
    NEED(p);
    zero("replaced", p, 0, 6);
    probe("access", p, 6);
    fill(p, 0, 6, 44);
    un("unmap", p, 6 * PG);
    probe("after unmap", p, 6);
}

static void c_fixed_over_part(void)
{
    char *a = anon("map 4 pages", 4);
    NEED(a);
    fill(a, 0, 4, 45);
    char *p = mm("MAP_FIXED over pages 1-2", AT(a, 1), 2 * PG, RW, PA | MAP_FIXED, -1, 0);
    NEED(p);
    zero("replaced part", a, 1, 2);
    content("page 0 kept", a, 0, 1, 45);
    content("page 3 kept", a, 3, 1, 45);
    probe("access", a, 4);
    un("unmap replaced part", AT(a, 1), 2 * PG);
    probe("after unmap of the replaced part", a, 4);
    content("page 0 kept", a, 0, 1, 45);
    content("page 3 kept", a, 3, 1, 45);
    un("unmap all", a, 4 * PG);
    probe("after unmap", a, 4);
}

static void c_fixed_file_over_part(void)
{
    int fd = temp_file(2, 46, O_RDWR);
    if (fd < 0) {
        T("temp file failed");
        return;
    }
    char *a = anon("map 6 pages", 6);
    NEED(a);
    fill(a, 0, 6, 47);
    char *p = mm("MAP_FIXED shared file over pages 2-3", AT(a, 2), 2 * PG, RW, MAP_SHARED | MAP_FIXED, fd, 0);
    NEED(p);
    uint64_t ok = bad_page(AT(a, 2) - 0, 0, 2, 46) < 0;
    rel("file content in pages 2-3", (int)ok);
    content("pages 0-1 kept", a, 0, 2, 47);
    content("pages 4-5 kept", a, 4, 2, 47);
    fill(AT(a, 2), 0, 1, 48);
    rel("write reaches the file", file_page_is(fd, 0, 48));
    un("unmap all", a, 6 * PG);
    probe("after unmap", a, 6);
    close(fd);
    for (int i = 0; i < 8; i++) {
        char *q = anon("remap", 6);
        NEED(q);
        zero("fresh", q, 0, 6);
        probe("access", q, 6);
        fill(q, 0, 6, 49);
        un("unmap", q, 6 * PG);
    }
}

static void c_fixed_span_hole(void)
{
    char *a = anon("map 6 pages", 6);
    NEED(a);
    fill(a, 0, 6, 50);
    un("unmap pages 2-3", AT(a, 2), 2 * PG);
    char *p = mm("MAP_FIXED over mapping+hole+mapping", AT(a, 1), 4 * PG, RW, PA | MAP_FIXED, -1, 0);
    NEED(p);
    zero("replaced", a, 1, 4);
    content("page 0 kept", a, 0, 1, 50);
    content("page 5 kept", a, 5, 1, 50);
    probe("access", a, 6);
    un("unmap all", a, 6 * PG);
}

/* =================================================================== munmap */

static char *mapfilled(const char *tag, size_t n, uint64_t seed)
{
    char *p = anon(tag, n);
    if (p != MAP_FAILED)
        fill(p, 0, n, seed);
    return p;
}

static void c_munmap_whole(void)
{
    char *a = mapfilled("map 8 pages", 8, 51);
    NEED(a);
    un("unmap whole", a, 8 * PG);
    probe("after", a, 8);
}

static void c_munmap_head(void)
{
    char *a = mapfilled("map 8 pages", 8, 52);
    NEED(a);
    un("unmap head 3 pages", a, 3 * PG);
    probe("after", a, 8);
    content("rest kept", a, 3, 5, 52);
    un("unmap rest", AT(a, 3), 5 * PG);
    probe("after", a, 8);
}

static void c_munmap_tail(void)
{
    char *a = mapfilled("map 8 pages", 8, 53);
    NEED(a);
    un("unmap tail 3 pages", AT(a, 5), 3 * PG);
    probe("after", a, 8);
    content("rest kept", a, 0, 5, 53);
    un("unmap rest", a, 5 * PG);
    probe("after", a, 8);
}

static void c_munmap_middle(void)
{
    char *a = mapfilled("map 8 pages", 8, 54);
    NEED(a);
    un("unmap pages 3-4", AT(a, 3), 2 * PG);
    probe("after", a, 8);
    content("head kept", a, 0, 3, 54);
    content("tail kept", a, 5, 3, 54);
    fill(a, 0, 3, 55);
    fill(a, 5, 3, 56);
    content("head rewritten", a, 0, 3, 55);
    content("tail rewritten", a, 5, 3, 56);
    un("unmap head", a, 3 * PG);
    content("tail kept", a, 5, 3, 56);
    un("unmap tail", AT(a, 5), 3 * PG);
    probe("after", a, 8);
}

static void c_munmap_large_middle(void)
{
    size_t n = 16 * MiB / PG;
    char *a = mapfilled("map 16 MiB", n, 57);
    NEED(a);
    un("unmap 1 MiB at 5 MiB", a + 5 * MiB, MiB);
    content("head kept", a, 0, 5 * MiB / PG, 57);
    content("tail kept", a, 6 * MiB / PG, 10 * MiB / PG, 57);
    probe("after", a, n);
    un("unmap all", a, 16 * MiB);
    probe("after", a, n);
}

static void c_munmap_adjacent_mprotect(void)
{
    char *a = mapfilled("map 8 pages", 8, 58);
    NEED(a);
    mp("second half read-only (two VMAs)", AT(a, 4), 4 * PG, PROT_READ);
    probe("access", a, 8);
    un("unmap both in one call", a, 8 * PG);
    probe("after", a, 8);
}

static void c_munmap_adjacent_hint(void)
{
    char *a = mapfilled("map 8 pages", 8, 59);
    NEED(a);
    un("unmap second half", AT(a, 4), 4 * PG);
    char *b = mm("map 4 pages hinted at the freed half", AT(a, 4), 4 * PG, RW, PA, -1, 0);
    NEED(b);
    fill(b, 0, 4, 60);
    un("unmap both in one call", a, 8 * PG);
    probe("after", a, 8);
}

static void c_munmap_adjacent_fixed(void)
{
    char *a = mapfilled("map 8 pages", 8, 61);
    NEED(a);
    char *b = mm("MAP_FIXED shared anon over second half", AT(a, 4), 4 * PG, RW,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    NEED(b);
    content("first half kept", a, 0, 4, 61);
    zero("second half fresh", a, 4, 4);
    un("unmap both in one call", a, 8 * PG);
    probe("after", a, 8);
}

static void c_munmap_span_gap(void)
{
    char *a = mapfilled("map 9 pages", 9, 62);
    NEED(a);
    un("unmap pages 3-5 (gap)", AT(a, 3), 3 * PG);
    probe("after gap", a, 9);
    un("unmap mapping+gap+mapping", a, 9 * PG);
    probe("after", a, 9);
}

static void c_munmap_span_partial(void)
{
    char *a = mapfilled("map 9 pages", 9, 63);
    NEED(a);
    un("unmap pages 3-5 (gap)", AT(a, 3), 3 * PG);
    un("unmap pages 2-6 (ends of both mappings and the gap)", AT(a, 2), 5 * PG);
    probe("after", a, 9);
    content("pages 0-1 kept", a, 0, 2, 63);
    content("pages 7-8 kept", a, 7, 2, 63);
    un("unmap all", a, 9 * PG);
}

static void c_munmap_into_hole(void)
{
    char *a = mapfilled("map 4 pages", 4, 64);
    NEED(a);
    un("unmap pages 2-3", AT(a, 2), 2 * PG);
    un("unmap pages 1-3 (into the hole)", AT(a, 1), 3 * PG);
    probe("after", a, 4);
    content("page 0 kept", a, 0, 1, 64);
    un("unmap page 0", a, PG);
}

static void c_munmap_several_pieces(void)
{
    char *a = mapfilled("map 10 pages", 10, 65);
    NEED(a);
    un("unmap page 1", AT(a, 1), PG);
    un("unmap page 4", AT(a, 4), PG);
    un("unmap page 7", AT(a, 7), PG);
    probe("after", a, 10);
    content("page 0", a, 0, 1, 65);
    content("pages 2-3", a, 2, 2, 65);
    content("pages 5-6", a, 5, 2, 65);
    content("pages 8-9", a, 8, 2, 65);
    un("unmap all pieces in one call", a, 10 * PG);
    probe("after", a, 10);
}

static void c_munmap_unaligned_addr(void)
{
    char *a = mapfilled("map 4 pages", 4, 66);
    NEED(a);
    un("unmap at +1", a + 1, PG);
    un("unmap at +2048", a + 2048, 2 * PG);
    probe("after", a, 4);
    content("kept", a, 0, 4, 66);
    un("unmap", a, 4 * PG);
}

static void c_munmap_len_0(void)
{
    char *a = mapfilled("map 4 pages", 4, 67);
    NEED(a);
    un("unmap len 0", a, 0);
    un("unmap len 0 unaligned", a + 5, 0);
    probe("after", a, 4);
    content("kept", a, 0, 4, 67);
    un("unmap", a, 4 * PG);
}

static void c_munmap_len_unaligned(void)
{
    char *a = mapfilled("map 3 pages", 3, 68);
    NEED(a);
    un("unmap 4097 bytes", a, 4097);
    probe("after", a, 3);
    content("page 2 kept", a, 2, 1, 68);
    un("unmap 1 byte of page 2", AT(a, 2), 1);
    probe("after", a, 3);
}

static void c_munmap_len_overflow(void)
{
    char *a = mapfilled("map 4 pages", 4, 69);
    NEED(a);
    un("unmap SIZE_MAX", a, SIZE_MAX);
    un("unmap past the end of the address space", a, (size_t)1 << 47);
    un("unmap SIZE_MAX-4095", a, SIZE_MAX - 4095);
    probe("after", a, 4);
    content("kept", a, 0, 4, 69);
    un("unmap", a, 4 * PG);
}

static void c_munmap_never_mapped(void)
{
    char *h = free_gap(64 * PG);
    if (!h) {
        T("no free gap");
        return;
    }
    un("unmap free address space", h, 64 * PG);
    un("unmap it again", h, 64 * PG);
    probe("after", h, 4);
}

static void c_munmap_double(void)
{
    char *a = mapfilled("map 4 pages", 4, 70);
    NEED(a);
    un("unmap", a, 4 * PG);
    un("unmap again", a, 4 * PG);
    un("unmap a part again", AT(a, 1), PG);
    probe("after", a, 4);
}

/* ================================================================ the hole */

/* Three pages, the middle one unmapped.  Returns the first page. */
static char *hole3(uint64_t seed)
{
    char *a = mapfilled("map 3 pages", 3, seed);
    if (a != MAP_FAILED)
        un("unmap the middle page", AT(a, 1), PG);
    return a;
}

static void c_hole_mprotect(void)
{
    char *a = hole3(71);
    NEED(a);
    mp("mprotect hole RW", AT(a, 1), PG, RW);
    mp("mprotect hole NONE", AT(a, 1), PG, PROT_NONE);
    mp("mprotect hole READ", AT(a, 1), PG, PROT_READ);
    probe("after", a, 3);
    un("unmap", a, 3 * PG);
}

static void c_hole_madvise(void)
{
    char *a = hole3(72);
    NEED(a);
    static const struct { int adv; const char *name; } advs[] = {
        { MADV_NORMAL, "NORMAL" }, { MADV_RANDOM, "RANDOM" }, { MADV_WILLNEED, "WILLNEED" },
        { MADV_DONTNEED, "DONTNEED" }, { MADV_FREE, "FREE" }, { MADV_DONTFORK, "DONTFORK" },
        { MADV_DOFORK, "DOFORK" }, { MADV_WIPEONFORK, "WIPEONFORK" }, { MADV_HUGEPAGE, "HUGEPAGE" },
        { MADV_NOHUGEPAGE, "NOHUGEPAGE" }, { MADV_COLD, "COLD" }, { MADV_PAGEOUT, "PAGEOUT" },
        { MADV_POPULATE_WRITE, "POPULATE_WRITE" }, { MADV_GUARD_INSTALL, "GUARD_INSTALL" },
        { MADV_GUARD_REMOVE, "GUARD_REMOVE" }, { MADV_DONTDUMP, "DONTDUMP" },
    };
    char tag[64];
    for (size_t i = 0; i < sizeof advs / sizeof advs[0]; i++) {
        snprintf(tag, sizeof tag, "madvise hole %s", advs[i].name);
        ma(tag, AT(a, 1), PG, advs[i].adv);
    }
    probe("after", a, 3);
    content("page 0 kept", a, 0, 1, 72);
    content("page 2 kept", a, 2, 1, 72);
    un("unmap", a, 3 * PG);
}

static void c_hole_mincore(void)
{
    char *a = hole3(73);
    NEED(a);
    mc("mincore hole", AT(a, 1), PG, 1);
    mc("mincore page 0", a, PG, 1);
    un("unmap", a, 3 * PG);
}

static void c_hole_mremap(void)
{
    char *a = hole3(74);
    NEED(a);
    mr("mremap hole grow", AT(a, 1), PG, 2 * PG, 0, NULL);
    mr("mremap hole grow maymove", AT(a, 1), PG, 2 * PG, MREMAP_MAYMOVE, NULL);
    mr("mremap hole same size", AT(a, 1), PG, PG, 0, NULL);
    mr("mremap hole shrink", AT(a, 1), PG, PG / 2, 0, NULL);
    probe("after", a, 3);
    un("unmap", a, 3 * PG);
}

static void c_hole_mlock(void)
{
    char *a = hole3(75);
    NEED(a);
    ml("mlock hole", AT(a, 1), PG);
    mul("munlock hole", AT(a, 1), PG);
    probe("after", a, 3);
    un("unmap", a, 3 * PG);
}

static void c_hole_map_fixed(void)
{
    char *a = hole3(76);
    NEED(a);
    char *p = mm("MAP_FIXED at the hole", AT(a, 1), PG, RW, PA | MAP_FIXED, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 1);
    probe("access", a, 3);
    content("page 0 kept", a, 0, 1, 76);
    content("page 2 kept", a, 2, 1, 76);
    un("unmap all", a, 3 * PG);
}

static void c_hole_map_noreplace(void)
{
    char *a = hole3(77);
    NEED(a);
    mm("MAP_FIXED_NOREPLACE 2 pages at the 1-page hole", AT(a, 1), 2 * PG, RW,
       PA | MAP_FIXED_NOREPLACE, -1, 0);
    char *p = mm("MAP_FIXED_NOREPLACE at the hole", AT(a, 1), PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 1);
    probe("access", a, 3);
    un("unmap all", a, 3 * PG);
}

static void c_hole_hint(void)
{
    char *a = hole3(78);
    NEED(a);
    char *p = mm("hint at the hole", AT(a, 1), PG, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, 1);
    fill(p, 0, 1, 79);
    probe("access", a, 3);
    un("unmap hinted page", p, PG);
    char *q = mm("2-page hint at the 1-page hole", AT(a, 1), 2 * PG, RW, PA, -1, 0);
    if (q != MAP_FAILED) {
        zero("fresh", q, 0, 2);
        un("unmap", q, 2 * PG);
    }
    content("page 0 kept", a, 0, 1, 78);
    content("page 2 kept", a, 2, 1, 78);
    un("unmap all", a, 3 * PG);
}

static void c_hole_big_hint(void)
{
    size_t n = 4 * MiB / PG;
    char *a = mapfilled("map 4 MiB", n, 80);
    NEED(a);
    un("unmap 1 MiB at 1 MiB", a + MiB, MiB);
    char *p = mm("hint 1 MiB at the hole", a + MiB, MiB, RW, PA, -1, 0);
    NEED(p);
    zero("fresh", p, 0, MiB / PG);
    content("head kept", a, 0, MiB / PG, 80);
    content("tail kept", a, 2 * MiB / PG, 2 * MiB / PG, 80);
    un("unmap 4 MiB", a, 4 * MiB);
}

static void c_hole_map_fixed_file(void)
{
    int fd = temp_file(1, 81, O_RDWR);
    if (fd < 0) {
        T("temp file failed");
        return;
    }
    char *a = hole3(82);
    NEED(a);
    char *p = mm("MAP_FIXED private file at the hole", AT(a, 1), PG, RW, MAP_PRIVATE | MAP_FIXED, fd, 0);
    NEED(p);
    content("file content", p, 0, 1, 81);
    probe("access", a, 3);
    un("unmap all", a, 3 * PG);
    close(fd);
}

static void c_hole_span_mprotect(void)
{
    char *a = hole3(83);
    NEED(a);
    mp("mprotect READ over page+hole+page", a, 3 * PG, PROT_READ);
    probe("after", a, 3);
    mp("mprotect READ over page+hole", a, 2 * PG, PROT_READ);
    mp("mprotect RW over hole+page", AT(a, 1), 2 * PG, RW);
    probe("after", a, 3);
    content("page 0 kept", a, 0, 1, 83);
    content("page 2 kept", a, 2, 1, 83);
    un("unmap", a, 3 * PG);
}

static void c_hole_span_madvise(void)
{
    char *a = hole3(84);
    NEED(a);
    ma("madvise DONTNEED over page+hole+page", a, 3 * PG, MADV_DONTNEED);
    zero("page 0", a, 0, 1);
    zero("page 2", a, 2, 1);
    fill(a, 0, 1, 85);
    fill(a, 2, 1, 85);
    ma("madvise WILLNEED over page+hole+page", a, 3 * PG, MADV_WILLNEED);
    ma("madvise NORMAL over page+hole+page", a, 3 * PG, MADV_NORMAL);
    content("page 0", a, 0, 1, 85);
    content("page 2", a, 2, 1, 85);
    probe("after", a, 3);
    un("unmap", a, 3 * PG);
}

static void c_hole_span_mincore(void)
{
    char *a = hole3(86);
    NEED(a);
    mc("mincore page+hole+page", a, 3 * PG, 1);
    mc("mincore page+hole", a, 2 * PG, 1);
    un("unmap", a, 3 * PG);
}

static void c_hole_span_mlock(void)
{
    char *a = hole3(87);
    NEED(a);
    long before = vmlck_kib();
    ml("mlock page+hole+page", a, 3 * PG);
    T("VmLck grew by %ld KiB", vmlck_kib() - before);
    mul("munlock page+hole+page", a, 3 * PG);
    T("VmLck grew by %ld KiB", vmlck_kib() - before);
    un("unmap", a, 3 * PG);
}

static void c_hole_guard_remove(void)
{
    char *a = hole3(88);
    NEED(a);
    ma("GUARD_REMOVE on the hole", AT(a, 1), PG, MADV_GUARD_REMOVE);
    ma("GUARD_REMOVE over page+hole+page", a, 3 * PG, MADV_GUARD_REMOVE);
    probe("after", a, 3);
    content("page 0 kept", a, 0, 1, 88);
    un("unmap", a, 3 * PG);
}

/* ================================================================= mremap */

static void c_mremap_shrink(void)
{
    char *a = mapfilled("map 4 pages", 4, 91);
    NEED(a);
    char *p = mr("shrink to 2 pages", a, 4 * PG, 2 * PG, 0, NULL);
    NEED(p);
    content("kept", a, 0, 2, 91);
    probe("after", a, 4);
    un("unmap", a, 2 * PG);
}

static void c_mremap_shrink_inner(void)
{
    char *a = mapfilled("map 4 pages", 4, 92);
    NEED(a);
    mr("shrink pages 0-1 to page 0", a, 2 * PG, PG, 0, NULL);
    probe("after", a, 4);
    content("page 0 kept", a, 0, 1, 92);
    content("pages 2-3 kept", a, 2, 2, 92);
    un("unmap", a, 4 * PG);
}

static void c_mremap_shrink_unaligned(void)
{
    char *a = mapfilled("map 4 pages", 4, 93);
    NEED(a);
    mr("shrink to 4097 bytes", a, 4 * PG, 4097, 0, NULL);
    probe("after", a, 4);
    content("kept", a, 0, 2, 93);
    mr("same size unaligned", a, 4097, 4098, 0, NULL);
    un("unmap", a, 2 * PG);
}

static void c_mremap_same_size(void)
{
    char *a = mapfilled("map 4 pages", 4, 94);
    NEED(a);
    mr("same size", a, 4 * PG, 4 * PG, 0, NULL);
    mr("same size maymove", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE, NULL);
    content("kept", a, 0, 4, 94);
    un("unmap", a, 4 * PG);
}

static void c_mremap_grow_in_place(void)
{
    char *a = mapfilled("map 2 pages", 2, 95);
    NEED(a);
    un("unmap page 1", AT(a, 1), PG);
    char *p = mr("grow page 0 to 2 pages, no MAYMOVE", a, PG, 2 * PG, 0, NULL);
    NEED(p);
    content("page 0 kept", a, 0, 1, 95);
    zero("page 1 fresh", a, 1, 1);
    probe("access", a, 2);
    un("unmap", a, 2 * PG);
}

static void c_mremap_grow_in_place_big(void)
{
    size_t n = 4 * MiB / PG;
    char *a = mapfilled("map 4 MiB", n, 96);
    NEED(a);
    un("unmap the upper 3 MiB", a + MiB, 3 * MiB);
    char *p = mr("grow 1 MiB to 4 MiB, no MAYMOVE", a, MiB, 4 * MiB, 0, NULL);
    NEED(p);
    content("head kept", a, 0, MiB / PG, 96);
    zero("grown part fresh", a, MiB / PG, 3 * MiB / PG);
    fill(a, MiB / PG, 3 * MiB / PG, 97);
    content("grown part writable", a, MiB / PG, 3 * MiB / PG, 97);
    un("unmap", a, 4 * MiB);
}

static void c_mremap_grow_blocked_self(void)
{
    char *a = mapfilled("map 2 pages", 2, 98);
    NEED(a);
    mr("grow page 0 to 2 pages (page 1 is mapped)", a, PG, 2 * PG, 0, NULL);
    content("kept", a, 0, 2, 98);
    probe("after", a, 2);
    un("unmap", a, 2 * PG);
}

static void c_mremap_grow_blocked_neighbour(void)
{
    char *a = mapfilled("map 2 pages", 2, 99);
    NEED(a);
    un("unmap page 1", AT(a, 1), PG);
    char *b = mm("read-only page at page 1", AT(a, 1), PG, PROT_READ, PA | MAP_FIXED_NOREPLACE, -1, 0);
    NEED(b);
    mr("grow page 0 to 2 pages, no MAYMOVE", a, PG, 2 * PG, 0, NULL);
    probe("after", a, 2);
    content("page 0 kept", a, 0, 1, 99);
    un("unmap", a, 2 * PG);
}

static void c_mremap_maymove_forced(void)
{
    char *a = mapfilled("map 8 pages", 8, 100);
    NEED(a);
    char *p = mr("grow pages 0-3 to 16 pages, MAYMOVE", a, 4 * PG, 16 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("moved content", p, 0, 4, 100);
    zero("grown part fresh", p, 4, 12);
    probe("new range", p, 16);
    probe("old range", a, 8);
    content("pages 4-7 stay", a, 4, 4, 100);
    un("unmap new", p, 16 * PG);
    un("unmap old rest", AT(a, 4), 4 * PG);
}

static void c_mremap_maymove_blocked(void)
{
    char *a = mapfilled("map 2 pages", 2, 101);
    NEED(a);
    un("unmap page 1", AT(a, 1), PG);
    char *b = mm("read-only page at page 1", AT(a, 1), PG, PROT_READ, PA | MAP_FIXED_NOREPLACE, -1, 0);
    NEED(b);
    char *p = mr("grow page 0 to 4 pages, MAYMOVE", a, PG, 4 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("moved content", p, 0, 1, 101);
    zero("grown part fresh", p, 1, 3);
    probe("old page 0 and neighbour", a, 2);
    un("unmap new", p, 4 * PG);
    un("unmap neighbour", b, PG);
}

static void c_mremap_maymove_any(void)
{
    char *a = mapfilled("map 16 pages", 16, 102);
    NEED(a);
    char *p = mr_free("grow to 64 pages, MAYMOVE", a, 16 * PG, 64 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 16, 102);
    zero("grown part fresh", p, 16, 48);
    if (p != a) {
        probe_vec(a, 16);
        rel("moved: old range gone", memchr(vecbuf, 'w', 16) == NULL);
    } else {
        rel("moved: old range gone", 1);
    }
    un("unmap", p, 64 * PG);
}

static void c_mremap_maymove_big(void)
{
    size_t n = 2 * MiB / PG, m = 64 * MiB / PG;
    char *a = mapfilled("map 2 MiB", n, 103);
    NEED(a);
    char *p = mr_free("grow to 64 MiB, MAYMOVE", a, 2 * MiB, 64 * MiB, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, n, 103);
    zero("grown part fresh", p, n, m - n);
    fill(p, n, m - n, 104);
    char *q = mr("shrink to 3 MiB", p, 64 * MiB, 3 * MiB, MREMAP_MAYMOVE, NULL);
    NEED(q);
    content("content", q, 0, n, 103);
    content("content", q, n, MiB / PG, 104);
    probe("after shrink", p, m);
    un("unmap", q, 3 * MiB);
}

static void c_mremap_fixed_to_hole(void)
{
    /* The source first: mapped after the hole was made it could land in it.
     * It owns 6 pages so that growing back into its place is safe. */
    char *a = mapfilled("map 6 pages", 6, 105);
    NEED(a);
    /* A spacer, so that the target cannot be placed right after a's last
     * 4 pages (the grow back into a's place would then overlap it). */
    char *spacer = anon("map spacer 16 pages", 16);
    NEED(spacer);
    un("unmap its last 2 pages", AT(a, 4), 2 * PG);
    char *t = anon("map target 8 pages", 8);
    NEED(t);
    un("unmap target (now a hole)", t, 8 * PG);
    char *p = mr("MREMAP_FIXED to the hole", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t);
    NEED(p);
    content("moved content", t, 0, 4, 105);
    probe("old range", a, 4);
    probe("new range", t, 8);
    p = mr("MREMAP_FIXED grow back to the old place", t, 4 * PG, 6 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, a);
    NEED(p);
    content("moved back", a, 0, 4, 105);
    zero("grown part", a, 4, 2);
    probe("target after", t, 8);
    un("unmap", a, 6 * PG);
    un("unmap spacer", spacer, 16 * PG);
}

static void c_mremap_fixed_over_mapping(void)
{
    char *t = mapfilled("map target 6 pages", 6, 106);
    NEED(t);
    char *a = mapfilled("map 4 pages", 4, 107);
    NEED(a);
    char *p = mr("MREMAP_FIXED over pages 1-4 of the target", a, 4 * PG, 4 * PG,
                 MREMAP_MAYMOVE | MREMAP_FIXED, AT(t, 1));
    NEED(p);
    content("target page 0 kept", t, 0, 1, 106);
    uint64_t ok = bad_page(AT(t, 1), 0, 4, 107) < 0;
    rel("pages 1-4 hold the moved content", (int)ok);
    content("target page 5 kept", t, 5, 1, 106);
    probe("old range", a, 4);
    un("unmap target", t, 6 * PG);
}

static void c_mremap_fixed_shrink(void)
{
    char *a = mapfilled("map 6 pages", 6, 108);
    NEED(a);
    char *t = anon("map target 4 pages", 4);
    NEED(t);
    un("unmap target (now a hole)", t, 4 * PG);
    char *p = mr("MREMAP_FIXED shrinking 6 to 2 pages", a, 6 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t);
    NEED(p);
    content("moved content", t, 0, 2, 108);
    probe("new range", t, 4);
    probe("old range", a, 6);
    un("unmap", t, 2 * PG);
}

static void c_mremap_dontunmap(void)
{
    char *a = mapfilled("map 4 pages", 4, 109);
    NEED(a);
    char *p = mr("DONTUNMAP", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    NEED(p);
    content("new range has the content", p, 0, 4, 109);
    probe("old range", a, 4);
    zero("old range reads zero", a, 0, 4);
    fill(a, 0, 4, 110);
    content("old range writable", a, 0, 4, 110);
    content("new range unchanged", p, 0, 4, 109);
    un("unmap old", a, 4 * PG);
    un("unmap new", p, 4 * PG);
}

static void c_mremap_dontunmap_fixed(void)
{
    char *a = mapfilled("map 4 pages", 4, 111);
    NEED(a);
    char *t = anon("map target 4 pages", 4);
    NEED(t);
    un("unmap target (now a hole)", t, 4 * PG);
    char *p = mr("DONTUNMAP|FIXED to the hole", a, 4 * PG, 4 * PG,
                 MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED, t);
    NEED(p);
    content("moved", t, 0, 4, 111);
    zero("old reads zero", a, 0, 4);
    un("unmap old", a, 4 * PG);
    un("unmap new", t, 4 * PG);
}

/* MREMAP_DONTUNMAP without MREMAP_FIXED: the kernel takes new_address as a
 * hint and checks it as a fixed address (EINVAL when unaligned, past the
 * user address space, or overlapping the old range); a free aligned hint
 * moves the pages as NULL does.  Served and kernel mappings alike. */
static void dontunmap_hints(const char *what, char *a, size_t n)
{
    T("-- %s", what);
    char *hole = anon("map a hole", n);
    if (!hole)
        return;
    un("unmap it", hole, n * PG);
    mr("DONTUNMAP hint unaligned", a, n * PG, n * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, hole + 1);
    mr("DONTUNMAP hint inside the old range", a, n * PG, n * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP,
       AT(a, 1));
    mr("DONTUNMAP hint past the address space", a, n * PG, n * PG,
       MREMAP_MAYMOVE | MREMAP_DONTUNMAP, (void *)(((uintptr_t)1 << 47) - PG));
    char *p = mr("DONTUNMAP hint at a hole", a, n * PG, n * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP,
                 hole);
    if (p == MAP_FAILED)
        return;
    content("moved", p, 0, n, 121);
    zero("old reads zero", a, 0, n);
    un("unmap new", p, n * PG);
}

static void c_mremap_dontunmap_hint(void)
{
    char *a = mapfilled("map 4 pages", 4, 121);
    NEED(a);
    dontunmap_hints("served", a, 4);
    un("unmap old", a, 4 * PG);
    /* A mapping of the kernel's (read-only at first: never served). */
    char *k = mmap(NULL, 4 * PG, PROT_READ, PA, -1, 0);
    T("map 4 read-only pages -> %s", k == MAP_FAILED ? ename(errno) : "ok");
    if (k == MAP_FAILED)
        return;
    mprotect(k, 4 * PG, RW);
    fill(k, 0, 4, 121);
    dontunmap_hints("the kernel's", k, 4);
    un("unmap old", k, 4 * PG);
}

static void c_mremap_errors(void)
{
    char *a = mapfilled("map 4 pages", 4, 112);
    NEED(a);
    char *t = anon("map target 4 pages", 4);
    NEED(t);
    mr("bad flags 0x80", a, 4 * PG, 8 * PG, 0x80, NULL);
    mr("bad flags 0x80|MAYMOVE", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE | 0x80, NULL);
    mr("old_len 0 on a private mapping", a, 0, 2 * PG, MREMAP_MAYMOVE, NULL);
    mr("old_len 0 without MAYMOVE", a, 0, 2 * PG, 0, NULL);
    mr("FIXED without MAYMOVE", a, 4 * PG, 4 * PG, MREMAP_FIXED, t);
    mr("FIXED overlapping the old range", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, AT(a, 2));
    mr("FIXED unaligned new address", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t + 1);
    mr("DONTUNMAP without MAYMOVE", a, 4 * PG, 4 * PG, MREMAP_DONTUNMAP, NULL);
    mr("DONTUNMAP growing", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    mr("unaligned old address", a + 1, PG, 2 * PG, MREMAP_MAYMOVE, NULL);
    mr("new_len 0", a, 4 * PG, 0, MREMAP_MAYMOVE, NULL);
    mr("old_len past the mapping", a, 8 * PG, 16 * PG, MREMAP_MAYMOVE, NULL);
    mr("huge new_len", a, 4 * PG, (size_t)1 << 47, MREMAP_MAYMOVE, NULL);
    mr("SIZE_MAX new_len", a, 4 * PG, SIZE_MAX, MREMAP_MAYMOVE, NULL);
    content("kept", a, 0, 4, 112);
    probe("after", a, 4);
    un("unmap", a, 4 * PG);
    un("unmap target", t, 4 * PG);
}

static void c_mremap_span_two_vmas(void)
{
    char *a = mapfilled("map 4 pages", 4, 113);
    NEED(a);
    mp("page 2-3 read-only", AT(a, 2), 2 * PG, PROT_READ);
    char *r = mr("mremap across two VMAs", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    if (r != MAP_FAILED) {
        /* Not what the kernel does (it refuses: EFAULT); do not touch the
         * old address, which is gone, so that the rest of the run goes on. */
        un("unmap where it went", r, 8 * PG);
        return;
    }
    mr("same size across two VMAs", a, 4 * PG, 4 * PG, 0, NULL);
    content("kept", a, 0, 4, 113);
    probe("after", a, 4);
    un("unmap", a, 4 * PG);
}

/*
 * The program's VMAs inside one mapping: mprotect, madvise and mlock of part
 * of it split it where they change something, and calls that make the parts
 * equal again merge them; mremap resizes one VMA only.
 */
static void c_mremap_split_merged(void)
{
    char *a = mapfilled("map 4 pages", 4, 200);
    NEED(a);
    mp("pages 2-3 read-only", AT(a, 2), 2 * PG, PROT_READ);
    mp("pages 2-3 read-write again (merged)", AT(a, 2), 2 * PG, RW);
    char *p = mr_free("grow 4 to 8 pages, MAYMOVE", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 200);
    zero("grown part", p, 4, 4);
    probe("after", p, 8);
    un("unmap", p, 8 * PG);
}

static void c_mremap_split_same_prot(void)
{
    char *a = mapfilled("map 4 pages", 4, 201);
    NEED(a);
    mp("pages 1-2 read-write (no change: no split)", AT(a, 1), 2 * PG, RW);
    char *p = mr_free("grow 4 to 8 pages, MAYMOVE", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 201);
    un("unmap", p, 8 * PG);
    char *b = mapfilled("map 4 pages", 4, 202);
    NEED(b);
    mp("all read-only", b, 4 * PG, PROT_READ);
    mp("pages 1-2 read-only (no change)", AT(b, 1), 2 * PG, PROT_READ);
    p = mr_free("grow 4 to 8 pages, MAYMOVE", b, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 202);
    probe("grown part read-only too", p, 8);
    un("unmap", p, 8 * PG);
}

static void c_mremap_split_shrink(void)
{
    char *a = mapfilled("map 6 pages", 6, 203);
    NEED(a);
    mp("pages 2-3 read-only", AT(a, 2), 2 * PG, PROT_READ);
    mr("same size across three VMAs", a, 6 * PG, 6 * PG, 0, NULL);
    mr("same size across, MAYMOVE", a, 6 * PG, 6 * PG, MREMAP_MAYMOVE, NULL);
    mr("DONTUNMAP across", a, 6 * PG, 6 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    mr("grow pages 0-2 across", a, 3 * PG, 4 * PG, MREMAP_MAYMOVE, NULL);
    mr("shrink across to 3 pages", a, 6 * PG, 3 * PG, 0, NULL);
    probe("after shrink", a, 6);
    mr("grow the read-only page in place", AT(a, 2), PG, 2 * PG, 0, NULL);
    probe("after grow", a, 6);
    content("pages 0-2 kept", a, 0, 3, 203);
    zero("grown page", a, 3, 1);
    un("unmap", a, 4 * PG);
}

static void c_mremap_split_advice(void)
{
    char *a = mapfilled("map 4 pages", 4, 204);
    NEED(a);
    ma("DONTNEED pages 2-3 (no split)", AT(a, 2), 2 * PG, MADV_DONTNEED);
    ma("COLD pages 1-2 (no split)", AT(a, 1), 2 * PG, 20 /* MADV_COLD */);
    mul("munlock pages 1-2, not locked (no split)", AT(a, 1), 2 * PG);
    ma("NORMAL pages 1-2 (no split)", AT(a, 1), 2 * PG, MADV_NORMAL);
    char *p = mr_free("grow 4 to 8 pages", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    un("unmap", p, 8 * PG);

    char *b = mapfilled("map 4 pages", 4, 205);
    NEED(b);
    ma("RANDOM pages 2-3", AT(b, 2), 2 * PG, MADV_RANDOM);
    mr("grow across", b, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    ma("NORMAL pages 2-3 (merged)", AT(b, 2), 2 * PG, MADV_NORMAL);
    p = mr_free("grow across", b, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 205);
    un("unmap", p, 8 * PG);

    char *c = mapfilled("map 4 pages", 4, 206);
    NEED(c);
    ml("mlock page 1", AT(c, 1), PG);
    mr("grow across", c, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    mul("munlock page 1 (merged)", AT(c, 1), PG);
    p = mr_free("grow across", c, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    un("unmap", p, 8 * PG);

    char *d = mapfilled("map 4 pages", 4, 207);
    NEED(d);
    ma("DONTFORK pages 0-1", d, 2 * PG, MADV_DONTFORK);
    probe("a child lacks pages 0-1", d, 4);
    mr("grow across", d, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    ma("HUGEPAGE pages 2-3", AT(d, 2), 2 * PG, MADV_HUGEPAGE);
    ma("DOFORK pages 0-1 (still split)", d, 2 * PG, MADV_DOFORK);
    mr("grow across", d, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    ma("HUGEPAGE pages 0-1 (merged)", d, 2 * PG, MADV_HUGEPAGE);
    p = mr_free("grow across", d, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 207);
    un("unmap", p, 8 * PG);
}

static void c_mremap_split_after_munmap(void)
{
    char *a = mapfilled("map 6 pages", 6, 208);
    NEED(a);
    mp("page 1 read-only", AT(a, 1), PG, PROT_READ);
    un("unmap page 0", a, PG);
    mr("grow pages 1-2 across", AT(a, 1), 2 * PG, 4 * PG, MREMAP_MAYMOVE, NULL);
    un("unmap page 4", AT(a, 4), PG);
    mr("grow pages 2-3 in place", AT(a, 2), 2 * PG, 3 * PG, 0, NULL);
    probe("after", a, 6);
    mp("page 1 read-write (merged)", AT(a, 1), PG, RW);
    char *p = mr_free("grow pages 1-4 to 8 pages", AT(a, 1), 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p - PG, 1, 3, 208);
    zero("grown page", p, 3, 1);
    un("unmap page 5", AT(a, 5), PG);
    un("unmap", p, 8 * PG);
}

/* Linux 6.17 and later move several VMAs with MREMAP_FIXED at the same size. */
static void c_mremap_split_fixed(void)
{
    char *a = mapfilled("map 4 pages", 4, 209);
    NEED(a);
    char *spacer = anon("map spacer 16 pages", 16);
    NEED(spacer);
    mp("pages 2-3 read-only", AT(a, 2), 2 * PG, PROT_READ);
    char *t = anon("map target 8 pages", 8);
    NEED(t);
    un("unmap target (now a hole)", t, 8 * PG);
    mr("FIXED shrinking across", a, 4 * PG, 3 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t);
    mr("FIXED growing across", a, 4 * PG, 6 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t);
    probe("unchanged", a, 4);
    char *p = mr("FIXED same size across", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, t);
    NEED(p);
    content("moved", t, 0, 4, 209);
    probe("old range", a, 4);
    probe("new range", t, 8);
    mr("grow the moved mapping across", t, 4 * PG, 6 * PG, MREMAP_MAYMOVE, NULL);
    mr("grow its read-only VMA in place", AT(t, 2), 2 * PG, 4 * PG, 0, NULL);
    probe("after", t, 8);
    p = mr("FIXED shrinking to the read-write VMA", t, 4 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, a);
    NEED(p);
    content("moved back", a, 0, 2, 209);
    probe("old range", t, 8);
    probe("new range", a, 4);
    un("unmap", a, 2 * PG);
    un("unmap the rest", AT(t, 2), 4 * PG);
    un("unmap spacer", spacer, 16 * PG);
}

/* A read-only VMA of a split mapping moved out: its protection goes with it,
 * and the grown part has it too. */
static void c_mremap_split_move(void)
{
    char *a = mapfilled("map 4 pages", 4, 210);
    NEED(a);
    mp("pages 2-3 read-only", AT(a, 2), 2 * PG, PROT_READ);
    char *p = mr_free("grow pages 2-3 to 6 pages, MAYMOVE", AT(a, 2), 2 * PG, 6 * PG,
                      MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("moved", p - 2 * PG, 2, 2, 210);
    zero("grown part", p, 2, 4);
    probe("read-only, all of it", p, 6);
    content("pages 0-1 kept", a, 0, 2, 210);
    un("unmap", p, 6 * PG);
    un("unmap pages 0-1", a, 2 * PG);
}

/* Part of a locked mapping moved out: the pages left stay locked (the kernel
 * refuses MADV_DONTNEED on locked pages), and so do the moved ones. */
static void c_mremap_locked_part(void)
{
    char *a = mapfilled("map 8 pages", 8, 211);
    NEED(a);
    ml("mlock all", a, 8 * PG);
    char *p = mr("move pages 0-6 out, MAYMOVE grow", a, 7 * PG, 9 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    ma("DONTNEED page 7 (locked)", AT(a, 7), PG, MADV_DONTNEED);
    ma("DONTNEED the moved pages (locked)", p, 9 * PG, MADV_DONTNEED);
    content("moved", p, 0, 7, 211);
    zero("grown part", p, 7, 2);
    content("page 7 kept", a, 7, 1, 211);
    mul("munlock page 7", AT(a, 7), PG);
    ma("DONTNEED page 7", AT(a, 7), PG, MADV_DONTNEED);
    un("unmap", p, 9 * PG);
    un("unmap page 7", AT(a, 7), PG);
}

/* MREMAP_DONTUNMAP of locked pages: the kernel unlocks the whole VMA they
 * leave (pages 1-4 here), not the read-only locked VMA next to it. */
static void c_mremap_dontunmap_locked(void)
{
    char *a = mapfilled("map 8 pages", 8, 212);
    NEED(a);
    ml("mlock pages 1-6", AT(a, 1), 6 * PG);
    mp("pages 5-6 read-only", AT(a, 5), 2 * PG, PROT_READ);
    char *p = mr("DONTUNMAP pages 2-3", AT(a, 2), 2 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    NEED(p);
    content("moved", p - 2 * PG, 2, 2, 212);
    zero("old pages read zero", a, 2, 2);
    probe("old range", a, 8);
    ma("DONTNEED page 1 (unlocked now)", AT(a, 1), PG, MADV_DONTNEED);
    ma("DONTNEED page 4 (unlocked now)", AT(a, 4), PG, MADV_DONTNEED);
    ma("DONTNEED page 5 (still locked)", AT(a, 5), PG, MADV_DONTNEED);
    ma("DONTNEED the moved pages (locked)", p, 2 * PG, MADV_DONTNEED);
    content("page 5 kept", a, 5, 2, 212);
    zero("page 1 zapped", a, 1, 1);
    un("unmap", a, 8 * PG);
    un("unmap moved", p, 2 * PG);
}

/* MREMAP_DONTUNMAP of locked pages unlocks their VMA, which stays a VMA of
 * its own although nothing tells it from its neighbour any more (the kernel
 * clears VM_LOCKED without a merge): growing across fails with EFAULT. */
static void c_mremap_dontunmap_split(void)
{
    char *a = mapfilled("map 6 pages", 6, 213);
    NEED(a);
    ml("mlock pages 2-5", AT(a, 2), 4 * PG);
    char *p = mr("DONTUNMAP pages 2-5", AT(a, 2), 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    NEED(p);
    un("unmap the moved pages", p, 4 * PG);
    char *r = mr_free("grow all 6 pages across the split", a, 6 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    if (r != MAP_FAILED) {
        un("unmap where it went", r, 8 * PG); /* the old address is gone */
        return;
    }
    mr("same size across the split", a, 6 * PG, 6 * PG, 0, NULL);
    content("pages 0-1 kept", a, 0, 2, 213);
    zero("pages 2-5 read zero", a, 2, 4);
    un("unmap", a, 6 * PG);
}

/* Grows all of the mapping at a (n pages) to n + 2 with MAYMOVE; on success
 * the pages are checked and unmapped where they went, else the same-size
 * call and the contents of [0, keep) are, and a is unmapped. */
static void grow_across(const char *tag, char *a, size_t n, size_t keep, uint64_t seed)
{
    char *r = mr_free(tag, a, n * PG, (n + 2) * PG, MREMAP_MAYMOVE, NULL);
    if (r != MAP_FAILED) {
        content("grown: kept pages", r, 0, keep, seed);
        zero("grown: new pages", r, n, 2);
        un("unmap where it went", r, (n + 2) * PG);
        return;
    }
    mr("same size", a, n * PG, n * PG, 0, NULL);
    content("kept pages", a, 0, keep, seed);
    un("unmap", a, n * PG);
}

/* MREMAP_DONTUNMAP of unlocked pages inside a VMA changes no VMA: the source
 * stays one VMA with its neighbours, growing across works. */
static void c_mremap_dontunmap_sub(void)
{
    char *a = mapfilled("map 6 pages", 6, 214);
    NEED(a);
    char *p = mr("DONTUNMAP pages 2-3", AT(a, 2), 2 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    NEED(p);
    content("moved", p - 2 * PG, 2, 2, 214);
    un("unmap the moved pages", p, 2 * PG);
    zero("pages 2-3 read zero", a, 2, 2);
    mr("shrink across the moved pages", a, 6 * PG, 5 * PG, 0, NULL);
    grow_across("grow all 5 pages", a, 5, 2, 214);
}

/* MREMAP_DONTUNMAP of a whole mapping, unlocked or locked: it stays one VMA
 * (unlocked), which grows and splits as any. */
static void c_mremap_dontunmap_whole(void)
{
    for (int locked = 0; locked < 2; locked++) {
        char *a = mapfilled("map 4 pages", 4, 215);
        NEED(a);
        if (locked)
            ml("mlock all", a, 4 * PG);
        char *p = mr("DONTUNMAP all", a, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
        NEED(p);
        content("moved", p, 0, 4, 215);
        un("unmap the moved pages", p, 4 * PG);
        zero("old pages read zero", a, 0, 4);
        ma("DONTNEED (unlocked)", a, 4 * PG, MADV_DONTNEED);
        mp("page 1 read-only", AT(a, 1), PG, PROT_READ);
        mr("grow across -> EFAULT", a, 4 * PG, 6 * PG, MREMAP_MAYMOVE, NULL);
        mp("page 1 read-write", AT(a, 1), PG, PROT_READ | PROT_WRITE);
        grow_across("grow all", a, 4, 0, 215);
    }
}

/* A locked VMA of its own in the middle (pages 2-3) moved out with
 * DONTUNMAP: three VMAs of equal attributes.  Unmapping page 0 leaves the
 * unlocked VMA first; the rest stays apart. */
static void c_mremap_dontunmap_middle(void)
{
    char *a = mapfilled("map 6 pages", 6, 216);
    NEED(a);
    ml("mlock pages 2-3", AT(a, 2), 2 * PG);
    char *p = mr("DONTUNMAP pages 2-3", AT(a, 2), 2 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    NEED(p);
    un("unmap the moved pages", p, 2 * PG);
    mr("grow pages 0-3 across", a, 4 * PG, 5 * PG, MREMAP_MAYMOVE, NULL);
    mr("shrink pages 2-5 across", AT(a, 2), 4 * PG, 3 * PG, 0, NULL);
    mr("DONTUNMAP pages 1-2 across", AT(a, 1), 2 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    un("unmap pages 0-1", a, 2 * PG);
    mr("grow pages 2-5 across", AT(a, 2), 4 * PG, 5 * PG, MREMAP_MAYMOVE, NULL);
    char *q = mr_free("grow pages 2-3 alone", AT(a, 2), 2 * PG, 3 * PG, MREMAP_MAYMOVE, NULL);
    if (q != MAP_FAILED) {
        zero("grown", q, 0, 3);
        un("unmap it", q, 3 * PG);
    }
    content("page 4 kept", a, 4, 1, 216);
    grow_across("grow page 4", AT(a, 4), 1, 0, 216);
}

/* What ends the split of a DONTUNMAP-unlocked VMA S (pages 2-5): a change of
 * S's or its neighbour's attributes merges them where they become equal;
 * changes that leave S's edge alone, or change nothing, do not. */
static void c_mremap_dontunmap_merge(void)
{
    static const char *const how[] = {
        "mprotect page 3 R, RW", "mprotect pages 0-1 R, RW", "mlock all", "madvise all RANDOM",
        "munlock all", "mprotect pages 2-5 R, RW", "mprotect all RW", "DONTUNMAP page 4",
    };
    for (int k = 0; k < 8; k++) {
        T("-- %s", how[k]);
        char *a = mapfilled("map 6 pages", 6, 217);
        NEED(a);
        ml("mlock pages 2-5", AT(a, 2), 4 * PG);
        char *p = mr("DONTUNMAP pages 2-5", AT(a, 2), 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
        NEED(p);
        un("unmap the moved pages", p, 4 * PG);
        switch (k) {
        case 0:
            mp("R", AT(a, 3), PG, PROT_READ);
            mp("RW", AT(a, 3), PG, PROT_READ | PROT_WRITE);
            break;
        case 1:
            mp("R", a, 2 * PG, PROT_READ);
            mp("RW", a, 2 * PG, PROT_READ | PROT_WRITE);
            break;
        case 2:
            ml("lock", a, 6 * PG);
            mr("same size, locked", a, 6 * PG, 6 * PG, 0, NULL);
            mul("unlock", a, 6 * PG);
            break;
        case 3:
            ma("RANDOM", a, 6 * PG, MADV_RANDOM);
            ma("NORMAL", a, 6 * PG, MADV_NORMAL);
            break;
        case 4:
            mul("unlock (no change)", a, 6 * PG);
            break;
        case 5:
            mp("R", AT(a, 2), 4 * PG, PROT_READ);
            mp("RW", AT(a, 2), 4 * PG, PROT_READ | PROT_WRITE);
            break;
        case 6:
            mp("RW (no change)", a, 6 * PG, PROT_READ | PROT_WRITE);
            break;
        default: {
            char *q = mr("DONTUNMAP page 4", AT(a, 4), PG, PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
            if (q != MAP_FAILED)
                un("unmap it", q, PG);
            break;
        }
        }
        grow_across("grow all 6 pages", a, 6, 2, 217);
    }
}

static void c_mremap_part_of_mapping(void)
{
    char *a = mapfilled("map 8 pages", 8, 114);
    NEED(a);
    char *p = mr("move pages 2-3 out, MAYMOVE grow", AT(a, 2), 2 * PG, 4 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    rel("content of pages 2-3 moved", bad_page(p - 2 * PG, 2, 2, 114) < 0);
    zero("grown part fresh", p, 2, 2);
    probe("old", a, 8);
    content("pages 0-1", a, 0, 2, 114);
    content("pages 4-7", a, 4, 4, 114);
    un("unmap old", a, 8 * PG);
    un("unmap new", p, 4 * PG);
}

static void c_mremap_chain(void)
{
    char *a = mapfilled("map 4 pages", 4, 115);
    NEED(a);
    char *p = mr_free("grow to 32 pages MAYMOVE", a, 4 * PG, 32 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    fill(p, 4, 28, 116);
    char *q = mr("shrink to 8 pages", p, 32 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(q);
    content("first 4", q, 0, 4, 115);
    content("next 4", q, 4, 4, 116);
    char *r = mr_free("grow to 128 pages MAYMOVE", q, 8 * PG, 128 * PG, MREMAP_MAYMOVE, NULL);
    NEED(r);
    content("first 4", r, 0, 4, 115);
    content("next 4", r, 4, 4, 116);
    zero("rest fresh", r, 8, 120);
    un("unmap", r, 128 * PG);
    probe("after", r, 128);
}

static void c_mremap_shared_anon(void)
{
    char *a = mm("shared anon 4 pages", NULL, 4 * PG, RW, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    NEED(a);
    fill(a, 0, 4, 117);
    char *p = mr_free("grow MAYMOVE", a, 4 * PG, 8 * PG, MREMAP_MAYMOVE, NULL);
    NEED(p);
    content("content", p, 0, 4, 117);
    char *d = mr("old_len 0 duplicates a shared mapping", p, 0, 4 * PG, MREMAP_MAYMOVE, NULL);
    if (d != MAP_FAILED) {
        content("duplicate sees content", d, 0, 4, 117);
        un("unmap duplicate", d, 4 * PG);
    }
    un("unmap", p, 8 * PG);
}

/* =============================================================== mprotect */

static void c_mprotect_read(void)
{
    char *a = mapfilled("map 4 pages", 4, 121);
    NEED(a);
    mp("READ", a, 4 * PG, PROT_READ);
    probe("after", a, 4);
    content("kept", a, 0, 4, 121);
    mp("back to RW", a, 4 * PG, RW);
    probe("after", a, 4);
    fill(a, 0, 4, 122);
    content("writable", a, 0, 4, 122);
    un("unmap", a, 4 * PG);
}

static void c_mprotect_none_middle(void)
{
    char *a = mapfilled("map 5 pages", 5, 123);
    NEED(a);
    mp("NONE on pages 2", AT(a, 2), PG, PROT_NONE);
    mp("READ on page 3", AT(a, 3), PG, PROT_READ);
    probe("after", a, 5);
    mp("RW on all", a, 5 * PG, RW);
    probe("after", a, 5);
    content("kept", a, 0, 5, 123);
    un("unmap", a, 5 * PG);
}

static void c_mprotect_errors(void)
{
    char *a = mapfilled("map 4 pages", 4, 124);
    NEED(a);
    mp("unaligned address", a + 1, PG, PROT_READ);
    mp("len 0", a, 0, PROT_READ);
    mp("unaligned len rounds", a, 1, PROT_READ);
    probe("after", a, 4);
    mp("bad prot 0x40", a, PG, PROT_READ | 0x40);
    mp("GROWSDOWN on a normal mapping", a, PG, PROT_READ | PROT_GROWSDOWN);
    mp("GROWSUP|GROWSDOWN", a, PG, PROT_READ | PROT_GROWSDOWN | PROT_GROWSUP);
    mp("EXEC", a, 4 * PG, RW | PROT_EXEC);
    probe("after", a, 4);
    /* Not a huge len that fits: mprotect would walk the mappings above (libc). */
    mp("SIZE_MAX", a, SIZE_MAX, RW);
    mp("SIZE_MAX-4095", a, SIZE_MAX - 4095, RW);
    content("kept", a, 0, 4, 124);
    un("unmap", a, 4 * PG);
}

/* ================================================================ madvise */

static void c_madvise_dontneed(void)
{
    char *a = mapfilled("map 8 pages", 8, 131);
    NEED(a);
    ma("DONTNEED pages 2-5", AT(a, 2), 4 * PG, MADV_DONTNEED);
    mc("residency", a, 8 * PG, 1);
    zero("pages 2-5 zero", a, 2, 4);
    content("pages 0-1 kept", a, 0, 2, 131);
    content("pages 6-7 kept", a, 6, 2, 131);
    probe("access", a, 8);
    un("unmap", a, 8 * PG);
}

static void c_madvise_dontneed_big(void)
{
    size_t n = 8 * MiB / PG;
    char *a = mapfilled("map 8 MiB", n, 132);
    NEED(a);
    ma("DONTNEED all", a, 8 * MiB, MADV_DONTNEED);
    zero("zero", a, 0, n);
    fill(a, 0, n, 133);
    content("refilled", a, 0, n, 133);
    un("unmap", a, 8 * MiB);
}

static void c_madvise_free(void)
{
    char *a = mapfilled("map 8 pages", 8, 134);
    NEED(a);
    ma("FREE pages 0-3", a, 4 * PG, MADV_FREE);
    int ok = 1;
    for (size_t i = 0; i < 4; i++)
        ok &= bad_page(a, i, 1, 134) < 0 || nonzero_page(a, i, 1) < 0;
    rel("pages 0-3 old content or zero", ok);
    content("pages 4-7 kept", a, 4, 4, 134);
    fill(a, 0, 4, 135);
    content("rewritten pages kept", a, 0, 4, 135);
    un("unmap", a, 8 * PG);
}

static void c_madvise_errors(void)
{
    char *a = mapfilled("map 4 pages", 4, 136);
    NEED(a);
    ma("unaligned address", a + 1, PG, MADV_DONTNEED);
    ma("len 0", a, 0, MADV_DONTNEED);
    ma("bad advice 12345", a, PG, 12345);
    ma("REMOVE on private anon", a, PG, MADV_REMOVE);
    ma("advice -1", a, PG, -1);
    content("kept", a, 0, 4, 136);
    un("unmap", a, 4 * PG);
}

static void c_madvise_misc(void)
{
    char *a = mapfilled("map 4 MiB", 4 * MiB / PG, 137);
    NEED(a);
    ma("HUGEPAGE", a, 4 * MiB, MADV_HUGEPAGE);
    ma("NOHUGEPAGE", a, 4 * MiB, MADV_NOHUGEPAGE);
    ma("SEQUENTIAL", a, 4 * MiB, MADV_SEQUENTIAL);
    ma("RANDOM", a, 4 * MiB, MADV_RANDOM);
    ma("NORMAL", a, 4 * MiB, MADV_NORMAL);
    ma("WILLNEED", a, 4 * MiB, MADV_WILLNEED);
    ma("COLD", a, 4 * MiB, MADV_COLD);
    ma("DONTDUMP", a, 4 * MiB, MADV_DONTDUMP);
    ma("DODUMP", a, 4 * MiB, MADV_DODUMP);
    ma("MERGEABLE", a, 4 * MiB, MADV_MERGEABLE);
    ma("UNMERGEABLE", a, 4 * MiB, MADV_UNMERGEABLE);
    content("kept", a, 0, 4 * MiB / PG, 137);
    un("unmap", a, 4 * MiB);
}

static void c_madvise_populate(void)
{
    char *a = anon("map 16 pages", 16);
    NEED(a);
    /* Residency only where the kernel populates (5.14+): otherwise it is
     * that of a fresh mapping, which vmapalloc does not promise (a recycled
     * served area is zeroed with memset, hence resident). */
    if (ma("POPULATE_WRITE", a, 16 * PG, MADV_POPULATE_WRITE) == 0)
        mc("residency", a, 16 * PG, 1);
    zero("zero", a, 0, 16);
    un("unmap", a, 16 * PG);
}

static void c_madvise_guard(void)
{
    char *a = mapfilled("map 4 pages", 4, 138);
    NEED(a);
    ma("GUARD_INSTALL page 1", AT(a, 1), PG, MADV_GUARD_INSTALL);
    probe("after install", a, 4);
    content("page 0 kept", a, 0, 1, 138);
    content("pages 2-3 kept", a, 2, 2, 138);
    mc("mincore", a, 4 * PG, 0);
    ma("GUARD_REMOVE page 1", AT(a, 1), PG, MADV_GUARD_REMOVE);
    probe("after remove", a, 4);
    zero("page 1 zero", a, 1, 1);
    un("unmap", a, 4 * PG);
    probe("after unmap", a, 4);
}

static int child_zero(void *arg)
{
    return nonzero_page(arg, 0, 4) < 0 ? 0 : 1;
}

static int child_content(void *arg)
{
    return bad_page(arg, 0, 4, 139) < 0 ? 0 : 1;
}

static void c_madvise_dontfork(void)
{
    char *a = mapfilled("map 4 pages", 4, 139);
    NEED(a);
    ma("DONTFORK", a, 4 * PG, MADV_DONTFORK);
    probe("seen from a child", a, 4);
    ma("DOFORK", a, 4 * PG, MADV_DOFORK);
    probe("seen from a child", a, 4);
    T("child sees content: status %d", in_child(child_content, a));
    un("unmap", a, 4 * PG);
}

static void c_madvise_wipeonfork(void)
{
    char *a = mapfilled("map 4 pages", 4, 139);
    NEED(a);
    ma("WIPEONFORK", a, 4 * PG, MADV_WIPEONFORK);
    T("child sees zero: status %d", in_child(child_zero, a));
    content("parent keeps", a, 0, 4, 139);
    ma("KEEPONFORK", a, 4 * PG, MADV_KEEPONFORK);
    T("child sees content: status %d", in_child(child_content, a));
    un("unmap", a, 4 * PG);
}

static void c_madvise_pageout(void)
{
    char *a = mapfilled("map 4 pages", 4, 140);
    NEED(a);
    ma("PAGEOUT", a, 4 * PG, MADV_PAGEOUT);
    content("kept (no swap: stays)", a, 0, 4, 140);
    un("unmap", a, 4 * PG);
}

/* ================================================================ mincore */

static void c_mincore_touched(void)
{
    char *a = mapfilled("map 8 pages", 8, 141);
    NEED(a);
    mc("touched", a, 8 * PG, 1);
    mc("unaligned len", a, 4097, 1);
    mc("unaligned address", a + 1, PG, 1);
    mc("len 0", a, 0, 1);
    /* SIZE_MAX only: a huge len that fits would have the kernel fill the
     * vector for every mapped page above a. */
    mc("SIZE_MAX", a, SIZE_MAX, 0);
    ma("DONTNEED pages 2-3", AT(a, 2), 2 * PG, MADV_DONTNEED);
    mc("after DONTNEED", a, 4 * PG, 1);
    un("unmap", a, 8 * PG);
    mc("after unmap", a, 8 * PG, 1);
}

static void c_mincore_bad_vec(void)
{
    char *a = mapfilled("map 2 pages", 2, 142);
    NEED(a);
    errno = ERRNO_SENTINEL;
    int r = mincore(a, 2 * PG, (unsigned char *)1);
    log_int("bad vector pointer", "mincore", r, errno);
    un("unmap", a, 2 * PG);
}

/* ================================================================== mlock */

static void c_mlock(void)
{
    char *a = mapfilled("map 8 pages", 8, 151);
    NEED(a);
    long base = vmlck_kib();
    ml("mlock pages 2-5", AT(a, 2), 4 * PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    mul("munlock", AT(a, 2), 4 * PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    ml("mlock unaligned address", a + 10, PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    mul("munlock all", a, 8 * PG);
    errno = ERRNO_SENTINEL;
    int r = mlock2(a, 8 * PG, MLOCK_ONFAULT);
    log_int("mlock2 ONFAULT", "mlock2", r, errno);
    mul("munlock all", a, 8 * PG);
    errno = ERRNO_SENTINEL;
    r = mlock2(a, 8 * PG, 0x100);
    log_int("mlock2 bad flags", "mlock2", r, errno);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    content("kept", a, 0, 8, 151);
    un("unmap", a, 8 * PG);
}

static void c_mlock_then_munmap(void)
{
    long base = vmlck_kib();
    char *a = mapfilled("map 8 pages", 8, 152);
    NEED(a);
    ml("mlock all", a, 8 * PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    un("unmap pages 0-3 while locked", a, 4 * PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    un("unmap the rest", AT(a, 4), 4 * PG);
    T("VmLck +%ld KiB", vmlck_kib() - base);
    probe("after", a, 8);
}

/* =================================================================== fork */

struct cow {
    char *p;
    int to_child[2], to_parent[2];
};

static int child_cow(void *arg)
{
    struct cow *c = arg;
    char b = 0;
    int bits = 0;
    close(c->to_child[1]);
    close(c->to_parent[0]);
    if (bad_page(c->p, 0, 4, 161) < 0)
        bits |= 1;                               /* inherited the content */
    fill(c->p, 0, 1, 162);                       /* invisible to the parent */
    if (write(c->to_parent[1], "x", 1) != 1 || read(c->to_child[0], &b, 1) != 1)
        return 100;
    if (bad_page(c->p, 1, 1, 161) < 0)
        bits |= 2;                               /* parent's later write invisible */
    if (bad_page(c->p, 0, 1, 162) < 0)
        bits |= 4;                               /* own write kept */
    return bits;
}

static void c_fork_cow(void)
{
    struct cow c;
    c.p = mapfilled("map 4 pages", 4, 161);
    NEED(c.p);
    if (pipe(c.to_child) || pipe(c.to_parent)) {
        T("pipe failed");
        return;
    }
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_cow(&c));
    close(c.to_child[0]);
    close(c.to_parent[1]);
    char b = 0;
    if (read(c.to_parent[0], &b, 1) != 1)
        T("child did not report");
    content("parent page 0 untouched by the child", c.p, 0, 1, 161);
    fill(c.p, 1, 1, 163);
    if (write(c.to_child[1], "x", 1) != 1)
        T("could not wake the child");
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    T("child status %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    close(c.to_child[1]);
    close(c.to_parent[0]);
    content("parent page 1 own write", c.p, 1, 1, 163);
    un("unmap", c.p, 4 * PG);
}

static int child_munmap(void *arg)
{
    char *p = arg;
    if (munmap(p, 4 * PG) != 0)
        return 1;
    if (probe_vec(p, 4) != 0 || memchr(vecbuf, 'w', 4))
        return 2;
    char *q = mmap(NULL, 4 * PG, RW, PA, -1, 0);
    if (q == MAP_FAILED || nonzero_page(q, 0, 4) >= 0)
        return 3;
    return 0;
}

static void c_fork_child_munmap(void)
{
    char *a = mapfilled("map 4 pages", 4, 164);
    NEED(a);
    T("child munmaps, maps again: status %d", in_child(child_munmap, a));
    content("parent keeps", a, 0, 4, 164);
    probe("parent access", a, 4);
    un("unmap", a, 4 * PG);
}

static int child_has_content(void *arg)
{
    return bad_page(arg, 0, 4, 165) < 0 ? 0 : 1;
}

static void c_fork_after_partial(void)
{
    char *a = mapfilled("map 6 pages", 6, 165);
    NEED(a);
    un("unmap pages 4-5", AT(a, 4), 2 * PG);
    T("child sees content: status %d", in_child(child_has_content, a));
    probe("child view", a, 6);
    un("unmap", a, 4 * PG);
}

/* ================================================================== reuse */

/*
 * Rounds of mmap, check, spoil the area in some way, munmap.  The kernel hands
 * out fresh memory every round; an allocator that recycles areas must restore
 * protection, advice, locking and content before it hands one out again.
 * Sizes repeat so that same-size reuse is likely.
 */
static const size_t reuse_sizes[] = { 4, 4, 4, 16, 16, 16, 64, 64, 64, 512, 512, 512 };
#define REUSE_ROUNDS 24

static struct { char *p; size_t n; uint64_t seed; } rc;

static int child_reuse(void *arg)
{
    (void)arg;
    return bad_page(rc.p, 0, rc.n, rc.seed) < 0 ? 0 : 1;
}

/* spoil(p, n, &len) changes the area and returns what to munmap (len bytes). */
static void reuse_rounds(char *(*spoil)(char *, size_t, size_t *))
{
    int zero_ok = 0, rw_ok = 0, fork_ok = 0, content_ok = 0;
    long lck = vmlck_kib();
    for (int i = 0; i < REUSE_ROUNDS; i++) {
        size_t n = reuse_sizes[i % (sizeof reuse_sizes / sizeof reuse_sizes[0])];
        errno = 0;
        char *p = mmap(NULL, n * PG, RW, PA, -1, 0);
        if (p == MAP_FAILED) {
            T("round %d: mmap -> MAP_FAILED %s", i, ename(errno));
            return;
        }
        zero_ok += nonzero_page(p, 0, n) < 0;
        probe_vec(p, n);
        int all_w = 1;
        for (size_t k = 0; k < n; k++)
            all_w &= vecbuf[k] == 'w';
        rw_ok += all_w;
        fill(p, 0, n, (uint64_t)i + 1000);
        rc.p = p;
        rc.n = n;
        rc.seed = (uint64_t)i + 1000;
        fork_ok += in_child(child_reuse, NULL) == 0;
        content_ok += bad_page(p, 0, n, (uint64_t)i + 1000) < 0;
        size_t len = n * PG;
        char *u = spoil(p, n, &len);
        if (u && munmap(u, len) != 0) {
            T("round %d: munmap -> -1 %s", i, ename(errno));
            return;
        }
    }
    T("%d rounds: zero %d, read-write %d, content %d, child sees content %d", REUSE_ROUNDS,
      zero_ok, rw_ok, content_ok, fork_ok);
    T("VmLck back to where it was: %s", vmlck_kib() == lck ? "yes" : "no");
}

static char *sp_none(char *p, size_t n, size_t *len) { (void)n; (void)len; return p; }
static char *sp_prot_none(char *p, size_t n, size_t *len) { (void)len; mprotect(p, n * PG, PROT_NONE); return p; }
static char *sp_prot_part(char *p, size_t n, size_t *len)
{
    (void)len;
    mprotect(AT(p, n / 2), PG, PROT_READ);
    mprotect(p, PG, PROT_READ | PROT_EXEC);
    return p;
}
static char *sp_dontfork(char *p, size_t n, size_t *len) { (void)len; madvise(p, n * PG, MADV_DONTFORK); return p; }
static char *sp_wipeonfork(char *p, size_t n, size_t *len) { (void)len; madvise(p, n * PG, MADV_WIPEONFORK); return p; }
static char *sp_mlock(char *p, size_t n, size_t *len) { (void)len; mlock(p, n * PG); return p; }
static char *sp_free(char *p, size_t n, size_t *len) { (void)len; madvise(p, n * PG, MADV_FREE); return p; }
static char *sp_nohuge(char *p, size_t n, size_t *len) { (void)len; madvise(p, n * PG, MADV_NOHUGEPAGE); return p; }
static char *sp_guard(char *p, size_t n, size_t *len) { (void)len; madvise(AT(p, n / 2), PG, MADV_GUARD_INSTALL); return p; }
static char *sp_dontneed_part(char *p, size_t n, size_t *len) { (void)len; madvise(p, (n / 2) * PG, MADV_DONTNEED); return p; }
static char *sp_partial(char *p, size_t n, size_t *len)
{
    (void)len;
    if (n > 2)
        munmap(AT(p, 1), PG);
    return p;
}
static char *sp_head_tail(char *p, size_t n, size_t *len)
{
    if (n < 4)
        return p;
    munmap(p, PG);
    munmap(AT(p, n - 1), PG);
    *len = (n - 2) * PG;
    return AT(p, 1);
}
static int reuse_fd = -1;
static char *sp_fixed_file(char *p, size_t n, size_t *len)
{
    (void)len;
    if (reuse_fd >= 0)
        mmap(AT(p, n / 2), PG, RW, MAP_SHARED | MAP_FIXED, reuse_fd, 0);
    return p;
}
static char *sp_fixed_anon_ro(char *p, size_t n, size_t *len)
{
    (void)len;
    mmap(AT(p, n / 2), PG, PROT_READ, PA | MAP_FIXED, -1, 0);
    return p;
}
static char *sp_mremap_move(char *p, size_t n, size_t *len)
{
    char *q = mremap(p, n * PG, 2 * n * PG, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        return p;
    *len = 2 * n * PG;
    return q;
}
static char *sp_mremap_shrink(char *p, size_t n, size_t *len)
{
    if (n < 2)
        return p;
    if (mremap(p, n * PG, (n / 2) * PG, 0) != MAP_FAILED)
        *len = (n / 2) * PG;
    return p;
}
static char *sp_dontunmap(char *p, size_t n, size_t *len)
{
    (void)len;
    char *q = mremap(p, n * PG, n * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    if (q != MAP_FAILED)
        munmap(q, n * PG);
    return p;
}

static void c_reuse_zero(void) { reuse_rounds(sp_none); }
static void c_reuse_prot_none(void) { reuse_rounds(sp_prot_none); }
static void c_reuse_prot_part(void) { reuse_rounds(sp_prot_part); }
static void c_reuse_dontfork(void) { reuse_rounds(sp_dontfork); }
static void c_reuse_wipeonfork(void) { reuse_rounds(sp_wipeonfork); }
static void c_reuse_mlock(void) { reuse_rounds(sp_mlock); }
static void c_reuse_madv_free(void) { reuse_rounds(sp_free); }
static void c_reuse_nohugepage(void) { reuse_rounds(sp_nohuge); }
static void c_reuse_guard(void) { reuse_rounds(sp_guard); }
static void c_reuse_dontneed(void) { reuse_rounds(sp_dontneed_part); }
static void c_reuse_partial(void) { reuse_rounds(sp_partial); }
static void c_reuse_head_tail(void) { reuse_rounds(sp_head_tail); }
static void c_reuse_fixed_anon(void) { reuse_rounds(sp_fixed_anon_ro); }
static void c_reuse_mremap_move(void) { reuse_rounds(sp_mremap_move); }
static void c_reuse_mremap_shrink(void) { reuse_rounds(sp_mremap_shrink); }
static void c_reuse_dontunmap(void) { reuse_rounds(sp_dontunmap); }
static void c_reuse_fixed_file(void)
{
    reuse_fd = temp_file(1, 170, O_RDWR);
    T("temp file: %s", reuse_fd >= 0 ? "ok" : "failed");
    reuse_rounds(sp_fixed_file);
    if (reuse_fd >= 0)
        close(reuse_fd);
    reuse_fd = -1;
}

/* ============================================================ realistic */

/*
 * CPython's object allocator: 256 KiB arenas from mmap, released with munmap
 * when all their pools are free, in an order decided by the program.  Here:
 * up to 16 live arenas, 500 cycles of map-or-unmap at random with a fixed
 * seed; every arena is checked zero when mapped and checked for its content
 * (a stamp per page, rewritten at random) before it is unmapped.
 */
static void c_cpython_arenas(void)
{
    enum { ARENA = 256 * 1024, NP = ARENA / 4096, MAXLIVE = 16, CYCLES = 500 };
    struct { char *p; uint64_t seed; } live[MAXLIVE];
    int nlive = 0, maps = 0, unmaps = 0, zero_bad = 0, content_bad = 0, fails = 0, rewrites = 0;
    uint64_t s = 0x5eed;
    for (int c = 0; c < CYCLES; c++) {
        int do_map = nlive == 0 || (nlive < MAXLIVE && rnd(&s) % 3 != 0);
        if (do_map) {
            errno = 0;
            char *p = mmap(NULL, ARENA, RW, PA, -1, 0);
            if (p == MAP_FAILED) {
                if (fails++ < 3)
                    T("cycle %d: mmap -> MAP_FAILED %s", c, ename(errno));
                continue;
            }
            maps++;
            if (nonzero_page(p, 0, NP) >= 0)
                zero_bad++;
            live[nlive].p = p;
            live[nlive].seed = (uint64_t)c;
            /* Pools are used sparsely: fill a random part. */
            fill(p, 0, 1 + rnd(&s) % NP, (uint64_t)c);
            nlive++;
        } else {
            int k = (int)(rnd(&s) % (uint64_t)nlive);
            char *p = live[k].p;
            /* the first page always holds the stamp of its seed */
            if (bad_page(p, 0, 1, live[k].seed) >= 0)
                content_bad++;
            if (rnd(&s) % 4 == 0) {
                /* rewrite instead of unmapping */
                live[k].seed = (uint64_t)c + 100000;
                fill(p, 0, NP, live[k].seed);
                rewrites++;
                continue;
            }
            errno = 0;
            if (munmap(p, ARENA) != 0) {
                if (fails++ < 3)
                    T("cycle %d: munmap -> -1 %s", c, ename(errno));
            }
            unmaps++;
            live[k] = live[--nlive];
        }
    }
    for (int k = 0; k < nlive; k++) {
        if (bad_page(live[k].p, 0, 1, live[k].seed) >= 0)
            content_bad++;
        if (munmap(live[k].p, ARENA) != 0)
            fails++;
        unmaps++;
    }
    T("arenas: %d maps, %d unmaps, %d rewrites; not zero %d, content bad %d, failed calls %d",
      maps, unmaps, rewrites, zero_bad, content_bad, fails);
}

/*
 * Random churn: up to 48 live pieces of 1..64 pages.  Operations: map, unmap
 * whole, unmap head/tail/middle (a middle unmap splits a piece in two), grow
 * or shrink with mremap MAYMOVE, mprotect read-only and back.  Every piece's
 * content is verified before it changes; pattern pages keep the index they
 * had in the region they were first written to.
 */
struct piece { uintptr_t base; size_t first, n; uint64_t seed; };

static void c_random_churn(void)
{
    enum { MAXP = 48, OPS = 3000 };
    static struct piece pc[MAXP];
    int np = 0, calls = 0, bad = 0, fails = 0, zero_bad = 0;
    uint64_t s = 0xc0ffee;
    for (int op = 0; op < OPS; op++) {
        unsigned kind = (unsigned)(rnd(&s) % 8);
        if (np == 0 || (kind < 2 && np < MAXP)) {
            size_t n = 1 + rnd(&s) % 64;
            char *p = mmap(NULL, n * PG, RW, PA, -1, 0);
            calls++;
            if (p == MAP_FAILED) {
                if (fails++ < 3)
                    T("op %d: mmap -> MAP_FAILED %s", op, ename(errno));
                continue;
            }
            if (nonzero_page(p, 0, n) >= 0)
                zero_bad++;
            fill(p, 0, n, (uint64_t)op);
            pc[np++] = (struct piece){ (uintptr_t)p, 0, n, (uint64_t)op };
            continue;
        }
        int k = (int)(rnd(&s) % (uint64_t)np);
        struct piece *q = &pc[k];
        char *base = (char *)q->base;
        if (bad_page(base, q->first, q->n, q->seed) >= 0)
            bad++;
        char *start = AT(base, q->first);
        calls++;
        if (kind < 3 || q->n == 1) {                       /* unmap whole */
            if (munmap(start, q->n * PG) != 0 && fails++ < 3)
                T("op %d: munmap -> -1 %s", op, ename(errno));
            *q = pc[--np];
        } else if (kind == 3) {                            /* unmap head */
            size_t h = 1 + rnd(&s) % (q->n - 1);
            if (munmap(start, h * PG) != 0 && fails++ < 3)
                T("op %d: munmap head -> -1 %s", op, ename(errno));
            q->first += h;
            q->n -= h;
        } else if (kind == 4) {                            /* unmap tail */
            size_t t = 1 + rnd(&s) % (q->n - 1);
            if (munmap(AT(start, q->n - t), t * PG) != 0 && fails++ < 3)
                T("op %d: munmap tail -> -1 %s", op, ename(errno));
            q->n -= t;
        } else if (kind == 5 && q->n >= 3 && np < MAXP) {  /* unmap middle */
            size_t m = 1 + rnd(&s) % (q->n - 2);
            size_t len = 1 + rnd(&s) % (q->n - m - 1);
            if (munmap(AT(start, m), len * PG) != 0 && fails++ < 3)
                T("op %d: munmap middle -> -1 %s", op, ename(errno));
            struct piece tail = { q->base, q->first + m + len, q->n - m - len, q->seed };
            q->n = m;
            pc[np++] = tail;
        } else if (kind == 6) {                            /* mremap */
            size_t nn = 1 + rnd(&s) % 96;
            char *r = mremap(start, q->n * PG, nn * PG, MREMAP_MAYMOVE);
            if (r == MAP_FAILED) {
                if (fails++ < 3)
                    T("op %d: mremap -> MAP_FAILED %s", op, ename(errno));
                continue;
            }
            if (nn > q->n && nonzero_page(r, q->n, nn - q->n) >= 0)
                zero_bad++;
            size_t keep = nn < q->n ? nn : q->n;
            q->base = (uintptr_t)r - q->first * PG;
            if (bad_page((char *)q->base, q->first, keep, q->seed) >= 0)
                bad++;
            /* rewrite the whole piece with a new pattern, indexes from r */
            q->base = (uintptr_t)r;
            q->first = 0;
            q->n = nn;
            q->seed = (uint64_t)op;
            fill(r, 0, nn, q->seed);
        } else {                                           /* mprotect */
            if (mprotect(start, q->n * PG, PROT_READ) != 0 && fails++ < 3)
                T("op %d: mprotect -> -1 %s", op, ename(errno));
            if (bad_page(base, q->first, q->n, q->seed) >= 0)
                bad++;
            if (mprotect(start, q->n * PG, RW) != 0 && fails++ < 3)
                T("op %d: mprotect -> -1 %s", op, ename(errno));
        }
    }
    for (int k = 0; k < np; k++) {
        if (bad_page((char *)pc[k].base, pc[k].first, pc[k].n, pc[k].seed) >= 0)
            bad++;
        munmap(AT(pc[k].base, pc[k].first), pc[k].n * PG);
    }
    T("churn: %d ops, %d calls; content bad %d, not zero %d, failed calls %d",
      OPS, calls, bad, zero_bad, fails);
}

/*
 * Random VMA churn: up to 8 mappings of 2..11 pages; mprotect, madvise
 * (RANDOM, NORMAL, SEQUENTIAL, DONTFORK, DOFORK, DONTNEED), mlock and munlock
 * of sub-ranges split and merge their VMAs, and mremap (MAYMOVE growth of the
 * whole or a head part, shrinking, MREMAP_FIXED moves to holes at the same,
 * a smaller or a larger size) and munmap follow them.  Every call's result is
 * printed (no address); every 50 operations the pages of each mapping (probed
 * from a child) and a checksum of the pages a child could write (summed in a
 * child: csum_vec).  With
 * `dontunmap`, MREMAP_DONTUNMAP of sub-ranges too.
 */
static void random_vmas(int dontunmap, uint64_t seed)
{
    enum { MAXM = 8, OPS = 2500 };
    static const int advice[] = { MADV_RANDOM, MADV_NORMAL, MADV_SEQUENTIAL, MADV_DONTFORK,
                                  MADV_DOFORK, MADV_DONTNEED };
    struct { char *a; size_t n; } m[MAXM];
    int nm = 0;
    uint64_t s = seed;
    for (int op = 0; op < OPS; op++) {
        if (op % 50 == 0) {
            for (int k = 0; k < nm; k++) {
                char text[256];
                if (probe_vec(m[k].a, m[k].n) < 0)
                    continue;
                rle(text, sizeof text, vecbuf, m[k].n);
                uint64_t h = csum_vec(m[k].a, m[k].n);
                T("op %d: mapping %d: pages %s, content %016llx", op, k, text,
                  (unsigned long long)h);
            }
        }
        if (nm < 3) {
            size_t n = 2 + rnd(&s) % 10;
            char *a = mmap(NULL, n * PG, RW, PA, -1, 0);
            T("op %d: map %zu -> %s", op, n, a == MAP_FAILED ? ename(errno) : "ok");
            if (a != MAP_FAILED) {
                fill(a, 0, n, (uint64_t)op);
                m[nm].a = a;
                m[nm++].n = n;
            }
            continue;
        }
        int k = (int)(rnd(&s) % (uint64_t)nm);
        size_t n = m[k].n, lo = rnd(&s) % n, hi = lo + 1 + rnd(&s) % (n - lo);
        char *a = m[k].a, *p;
        int r;
        switch (rnd(&s) % (dontunmap ? 11 : 10)) {
        case 0:
        case 1: {
            int prot = rnd(&s) % 3 == 0 ? PROT_READ : RW;
            r = mprotect(AT(a, lo), (hi - lo) * PG, prot);
            T("op %d: mprotect %d [%zu,%zu) %d -> %s", op, k, lo, hi, prot, r ? ename(errno) : "0");
            break;
        }
        case 2: {
            int adv = advice[rnd(&s) % 6];
            r = madvise(AT(a, lo), (hi - lo) * PG, adv);
            T("op %d: madvise %d [%zu,%zu) %d -> %s", op, k, lo, hi, adv, r ? ename(errno) : "0");
            break;
        }
        case 3: {
            int lock = (int)(rnd(&s) % 2);
            r = lock ? mlock(AT(a, lo), (hi - lo) * PG) : munlock(AT(a, lo), (hi - lo) * PG);
            T("op %d: %s %d [%zu,%zu) -> %s", op, lock ? "mlock" : "munlock", k, lo, hi,
              r ? ename(errno) : "0");
            break;
        }
        case 4:
        case 5: {
            size_t len = rnd(&s) % 2 ? n : hi, more = 1 + rnd(&s) % 4;
            p = mremap(a, len * PG, (len + more) * PG, MREMAP_MAYMOVE);
            T("op %d: mremap %d grow [0,%zu) by %zu -> %s", op, k, len, more,
              p == MAP_FAILED ? ename(errno) : "ok");
            if (p == MAP_FAILED)
                break;
            if (len < n && nm < MAXM) {
                m[nm].a = AT(a, len); /* the rest stays where it was */
                m[nm++].n = n - len;
            } else if (len < n) {
                munmap(AT(a, len), (n - len) * PG);
            }
            m[k].a = p;
            m[k].n = len + more;
            break;
        }
        case 6: {
            size_t nn = 1 + rnd(&s) % n;
            p = mremap(a, n * PG, nn * PG, 0);
            T("op %d: mremap %d shrink %zu to %zu -> %s", op, k, n, nn,
              p == MAP_FAILED ? ename(errno) : "ok");
            if (p != MAP_FAILED)
                m[k].n = nn;
            break;
        }
        case 7: {
            unsigned how = (unsigned)(rnd(&s) % 3);
            size_t nn = how == 0 ? n : how == 1 ? n - 1 + (n == 1) : n + 1 + rnd(&s) % 3;
            char *h = mmap(NULL, (nn + 2) * PG, RW, PA, -1, 0);
            if (h == MAP_FAILED)
                break;
            munmap(h, (nn + 2) * PG);
            p = mremap(a, n * PG, nn * PG, MREMAP_MAYMOVE | MREMAP_FIXED, AT(h, 1));
            T("op %d: mremap %d fixed %zu to %zu -> %s", op, k, n, nn,
              p == MAP_FAILED ? ename(errno) : "ok");
            if (p != MAP_FAILED) {
                m[k].a = p;
                m[k].n = nn;
            }
            break;
        }
        case 8:
            r = munmap(a, n * PG);
            T("op %d: munmap %d -> %s", op, k, r ? ename(errno) : "0");
            m[k] = m[--nm];
            break;
        case 10:
            /* The pages of [lo, hi) move to a new mapping; the old range
             * stays mapped, empty. */
            p = mremap(AT(a, lo), (hi - lo) * PG, (hi - lo) * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP,
                       NULL); /* (the kernel reads new_address as a hint) */
            T("op %d: mremap %d dontunmap [%zu,%zu) -> %s", op, k, lo, hi,
              p == MAP_FAILED ? ename(errno) : "ok");
            if (p == MAP_FAILED)
                break;
            if (nm < MAXM) {
                m[nm].a = p;
                m[nm++].n = hi - lo;
            } else {
                munmap(p, (hi - lo) * PG);
            }
            break;
        default:
            if (lo == 0 || hi == n)
                break;
            r = munmap(AT(a, lo), (hi - lo) * PG);
            T("op %d: munmap %d [%zu,%zu) -> %s", op, k, lo, hi, r ? ename(errno) : "0");
            if (nm < MAXM) {
                m[nm].a = AT(a, hi);
                m[nm++].n = n - hi;
            } else {
                munmap(AT(a, hi), (n - hi) * PG);
            }
            m[k].n = lo;
            break;
        }
    }
    for (int k = 0; k < nm; k++)
        munmap(m[k].a, m[k].n * PG);
}

static void c_random_vmas(void)
{
    random_vmas(0, 0x5eed1e55ull);
}

/* --seed N: the seed of random-vmas-dontunmap (0: its own). */
static uint64_t dontunmap_seed;

/* The same with MREMAP_DONTUNMAP of sub-ranges among the operations, with 8
 * seeds.  A DONTUNMAP of a whole VMA leaves it without an anon_vma, and the
 * kernel then keeps VMAs of equal flags apart (mremap across them EFAULT)
 * by VM_ACCOUNT, which mprotect(PROT_READ) drops from such a VMA, by
 * anon_vmas that differ (a new one when it is populated), and by page
 * offsets that do not follow on (such a VMA moved takes new ones).  Seeds 3,
 * 21, 25 and 32 meet differing anon_vmas, 5, 15 and 19 VM_ACCOUNT (15 and
 * 19 in a mapping's first page); 0xd0e5a11 none.  Other seeds can meet what
 * vmapalloc cannot know: the kernel also merges a VMA at a mapping's edge
 * with the program's mapping next to it (docs/reliability.md, known
 * limits); tests/preload/mmap/seeds.sh counts them. */
static void c_random_vmas_dontunmap(void)
{
    static const uint64_t seeds[] = { 0xd0e5a11, 3, 5, 15, 19, 21, 25, 32 };
    if (dontunmap_seed) {
        random_vmas(1, dontunmap_seed);
        return;
    }
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        T("seed %llx", (unsigned long long)seeds[i]);
        random_vmas(1, seeds[i]);
    }
}

struct churn_arg { int id; int errors; int fails; };

static void *churn_thread(void *arg)
{
    struct churn_arg *a = arg;
    uint64_t s = 0x1234567ull * (uint64_t)(a->id + 1);
    for (int i = 0; i < 300; i++) {
        size_t n = 1 + rnd(&s) % 128;
        char *p = mmap(NULL, n * PG, RW, PA, -1, 0);
        if (p == MAP_FAILED) {
            a->fails++;
            continue;
        }
        if (nonzero_page(p, 0, n) >= 0)
            a->errors++;
        uint64_t seed = (uint64_t)a->id << 32 | (uint64_t)i;
        fill(p, 0, n, seed);
        if (n > 2 && rnd(&s) % 2) {
            if (munmap(AT(p, 1), PG) != 0)
                a->fails++;
            if (bad_page(p, 0, 1, seed) >= 0 || bad_page(p, 2, n - 2, seed) >= 0)
                a->errors++;
            /* The two pieces left, not the whole range: another thread's
             * one-page mapping may have been placed in the hole meanwhile,
             * and unmapping it would make that thread fault. */
            if (munmap(p, PG) != 0 || munmap(AT(p, 2), (n - 2) * PG) != 0)
                a->fails++;
            continue;
        }
        if (bad_page(p, 0, n, seed) >= 0)
            a->errors++;
        if (munmap(p, n * PG) != 0)
            a->fails++;
    }
    return NULL;
}

static void c_threads_churn(void)
{
    enum { NT = 4 };
    pthread_t t[NT];
    struct churn_arg a[NT];
    int started = 0;
    for (int i = 0; i < NT; i++) {
        a[i] = (struct churn_arg){ i, 0, 0 };
        if (pthread_create(&t[i], NULL, churn_thread, &a[i]) == 0)
            started++;
    }
    int errors = 0, fails = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
        fails += a[i].fails;
    }
    T("threads: %d started, %d content/zero errors, %d failed calls", started, errors, fails);
}

/* ===================================================== preload-only cases */

/*
 * vmapalloc's own memory (a live large malloc block) must not be destroyed by
 * munmap or mremap: the call fails with EINVAL and vmapalloc prints one
 * diagnostic line on stderr.  MAP_FIXED over it gets the kernel's answer: the
 * pages are the program's from then on (pl-map-fixed-block).  Free address space of vmapalloc's arena is
 * served as unmapped memory would be.  These are not compared with the kernel
 * (which would destroy the block); each prints ok/FAIL lines.
 */
static int pl_fails;

__attribute__((format(printf, 2, 3)))
static void check(int cond, const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    T("%s: %s", cond ? "ok" : "FAIL", buf);
    if (!cond)
        pl_fails++;
}

static int (*vm_owns)(const void *);
static size_t (*vm_purge)(void);

/* Capture of what vmapalloc writes to fd 2 during one call. */
static int cap_fd = -1, cap_saved = -1;

static void cap_begin(void)
{
    cap_fd = memfd_create("stderr", MFD_CLOEXEC);
    cap_saved = dup(2);
    if (cap_fd >= 0 && cap_saved >= 0)
        dup2(cap_fd, 2);
}

/* Returns the number of lines; the first line (if any) is copied to first. */
static int cap_end(char *first, size_t cap, int *all_prefixed)
{
    static char buf[8192];
    if (cap_saved >= 0) {
        dup2(cap_saved, 2);
        close(cap_saved);
    }
    ssize_t n = cap_fd >= 0 ? pread(cap_fd, buf, sizeof buf - 1, 0) : 0;
    if (cap_fd >= 0)
        close(cap_fd);
    cap_fd = cap_saved = -1;
    if (n < 0)
        n = 0;
    buf[n] = 0;
    int lines = 0;
    *all_prefixed = 1;
    first[0] = 0;
    for (char *s = buf; *s;) {
        char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (lines == 0)
            snprintf(first, cap, "%.*s", (int)len, s);
        if (strncmp(s, "vmapalloc: ", 11) != 0)
            *all_prefixed = 0;
        lines++;
        s = e ? e + 1 : s + len;
    }
    return lines;
}

static void expect_one_line(const char *what)
{
    char first[300];
    int pref;
    int lines = cap_end(first, sizeof first, &pref);
    check(lines == 1 && pref, "%s: exactly one 'vmapalloc: ' line on stderr (got %d: \"%s\")",
          what, lines, first);
}

static void *(*volatile p_malloc)(size_t) = malloc;
static void (*volatile p_free)(void *) = free;

static char *big_block(uint64_t seed)
{
    char *p = p_malloc(8 * MiB);
    check(p != NULL, "malloc(8 MiB)");
    if (!p)
        return NULL;
    check((uintptr_t)p % PG == 0, "the 8 MiB block is page-aligned");
    check(vm_owns && vm_owns(p), "vmapalloc owns the 8 MiB block");
    fill(p, 0, 8 * MiB / PG, seed);
    return p;
}

static void block_intact_and_free(char *p, uint64_t seed)
{
    check(bad_page(p, 0, 8 * MiB / PG, seed) < 0, "the block keeps its content");
    probe_vec(p, 8 * MiB / PG);
    check(memchr(vecbuf, '-', 8 * MiB / PG) == NULL && memchr(vecbuf, 'r', 8 * MiB / PG) == NULL,
          "the block is still read-write everywhere");
    p_free(p);
    check(1, "free of the block returned");
    /* The allocator still works and hands out correct memory. */
    for (int i = 0; i < 4; i++) {
        char *q = p_malloc(8 * MiB);
        if (!q) {
            check(0, "malloc(8 MiB) after free");
            return;
        }
        fill(q, 0, 8 * MiB / PG, 900 + (uint64_t)i);
        check(bad_page(q, 0, 8 * MiB / PG, 900 + (uint64_t)i) < 0, "new block %d holds its content", i);
        p_free(q);
    }
}

static void pl_munmap_block_head(void)
{
    char *p = big_block(201);
    if (!p)
        return;
    cap_begin();
    errno = 0;
    int r = munmap(p, PG);
    int e = errno;
    expect_one_line("munmap of the block's first page");
    check(r == -1 && e == EINVAL, "munmap of the block's first page fails with EINVAL (got %d %s)",
          r, ename(e));
    block_intact_and_free(p, 201);
}

static void pl_munmap_block_middle(void)
{
    char *p = big_block(202);
    if (!p)
        return;
    cap_begin();
    errno = 0;
    int r = munmap(p + MiB, 2 * PG);
    int e = errno;
    expect_one_line("munmap inside the block");
    check(r == -1 && e == EINVAL, "munmap inside the block fails with EINVAL (got %d %s)", r, ename(e));
    cap_begin();
    errno = 0;
    r = munmap(p, 16 * MiB);
    e = errno;
    expect_one_line("munmap over the block and beyond");
    check(r == -1 && e == EINVAL, "munmap over the block and beyond fails with EINVAL (got %d %s)",
          r, ename(e));
    block_intact_and_free(p, 202);
}

static void pl_map_fixed_block(void)
{
    char *p = big_block(203);
    if (!p)
        return;
    /* NOREPLACE: the block is mapped memory, the kernel's EEXIST, no line. */
    cap_begin();
    errno = 0;
    void *q = mmap(p + PG, PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    int e = errno;
    char first[300];
    int pref;
    int lines = cap_end(first, sizeof first, &pref);
    check(q == MAP_FAILED && e == EEXIST && lines == 0,
          "MAP_FIXED_NOREPLACE over the block fails with EEXIST, silently (got %s %s, %d line(s))",
          q == MAP_FAILED ? "MAP_FAILED" : "a mapping", ename(e), lines);
    /* MAP_FIXED: the kernel lets the program map over its own block. */
    cap_begin();
    errno = 0;
    q = mmap(p + PG, PG, RW, PA | MAP_FIXED, -1, 0);
    e = errno;
    lines = cap_end(first, sizeof first, &pref);
    check(q == p + PG && lines == 0, "MAP_FIXED over the block succeeds, silently (got %s %s, "
          "%d line(s))", q == MAP_FAILED ? "MAP_FAILED" : "a mapping", ename(e), lines);
    if (q != p + PG)
        return;
    check(p[PG] == 0 && p[2 * PG - 1] == 0, "the program's new page reads zero");
    memset(p + PG, 0x77, PG);
    check(bad_page(p, 0, 1, 203) < 0 && bad_page(p, 2, 8 * MiB / PG - 2, 203) < 0,
          "the rest of the block keeps its content");
    errno = 1789;
    p_free(p);
    check(errno == 1789, "free of the mapped-over block keeps errno (got %s)", ename(errno));
    /* The program's page is never handed out, purged or mapped afresh. */
    char *got[8];
    int overlap = 0;
    for (int i = 0; i < 8; i++) {
        got[i] = p_malloc(8 * MiB);
        if (got[i] && got[i] < p + 8 * MiB && got[i] + 8 * MiB > p)
            overlap++;
        if (got[i])
            memset(got[i], 0x11, 8 * MiB);
    }
    for (int i = 0; i < 8; i++)
        p_free(got[i]);
    if (vm_purge)
        vm_purge();
    check(overlap == 0, "no new block overlaps the freed mapped-over block (%d did)", overlap);
    check(p[PG] == 0x77 && p[2 * PG - 1] == 0x77, "the program's page keeps its content");
    check(munmap(p + PG, PG) == 0, "the program unmaps its page");
}

static void pl_mremap_block(void)
{
    char *p = big_block(204);
    if (!p)
        return;
    static const struct { const char *what; size_t nl; int flags; } cs[] = {
        { "mremap grow MAYMOVE of the block", 16 * MiB, MREMAP_MAYMOVE },
        { "mremap shrink of the block", 4 * MiB, 0 },
        { "mremap grow in place of the block", 9 * MiB, 0 },
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        cap_begin();
        errno = 0;
        void *q = mremap(p, 8 * MiB, cs[i].nl, cs[i].flags);
        int e = errno;
        expect_one_line(cs[i].what);
        check(q == MAP_FAILED && e == EINVAL, "%s fails with EINVAL (got %s %s)", cs[i].what,
              q == MAP_FAILED ? "MAP_FAILED" : "a mapping", ename(e));
    }
    /* A mapping of the program moved on top of the block. */
    char *m = mmap(NULL, 2 * PG, RW, PA, -1, 0);
    if (m != MAP_FAILED) {
        fill(m, 0, 2, 205);
        cap_begin();
        errno = 0;
        void *q = mremap(m, 2 * PG, 2 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, p + MiB);
        int e = errno;
        expect_one_line("mremap FIXED onto the block");
        check(q == MAP_FAILED && e == EINVAL, "mremap FIXED onto the block fails with EINVAL (got %s %s)",
              q == MAP_FAILED ? "MAP_FAILED" : "a mapping", ename(e));
        check(bad_page(m, 0, 2, 205) < 0, "the program's mapping keeps its content");
        munmap(m, 2 * PG);
    }
    block_intact_and_free(p, 204);
}

static void pl_munmap_freed_block(void)
{
    char *p = big_block(206);
    if (!p)
        return;
    p_free(p);
    cap_begin();
    errno = 0;
    int r = munmap(p, 8 * MiB);
    int e = errno;
    char first[300];
    int pref;
    int lines = cap_end(first, sizeof first, &pref);
    check(r == 0, "munmap of a freed block's address space succeeds (got %d %s)", r, ename(e));
    check(lines == 0, "no diagnostic for it (got %d lines: \"%s\")", lines, first);
    for (int i = 0; i < 4; i++) {
        char *q = p_malloc(8 * MiB);
        if (!q) {
            check(0, "malloc(8 MiB) afterwards");
            return;
        }
        fill(q, 0, 8 * MiB / PG, 910 + (uint64_t)i);
        check(bad_page(q, 0, 8 * MiB / PG, 910 + (uint64_t)i) < 0, "new block %d holds its content", i);
        p_free(q);
    }
}

static void pl_map_fixed_freed_block(void)
{
    char *p = big_block(207);
    if (!p)
        return;
    p_free(p);
    errno = 0;
    char *f = mmap(p, 8 * MiB, RW, PA | MAP_FIXED, -1, 0);
    int e = errno;
    check(f == p, "MAP_FIXED at a freed block's address gets it (got %s %s)",
          f == MAP_FAILED ? "MAP_FAILED" : f == p ? "the address" : "another address", ename(e));
    if (f != p)
        return;
    check(nonzero_page(f, 0, 8 * MiB / PG) < 0, "the MAP_FIXED mapping is zero");
    fill(f, 0, 8 * MiB / PG, 208);
    char *held[8];
    for (int i = 0; i < 8; i++) {
        held[i] = p_malloc(8 * MiB);
        if (held[i])
            fill(held[i], 0, 8 * MiB / PG, 920 + (uint64_t)i);
    }
    check(bad_page(f, 0, 8 * MiB / PG, 208) < 0,
          "the program's MAP_FIXED mapping is not handed out by malloc");
    for (int i = 0; i < 8; i++) {
        if (!held[i])
            continue;
        check((uintptr_t)held[i] + 8 * MiB <= (uintptr_t)f || (uintptr_t)held[i] >= (uintptr_t)f + 8 * MiB,
              "block %d does not overlap the program's mapping", i);
        check(bad_page(held[i], 0, 8 * MiB / PG, 920 + (uint64_t)i) < 0, "block %d holds its content", i);
        p_free(held[i]);
    }
    errno = 0;
    int r = munmap(f, 8 * MiB);
    check(r == 0, "munmap of the program's mapping (got %d %s)", r, ename(errno));
    char *q = p_malloc(8 * MiB);
    check(q != NULL, "malloc(8 MiB) afterwards");
    if (q) {
        fill(q, 0, 8 * MiB / PG, 930);
        check(bad_page(q, 0, 8 * MiB / PG, 930) < 0, "it holds its content");
        p_free(q);
    }
}

/* ================================================================== mseal */

/*
 * mseal (Linux 6.10): glibc 2.36 has no wrapper, so through syscall(), as
 * programs built against it do (vmapalloc exports syscall for this number).
 * A sealed range can be neither unmapped, moved, resized, mapped over nor
 * protected again; madvise(DONTNEED) is refused on read-only anonymous
 * pages only.  Sealing is for good: these cases leave sealed mappings
 * behind, so they come last.  A kernel without mseal says ENOSYS to every
 * call, in both runs alike.
 */
#ifndef SYS_mseal
#define SYS_mseal 462
#endif

static int msl(const char *tag, void *a, size_t len, unsigned long flags)
{
    errno = ERRNO_SENTINEL;
    int r = (int)syscall(SYS_mseal, a, len, flags);
    return log_int(tag, "mseal", r, errno);
}

/* A hole of n pages the case controls: mapped, then unmapped. */
static char *hole(const char *tag, size_t n)
{
    char *h = anon(tag, n);
    if (h != MAP_FAILED)
        un("unmap the hole", h, n * PG);
    return h;
}

static void c_mseal_whole(void)
{
    char *a = mapfilled("map 8 pages", 8, 401);
    NEED(a);
    char *b = hole("map a hole", 8);
    NEED(b);
    msl("seal all", a, 8 * PG, 0);
    un("munmap all", a, 8 * PG);
    un("munmap page 3", AT(a, 3), PG);
    un("munmap pages 6-9 (beyond the end)", AT(a, 6), 4 * PG);
    mp("mprotect READ", a, 8 * PG, PROT_READ);
    mp("mprotect page 1 NONE", AT(a, 1), PG, PROT_NONE);
    mr("mremap shrink", a, 8 * PG, 4 * PG, 0, NULL);
    mr("mremap grow MAYMOVE", a, 8 * PG, 16 * PG, MREMAP_MAYMOVE, NULL);
    mr("mremap same size FIXED", a, 8 * PG, 8 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, b);
    mr("mremap DONTUNMAP", a, 8 * PG, 8 * PG, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    mm("MAP_FIXED over page 2", AT(a, 2), PG, RW, PA | MAP_FIXED, -1, 0);
    mm("MAP_FIXED_NOREPLACE over page 2", AT(a, 2), PG, RW, PA | MAP_FIXED_NOREPLACE, -1, 0);
    ma("DONTNEED page 0", a, PG, MADV_DONTNEED);
    zero("page 0 zero", a, 0, 1);
    ml("mlock page 1", AT(a, 1), PG);
    mul("munlock page 1", AT(a, 1), PG);
    msl("seal again", a, 8 * PG, 0);
    content("pages 1-7 kept", a, 1, 7, 401);
    probe("access", a, 8);
}

static void c_mseal_part(void)
{
    char *a = mapfilled("map 8 pages", 8, 402);
    NEED(a);
    msl("seal pages 2-5", AT(a, 2), 4 * PG, 0);
    un("munmap all", a, 8 * PG);
    probe("nothing unmapped", a, 8);
    un("munmap pages 0-1", a, 2 * PG);
    un("munmap pages 6-7", AT(a, 6), 2 * PG);
    mp("mprotect pages 2-3 READ", AT(a, 2), 2 * PG, PROT_READ);
    mr("mremap pages 2-5 shrink", AT(a, 2), 4 * PG, 2 * PG, 0, NULL);
    mm("MAP_FIXED over pages 1-2", AT(a, 1), 2 * PG, RW, PA | MAP_FIXED, -1, 0);
    content("pages 2-5 kept", a, 2, 4, 402);
    probe("access", a, 8);
    mm("MAP_FIXED over page 1 (a hole)", AT(a, 1), PG, RW, PA | MAP_FIXED, -1, 0);
    probe("access after", a, 8);
}

static void c_mseal_unmapped(void)
{
    char *a = mapfilled("map 8 pages", 8, 403);
    NEED(a);
    un("munmap pages 2-5", AT(a, 2), 4 * PG);
    msl("seal all (a hole inside)", a, 8 * PG, 0);
    msl("seal the hole", AT(a, 2), 4 * PG, 0);
    msl("seal pages 1-2", AT(a, 1), 2 * PG, 0);
    un("munmap all: nothing was sealed", a, 8 * PG);
    probe("access", a, 8);
    char *b = mapfilled("map 4 pages", 4, 404);
    NEED(b);
    un("munmap them", b, 4 * PG);
    msl("seal the freed range", b, 4 * PG, 0);
    char *c = anon("map 4 pages again", 4);
    NEED(c);
    un("munmap them: not sealed", c, 4 * PG);
}

static void c_mseal_errors(void)
{
    char *a = mapfilled("map 4 pages", 4, 405);
    NEED(a);
    msl("flags 1", a, PG, 1);
    msl("unaligned address", a + 1, PG, 0);
    msl("length 0", a, 0, 0);
    msl("length wraps", a, (size_t)0 - PG, 0);
    msl("length 1: page 0", a, 1, 0);
    un("munmap page 0", a, PG);
    un("munmap pages 1-3", AT(a, 1), 3 * PG);
    probe("access", a, 4);
}

static void c_mseal_onto(void)
{
    char *a = mapfilled("map 4 pages A", 4, 406);
    NEED(a);
    char *b = mapfilled("map 4 pages B", 4, 407);
    NEED(b);
    msl("seal A", a, 4 * PG, 0);
    mr("mremap B onto A", b, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, a);
    mr("mremap B onto A's last page", b, PG, PG, MREMAP_MAYMOVE | MREMAP_FIXED, AT(a, 3));
    content("A kept", a, 0, 4, 406);
    content("B kept", b, 0, 4, 407);
    un("munmap B", b, 4 * PG);
    probe("access A", a, 4);
}

static void c_mseal_readonly(void)
{
    char *a = mapfilled("map 8 pages", 8, 408);
    NEED(a);
    mp("mprotect pages 0-3 READ", a, 4 * PG, PROT_READ);
    msl("seal all", a, 8 * PG, 0);
    ma("DONTNEED pages 0-3 (read-only)", a, 4 * PG, MADV_DONTNEED);
    ma("DONTNEED pages 4-5", AT(a, 4), 2 * PG, MADV_DONTNEED);
    ma("FREE page 0", a, PG, MADV_FREE);
    ma("RANDOM all", a, 8 * PG, MADV_RANDOM);
    mp("mprotect pages 4-7 READ", AT(a, 4), 4 * PG, PROT_READ);
    content("pages 0-3 kept", a, 0, 4, 408);
    zero("pages 4-5 zero", a, 4, 2);
    content("pages 6-7 kept", a, 6, 2, 408);
    probe("access", a, 8);
}

static void c_mseal_no_reuse(void)
{
    char *a = anon("map 16 pages", 16);
    NEED(a);
    msl("seal them", a, 16 * PG, 0);
    int overlap = 0, ok = 0;
    for (int i = 0; i < 64; i++) {
        char *p = mmap(NULL, 16 * PG, RW, PA, -1, 0);
        if (p == MAP_FAILED)
            continue;
        ok++;
        overlap += p < a + 16 * PG && a < p + 16 * PG;
        memset(p, 1, 16 * PG);
        munmap(p, 16 * PG);
    }
    T("64 map/unmap cycles of the same size: %d mapped, %d over the sealed pages", ok, overlap);
    zero("the sealed pages still zero", a, 0, 16);
}

/* =================================================================== table */

struct tcase {
    const char *name;
    void (*fn)(void);
    const char *doc;
};

#define C(name, fn, doc) { name, fn, doc }

static const struct tcase cases[] = {
    /* anonymous private read-write: what vmapalloc serves */
    C("anon-1page", c_anon_1page, "1 page: zero, read-write, content, faults after munmap"),
    C("anon-5pages", c_anon_5pages, "5 pages: the same"),
    C("anon-2mib", c_anon_2mib, "2 MiB: the same"),
    C("anon-64mib", c_anon_64mib, "64 MiB: the same"),
    C("anon-len-4097", c_anon_len_4097, "4097 bytes round to 2 pages (mremap with the rounded size is a no-op)"),
    C("anon-len-1", c_anon_len_1, "1 byte rounds to a page; munmap of 1 byte unmaps it"),
    C("anon-len-0", c_anon_len_0, "len 0 -> EINVAL"),
    C("anon-len-huge", c_anon_len_huge, "SIZE_MAX, PTRDIFF_MAX, 128 TiB, 1 TiB -> ENOMEM"),
    C("anon-populate", c_anon_populate, "MAP_POPULATE: every page resident (mincore), zero"),
    C("anon-noreserve", c_anon_noreserve, "MAP_NORESERVE: 1 GiB touched sparsely, 8 pages zero"),
    C("anon-mmap64", c_anon_mmap64, "the mmap64 symbol"),
    C("anon-offset", c_anon_offset, "anonymous with offset 4096 (ok), 123 (EINVAL), fd 0 (ignored)"),
    C("anon-odd-flags", c_anon_odd_flags, "unknown flag ignored for private, DENYWRITE|EXECUTABLE, no type (EINVAL), SHARED_VALIDATE unknown (EOPNOTSUPP)"),
    C("anon-prot-variants", c_anon_prot_variants, "PROT_WRITE only, unknown prot bits"),
    /* passed to the kernel */
    C("pass-shared-anon", c_pass_shared_anon, "MAP_SHARED anonymous: shared with a child, partial munmap"),
    C("pass-file-private", c_pass_file_private, "private file mapping: file content, writes stay private, offset"),
    C("pass-file-shared", c_pass_file_shared, "shared file mapping: writes reach the file"),
    C("pass-file-beyond-eof", c_pass_file_beyond_eof, "3 pages of a 1-page file: SIGBUS past EOF"),
    C("pass-file-errors", c_pass_file_errors, "unaligned offset, O_WRONLY fd, shared RW on O_RDONLY, bad fd (EBADF), fd -1"),
    C("pass-prot-read", c_pass_prot_read, "PROT_READ: readable zero, write faults"),
    C("pass-prot-none", c_pass_prot_none, "PROT_NONE: faults; mprotect RW then zero"),
    C("pass-prot-exec", c_pass_prot_exec, "PROT_READ|EXEC and RWX"),
    C("pass-stack", c_pass_stack, "MAP_STACK"),
    C("pass-growsdown", c_pass_growsdown, "MAP_GROWSDOWN, mprotect PROT_GROWSDOWN"),
    C("pass-32bit", c_pass_32bit, "MAP_32BIT: below 2 GiB"),
    C("pass-locked", c_pass_locked, "MAP_LOCKED: resident, VmLck grows and drops"),
    C("pass-hugetlb", c_pass_hugetlb, "MAP_HUGETLB (ENOMEM without reserved huge pages)"),
    C("pass-hint-free", c_pass_hint_free, "hint at free address space: gets it; unaligned hint rounds down"),
    C("pass-hint-occupied", c_pass_hint_occupied, "hint at a live mapping: elsewhere, the mapping intact"),
    C("pass-fixed-errors", c_pass_fixed_errors, "MAP_FIXED unaligned (EINVAL), MAP_FIXED_NOREPLACE on a live mapping (EEXIST)"),
    C("fixed-over-whole", c_fixed_over_whole, "MAP_FIXED over a whole mapping: zero, then munmap"),
    C("fixed-over-part", c_fixed_over_part, "MAP_FIXED over pages 1-2 of 4: replaced part zero, rest kept"),
    C("fixed-file-over-part", c_fixed_file_over_part, "shared file MAP_FIXED over part; munmap all; 8 fresh maps zero"),
    C("fixed-span-hole", c_fixed_span_hole, "MAP_FIXED over mapping+hole+mapping"),
    /* munmap */
    C("munmap-whole", c_munmap_whole, "all of a mapping"),
    C("munmap-head", c_munmap_head, "first 3 of 8 pages: rest kept, then rest"),
    C("munmap-tail", c_munmap_tail, "last 3 of 8 pages"),
    C("munmap-middle", c_munmap_middle, "pages 3-4 of 8: both pieces keep content and stay writable"),
    C("munmap-large-middle", c_munmap_large_middle, "1 MiB out of the middle of 16 MiB"),
    C("munmap-adjacent-mprotect", c_munmap_adjacent_mprotect, "two VMAs (split by mprotect) in one call"),
    C("munmap-adjacent-hint", c_munmap_adjacent_hint, "a mapping and the one hinted right after it, in one call"),
    C("munmap-adjacent-fixed", c_munmap_adjacent_fixed, "a mapping and a shared one MAP_FIXED over its half, in one call"),
    C("munmap-span-gap", c_munmap_span_gap, "mapping, unmapped gap, mapping in one call"),
    C("munmap-span-partial", c_munmap_span_partial, "the end of one piece, a gap and the start of the next"),
    C("munmap-into-hole", c_munmap_into_hole, "from inside a mapping into the hole after it"),
    C("munmap-several-pieces", c_munmap_several_pieces, "three single-page holes, then all pieces in one call"),
    C("munmap-unaligned-addr", c_munmap_unaligned_addr, "unaligned address -> EINVAL, nothing unmapped"),
    C("munmap-len-0", c_munmap_len_0, "len 0 -> EINVAL"),
    C("munmap-len-unaligned", c_munmap_len_unaligned, "4097 bytes unmaps 2 pages"),
    C("munmap-len-overflow", c_munmap_len_overflow, "SIZE_MAX, past the end of the address space -> EINVAL"),
    C("munmap-never-mapped", c_munmap_never_mapped, "free address space -> 0"),
    C("munmap-double", c_munmap_double, "munmap twice -> 0 both times"),
    /* the hole left by munmap */
    C("hole-mprotect", c_hole_mprotect, "mprotect on the hole -> ENOMEM"),
    C("hole-madvise", c_hole_madvise, "16 kinds of advice on the hole -> ENOMEM"),
    C("hole-mincore", c_hole_mincore, "mincore on the hole -> ENOMEM"),
    C("hole-mremap", c_hole_mremap, "mremap of the hole -> EFAULT"),
    C("hole-mlock", c_hole_mlock, "mlock/munlock on the hole -> ENOMEM"),
    C("hole-map-fixed", c_hole_map_fixed, "MAP_FIXED at the hole gets exactly it"),
    C("hole-map-noreplace", c_hole_map_noreplace, "MAP_FIXED_NOREPLACE at the hole gets it; too big -> EEXIST"),
    C("hole-hint", c_hole_hint, "hint at the hole gets it; a 2-page hint at it goes elsewhere"),
    C("hole-big-hint", c_hole_big_hint, "1 MiB hint at a 1 MiB hole inside 4 MiB"),
    C("hole-map-fixed-file", c_hole_map_fixed_file, "a file MAP_FIXED into the hole"),
    C("hole-span-mprotect", c_hole_span_mprotect, "mprotect over page+hole+page -> ENOMEM, first page changed"),
    C("hole-span-madvise", c_hole_span_madvise, "DONTNEED over page+hole+page -> ENOMEM, both pages zapped"),
    C("hole-span-mincore", c_hole_span_mincore, "mincore over page+hole -> ENOMEM"),
    C("hole-span-mlock", c_hole_span_mlock, "mlock over page+hole+page -> ENOMEM"),
    C("hole-guard-remove", c_hole_guard_remove, "MADV_GUARD_REMOVE on the hole -> ENOMEM, still faults"),
    /* mremap */
    C("mremap-shrink", c_mremap_shrink, "4 to 2 pages: same address, tail faults"),
    C("mremap-shrink-inner", c_mremap_shrink_inner, "shrink the head part of a mapping: a hole inside"),
    C("mremap-shrink-unaligned", c_mremap_shrink_unaligned, "shrink to 4097 bytes keeps 2 pages"),
    C("mremap-same-size", c_mremap_same_size, "same size, with and without MAYMOVE: same address"),
    C("mremap-grow-in-place", c_mremap_grow_in_place, "page 1 unmapped; grow page 0 to 2 pages without MAYMOVE: same address"),
    C("mremap-grow-in-place-big", c_mremap_grow_in_place_big, "1 MiB to 4 MiB in place into a hole it left"),
    C("mremap-grow-blocked-self", c_mremap_grow_blocked_self, "grow the first page of a 2-page mapping -> ENOMEM"),
    C("mremap-grow-blocked-neighbour", c_mremap_grow_blocked_neighbour, "next page is another mapping -> ENOMEM"),
    C("mremap-maymove-forced", c_mremap_maymove_forced, "MAYMOVE grow of a head part: moves, old pages fault"),
    C("mremap-maymove-blocked", c_mremap_maymove_blocked, "MAYMOVE grow blocked by a neighbour: moves"),
    C("mremap-maymove-any", c_mremap_maymove_any, "MAYMOVE grow 16 to 64 pages: content kept, old gone if moved"),
    C("mremap-maymove-big", c_mremap_maymove_big, "2 MiB to 64 MiB and back to 3 MiB"),
    C("mremap-fixed-to-hole", c_mremap_fixed_to_hole, "MREMAP_FIXED to a hole and back to the old place, growing"),
    C("mremap-fixed-over-mapping", c_mremap_fixed_over_mapping, "MREMAP_FIXED over part of another mapping"),
    C("mremap-fixed-shrink", c_mremap_fixed_shrink, "MREMAP_FIXED while shrinking 6 to 2 pages"),
    C("mremap-dontunmap", c_mremap_dontunmap, "DONTUNMAP: old range mapped and zero, new has content"),
    C("mremap-dontunmap-fixed", c_mremap_dontunmap_fixed, "DONTUNMAP|FIXED to a hole"),
    C("mremap-dontunmap-hint", c_mremap_dontunmap_hint, "DONTUNMAP's new_address: a hint, checked (unaligned, overlapping, too high: EINVAL)"),
    C("mremap-errors", c_mremap_errors, "bad flags, old_len 0, FIXED w/o MAYMOVE, overlap, unaligned, DONTUNMAP misuse, new_len 0, huge"),
    C("mremap-span-two-vmas", c_mremap_span_two_vmas, "old range spans two VMAs -> EFAULT"),
    C("mremap-split-merged", c_mremap_split_merged, "mprotect split, then back: merged, grows across"),
    C("mremap-split-same-prot", c_mremap_split_same_prot, "mprotect of part to the protection it has: no split; grown part keeps READ"),
    C("mremap-split-shrink", c_mremap_split_shrink, "split mapping: same size and shrink across ok, grow and DONTUNMAP across EFAULT, a VMA grows alone"),
    C("mremap-split-advice", c_mremap_split_advice, "DONTNEED/COLD/NORMAL/munlock: no split; RANDOM, mlock, DONTFORK, HUGEPAGE split until merged"),
    C("mremap-split-after-munmap", c_mremap_split_after_munmap, "split mapping with its head unmapped: the pieces keep their VMAs"),
    C("mremap-split-fixed", c_mremap_split_fixed, "MREMAP_FIXED of a split mapping: same size moves both VMAs, resizing across EFAULT"),
    C("mremap-locked-part", c_mremap_locked_part, "pages 0-6 of a locked mapping moved out: page 7 and the moved pages stay locked"),
    C("mremap-dontunmap-locked", c_mremap_dontunmap_locked, "DONTUNMAP of locked pages unlocks their whole VMA, not the next one"),
    C("mremap-dontunmap-split", c_mremap_dontunmap_split, "DONTUNMAP of locked pages: their unlocked VMA stays split, growing across -> EFAULT"),
    C("mremap-dontunmap-sub", c_mremap_dontunmap_sub, "DONTUNMAP of unlocked pages inside a VMA splits nothing: shrink and grow across"),
    C("mremap-dontunmap-whole", c_mremap_dontunmap_whole, "DONTUNMAP of a whole mapping, unlocked and locked: one VMA, splits and grows"),
    C("mremap-dontunmap-middle", c_mremap_dontunmap_middle, "DONTUNMAP of a locked middle VMA: three equal VMAs; unmap the first, the rest stays apart"),
    C("mremap-dontunmap-merge", c_mremap_dontunmap_merge, "DONTUNMAP-unlocked VMA: which mprotect/mlock/madvise merge it back, then grow across"),
    C("mremap-split-move", c_mremap_split_move, "the read-only VMA of a split mapping grown with MAYMOVE: read-only all over"),
    C("mremap-part-of-mapping", c_mremap_part_of_mapping, "move pages 2-3 out of an 8-page mapping"),
    C("mremap-chain", c_mremap_chain, "grow, shrink, grow again: content follows"),
    C("mremap-shared-anon", c_mremap_shared_anon, "shared anonymous grow; old_len 0 duplicates it"),
    /* mprotect, madvise, mincore, mlock */
    C("mprotect-read", c_mprotect_read, "READ: write faults; back to RW"),
    C("mprotect-none-middle", c_mprotect_none_middle, "NONE and READ on single pages, then RW"),
    C("mprotect-errors", c_mprotect_errors, "unaligned, len 0, bad prot, GROWSDOWN, EXEC, huge len"),
    C("madvise-dontneed", c_madvise_dontneed, "DONTNEED: zero and not resident; the rest kept"),
    C("madvise-dontneed-big", c_madvise_dontneed_big, "DONTNEED 8 MiB: zero, refill"),
    C("madvise-free", c_madvise_free, "MADV_FREE: old content or zero; new writes kept"),
    C("madvise-errors", c_madvise_errors, "unaligned, len 0, bad advice, REMOVE on private"),
    C("madvise-misc", c_madvise_misc, "HUGEPAGE, NOHUGEPAGE, SEQUENTIAL, ..., MERGEABLE"),
    C("madvise-populate", c_madvise_populate, "POPULATE_WRITE: resident, zero"),
    C("madvise-guard", c_madvise_guard, "the program's own guard pages: install faults, remove gives zero"),
    C("madvise-dontfork", c_madvise_dontfork, "DONTFORK: absent in a child; DOFORK restores"),
    C("madvise-wipeonfork", c_madvise_wipeonfork, "WIPEONFORK: a child sees zero; KEEPONFORK restores"),
    C("madvise-pageout", c_madvise_pageout, "PAGEOUT keeps content"),
    C("mincore-touched", c_mincore_touched, "touched pages resident; unaligned, len 0, after DONTNEED, after munmap"),
    C("mincore-bad-vec", c_mincore_bad_vec, "bad vector pointer -> EFAULT"),
    C("mlock", c_mlock, "mlock/munlock/mlock2: results and VmLck"),
    C("mlock-then-munmap", c_mlock_then_munmap, "munmap of locked pages drops VmLck"),
    /* fork */
    C("fork-cow", c_fork_cow, "child sees content; writes on either side stay private"),
    C("fork-child-munmap", c_fork_child_munmap, "the child's munmap and mmap leave the parent's mapping"),
    C("fork-after-partial", c_fork_after_partial, "fork after a partial munmap: the child sees the same pieces"),
    /* recycled memory */
    C("reuse-zero", c_reuse_zero, "24 rounds map/fill/unmap: fresh maps zero, writable, seen by a child"),
    C("reuse-prot-none", c_reuse_prot_none, "the same, the area left PROT_NONE before munmap"),
    C("reuse-prot-part", c_reuse_prot_part, "left partly READ and READ|EXEC"),
    C("reuse-dontfork", c_reuse_dontfork, "left MADV_DONTFORK"),
    C("reuse-wipeonfork", c_reuse_wipeonfork, "left MADV_WIPEONFORK"),
    C("reuse-mlock", c_reuse_mlock, "left mlocked; VmLck back at the end"),
    C("reuse-madv-free", c_reuse_madv_free, "left MADV_FREE"),
    C("reuse-nohugepage", c_reuse_nohugepage, "left MADV_NOHUGEPAGE"),
    C("reuse-guard", c_reuse_guard, "left with a guard page of the program's"),
    C("reuse-dontneed", c_reuse_dontneed, "half DONTNEED'd"),
    C("reuse-partial", c_reuse_partial, "a page unmapped first"),
    C("reuse-head-tail", c_reuse_head_tail, "head and tail pages unmapped first"),
    C("reuse-fixed-anon", c_reuse_fixed_anon, "a read-only MAP_FIXED page inside"),
    C("reuse-fixed-file", c_reuse_fixed_file, "a shared file page MAP_FIXED inside"),
    C("reuse-mremap-move", c_reuse_mremap_move, "grown with MAYMOVE, then unmapped"),
    C("reuse-mremap-shrink", c_reuse_mremap_shrink, "shrunk in place, then unmapped"),
    C("reuse-dontunmap", c_reuse_dontunmap, "moved with DONTUNMAP, both unmapped"),
    /* realistic */
    C("cpython-arenas", c_cpython_arenas, "256 KiB arenas mapped/unmapped in random order, 500 cycles, content checks"),
    C("random-vmas", c_random_vmas, "2500 random mprotect/madvise/mlock of parts, mremap grow/shrink/FIXED, munmap: results, pages, contents"),
    C("random-vmas-dontunmap", c_random_vmas_dontunmap, "the same with MREMAP_DONTUNMAP of parts among them, 8 seeds"),
    C("random-churn", c_random_churn, "3000 random map/unmap/partial/mremap/mprotect operations with checks"),
    C("threads-churn", c_threads_churn, "4 threads x 300 map/fill/partial-unmap/unmap cycles"),
    /* mseal last: sealed mappings stay for good */
    C("mseal-whole", c_mseal_whole, "sealed mapping: munmap/mprotect/mremap/MAP_FIXED EPERM; DONTNEED, mlock allowed"),
    C("mseal-part", c_mseal_part, "pages 2-5 sealed: munmap over them EPERM, around them fine"),
    C("mseal-unmapped", c_mseal_unmapped, "mseal over a hole or a freed range: ENOMEM, nothing sealed"),
    C("mseal-errors", c_mseal_errors, "flags, unaligned, length 0, wrapping length; length 1 seals a page"),
    C("mseal-onto", c_mseal_onto, "mremap MREMAP_FIXED onto sealed pages: EPERM, both kept"),
    C("mseal-readonly", c_mseal_readonly, "DONTNEED refused on sealed read-only pages only"),
    C("mseal-no-reuse", c_mseal_no_reuse, "sealed pages are never handed out again"),
};

static const struct tcase pl_cases[] = {
    C("pl-munmap-block-head", pl_munmap_block_head, "munmap of the first page of malloc(8 MiB): EINVAL, one line, free works"),
    C("pl-munmap-block-middle", pl_munmap_block_middle, "munmap inside, and over and beyond, a malloc block: EINVAL"),
    C("pl-map-fixed-block", pl_map_fixed_block, "MAP_FIXED over a live malloc block: the kernel's answer; NOREPLACE: EEXIST"),
    C("pl-mremap-block", pl_mremap_block, "mremap of a malloc block (grow, shrink, in place) and onto it: EINVAL"),
    C("pl-munmap-freed-block", pl_munmap_freed_block, "munmap of a freed block's space: 0, malloc keeps working"),
    C("pl-map-fixed-freed-block", pl_map_fixed_freed_block, "MAP_FIXED at a freed block's space gets it; malloc stays out"),
};

#define NCASES (sizeof cases / sizeof cases[0])
#define NPL (sizeof pl_cases / sizeof pl_cases[0])

static int usage(void)
{
    static const char u[] =
        "usage: diff [--list] [--preload-only] [--seed N] [--case NAME]...\n";
    write_all(2, u, sizeof u - 1);
    return 2;
}

static const struct tcase *find(const struct tcase *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

static int run_preload_only(const char **names, int nnames)
{
    vm_owns = (int (*)(const void *))dlsym(RTLD_DEFAULT, "vmapalloc_owns");
    vm_purge = (size_t (*)(void))dlsym(RTLD_DEFAULT, "vmapalloc_purge");
    if (!vm_owns) {
        T("FAIL: not running under vmapalloc (no vmapalloc_owns)");
        return 1;
    }
    int failed = 0, ran = 0;
    for (size_t i = 0; i < NPL; i++) {
        if (nnames) {
            int want = 0;
            for (int k = 0; k < nnames; k++)
                want |= strcmp(names[k], pl_cases[i].name) == 0;
            if (!want)
                continue;
        }
        T("== %s", pl_cases[i].name);
        ran++;
        pid_t pid = fork();
        if (pid == 0) {
            pl_fails = 0;
            pl_cases[i].fn();
            _exit(pl_fails ? 1 : 0);
        }
        int st = 0;
        while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed++;
            if (pid > 0 && WIFSIGNALED(st))
                T("FAIL: %s: killed by signal %d (%s)", pl_cases[i].name, WTERMSIG(st),
                  sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
            else
                T("FAIL: %s", pl_cases[i].name);
        } else {
            T("PASS: %s", pl_cases[i].name);
        }
    }
    T("preload-only: %d case(s), %d failed", ran, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *names[64];
    int nnames = 0, list = 0, pl = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0)
            list = 1;
        else if (strcmp(argv[i], "--preload-only") == 0)
            pl = 1;
        else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc && nnames < 64)
            names[nnames++] = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            dontunmap_seed = strtoull(argv[++i], NULL, 0);
        else
            return usage();
    }
    /* No core files from deliberately crashing children. */
    struct rlimit rl = { 0, 0 };
    setrlimit(RLIMIT_CORE, &rl);

    if (list) {
        for (size_t i = 0; i < NCASES; i++)
            T("%-30s %s", cases[i].name, cases[i].doc);
        for (size_t i = 0; i < NPL; i++)
            T("%-30s [--preload-only] %s", pl_cases[i].name, pl_cases[i].doc);
        return 0;
    }
    for (int k = 0; k < nnames; k++) {
        if (!find(pl ? pl_cases : cases, pl ? NPL : NCASES, names[k])) {
            T("unknown case: %s", names[k]);
            return 2;
        }
    }
    if (pl)
        return run_preload_only(names, nnames);
    for (size_t i = 0; i < NCASES; i++) {
        if (nnames) {
            int want = 0;
            for (int k = 0; k < nnames; k++)
                want |= strcmp(names[k], cases[i].name) == 0;
            if (!want)
                continue;
        }
        T("== %s", cases[i].name);
        mmap_calls = 0;
        cases[i].fn();
    }
    return 0;
}
