/*
 * purge.c — lazy, batched return of cached areas to the system.
 *
 * A free does not give memory back: the area waits, resident, in its shard's
 * pool, because reusing it costs nothing while refaulting it costs a fault per
 * page.  A purge runs when
 *   - the cached bytes pass the pressure limit, vmap_lazy_limit: resident
 *     free runs (oldest first) and a quarter of every pool go, for at most
 *     PURGE_ROUNDS rounds or until the cache is under 3/4 of the limit.  The
 *     limit starts at vmap_lazy_max (fls(ncpu) x 4 MiB: small, so that a
 *     long-running program's resident memory stays near its live heap) and
 *     adapts: pressure again within REFAULT_WINDOW_NS of the last pressure
 *     purge means the program refaults what was just purged (a loop freeing
 *     and allocating one big block), so the limit doubles instead (or jumps
 *     to what is cached), up to the peak of large bytes in use plus
 *     vmap_lazy_max; a delay without pressure halves it back.  Whatever the
 *     limit, a cache no larger than the large bytes in use is not pressure
 *     (pressure_limit).  Served mmaps do not count there: CPython's arenas
 *     are tens of MiB of them, and as a floor they kept as much cached.  A
 *     VMAPALLOC_LAZY_MAX set by the user is a hard cap: no growth, no
 *     floor.  Age still returns whatever waits longer than the delay;
 *   - or the process forks: the cache goes first (fork.c says why);
 *   - or cached areas have waited longer than VMAPALLOC_PURGE_DELAY_MS: those
 *     (and only those) are released, checked at most once per delay;
 *   - or malloc_trim()/vmapalloc_purge() asks for everything.
 * Victims are detached under each shard's lock (tag CACHED -> PURGING), then,
 * with no lock held, sorted by address, merged into contiguous runs (areas
 * carry their guard page, so neighbours are contiguous) and released with one
 * process_madvise(PIDFD_SELF, iov[], MADV_DONTNEED) per 1024 runs where the
 * kernel supports it, one madvise() per run otherwise.  Finally each victim is
 * merged into its shard's free runs (known zero after MADV_DONTNEED), and the
 * whole 2 MiB spans of its zero run that it completes are mapped afresh under
 * the shard lock, their page tables and records dropped (vm.c).
 *
 * Owns: the purge lock (rank PURGE; trylock, so at most one purger and nobody
 * waits for it except malloc_trim and fork), the victim and iovec buffers it
 * protects, the batch-support flag.
 *
 * Called by: large.c (free path, arena exhaustion), alloc.c (malloc_trim).
 */
#include <sys/mman.h>
#include <sys/uio.h>

#include "cache.h"
#include "counter.h"
#include "options.h"
#include "range_impl.h"

#define PURGE_MAX_VICTIMS 1024 /* also UIO_MAXIOV: one process_madvise per round */
#define REFAULT_WINDOW_NS (50 * 1000000ull)
#define PURGE_ROUNDS 4         /* bound on the work one allocating thread does */


static struct vmap_lock vmap_purge_lock = VMAP_LOCK_INIT;
static struct vmap_victim victims[PURGE_MAX_VICTIMS];
static struct iovec iov[PURGE_MAX_VICTIMS];
static uint64_t vmap_purge_next_ns;
static int vmap_batch_state; /* 0 unknown, 1 works, -1 unsupported */
uint64_t vmap_lazy_limit;         /* the pressure limit now (see above) */
/* Areas carved from fresh memory (large.c): exact where the pool_misses
 * counter, per CPU, is read only approximately between folds. */
uint64_t vmap_fresh_carves;
static uint64_t vmap_pressure_ns; /* when the last pressure purge ran */

enum purge_mode { PURGE_PRESSURE, PURGE_FRESH, PURGE_AGE, PURGE_ALL, PURGE_FORK };

/* Fresh memory carved since the cache last paid for it (vmap_purge_fresh). */
static uint64_t vmap_fresh_debt;

/* The approximate read of a gauge, clamped at 0.  In per-CPU mode the base
 * alone can be below zero (one CPU's slot holds the frees, another's the
 * allocations); cast to unsigned, -1 MiB of cached bytes looked like 16 EiB,
 * over every limit: a pressure purge on every free. */
