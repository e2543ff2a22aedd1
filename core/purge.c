/*
 * purge.c — the mechanism of the lazy, batched return of cached areas to the
 * system: what to take, and how to give it back.  When a purge runs and how
 * much it takes is purge_policy.c's: the pressure limit, fresh memory paying
 * for itself, the age purge; here also malloc_trim()/vmapalloc_purge() (all
 * of it) and fork (the cache goes first: fork.c says why).
 *
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
 * Called by: purge_policy.c, alloc.c (malloc_trim), fork.c.
 */
#include <sys/mman.h>
#include <sys/uio.h>

#include "cache.h"
#include "counter.h"
#include "options.h"
#include "purge.h"
#include "range_impl.h"

#define PURGE_MAX_VICTIMS 1024 /* also UIO_MAXIOV: one process_madvise per round */
#define PURGE_ROUNDS 4         /* bound on the work one allocating thread does */

static struct vmap_lock vmap_purge_lock = VMAP_LOCK_INIT;
static struct vmap_victim victims[PURGE_MAX_VICTIMS];
static struct iovec iov[PURGE_MAX_VICTIMS];
uint64_t vmap_purge_next_ns;
static int vmap_batch_state; /* 0 unknown, 1 works, -1 unsupported */

/*
 * Detaches victims from every shard (amount: the cache to get under for a
 * pressure purge, the bytes to take for a fresh one).  Resident free runs go first, largest
 * first: they are the coldest and the biggest memory per system call.  Then
 * the exact-size pools: a quarter of each, oldest first, under pressure;
 * everything older than the delay by age; all of it for malloc_trim.
 */
static unsigned collect(enum vmap_purge_mode mode, uint64_t older_than, uint64_t amount)
{
	unsigned n = 0;
	uint64_t want = UINT64_MAX;
	if (mode == PURGE_PRESSURE) {
		uint64_t cached = vmap_gauge(VMAP_STAT_cached_bytes);
		want = cached > amount ? cached - amount : 0;
	} else if (mode == PURGE_FRESH) {
		want = amount;
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
		bool gave = state != VMAP_RUN_ADVISED && vmap_chunks_give_back_locked(s, run);
		/* Whole 2 MiB spans the victim completes lose their page tables
		 * (vm.c): fork would copy them, empty.  Not when chunks went back:
		 * that mapped them afresh already, and the run is not read again
		 * (its first chunk may be lent to the kernel already, and its
		 * address no longer the arena's); nor when the victim joined two
		 * guarded runs: that mapped the run afresh PROT_NONE, and a span
		 * mapped writable would take the faults from pages the program
		 * unmapped. */
		if (!gave && vmap_tag_run_state(merged) == VMAP_RUN_ZERO)
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

/* Whether a is still the head of a free run of s: a run listed before an
 * earlier give-back of its row may have gone back with its chunk, which
 * another shard may have claimed since, or another thread lent to the
 * kernel (then a is not the arena's: vmap_region_of says NULL).  A chunk s
 * owns stays s's while its lock is held.  Shard lock held. */
static bool still_a_run(struct vmap_shard *s, uintptr_t a)
{
	struct vmap_region *r = vmap_region_of(a);
	if (!r)
		return false;
	uint16_t o = __atomic_load_n(&r->chunk_owner[(a - r->base) >> VMAP_CHUNK_SHIFT],
				     __ATOMIC_ACQUIRE);
	uint64_t t = vmap_pte_of(r, a)->tag;
	return (o & 0x7fffu) == s->id + 1 && vmap_tag_state(t) == VMAP_ST_FREE &&
	       vmap_tag_shard(t) == s->id;
}

/*
 * Whole free chunks in s's zero and guarded runs go back to the arena
 * (mapped afresh: resident remnants, guard markers and page-table slices
 * go with them).  A purge gives back the chunks its victims complete; pieces
 * the program unmapped, which are never victims, can free a whole chunk
 * without one, and kept it from the other shards and its table slice
 * resident until the process ended.  The runs are listed first, and a
 * give-back takes the whole row of runs around one (arena.c): once one
 * has gone back, the rest of the list is checked before use.  Shard lock
 * held.
 */
static void give_back_whole(struct vmap_shard *s)
{
	enum { MAX = 256 };
	uintptr_t runs[MAX];
	unsigned n = 0;
	/* A row of at most three runs covers a chunk (arena.c): one of them
	 * has a third of it at least, two bins below the chunk's. */
	unsigned from = (unsigned)__builtin_ctzll(VMAP_CHUNK_PAGES) - 2;
	for (unsigned l = 0; l < 4; l++) {
		unsigned li = vmap_run_list(l & 1, l < 2 ? VMAP_RUN_ZERO : VMAP_RUN_GUARDED);
		for (unsigned b = from; b < VMAP_FREE_BINS && n < MAX; b++)
			for (uintptr_t a = s->free_bin[li][b]; a && n < MAX;
			     a = vmap_pte_of(vmap_region_of(a), a)->next)
				runs[n++] = a;
	}
	bool gave = false;
	for (unsigned k = 0; k < n; k++)
		if (!gave || still_a_run(s, runs[k]))
			gave |= vmap_chunks_give_back_locked(s, runs[k]);
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

size_t vmap_purge_run(enum vmap_purge_mode mode, uint64_t now, uint64_t amount)
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
		unsigned n = collect(mode, older_than, amount);
		if (!n)
			break;
		sort_victims(victims, n);
		syscalls += release(n, advice);
		reinsert(n, advice);
		for (unsigned i = 0; i < n; i++)
			bytes += (size_t)victims[i].pages << VMAP_PAGE_SHIFT;
		if (mode == PURGE_PRESSURE && vmap_gauge(VMAP_STAT_cached_bytes) <= amount)
			break;
		if ((mode == PURGE_AGE && n < PURGE_MAX_VICTIMS) || mode == PURGE_FRESH)
			break;
	}
	/* A fresh purge takes a few batches' worth and leaves the rest of the
	 * cache to age: pushing the age purge back at each one kept it from
	 * ever running while a program grew (and what it had freed long
	 * before stayed resident). */
	if (delay && mode != PURGE_FRESH)
		__atomic_store_n(&vmap_purge_next_ns, now + delay, __ATOMIC_RELAXED);
	uint64_t spent = vmap_os_now_ns() - now;
	vmap_unlock(&vmap_purge_lock, VMAP_RANK_PURGE);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purges, 1);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purged_bytes, (int64_t)bytes);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purge_syscalls, syscalls);
	vmap_stat_add_cpu(cpu, VMAP_STAT_purge_ns, (int64_t)spent);
	return bytes;
}

void vmap_range_purge_for_fork(void)
{
	/* The forking thread's own cache too: the other threads' are theirs. */
	vmap_cache_drain_self(0);
	if (vmap_shards && vmap_gauge(VMAP_STAT_cached_bytes))
		vmap_purge_run(PURGE_FORK, vmap_os_now_ns(), 0);
}

size_t vmap_range_trim(void)
{
	if (!vmap_shards)
		return 0;
	size_t bytes = vmap_purge_run(PURGE_ALL, vmap_os_now_ns(), 0);
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
