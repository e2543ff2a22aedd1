/*
 * profile.c — allocation sites (VMAPALLOC_PROFILE=1), aggregated by call stack.
 *
 * What is recorded: every program mmap() served from the arena, exactly;
 * small blocks, and large blocks (range allocator), by geometric sampling
 * (tcmalloc, jemalloc): each thread counts down an exponentially distributed
 * number of bytes (mean PROFILE_SAMPLE for small blocks, PROFILE_LARGE_SAMPLE
 * for large ones, two countdowns) and the allocation that crosses zero
 * is sampled.  PROFILE_LARGE_SAMPLE=0 records every large block, exactly: the
 * stack cache below makes a record ~290 instructions and an unwind ~1350,
 * against ~3500 for a 256 KiB malloc/touch/free, so recording all of them
 * costs ~8% there (issue 6 wants < 2%).  A block of s bytes is then sampled with probability
 * p = 1 - exp(-s / SAMPLE), so it stands for 1/p blocks and s/p bytes: the
 * figures of small sites are unbiased estimates.
 *
 * Backtraces: libunwind's unw_backtrace() (its x86_64 fast path caches frame
 * descriptions per thread: ~100 ns for any depth here), or, without libunwind,
 * a frame-pointer walk whose every read is checked (process_vm_readv), which
 * only sees code built with frame pointers — vmapalloc's own included, so
 * usually only the program's call site is known then.  Frames inside libvmapalloc.so
 * itself are dropped.  The capture runs with no allocator lock held; a
 * per-thread guard (initial-exec TLS) makes whatever libunwind does inside
 * (mmap of its caches, pthread_setspecific) unprofiled rather than recursive.
 *
 * Owns, all mapped with raw mmap (never malloc):
 *   sites[]      one record per distinct (stack, kind): bytes, count, live,
 *                live peak, samples.  Append-only: a record is filled, then
 *                published (nsites, index slot) with release stores, so
 *                readers — the report, also from a signal handler — take no
 *                lock.  Record 0 collects what did not fit (table full).
 *   site_index[] open addressing by stack hash -> record number.
 *   stripes[]    the live table of sampled blocks outside the arena (small
 *                ones, and large ones glibc served when the arena refused):
 *                pointer -> (site, weighted bytes, count), 64 stripes by
 *                pointer hash, each its own lock and its own growable
 *                open-addressing array (tombstones, rehash at 3/4).
 *   a live large block's or served mapping's site is not in a table: it is
 *                kept in the block's own page-table entry (see "arena
 *                blocks" below), so recording and forgetting it is O(1).
 *   vmap_profile_filter[]  a saturating counter per hash of the sampled small
 *                pointers now live, so that free() of the other 99.9% of
 *                small blocks costs one load.
 *
 * Locks (rank VMAP_RANK_PROFILE, the highest: taken with nothing else held,
 * never two at once except by the fork handlers): site_lock serializes the
 * insertion of new sites; stripe locks protect their array.  A thread that
 * is recording (busy) never waits for a profile lock again: a signal handler
 * that frees on that thread skips the forget (the record goes stale and is
 * replaced when its address is recorded again).
 *
 * Counts are fixed point (1/256 of a block) so that sampling weights add up.
 * A realloc() forgets the block before it may move and records the result;
 * a realloc that fails forgets a block that is still live (it then no longer
 * counts as live).
 *
 * Symbolization (report time, never while recording): dladdr1() finds the
 * object; its .symtab (mapped read-only while the report runs) names static
 * functions too; else the dynamic symbol dladdr() found; else object+offset.
 * No file:line (that needs DWARF line tables and allocation), no demangling.
 * In a signal handler only _dl_find_object() (lock-free) is used: raw
 * addresses with object+offset.
 *
 * Called by: alloc.c (hooks, init, fork), the mmap interposer (kind MMAP),
 * stats.c (the report).
 */
#include "profile.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "counter.h"
#include "lock.h"
#include "options.h"
#include "os.h"
#include "section.h"

#include "backend.h"
#include <gnu/lib-names.h>

/*
 * The libc functions only a profiling process calls are looked up
 * when profiling starts (vmap_profile_init, at init, outside any signal
 * handler) with backend.c's GNU-hash lookup, not imported: each import would
 * cost every process, profiled or not, a symbol look-up at load (issue 5).
 * One missing (another libc) leaves that piece out, as a failing call would.
 */
static struct {
	int (*getattr_np)(pthread_t, pthread_attr_t *);
	pthread_t (*self)(void);
	int (*attr_getstack)(const pthread_attr_t *, void **, size_t *);
	int (*attr_destroy)(pthread_attr_t *);
	int (*dladdr1)(const void *, Dl_info *, void **, int);
	void *(*dlopen)(const char *, int);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	int (*find_object)(void *, struct dl_find_object *);
#endif
} prof_fn;

static void prof_fn_resolve(void)
{
#define LIBC_FN(field, name) \
	prof_fn.field = (__typeof__(prof_fn.field))vmap_elf_symbol(LIBC_SO, name)
	LIBC_FN(getattr_np, "pthread_getattr_np");
	LIBC_FN(self, "pthread_self");
	LIBC_FN(attr_getstack, "pthread_attr_getstack");
	LIBC_FN(attr_destroy, "pthread_attr_destroy");
	LIBC_FN(dladdr1, "dladdr1");
	LIBC_FN(dlopen, "dlopen");
#undef LIBC_FN
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	prof_fn.find_object =
		(__typeof__(prof_fn.find_object))vmap_elf_symbol(LIBC_SO, "_dl_find_object");
#endif
}

#ifdef VMAP_HAVE_LIBUNWIND
/*
 * libunwind is not a dependency of libvmapalloc.so (DT_NEEDED would load it,
 * ~0.1 ms, into every process, profiled or not): vmap_profile_start() dlopen()s
 * it when VMAPALLOC_PROFILE=1, from the library's constructor, and finds
 * unw_backtrace with backend.c's GNU-hash lookup (no dlsym).  RTLD_LOCAL: its
 * own `backtrace` stays out of the program's global scope.
 */
#define UNWIND_SONAME "libunwind.so.8"
static int (*unw_backtrace_fn)(void **, int);
#endif

#define DEPTH 24       /* frames kept per site (heaptrack: shorter stacks unwind much faster) */
#define CAPTURE 40     /* frames captured: our own leading frames are dropped */
#define SITE_MAX 16384 /* records; 256 B each, touched only as they are used */
#define SITE_INDEX (2 * SITE_MAX)
#define STRIPES 64
#define STRIPE_MIN 256 /* entries of a stripe's first array (8 KiB) */
#define COUNT_ONE 256  /* fixed point of the weighted counts */
#define FRAMES_SHOWN 8 /* frames printed per site in the text report */

struct vmap_site {
	uint64_t hash;
	uint32_t nframes;
	uint32_t kind;
	int64_t bytes;      /* allocated, weighted, in total */
	int64_t count;      /* allocations, weighted, x COUNT_ONE */
	int64_t live_bytes; /* allocated and not freed */
	int64_t live_count; /* x COUNT_ONE */
	int64_t live_peak;  /* highest live_bytes seen */
	int64_t samples;    /* records taken (unweighted) */
	uintptr_t frames[DEPTH];
};