static uint64_t approx(enum vmap_stat s)
{
	int64_t v = vmap_stat_read_approx(s);
	return v > 0 ? (uint64_t)v : 0;
}

static uint64_t big_free_max; /* the largest area of 2 MiB or more freed since the last age purge */

void vmap_purge_note_big_free(uint64_t bytes)
{
	if (bytes > __atomic_load_n(&big_free_max, __ATOMIC_RELAXED))
		__atomic_store_n(&big_free_max, bytes, __ATOMIC_RELAXED);
}

/*
 * The pressure limit in effect: the adaptive limit, or the bytes the program
 * has in use in large blocks when that is more (served mmaps not: see above).  A cache
 * smaller than the live heap is what a program that frees and allocates at
 * random keeps needing: the fragments between its live blocks.  Purging it
 * only made the next allocations fault it in again.  Cached bytes stay bounded:
 * under the larger of the limit and the bytes in use, so RSS stays within
 * twice the live heap plus the limit, as the adaptive limit allowed already.
 * A VMAPALLOC_LAZY_MAX set by the user is a hard cap: no floor.
 *
 * A limit raised for a refaulting loop on big blocks (2 MiB or more) keeps
 * what the loop needs: the biggest block it frees and allocates again, on
 * top of the heap in use.  When the program frees most of its heap (a run
 * winding down), the rest is not kept for it: capped at twice the bytes in
 * use plus vmap_lazy_max plus the largest area freed since the last age
 * purge.  Not when no big area was freed: threads handing pooled blocks to
 * each other keep little in use and refault whatever the cap would purge (a
 * producer/consumer benchmark of 64 KiB..1 MiB blocks ran at 0.43x).
 */
static uint64_t pressure_limit(void)
{
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	if (vmap_opt.lazy_max)
		return limit;
	/* This thread's unfolded delta too (its frees just before this call):
	 * other threads' are at most a few dozen operations each. */
	int64_t large = vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
			vmap_local.n[VMAP_STAT_large_bytes_in_use];
	uint64_t in_use = large > 0 ? (uint64_t)large : 0;
	uint64_t big = __atomic_load_n(&big_free_max, __ATOMIC_RELAXED);
	uint64_t cap = 2 * in_use + vmap_lazy_max + big;
	if (big && limit > cap)
		limit = cap;
	return in_use > limit ? in_use : limit;
}

/*
 * Detaches victims from every shard.  Resident free runs go first, largest
 * first: they are the coldest and the biggest memory per system call.  Then
 * the exact-size pools: a quarter of each, oldest first, under pressure;
 * everything older than the delay by age; all of it for malloc_trim.
 */
static unsigned collect(enum purge_mode mode, uint64_t older_than, uint64_t fresh_want)
{
	unsigned n = 0;
	uint64_t want = UINT64_MAX;
	if (mode == PURGE_PRESSURE) {
		uint64_t cached = approx(VMAP_STAT_cached_bytes);
		uint64_t target = pressure_limit() / 4 * 3;
		want = cached > target ? cached - target : 0;
	} else if (mode == PURGE_FRESH) {
		want = fresh_want;
	}
	uint64_t taken = 0;
	for (unsigned i = 0; i < vmap_nshards && n < PURGE_MAX_VICTIMS && taken < want; i++) {
		struct vmap_shard *s = &vmap_shards[i];
		if (!__atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED))
			continue;
		vmap_shard_lock(s);
		uint64_t before = taken;
		n += vmap_dirty_take_locked(s, mode == PURGE_AGE ? older_than : 0, want - taken,
					    victims + n, PURGE_MAX_VICTIMS - n, &taken, true);
		for (unsigned c = VMAP_NCLASSES; c-- > 0 && n < PURGE_MAX_VICTIMS && taken < want;) {
			struct vmap_pool *p = &s->pool[c];
			if (!p->count)
				continue;
			uint32_t take = mode == PURGE_PRESSURE ? (p->count + 3) / 4 : p->count;
			while (take-- > 0 && p->tail && n < PURGE_MAX_VICTIMS) {
				uintptr_t a = p->tail;
				struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
				if (mode == PURGE_AGE && e->stamp > older_than)
					break; /* the rest of this pool is younger */
				vmap_pool_remove_locked(s, c, a);
				uint64_t t = e->tag, pages = vmap_tag_pages(t);
				uint64_t pt = vmap_tag_make(VMAP_ST_PURGING, s->id, pages, t & VMAP_TAG_BIG);
				/* Atomic: a free next to it reads it without the lock. */
				__atomic_store_n(&e->tag, pt, __ATOMIC_RELAXED);
				victims[n++] = (struct vmap_victim){a, pages, pt};
				taken += pages << VMAP_PAGE_SHIFT;
			}
		}
		vmap_shard_unlock(s);
		vmap_stat_add_cpu(i, VMAP_STAT_cached_bytes, -(int64_t)(taken - before));
	}
	return n;
}

