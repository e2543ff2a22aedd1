/*
 * os_linux.c — the OS seam on Linux/x86_64 and aarch64 (see os.h for the contract).
 *
 * Owns: nothing but the raw system-call instruction.  Every function returns
 * -errno instead of setting errno, so that free() can promise to preserve it
 * and so that nothing here depends on libc's syscall wrappers (which vmapalloc
 * interposes for mmap/munmap/mremap).
 *
 * No libc function either, on the paths init and the hot paths take: the
 * clock and the CPU id come from the vDSO (found here, through the auxiliary
 * vector) and glibc's rseq area, not from clock_gettime/sched_getcpu, which
 * another interposer may intercept and forward through a pointer it has not
 * set yet when it calls malloc during its own start-up (an ASan program with
 * verify_asan_link_order=0 jumped to address 0 from here).
 *
 * Callers: every core module.  Unit tests wrap these symbols at link time.
 */
#include "os.h"
#include "section.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/uio.h>

#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef PIDFD_SELF
#define PIDFD_SELF (-10000)
#endif

long vmap_os_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
#else
#error "vmapalloc: add the raw system call for this architecture to core/os_linux.c"
#endif
}

#define SC(nr, a, b, c, d, e, f) \
	vmap_os_syscall6((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

void *vmap_os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)SC(SYS_mmap, addr, len, prot, flags, fd, off);
}

int vmap_os_munmap(void *addr, size_t len)
{
	return (int)SC(SYS_munmap, addr, len, 0, 0, 0, 0);
}

int vmap_os_madvise(void *addr, size_t len, int advice)
{
	return (int)SC(SYS_madvise, addr, len, advice, 0, 0, 0);
}

int vmap_os_mprotect(void *addr, size_t len, int prot)
{
	return (int)SC(SYS_mprotect, addr, len, prot, 0, 0, 0);
}

void *vmap_os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	return (void *)SC(SYS_mremap, old, old_len, new_len, flags, new_addr, 0);
}

int vmap_os_mincore(void *addr, size_t len, unsigned char *vec)
{
	return (int)SC(SYS_mincore, addr, len, vec, 0, 0, 0);
}

long vmap_os_madvise_batch(const void *iov, size_t n, int advice)
{
	return SC(SYS_process_madvise, PIDFD_SELF, iov, n, advice, 0, 0);
}