struct live_entry {
	uintptr_t key; /* 0 empty, 1 tombstone */
	uint32_t site;
	uint32_t unused;
	int64_t bytes;
	int64_t count;
};
#define KEY_EMPTY 0
#define KEY_TOMB 1

struct stripe {
	struct vmap_lock lock;
	uint32_t cap, used, tombs; /* used counts live entries */
	struct live_entry *e;
} __attribute__((aligned(64)));

__thread struct vmap_profile_tls vmap_profile_tls;
uint8_t vmap_profile_filter[1u << VMAP_PROFILE_FILTER_BITS];

static struct vmap_site *sites;
static uint32_t *site_index;
static uint32_t nsites; /* records 1..nsites are published */
static struct vmap_lock site_lock = VMAP_LOCK_INIT;
static struct stripe stripes[STRIPES];
static const unsigned nstripes = STRIPES;
static uint64_t mean_bytes;
static uint64_t large_mean; /* 0: every large block */
static uint64_t profile_mapped; /* bytes of our tables, for the report */
static uintptr_t self_lo, self_hi; /* libvmapalloc.so's own code: frames to drop */
static char program[256];          /* argv[0] at init */
static int self_known;

static void *map_zeroed(size_t len)
{
	void *p = vmap_os_mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(p))
		return NULL;
	__atomic_add_fetch(&profile_mapped, len, __ATOMIC_RELAXED);
	return p;
}

static void vmap_profile_mmap_cut(uintptr_t head, uintptr_t end, uintptr_t a, uintptr_t e);
static void vmap_profile_mmap_grow(uintptr_t head, size_t bytes);
static void vmap_profile_mmap_moved(uintptr_t head, uintptr_t q, size_t len, size_t added);

static void observe_on(void)
{
	static struct vmap_lock_set site_locks = {"profile sites", VMAP_RANK_PROFILE, &site_lock, 0,
						  NULL};
	static struct vmap_lock_set stripe_locks = {"profile live stripes", VMAP_RANK_PROFILE,
						    &stripes[0].lock, sizeof stripes[0], &nstripes};
	vmap_lock_register(&site_locks);
	vmap_lock_register(&stripe_locks);
	vmap_observe = (struct vmap_observe){vmap_profile_record, vmap_profile_mmap_cut,
					     vmap_profile_mmap_grow, vmap_profile_mmap_moved};
	__atomic_store_n(&vmap_profile_on, true, __ATOMIC_SEQ_CST);
}

bool vmap_profile_init(void)
{
	if (!vmap_opt.profile || vmap_profile_on)
		return false;
	vmap_os_read_file("/proc/self/cmdline", program, sizeof program);
	sites = map_zeroed(SITE_MAX * sizeof *sites);
	site_index = map_zeroed(SITE_INDEX * sizeof *site_index);
	if (!sites || !site_index) {
		vmap_say("VMAPALLOC_PROFILE: could not map the profile tables; no profile", NULL, NULL);
		return false;
	}
	mean_bytes = vmap_opt.profile_sample ? vmap_opt.profile_sample : 1;
	large_mean = vmap_opt.profile_large_sample;
	prof_fn_resolve();
#ifndef VMAP_HAVE_LIBUNWIND
	observe_on(); /* frame pointers: nothing to load */
	return true;
#else
	return false;
#endif
}

VMAP_START_TEXT bool vmap_profile_start(void)
{
#ifdef VMAP_HAVE_LIBUNWIND
	if (!vmap_opt.profile || vmap_profile_on || !sites || !site_index)
		return false;
	void *h = prof_fn.dlopen ? prof_fn.dlopen(UNWIND_SONAME, RTLD_NOW | RTLD_LOCAL) : NULL;
	unw_backtrace_fn = h ? (int (*)(void **, int))vmap_elf_symbol(UNWIND_SONAME, "unw_backtrace")
			     : NULL;
	if (!unw_backtrace_fn) {
		vmap_say("VMAPALLOC_PROFILE: could not load " UNWIND_SONAME " (libunwind); no profile",
			 NULL, NULL);
		return false;
	}
	observe_on();
	return true;
#else
	return false;
#endif
}

/* ---- sampling arithmetic (no libm in the core) ------------------------- */

static uint64_t rng_next(struct vmap_profile_tls *t)
{
	if (!t->rng) {
		uint64_t z = vmap_os_now_ns() ^ (uintptr_t)t ^ ((uint64_t)vmap_os_gettid() << 32);
		z += 0x9E3779B97F4A7C15ull; /* splitmix64: never 0 out */
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
		z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
		t->rng = (z ^ (z >> 31)) | 1;
	}
	uint64_t x = t->rng; /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->rng = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ln(x) for x > 0: x = m * 2^e with m in [1, 2), ln m = 2 atanh((m-1)/(m+1)). */
static double ln(double x)
{
	union { double d; uint64_t u; } v = {x};
	int e = (int)((v.u >> 52) & 0x7ff) - 1023;
	v.u = (v.u & ((1ull << 52) - 1)) | (1023ull << 52);
	double z = (v.d - 1) / (v.d + 1), z2 = z * z;
	/* |z| <= 1/3: six terms of the series leave < 1e-7, plenty for a
	 * sampling distance (twelve, with a division each, made a sample
	 * cost ~380 instructions). */
	double sum = 1.0 / 11;
	sum = 1.0 / 9 + z2 * sum;
	sum = 1.0 / 7 + z2 * sum;
	sum = 1.0 / 5 + z2 * sum;
	sum = 1.0 / 3 + z2 * sum;
	sum = 1 + z2 * sum;
	return e * 0.69314718055994530942 + 2 * z * sum;
}

/* 1 - exp(-x) for x >= 0, accurate for small x too. */
static double one_minus_exp_neg(double x)
{
	if (x < 1e-3)
		return x - x * x / 2 + x * x * x / 6;
	if (x > 40)
		return 1;
	int k = (int)(x / 0.69314718055994530942);
	double r = -(x - k * 0.69314718055994530942), sum = 1.0 / 3628800;
	/* exp(-r), r in [0, ln 2): Horner over 1/n! to n = 10 (< 1e-8). */
	static const double inv_fact[10] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120,
					    1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880};
	for (int i = 9; i >= 0; i--)
		sum = inv_fact[i] + r * sum;
	union { double d; uint64_t u; } two = {0};
	two.u = (uint64_t)(1023 - k) << 52; /* 2^-k, k <= 58 */
	return 1 - sum * two.d;
}

/* An exponential draw with mean `mean` bytes: -ln(U) * mean, U in (0, 1]. */
static int64_t next_countdown(struct vmap_profile_tls *t, uint64_t mean)
{
	double u = (double)((rng_next(t) >> 11) + 1) * (1.0 / 9007199254740992.0);
	double d = -ln(u) * (double)mean;
	return d < 1 ? 1 : d > 4e18 ? (int64_t)4e18 : (int64_t)d;
}

