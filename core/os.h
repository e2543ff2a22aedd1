/*
 * os.h — the one OS seam of vmapalloc.
 *
 * Contract (every function below):
 *  - All system calls are raw (inline `syscall` instruction): vmapalloc
 *    interposes mmap/munmap/mremap itself, so going through libc's wrappers
 *    would re-enter it, and libc wrappers would also clobber errno.
 *  - Results are 0 (or a value) on success and -errno on failure; errno is
 *    never touched.  Pointer results use vmap_os_is_err().
 *  - Addresses and lengths given to the memory calls are page-aligned.
 *  - Nothing here allocates, takes a lock, or calls stdio.
 *
 * Unit tests replace these functions at link time (-Wl,--wrap) to inject
 * failures; no function pointer sits between the core and the kernel.
 */
#ifndef VMAP_OS_H
#define VMAP_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define VMAP_PAGE_SHIFT 12
#define VMAP_PAGE ((size_t)1 << VMAP_PAGE_SHIFT)
#define VMAP_HUGE_PAGE ((size_t)2 << 20)

/* Advice and flags newer than some of the headers vmapalloc builds with:
 * defined once here, with the kernel's values. */
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#define MADV_NOHUGEPAGE 15
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

static inline int vmap_os_is_err(const void *p)
{
	return (uintptr_t)p >= (uintptr_t)-4095;
}
static inline int vmap_os_err(const void *p)
{
	return (int)-(intptr_t)p;
}

long vmap_os_syscall6(long nr, long a, long b, long c, long d, long e, long f);

/* Memory. */
void *vmap_os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int vmap_os_munmap(void *addr, size_t len);
int vmap_os_madvise(void *addr, size_t len, int advice);
int vmap_os_mprotect(void *addr, size_t len, int prot);
void *vmap_os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
int vmap_os_mincore(void *addr, size_t len, unsigned char *vec);
/* process_madvise(PIDFD_SELF, iov, n, advice): bytes advised or -errno. */
long vmap_os_madvise_batch(const void *iov, size_t n, int advice);

/* Replaces [addr, addr+len) with a fresh RW + NORESERVE anonymous mapping
 * (zero, no leftover protection, advice or lock): 0 or -errno. */
int vmap_os_map_fresh(void *addr, size_t len);
/* Maps [addr, addr+len) fresh only if none of it is mapped
 * (MAP_FIXED_NOREPLACE; checked by address on kernels before 4.17, which
 * take it as a hint): 0 or -errno (-EEXIST when something is there). */
int vmap_os_map_hole(void *addr, size_t len);

/* Reserve len bytes of address space aligned to align, with protection prot
 * and MAP_NORESERVE.  Under strict overcommit (vm.overcommit_memory=2) the
 * kernel ignores MAP_NORESERVE and charges a writable reservation in full:
 * reserve PROT_NONE or PROT_READ (never charged) and make the parts in use
 * writable with mprotect (charged then). */
void *vmap_os_reserve(size_t len, size_t align, int prot);
/* Reserves [addr, addr+len) PROT_NONE + NORESERVE only if none of it is
 * mapped, as vmap_os_map_hole: 0 or -errno (-EEXIST when something is there). */
int vmap_os_reserve_at(void *addr, size_t len);

/* Locking and sealing, as the program asked for them (mmap.c): mlock2 with
 * flags (0 or MLOCK_ONFAULT), munlock, mseal; 0 or -errno. */
int vmap_os_mlock(void *addr, size_t len, unsigned flags);
int vmap_os_munlock(void *addr, size_t len);
int vmap_os_mseal(void *addr, size_t len, unsigned long flags);

/* Files, for /proc reads and the report. */
int vmap_os_open(const char *path, int flags, int mode);
long vmap_os_read(int fd, void *buf, size_t len);
long vmap_os_write(int fd, const void *buf, size_t len);
int vmap_os_close(int fd);
/* fcntl(fd, F_DUPFD_CLOEXEC, min): a new fd >= min, or -errno. */
int vmap_os_dup_cloexec(int fd, int min);
/* Writes all of buf (retrying short writes and EINTR); 0 or -errno. */
int vmap_os_write_all(int fd, const void *buf, size_t len);
/* The one reader of /proc (and other small files): up to cap - 1 bytes of
 * path into buf, NUL-terminated (buf[0] = 0 on failure); the length read,
 * or -errno when the file cannot be opened. */
long vmap_os_read_file(const char *path, char *buf, size_t cap);
/* The process's mappings (lines of /proc/self/maps, streamed: no buffer
 * holds the file), and in *inside those that overlap one of the n ranges
 * [lo[i], hi[i]).  0 when the file cannot be read. */
uint64_t vmap_os_count_maps(const uintptr_t *lo, const uintptr_t *hi, unsigned n, uint64_t *inside);
/* The unsigned decimal number a file starts with (/proc/sys/vm/...,
 * /proc/self/statm); 0 when it cannot be read. */
uint64_t vmap_os_read_number(const char *path);
/* readlink(path) into buf, NUL-terminated (cut to cap - 1 bytes): the
 * length, or -errno (buf[0] = 0). */
long vmap_os_readlink(const char *path, char *buf, size_t cap);
/* lseek(fd, off, whence): the new offset or -errno. */
long vmap_os_lseek(int fd, long off, int whence);
/* process_vm_readv of len bytes at src in this process into dst: bytes read
 * or -errno (-EFAULT when src is not mapped readable): a read that cannot
 * fault. */
long vmap_os_read_self(void *dst, const void *src, size_t len);

/* Process. */
int vmap_os_getpid(void);
int vmap_os_gettid(void);
int vmap_os_prlimit(int resource, uint64_t *cur, uint64_t *max);
unsigned vmap_os_cpu(void);      /* the CPU this thread runs on: a hint */
/* glibc's rseq area: its size (0: none registered, or glibc < 2.35) and, once
 * the size has been asked for, its offset from the thread pointer. */
unsigned vmap_os_rseq_size(void);
extern ptrdiff_t vmap_rseq_offset;
unsigned vmap_os_ncpu(void);     /* configured CPUs, at least 1 */
uint64_t vmap_os_now_ns(void);   /* CLOCK_MONOTONIC */
/* The same clock through the system call, not the vDSO: for a single reading
 * (the start time), where the vDSO's first use costs more -- a page fault on
 * its data page and the look-up of its symbol -- than the call itself. */
uint64_t vmap_os_now_ns_syscall(void);
void vmap_os_yield(void);
/* The calling thread's signal mask, raw (the kernel's 64-bit set): all
 * blocked (the old mask in *old), or set back. */
int vmap_os_block_signals(uint64_t *old);
int vmap_os_set_signals(const uint64_t *mask);
int vmap_os_thread_name(const char *name); /* PR_SET_NAME, up to 15 bytes */
_Noreturn void vmap_os_abort(void);
_Noreturn void vmap_os_exit(int code);

/* Futex wait/wake on a 32-bit word (private). */
int vmap_os_futex_wait(volatile uint32_t *word, uint32_t expected);
int vmap_os_futex_wake(volatile uint32_t *word, int n);
/* The same wait for at most ns nanoseconds: 0, -EAGAIN, -EINTR or -ETIMEDOUT. */
int vmap_os_futex_wait_ns(volatile uint32_t *word, uint32_t expected, uint64_t ns);
/* Threads in this process (num_threads of /proc/self/stat), or -errno. */
int vmap_os_nthreads(void);

#endif
