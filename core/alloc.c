/*
 * alloc.c — the facade: glibc's malloc contracts on top of two allocators.
 *
 *   size <= VMAPALLOC_SMALL_MAX, alignment < page  -> small backend (glibc)
 *   larger, page-aligned or page-granular requests -> range allocator
 *   pointer outside every arena region             -> glibc (its own, or
 *                                                     allocated before us)
 *   ... that cannot be glibc's (stack, static data) -> left alone, counted,
 *                                                     said once ("foreign")
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
 * the global lock — the rank order of lock.h.  Not when no second thread ever
 * called in (nobody else can hold them; glibc skips its own malloc locks
 * then too) or when fork() comes from a signal handler that interrupted this
 * thread inside the range allocator (it holds them itself).  From prepare to
 * parent/child the forking thread counts as re-entered, so that fork
 * handlers which run inside that window may allocate (see "re-entry").
 */
#include "alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <gnu/lib-names.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "backend.h"
#include "cache.h"
#include "counter.h"
#include "fast.h"
#include "fmt.h"
#include "lock.h"
#include "mmap.h"
#include "options.h"
#include "profile.h"
#include "range.h"
#include "section.h"
#include "slab.h"
#include "stats.h"

extern char **environ;

/* Sizes 1..vmap_slab_limit go to the builtin backend's slabs (0 = none: the
 * test `size - 1 < limit` then fails for every size; malloc(0) takes the
 * general path). */
static size_t vmap_slab_limit VMAP_HOT;
size_t vmap_fast_limit VMAP_HOT; /* fast.h */
static uint32_t vmap_auto_after VMAP_HOT; /* BACKEND=auto: 0 = no switch to come (see small_malloc) */
/* Requests above this size are large (the arena's): SMALL_MAX, but with
 * BACKEND=auto, as long as no arena is set up, at least glibc's first mmap
 * threshold (128 KiB): a short process whose blocks glibc would keep in its
 * heap sets up no arena at all (bench/tiny.c: 14 blocks of 64-128 KiB).  The
 * first larger block (or served mmap, or the switch to the slabs) sets the
 * arena up, and from then on blocks over SMALL_MAX go there.  Not with
 * GUARD=1, which wants every block over SMALL_MAX guarded. */
#define AUTO_LARGE_ABOVE ((size_t)128 << 10)
static void slab_switch_on(void);

enum { INIT_NONE, INIT_BUSY, INIT_DONE };
static int vmap_init_state VMAP_HOT;
static __thread bool vmap_tls_in_init;
static __thread bool vmap_tls_seen;
static pthread_key_t vmap_thread_key;
static bool vmap_thread_key_ok;

/* pthread key destructor: the thread's last chance to give back what it holds.
 * glibc may still call free() after this; those frees bypass the cache. */
static void thread_exit(void *arg)
{
	(void)arg;
	vmap_counter_thread_exit();
	vmap_depth_enter();
	vmap_slab_thread_exit();
	vmap_cache_thread_exit();
	vmap_profile_thread_exit();
	vmap_depth_leave(); /* and the frees a handler left in the slots */
}

#define SMALL_ALIGN 16 /* alignof(max_align_t) */

/* ---- init -------------------------------------------------------------- */

static char env_buf[65536];
static char *env_ptrs[1024];