int vmap_os_map_fresh(void *addr, size_t len)
{
	void *m = vmap_os_mmap(addr, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	return vmap_os_is_err(m) ? -vmap_os_err(m) : 0; /* -errno, as os.h says */
}

static int map_hole(void *addr, size_t len, int prot)
{
	void *m = vmap_os_mmap(addr, len, prot,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(m))
		return -vmap_os_err(m);
	if (m != addr) {
		vmap_os_munmap(m, len);
		return -EEXIST;
	}
	return 0;
}

int vmap_os_map_hole(void *addr, size_t len)
{
	return map_hole(addr, len, PROT_READ | PROT_WRITE);
}

int vmap_os_reserve_at(void *addr, size_t len)
{
	return map_hole(addr, len, PROT_NONE);
}

void *vmap_os_reserve(size_t len, size_t align, int prot)
{
	size_t over = len + align;
	if (over < len)
		return (void *)(intptr_t)-12;
	char *p = vmap_os_mmap(NULL, over, prot,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(p))
		return p;
	uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	if (a > (uintptr_t)p)
		vmap_os_munmap(p, a - (uintptr_t)p);
	uintptr_t end = (uintptr_t)p + over, want = a + len;
	if (end > want)
		vmap_os_munmap((void *)want, end - want);
	return (void *)a;
}

int vmap_os_open(const char *path, int flags, int mode)
{
	return (int)SC(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode, 0, 0);
}

long vmap_os_read(int fd, void *buf, size_t len)
{
	return SC(SYS_read, fd, buf, len, 0, 0, 0);
}

long vmap_os_write(int fd, const void *buf, size_t len)
{
	return SC(SYS_write, fd, buf, len, 0, 0, 0);
}

int vmap_os_close(int fd)
{
	return (int)SC(SYS_close, fd, 0, 0, 0, 0, 0);
}

long vmap_os_read_file(const char *path, char *buf, size_t cap)
{
	buf[0] = '\0';
	int fd = vmap_os_open(path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	long n = 0, r;
	while (n < (long)cap - 1 && (r = vmap_os_read(fd, buf + n, cap - 1 - (size_t)n)) > 0)
		n += r;
	vmap_os_close(fd);
	buf[n] = '\0';
	return n;
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

uint64_t vmap_os_count_maps(const uintptr_t *lo, const uintptr_t *hi, unsigned n, uint64_t *inside)
{
	*inside = 0;
	int fd = vmap_os_open("/proc/self/maps", O_RDONLY, 0);
	if (fd < 0)
		return 0;
	char buf[4096];
	uint64_t lines = 0;
	/* Per line: the start (hex), '-', the end (hex), then the rest. */
	uintptr_t a = 0, b = 0;
	int field = 0; /* 0 start, 1 end, 2 rest */
	long r;
	while ((r = vmap_os_read(fd, buf, sizeof buf)) > 0) {
		for (long i = 0; i < r; i++) {
			char c = buf[i];
			if (c == '\n') {
				for (unsigned k = 0; k < n; k++)
					if (b > lo[k] && a < hi[k]) {
						(*inside)++;
						break;
					}
				lines++;
				a = b = 0;
				field = 0;
			} else if (field < 2) {
				int d = hex_digit(c);
				if (d >= 0 && field == 0)
					a = a << 4 | (uintptr_t)d;
				else if (d >= 0)
					b = b << 4 | (uintptr_t)d;
				else
					field++;
			}
		}
	}
	vmap_os_close(fd);
	return lines;
}

uint64_t vmap_os_read_number(const char *path)
{
	char buf[64];
	uint64_t v = 0;
	if (vmap_os_read_file(path, buf, sizeof buf) <= 0)
		return 0;
	for (const char *c = buf; *c >= '0' && *c <= '9'; c++)
		v = v * 10 + (uint64_t)(*c - '0');
	return v;
}

long vmap_os_readlink(const char *path, char *buf, size_t cap)
{
	buf[0] = '\0';
	long n = SC(SYS_readlinkat, AT_FDCWD, path, buf, cap - 1, 0, 0);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

long vmap_os_lseek(int fd, long off, int whence)
{
	return SC(SYS_lseek, fd, off, whence, 0, 0, 0);
}

long vmap_os_read_self(void *dst, const void *src, size_t len)
{
	struct iovec local = {dst, len};
	struct iovec remote = {(void *)src, len};
	return SC(SYS_process_vm_readv, vmap_os_getpid(), &local, 1, &remote, 1, 0);
}

int vmap_os_mlock(void *addr, size_t len, unsigned flags)
{
	return (int)SC(SYS_mlock2, addr, len, flags, 0, 0, 0);
}

int vmap_os_munlock(void *addr, size_t len)
{
	return (int)SC(SYS_munlock, addr, len, 0, 0, 0, 0);
}

#ifndef SYS_mseal
#define SYS_mseal 462
#endif
int vmap_os_mseal(void *addr, size_t len, unsigned long flags)
{
	return (int)SC(SYS_mseal, addr, len, flags, 0, 0, 0);
}

int vmap_os_dup_cloexec(int fd, int min)
{
	return (int)SC(SYS_fcntl, fd, F_DUPFD_CLOEXEC, min, 0, 0, 0);
}

int vmap_os_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		long n = vmap_os_write(fd, p, len);
		if (n == -4) /* EINTR */
			continue;
		if (n < 0)
			return (int)n;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int vmap_os_getpid(void)
{
	return (int)SC(SYS_getpid, 0, 0, 0, 0, 0, 0);
}

int vmap_os_gettid(void)
{
	return (int)SC(SYS_gettid, 0, 0, 0, 0, 0, 0);
}

int vmap_os_prlimit(int resource, uint64_t *cur, uint64_t *max)
{
	struct rlimit64 {
		uint64_t cur, max;
	} r;
	int rc = (int)SC(SYS_prlimit64, 0, resource, NULL, &r, 0, 0);
	if (rc == 0) {
		*cur = r.cur;
		*max = r.max;
	}
	return rc;
}

/* ---- vDSO and rseq ----------------------------------------------------------- */

/* A function of the vDSO by name, or NULL: its symbol table through DT_HASH
 * (which the x86-64 and arm64 vDSOs carry), versions ignored (one each). */
static void *vdso_sym(const char *name)
{
	uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR); /* reads a table: no hook */
	if (!base)
		return NULL;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
	const Elf64_Dyn *dyn = NULL;
	uintptr_t bias = 0;
	bool loaded = false;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && !loaded) {
			bias = base + ph[i].p_offset - ph[i].p_vaddr;
			loaded = true;
		} else if (ph[i].p_type == PT_DYNAMIC) {
			dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
		}
	}
	if (!dyn || !loaded)
		return NULL;
	const Elf64_Sym *sym = NULL;
	const char *str = NULL;
	const Elf64_Word *hash = NULL;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_SYMTAB)
			sym = (const Elf64_Sym *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_STRTAB)
			str = (const char *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_HASH)
			hash = (const Elf64_Word *)(bias + dyn->d_un.d_ptr);
	}
	if (!sym || !str || !hash)
		return NULL;
	for (Elf64_Word i = 0; i < hash[1]; i++) { /* nchain = number of symbols */
		if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || sym[i].st_shndx == SHN_UNDEF)
			continue;
		const char *a = str + sym[i].st_name, *b = name;
		while (*a && *a == *b)
			a++, b++;
		if (*a == *b)
			return (void *)(bias + sym[i].st_value);
	}
	return NULL;
}