static void sort_victims(struct vmap_victim *v, unsigned n)
{
	/* Shell sort (Ciura gaps): n <= 1024, no recursion, no allocation. */
	static const unsigned gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
	for (unsigned g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
		unsigned gap = gaps[g];
		for (unsigned i = gap; i < n; i++) {
			struct vmap_victim x = v[i];
			unsigned j = i;
			for (; j >= gap && v[j - gap].a > x.a; j -= gap)
				v[j] = v[j - gap];
			v[j] = x;
		}
	}
}

/*
 * Releases the victims' pages; returns the number of system calls made.
 * Sets ok[i] for each victim whose range the kernel accepted: a failed
 * madvise (EINVAL on mlocked memory, EAGAIN, ENOMEM at the VMA limit) leaves
 * its pages as they were, so they must not be declared zero.
 */
static bool run_ok[PURGE_MAX_VICTIMS];
static bool victim_ok[PURGE_MAX_VICTIMS];

static bool batch_unsupported(long err)
{
	/* ENOSYS: no process_madvise; EINVAL: no PIDFD_SELF or no DONTNEED for
	 * it; EPERM/ESRCH/EBADF: pidfd not usable.  Anything else is passing. */
	return err == -38 || err == -22 || err == -1 || err == -3 || err == -9;
}

static unsigned release(unsigned n, int advice)
{
	unsigned runs = 0, calls = 0;
	size_t total = 0;
	for (unsigned i = 0; i < n; i++) {
		size_t len = (size_t)victims[i].pages << VMAP_PAGE_SHIFT;
		if (victims[i].tag & VMAP_TAG_PROTECTED) {
			/* Lazily unmapped by the program (PROT_NONE, resident): the
			 * pages go, the range must keep faulting. */
			void *a = (void *)victims[i].a;
			if (vmap_guard_none(victims[i].a, len, true) == 0) {
				/* The same VMA, its pages and page tables gone. */
			} else if (vmap_guard_markers()) {
				/* A run left guarded must read zero once unguarded:
				 * when a call fails (ENOMEM), a fresh mapping drops
				 * the pages (the range then does not fault). */
				if (vmap_os_madvise(a, len, MADV_GUARD_INSTALL) ||
				    vmap_os_mprotect(a, len, PROT_READ | PROT_WRITE))
					vmap_os_map_fresh(a, len);
			} else if (vmap_os_madvise(a, len, MADV_DONTNEED)) {
				vmap_os_map_fresh(a, len); /* zero, then faulting again: */
				vmap_os_mprotect(a, len, PROT_NONE);
			}
			calls += 2;
			continue;
		}
		if (runs && (uintptr_t)iov[runs - 1].iov_base + iov[runs - 1].iov_len == victims[i].a)
			iov[runs - 1].iov_len += len;
		else
			iov[runs++] = (struct iovec){(void *)victims[i].a, len};
		total += len;
	}
	if (vmap_range_guard_on()) {
		/* Pooled areas carry a guard marker, which survives MADV_DONTNEED:
		 * remove it first, or the page would fault when reused. */
		for (unsigned i = 0; i < runs; i++)
			vmap_os_madvise(iov[i].iov_base, iov[i].iov_len, MADV_GUARD_REMOVE);
		calls += runs;
	}
	bool done = false;
	if (advice == MADV_DONTNEED && vmap_moves_left()) {
		/* Moved areas may have left VMAs of their own in these runs
		 * (move.c): a fresh mapping drops the pages as DONTNEED would, and
		 * merges them back into the arena's VMA.  One call per run. */
		for (unsigned i = 0; i < runs; i++) {
			run_ok[i] = vmap_map_fresh_arena((uintptr_t)iov[i].iov_base, iov[i].iov_len) == 0;
			calls++;
		}
		done = true;
	}
	if (!done && vmap_batch_state >= 0 && runs > 1) {
		long r = vmap_os_madvise_batch(iov, runs, advice);
		calls++;
		if (r >= 0 && (size_t)r == total) {
			vmap_batch_state = 1;
			done = true;
			for (unsigned i = 0; i < runs; i++)
				run_ok[i] = true;
		} else if (r < 0 && vmap_batch_state == 0 && batch_unsupported(r)) {
			vmap_batch_state = -1; /* this kernel cannot: one madvise per run from now on */
		}
	}
	if (!done) {
		for (unsigned i = 0; i < runs; i++) {
			run_ok[i] = vmap_os_madvise(iov[i].iov_base, iov[i].iov_len, advice) == 0;
			calls++;
		}
	}
	/* Map the runs' results back onto the victims (both in address order). */
	for (unsigned i = 0, ri = 0; i < n; i++) {
		if (victims[i].tag & VMAP_TAG_PROTECTED) {
			victim_ok[i] = true;
			continue;
		}
		while ((uintptr_t)iov[ri].iov_base + iov[ri].iov_len <= victims[i].a)
			ri++;
		victim_ok[i] = run_ok[ri];
	}
	return calls;
}