/* environ is not set yet when ld.so itself allocates: read the kernel's copy. */
static char **env_from_proc(void)
{
	long n = vmap_os_read_file("/proc/self/environ", env_buf, sizeof env_buf);
	if (n < 0)
		return NULL;
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
	/* A static string: no allocation.  Looked up, not imported (asked only
	 * for odd alignments; an import costs every process a look-up). */
	const char *(*version)(void) = (const char *(*)(void))vmap_elf_symbol(LIBC_SO,
									      "gnu_get_libc_version");
	const char *v = version ? version() : "0";
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
static void foreign_init(const struct vmap_load *load);

/*
 * Not the process's malloc (reliability.md #45): loaded after libc.so.6 (a
 * dlopen, or linked after it), so the program's malloc and mmap are bound to
 * libc's; or under a valgrind tool that redirects every malloc it finds,
 * ours included (memcheck, helgrind, drd, massif, dhat).  Everything that only
 * makes sense for the process's malloc stays off: no options read, no arena
 * (the range allocator counts as refused: large requests and mmap go to
 * glibc and the kernel), no slabs, no fork handlers, no report.  The
 * exported functions still work when called directly, by passing to glibc,
 * whose blocks they are.  One line says so, as every other condition line,
 * also under AT_SECURE (glibc opens fds 0-2 on /dev/null for such processes
 * when they are closed, so the line cannot land in a file the program opened).
 */
static bool vmap_inert;

__attribute__((noinline, cold)) static void go_inert(const struct vmap_load *load)
{
	vmap_inert = true;
	vmap_options_parse(NULL, false); /* the defaults, which ask for no output */
	vmap_range_refuse();
	if (load->valgrind)
		vmap_say("valgrind's ", load->valgrind,
			 " replaces malloc (vmapalloc's too): vmapalloc is off (no arena, no "
			 "statistics, options ignored; mmap goes to the kernel)");
	else
		vmap_say("loaded after libc.so.6 (by dlopen?): the program's malloc and mmap are "
			 "not vmapalloc's, so it is off (no arena, no statistics, options ignored; "
			 "its own functions pass to glibc)", NULL, NULL);
}

bool vmap_is_inert(void)
{
	return vmap_inert;
}

/*
 * glibc's __register_atfork (what pthread_atfork, from libc_nonshared.a,
 * calls) looked up by init rather than imported: an import cost every
 * process, allocating or not, a symbol look-up and a version (GLIBC_2.3.2)
 * check at load (issue 5).  No DSO handle: the library is never unloaded
 * (-z nodelete), so the handlers need no unregistering.
 */
static void register_fork_handlers(void)
{
	int (*reg)(void (*)(void), void (*)(void), void (*)(void), void *) =
		(__typeof__(reg))vmap_elf_symbol(LIBC_SO, "__register_atfork");
	if (!reg || reg(fork_prepare, fork_parent, fork_child, NULL) != 0)
		vmap_say("cannot register fork handlers (glibc's __register_atfork): ",
			 "a child forked while another thread allocates may hang", NULL);
}

/* No VMAPALLOC_* variable in the environment at start (vmap_init_at_start):
 * the options are the defaults, whatever environ holds at the first call. */
static bool vmap_env_quiet VMAP_HOT;

static void drain_one(uintptr_t a, size_t len);

__attribute__((noinline, cold)) static void init_slow(void)
{
	vmap_thread_hooks.drain = drain_one;
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
	struct vmap_load load;
	if (vmap_backend_init(&load) != 0)
		vmap_os_exit(127);
	foreign_init(&load);
	if (!load.self_index || load.valgrind) {
		go_inert(&load);
		vmap_tls_seen = true;
		__atomic_store_n(&vmap_init_state, INIT_DONE, __ATOMIC_RELEASE);
		vmap_tls_in_init = false;
		return;
	}
	if (load.asan)
		vmap_say(load.asan, " (AddressSanitizer) is loaded after vmapalloc: malloc is "
			 "vmapalloc's, so ASan does not check heap blocks (run ASan programs "
			 "without vmapalloc)", NULL);
	if (vmap_env_quiet) {
		vmap_options_parse(NULL, false); /* none at start (vmap_init_at_start) */
	} else {
		bool secure = getauxval(AT_SECURE) != 0;
		vmap_options_parse(environ ? environ : env_from_proc(), secure);
	}
	if (vmap_opt.help) {
		vmap_options_print(1, false);
		vmap_os_exit(0);
	}
	/* The CPU count (the counters' slots and batch) is asked for when the
	 * counters go per-CPU or the arena is set up, and the thread-exit key is
	 * made by the second thread: neither is of use to a single-threaded
	 * process making small allocations (issue 5: a system call and libc's
	 * key table page fewer in every process). */
	if (vmap_opt.backend == VMAP_BACKEND_BUILTIN) {
		slab_switch_on(); /* its slabs come from the arena, set up with the first */
		/* glibc sets its allocator up on its first call, unlocked: it counts
		 * on that call coming before any second thread, which here, with
		 * every small request served by the slabs, need not be so (threads
		 * racing first calls to mallinfo2, malloc_trim, mallopt: a crash in
		 * int_mallinfo or "a->attached_threads > 0", api-lazy_libc-builtin,
		 * 1-7 runs in 300).  One call now, while init holds the others. */
		(void)vmap_libc.mallinfo2();
	}
	else if (vmap_opt.backend == VMAP_BACKEND_AUTO)
		vmap_auto_after = (uint32_t)vmap_opt.auto_after;
	vmap_large_above = vmap_opt.small_max;
	if (vmap_auto_after && !vmap_opt.guard && vmap_large_above < AUTO_LARGE_ABOVE)
		vmap_large_above = AUTO_LARGE_ABOVE; /* (GUARD=1 wants every block over SMALL_MAX guarded) */
	if (vmap_opt.counter == VMAP_COUNTER_PERCPU)
		vmap_counter_go_percpu();
	vmap_stats_init(); /* report fd, start time, VMAPALLOC_STATS_SIGNAL handler */
	if (vmap_profile_init())
		vmap_fast_paths_off();
	if (vmap_opt.verbose)
		vmap_options_print(2, true);
	register_fork_handlers();
	vmap_tls_seen = true;
	__atomic_store_n(&vmap_init_state, INIT_DONE, __ATOMIC_RELEASE);
	vmap_tls_in_init = false;
}

/* The key whose destructor runs thread_exit, made once, by the first thread
 * other than the initial one (only those set a value).  Racers wait for the
 * winner: their value must go to a key that exists. */
static int vmap_thread_key_state; /* 0 none, 1 being made, 2 made (ok or not) */
/* Looked up by the maker, not imported: two symbol look-ups and a version
 * check fewer at load in every process (issue 5). */
static int (*vmap_setspecific)(pthread_key_t, const void *);

static void thread_key_make(void)
{
	int expected = 0;
	if (__atomic_compare_exchange_n(&vmap_thread_key_state, &expected, 1, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		int (*key_create)(pthread_key_t *, void (*)(void *)) =
			(__typeof__(key_create))vmap_elf_symbol(LIBC_SO, "pthread_key_create");
		vmap_setspecific = (__typeof__(vmap_setspecific))vmap_elf_symbol(LIBC_SO,
										"pthread_setspecific");
		vmap_thread_key_ok = key_create && vmap_setspecific &&
				     key_create(&vmap_thread_key, thread_exit) == 0;
		__atomic_store_n(&vmap_thread_key_state, 2, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(&vmap_thread_key_state, __ATOMIC_ACQUIRE) != 2)
		vmap_os_yield();
}

/* First call on a thread other than the first: switch counters to per-CPU. */
__attribute__((noinline, cold)) static void thread_first_call(void)
{
	/* The initialising thread set its flag at init, and a forked child's
	 * thread inherits it: any thread getting here is another thread (no
	 * gettid/getpid pair needed, bench/counter: 200-250 ns per thread). */
	vmap_tls_seen = true;
	__atomic_store_n(&vmap_threads_seen, true, __ATOMIC_RELAXED); /* every new thread: same value */
	if (vmap_opt.counter != VMAP_COUNTER_ATOMIC)
		vmap_counter_go_percpu();
	/* A non-NULL value makes the key's destructor run at thread exit;
	 * setting it may allocate (keys >= 32), which is safe: seen is set. */
	thread_key_make();
	if (vmap_thread_key_ok)
		vmap_setspecific(vmap_thread_key, (void *)1);
}

/* A thread's flag is set only once init is done (by the initialising thread
 * at its end, by any other thread on its first call after it; a forked child
 * inherits it): one test on every call. */
__attribute__((noinline, cold)) static void enter_slow(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
		init_slow();
	else
		thread_first_call();
}

static inline void enter(void)
{
	if (__builtin_expect(!vmap_tls_seen, 0))
		enter_slow();
}

void vmap_init(void)
{
	enter();
}

/*
 * The library's constructor, for the processes whose first call comes later
 * or never (/bin/true allocates nothing).  What it must do at start: check
 * the options (a bad VMAPALLOC_* value gets its line, HELP its answer, STATS
 * its start time and destination) and say the conditions that turn
 * vmapalloc off or make it unsafe (loaded after libc, a valgrind tool, ASan
 * after us) -- all of which init does.  Without any VMAPALLOC_* variable and
 * with none of those conditions, nothing of that has anything to say, so init
 * waits for the first call, as it does in every process that allocates
 * before this constructor runs: a process that never calls pays no init
 * (issue 5: /bin/true, 2.9k instructions, a system call (the start time) and
 * two page faults (pthread_atfork's) fewer).  What moves with it: the fork
 * handlers are registered at the first call (registered later than some
 * other handler, ours run before it in prepare; alloc.c's re-entry window
 * covers handlers on either side), the report's "after start" counts from
 * the first call, and the options are the defaults even if environ gains a
 * VMAPALLOC_* variable before it (vmap_env_quiet): read at start, as before.
 * The walk to libc (no system call) runs here and is kept for init.
 */
VMAP_START_TEXT void vmap_init_at_start(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) == INIT_NONE && environ) {
		struct vmap_load load;
		vmap_backend_walk(&load);
		if (load.libc_found && load.self_index && !load.valgrind && !load.asan &&
		    !vmap_options_in_env(environ)) {
			vmap_env_quiet = true;
			return;
		}
	}
	vmap_init();
}

static inline void count(enum vmap_stat s)
{
	vmap_stat_inc_local(s);
}

/* Two figures of one event: one fold countdown. */
static inline void count2(enum vmap_stat a, enum vmap_stat b)
{
	vmap_local.n[a]++;
	vmap_local.n[b]++;
	vmap_local.dirty |= (1ull << a) | (1ull << b);
	if (__builtin_expect(--vmap_local.budget <= 0, 0))
		vmap_counter_flush_local();
}

/* ---- small backend ------------------------------------------------------ */

static void *small_refused(size_t size);

/*
 * VMAPALLOC_BACKEND=auto: small requests go to glibc until one thread has made
 * AUTO_AFTER of them, then to the builtin slabs, for every thread.  A short
 * process (a shell command, a compiler pass) never sets slabs up: it pays
 * neither their page faults nor the arena (bench/startup.py); a process that
 * allocates a lot gets the slabs.  Blocks glibc handed out before the switch
 * are freed by glibc: free() tells them apart by address.
 */
static __thread uint32_t vmap_tls_small_count;

static void slab_switch_on(void)
{
	static bool done;
	if (__atomic_exchange_n(&done, true, __ATOMIC_ACQ_REL))
		return;
	vmap_slab_init();
	size_t limit = vmap_opt.small_max < VMAP_SLAB_MAX ? vmap_opt.small_max : VMAP_SLAB_MAX;
	__atomic_store_n(&vmap_slab_limit, limit, __ATOMIC_RELEASE);
	/* Then the fast path's, unless the profile came on meanwhile: either
	 * this load sees it, or vmap_fast_paths_off's store comes later. */
	__atomic_store_n(&vmap_fast_limit, limit, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&vmap_profile_on, __ATOMIC_SEQ_CST))
		__atomic_store_n(&vmap_fast_limit, 0, __ATOMIC_SEQ_CST);
}

