/*
 * init.c — start-up and mode state: the init state machine (run once, on the
 * first call from any entry point, re-entrant on the initialising thread),
 * inert mode, the per-thread "seen" flag that detects the second thread (the
 * counter switch and the thread-exit key), the switch to the slabs, the
 * backend's start (mimalloc loaded from the constructor, or the default in
 * one line), the direct path's mode, the gate of the _Fork hooks and the exit
 * report.
 *
 * Invariants: a call made during init on the initialising thread goes to
 * glibc; nothing in init calls malloc, stdio, getenv or dlsym.  The order in
 * init_slow is part of the contract: the drain hook, re-entry, the load walk,
 * inert mode, options, slabs, counters, stats, profile, fork handlers, then
 * the flag and INIT_DONE.
 */
#include "alloc_impl.h"

#include <pthread.h>
#include <gnu/lib-names.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "background.h"
#include "cache.h"
#include "counter.h"
#include "fast.h"
#include "fmt.h"
#include "options.h"
#include "os.h"
#include "profile.h"
#include "range.h"
#include "slab.h"
#include "stats.h"
#include "timeline.h"

extern char **environ;

size_t vmap_slab_limit VMAP_HOT; /* alloc_impl.h */
size_t vmap_fast_limit VMAP_HOT; /* fast.h */
uint32_t vmap_auto_step VMAP_HOT; /* alloc_impl.h */
bool vmap_large_free_hooks;        /* alloc_impl.h */
size_t vmap_direct_limit VMAP_HOT; /* alloc_impl.h */
uint8_t vmap_direct_to VMAP_HOT;
/* Requests above this size are large (the arena's): SMALL_MAX, but with
 * BACKEND=auto, as long as no arena is set up, at least glibc's first mmap
 * threshold (128 KiB): a short process whose blocks glibc would keep in its
 * heap sets up no arena at all (bench/tiny.c: 14 blocks of 64-128 KiB).  The
 * first larger block (or served mmap, or the switch to the slabs) sets the
 * arena up, and from then on blocks over SMALL_MAX go there.  Not with
 * GUARD=1, which wants every block over SMALL_MAX guarded. */
#define AUTO_LARGE_ABOVE ((size_t)128 << 10)

enum { INIT_NONE, INIT_BUSY, INIT_DONE };
static int vmap_init_state VMAP_HOT;
static __thread bool vmap_tls_in_init;
__thread bool vmap_tls_seen; /* alloc_impl.h */
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

/* ---- init -------------------------------------------------------------- */

/* environ is not set yet when ld.so itself allocates: read the kernel's copy,
 * into a mapping made then (rarely needed: a static buffer would add its 72
 * KiB to every process's VmSize) and kept, since the options point into it. */
