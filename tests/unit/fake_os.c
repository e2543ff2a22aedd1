/*
 * fake_os.c — __wrap_vmap_os_* for the fault-injection unit tests (fake_os.h).
 *
 * State is process-wide and protected by a spin lock (the wrappers may be
 * called from several threads; they must not call malloc either, since the
 * core may call them from its own locked sections).
 */
#include "fake_os.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/types.h>

#include "os.h"

#ifndef MREMAP_FIXED
#define MREMAP_FIXED 2
#endif

void *__real_vmap_os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_vmap_os_munmap(void *addr, size_t len);
int __real_vmap_os_madvise(void *addr, size_t len, int advice);
long __real_vmap_os_madvise_batch(const void *iov, size_t n, int advice);
void *__real_vmap_os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
void *__real_vmap_os_reserve(size_t len, size_t align, int prot);
int __real_vmap_os_map_fresh(void *addr, size_t len);
int __real_vmap_os_map_hole(void *addr, size_t len);
int __real_vmap_os_futex_wait_ns(volatile uint32_t *word, uint32_t expected, uint64_t ns);
int __real_vmap_os_futex_wake(volatile uint32_t *word, int n);
uint64_t __real_vmap_os_now_ns(void);
uint64_t __wrap_vmap_os_now_ns(void);

void *__wrap_vmap_os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_vmap_os_munmap(void *addr, size_t len);
int __wrap_vmap_os_madvise(void *addr, size_t len, int advice);
long __wrap_vmap_os_madvise_batch(const void *iov, size_t n, int advice);
void *__wrap_vmap_os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
void *__wrap_vmap_os_reserve(size_t len, size_t align, int prot);
int __wrap_vmap_os_map_fresh(void *addr, size_t len);
int __wrap_vmap_os_map_hole(void *addr, size_t len);
int __wrap_vmap_os_futex_wait_ns(volatile uint32_t *word, uint32_t expected, uint64_t ns);
int __wrap_vmap_os_futex_wake(volatile uint32_t *word, int n);

#define MAX_RANGES 8192
#define MAX_RESERVES 64
#define MAX_ADVICE 32

static struct {
	unsigned calls[FAKE_NFN];
	unsigned failures[FAKE_NFN];
	unsigned fail_from[FAKE_NFN], fail_to[FAKE_NFN]; /* call numbers that fail; 0 = none */
	bool fail_always[FAKE_NFN];
	int fail_err[FAKE_NFN];
	unsigned madvise_by_advice[MAX_ADVICE];
	enum fake_batch batch;
	unsigned nranges;
	struct fake_range ranges[MAX_RANGES];
	unsigned nreserves;
	size_t reserves[MAX_RESERVES];
	size_t partial_moved, partial_hole;
} fk;

static volatile int fk_lock;

static void lock(void)
{
	while (__atomic_exchange_n(&fk_lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&fk_lock, __ATOMIC_RELAXED))
			__asm__ volatile("" ::: "memory");
}

static void unlock(void)
{
	__atomic_store_n(&fk_lock, 0, __ATOMIC_RELEASE);
}

/* Counts a call of fn; returns the -errno to fail it with, or 0. */
static int enter(enum fake_fn fn)
{
	lock();
	unsigned n = ++fk.calls[fn];
	int err = 0;
	if (fk.fail_always[fn] || (fk.fail_from[fn] && n >= fk.fail_from[fn] && n <= fk.fail_to[fn])) {
		err = fk.fail_err[fn];
		fk.failures[fn]++;
	}
	unlock();
	return err;
}

static void record(uintptr_t addr, size_t len, int advice, bool batch)
{
	lock();
	if (fk.nranges < MAX_RANGES)
		fk.ranges[fk.nranges] = (struct fake_range){addr, len, advice, batch};
	fk.nranges++;
	unlock();
}