/* ---- backtraces -------------------------------------------------------- */

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	uintptr_t me = (uintptr_t)&vmap_profile_record, lo = UINTPTR_MAX, hi = 0;
	bool mine = false;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr, z = a + ph->p_memsz;
		if (a < lo)
			lo = a;
		if (z > hi)
			hi = z;
		if (me >= a && me < z)
			mine = true;
	}
	if (!mine)
		return 0;
	/* Linked into the main program (unit tests): its frames are the
	 * program's, keep them all. */
	if (info->dlpi_name && info->dlpi_name[0]) {
		self_lo = lo;
		self_hi = hi;
	}
	return 1;
}

#ifndef VMAP_HAVE_LIBUNWIND
/* Reads two words at a, or fails if they are not mapped (no fault). */
static bool safe_read2(const uintptr_t *a, uintptr_t out[2])
{
	return vmap_os_read_self(out, a, 2 * sizeof(uintptr_t)) == (long)(2 * sizeof(uintptr_t));
}

/* Frame-pointer walk: [fp] = caller's fp, [fp + 8] = return address.  Stops
 * at the first record that is not above the previous one on this stack. */
static int fp_walk(void **out, int max)
{
	uintptr_t *fp = __builtin_frame_address(0);
	uintptr_t sp = (uintptr_t)&fp;
	int n = 0;
	while (n < max) {
		uintptr_t rec[2];
		if (((uintptr_t)fp & 7) || (uintptr_t)fp < sp || (uintptr_t)fp - sp > (64u << 20) ||
		    !safe_read2(fp, rec) || rec[1] < 4096)
			break;
		out[n++] = (void *)rec[1];
		if (rec[0] <= (uintptr_t)fp)
			break;
		fp = (uintptr_t *)rec[0];
	}
	return n;
}
#endif

/* The stack from the program's call site outward; ra is that call site when
 * the entry point knew it (see vmap_profile_record). */
__attribute__((noinline)) static unsigned capture(uintptr_t *out, uintptr_t ra)
{
	void *raw[CAPTURE];
	if (!__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) {
		dl_iterate_phdr(find_self, NULL);
		__atomic_store_n(&self_known, 1, __ATOMIC_RELEASE);
	}
#ifdef VMAP_HAVE_LIBUNWIND
	int n = unw_backtrace_fn(raw, CAPTURE);
#else
	int n = fp_walk(raw, CAPTURE);
#endif
	int i = 0;
	while (i < n && (uintptr_t)raw[i] - self_lo < self_hi - self_lo)
		i++;
	unsigned k = 0;
	for (; i < n && k < DEPTH; i++)
		out[k++] = (uintptr_t)raw[i];
#ifndef VMAP_HAVE_LIBUNWIND
	/* vmapalloc's own frames have no frame pointers unless it was built
	 * with them: then the walk stops inside them, and the call site the
	 * entry point saw is the one frame known. */
	if (!k && ra && ra - self_lo >= self_hi - self_lo)
		out[k++] = ra;
#else
	(void)ra;
#endif
	return k;
}