/* Resolved on first use (init calls both): 1 = looked up, none there. */
#define VDSO_NONE ((void *)1)
static void *vdso_clock_gettime, *vdso_getcpu;

__attribute__((noinline, cold)) static void *vdso_resolve(void **slot, const char *name1,
							  const char *name2)
{
	void *f = vdso_sym(name1);
	if (!f)
		f = vdso_sym(name2);
	if (!f)
		f = VDSO_NONE;
	__atomic_store_n(slot, f, __ATOMIC_RELAXED); /* every racer finds the same */
	return f;
}

static inline void *vdso_get(void **slot, const char *name1, const char *name2)
{
	void *f = __atomic_load_n(slot, __ATOMIC_RELAXED);
	if (__builtin_expect(f == NULL, 0))
		f = vdso_resolve(slot, name1, name2);
	return f == VDSO_NONE ? NULL : f;
}

/*
 * glibc >= 2.35 registers an rseq area per thread and says where, in ld.so's
 * __rseq_offset and __rseq_size: the kernel keeps its cpu_id (offset 4)
 * current.  Read from ld.so's own symbol table (its base is AT_BASE) on first
 * use, not imported: importing them made ld.so a DT_NEEDED of the library and
 * cost every process a dependency, a version check and two symbol look-ups at
 * load.  No lock, no allocation: any context may resolve them.
 * Absent (older glibc): size 0, no rseq.
 */
ptrdiff_t vmap_rseq_offset VMAP_HOT; /* read by every large allocation */
static unsigned vmap_rseq_size VMAP_HOT;
static int vmap_rseq_known VMAP_HOT;

static const void *ldso_sym(const char *name)
{
	uintptr_t base = (uintptr_t)getauxval(AT_BASE);
	if (!base)
		return NULL;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
	const Elf64_Dyn *dyn = NULL;
	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_DYNAMIC)
			dyn = (const Elf64_Dyn *)(base + ph[i].p_vaddr);
	if (!dyn)
		return NULL;
	const Elf64_Sym *sym = NULL;
	const char *str = NULL;
	const Elf64_Word *hash = NULL;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		uintptr_t v = dyn->d_un.d_ptr;
		if (v < base) /* ld.so relocates these in place on most targets */
			v += base;
		if (dyn->d_tag == DT_SYMTAB)
			sym = (const Elf64_Sym *)v;
		else if (dyn->d_tag == DT_STRTAB)
			str = (const char *)v;
		else if (dyn->d_tag == DT_HASH)
			hash = (const Elf64_Word *)v;
	}
	if (!sym || !str || !hash)
		return NULL;
	for (Elf64_Word i = 0; i < hash[1]; i++) { /* nchain = number of symbols */
		if (sym[i].st_shndx == SHN_UNDEF)
			continue;
		const char *a = str + sym[i].st_name, *b = name;
		while (*a && *a == *b)
			a++, b++;
		if (*a == *b)
			return (const void *)(base + sym[i].st_value);
	}
	return NULL;
}

__attribute__((noinline, cold)) static unsigned rseq_resolve(void)
{
	const ptrdiff_t *off = ldso_sym("__rseq_offset");
	const unsigned *size = ldso_sym("__rseq_size");
	unsigned n = off && size ? *size : 0;
	/* Every racer computes the same; the flag publishes them. */
	__atomic_store_n(&vmap_rseq_offset, off ? *off : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_rseq_size, n, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_rseq_known, 1, __ATOMIC_RELEASE);
	return n;
}

unsigned vmap_os_rseq_size(void)
{
	if (__builtin_expect(__atomic_load_n(&vmap_rseq_known, __ATOMIC_ACQUIRE), 1))
		return __atomic_load_n(&vmap_rseq_size, __ATOMIC_RELAXED);
	return rseq_resolve();
}