void vmap_fast_paths_off(void)
{
	__atomic_store_n(&vmap_fast_limit, 0, __ATOMIC_SEQ_CST);
	vmap_range_fast_free_off();
}

__attribute__((noinline, cold)) static void auto_switch(void)
{
	__atomic_store_n(&vmap_auto_after, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_large_above, vmap_opt.small_max, __ATOMIC_RELAXED);
	slab_switch_on();
}

/* Whether the builtin slabs serve a small request of this size now (0 =
 * they are off: only the size-0 test then needs the second compare). */
static inline bool slab_serves(size_t size)
{
	size_t limit = __atomic_load_n(&vmap_slab_limit, __ATOMIC_RELAXED);
	return size - 1 < limit || (size == 0 && limit);
}

static inline void *small_malloc(size_t size)
{
	if (__builtin_expect(++vmap_tls_small_count == __atomic_load_n(&vmap_auto_after,
									 __ATOMIC_RELAXED), 0))
		auto_switch();
	if (slab_serves(size) && !vmap_reentered()) {
		void *p = vmap_slab_malloc(size);
		if (__builtin_expect(p != NULL, 1))
			return p;
	}
	void *p = vmap_libc.malloc(size); /* or no slab could be had */
	return __builtin_expect(p != NULL, 1) ? p : small_refused(size);
}