static uint64_t stack_hash(const uintptr_t *f, unsigned n, int kind)
{
	uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
	for (unsigned i = 0; i < n; i++) {
		h ^= f[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/* ---- sites ------------------------------------------------------------- */

static uint32_t site_find(uint64_t h, const uintptr_t *f, unsigned n, int kind)
{
	for (uint32_t i = (uint32_t)h & (SITE_INDEX - 1);; i = (i + 1) & (SITE_INDEX - 1)) {
		uint32_t id = __atomic_load_n(&site_index[i], __ATOMIC_ACQUIRE);
		if (!id)
			return 0;
		const struct vmap_site *s = &sites[id];
		if (s->hash != h || s->nframes != n || s->kind != (uint32_t)kind)
			continue;
		unsigned j = 0;
		while (j < n && s->frames[j] == f[j])
			j++;
		if (j == n)
			return id;
	}
}

/* The record for this stack, created if new; 0 (the overflow record) when
 * the table is full. */
static uint32_t site_get(const uintptr_t *f, unsigned n, int kind)
{
	uint64_t h = stack_hash(f, n, kind);
	uint32_t id = site_find(h, f, n, kind);
	if (id)
		return id;
	vmap_lock(&site_lock, VMAP_RANK_PROFILE);
	id = site_find(h, f, n, kind);
	if (!id && nsites + 1 < SITE_MAX) {
		id = nsites + 1;
		struct vmap_site *s = &sites[id];
		s->hash = h;
		s->nframes = n;
		s->kind = (uint32_t)kind;
		for (unsigned j = 0; j < n; j++)
			s->frames[j] = f[j];
		__atomic_store_n(&nsites, id, __ATOMIC_RELEASE);
		uint32_t i = (uint32_t)h & (SITE_INDEX - 1);
		while (site_index[i])
			i = (i + 1) & (SITE_INDEX - 1);
		__atomic_store_n(&site_index[i], id, __ATOMIC_RELEASE);
	}
	vmap_unlock(&site_lock, VMAP_RANK_PROFILE);
	return id;
}

/*
 * Per-thread batch of one site's deltas: a loop that allocates and frees at
 * one site changes the shared record (atomically) once per BATCH updates
 * instead of six atomic operations per block.  Flushed when the thread moves
 * to another site, at BATCH updates, at thread exit, and by the reporting
 * thread before it reads; a thread still running when the report is written
 * may hold up to BATCH - 1 updates of one site (the report says "approximate"
 * when other threads run).  The live peak is the site's live bytes before the
 * flush plus the highest running total within the batch: exact for one
 * thread, approximate when several update one site at once.
 */
#define BATCH 64

struct batch {
	uint32_t site1; /* site + 1; 0: empty */
	uint32_t n;
	int64_t bytes, count, live_bytes, live_count, live_max, samples;
};
static __thread struct batch vmap_profile_batch;

static void batch_flush(struct batch *bt)
{
	if (!bt->site1)
		return;
	struct vmap_site *s = &sites[bt->site1 - 1];
	if (bt->bytes)
		__atomic_add_fetch(&s->bytes, bt->bytes, __ATOMIC_RELAXED);
	if (bt->count)
		__atomic_add_fetch(&s->count, bt->count, __ATOMIC_RELAXED);
	if (bt->samples)
		__atomic_add_fetch(&s->samples, bt->samples, __ATOMIC_RELAXED);
	if (bt->live_count)
		__atomic_add_fetch(&s->live_count, bt->live_count, __ATOMIC_RELAXED);
	int64_t after = bt->live_bytes ? __atomic_add_fetch(&s->live_bytes, bt->live_bytes,
							    __ATOMIC_RELAXED)
				       : __atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED);
	int64_t cand = after - bt->live_bytes + bt->live_max;
	int64_t peak = __atomic_load_n(&s->live_peak, __ATOMIC_RELAXED);
	while (cand > peak && !__atomic_compare_exchange_n(&s->live_peak, &peak, cand, true,
							   __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	*bt = (struct batch){0};
}

/* Adds to site id's figures through this thread's batch. */
static void site_delta(uint32_t id, int64_t bytes, int64_t count, int64_t live_bytes,
		       int64_t live_count, int samples)
{
	struct batch *bt = &vmap_profile_batch;
	if (bt->site1 != id + 1) {
		batch_flush(bt);
		bt->site1 = id + 1;
	}
	bt->bytes += bytes;
	bt->count += count;
	bt->samples += samples;
	bt->live_count += live_count;
	bt->live_bytes += live_bytes;
	if (bt->live_bytes > bt->live_max)
		bt->live_max = bt->live_bytes;
	if (++bt->n >= BATCH)
		batch_flush(bt);
}

void vmap_profile_thread_exit(void)
{
	if (vmap_profile_on)
		batch_flush(&vmap_profile_batch);
}

/* ---- arena blocks: the site in the page-table entry --------------------- */

/*
 * A live large block or served mapping has a page-table entry at its head
 * whose link words the range allocator leaves alone while the block is live
 * (pte.h): the profile keeps the block's record there, so that recording and
 * forgetting it take no table, hash or lock:
 *
 *   prof_site  = PTE_SITE | site id   (bit 63: a link is an arena address or 0)
 *   prof_bytes = weighted bytes        prof_count = weighted count (x COUNT_ONE)
 *
 * Written once the block is published live (the program owns it; nothing
 * else reads those words then), consumed — prof_site back to 0 — while it is
 * still live, before free/realloc/munmap give it back: so a pte that returns
 * to a pool or a free run, or becomes the interior of a merged run, never
 * carries a site, and a block allocated before the profile started (or while
 * this thread was recording) carries none either.  A served mapping that
 * munmap() splits hands its record to the pieces that remain
 * (vmap_profile_mmap_cut).
 */
#define PTE_SITE VMAP_PTE_SITE

static inline void pte_note(struct vmap_pte *e, uint32_t id, int64_t bytes, int64_t count)
{
	e->prof_bytes = (uint64_t)bytes;
	e->prof_count = (uintptr_t)count;
	__atomic_store_n(&e->prof_site, (uintptr_t)(PTE_SITE | id), __ATOMIC_RELAXED);
}

/* Takes the record of the block whose head entry is e (if it has one) off its
 * site's live figures. */
static void pte_forget(struct vmap_pte *e)
{
	uintptr_t w = __atomic_load_n(&e->prof_site, __ATOMIC_RELAXED);
	if (!(w & PTE_SITE))
		return;
	__atomic_store_n(&e->prof_site, 0, __ATOMIC_RELAXED);
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (t->busy) { /* a signal handler freeing in the middle of a record */
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
		return;
	}
	t->busy = 1;
	site_delta((uint32_t)w, 0, 0, -(int64_t)e->prof_bytes, -(int64_t)e->prof_count, 0);
	t->busy = 0;
}

static inline struct vmap_pte *pte_at(uintptr_t a)
{
	struct vmap_region *r = vmap_region_of(a);
	return r ? vmap_pte_of(r, a) : NULL;
}

/*
 * munmap of [a, e) inside the served mapping [head, end), shard lock held,
 * before the tags change.  The site's live figures lose the bytes cut; a
 * piece that remains keeps (or, at e, takes over) the record; when both sides
 * remain, the right one is one more live mapping of the site.  Served
 * mappings are never sampled: their bytes are exact, so a piece's bytes are
 * its size.
 */
static void vmap_profile_mmap_cut(uintptr_t head, uintptr_t end, uintptr_t a, uintptr_t e)
{
	struct vmap_pte *h = pte_at(head);
	uintptr_t w = __atomic_load_n(&h->prof_site, __ATOMIC_RELAXED);
	if (!(w & PTE_SITE))
		return;
	struct vmap_profile_tls *t = &vmap_profile_tls;
	bool left = a > head, right = e < end;
	int64_t cut = (int64_t)(e - a), count = 0;
	if (!left)
		__atomic_store_n(&h->prof_site, 0, __ATOMIC_RELAXED);
	else
		h->prof_bytes = a - head;
	if (right)
		pte_note(pte_at(e), (uint32_t)w, (int64_t)(end - e), COUNT_ONE);
	if (!left && !right)
		count = -(int64_t)h->prof_count;
	else if (left && right)
		count = COUNT_ONE;
	if (t->busy) {
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
		return;
	}
	t->busy = 1;
	site_delta((uint32_t)w, 0, 0, -cut, count, 0);
	t->busy = 0;
}

/* mremap grew the served mapping at head in place by bytes. */
static void vmap_profile_mmap_grow(uintptr_t head, size_t bytes)
{
	struct vmap_pte *h = pte_at(head);
	uintptr_t w = __atomic_load_n(&h->prof_site, __ATOMIC_RELAXED);
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!(w & PTE_SITE) || t->busy)
		return;
	h->prof_bytes += bytes;
	t->busy = 1;
	site_delta((uint32_t)w, (int64_t)bytes, 0, (int64_t)bytes, 0, 0);
	t->busy = 0;
}

/* mremap moved pages of the mapping at head to a new served mapping q of len
 * bytes (the old pages are cut after, through vmap_profile_mmap_cut): q is one
 * more live mapping of the same site, added bytes more allocated. */
static void vmap_profile_mmap_moved(uintptr_t head, uintptr_t q, size_t len, size_t added)
{
	struct vmap_pte *h = pte_at(head), *n = pte_at(q);
	if (!n)
		return; /* the kernel's */
	uintptr_t w = __atomic_load_n(&h->prof_site, __ATOMIC_RELAXED);
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!(w & PTE_SITE) || t->busy) {
		__atomic_store_n(&n->prof_site, 0, __ATOMIC_RELAXED);
		return;
	}
	pte_note(n, (uint32_t)w, (int64_t)len, COUNT_ONE);
	t->busy = 1;
	site_delta((uint32_t)w, (int64_t)added, 0, (int64_t)len, COUNT_ONE, 0);
	t->busy = 0;
}

/* ---- the live table ---------------------------------------------------- */

static void stripe_lock(struct stripe *st)
{
	vmap_lock(&st->lock, VMAP_RANK_PROFILE);
}

static void stripe_unlock(struct stripe *st)
{
	vmap_unlock(&st->lock, VMAP_RANK_PROFILE);
}

static inline uint64_t ptr_hash(uintptr_t p)
{
	uint64_t h = (uint64_t)(p >> 4) * 0x9E3779B97F4A7C15ull;
	return h ^ (h >> 32);
}

static inline struct stripe *stripe_of(uint64_t h)
{
	return &stripes[h >> (64 - 6)];
}

static void filter_inc(unsigned slot)
{
	uint8_t *c = &vmap_profile_filter[slot];
	uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
	while (v != 255 && !__atomic_compare_exchange_n(c, &v, (uint8_t)(v + 1), true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

static void filter_dec(unsigned slot)
{
	uint8_t *c = &vmap_profile_filter[slot];
	uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
	while (v != 255 && v != 0 &&
	       !__atomic_compare_exchange_n(c, &v, (uint8_t)(v - 1), true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED)) {
	}
}

/* Rehashes a stripe into an array of cap entries.  Lock held. */
static bool stripe_grow_locked(struct stripe *st, uint32_t cap)
{
	size_t len = (size_t)cap * sizeof(struct live_entry);
	struct live_entry *e = map_zeroed(len);
	if (!e)
		return false;
	for (uint32_t i = 0; i < st->cap; i++) {
		uintptr_t k = st->e[i].key;
		if (k == KEY_EMPTY || k == KEY_TOMB)
			continue;
		uint32_t j = (uint32_t)ptr_hash(k) & (cap - 1);
		while (e[j].key)
			j = (j + 1) & (cap - 1);
		e[j] = st->e[i];
	}
	if (st->e) {
		size_t old = (size_t)st->cap * sizeof(struct live_entry);
		vmap_os_munmap(st->e, old);
		__atomic_sub_fetch(&profile_mapped, old, __ATOMIC_RELAXED);
	}
	st->e = e;
	st->cap = cap;
	st->tombs = 0;
	return true;
}

/* Finds p's slot, or NULL. Lock held. */
static struct live_entry *stripe_find_locked(struct stripe *st, uintptr_t p, uint64_t h)
{
	if (!st->e)
		return NULL;
	for (uint32_t i = (uint32_t)h & (st->cap - 1), n = 0; n < st->cap;
	     i = (i + 1) & (st->cap - 1), n++) {
		uintptr_t k = st->e[i].key;
		if (k == p)
			return &st->e[i];
		if (k == KEY_EMPTY)
			return NULL;
	}
	return NULL;
}

/* Drops an entry (its site's live figures too). Lock held. */
static void entry_drop_locked(struct stripe *st, struct live_entry *e)
{
	site_delta(e->site, 0, 0, -e->bytes, -e->count, 0);
	filter_dec(vmap_profile_filter_slot((void *)e->key));
	e->key = KEY_TOMB;
	st->used--;
	st->tombs++;
}

static bool live_insert(uintptr_t p, uint32_t site, int64_t bytes, int64_t count)
{
	uint64_t h = ptr_hash(p);
	struct stripe *st = stripe_of(h);
	stripe_lock(st);
	struct live_entry *old = stripe_find_locked(st, p, h);
	if (old) /* a stale record (its free was not seen): replace it */
		entry_drop_locked(st, old);
	if ((uint64_t)(st->used + st->tombs + 1) * 4 > (uint64_t)st->cap * 3) {
		uint32_t cap = STRIPE_MIN;
		while ((uint64_t)cap < (uint64_t)(st->used + 1) * 2)
			cap *= 2;
		if (!stripe_grow_locked(st, cap)) {
			stripe_unlock(st);
			return false;
		}
	}
	uint32_t i = (uint32_t)h & (st->cap - 1);
	while (st->e[i].key != KEY_EMPTY && st->e[i].key != KEY_TOMB)
		i = (i + 1) & (st->cap - 1);
	if (st->e[i].key == KEY_TOMB)
		st->tombs--;
	st->e[i] = (struct live_entry){p, site, 0, bytes, count};
	st->used++;
	filter_inc(vmap_profile_filter_slot((void *)p));
	stripe_unlock(st);
	return true;
}

void vmap_profile_forget(void *ptr)
{
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!vmap_profile_on)
		return;
	uintptr_t p = (uintptr_t)ptr;
	struct vmap_region *r = vmap_region_of(p);
	if (r && !vmap_slab_of(r, p)) {
		if (!(p & (VMAP_PAGE - 1))) /* else not a block: free() will say so */
			pte_forget(vmap_pte_of(r, p));
		return;
	}
	if (t->busy)
		return;
	uint64_t h = ptr_hash(p);
	struct stripe *st = stripe_of(h);
	if (!__atomic_load_n(&st->used, __ATOMIC_RELAXED))
		return;
	t->busy = 1;
	stripe_lock(st);
	struct live_entry *e = stripe_find_locked(st, p, h);
	if (e)
		entry_drop_locked(st, e);
	stripe_unlock(st);
	t->busy = 0;
}

/* ---- the stack cache --------------------------------------------------- */

/*
 * A loop that allocates at one call site unwinds the same stack again and
 * again: libunwind costs ~800 instructions a time.  Each thread remembers a
 * few stacks by (return address into the program, its stack pointer), and
 * where on its stack each return address of the stack was found.  A later
 * allocation with the same key takes the cached site only if every one of
 * those return addresses is still at its place — then the call chain is the
 * same, frame by frame — else it unwinds.  An entry is filled on the second
 * unwind of its key (the first only remembers the key), by scanning the
 * stack upward for the return addresses in order.  Every read stays inside
 * this thread's stack ([cfa, top of the stack) is mapped while the frames
 * below cfa run); stacks that are not the thread's own (coroutines, signal
 * stacks) are never cached.
 */
#define SCACHE 4
#define SCAN_MAX ((uintptr_t)1 << 20) /* bytes of stack scanned for a fill */

struct scache_entry {
	uintptr_t ra, cfa;
	uint32_t site1; /* site + 1 */
	uint32_t state; /* 0 empty, 1 key seen once, 2 slots known */
	uintptr_t slot[DEPTH]; /* where frames[i] (i >= 1) lies on the stack */
};

struct scache {
	uintptr_t lo, hi; /* this thread's stack */
	int bounds;       /* 0 unknown, 1 known, -1 unavailable */
	struct scache_entry e[SCACHE];
};
static __thread struct scache vmap_profile_scache;

static inline struct scache_entry *scache_slot(uintptr_t ra, uintptr_t cfa)
{
	return &vmap_profile_scache.e[((ra >> 2) ^ (cfa >> 4)) & (SCACHE - 1)];
}

static bool scache_hit(uintptr_t ra, uintptr_t cfa, int kind, uint32_t *id)
{
	struct scache_entry *e = scache_slot(ra, cfa);
	if (e->state != 2 || e->ra != ra || e->cfa != cfa)
		return false;
	const struct vmap_site *s = &sites[e->site1 - 1];
	if (s->kind != (uint32_t)kind)
		return false;
	for (unsigned i = 1; i < s->nframes; i++)
		if (*(const volatile uintptr_t *)e->slot[i] != s->frames[i])
			return false;
	*id = e->site1 - 1;
	return true;
}

static bool stack_bounds(struct scache *c)
{
	if (!c->bounds) {
		/* May allocate (the cpuset; the main thread reads
		 * /proc/self/maps): unprofiled, this thread is busy. */
		pthread_attr_t attr;
		void *addr;
		size_t size;
		c->bounds = -1;
		if (prof_fn.getattr_np && prof_fn.self && prof_fn.attr_getstack &&
		    prof_fn.attr_destroy && prof_fn.getattr_np(prof_fn.self(), &attr) == 0) {
			if (prof_fn.attr_getstack(&attr, &addr, &size) == 0 && size) {
				c->lo = (uintptr_t)addr;
				c->hi = (uintptr_t)addr + size;
				c->bounds = 1;
			}
			prof_fn.attr_destroy(&attr);
		}
	}
	return c->bounds == 1;
}

static void scache_note(uintptr_t ra, uintptr_t cfa, uint32_t id, const uintptr_t *frames,
			unsigned n)
{
	struct scache *c = &vmap_profile_scache;
	/* The key must be the program's call site, the first frame kept. */
	if (!id || !n || frames[0] != ra || ra - self_lo < self_hi - self_lo || (cfa & 7))
		return;
	struct scache_entry *e = scache_slot(ra, cfa);
	if (e->state == 0 || e->ra != ra || e->cfa != cfa || e->site1 != id + 1) {
		*e = (struct scache_entry){.ra = ra, .cfa = cfa, .site1 = id + 1, .state = 1};
		return;
	}
	if (e->state != 1 || !stack_bounds(c) || cfa <= c->lo || cfa >= c->hi)
		return;
	const uintptr_t *w = (const uintptr_t *)cfa, *end = (const uintptr_t *)c->hi;
	if (c->hi - cfa > SCAN_MAX)
		end = (const uintptr_t *)(cfa + SCAN_MAX);
	for (unsigned i = 1; i < n; i++) {
		while (w < end && *w != frames[i])
			w++;
		if (w == end) {
			e->state = 0; /* not all found: this stack is not cached */
			return;
		}
		e->slot[i] = (uintptr_t)w++;
	}
	e->state = 2;
}

/* ---- recording --------------------------------------------------------- */

/* The block of size bytes crossed this thread's countdown: false if it is
 * the thread's first block of the kind and the first distance, drawn now,
 * does not end in it; else the next distance, and the block's weights. */
static bool sampled(struct vmap_profile_tls *t, int64_t *countdown, uint8_t *drawn, uint64_t mean,
		    size_t size, int64_t *bytes, int64_t *count)
{
	if (!*drawn) {
		/* Instead of sampling the thread's first block for sure. */
		*drawn = 1;
		*countdown += next_countdown(t, mean);
		if (*countdown > 0)
			return false;
	}
	/* Memoryless: the next distance starts after this block. */
	*countdown = next_countdown(t, mean);
	double prob = one_minus_exp_neg((double)size / (double)mean);
	if (prob < 1e-12)
		prob = 1e-12;
	*bytes = (int64_t)((double)size / prob + 0.5);
	*count = (int64_t)((double)COUNT_ONE / prob + 0.5);
	return true;
}

void vmap_profile_record(void *p, size_t size, int kind, uintptr_t ra, uintptr_t cfa)
{
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!p || !vmap_profile_on)
		return;
	int64_t bytes = (int64_t)size, count = COUNT_ONE;
	if (kind == VMAP_PROFILE_SMALL) {
		if (!sampled(t, &t->countdown, &t->small_drawn, mean_bytes, size, &bytes, &count))
			return;
	} else if (kind == VMAP_PROFILE_LARGE) {
		if (!large_mean)
			t->large_countdown = 0; /* every block: the inline test never skips one */
		else if (!sampled(t, &t->large_countdown, &t->large_drawn, large_mean, size, &bytes,
				  &count))
			return;
	}
	if (t->busy) {
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
		return;
	}
	t->busy = 1;
	uint32_t id;
	if (!scache_hit(ra, cfa, kind, &id)) {
		uintptr_t frames[DEPTH];
		unsigned n = capture(frames, ra);
		id = site_get(frames, n, kind);
		scache_note(ra, cfa, id, frames, n);
	}
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	if (r && !vmap_slab_of(r, (uintptr_t)p)) {
		pte_note(vmap_pte_of(r, (uintptr_t)p), id, bytes, count);
		site_delta(id, bytes, count, bytes, count, 1);
	} else if (live_insert((uintptr_t)p, id, bytes, count)) {
		site_delta(id, bytes, count, bytes, count, 1);
	} else { /* its free could not be seen: count it, but not as live */
		site_delta(id, bytes, count, 0, 0, 1);
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
	}
	if (!id)
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
	vmap_stat_inc_local(VMAP_STAT_profile_samples);
	t->busy = 0;
}

void vmap_profile_reset_peaks(void)
{
	if (!vmap_profile_on)
		return;
	uint32_t n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i <= n; i++)
		__atomic_store_n(&sites[i].live_peak,
				 __atomic_load_n(&sites[i].live_bytes, __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
}


/* ---- symbolization (report time) ---------------------------------------- */

#define SYM_OBJS 24

struct sym_obj {
	const struct link_map *lm;
	const char *base;        /* basename for display */
	void *map;               /* the object's file, mapped read-only */
	size_t maplen;
	const ElfW(Sym) *syms;   /* its .symtab, if it has one */
	size_t nsyms;
	const char *strs;
	size_t strsz;
};

struct symbolizer {
	struct sym_obj obj[SYM_OBJS];
	unsigned n;
	bool in_signal; /* names nothing: object+offset only */
};

struct frame_name {
	const char *func; /* NULL when unknown */
	uint64_t off;     /* from func, or from the object's load address */
	const char *object;
	uintptr_t rel;    /* address - load bias (what addr2line -e object wants) */
};

static const char *base_of(const char *path)
{
	const char *b = path;
	for (const char *p = path; *p; p++)
		if (*p == '/')
			b = p + 1;
	return b;
}

/* The program as it was started: argv[0] read at init, before main() could
 * rewrite it (redis-server sets its process title there), so that a
 * symbolic link such as redis-server -> redis-check-rdb keeps its name. */
static const char *exe_name(struct symbolizer *z)
{
	(void)z;
	return program[0] ? base_of(program) : "(program)";
}

static void obj_load_symtab(struct sym_obj *o, const char *path)
{
	int fd = vmap_os_open(path, O_RDONLY, 0);
	if (fd < 0)
		return;
	long size = vmap_os_lseek(fd, 0, SEEK_END);
	if (size < (long)sizeof(ElfW(Ehdr))) {
		vmap_os_close(fd);
		return;
	}
	size_t len = (size_t)size;
	void *m = vmap_os_mmap(NULL, (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1), PROT_READ,
			       MAP_PRIVATE, fd, 0);
	vmap_os_close(fd);
	if (vmap_os_is_err(m))
		return;
	o->map = m;
	o->maplen = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	const unsigned char *f = m;
	const ElfW(Ehdr) *eh = m;
	if (f[0] != 0x7f || f[1] != 'E' || f[2] != 'L' || f[3] != 'F' ||
	    f[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > len ||
	    (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > len - eh->e_shoff)
		return;
	const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_entsize != sizeof(ElfW(Sym)) ||
		    sh[i].sh_link >= eh->e_shnum)
			continue;
		const ElfW(Shdr) *str = &sh[sh[i].sh_link];
		if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
		    str->sh_offset > len || str->sh_size > len - str->sh_offset || !str->sh_size)
			continue;
		o->syms = (const ElfW(Sym) *)(f + sh[i].sh_offset);
		o->nsyms = sh[i].sh_size / sizeof(ElfW(Sym));
		o->strs = (const char *)(f + str->sh_offset);
		o->strsz = str->sh_size;
		return;
	}
}

static struct sym_obj *obj_get(struct symbolizer *z, const struct link_map *lm)
{
	for (unsigned i = 0; i < z->n; i++)
		if (z->obj[i].lm == lm)
			return &z->obj[i];
	if (z->n == SYM_OBJS)
		return NULL;
	struct sym_obj *o = &z->obj[z->n++];
	*o = (struct sym_obj){.lm = lm};
	const char *path = lm->l_name;
	if (!path || !path[0]) { /* the main program */
		o->base = exe_name(z);
		path = "/proc/self/exe";
	} else {
		o->base = base_of(path);
	}
	if (path[0] == '/')
		obj_load_symtab(o, path);
	return o;
}

static void symbolizer_done(struct symbolizer *z)
{
	for (unsigned i = 0; i < z->n; i++)
		if (z->obj[i].map)
			vmap_os_munmap(z->obj[i].map, z->obj[i].maplen);
	z->n = 0;
}

static void symbolize(struct symbolizer *z, uintptr_t addr, struct frame_name *out)
{
	*out = (struct frame_name){NULL, 0, NULL, addr};
	Dl_info info;
	struct link_map *lm = NULL;
	/* addr is a return address: look up the call instruction before it. */
	if (!prof_fn.dladdr1 ||
	    !prof_fn.dladdr1((void *)(addr - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return;
	out->rel = addr - lm->l_addr;
	struct sym_obj *o = obj_get(z, lm);
	out->object = o ? o->base : base_of(info.dli_fname ? info.dli_fname : "?");
	uintptr_t rel = addr - 1 - lm->l_addr;
	if (o && o->syms) {
		for (size_t i = 0; i < o->nsyms; i++) {
			const ElfW(Sym) *s = &o->syms[i];
			unsigned type = ELF64_ST_TYPE(s->st_info);
			if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_shndx == SHN_UNDEF ||
			    s->st_name >= o->strsz)
				continue;
			if (rel >= s->st_value && rel - s->st_value < (s->st_size ? s->st_size : 1)) {
				out->func = o->strs + s->st_name;
				out->off = addr - lm->l_addr - s->st_value;
				return;
			}
		}
	}
	if (info.dli_sname && info.dli_saddr) {
		out->func = info.dli_sname;
		out->off = addr - (uintptr_t)info.dli_saddr;
	}
}

/* Async-signal-safe: the object and the offset from its load bias only. */
static void locate_in_signal(struct symbolizer *z, uintptr_t addr, struct frame_name *out)
{
	*out = (struct frame_name){NULL, 0, NULL, addr};
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	struct dl_find_object fo;
	if (prof_fn.find_object && prof_fn.find_object((void *)(addr - 1), &fo) == 0 &&
	    fo.dlfo_link_map) {
		const struct link_map *lm = fo.dlfo_link_map;
		out->object = lm->l_name && lm->l_name[0] ? base_of(lm->l_name) : exe_name(z);
		out->rel = addr - lm->l_addr;
	}
#endif
}

/* ---- the report ------------------------------------------------------------ */

enum { BY_BYTES, BY_COUNT, BY_LIVE, NTABLES };
/* Arrays of arrays, not of pointers: no relocations at load (issue 5). */
static const char table_title[NTABLES][40] = {"by bytes allocated", "by number of allocations",
					      "still live (leak candidates at exit)"};
static const char table_key[NTABLES][12] = {"by_bytes", "by_count", "live"};
static const char kind_name[][8] = {"small", "large", "mmap"};

/* A site of sampled blocks: its figures are estimates. */
static bool estimated(const struct vmap_site *s)
{
	return s->kind == VMAP_PROFILE_SMALL || (s->kind == VMAP_PROFILE_LARGE && large_mean);
}

static int64_t site_key(const struct vmap_site *s, int table)
{
	int64_t v = table == BY_BYTES ? __atomic_load_n(&s->bytes, __ATOMIC_RELAXED)
		    : table == BY_COUNT ? __atomic_load_n(&s->count, __ATOMIC_RELAXED)
					: __atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED);
	return v;
}

/* Top `top` site ids by the table's key (> 0 only), largest first. */
static unsigned select_top(int table, uint32_t *out, unsigned top)
{
	uint32_t n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);
	unsigned k = 0;
	for (uint32_t id = 0; id <= n; id++) {
		int64_t v = site_key(&sites[id], table);
		if (v <= 0)
			continue;
		if (k == top && v <= site_key(&sites[out[k - 1]], table))
			continue;
		unsigned j = k < top ? k++ : top - 1;
		while (j > 0 && site_key(&sites[out[j - 1]], table) < v) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = id;
	}
	return k;
}

static uint64_t clamp0(int64_t v)
{
	return v < 0 ? 0 : (uint64_t)v;
}

static uint64_t whole_count(int64_t fp)
{
	return (clamp0(fp) + COUNT_ONE / 2) / COUNT_ONE;
}

static void frame_text(struct vmap_buf *b, const struct frame_name *fn)
{
	if (fn->func) {
		vmap_buf_str(b, fn->func);
		vmap_buf_char(b, '+');
		vmap_buf_hex(b, fn->off);
	} else {
		vmap_buf_hex(b, fn->rel);
	}
	if (fn->object) {
		vmap_buf_str(b, fn->func ? " (" : " in ");
		vmap_buf_str(b, fn->object);
		if (fn->func)
			vmap_buf_char(b, ')');
	}
}

static bool is_main(const char *f)
{
	return f && f[0] == 'm' && f[1] == 'a' && f[2] == 'i' && f[3] == 'n' && !f[4];
}

static void site_text(struct vmap_buf *b, struct symbolizer *z, const struct vmap_site *s,
		      bool frames)
{
	bool est = estimated(s);
	const char *approx = est ? "~" : "";
	vmap_buf_str(b, approx);
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, " in ");
	vmap_buf_str(b, approx);
	uint64_t count = whole_count(__atomic_load_n(&s->count, __ATOMIC_RELAXED));
	vmap_buf_u64(b, count);
	vmap_buf_char(b, ' ');
	vmap_buf_str(b, kind_name[s->kind < 3 ? s->kind : 0]);
	vmap_buf_str(b, s->kind == VMAP_PROFILE_MMAP ? " mapping" : " block");
	if (count != 1)
		vmap_buf_char(b, 's');
	if (s == &sites[0])
		vmap_buf_str(b, " of stacks that did not fit the site table");
	if (est) {
		int64_t n = __atomic_load_n(&s->samples, __ATOMIC_RELAXED);
		vmap_buf_str(b, " (");
		vmap_buf_u64(b, clamp0(n));
		vmap_buf_str(b, n == 1 ? " sample)" : " samples)");
	}
	vmap_buf_str(b, "; live ");
	vmap_buf_str(b, approx);
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->live_count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", peak ");
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->live_peak, __ATOMIC_RELAXED)));
	if (!frames)
		return;
	unsigned shown = 0;
	for (unsigned i = 0; i < s->nframes; i++) {
		if (shown == FRAMES_SHOWN) {
			vmap_buf_str(b, "\n            ... ");
			vmap_buf_u64(b, s->nframes - i);
			vmap_buf_str(b, " more frame(s)");
			break;
		}
		struct frame_name fn;
		if (z->in_signal)
			locate_in_signal(z, s->frames[i], &fn);
		else
			symbolize(z, s->frames[i], &fn);
		vmap_buf_str(b, "\n            ");
		frame_text(b, &fn);
		shown++;
		if (is_main(fn.func))
			break; /* what lies below main is the C runtime */
	}
	if (!s->nframes)
		vmap_buf_str(b, "\n            (no stack)");
}

