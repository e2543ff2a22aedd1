/*
 * profile.c — allocation sites (VMAPALLOC_PROFILE=1), aggregated by call stack.
 *
 * What is recorded: every program mmap() served from the arena, exactly;
 * small blocks, and large blocks (range allocator), by geometric sampling
 * (tcmalloc, jemalloc): each thread counts down an exponentially distributed
 * number of bytes (mean PROFILE_SAMPLE for small blocks, PROFILE_LARGE_SAMPLE
 * for large ones, two countdowns) and the allocation that crosses zero
 * is sampled.  PROFILE_LARGE_SAMPLE=0 records every large block, exactly
 * (the stack cache keeps a record a fraction of an unwind, but recording all
 * of them is still a visible share of a large malloc/free).  A block of s bytes is then sampled with probability
 * p = 1 - exp(-s / SAMPLE), so it stands for 1/p blocks and s/p bytes: the
 * figures of small sites are unbiased estimates.
 *
 * Backtraces: libunwind's unw_backtrace() (its x86_64 fast path caches frame
 * descriptions per thread), or, without libunwind,
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
#include "profile_impl.h"

uint64_t mean_bytes;
uint64_t large_mean;

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

VMAP_START_TEXT bool vmap_profile_init(void)
{
	if (!vmap_opt.profile || vmap_profile_on)
		return false;
	vmap_os_read_file("/proc/self/cmdline", program, sizeof program);
	sites = vmap_prof_map_zeroed(SITE_MAX * sizeof *sites);
	site_index = vmap_prof_map_zeroed(SITE_INDEX * sizeof *site_index);
	if (!sites || !site_index) {
		vmap_say("VMAPALLOC_PROFILE: could not map the profile tables; no profile", NULL, NULL);
		return false;
	}
	mean_bytes = vmap_opt.profile_sample ? vmap_opt.profile_sample : 1;
	large_mean = vmap_opt.profile_large_sample;
	vmap_prof_fn_resolve();
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
	 * sampling distance (twelve, with a division each, cost a sample
	 * several times more). */
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

void vmap_profile_thread_exit(void)
{
	if (vmap_profile_on)
		vmap_prof_batch_flush(&vmap_profile_batch);
}

/* ---- arena blocks: the site in the page-table entry --------------------- */

/*
 * A live large block or served mapping has a page-table entry at its head
 * whose link words the range allocator leaves alone while the block is live
 * (pte.h): the profile keeps the block's record there, so that recording and
 * forgetting it take no table, hash or lock:
 *
 *   prof_site  = VMAP_PTE_SITE | site id   (bit 63: a link is an arena address or 0)
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
	if (!(w & VMAP_PTE_SITE))
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
	vmap_prof_site_delta((uint32_t)w, 0, 0, -cut, count, 0);
	t->busy = 0;
}

/* mremap grew the served mapping at head in place by bytes. */
static void vmap_profile_mmap_grow(uintptr_t head, size_t bytes)
{
	struct vmap_pte *h = pte_at(head);
	uintptr_t w = __atomic_load_n(&h->prof_site, __ATOMIC_RELAXED);
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!(w & VMAP_PTE_SITE) || t->busy)
		return;
	h->prof_bytes += bytes;
	t->busy = 1;
	vmap_prof_site_delta((uint32_t)w, (int64_t)bytes, 0, (int64_t)bytes, 0, 0);
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
	if (!(w & VMAP_PTE_SITE) || t->busy) {
		__atomic_store_n(&n->prof_site, 0, __ATOMIC_RELAXED);
		return;
	}
	pte_note(n, (uint32_t)w, (int64_t)len, COUNT_ONE);
	t->busy = 1;
	vmap_prof_site_delta((uint32_t)w, (int64_t)added, 0, (int64_t)len, COUNT_ONE, 0);
	t->busy = 0;
}

/* ---- recording --------------------------------------------------------- */

/* The block of size bytes crossed this thread's countdown: false if it is
 * the thread's first block of the kind and the first distance, drawn now,
 * does not end in it; else the next distance, and the block's weights. */
bool vmap_prof_sampled(struct vmap_profile_tls *t, int64_t *countdown, uint8_t *drawn, uint64_t mean,
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

struct prof_hist vmap_prof_hist[3][HIST_BUCKETS];

/* Bucket b holds sizes in (2^(b-1), 2^b]: 0 and 1 in bucket 0. */
static unsigned hist_bucket(size_t size)
{
	unsigned b = size > 1 ? 64 - (unsigned)__builtin_clzll((unsigned long long)(size - 1)) : 0;
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

void vmap_profile_record(void *p, size_t size, int kind, uintptr_t ra, uintptr_t cfa)
{
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!p || !vmap_profile_on)
		return;
	int64_t bytes = (int64_t)size, count = COUNT_ONE;
	if (kind == VMAP_PROFILE_SMALL) {
		if (!vmap_prof_sampled(t, &t->countdown, &t->small_drawn, mean_bytes, size, &bytes, &count))
			return;
	} else if (kind == VMAP_PROFILE_LARGE) {
		if (!large_mean)
			t->large_countdown = 0; /* every block: the inline test never skips one */
		else if (!vmap_prof_sampled(t, &t->large_countdown, &t->large_drawn, large_mean, size, &bytes,
				  &count))
			return;
	}
	if (t->busy) {
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
		return;
	}
	t->busy = 1;
	struct prof_hist *h = &vmap_prof_hist[kind < 3 ? kind : 0][hist_bucket(size)];
	__atomic_fetch_add(&h->bytes, bytes, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->count, count, __ATOMIC_RELAXED);
	uint32_t id;
	if (!vmap_prof_scache_hit(ra, cfa, kind, &id)) {
		uintptr_t frames[DEPTH];
		unsigned n = vmap_prof_capture(frames, ra);
		id = vmap_prof_site_get(frames, n, kind);
		vmap_prof_scache_note(ra, cfa, id, frames, n);
	}
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	if (r && !vmap_slab_of(r, (uintptr_t)p)) {
		pte_note(vmap_pte_of(r, (uintptr_t)p), id, bytes, count);
		vmap_prof_site_delta(id, bytes, count, bytes, count, 1);
	} else if (vmap_prof_live_insert((uintptr_t)p, id, bytes, count)) {
		vmap_prof_site_delta(id, bytes, count, bytes, count, 1);
	} else { /* its free could not be seen: count it, but not as live */
		vmap_prof_site_delta(id, bytes, count, 0, 0, 1);
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