unsigned vmap_os_cpu(void)
{
	/* Only a hint: callers lock what they touch. */
	if (vmap_os_rseq_size() >= 8) {
		ptrdiff_t off = __atomic_load_n(&vmap_rseq_offset, __ATOMIC_RELAXED);
		int c = *(volatile int *)((char *)__builtin_thread_pointer() + off + 4);
		if (c >= 0)
			return (unsigned)c;
	}
	unsigned c = 0;
	long (*getcpu)(unsigned *, unsigned *, void *) =
		(long (*)(unsigned *, unsigned *, void *))vdso_get(&vdso_getcpu, "__vdso_getcpu",
								     "__kernel_getcpu");
	if (getcpu ? getcpu(&c, NULL, NULL) : SC(SYS_getcpu, &c, NULL, NULL, 0, 0, 0))
		return 0;
	return c;
}

unsigned vmap_os_ncpu(void)
{
	/* Count CPUs in the affinity-independent "possible" set by asking the
	 * kernel for our affinity mask first; it is what we can run on. */
	unsigned long mask[16];
	long n = SC(SYS_sched_getaffinity, 0, sizeof mask, mask, 0, 0, 0);
	unsigned count = 0;
	for (long i = 0; i < n / (long)sizeof(unsigned long); i++)
		count += (unsigned)__builtin_popcountl(mask[i]);
	return count ? count : 1;
}

uint64_t vmap_os_now_ns(void)
{
	struct timespec ts = {0, 0};
	int (*gettime)(clockid_t, struct timespec *) = (int (*)(clockid_t, struct timespec *))vdso_get(
		&vdso_clock_gettime, "__vdso_clock_gettime", "__kernel_clock_gettime");
	if (!gettime || gettime(CLOCK_MONOTONIC, &ts) != 0)
		SC(SYS_clock_gettime, CLOCK_MONOTONIC, &ts, 0, 0, 0, 0);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

VMAP_START_TEXT uint64_t vmap_os_now_ns_syscall(void)
{
	struct timespec ts = {0, 0};
	SC(SYS_clock_gettime, CLOCK_MONOTONIC, &ts, 0, 0, 0, 0);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void vmap_os_yield(void)
{
	SC(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
}

int vmap_os_block_signals(uint64_t *old)
{
	uint64_t all = ~0ull;
	return (int)SC(SYS_rt_sigprocmask, SIG_BLOCK, &all, old, sizeof all, 0, 0);
}

int vmap_os_set_signals(const uint64_t *mask)
{
	return (int)SC(SYS_rt_sigprocmask, SIG_SETMASK, mask, NULL, sizeof *mask, 0, 0);
}

int vmap_os_thread_name(const char *name)
{
	return (int)SC(SYS_prctl, PR_SET_NAME, name, 0, 0, 0, 0);
}

_Noreturn void vmap_os_abort(void)
{
	int tid = vmap_os_gettid();
	SC(SYS_tgkill, vmap_os_getpid(), tid, 6 /* SIGABRT */, 0, 0, 0);
	/* SIGABRT was blocked or handled and returned: make sure we stop. */
	SC(SYS_exit_group, 134, 0, 0, 0, 0, 0);
	__builtin_unreachable();
}

_Noreturn void vmap_os_exit(int code)
{
	SC(SYS_exit_group, code, 0, 0, 0, 0, 0);
	__builtin_unreachable();
}

int vmap_os_futex_wait(volatile uint32_t *word, uint32_t expected)
{
	return (int)SC(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, 0, 0);
}

int vmap_os_futex_wake(volatile uint32_t *word, int n)
{
	return (int)SC(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, 0, 0, 0);
}

int vmap_os_futex_wait_ns(volatile uint32_t *word, uint32_t expected, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	return (int)SC(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &ts, 0, 0);
}

int vmap_os_nthreads(void)
{
	char buf[1024];
	long n = vmap_os_read_file("/proc/self/stat", buf, sizeof buf);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	/* "pid (comm) state ppid ...": num_threads is field 20, the 18th after
	 * the last ')' (comm may hold spaces and parentheses). */
	long i = n;
	while (i > 0 && buf[i - 1] != ')')
		i--;
	if (!i)
		return -EIO;
	for (int field = 2; field < 20 && i < n; i++)
		if (buf[i] == ' ')
			field++;
	int v = 0;
	while (i < n && buf[i] >= '0' && buf[i] <= '9')
		v = v * 10 + (buf[i++] - '0');
	return v > 0 ? v : -EIO;
}