void fake_reset(void)
{
	lock();
	for (int i = 0; i < FAKE_NFN; i++) {
		fk.calls[i] = fk.failures[i] = fk.fail_from[i] = fk.fail_to[i] = 0;
		fk.fail_always[i] = false;
		fk.fail_err[i] = 0;
	}
	for (int i = 0; i < MAX_ADVICE; i++)
		fk.madvise_by_advice[i] = 0;
	fk.batch = FAKE_BATCH_REAL;
	fk.nranges = 0;
	fk.nreserves = 0;
	fk.partial_moved = fk.partial_hole = 0;
	unlock();
}

void fake_fail_nth(enum fake_fn fn, unsigned nth, int err)
{
	lock();
	fk.fail_from[fn] = fk.fail_to[fn] = fk.calls[fn] + (nth ? nth : 1);
	fk.fail_always[fn] = false;
	fk.fail_err[fn] = err;
	unlock();
}

void fake_fail_next(enum fake_fn fn, unsigned n, int err)
{
	lock();
	fk.fail_from[fn] = n ? fk.calls[fn] + 1 : 0;
	fk.fail_to[fn] = fk.calls[fn] + n;
	fk.fail_always[fn] = false;
	fk.fail_err[fn] = err;
	unlock();
}

void fake_fail_always(enum fake_fn fn, int err)
{
	lock();
	fk.fail_always[fn] = true;
	fk.fail_err[fn] = err;
	unlock();
}

void fake_fail_clear(enum fake_fn fn)
{
	lock();
	fk.fail_always[fn] = false;
	fk.fail_from[fn] = fk.fail_to[fn] = 0;
	unlock();
}

unsigned fake_calls(enum fake_fn fn)
{
	return __atomic_load_n(&fk.calls[fn], __ATOMIC_RELAXED);
}

unsigned fake_failures(enum fake_fn fn)
{
	return __atomic_load_n(&fk.failures[fn], __ATOMIC_RELAXED);
}

unsigned fake_madvise_calls(int advice)
{
	return advice >= 0 && advice < MAX_ADVICE
		       ? __atomic_load_n(&fk.madvise_by_advice[advice], __ATOMIC_RELAXED)
		       : 0;
}

void fake_batch_mode(enum fake_batch mode)
{
	lock();
	fk.batch = mode;
	unlock();
}

unsigned fake_advised(int advice, struct fake_range *out, unsigned max)
{
	lock();
	unsigned k = 0, n = fk.nranges < MAX_RANGES ? fk.nranges : MAX_RANGES;
	for (unsigned i = 0; i < n; i++) {
		if (fk.ranges[i].advice != advice)
			continue;
		if (k < max)
			out[k] = fk.ranges[i];
		k++;
	}
	unlock();
	return k;
}

unsigned fake_reserve_sizes(size_t *out, unsigned max)
{
	lock();
	unsigned n = fk.nreserves < MAX_RESERVES ? fk.nreserves : MAX_RESERVES;
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = fk.reserves[i];
	unlock();
	return n;
}

/* ---- the wrappers ---------------------------------------------------------- */

void *__wrap_vmap_os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int err = enter(FAKE_MMAP);
	if (err)
		return (void *)(intptr_t)-err;
	return __real_vmap_os_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_vmap_os_munmap(void *addr, size_t len)
{
	int err = enter(FAKE_MUNMAP);
	if (err)
		return -err;
	return __real_vmap_os_munmap(addr, len);
}

static void (*madvise_hook)(void *addr, size_t len, int advice);
static void (*wait_hook)(volatile uint32_t *word);
static void (*wake_hook)(volatile uint32_t *word);

void fake_madvise_hook(void (*fn)(void *addr, size_t len, int advice))
{
	__atomic_store_n(&madvise_hook, fn, __ATOMIC_RELEASE);
}

void fake_futex_hooks(void (*before_wait)(volatile uint32_t *word),
		      void (*after_wake)(volatile uint32_t *word))
{
	__atomic_store_n(&wait_hook, before_wait, __ATOMIC_RELEASE);
	__atomic_store_n(&wake_hook, after_wake, __ATOMIC_RELEASE);
}

int __wrap_vmap_os_futex_wait_ns(volatile uint32_t *word, uint32_t expected, uint64_t ns)
{
	void (*fn)(volatile uint32_t *) = __atomic_load_n(&wait_hook, __ATOMIC_ACQUIRE);
	if (fn)
		fn(word);
	return __real_vmap_os_futex_wait_ns(word, expected, ns);
}

