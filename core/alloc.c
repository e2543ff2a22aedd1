/*
 * alloc.c — the facade: glibc's malloc contracts on top of two allocators.
 *
 *   size <= VMAPALLOC_SMALL_MAX, alignment < page  -> small backend (glibc)
 *   larger, page-aligned or page-granular requests -> range allocator
 *   pointer outside every arena region             -> glibc (its own, or
 *                                                     allocated before us)
 *
 * Owns: the init state machine, the per-thread "seen" flag that detects the
 * second thread (the counter switch), the fork handlers, the exit report.
 *
 * Invariants:
 *  - Initialisation runs once, on the first call from any entry point (a
 *    constructor alone is too late: other libraries allocate before it), and
 *    is re-entrant: a call made during init on the initialising thread goes
 *    to glibc.  Nothing in init calls malloc, stdio, getenv or dlsym.
 *  - errno is preserved by free, and set to ENOMEM/EINVAL exactly where
 *    glibc sets it.
 *  - A request the range allocator cannot serve falls back to glibc before
 *    failing: nothing the system could have served is refused.
 *
 * Fork: handlers registered at init (so that they run last among prepare
 * handlers and first after fork) take the purge lock, every shard lock, then
 * the global lock — the rank order of lock.h.
 */
#include "alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <gnu/libc-version.h>
#include <sys/auxv.h>

#include "backend.h"
#include "cache.h"
#include "counter.h"
#include "fmt.h"
#include "lock.h"
#include "options.h"
#include "profile.h"
#include "range.h"
#include "stats.h"

extern char **environ;

enum { INIT_NONE, INIT_BUSY, INIT_DONE };
static int vmap_init_state;
static bool vmap_range_ok;
static __thread bool vmap_tls_in_init;
static __thread bool vmap_tls_seen;
static int vmap_main_pid;
static bool vmap_glibc_strict_aligned_alloc;
static pthread_key_t vmap_thread_key;
static bool vmap_thread_key_ok;

/* pthread key destructor: the thread's last chance to give back what it holds.
 * glibc may still call free() after this; those frees bypass the cache. */
static void thread_exit(void *arg)
{
	(void)arg;
	vmap_counter_thread_exit();
	vmap_cache_thread_exit();
	vmap_profile_thread_exit();
}

#define SMALL_ALIGN 16 /* alignof(max_align_t) */

/*
 * The arena, the shards and the thread caches are set up on the first request
 * that needs them (a large block, a servable mmap), not at init: a process
 * that makes only small allocations -- most processes of a shell script or a
 * build -- reserves nothing, maps no shard and makes none of the set-up's
 * system calls (bench/startup.py: issue 5).
 */
enum { RANGE_NONE, RANGE_BUSY, RANGE_DONE };
static int vmap_range_state;
static __thread bool vmap_tls_in_range_setup;

__attribute__((noinline, cold)) static bool range_setup_slow(void)
{
	if (vmap_tls_in_range_setup)
		return false; /* re-entered (a signal handler) during the set-up: glibc */
	int expected = RANGE_NONE;
	if (__atomic_compare_exchange_n(&vmap_range_state, &expected, RANGE_BUSY, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		vmap_tls_in_range_setup = true;
		bool ok = vmap_range_init() == 0;
		if (ok)
			vmap_cache_init(vmap_os_ncpu());
		else
			vmap_say("could not reserve an arena (the system refused even 256 MiB); ",
				 "large allocations go to glibc", NULL);
		__atomic_store_n(&vmap_range_ok, ok, __ATOMIC_RELEASE);
		__atomic_store_n(&vmap_range_state, RANGE_DONE, __ATOMIC_RELEASE);
		vmap_tls_in_range_setup = false;
		return ok;
	}
	while (__atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) != RANGE_DONE)
		vmap_os_yield();
	return __atomic_load_n(&vmap_range_ok, __ATOMIC_ACQUIRE);
}

static inline bool range_ready(void)
{
	if (__builtin_expect(__atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == RANGE_DONE, 1))
		return vmap_range_ok;
	return range_setup_slow();
}

bool vmap_range_ready(void)
{
	return range_ready();
}

bool vmap_range_enabled(void)
{
	return __atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == RANGE_DONE && vmap_range_ok;
}

/* ---- init -------------------------------------------------------------- */

static char env_buf[65536];
static char *env_ptrs[1024];