static void reinsert(unsigned n, int advice)
{
	struct vmap_shard *s = NULL;
	for (unsigned i = 0; i < n; i++) {
		struct vmap_shard *owner = &vmap_shards[vmap_tag_shard(victims[i].tag)];
		if (owner != s) {
			if (s)
				vmap_shard_unlock(s);
			s = owner;
			vmap_shard_lock(s);
		}
		unsigned state = (victims[i].tag & VMAP_TAG_PROTECTED)       ? VMAP_RUN_GUARDED
				 : victim_ok[i] && advice == MADV_DONTNEED ? VMAP_RUN_ZERO
									   : VMAP_RUN_ADVISED;
		uintptr_t run = vmap_free_insert_locked(s, victims[i].a, victims[i].pages, state,
							victims[i].tag & VMAP_TAG_BIG, 0);
		uint64_t merged = vmap_pte_of(vmap_region_of(run), run)->tag;
		/* A chunk purged whole is worth more to every shard than to this
		 * one: after a program frees everything, another CPU may need it
		 *. */
		if (state != VMAP_RUN_ADVISED)
			vmap_chunks_give_back_locked(s, run);
		/* Whole 2 MiB spans the victim completes lose their page tables
		 * (vm.c): fork would copy them, empty.  Not when chunks went back:
		 * that mapped them afresh already. */
		if (state == VMAP_RUN_ZERO && vmap_pte_of(vmap_region_of(run), run)->tag == merged)
			vmap_zero_spans_locked(run, victims[i].a,
					       victims[i].a + (victims[i].pages << VMAP_PAGE_SHIFT));
	}
	if (s)
		vmap_shard_unlock(s);
}

/* DONTNEED for iov[0..n): one process_madvise where the kernel has it, else
 * one madvise per range.  Returns the system calls made. */
static unsigned dontneed_all(unsigned n)
{
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (vmap_batch_state >= 0 && n > 1) {
		long r = vmap_os_madvise_batch(iov, n, MADV_DONTNEED);
		if (r >= 0 && (size_t)r == total)
			return 1;
		if (r < 0 && vmap_batch_state == 0 && batch_unsupported(r))
			vmap_batch_state = -1;
	}
	for (unsigned i = 0; i < n; i++)
		vmap_os_madvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED);
	return n + 1;
}

/*
 * Whole free chunks in s's zero and guarded runs go back to the arena
 * (mapped afresh: resident remnants, guard markers and page-table slices
 * go with them).  A purge gives back the chunks its victims complete; pieces
 * the program unmapped, which are never victims, can free a whole chunk
 * without one, and kept it from the other shards and its table slice
 * resident until the process ended.  Shard lock held.
 */