char **vmap_env_from_proc(void)
{
	enum { BUF = 65536, PTRS = 1024 };
	char *buf = vmap_os_mmap(NULL, BUF + PTRS * sizeof(char *), PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (vmap_os_is_err(buf))
		return NULL;
	char **ptrs = (char **)(buf + BUF);
	long n = vmap_os_read_file("/proc/self/environ", buf, BUF);
	if (n < 0) {
		vmap_os_munmap(buf, BUF + PTRS * sizeof(char *));
		return NULL;
	}
	/* A full buffer cut its last entry short: left out, lest a value be
	 * read cut (LAZY_MAX=64 of 64M).  Past PTRS - 1 entries, the rest too. */
	if (n == BUF - 1)
		while (n > 0 && buf[n - 1] != '\0')
			n--;
	size_t k = 0;
	for (long i = 0; i < n && k < PTRS - 1; i++) {
		if (i == 0 || buf[i - 1] == '\0')
			ptrs[k++] = &buf[i];
	}
	ptrs[k] = NULL;
	return ptrs;
}

bool vmap_glibc_at_least(unsigned major, unsigned minor)
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

/*
 * Not the process's malloc: loaded after libc.so.6 (a dlopen, or linked after
 * it), so the program's malloc and mmap are bound to libc's; or under a valgrind tool that redirects every malloc it finds,
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

/* No VMAPALLOC_* variable in the environment at start (vmap_init_at_start):
 * the options are the defaults, whatever environ holds at the first call. */
static bool vmap_env_quiet VMAP_HOT;

/*
 * VMAPALLOC_BACKEND=auto: small requests go to glibc until the process has
 * made AUTO_AFTER of them (malloc, calloc, realloc and the aligned ones, in
 * every thread), then to the builtin slabs, for every thread.  A short
 * process (a shell command, a compiler pass) never sets slabs up: it pays
 * neither their page faults nor the arena (bench/startup.py); a process that
 * allocates a lot gets the slabs.  Blocks glibc handed out before the switch
 * are freed by glibc: free() tells them apart by address.  Also the switch
 * BACKEND=builtin makes at init.
 */
static void slab_switch_on(void)
{
	static bool done;
	if (__atomic_exchange_n(&done, true, __ATOMIC_ACQ_REL))
		return;
	/* glibc sets its allocator up on its first call, unlocked: it counts
	 * on that call coming before any second thread, which with every small
	 * request served by the slabs need not be so (threads racing first
	 * calls to mallinfo2, malloc_trim, mallopt: a crash in int_mallinfo or
	 * "a->attached_threads > 0", api-lazy_libc-builtin; under auto, a
	 * switch at the process's first small request, before glibc served
	 * any: api-lazy_libc-auto-first, rptest).  One call now, before the
	 * slabs take the requests that would have made it. */
	(void)vmap_libc.mallinfo2();
	vmap_slab_init();
	size_t limit = vmap_opt.small_max < VMAP_SLAB_MAX ? vmap_opt.small_max : VMAP_SLAB_MAX;
	__atomic_store_n(&vmap_slab_limit, limit, __ATOMIC_RELEASE);
	/* Then the fast path's, unless the profile came on meanwhile: either
	 * this load sees it, or vmap_fast_paths_off's store comes later. */
	__atomic_store_n(&vmap_fast_limit, limit, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&vmap_profile_on, __ATOMIC_SEQ_CST))
		__atomic_store_n(&vmap_fast_limit, 0, __ATOMIC_SEQ_CST);
}

/* BACKEND=libc or mimalloc: the direct path, unless the profile is on (the
 * same handshake as the slabs' fast path above). */
static void direct_on(bool mi)
{
	__atomic_store_n(&vmap_counter_direct_used, true, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_direct_to, mi ? VMAP_DIRECT_MI : VMAP_DIRECT_GLIBC,
			 __ATOMIC_SEQ_CST);
	__atomic_store_n(&vmap_direct_limit, vmap_opt.small_max, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&vmap_profile_on, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&vmap_direct_limit, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&vmap_direct_to, VMAP_DIRECT_NONE, __ATOMIC_SEQ_CST);
	}
}

void vmap_fast_paths_off(void)
{
	__atomic_store_n(&vmap_direct_limit, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&vmap_direct_to, VMAP_DIRECT_NONE, __ATOMIC_SEQ_CST);
	__atomic_store_n(&vmap_fast_limit, 0, __ATOMIC_SEQ_CST);
	vmap_range_fast_free_off();
}

/* BACKEND=auto: a thread adds its small requests in batches of at most this
 * many (one atomic add per batch: at most 512 before the switch at the
 * default AUTO_AFTER, none after it), so that the process's count, not one
 * thread's, decides: a program whose work is spread over threads leaves
 * glibc as early as one that makes it in one. */
#define AUTO_STEP 128u
static uint64_t vmap_auto_total; /* small requests added so far */

/* Or once a thread other than the first has made a batch of its own, a
 * short one (AUTO_THREAD_STEP): a process that starts threads that allocate
 * is not the short process the count is for, and glibc would serve them from
 * arenas of their own (64 MiB reserved each, an mprotect per page grown),
 * freeing across them under the arena locks.  Had two threads to make a
 * batch of 128 each, rptest's would make 828-3,845 calls on glibc (one runs
 * ahead while the other still sleeps); with this, 24 in all.  A thread that
 * makes a call or two and exits (mleak: 50,000 of them) never makes a batch;
 * the first thread's batches stay AUTO_STEP long. */