static void *small_memalign(size_t align, size_t size)
{
	if (slab_serves(size) && !vmap_reentered()) {
		void *p = vmap_slab_memalign(align, size);
		if (p)
			return p;
	}
	return vmap_libc.memalign(align, size);
}

static inline void small_free(void *p)
{
	vmap_libc.free(p);
}

/* ---- foreign pointers: neither ours nor glibc's ---------------------------- */

/*
 * A pointer outside every arena region goes to glibc, which aborts, with its
 * own message, on one it does not know.  Before that, a few compares catch
 * pointers that cannot be glibc's blocks (reliability.md #4); such a pointer
 * is left alone (free does nothing, realloc fails, malloc_usable_size says
 * 0), counted (foreign_pointers) and said once.  Every test must be certain:
 * a glibc block taken for foreign would leak and its realloc fail.
 *  - misaligned: glibc blocks are 16-aligned (memalign ones more);
 *  - inside the program's loaded image (static data, code): glibc's heap
 *    starts after the program's .bss, its other memory is mmapped outside
 *    every image;
 *  - on this thread's stack, above the current frame: [sp, top) with top
 *    the main thread's stack top (AT_EXECFN, a string the kernel puts at
 *    the very top) or the thread pointer, glibc's descriptor of a thread it
 *    created, which sits at the top of the thread's stack block.  The window
 *    is bounded (8 MiB below the main stack's top, where the kernel maps
 *    nothing but the stack: mmap_base is at least 128 MiB lower; 8 KiB below
 *    a thread's descriptor, within the 16 KiB PTHREAD_STACK_MIN every thread
 *    stack has), so that a frame on another stack (sigaltstack, a coroutine
 *    stack that may itself be a glibc block) fails the test instead of
 *    stretching the window over the heap.  The main thread's descriptor is
 *    not a stack top (ld.so allocates it): its window is skipped.  Deeper
 *    frames go to glibc as before.
 * glibc's free is the common free under BACKEND=auto, so the inline part is
 * a filter: the alignment, the image and "less than 8 MiB above sp" (true of
 * every stack address the windows accept); the exact windows are looked at
 * out of line, only for pointers just above the stack pointer.  Cost: 11
 * instructions a glibc free (callgrind), no call, no system call.  The
 * bounds come from vmap_backend_init's walk and the aux vector: no system
 * call at init either.
 */
#define MAIN_STACK_WINDOW ((uintptr_t)8 << 20)
#define THREAD_STACK_WINDOW ((uintptr_t)8 << 10)
static uintptr_t vmap_exe_lo VMAP_HOT, vmap_exe_len VMAP_HOT;
static uintptr_t vmap_main_top, vmap_main_tp; /* read out of line only */

enum { NOT_FOREIGN, FOREIGN_MISALIGNED, FOREIGN_EXE, FOREIGN_STACK };