static void give_back_whole(struct vmap_shard *s)
{
	enum { MAX = 256 };
	uintptr_t runs[MAX];
	unsigned n = 0;
	unsigned from = (unsigned)__builtin_ctzll(VMAP_CHUNK_PAGES); /* the bin of a chunk */
	for (unsigned l = 0; l < 4; l++) {
		unsigned li = vmap_run_list(l & 1, l < 2 ? VMAP_RUN_ZERO : VMAP_RUN_GUARDED);
		for (unsigned b = from; b < VMAP_FREE_BINS && n < MAX; b++)
			for (uintptr_t a = s->free_bin[li][b]; a && n < MAX;
			     a = vmap_pte_of(vmap_region_of(a), a)->next)
				runs[n++] = a;
	}
	for (unsigned k = 0; k < n; k++)
		vmap_chunks_give_back_locked(s, runs[k]);
}

/*
 * Huge-page remnants.  A transparent huge page faulted in by an area
 * or a served mapping covers the whole 2 MiB around the area's end, and so
 * reaches into the free run after it; purging the area, or the program's
 * munmap of the mapping, frees only the area's own range, and the rest stays
 * resident, reading zero, in a zero or guarded run (guard markers survive
 * MADV_DONTNEED).  The trim drops such pages when a whole chunk goes back to the
 * arena, which a chunk that keeps a live block or an unmapped piece of a
 * served mapping never does: stress.c kept 4% of a 5 GiB peak resident
 * after malloc_trim, 0.7% with huge pages off.  So an explicit trim also
 * advises every zero and guarded run DONTNEED: runs cannot be taken out and
 * put back without merging them again, so this is done under the shard's
 * lock, in batches of PURGE_MAX_VICTIMS ranges (the one purge made under a
 * shard lock, and only for malloc_trim).  Where nothing is resident it only
 * walks empty page tables.  Returns the system calls made.
 */
static unsigned sweep_remnants(void)
{
	unsigned calls = 0;
	for (unsigned i = 0; i < vmap_nshards; i++) {
		struct vmap_shard *s = &vmap_shards[i];
		unsigned n = 0;
		vmap_shard_lock(s);
		give_back_whole(s);
		for (unsigned l = 0; l < 4; l++) {
			unsigned li = vmap_run_list(l & 1, l < 2 ? VMAP_RUN_ZERO : VMAP_RUN_GUARDED);
			for (uint64_t mask = s->free_bin_mask[li]; mask; mask &= mask - 1) {
				unsigned b = (unsigned)__builtin_ctzll(mask);
				for (uintptr_t a = s->free_bin[li][b]; a;) {
					struct vmap_region *r = vmap_region_of(a);
					struct vmap_pte *e = vmap_pte_of(r, a);
					uint64_t pages = vmap_tag_pages(e->tag);
					iov[n++] = (struct iovec){(void *)a, (size_t)pages << VMAP_PAGE_SHIFT};
					/* The run's own page-table entries but its head and
					 * tail are unused (tags 0, stale links and stamps):
					 * whole pages of them go too. */
					uintptr_t lo = ((uintptr_t)(e + 1) + VMAP_PAGE - 1) & ~(uintptr_t)(VMAP_PAGE - 1);
					uintptr_t hi = (uintptr_t)(e + pages - 1) & ~(uintptr_t)(VMAP_PAGE - 1);
					if (pages > 2 && hi > lo && n < PURGE_MAX_VICTIMS)
						iov[n++] = (struct iovec){(void *)lo, hi - lo};
					if (n >= PURGE_MAX_VICTIMS - 1) {
						calls += dontneed_all(n);
						n = 0;
					}
					a = e->next;
				}
			}
		}
		if (n)
			calls += dontneed_all(n);
		vmap_shard_unlock(s);
	}
	return calls;
}