int __wrap_vmap_os_futex_wake(volatile uint32_t *word, int n)
{
	int rc = __real_vmap_os_futex_wake(word, n);
	void (*fn)(volatile uint32_t *) = __atomic_load_n(&wake_hook, __ATOMIC_ACQUIRE);
	if (fn)
		fn(word);
	return rc;
}

int __wrap_vmap_os_madvise(void *addr, size_t len, int advice)
{
	void (*hook)(void *, size_t, int) = __atomic_load_n(&madvise_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook(addr, len, advice);
	int err = enter(FAKE_MADVISE);
	if (advice >= 0 && advice < MAX_ADVICE)
		__atomic_add_fetch(&fk.madvise_by_advice[advice], 1, __ATOMIC_RELAXED);
	record((uintptr_t)addr, len, advice, false);
	if (err)
		return -err;
	return __real_vmap_os_madvise(addr, len, advice);
}

long __wrap_vmap_os_madvise_batch(const void *iov, size_t n, int advice)
{
	int err = enter(FAKE_MADVISE_BATCH);
	const struct iovec *v = iov;
	for (size_t i = 0; i < n; i++)
		record((uintptr_t)v[i].iov_base, v[i].iov_len, advice, true);
	if (err)
		return -err;
	lock();
	enum fake_batch mode = fk.batch;
	unlock();
	if (mode == FAKE_BATCH_EINVAL)
		return -EINVAL;
	if (mode == FAKE_BATCH_EMULATE) {
		long total = 0;
		for (size_t i = 0; i < n; i++) {
			int rc = __real_vmap_os_madvise(v[i].iov_base, v[i].iov_len, advice);
			if (rc < 0)
				return total ? total : rc;
			total += (long)v[i].iov_len;
		}
		return total;
	}
	return __real_vmap_os_madvise_batch(iov, n, advice);
}

void fake_mremap_partial(size_t moved, size_t hole)
{
	lock();
	fk.partial_moved = moved;
	fk.partial_hole = hole;
	unlock();
}

void *__wrap_vmap_os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	int err = enter(FAKE_MREMAP);
	if (err) {
		lock();
		size_t moved = fk.partial_moved, hole = fk.partial_hole;
		unlock();
		if (moved < old_len && (flags & MREMAP_FIXED)) {
			char *to = new_addr;
			if (moved && __real_vmap_os_mremap(old, moved, moved, flags, to) != to)
				__builtin_trap(); /* the test's premise is broken */
			if (hole)
				__real_vmap_os_munmap(to + moved, hole);
		}
		return (void *)(intptr_t)-err;
	}
	return __real_vmap_os_mremap(old, old_len, new_len, flags, new_addr);
}

void *__wrap_vmap_os_reserve(size_t len, size_t align, int prot)
{
	int err = enter(FAKE_RESERVE);
	lock();
	if (fk.nreserves < MAX_RESERVES)
		fk.reserves[fk.nreserves] = len;
	fk.nreserves++;
	unlock();
	if (err)
		return (void *)(intptr_t)-err;
	return __real_vmap_os_reserve(len, align, prot);
}

int __wrap_vmap_os_map_fresh(void *addr, size_t len)
{
	int err = enter(FAKE_MAP_FRESH);
	if (err)
		return -err;
	return __real_vmap_os_map_fresh(addr, len);
}

int __wrap_vmap_os_map_hole(void *addr, size_t len)
{
	int err = enter(FAKE_MAP_HOLE);
	if (err)
		return -err;
	return __real_vmap_os_map_hole(addr, len);
}

/* The clock the core reads: the real one, or a set time (fake_clock_set). */
static uint64_t fake_now;

void fake_clock_set(uint64_t ns)
{
	__atomic_store_n(&fake_now, ns, __ATOMIC_RELAXED);
}

uint64_t __wrap_vmap_os_now_ns(void)
{
	uint64_t ns = __atomic_load_n(&fake_now, __ATOMIC_RELAXED);
	return ns ? ns : __real_vmap_os_now_ns();
}