static void site_json(struct vmap_buf *b, struct symbolizer *z, const struct vmap_site *s)
{
	vmap_buf_str(b, "{\"kind\": \"");
	vmap_buf_str(b, kind_name[s->kind < 3 ? s->kind : 0]);
	vmap_buf_str(b, "\", \"estimated\": ");
	vmap_buf_str(b, estimated(s) ? "true" : "false");
	vmap_buf_str(b, ", \"bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"count\": ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_count\": ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->live_count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_peak_bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->live_peak, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"samples\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->samples, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"frames\": [");
	for (unsigned i = 0; i < s->nframes; i++) {
		struct frame_name fn;
		if (z->in_signal)
			locate_in_signal(z, s->frames[i], &fn);
		else
			symbolize(z, s->frames[i], &fn);
		vmap_buf_str(b, i ? ", {\"addr\": \"" : "{\"addr\": \"");
		vmap_buf_hex(b, s->frames[i]);
		vmap_buf_str(b, "\", \"function\": ");
		if (fn.func)
			vmap_buf_json_str(b, fn.func);
		else
			vmap_buf_str(b, "null");
		vmap_buf_str(b, ", \"offset\": ");
		vmap_buf_u64(b, fn.func ? fn.off : fn.rel);
		vmap_buf_str(b, ", \"object\": ");
		if (fn.object)
			vmap_buf_json_str(b, fn.object);
		else
			vmap_buf_str(b, "null");
		vmap_buf_char(b, '}');
	}
	vmap_buf_str(b, "]}");
}