static size_t purge(enum purge_mode mode, uint64_t now, uint64_t want)
{
	if (mode == PURGE_ALL || mode == PURGE_FORK)
		vmap_lock(&vmap_purge_lock, VMAP_RANK_PURGE);
	else if (!vmap_trylock(&vmap_purge_lock, VMAP_RANK_PURGE))
		return 0; /* someone else is purging: carry on */
	unsigned cpu = vmap_os_cpu();
	vmap_stat_add_cpu(cpu, VMAP_STAT_shared_lock_acquisitions, 1);
	uint64_t delay = vmap_opt.purge_delay_ms * 1000000ull;
	uint64_t older_than = now > delay ? now - delay : 0;
	int advice = vmap_opt.purge_advice == VMAP_ADVICE_FREE ? MADV_FREE : MADV_DONTNEED;
	size_t bytes = 0;
	unsigned syscalls = 0;
	for (unsigned round = 0; mode >= PURGE_ALL || round < PURGE_ROUNDS; round++) {
		unsigned n = collect(mode, older_than, want);
		if (!n)
			break;
		sort_victims(victims, n);
		syscalls += release(n, advice);
		reinsert(n, advice);
		for (unsigned i = 0; i < n; i++)
			bytes += (size_t)victims[i].pages << VMAP_PAGE_SHIFT;
		if (mode == PURGE_PRESSURE &&
		    approx(VMAP_STAT_cached_bytes) <= pressure_limit() / 4 * 3)
			break;
		if ((mode == PURGE_AGE && n < PURGE_MAX_VICTIMS) || mode == PURGE_FRESH)
			break;
	}
	if (delay)
		__atomic_store_n(&vmap_purge_next_ns, now + delay, __ATOMIC_RELAXED);
	uint64_t spent = vmap_os_now_ns() - now;
	vmap_unlock(&vmap_purge_lock, VMAP_RANK_PURGE);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purges, 1);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purged_bytes, (int64_t)bytes);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purge_syscalls, syscalls);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purge_ns, (int64_t)spent);
	return bytes;
}

/* After a pressure purge that found nothing to release (what is cached sits
 * in thread caches, out of its reach), wait for the cache to grow by another
 * eighth of the limit before trying again, instead of on every free. */
static int64_t vmap_purge_futile_at = -1;

/* Pressure again within one delay of the last pressure purge: the limit
 * doubles, up to twice the bytes in use (large blocks and served mmaps), and
 * the purge is skipped if the cache now fits.  With PURGE_DELAY_MS=0 (no age
 * purge, so nothing would bring it back down) the limit stays fixed. */
static bool limit_grows(uint64_t cached, uint64_t now)
{
	uint64_t window = vmap_opt.purge_delay_ms * 1000000ull;
	if (window > REFAULT_WINDOW_NS)
		window = REFAULT_WINDOW_NS;
	if (!window || vmap_opt.lazy_max)
		return false; /* a LAZY_MAX the user set is a hard cap */
	uint64_t last = __atomic_load_n(&vmap_pressure_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_pressure_ns, now, __ATOMIC_RELAXED);
	/* Refaulting means fresh memory was carved since the last pressure
	 * purge: a burst of frees alone passes the limit again and again
	 * within the window without refaulting anything. */
	static uint64_t fresh_at_last;
	uint64_t fresh = __atomic_load_n(&vmap_fresh_carves, __ATOMIC_RELAXED);
	uint64_t before = __atomic_exchange_n(&fresh_at_last, fresh, __ATOMIC_RELAXED);
	if (!last || now - last > window || fresh == before)
		return false;
	/* In use: now, or at the peak of large blocks -- a program that frees its
	 * biggest block just before allocating it again is at its low point exactly when the pressure
	 * comes.  Memory cached on the strength of an old peak still goes with
	 * age, and the limit decays once the refaulting stops. */
	uint64_t in_use = approx(VMAP_STAT_large_bytes_in_use);
	int64_t peak = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	if (peak > 0 && (uint64_t)peak > in_use)
		in_use = (uint64_t)peak;
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	uint64_t ceiling = in_use + vmap_lazy_max;
	if (limit >= ceiling)
		return false;
	/* Straight to what the cache holds now, if that is more than twice
	 * the limit: a program that frees one 64 MiB block and allocates it
	 * again should not pay for four doublings. */
	limit = cached > limit * 2 ? cached : limit * 2;
	limit = limit < ceiling ? limit : ceiling;
	__atomic_store_n(&vmap_lazy_limit, limit, __ATOMIC_RELAXED);
	vmap_stat_add_cpu(vmap_os_cpu(), VMAP_STAT_lazy_limit_raised, 1);
	return cached <= pressure_limit();
}