#define AUTO_THREAD_STEP 8u

/* BACKEND=auto: this thread's small requests not yet added to the process's
 * count (vmap_auto_add).  Every kind counts: malloc, calloc, realloc,
 * the aligned ones.  Under the other backends, and after the switch, the step
 * is 0, which the count meets again only when it wraps (the add then does
 * nothing). */
__thread uint32_t vmap_tls_small_count;
static __thread bool vmap_tls_auto_thread; /* not the first thread */

static uint32_t auto_step(void)
{
	return vmap_opt.auto_after < AUTO_STEP ? (uint32_t)vmap_opt.auto_after : AUTO_STEP;
}

__attribute__((noinline, cold)) void vmap_auto_add(void)
{
	uint32_t step = __atomic_load_n(&vmap_auto_step, __ATOMIC_RELAXED);
	/* Only auto switches: under the other backends, and after the switch,
	 * the step is 0 (a thread's count met it again when it wrapped). */
	if (!step || vmap_opt.backend != VMAP_BACKEND_AUTO)
		return;
	if (__atomic_add_fetch(&vmap_auto_total, step, __ATOMIC_RELAXED) < vmap_opt.auto_after &&
	    !vmap_tls_auto_thread)
		return;
	__atomic_store_n(&vmap_auto_step, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_large_above, vmap_opt.small_max, __ATOMIC_RELAXED);
	slab_switch_on();
	__atomic_store_n(&vmap_auto_switched, true, __ATOMIC_RELEASE);
}

/*
 * BACKEND=auto after the switch: glibc makes (almost) no new blocks, and the
 * program frees the ones it made over time; glibc gives back only the top of
 * its heap, so the pages of the free chunks below would stay resident beside
 * the slabs (mstress, when its first 65,536 blocks were glibc's: a peak RSS
 * of 26-29 MB, 22-24 MB with a trim, glibc alone 11 MB; redis-server, whose
 * values of up to 128 KiB go to glibc before the switch: 8 MB of free chunks
 * kept through the rest of its run, 8 MB on its peak).
 * So the frees of glibc's blocks after the switch count their bytes, and at
 * a fold (alloc.c), once a step of bytes was freed since the last trim and
 * AUTO_TRIM_NS after it, one thread calls malloc_trim(0), which advises the
 * free chunks' whole pages away (glibc takes its own locks).  The step is an
 * eighth of glibc's heap at the first fold after the switch (mallinfo2,
 * once), between AUTO_TRIM_MIN and AUTO_TRIM_BYTES: a small heap is trimmed
 * too (espresso's 300 KiB, whose program frees less than 256 KiB of it after
 * the switch: its peak 3.6 MiB, 3.3 with the trims, as under builtin).  A
 * trim walks glibc's free chunks; each needs a step more freed, so there are
 * at most 8 + (bytes glibc held at the switch) / AUTO_TRIM_BYTES of them in
 * the whole run.  Not under libc (glibc reuses its free chunks: they stay its
 * own to manage, as without vmapalloc) nor before the switch.
 */
#define AUTO_TRIM_BYTES ((uint64_t)256 << 10)
#define AUTO_TRIM_MIN ((uint64_t)16 << 10)
#define AUTO_TRIM_NS 100000000ull
bool vmap_auto_switched;
static uint64_t glibc_freed_bytes; /* by the program, after the switch */

__attribute__((noinline, cold)) void vmap_auto_note_free(void *p)
{
	__atomic_add_fetch(&glibc_freed_bytes, vmap_libc.usable_size(p), __ATOMIC_RELAXED);
}