static void report(struct vmap_buf *b, int format, struct symbolizer *z)
{
	bool json = format == VMAP_FORMAT_JSON;
	if (!vmap_profile_on) {
		if (json)
			vmap_buf_str(b, "null");
		return;
	}
	unsigned top = (unsigned)(vmap_opt.profile_top ? vmap_opt.profile_top : 10);
	if (top > 1000)
		top = 1000;
	uint32_t ids[NTABLES][1000];
	unsigned cnt[NTABLES];
	for (int t = 0; t < NTABLES; t++)
		cnt[t] = select_top(t, ids[t], top);
	uint32_t n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);
	int64_t samples = 0;
	for (uint32_t i = 0; i <= n; i++)
		samples += __atomic_load_n(&sites[i].samples, __ATOMIC_RELAXED);
	if (json) {
		vmap_buf_str(b, "{\"sample_bytes\": ");
		vmap_buf_u64(b, mean_bytes);
		vmap_buf_str(b, ", \"large_sample_bytes\": ");
		vmap_buf_u64(b, large_mean);
		vmap_buf_str(b, ", \"top\": ");
		vmap_buf_u64(b, top);
		vmap_buf_str(b, ", \"sites\": ");
		vmap_buf_u64(b, n);
		vmap_buf_str(b, ", \"samples\": ");
		vmap_buf_u64(b, clamp0(samples));
		vmap_buf_str(b, ", \"table_full\": ");
		vmap_buf_str(b, n + 1 >= SITE_MAX ? "true" : "false");
		vmap_buf_str(b, ", \"symbolized\": ");
		vmap_buf_str(b, z->in_signal ? "false" : "true");
		vmap_buf_str(b, ", \"tables_bytes\": ");
		vmap_buf_u64(b, __atomic_load_n(&profile_mapped, __ATOMIC_RELAXED));
		for (int t = 0; t < NTABLES; t++) {
			vmap_buf_str(b, ", \"");
			vmap_buf_str(b, table_key[t]);
			vmap_buf_str(b, "\": [");
			for (unsigned i = 0; i < cnt[t]; i++) {
				if (i)
					vmap_buf_str(b, ", ");
				site_json(b, z, &sites[ids[t][i]]);
			}
			vmap_buf_char(b, ']');
		}
		vmap_buf_char(b, '}');
		return;
	}
	vmap_buf_str(b, "\n  allocation sites          ");
	vmap_buf_u64(b, n);
	vmap_buf_str(b, " call stacks from ");
	vmap_buf_u64(b, clamp0(samples));
	vmap_buf_str(b, " records: small blocks sampled every ");
	vmap_buf_bytes(b, mean_bytes);
	if (large_mean) {
		vmap_buf_str(b, " on average, large ones every ");
		vmap_buf_bytes(b, large_mean);
		vmap_buf_str(b, " (~ = estimate); every served mmap");
	} else {
		vmap_buf_str(b, " on average (~ = estimate); every large block and served mmap");
	}
	if (z->in_signal)
		vmap_buf_str(b, "\n    (in a signal handler: addresses only, as object+offset for addr2line)");
	for (int t = 0; t < NTABLES; t++) {
		vmap_buf_str(b, "\n    ");
		vmap_buf_str(b, table_title[t]);
		if (!cnt[t])
			vmap_buf_str(b, ": none");
		for (unsigned i = 0; i < cnt[t]; i++) {
			uint32_t id = ids[t][i];
			/* A site already shown with its stack is referred to. */
			int seen_t = -1;
			unsigned seen_i = 0;
			for (int u = 0; u < t && seen_t < 0; u++)
				for (unsigned j = 0; j < cnt[u]; j++)
					if (ids[u][j] == id) {
						seen_t = u;
						seen_i = j;
						break;
					}
			vmap_buf_str(b, "\n      ");
			vmap_buf_u64w(b, i + 1, 3);
			vmap_buf_str(b, ". ");
			site_text(b, z, &sites[id], seen_t < 0);
			if (seen_t >= 0) {
				vmap_buf_str(b, "\n            stack: ");
				vmap_buf_str(b, seen_t == BY_BYTES ? "by bytes" : "by number");
				vmap_buf_str(b, " #");
				vmap_buf_u64(b, seen_i + 1);
			}
		}
	}
	if (n + 1 >= SITE_MAX)
		vmap_buf_str(b, "\n    (the site table filled up: later stacks are counted together)");
	vmap_buf_str(b, "\n    (function+offset from the objects' symbol tables; no file:line,"
			" C++ names not demangled)");
}

void vmap_profile_report(struct vmap_buf *b, int format)
{
	if (vmap_profile_on && !vmap_profile_tls.busy)
		batch_flush(&vmap_profile_batch); /* this thread's pending figures */
	struct symbolizer z;
	z.n = 0;
	z.in_signal = false;
	report(b, format, &z);
	symbolizer_done(&z);
}

void vmap_profile_report_in_signal(struct vmap_buf *b, int format)
{
	struct symbolizer z;
	z.n = 0;
	z.in_signal = true;
	report(b, format, &z);
}