/* A delay without pressure: the limit halves, back towards vmap_lazy_max. */
static void limit_decays(uint64_t now)
{
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	uint64_t last = __atomic_load_n(&vmap_pressure_ns, __ATOMIC_RELAXED);
	if (limit > vmap_lazy_max && now - last > vmap_opt.purge_delay_ms * 1000000ull)
		__atomic_store_n(&vmap_lazy_limit,
				 limit / 2 > vmap_lazy_max ? limit / 2 : vmap_lazy_max,
				 __ATOMIC_RELAXED);
}

/*
 * The age purge, at most once per delay: what waited longer than the delay
 * goes.  First the idle pass of the thread caches (cache.c), whose idle
 * areas are stamped old and so go in the same purge: the calling thread's
 * own cache, or from the purger thread every thread's.  Memory cached only
 * in thread caches counts: a thread that freed large blocks and then makes
 * only small calls holds them there.
 */
static void age_purge(uint64_t now, uint64_t cached)
{
	uint64_t next = __atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED);
	if (!vmap_opt.purge_delay_ms || now < next ||
	    (!cached && !approx(VMAP_STAT_thread_cached_bytes)))
		return;
	if (next == 0) {
		/* First time: nothing can be old yet; look again after one delay. */
		__atomic_store_n(&vmap_purge_next_ns, now + vmap_opt.purge_delay_ms * 1000000ull,
				 __ATOMIC_RELAXED);
		return;
	}
	limit_decays(now);
	__atomic_store_n(&big_free_max, 0, __ATOMIC_RELAXED);
	vmap_cache_idle_pass(now, false);
	purge(PURGE_AGE, now, 0);
}

/* The pressure purge if the cache is over its limit: true if it was. */
static bool pressure_check(uint64_t now, uint64_t cached)
{
	/* One compare in the common case: the raised limit, or the lowest a cap
	 * can make it once big areas were freed (pressure_limit). */
	uint64_t limit = __atomic_load_n(&big_free_max, __ATOMIC_RELAXED)
				 ? vmap_lazy_max
				 : __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	if (cached > limit && cached > (limit = pressure_limit())) {
		int64_t futile = __atomic_load_n(&vmap_purge_futile_at, __ATOMIC_RELAXED);
		if (futile >= 0 && (int64_t)cached < futile + (int64_t)(limit / 8))
			return true;
		if (limit_grows(cached, now))
			return true;
		size_t released = purge(PURGE_PRESSURE, now, 0);
		__atomic_store_n(&vmap_purge_futile_at, released ? -1 : (int64_t)cached, __ATOMIC_RELAXED);
		return true;
	}
	if (__atomic_load_n(&vmap_purge_futile_at, __ATOMIC_RELAXED) >= 0)
		__atomic_store_n(&vmap_purge_futile_at, -1, __ATOMIC_RELAXED);
	return false;
}

void vmap_purge_maybe(uint64_t now)
{
	uint64_t cached = approx(VMAP_STAT_cached_bytes);
	if (!pressure_check(now, cached))
		age_purge(now, cached);
}

/*
 * Fresh memory pays for itself out of the cache.  Pages carved from the zero
 * runs fault in, while the areas cached did not fit the request: kept
 * resident beside the new pages, they are what makes resident memory grow
 * past the live heap.  So every fresh page carved releases one cached page,
 * the oldest first, in batches of FRESH_BATCH, of what is cached past the
 * large bytes in use (and FRESH_FLOOR): resident memory grows with the
 * program's heap and not with what the cache holds.  A program whose blocks
 * fit the cache carves nothing fresh and keeps it all (the pressure limit and
 * the age purge bound it).  The calling thread's own cache is drained into
 * the pools first, where carves reuse it and the purge reaches it; other
 * threads' caches are out of reach (bounded by VMAPALLOC_CACHE_BYTES each,
 * and drained when idle).
 *
 * The floor of the bytes in use is for the fragments of a heap of random
 * sizes, which its next requests reuse.  A fresh area at least as large as
 * everything cached (thread caches included) and twice the largest cached
 * area is not such a request: it pays at once for the whole cache, down to
 * FRESH_FLOOR (never more than the carve faults in), unless the pressure
 * limit was raised (purged memory was being refaulted).
 *
 * Cost: one madvise per batch, against FRESH_BATCH / 4 KiB page faults of
 * about a microsecond each that the carve already pays.
 */
#define FRESH_BATCH (256u << 10)
#define FRESH_FLOOR (vmap_lazy_max / 32)