void vmap_auto_trim_tick(uint64_t now)
{
	static uint64_t trim_at, trim_bytes, trim_step;
	if (!__atomic_load_n(&vmap_auto_switched, __ATOMIC_ACQUIRE))
		return;
	uint64_t at = __atomic_load_n(&trim_at, __ATOMIC_RELAXED);
	if (now - at < AUTO_TRIM_NS)
		return;
	uint64_t step = __atomic_load_n(&trim_step, __ATOMIC_RELAXED);
	if (!step) { /* once; a racer's figure is as good */
		step = (uint64_t)vmap_libc.mallinfo2().arena / 8;
		step = step < AUTO_TRIM_MIN ? AUTO_TRIM_MIN : step > AUTO_TRIM_BYTES ? AUTO_TRIM_BYTES : step;
		__atomic_store_n(&trim_step, step, __ATOMIC_RELAXED);
	}
	uint64_t freed = __atomic_load_n(&glibc_freed_bytes, __ATOMIC_RELAXED);
	if (freed - __atomic_load_n(&trim_bytes, __ATOMIC_RELAXED) < step)
		return;
	if (!__atomic_compare_exchange_n(&trim_at, &at, now, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return; /* another thread trims */
	__atomic_store_n(&trim_bytes, freed, __ATOMIC_RELAXED);
	vmap_libc.trim(0);
	vmap_stat_inc_local(VMAP_STAT_small_glibc_trims);
}

__attribute__((noinline, cold)) static void init_slow(void)
{
	vmap_thread_hooks.drain = vmap_drain_one;
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
		vmap_options_parse(environ ? environ : vmap_env_from_proc(), secure);
	}
	if (vmap_opt.help) {
		vmap_options_print(1, false);
		vmap_os_exit(0);
	}
	/* The CPU count (the counters' slots and batch) is asked for when the
	 * counters go per-CPU or the arena is set up, and the thread-exit key is
	 * made by the second thread: neither is of use to a single-threaded
	 * process making small allocations (a system call and libc's key table
	 * page fewer in every process). */
	if (vmap_opt.backend == VMAP_BACKEND_MIMALLOC && !vmap_mimalloc_built()) {
		vmap_say("VMAPALLOC_BACKEND=mimalloc: this build has no mimalloc backend ",
			 "(meson -Dmimalloc=enabled with libmimalloc-dev installed); ",
			 "using the default backend (auto)");
		vmap_opt.backend = VMAP_BACKEND_AUTO;
	}
	/* BACKEND=mimalloc: glibc's until the constructor has loaded mimalloc
	 * (vmap_backend_start), then mimalloc's; blocks by address. */
	if (vmap_opt.backend == VMAP_BACKEND_BUILTIN) {
		slab_switch_on(); /* its slabs come from the arena, set up with the first */
	}
	else if (vmap_opt.backend == VMAP_BACKEND_AUTO)
		vmap_auto_step = auto_step();
	else if (vmap_opt.backend == VMAP_BACKEND_LIBC)
		direct_on(false);
	vmap_large_above = vmap_opt.small_max;
	if (vmap_auto_step && !vmap_opt.guard && vmap_large_above < AUTO_LARGE_ABOVE)
		vmap_large_above = AUTO_LARGE_ABOVE; /* (GUARD=1 wants every block over SMALL_MAX guarded) */
	if (vmap_opt.counter == VMAP_COUNTER_PERCPU)
		vmap_counter_go_percpu();
	vmap_stats_init(); /* report fd, start time, VMAPALLOC_STATS_SIGNAL handler */
	vmap_timeline_init();
	if (vmap_opt.background || vmap_opt.timeline_ms)
		vmap_large_free_hooks = true;
	if (vmap_profile_init())
		vmap_fast_paths_off();
	if (vmap_opt.verbose)
		vmap_options_print(2, true);
	vmap_fork_register();
	vmap_tls_seen = true;
	__atomic_store_n(&vmap_init_state, INIT_DONE, __ATOMIC_RELEASE);
	vmap_tls_in_init = false;
}

/*
 * The library's constructor, after init: BACKEND=mimalloc loads mimalloc here
 * (dlopen allocates, so never from inside malloc).  If it cannot be loaded,
 * one line (backend_mimalloc.c) and the default, auto, as if asked for: the
 * switch to the slabs after AUTO_AFTER small requests, and large blocks
 * above glibc's mmap threshold while there is no arena.
 */
void vmap_backend_start(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE || vmap_inert ||
	    vmap_opt.backend != VMAP_BACKEND_MIMALLOC)
		return;
	if (vmap_mimalloc_load() == 0) {
		direct_on(true);
		return;
	}
	vmap_opt.backend = VMAP_BACKEND_AUTO;
	if (!vmap_opt.guard && !vmap_range_enabled() && vmap_large_above < AUTO_LARGE_ABOVE)
		__atomic_store_n(&vmap_large_above, AUTO_LARGE_ABOVE, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_auto_step, auto_step(), __ATOMIC_RELAXED);
}