/* environ is not set yet when ld.so itself allocates: read the kernel's copy. */
static char **env_from_proc(void)
{
	int fd = vmap_os_open("/proc/self/environ", 0, 0);
	if (fd < 0)
		return NULL;
	long n = 0, r;
	while (n < (long)sizeof env_buf - 1 &&
	       (r = vmap_os_read(fd, env_buf + n, sizeof env_buf - 1 - (size_t)n)) > 0)
		n += r;
	vmap_os_close(fd);
	env_buf[n < 0 ? 0 : n] = '\0';
	size_t k = 0;
	for (long i = 0; i < n && k < 1023; i++) {
		if (i == 0 || env_buf[i - 1] == '\0')
			env_ptrs[k++] = &env_buf[i];
	}
	env_ptrs[k] = NULL;
	return env_ptrs;
}

static bool glibc_at_least(unsigned major, unsigned minor)
{
	const char *v = gnu_get_libc_version(); /* a static string: no allocation */
	unsigned a = 0, b = 0;
	while (*v >= '0' && *v <= '9')
		a = a * 10 + (unsigned)(*v++ - '0');
	if (*v == '.')
		v++;
	while (*v >= '0' && *v <= '9')
		b = b * 10 + (unsigned)(*v++ - '0');
	return a > major || (a == major && b >= minor);
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

__attribute__((noinline, cold)) static void init_slow(void)
{
	if (vmap_tls_in_init)
		return;
	int expected = INIT_NONE;
	if (!__atomic_compare_exchange_n(&vmap_init_state, &expected, INIT_BUSY, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		while (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
			vmap_os_yield();
		return;
	}
	vmap_tls_in_init = true;
	if (vmap_backend_init() != 0)
		vmap_os_exit(127);
	bool secure = getauxval(AT_SECURE) != 0;
	vmap_options_parse(environ ? environ : env_from_proc(), secure);
	if (vmap_opt.help) {
		vmap_options_print(1, false);
		vmap_os_exit(0);
	}
	vmap_counter_init(vmap_os_ncpu());
	vmap_glibc_strict_aligned_alloc = glibc_at_least(2, 38);
	if (vmap_opt.counter == VMAP_COUNTER_PERCPU)
		vmap_counter_go_percpu();
	vmap_main_pid = vmap_os_getpid();
	vmap_stats_init(); /* report fd, start time, VMAPALLOC_STATS_SIGNAL handler */
	vmap_profile_init();
	if (vmap_opt.verbose)
		vmap_options_print(2, true);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	vmap_thread_key_ok = pthread_key_create(&vmap_thread_key, thread_exit) == 0;
	vmap_tls_seen = true;
	__atomic_store_n(&vmap_init_state, INIT_DONE, __ATOMIC_RELEASE);
	vmap_tls_in_init = false;
}

/* First call on a thread other than the first: switch counters to per-CPU. */
__attribute__((noinline, cold)) static void thread_first_call(void)
{
	/* The initialising thread set its flag at init, and a forked child's
	 * thread inherits it: any thread getting here is another thread (no
	 * gettid/getpid pair needed, bench/counter: 200-250 ns per thread). */
	vmap_tls_seen = true;
	vmap_threads_seen = true;
	if (vmap_opt.counter != VMAP_COUNTER_ATOMIC)
		vmap_counter_go_percpu();
	/* A non-NULL value makes the key's destructor run at thread exit;
	 * setting it may allocate (keys >= 32), which is safe: seen is set. */
	if (vmap_thread_key_ok)
		pthread_setspecific(vmap_thread_key, (void *)1);
}

static inline void enter(void)
{
	if (__builtin_expect(__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE, 0))
		init_slow();
	else if (__builtin_expect(!vmap_tls_seen, 0))
		thread_first_call();
}

void vmap_init(void)
{
	enter();
}

static inline void count(enum vmap_stat s)
{
	vmap_stat_inc_local(s);
}

/* ---- small backend ------------------------------------------------------ */

static inline void *small_malloc(size_t size)
{
	return vmap_libc.malloc ? vmap_libc.malloc(size) : NULL;
}

static inline void small_free(void *p)
{
	if (vmap_libc.free)
		vmap_libc.free(p);
}

/* ---- the malloc family ---------------------------------------------------- */

static bool is_large(size_t size)
{
	return size > vmap_opt.small_max && range_ready();
}

/* Range allocation with glibc as the fallback; NULL only when both refuse. */
static void *large_alloc(size_t size, size_t align, bool *zero)
{
	void *p = vmap_range_alloc(size, align, zero);
	if (p)
		return p;
	*zero = false;
	return align <= SMALL_ALIGN ? small_malloc(size) : vmap_libc.memalign(align, size);
}

void *vmap_malloc(size_t size)
{
	enter();
	count(VMAP_STAT_malloc_calls);
	void *p;
	if (!is_large(size)) {
		count(VMAP_STAT_small_allocs);
		p = small_malloc(size);
	} else {
		bool zero;
		p = size > PTRDIFF_MAX ? NULL : large_alloc(size, SMALL_ALIGN, &zero);
	}
	if (!p)
		errno = ENOMEM;
	else if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_alloc(p, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
	return p;
}

void vmap_free(void *p)
{
	if (!p)
		return;
	enter();
	/* errno survives: the range path makes only raw system calls, which
	 * never touch it, and glibc's free preserves it (since 2.33). */
	count(VMAP_STAT_free_calls);
	bool owned = vmap_range_owns(p);
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_free_known(p, owned);
	if (owned) {
		vmap_range_free(p, "free");
	} else {
		count(VMAP_STAT_small_frees);
		small_free(p);
	}
}

void *vmap_calloc(size_t n, size_t size)
{
	enter();
	count(VMAP_STAT_calloc_calls);
	size_t total;
	if (__builtin_mul_overflow(n, size, &total) || total > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (!is_large(total)) {
		count(VMAP_STAT_small_allocs);
		void *p = vmap_libc.calloc ? vmap_libc.calloc(n, size) : NULL;
		if (!p)
			errno = ENOMEM;
		else if (__builtin_expect(vmap_profile_on, 0))
			vmap_profile_alloc(p, total, VMAP_PROFILE_SMALL);
		return p;
	}
	bool zero;
	void *p = large_alloc(total, SMALL_ALIGN, &zero);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	if (zero)
		count(VMAP_STAT_calloc_zero_skipped);
	else
		memset(p, 0, total);
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_alloc(p, total, VMAP_PROFILE_LARGE);
	return p;
}

static size_t usable(void *p)
{
	return vmap_range_owns(p) ? vmap_range_usable(p, "malloc_usable_size")
				  : vmap_libc.usable_size(p);
}

/* Moves a block to a new allocation of size bytes by copying. */
static void *realloc_copy(void *p, size_t old, size_t size)
{
	void *q;
	if (!is_large(size)) {
		q = small_malloc(size);
	} else {
		bool zero;
		q = large_alloc(size, SMALL_ALIGN, &zero);
	}
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	count(VMAP_STAT_realloc_copied);
	vmap_free(p);
	return q;
}

void *vmap_realloc(void *p, size_t size)
{
	if (!p)
		return vmap_malloc(size);
	enter();
	count(VMAP_STAT_realloc_calls);
	if (size == 0) {
		/* glibc: realloc(p, 0) frees p and returns NULL. */
		vmap_free(p);
		return NULL;
	}
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_free(p); /* before it can move and its address be reused */
	void *q;
	if (!vmap_range_owns(p)) {
		/* glibc's block: glibc resizes it while it stays small. */
		if (!is_large(size)) {
			q = vmap_libc.realloc(p, size);
		} else {
			q = realloc_copy(p, vmap_libc.usable_size(p), size);
		}
	} else {
		size_t old = vmap_range_usable(p, "realloc");
		if (!is_large(size) || (size <= old / 2 && old - size >= 64 * VMAP_PAGE)) {
			/* Shrinking far: copying the kept part is cheaper than keeping
			 * the whole area resident. */
			q = realloc_copy(p, old, size);
		} else if (size <= old || vmap_range_resize(p, size)) {
			if (size > old)
				count(VMAP_STAT_realloc_in_place);
			q = p;
		} else {
			bool moved;
			q = vmap_range_move(p, size, &moved);
			if (q && !moved) {
				memcpy(q, p, old);
				count(VMAP_STAT_realloc_copied);
				vmap_range_free(p, "realloc");
			} else if (!q) {
				q = realloc_copy(p, old, size); /* glibc as the last resort */
			}
		}
	}
	if (!q)
		errno = ENOMEM;
	else if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_alloc(q, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
	return q;
}

void *vmap_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return vmap_realloc(p, total);
}

/* align: a power of two. */
static void *aligned(size_t align, size_t size)
{
	enter();
	count(VMAP_STAT_memalign_calls);
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	void *p;
	if (align <= SMALL_ALIGN && !is_large(size)) {
		count(VMAP_STAT_small_allocs);
		p = small_malloc(size);
	} else if (align < VMAP_PAGE && !is_large(size)) {
		count(VMAP_STAT_small_allocs);
		p = vmap_libc.memalign(align, size);
	} else if (range_ready()) {
		bool zero;
		p = large_alloc(size, align, &zero);
	} else {
		p = vmap_libc.memalign(align, size);
	}
	if (!p)
		errno = ENOMEM;
	else if (__builtin_expect(vmap_profile_on, 0))
		vmap_profile_alloc(p, size, VMAP_PROFILE_KIND(p));
	return p;
}

static bool pow2(size_t x)
{
	return x && !(x & (x - 1));
}

int vmap_posix_memalign(void **out, size_t align, size_t size)
{
	if (!pow2(align) || align % sizeof(void *) != 0)
		return EINVAL;
	int saved = errno;
	void *p = aligned(align, size);
	errno = saved;
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *vmap_aligned_alloc(size_t align, size_t size)
{
	/* Any size (C17, DR 460).  The alignment: as the running glibc does it
	 * — from 2.38 a power of two or EINVAL (C17), before that memalign's
	 * rounding up — so that a program behaves as it did without vmapalloc. */
	enter();
	if (vmap_glibc_strict_aligned_alloc && !pow2(align)) {
		errno = EINVAL;
		return NULL;
	}
	return vmap_memalign(align, size);
}

void *vmap_memalign(size_t align, size_t size)
{
	/* glibc: alignments are rounded up to a power of two; absurd ones fail. */
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align < SMALL_ALIGN)
		align = SMALL_ALIGN;
	if (!pow2(align))
		align = (size_t)1 << (64 - __builtin_clzll(align));
	return aligned(align, size);
}

void *vmap_valloc(size_t size)
{
	return aligned(VMAP_PAGE, size);
}

void *vmap_pvalloc(size_t size)
{
	size_t rounded;
	if (__builtin_add_overflow(size, VMAP_PAGE - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	rounded &= ~(VMAP_PAGE - 1);
	return aligned(VMAP_PAGE, rounded ? rounded : VMAP_PAGE);
}

size_t vmap_usable_size(void *p)
{
	if (!p)
		return 0;
	enter();
	return usable(p);
}

int vmap_trim(size_t pad)
{
	enter();
	vmap_cache_trim();
	size_t released = vmap_range_purge(true);
	int glibc = vmap_libc.trim(pad);
	return released > 0 || glibc;
}

int vmap_mallopt(int param, int value)
{
	enter();
	return vmap_libc.mallopt(param, value);
}

struct mallinfo2 vmap_mallinfo2(void)
{
	enter();
	struct mallinfo2 mi = vmap_libc.mallinfo2();
	/* Large blocks are reported the way glibc reports its mmapped chunks. */
	size_t live = (size_t)vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	size_t cached = (size_t)vmap_stat_read(VMAP_STAT_cached_bytes);
	mi.hblks += (size_t)vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	mi.hblkhd += live + cached;
	mi.uordblks += live;
	mi.fordblks += cached;
	mi.keepcost += cached;
	return mi;
}

void vmap_malloc_stats(void)
{
	enter();
	vmap_stats_write(2, VMAP_FORMAT_TEXT);
}

int vmap_malloc_info(int options, FILE *fp)
{
	enter();
	if (options != 0 || !fp) {
		errno = EINVAL;
		return -1;
	}
	char buf[4096];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof buf, buf, 0};
	vmap_stats_xml(&b);
	return fwrite(buf, 1, b.len, fp) == b.len ? 0 : -1;
}

/* ---- fork and exit ----------------------------------------------------- */

static void fork_prepare(void)
{
	/* Another thread setting up the arena finishes first (the child could
	 * not: it would wait for it forever). */
	while (!vmap_tls_in_range_setup &&
	       __atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == RANGE_BUSY)
		vmap_os_yield();
	vmap_purge_fork_prepare();
	vmap_range_fork_prepare();
	vmap_cache_fork_prepare();
	vmap_profile_fork_prepare();
}

static void fork_parent(void)
{
	vmap_profile_fork_parent();
	vmap_cache_fork_parent();
	vmap_range_fork_parent();
	vmap_purge_fork_parent();
}

static void fork_child(void)
{
	vmap_profile_fork_child();
	vmap_stats_fork_child(); /* the child's report is labelled with its parent */
	vmap_cache_fork_child();
	vmap_range_fork_child();
	vmap_purge_fork_child();
	vmap_lock_rank_reset();
}

void vmap_at_exit(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
		return;
	vmap_stats_at_exit(); /* if VMAPALLOC_STATS or VMAPALLOC_PROFILE is set */
}