static inline uintptr_t stack_pointer(void)
{
	uintptr_t sp;
#if defined(__x86_64__)
	__asm__("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
	__asm__("mov %0, sp" : "=r"(sp));
#else
	sp = (uintptr_t)__builtin_frame_address(0);
#endif
	return sp;
}

static inline uintptr_t thread_pointer(void)
{
	uintptr_t tp;
#if defined(__x86_64__)
	__asm__("mov %%fs:0, %0" : "=r"(tp)); /* the TCB's pointer to itself */
#elif defined(__aarch64__)
	__asm__("mrs %0, tpidr_el0" : "=r"(tp));
#else
	tp = 0; /* no thread window */
#endif
	return tp;
}

static void foreign_init(const struct vmap_load *load)
{
	vmap_exe_lo = load->exe_lo;
	vmap_exe_len = load->exe_hi - load->exe_lo;
	vmap_main_top = getauxval(AT_EXECFN); /* 0 (no window) if the kernel gave none */
	/* Init runs on the main thread (from the first call or our constructor);
	 * if not (a dlopen from another thread), that thread's window is lost. */
	vmap_main_tp = thread_pointer();
}

/* Which kind of foreign pointer a is, sp the caller's stack pointer. */
__attribute__((noinline, cold)) static int foreign_kind_slow(uintptr_t a, uintptr_t sp)
{
	if (a & (SMALL_ALIGN - 1))
		return FOREIGN_MISALIGNED;
	if (a - vmap_exe_lo < vmap_exe_len)
		return FOREIGN_EXE;
	uintptr_t tp = thread_pointer();
	uintptr_t main_d = vmap_main_top - sp, thread_d = tp - sp;
	if (main_d <= MAIN_STACK_WINDOW && a - sp < main_d)
		return FOREIGN_STACK;
	if (thread_d <= THREAD_STACK_WINDOW && a - sp < thread_d && tp != vmap_main_tp)
		return FOREIGN_STACK;
	return NOT_FOREIGN; /* just above the stack pointer, but not on this stack */
}

/* Which kind of foreign pointer p is, or NOT_FOREIGN (possibly glibc's). */
static inline int foreign_kind(const void *p)
{
	uintptr_t a = (uintptr_t)p, sp = stack_pointer();
	if (__builtin_expect((a & (SMALL_ALIGN - 1)) || a - vmap_exe_lo < vmap_exe_len ||
				     a - sp < MAIN_STACK_WINDOW, 0))
		return foreign_kind_slow(a, sp);
	return NOT_FOREIGN;
}

/* Counts p and says the first one; the caller leaves it alone. */
__attribute__((noinline, cold)) static void foreign(const void *p, int kind, const char *who)
{
	static const char *const what[] = {
		[FOREIGN_MISALIGNED] = "misaligned: no heap block starts there",
		[FOREIGN_EXE] = "inside the program's image: static data or code",
		[FOREIGN_STACK] = "on this thread's stack",
	};
	static bool said;
	vmap_stat_inc_local(VMAP_STAT_foreign_pointers);
	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return;
	VMAP_BUF(b, 2, 256);
	vmap_buf_invalid_pointer(&b, who, p);
	vmap_buf_str(&b, " (");
	vmap_buf_str(&b, what[kind]);
	vmap_buf_str(&b, "): left alone; such pointers are counted (foreign_pointers), "
			 "said once\n");
	vmap_buf_flush(&b);
}

/* ---- re-entry: signal handlers and fork handlers --------------------------- */

/* One parked free (len 0) or munmap, done at depth 0 (thread.c). */
static void drain_one(uintptr_t a, size_t len)
{
	struct vmap_slab *sl = len ? NULL : vmap_slab_at(a);
	if (len) {
		vmap_munmap((void *)a, len);
	} else if (sl) {
		vmap_slab_free(sl, (void *)a, "free");
	} else {
		if (__builtin_expect(vmap_profile_on, 0))
			vmap_profile_free_known((void *)a, true);
		vmap_range_free((void *)a, "free");
	}
}

/* Escape blocks: live at once, across threads.  A handler holds one for the
 * length of the handler, typically; when the table is full, NULL. */
#define ESCAPE_SLOTS 64
#define ESCAPE_CLAIMED 1 /* never a block address: those are page-aligned */
struct escape {
	uintptr_t a;
	size_t len;
};
static struct escape escapes[ESCAPE_SLOTS];
/* Claimed slots: while 0, which is always but for a handler's blocks, free()
 * of a pointer outside the arena pays one load for the table. */
static unsigned escape_live VMAP_HOT;

__attribute__((noinline, cold)) static void *escape_alloc(size_t size, size_t align)
{
	size_t len = (size + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t extra = align > VMAP_PAGE ? align : 0; /* mapped, then trimmed */
	if (len < size || len + extra < len)
		return NULL;
	__atomic_fetch_add(&escape_live, 1, __ATOMIC_RELAXED);
	struct escape *e = NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS && !e; i++) {
		uintptr_t z = 0;
		if (__atomic_compare_exchange_n(&escapes[i].a, &z, ESCAPE_CLAIMED, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			e = &escapes[i];
	}
	void *m = e ? vmap_os_mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
		    : NULL;
	if (!e || vmap_os_is_err(m)) {
		if (e)
			__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&escape_live, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	uintptr_t a = (uintptr_t)m;
	if (extra) {
		uintptr_t b = (a + align - 1) & ~(uintptr_t)(align - 1);
		if (b > a)
			vmap_os_munmap(m, b - a);
		if (a + extra > b)
			vmap_os_munmap((void *)(b + len), a + extra - b);
		a = b;
	}
	e->len = len;
	__atomic_store_n(&e->a, a, __ATOMIC_RELEASE);
	return (void *)a;
}

__attribute__((noinline, cold)) static struct escape *escape_find(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	if (!a || (a & (VMAP_PAGE - 1)))
		return NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS; i++)
		if (__atomic_load_n(&escapes[i].a, __ATOMIC_ACQUIRE) == a)
			return &escapes[i];
	return NULL;
}

/* The escape block p, or NULL (p is glibc's): one load while there are none. */
static inline struct escape *escape_of(const void *p)
{
	if (__builtin_expect(__atomic_load_n(&escape_live, __ATOMIC_RELAXED) == 0, 1))
		return NULL;
	return escape_find(p);
}

static void escape_free(struct escape *e)
{
	/* The slot is emptied before the munmap: once the range is unmapped,
	 * another thread's escape block may get the same address, and a stale
	 * slot holding it would be found (and freed) in its place. */
	void *a = (void *)e->a;
	size_t len = e->len;
	__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
	vmap_os_munmap(a, len);
	__atomic_fetch_sub(&escape_live, 1, __ATOMIC_RELAXED);
}

/* The profiler takes locks of its own: its hooks are bracketed like the range
 * path, and skipped when re-entered (that block goes unrecorded).  The
 * allocation hook is a macro, so that it stays inlined in the entry point:
 * it keys its stack cache on the entry point's return address. */
#define PROF_ALLOC(p, size, kind)                                              \
	do {                                                                   \
		if (__builtin_expect(vmap_profile_on, 0) && !vmap_reentered()) { \
			vmap_depth_enter();                                  \
			vmap_profile_alloc(p, size, kind);                     \
			vmap_depth_leave();                                    \
		}                                                              \
	} while (0)
/* Frees need no call site: out of line, off the free path. */
__attribute__((noinline, cold)) static void prof_free(void *p, int owned)
{
	if (vmap_reentered())
		return;
	vmap_depth_enter();
	if (owned < 0)
		vmap_profile_free(p);
	else
		vmap_profile_free_known(p, owned);
	vmap_depth_leave();
}

/* ---- the malloc family ---------------------------------------------------- */

/* glibc refused a small block: its heap cannot grow.  Typically RLIMIT_AS was
 * lowered below VmSize, which holds the arena's reservation, and the kernel
 * now refuses every new mapping while the arena still has room under the
 * limit (F1): the arena serves it, one page and its guard.  free, realloc
 * and malloc_usable_size find it by its address, like any arena block. */
__attribute__((noinline, cold)) static void *small_refused(size_t size)
{
	if (!vmap_range_enabled() || vmap_reentered())
		return NULL;
	bool zero;
	vmap_depth_enter();
	void *p = vmap_range_alloc(size ? size : 1, SMALL_ALIGN, &zero);
	vmap_depth_leave();
	return p;
}

static bool is_large(size_t size)
{
	return size > __atomic_load_n(&vmap_large_above, __ATOMIC_RELAXED) && vmap_range_ready();
}

/* Range allocation with glibc as the fallback; NULL only when both refuse.
 * Re-entered: an escape block or NULL (glibc's locks may be this thread's). */
__attribute__((always_inline)) static inline void *large_alloc(size_t size, size_t align,
								      bool *zero)
{
	if (vmap_reentered()) {
		*zero = true; /* fresh from the kernel */
		return escape_alloc(size, align);
	}
	vmap_depth_enter();
	void *p = vmap_range_alloc(size, align, zero);
	vmap_depth_leave();
	if (p)
		return p;
	*zero = false;
	return align <= SMALL_ALIGN ? small_malloc(size) : vmap_libc.memalign(align, size);
}

__attribute__((noinline)) void *vmap_malloc_slow(size_t size)
{
	enter();
	/* The builtin backend's objects first: the common case, in a few tests. */
	if (slab_serves(size) && !vmap_reentered()) {
		void *p = vmap_slab_malloc(size);
		if (__builtin_expect(p != NULL, 1)) {
			count2(VMAP_STAT_malloc_calls, VMAP_STAT_small_allocs);
			PROF_ALLOC(p, size, VMAP_PROFILE_SMALL);
			return p;
		}
	}
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
	else
		PROF_ALLOC(p, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
	return p;
}

/* An arena block freed from a handler that interrupted a range section: done
 * when the interrupted call leaves.  Slots full (eight frees from handlers
 * within one call): the block is leaked, said once, rather than deadlock. */
__attribute__((noinline, cold)) static void free_reentered(void *p)
{
	static bool said;
	if (vmap_defer(p, 0))
		return;
	if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		vmap_say("free() re-entered from a signal handler too often within one call: ",
			 "a large block is leaked", NULL);
}

static void free_large(void *p)
{
	if (vmap_reentered()) {
		free_reentered(p);
		return;
	}
	vmap_depth_enter();
	vmap_range_free(p, "free");
	vmap_depth_leave();
}

__attribute__((noinline, cold)) static bool free_escape(void *p)
{
	struct escape *e = escape_find(p);
	if (e)
		escape_free(e);
	return e != NULL;
}

__attribute__((noinline)) void vmap_free_slow(void *p)
{
	if (!p)
		return;
	enter();
	/* errno survives: the range path makes only raw system calls, which
	 * never touch it, and glibc's free preserves it (since 2.33). */
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	struct vmap_slab *sl = r ? vmap_slab_of(r, (uintptr_t)p) : NULL;
	if (sl) {
		if (__builtin_expect(vmap_profile_on, 0))
			prof_free(p, 0);
		count2(VMAP_STAT_free_calls, VMAP_STAT_small_frees);
		if (vmap_reentered())
			free_reentered(p);
		else
			vmap_slab_free(sl, p, "free");
		return;
	}
	count(VMAP_STAT_free_calls);
	bool owned = r != NULL;
	if (__builtin_expect(vmap_profile_on, 0))
		prof_free(p, owned);
	if (owned) {
		free_large(p);
	} else if (__builtin_expect(__atomic_load_n(&escape_live, __ATOMIC_RELAXED) != 0, 0) &&
		   free_escape(p)) {
		return;
	} else {
		int kind = foreign_kind(p);
		if (__builtin_expect(kind != NOT_FOREIGN, 0)) {
			foreign(p, kind, "free");
			return;
		}
		count(VMAP_STAT_small_frees);
		small_free(p);
	}
}

/* The fast paths (fast.h) and their rare exits, out of line so that the fast
 * paths themselves save no register: leaving a section with something
 * parked, or with the class's current slab empty, or with a slab to move. */
__attribute__((noinline, cold)) void *vmap_malloc_fast_leave(struct vmap_heap *h, void *o)
{
	vmap_reentry_leave_slow();
	__atomic_store_n(&h->fast_mallocs, h->fast_mallocs + 1, __ATOMIC_RELAXED);
	return o;
}

__attribute__((noinline)) void *vmap_malloc_refill(size_t size)
{
	vmap_reentry_leave_slow();
	return vmap_malloc_slow(size);
}

__attribute__((noinline, cold)) void vmap_free_fast_leave(struct vmap_heap *h)
{
	vmap_reentry_leave_slow();
	__atomic_store_n(&h->fast_frees, h->fast_frees + 1, __ATOMIC_RELAXED);
}

/* A slab changing lists (full -> partial, partial -> given back), then the
 * same exit. */
__attribute__((noinline)) void vmap_free_fast_move(struct vmap_heap *h, struct vmap_slab *d)
{
	vmap_slab_owner_free_slow(h, d);
	vmap_depth_leave();
	__atomic_store_n(&h->fast_frees, h->fast_frees + 1, __ATOMIC_RELAXED);
}

void *vmap_malloc(size_t size)
{
	return vmap_fast_malloc(size);
}

void vmap_free(void *p)
{
	vmap_fast_free(p);
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
		void *p;
		if (slab_serves(total)) {
			p = small_malloc(total);
			if (p)
				memset(p, 0, total);
		} else {
			p = vmap_libc.calloc(n, size);
		}
		if (!p)
			errno = ENOMEM;
		else
			PROF_ALLOC(p, total, VMAP_PROFILE_SMALL);
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
	PROF_ALLOC(p, total, VMAP_PROFILE_LARGE);
	return p;
}

static size_t usable(void *p)
{
	struct vmap_slab *sl = vmap_slab_at((uintptr_t)p);
	if (sl)
		return vmap_slab_usable(sl, p, "malloc_usable_size", false);
	if (vmap_range_owns(p))
		return vmap_range_usable(p, "malloc_usable_size");
	struct escape *e = escape_of(p);
	if (e)
		return e->len;
	int kind = foreign_kind(p);
	if (__builtin_expect(kind != NOT_FOREIGN, 0)) {
		foreign(p, kind, "malloc_usable_size");
		return 0; /* as for NULL: nothing there to use */
	}
	return vmap_libc.usable_size(p);
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

static bool realloc_resize(void *p, size_t size)
{
	vmap_depth_enter();
	bool ok = vmap_range_resize(p, size);
	vmap_depth_leave();
	return ok;
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
	/* Before it can move and its address be reused. */
	if (__builtin_expect(vmap_profile_on, 0))
		prof_free(p, -1);
	void *q;
	struct escape *e;
	struct vmap_slab *sl = vmap_slab_at((uintptr_t)p);
	if (sl) {
		/* Kept while it fits and at least half of it stays used. */
		size_t old = vmap_slab_usable(sl, p, "realloc", true);
		q = size <= old && size >= old / 2 ? p : realloc_copy(p, old, size);
	} else if (!vmap_range_owns(p) && (e = escape_of(p))) {
		q = realloc_copy(p, e->len, size);
	} else if (!vmap_range_owns(p)) {
		int kind = foreign_kind(p);
		if (__builtin_expect(kind != NOT_FOREIGN, 0)) {
			/* Left alone as free leaves it; the failure return tells
			 * the caller p is still its own, unchanged.  EINVAL, not
			 * ENOMEM: nothing ran out.  (A non-live pointer inside the
			 * arena aborts: that one is certainly a use after free.) */
			foreign(p, kind, "realloc");
			errno = EINVAL;
			return NULL;
		}
		/* glibc's block: glibc resizes it while it stays small. */
		if (!is_large(size)) {
			q = vmap_libc.realloc(p, size);
		} else {
			q = realloc_copy(p, vmap_libc.usable_size(p), size);
		}
	} else {
		size_t old = vmap_range_usable(p, "realloc");
		if (!is_large(size) || (size <= old / 2 && old - size >= 64 * VMAP_PAGE) ||
		    vmap_reentered()) {
			/* Shrinking far: copying the kept part is cheaper than keeping
			 * the whole area resident.  Re-entered: a copy into an escape
			 * block (or glibc's), the old block's free deferred. */
			q = realloc_copy(p, old, size);
		} else if (size <= old || realloc_resize(p, size)) {
			if (size > old)
				count(VMAP_STAT_realloc_in_place);
			q = p;
		} else {
			bool moved;
			vmap_depth_enter();
			q = vmap_range_move(p, size, &moved);
			if (q && !moved) {
				memcpy(q, p, old);
				count(VMAP_STAT_realloc_copied);
				vmap_range_free(p, "realloc");
			}
			vmap_depth_leave();
			if (!q)
				q = realloc_copy(p, old, size); /* glibc as the last resort */
		}
	}
	if (!q)
		errno = ENOMEM;
	else
		PROF_ALLOC(q, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
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
		p = small_memalign(align, size);
	} else if (vmap_range_ready()) {
		bool zero;
		p = large_alloc(size, align, &zero);
	} else {
		p = vmap_libc.memalign(align, size);
	}
	if (!p)
		errno = ENOMEM;
	else
		PROF_ALLOC(p, size, VMAP_PROFILE_KIND(p));
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
	if (!pow2(align) && glibc_at_least(2, 38)) { /* asked only here: rare */
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
	size_t released = 0;
	if (!vmap_reentered()) {
		vmap_depth_enter();
		vmap_slab_trim();
		vmap_cache_trim();
		released = vmap_range_trim();
		vmap_depth_leave();
	}
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
	/* Looked up on use, not imported: an import costs every process a
	 * symbol look-up at load (issue 5). */
	size_t (*fwrite_fn)(const void *, size_t, size_t, FILE *) =
		(__typeof__(fwrite_fn))vmap_elf_symbol(LIBC_SO, "fwrite");
	if (!fwrite_fn) {
		errno = ENOSYS;
		return -1;
	}
	return fwrite_fn(buf, 1, b.len, fp) == b.len ? 0 : -1;
}

/* ---- fork and exit ----------------------------------------------------- */

/* Whether fork_prepare took the locks, read by fork_parent/fork_child on
 * the same thread: per thread, since glibc runs the handlers of two forking
 * threads concurrently (the second waits in prepare for our locks). */
static __thread bool fork_locked;

static void fork_prepare(void)
{
	/* Single-threaded: nobody else can hold a lock, and this thread holds
	 * some when fork() comes from a signal handler that interrupted it in
	 * the allocator (tst-mallocfork): taking them would wait for ever.
	 * Re-entered with other threads: the interrupted code holds locks we
	 * cannot name; taking none leaves the child those the other threads
	 * hold — glibc's own malloc has the same limit there. */
	vmap_stats_fork_prepare();
	fork_locked = __atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED) && !vmap_reentered();
	/* From here to fork_parent/fork_child this thread counts as re-entered:
	 * the prepare handlers registered before ours run after it, and the
	 * parent/child ones registered before ours run before them; when they
	 * allocate they get escape blocks or glibc's, and their frees wait. */
	vmap_depth_enter();
	if (!fork_locked)
		return;
	/* Another thread setting up the arena finishes first (the child could
	 * not: it would wait for it forever). */
	vmap_range_setup_wait();
	vmap_locks_fork_prepare();
}

static void fork_parent(void)
{
	if (fork_locked) {
		vmap_locks_fork_parent();
	}
	vmap_depth_leave();
}

static void fork_child(void)
{
	/* Not taken: free already, or held by the interrupted code of this very
	 * thread, which releases them when the handler returns. */
	if (fork_locked) {
		vmap_locks_fork_child();
	}
	vmap_stats_fork_child(); /* the child's report is labelled with its parent */
	vmap_depth_leave();
}

/* _Fork() runs no fork handler (preload/fork.c): the same three around
 * glibc's, so that its child gets the allocator's locks free and its state
 * consistent, as after fork().  Before init no handler is registered and
 * there is nothing to lock. */
static __thread bool fork_hooked;

void vmap_fork_hook_prepare(void)
{
	fork_hooked = __atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) == INIT_DONE;
	if (fork_hooked)
		fork_prepare();
}

void vmap_fork_hook_after(bool child)
{
	if (!fork_hooked)
		return;
	if (child)
		fork_child();
	else
		fork_parent();
}

VMAP_START_TEXT void vmap_at_exit(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
		return;
	vmap_stats_at_exit(); /* if VMAPALLOC_STATS or VMAPALLOC_PROFILE is set */
}