static bool fresh_pays_in_full(uint64_t bytes)
{
	if (bytes < FRESH_BATCH || vmap_opt.lazy_max ||
	    __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED) > vmap_lazy_max)
		return false;
	uint64_t cached = approx(VMAP_STAT_cached_bytes);
	if (bytes < cached + approx(VMAP_STAT_thread_cached_bytes) ||
	    bytes < vmap_cached_area_bound() << (VMAP_PAGE_SHIFT + 1))
		return false;
	vmap_cache_drain_self(vmap_os_now_ns());
	cached = approx(VMAP_STAT_cached_bytes);
	if (cached > FRESH_FLOOR)
		purge(PURGE_FRESH, vmap_os_now_ns(), cached - FRESH_FLOOR);
	return true;
}

void vmap_purge_fresh(uint64_t bytes)
{
	if (fresh_pays_in_full(bytes))
		return;
	if (__atomic_add_fetch(&vmap_fresh_debt, bytes, __ATOMIC_RELAXED) < FRESH_BATCH)
		return;
	uint64_t debt = __atomic_exchange_n(&vmap_fresh_debt, 0, __ATOMIC_RELAXED);
	if (vmap_opt.lazy_max)
		return;
	vmap_cache_drain_self(vmap_os_now_ns());
	int64_t large = vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
			vmap_local.n[VMAP_STAT_large_bytes_in_use];
	/* What is cached up to the heap in use is the fragments a program that
	 * frees and allocates at random keeps reusing (purging it made a
	 * random-size benchmark refault 100 times as often): only the rest
	 * pays. */
	uint64_t keep = large > 0 ? (uint64_t)large : 0;
	keep = keep > FRESH_FLOOR ? keep : FRESH_FLOOR;
	uint64_t cached = approx(VMAP_STAT_cached_bytes);
	if (cached <= keep)
		return;
	uint64_t over = cached - keep;
	purge(PURGE_FRESH, vmap_os_now_ns(), debt < over ? debt : over);
}

void vmap_purge_tick(uint64_t now)
{
	__atomic_store_n(&vmap_cache_clock_ns, now, __ATOMIC_RELAXED);
	if (vmap_opt.purge_delay_ms && now >= __atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED))
		vmap_purge_maybe(now);
}

/*
 * The purger thread's pass, every half delay: the idle pass of every
 * thread's cache, then the age purge each time (not once per delay as on
 * the allocator's calls: the thread costs the program nothing), so that an
 * area goes back between one and one and a half delays after its free.
 */
void vmap_purge_background(uint64_t now)
{
	vmap_cache_idle_pass(now, true);
	uint64_t cached = approx(VMAP_STAT_cached_bytes);
	if (!pressure_check(now, cached) && cached) {
		limit_decays(now);
		purge(PURGE_AGE, now, 0);
	}
	/* The purger thread's own figures (the drained caches' bytes): it
	 * makes no call that would fold them. */
	vmap_counter_flush_local();
}

size_t vmap_range_purge(bool all)
{
	if (!vmap_shards)
		return 0;
	return purge(all ? PURGE_ALL : PURGE_PRESSURE, vmap_os_now_ns(), 0);
}

void vmap_range_purge_for_fork(void)
{
	/* The forking thread's own cache too: the other threads' are theirs. */
	vmap_cache_drain_self(0);
	if (vmap_shards && approx(VMAP_STAT_cached_bytes))
		purge(PURGE_FORK, vmap_os_now_ns(), 0);
}

size_t vmap_range_trim(void)
{
	if (!vmap_shards)
		return 0;
	size_t bytes = purge(PURGE_ALL, vmap_os_now_ns(), 0);
	vmap_lock(&vmap_purge_lock, VMAP_RANK_PURGE);
	unsigned calls = sweep_remnants();
	vmap_unlock(&vmap_purge_lock, VMAP_RANK_PURGE);
	vmap_stat_add_cpu(vmap_os_cpu(), VMAP_STAT_purge_syscalls, calls);
	return bytes;
}

void vmap_purge_register_locks(void)
{
	static const struct vmap_lock_set set = {"purge", VMAP_RANK_PURGE, &vmap_purge_lock, 0, NULL};
	vmap_lock_register(&set);
}