/* The key whose destructor runs thread_exit, made once, by the first thread
 * other than the initial one (only those set a value).  Racers wait for the
 * winner: their value must go to a key that exists. */
static int vmap_thread_key_state; /* 0 none, 1 being made, 2 made (ok or not) */
/* Looked up by the maker, not imported: two symbol look-ups and a version
 * check fewer at load in every process. */
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
	 * gettid/getpid pair needed: two system calls a thread fewer). */
	vmap_tls_seen = true;
	__atomic_store_n(&vmap_threads_seen, true, __ATOMIC_RELAXED); /* every new thread: same value */
	if (vmap_opt.counter != VMAP_COUNTER_ATOMIC)
		vmap_counter_go_percpu();
	/* A non-NULL value makes the key's destructor run at thread exit;
	 * setting it may allocate (keys >= 32), which is safe: seen is set. */
	thread_key_make();
	if (vmap_thread_key_ok)
		vmap_setspecific(vmap_thread_key, (void *)1);
	/* BACKEND=auto: its first batch, a short one, switches */
	vmap_tls_auto_thread = true;
	uint32_t step = __atomic_load_n(&vmap_auto_step, __ATOMIC_RELAXED);
	if (step > AUTO_THREAD_STEP)
		vmap_tls_small_count = step - AUTO_THREAD_STEP;
}

/* A thread's flag is set only once init is done (by the initialising thread
 * at its end, by any other thread on its first call after it; a forked child
 * inherits it): one test on every call (enter, alloc_impl.h). */
__attribute__((noinline, cold)) void vmap_enter_slow(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
		init_slow();
	else
		thread_first_call();
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
 * (no system call for the start time, no page faults for pthread_atfork's
 * table).  What moves with it: the fork handlers are registered at the first
 * call (registered later than some other handler, ours run before it in
 * prepare; fork.c's re-entry window covers handlers on either side), the
 * report's "after start" counts from the first call, and the options are
 * the defaults even if environ gains a VMAPALLOC_* variable before it
 * (vmap_env_quiet): read at start, as before.  The walk to libc (no system
 * call) runs here and is kept for init.
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

/* _Fork() runs no fork handler (preload/fork.c): the same three (fork.c)
 * around glibc's, so that its child gets the allocator's locks free and its
 * state consistent, as after fork().  Before init no handler is registered
 * and there is nothing to lock; the test of init is here, with its state. */
static __thread bool fork_hooked;

void vmap_fork_hook_prepare(void)
{
	fork_hooked = __atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) == INIT_DONE;
	if (fork_hooked)
		vmap_fork_prepare();
}

void vmap_fork_hook_after(bool child)
{
	if (!fork_hooked)
		return;
	if (child)
		vmap_fork_child();
	else
		vmap_fork_parent();
}

VMAP_START_TEXT void vmap_at_exit(void)
{
	if (__atomic_load_n(&vmap_init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
		return;
	vmap_background_stop();
	vmap_stats_at_exit(); /* if VMAPALLOC_STATS or VMAPALLOC_PROFILE is set */
}
