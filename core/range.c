/*
 * range.c — arena regions, chunks, shards, areas and per-size pools.
 *
 * The user-space analogue of Linux's vmalloc after "one vmap node per CPU"
 * (seed 000): the arena is reserved once; shards (one per CPU) take 64 MiB
 * chunks from it and carve areas out of their own free runs; a freed area goes
 * to its owner shard's pool for its size and is reused while still resident;
 * purge.c hands cold areas back to the system in batches.
 *
 *   arena region (64 GiB, PROT_NONE + NORESERVE, 64 MiB aligned; a chunk is
 *   made RW when a shard claims it: commit_chunks)
 *   +----------+----------+----------+----------+---- ... ----+
 *   | chunk    | chunk    | chunk    | free     |             |
 *   | shard 0  | shard 1  | shard 0  | (global) |             |
 *   | small    | small    | big/THP  |          |             |
 *   +----------+----------+----------+----------+---- ... ----+
 *   inside a chunk:  [area|g][area   |g][ free run ][area|g] ...
 *                     g = guard page: part of the area, never handed out
 *
 * Owns: vmap_regions[] and their page tables and chunk maps, vmap_shards[].
 *
 * Invariants:
 *  - A page-table tag is non-zero only at the head of an area or a free run,
 *    and at the tail of a free run (see range.h).  Interior and freed
 *    addresses therefore fail the O(1) check in free().
 *  - LIVE -> CACHED is a CAS without a lock (so two frees of one block cannot
 *    both win); every other tag change happens under the owner shard's lock.
 *  - An area belongs to the shard that owns its chunk, for its whole life;
 *    free runs merge only with runs of the same shard and kind (small/big),
 *    and of the same state, zero and guarded merging into guarded (F22).
 *  - A chunk goes back to the arena (owner 0, any shard may claim it) only
 *    when one zero or guarded free run covers it whole, after a purge, a
 *    move or at the trim: otherwise a program that frees everything on one
 *    CPU would leave the address space to that CPU's shard alone (F9).
 *  - Areas of 2 MiB and more live in "big" chunks (2 MiB aligned, advised
 *    MADV_HUGEPAGE) so transparent huge pages can back them; small areas never
 *    share a chunk with them, so THP cannot inflate small blocks.
 *  - No shard lock is held across a system call, but in the rare cases
 *    named where they are: a chunk going back to the arena, the trim's
 *    sweep, realloc growing in place into a guarded neighbour.
 *  - Under a finite RLIMIT_AS, a claim of chunks keeps VmSize less the
 *    unclaimed reservation (vmap_unclaimed) within the limit, and a new
 *    region leaves a quarter of the limit outside the arena (as_room).
 *
 * Locks: shard->lock (rank SHARD) protects the shard's pools, bins and the
 * tags of its areas; vmap_global_lock (rank GLOBAL) protects the chunk maps
 * and region list; it is taken only to hand out chunks (once per 64 MiB) and
 * to take whole ones back (under a shard lock: rank SHARD, then GLOBAL).
 *
 * Called by: alloc.c (the facade), purge.c.
 */
#include "range.h"

#include <errno.h>
#include <sys/mman.h>

#include "cache.h"
#include "counter.h"
#include "fmt.h"
#include "options.h"
#include "observe.h"
#include "thread.h"
#include "section.h"


struct vmap_region vmap_regions[VMAP_MAX_REGIONS];
unsigned vmap_nregions;
uintptr_t vmap_span_lo VMAP_HOT, vmap_span_hi VMAP_HOT; /* read by every free */
struct vmap_slab_index vmap_slab0 VMAP_HOT;
static int vmap_guard_markers_state; /* 0 not probed yet, 1 MADV_GUARD_INSTALL works, -1 not */
int vmap_protected_runs; /* lazily unmapped runs (each may split the arena VMA) */
/* VMAs realloc moves may have left: four a move (two each side),
 * counted per chunk too, and taken off when a chunk goes back to the arena
 * mapped afresh (vmap_chunks_give_back_locked); at most vmap_vma_budget() / 2. */
static uint64_t vmap_moves;
static bool vmap_moves_refused; /* the kernel refused MREMAP_DONTUNMAP */
struct vmap_shard *vmap_shards;
unsigned vmap_nshards; /* 0 until the shards are mapped */
uint64_t vmap_lazy_max;
static struct vmap_lock vmap_global_lock = VMAP_LOCK_INIT;
uint64_t vmap_pool_exact;
static size_t vmap_reserve_size;
static size_t vmap_shards_bytes;
/* Arena address space no shard has claimed (global lock): reserved, so in
 * VmSize, but not in use by the program (see as_room). */
static uint64_t vmap_unclaimed;

static void unclaimed_add(unsigned cpu, int64_t d)
{
	vmap_unclaimed += (uint64_t)d;
	vmap_stat_add_cpu(cpu, VMAP_STAT_unclaimed_bytes, d);
}

#define REGION_FLOOR ((size_t)256 << 20)

static inline unsigned log2_floor(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* ---- regions and chunks ------------------------------------------------ */

static int region_add(size_t want, size_t at_least)
{
	if (vmap_nregions >= VMAP_MAX_REGIONS)
		return -ENOMEM;
	size_t size = want;
	void *base;
	for (;;) {
		base = vmap_os_reserve(size, VMAP_CHUNK, PROT_NONE);
		if (!vmap_os_is_err(base))
			break;
		/* Refused (strict overcommit, RLIMIT_AS, valgrind's 64 GiB limit):
		 * halve down to the floor. */
		if (size / 2 < REGION_FLOOR || size / 2 < at_least)
			return vmap_os_err(base);
		size /= 2;
	}
	size_t pages = size >> VMAP_PAGE_SHIFT;
	size_t pt_bytes = (pages * sizeof(struct vmap_pte) + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t nchunks = size >> VMAP_CHUNK_SHIFT;
	/* Chunk owners, then the moves counted per chunk. */
	size_t owner_bytes = (nchunks * (sizeof(uint16_t) + sizeof(uint32_t)) + VMAP_PAGE - 1) &
			     ~(VMAP_PAGE - 1);
	/* Page table read-only but for the chunk owners: a claimed chunk's
	 * slice is made writable at the claim (commit_chunks). */
	void *pt = vmap_os_mmap(NULL, pt_bytes + owner_bytes, PROT_READ,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	int err = vmap_os_is_err(pt) ? vmap_os_err(pt)
				     : -vmap_os_mprotect((char *)pt + pt_bytes, owner_bytes,
							 PROT_READ | PROT_WRITE);
	if (err) {
		if (!vmap_os_is_err(pt))
			vmap_os_munmap(pt, pt_bytes + owner_bytes);
		vmap_os_munmap(base, size);
		return err;
	}
	struct vmap_region *r = &vmap_regions[vmap_nregions];
	r->base = (uintptr_t)base;
	r->size = size;
	r->pt = pt;
	r->chunk_moves = (uint32_t *)((char *)pt + pt_bytes);
	r->chunk_owner = (uint16_t *)(r->chunk_moves + nchunks);
	r->nchunks = nchunks;
	r->pt_bytes = pt_bytes;
	r->owner_bytes = owner_bytes;
	/* Widen the span before the region becomes visible: lookups may then
	 * pass the span test early, never fail it for a live region. */
	uintptr_t lo = vmap_nregions ? vmap_span_lo : r->base, hi = vmap_span_hi;
	if (r->base < lo)
		lo = r->base;
	if (r->base + size > hi)
		hi = r->base + size;
	__atomic_store_n(&vmap_span_hi, hi, __ATOMIC_RELEASE);
	__atomic_store_n(&vmap_span_lo, lo, __ATOMIC_RELEASE);
	__atomic_store_n(&vmap_nregions, vmap_nregions + 1, __ATOMIC_RELEASE);
	unclaimed_add(0, (int64_t)size);
	vmap_stat_add_cpu(0, VMAP_STAT_regions, 1);
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)(size + pt_bytes + owner_bytes));
	return 0;
}


/* VmSize from /proc/self/statm (its first field, in pages). */
static uint64_t proc_vsize(void)
{
	return vmap_os_read_number("/proc/self/statm") << VMAP_PAGE_SHIFT;
}

/*
 * The VMAs vmapalloc may add of its own (reliability.md #28: far below half
 * of vm.max_map_count, whatever the administrator set it to): a quarter of
 * the limit, read once at the first use (three system calls); the kernel's
 * default, 65530, if it cannot be read.  The VMAs realloc moves leave get
 * half of it (8191 at the default: see vmap_moves); the pieces of served mappings the program unmapped and vmapalloc
 * keeps PROT_NONE for reuse (mmap.c), two VMAs each at most, a thirty-second
 * in pieces (511).
 */
uint64_t vmap_vma_budget(void)
{
	static uint64_t budget;
	uint64_t b = __atomic_load_n(&budget, __ATOMIC_RELAXED);
	if (!b) {
		uint64_t max = vmap_os_read_number("/proc/sys/vm/max_map_count");
		b = (max ? max : 65530) / 4;
		b = b ? b : 1;
		__atomic_store_n(&budget, b, __ATOMIC_RELAXED);
	}
	return b;
}

/*
 * RLIMIT_AS as the arena honours it (F1, F2).  The kernel charges the limit
 * against VmSize, which holds the arena's whole reservation, made once; a
 * limit the program lowers later would never be met, since claiming chunks
 * inside a reservation maps nothing.  What the program uses is VmSize minus
 * the reserved space no shard has claimed, and that is what a claim must fit
 * under.  A new region grows VmSize itself: it must fit in the kernel's
 * terms, and leave a quarter of the limit (as_headroom) to what is not the
 * arena — glibc's fallback for requests the arena refuses, thread stacks,
 * the program's other mappings — instead of filling the limit region by
 * region and leaving glibc nothing (F2).  Claims need no headroom: they do
 * not grow VmSize, so they take nothing the kernel could give anyone else.
 *
 * Read at every claim (once per 64 MiB of address space, global lock held):
 * one prlimit64 when the limit is infinite; with a finite one, open, read
 * and close of /proc/self/statm too.  `claim` and `reserve` are the largest
 * claim and the largest new region that fit (UINT64_MAX: no limit).
 */
static uint64_t as_headroom(uint64_t limit)
{
	/* A quarter: what glibc must serve from it is what the arena cannot
	 * place, typically the program's largest requests (a 1 GiB-aligned
	 * block needs 1 GiB more than its size: under an 8 GiB limit an
	 * eighth, 1 GiB, is not enough for it).  The same share the first
	 * region leaves free at init (fit_reservation) the other way round:
	 * the arena starts at a quarter of the room and grows to three. */
	return limit / 4;
}

struct as_room {
	uint64_t claim, reserve;
};

static struct as_room as_room_locked(void)
{
	uint64_t cur, max;
	struct as_room room = {UINT64_MAX, UINT64_MAX};
	if (vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) != 0 || cur == UINT64_MAX)
		return room;
	uint64_t vsize = proc_vsize();
	if (!vsize)
		return room; /* no /proc: the kernel's own check only */
	uint64_t used = vsize > vmap_unclaimed ? vsize - vmap_unclaimed : 0;
	uint64_t cap = cur - as_headroom(cur);
	room.claim = cur > used ? cur - used : 0;
	/* A region of S costs S/128 more of page table, and S + one chunk
	 * while vmap_os_reserve aligns it. */
	uint64_t left = cap > vsize + VMAP_CHUNK ? cap - vsize - VMAP_CHUNK : 0;
	room.reserve = (left - left / 128) & ~(uint64_t)(VMAP_CHUNK - 1);
	return room;
}

/*
 * Strict overcommit (vm.overcommit_memory=2, F17) ignores MAP_NORESERVE: a
 * writable reservation is charged in full against CommitLimit (an 8 GiB
 * arena took 8.4 GiB of a 12 GiB limit, and a second process could not have
 * one).  So the arena is reserved PROT_NONE and its tables PROT_READ, which
 * no overcommit mode charges, and a chunk with its slices of the tables
 * becomes writable when a shard claims it: charged then, and kept writable
 * when it goes back (the kernel would keep the charge anyway).  Three
 * mprotect calls per 64 MiB claimed; -errno if one fails (ENOMEM: the commit
 * limit or RLIMIT_DATA).  Global lock held.
 */
static int commit_chunks(struct vmap_region *r, size_t first, size_t n)
{
	const int rw = PROT_READ | PROT_WRITE;
	size_t each = VMAP_CHUNK_PAGES * sizeof(struct vmap_pte);
	int rc = vmap_os_mprotect((char *)r->pt + first * each, n * each, rw);
	if (!rc && r->slabs)
		rc = vmap_os_mprotect((char *)r->slabs + first * r->slabs_each, n * r->slabs_each, rw);
	if (!rc)
		rc = vmap_os_mprotect((void *)(r->base + (first << VMAP_CHUNK_SHIFT)),
				      n << VMAP_CHUNK_SHIFT, rw);
	return rc;
}

void vmap_range_fast_free_off(void)
{
	__atomic_store_n(&vmap_slab0.size, 0, __ATOMIC_SEQ_CST);
}

struct vmap_slab *vmap_region_slabs_publish(struct vmap_region *r, struct vmap_slab *t, size_t each)
{
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	struct vmap_slab *in = r->slabs;
	if (!in) {
		bool ok = true;
		for (size_t c = 0, run = 0; c <= r->nchunks && ok; c++) {
			if (c < r->nchunks && !vmap_chunk_is_free(r->chunk_owner[c])) {
				run++;
				continue;
			}
			ok = !run || !vmap_os_mprotect((char *)t + (c - run) * each, run * each,
						       PROT_READ | PROT_WRITE);
			run = 0;
		}
		if (ok) {
			r->slabs_each = each;
			__atomic_store_n(&r->slabs, t, __ATOMIC_RELEASE);
			in = t;
			if (r == &vmap_regions[0]) {
				vmap_slab0.base = r->base;
				vmap_slab0.tab = t;
				/* Not while profiling: as vmap_fast_limit (alloc.c). */
				__atomic_store_n(&vmap_slab0.size, r->size, __ATOMIC_SEQ_CST);
				if (__atomic_load_n(&vmap_profile_on, __ATOMIC_SEQ_CST))
					vmap_range_fast_free_off();
			}
		}
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	return in;
}

/* Finds n free chunks in a row, marks them owned; global lock held.  Free
 * chunks of the request's kind first (a chunk given back after big use keeps
 * its MADV_HUGEPAGE: only a small claim that finds nothing else takes one;
 * *unadvise tells the caller to advise it back).  0 with *refused set: the
 * chunks were there but the system would not commit them (commit_chunks),
 * and a new region would not help. */
static uintptr_t chunks_claim_locked(unsigned shard, bool big, size_t n, bool *unadvise,
				     bool *refused)
{
	uint16_t owner = (uint16_t)((shard + 1) | (big ? 0x8000u : 0));
	uint16_t kind = big ? VMAP_CHUNK_WAS_BIG : 0;
	*unadvise = false;
	for (int any = 0; any < 2; any++)
		for (unsigned i = 0; i < vmap_nregions; i++) {
			struct vmap_region *r = &vmap_regions[i];
			size_t run = 0;
			for (size_t c = 0; c < r->nchunks; c++) {
				uint16_t o = r->chunk_owner[c];
				run = vmap_chunk_is_free(o) && (any || o == kind) ? run + 1 : 0;
				if (run == n) {
					size_t first = c + 1 - n;
					if (commit_chunks(r, first, n)) {
						*refused = true;
						return 0;
					}
					for (size_t k = first; k <= c; k++) {
						*unadvise |= !big && r->chunk_owner[k] == VMAP_CHUNK_WAS_BIG;
						__atomic_store_n(&r->chunk_owner[k], owner, __ATOMIC_RELEASE);
					}
					unclaimed_add(shard, -(int64_t)(n << VMAP_CHUNK_SHIFT));
					return r->base + (first << VMAP_CHUNK_SHIFT);
				}
			}
		}
	return 0;
}

void vmap_chunks_give_back_locked(struct vmap_shard *s, uintptr_t run)
{
	struct vmap_region *r = vmap_region_of(run);
	struct vmap_pte *e = vmap_pte_of(r, run);
	uint64_t t = e->tag, pages = vmap_tag_pages(t);
	unsigned state = vmap_tag_run_state(t);
	if (pages < VMAP_CHUNK_PAGES || (state != VMAP_RUN_ZERO && state != VMAP_RUN_GUARDED))
		return; /* the common case: one compare */
	/*
	 *   run:     [ lead |  chunk  |  chunk  | tail ]
	 *   kept:    [ lead ]                   [ tail ]   (free runs of s, its state)
	 *   given:          [ owner 0 | owner 0 ]          (tags all 0)
	 */
	uintptr_t end = run + (pages << VMAP_PAGE_SHIFT);
	uintptr_t cs = (run + VMAP_CHUNK - 1) & ~(uintptr_t)(VMAP_CHUNK - 1);
	uintptr_t ce = end & ~(uintptr_t)(VMAP_CHUNK - 1);
	if (ce <= cs)
		return;
	bool big = t & VMAP_TAG_BIG;
	/* The chunks are mapped again, read-write (one call per 64 MiB
	 * returned, rare; the one system call made under a shard lock).
	 * Writable, not PROT_NONE as reserved: the arena's writable part stays
	 * the chunks ever claimed, a few VMAs, where chunks going back and
	 * forth between PROT_NONE and RW cut it into one VMA per chunk (with
	 * their table slices, 65 493 VMAs in a 25-minute soak: F20); strict
	 * overcommit keeps charging them, as the kernel would after a claim.
	 * That takes with them
	 *  - the VMAs realloc moves left there: the new mapping has the page
	 *    offset the arena had, so it merges with the arena around it, and
	 *    the moves it ends no longer count against the VMA budget;
	 *  - pages still resident in zero runs: a 2 MiB page a block faulted
	 *    in reaches into them, and purging the block splits it and frees
	 *    only the block's range (F15);
	 *  - the guard markers (or PROT_NONE) of pages the program unmapped
	 *    (a guarded run): from now on they read zero, like every
	 *    unclaimed chunk, instead of faulting (F22);
	 *  - MADV_HUGEPAGE: it comes back at the next claim.
	 * If that fails (the VMA limit), a guarded run stays as it is (its
	 * markers would go out with the chunk), a huge-page chunk's pages are
	 * dropped and the rest stays as it was. */
	bool remapped = vmap_os_map_fresh((void *)cs, ce - cs) == 0;
	if (!remapped && state == VMAP_RUN_GUARDED)
		return;
	uint64_t stamp = e->stamp;
	vmap_run_take_locked(s, e, t);
	if (cs > run)
		vmap_run_set_locked(s, r, run, (cs - run) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (end > ce)
		vmap_run_set_locked(s, r, ce, (end - ce) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (!remapped && big)
		vmap_os_madvise((void *)cs, ce - cs, MADV_DONTNEED);
	/* The chunks' slices of the page table and of the slab descriptors
	 * hold nothing now (tags 0, no slab: what a never-used slice reads),
	 * but stay resident as long as nobody claims them again: 512 KiB a
	 * chunk, 120 MB per region of 64 GiB after the 30-minute soak (F22). */
	size_t first = (cs - r->base) >> VMAP_CHUNK_SHIFT, n = (ce - cs) >> VMAP_CHUNK_SHIFT;
	size_t each = VMAP_CHUNK_PAGES * sizeof(struct vmap_pte);
	vmap_os_madvise((char *)r->pt + first * each, n * each, MADV_DONTNEED);
	struct vmap_slab *slabs = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
	if (slabs)
		vmap_os_madvise((char *)slabs + first * r->slabs_each, n * r->slabs_each,
				MADV_DONTNEED);
	/* Rank GLOBAL under rank SHARD: the order chunks_acquire's callers never
	 * invert (they hold no shard lock while they take the global one). */
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	for (uintptr_t c = cs; c < ce; c += VMAP_CHUNK) {
		size_t i = (c - r->base) >> VMAP_CHUNK_SHIFT;
		if (remapped)
			__atomic_sub_fetch(&vmap_moves,
					   __atomic_exchange_n(&r->chunk_moves[i], 0, __ATOMIC_RELAXED),
					   __ATOMIC_RELAXED);
		__atomic_store_n(&r->chunk_owner[i], (uint16_t)(big && !remapped ? VMAP_CHUNK_WAS_BIG : 0),
				 __ATOMIC_RELEASE);
	}
	unclaimed_add(s->id, (int64_t)(ce - cs));
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_chunks_returned, (int64_t)((ce - cs) >> VMAP_CHUNK_SHIFT));
}

bool vmap_chunk_claim_at(uintptr_t a, struct vmap_shard *s)
{
	struct vmap_region *r = vmap_region_of(a);
	if (!r)
		return false;
	size_t c = (a - r->base) >> VMAP_CHUNK_SHIFT;
	bool claimed = false, unadvise = false;
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	if (vmap_chunk_is_free(r->chunk_owner[c])) {
		if (commit_chunks(r, c, 1)) {
			vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
			return false;
		}
		unadvise = r->chunk_owner[c] == VMAP_CHUNK_WAS_BIG;
		__atomic_store_n(&r->chunk_owner[c], (uint16_t)(s->id + 1), __ATOMIC_RELEASE);
		unclaimed_add(s->id, -(int64_t)VMAP_CHUNK);
		claimed = true;
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	if (!claimed)
		return true; /* someone else did: it is a run now */
	if (unadvise)
		vmap_os_madvise((void *)(r->base + (c << VMAP_CHUNK_SHIFT)), VMAP_CHUNK, MADV_NOHUGEPAGE);
	vmap_shard_lock(s);
	vmap_free_insert_locked(s, r->base + (c << VMAP_CHUNK_SHIFT), VMAP_CHUNK_PAGES, VMAP_RUN_ZERO,
				false, 0);
	vmap_shard_unlock(s);
	return true;
}

static uintptr_t chunks_acquire(struct vmap_shard *s, bool big, size_t n)
{
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	bool unadvise = false, refused = false;
	uintptr_t a = 0;
	size_t need = n << VMAP_CHUNK_SHIFT;
	struct as_room room = as_room_locked();
	if (need <= room.claim)
		a = chunks_claim_locked(s->id, big, n, &unadvise, &refused);
	if (!a && !refused && need <= room.claim && need <= room.reserve) {
		size_t want = vmap_reserve_size > need ? vmap_reserve_size : need;
		if (want > room.reserve)
			want = (size_t)room.reserve;
		if (region_add(want, need) == 0)
			a = chunks_claim_locked(s->id, big, n, &unadvise, &refused);
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	if (!a)
		return 0;
	vmap_stat_add_cpu(s->id, VMAP_STAT_chunks_taken, (int64_t)n);
	if (big && vmap_opt.hugepage)
		vmap_os_madvise((void *)a, n << VMAP_CHUNK_SHIFT, MADV_HUGEPAGE);
	else if (unadvise) /* THP would inflate small blocks (one more VMA, rare) */
		vmap_os_madvise((void *)a, n << VMAP_CHUNK_SHIFT, MADV_NOHUGEPAGE);
	return a;
}

/* ---- shards ------------------------------------------------------------ */

/*
 * The shard a thread allocates from: the one of the CPU it ran on at its
 * first allocation, kept until the thread has to wait for that shard's lock;
 * it then takes the shard of the CPU it runs on at its next allocation.  The
 * CPU alone, at every call, made a thread that the scheduler moves between
 * CPUs allocate from every shard in turn while each free went back to the
 * block's own shard: the freed memory of one shard could not serve the
 * other's requests, so both carved fresh memory, the cache grew past the
 * purge limit and the purges refaulted it (bench aligned, 1 thread on a
 * loaded 2-CPU machine, 200k operations: 455k-985k page faults, peak RSS
 * 480-490 MiB; one shard, or the thread pinned: 39-41k, 279 MiB).  Threads
 * on different CPUs still spread over the shards, through contention.
 */
static __thread int vmap_tls_shard = -1;

void vmap_shard_lock(struct vmap_shard *s)
{
	bool waited = vmap_lock(&s->lock, VMAP_RANK_SHARD);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shard_lock_acquisitions, 1);
	if (waited) {
		vmap_stat_add_cpu(s->id, VMAP_STAT_shard_lock_contended, 1);
		if ((int)s->id == vmap_tls_shard)
			vmap_tls_shard = -1; /* shared with another thread: move on */
	}
	__atomic_store_n(&s->lock_acquisitions, s->lock_acquisitions + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->lock_contended, s->lock_contended + waited, __ATOMIC_RELAXED);
}

struct vmap_shard *vmap_shard_here(unsigned *cpu)
{
	*cpu = vmap_os_cpu();
	int h = vmap_tls_shard;
	if (__builtin_expect(h < 0, 0))
		vmap_tls_shard = h = (int)(*cpu % vmap_nshards);
	return &vmap_shards[h];
}

/* ---- free runs (shard lock held) -------------------------------------- */

/* shard->cached_bytes and pool[].count are written under the shard lock and
 * read without it as hints (purge.c collect, the pool checks before taking
 * the lock): relaxed atomic stores, plain moves on x86-64 and arm64, so that
 * those reads are not data races. */
static inline void cached_add(struct vmap_shard *s, uint64_t d)
{
	__atomic_store_n(&s->cached_bytes, s->cached_bytes + d, __ATOMIC_RELAXED);
}

static inline unsigned bin_of(uint64_t pages)
{
	unsigned b = log2_floor(pages);
	return b < VMAP_FREE_BINS ? b : VMAP_FREE_BINS - 1;
}

static inline unsigned list_of(bool big, unsigned state)
{
	return vmap_run_list(big, state);
}

static inline uint64_t state_flags(unsigned state)
{
	static const uint64_t flags[] = {VMAP_TAG_ZERO, 0, VMAP_TAG_ADVISED, VMAP_TAG_GUARDED,
					 VMAP_TAG_PROTECTED};
	return flags[state];
}

static void bin_push(struct vmap_shard *s, unsigned li, struct vmap_pte *e, uintptr_t a,
		     uint64_t pages)
{
	unsigned b = bin_of(pages);
	uintptr_t head = s->free_bin[li][b];
	e->next = head;
	e->prev = 0;
	if (head)
		vmap_pte_of(vmap_region_of(head), head)->prev = a;
	s->free_bin[li][b] = a;
	s->free_bin_mask[li] |= 1ull << b;
}

static void bin_remove(struct vmap_shard *s, unsigned li, struct vmap_pte *e, uint64_t pages)
{
	unsigned b = bin_of(pages);
	if (e->prev)
		vmap_pte_of(vmap_region_of(e->prev), e->prev)->next = e->next;
	else
		s->free_bin[li][b] = e->next;
	if (e->next)
		vmap_pte_of(vmap_region_of(e->next), e->next)->prev = e->prev;
	if (!s->free_bin[li][b])
		s->free_bin_mask[li] &= ~(1ull << b);
}

/* Writes the head and tail tags of a free run and files it in its bin. */
void vmap_run_set_locked(struct vmap_shard *s, struct vmap_region *r, uintptr_t a,
			   uint64_t pages, unsigned state, bool big, uint64_t stamp)
{
	uint64_t flags = state_flags(state) | (big ? VMAP_TAG_BIG : 0);
	unsigned li = list_of(big, state);
	struct vmap_pte *e = vmap_pte_of(r, a);
	__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_FREE, s->id, pages, flags), __ATOMIC_RELEASE);
	if (pages > 1)
		__atomic_store_n(&e[pages - 1].tag, vmap_tag_make(VMAP_ST_FREE_TAIL, s->id, pages, flags),
				 __ATOMIC_RELAXED);
	e->stamp = stamp;
	bin_push(s, li, e, a, pages);
	s->free_pages[li] += pages;
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		cached_add(s, pages << VMAP_PAGE_SHIFT);
}

/* Unfiles a free run and clears its tags. */
void vmap_run_take_locked(struct vmap_shard *s, struct vmap_pte *e, uint64_t t)
{
	uint64_t pages = vmap_tag_pages(t);
	unsigned state = vmap_tag_run_state(t);
	unsigned li = list_of(t & VMAP_TAG_BIG, state);
	bin_remove(s, li, e, pages);
	__atomic_store_n(&e->tag, 0, __ATOMIC_RELAXED);
	if (pages > 1)
		__atomic_store_n(&e[pages - 1].tag, 0, __ATOMIC_RELAXED);
	s->free_pages[li] -= pages;
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		cached_add(s, -(pages << VMAP_PAGE_SHIFT));
}

/* Whether runs in states a and b merge: when they are the same, and zero
 * with guarded (into a guarded run).  Both are unused address space with no
 * page resident; carving from a guarded run removes the markers of what it
 * takes (MADV_GUARD_REMOVE, or mprotect on older kernels), which on pages
 * that have none costs a walk of the range.  Kept apart, the pieces the
 * program unmapped and the purged blocks between them cut the address space
 * into runs too small for the next large request: a 32-thread soak left
 * 62 GiB of guarded and 11 GiB of zero runs after 150 s, mostly 4-8 MiB
 * pieces of huge-page chunks that no 8 MiB block fitted, and claimed new
 * address space instead, 14 regions of 64 GiB in 30 minutes (F22). */
static inline bool states_merge(unsigned a, unsigned b)
{
	return a == b || (a == VMAP_RUN_ZERO && b == VMAP_RUN_GUARDED) ||
	       (a == VMAP_RUN_GUARDED && b == VMAP_RUN_ZERO);
}

static unsigned merged_state(unsigned a, unsigned b)
{
	return a == b ? a : VMAP_RUN_GUARDED;
}

/* Runs merge only within one shard and one kind (and states_merge). */
static bool run_mergeable(uint64_t t, unsigned shard, bool big, unsigned state)
{
	return vmap_tag_shard(t) == shard && !!(t & VMAP_TAG_BIG) == big &&
	       states_merge(vmap_tag_run_state(t), state);
}

uintptr_t vmap_free_insert_locked(struct vmap_shard *s, uintptr_t start, uint64_t pages,
				  unsigned state, bool big, uint64_t now)
{
	struct vmap_region *r = vmap_region_of(start);
	struct vmap_pte *e = vmap_pte_of(r, start);
	/* Atomic: another shard's insert may read it as its run's right
	 * neighbour (never mergeable: another shard's). */
	__atomic_store_n(&e->tag, 0, __ATOMIC_RELAXED);
	/* Merge with a free run that ends just before us. */
	if (start > r->base) {
		uint64_t lt = __atomic_load_n(&e[-1].tag, __ATOMIC_RELAXED);
		unsigned st = vmap_tag_state(lt);
		if ((st == VMAP_ST_FREE_TAIL || (st == VMAP_ST_FREE && vmap_tag_pages(lt) == 1)) &&
		    run_mergeable(lt, s->id, big, state)) {
			uint64_t lp = vmap_tag_pages(lt);
			uintptr_t ls = start - (lp << VMAP_PAGE_SHIFT);
			struct vmap_pte *le = vmap_pte_of(r, ls);
			state = merged_state(state, vmap_tag_run_state(le->tag));
			vmap_run_take_locked(s, le, le->tag);
			start = ls;
			pages += lp;
		}
	}
	/* Merge with a free run that starts just after us. */
	uintptr_t end = start + (pages << VMAP_PAGE_SHIFT);
	if (end < r->base + r->size) {
		struct vmap_pte *re = vmap_pte_of(r, end);
		uint64_t rt = __atomic_load_n(&re->tag, __ATOMIC_RELAXED);
		if (vmap_tag_state(rt) == VMAP_ST_FREE && run_mergeable(rt, s->id, big, state)) {
			state = merged_state(state, vmap_tag_run_state(rt));
			vmap_run_take_locked(s, re, rt);
			pages += vmap_tag_pages(rt);
		}
	}
	vmap_run_set_locked(s, r, start, pages, state, big, now);
	return start;
}

/* A run of list li that holds `pages` pages at `align`, or 0: the smallest
 * that fits once aligned (the lowest address among equals), looking at up
 * to RUN_FIND_BUDGET runs per bin, from the bin of `pages` up to the first
 * bin whose smallest possible run is no better than the best found.  Best
 * fit keeps the large runs whole for the large requests: bench aligned
 * (64 KiB-4 MiB at 4 KiB-2 MiB alignment) faulted 14% fewer pages than with
 * the first fit of a bin's head above the request's bin. */
#define RUN_FIND_BUDGET 64
static uintptr_t run_find(struct vmap_shard *s, unsigned li, uint64_t pages, size_t align)
{
	uint64_t mask = s->free_bin_mask[li] & ~((1ull << bin_of(pages)) - 1);
	uintptr_t best = 0;
	uint64_t best_m = UINT64_MAX;
	while (mask) {
		unsigned b = (unsigned)__builtin_ctzll(mask);
		mask &= mask - 1;
		/* Every run of a bin is at least 2^b pages: once that is no
		 * smaller than the best fit found, larger bins cannot beat it. */
		if (best && (1ull << b) >= best_m)
			break;
		int budget = RUN_FIND_BUDGET;
		for (uintptr_t a = s->free_bin[li][b]; a && budget-- > 0;) {
			struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
			uint64_t m = vmap_tag_pages(e->tag);
			uintptr_t al = (a + align - 1) & ~(uintptr_t)(align - 1);
			if ((m < best_m || (m == best_m && a < best)) &&
			    al + (pages << VMAP_PAGE_SHIFT) <= a + (m << VMAP_PAGE_SHIFT)) {
				best = a;
				best_m = m;
				if (m == pages)
					return best;
			}
			a = e->next;
		}
	}
	return best;
}

/*
 * Carves an area of `pages` pages aligned to `align` bytes from the shard's
 * free runs.  Order: resident (dirty) runs of the request's kind, resident
 * runs of the other kind (memory already faulted in is the cheapest there
 * is: a memset at most, where a fresh page costs a fault), known-zero runs of
 * the request's kind, and for small requests known-zero big runs too (the
 * lead fragments that 2 MiB alignment leaves in big chunks).  Pages the
 * program munmap()ed come in between: lazily protected ones right after the
 * dirty runs (resident: one mprotect), guarded ones before fresh memory
 * (one madvise, then faults like fresh memory, but no new address space).
 * *state is the run's state; the area's kind is the run's (*big); *resident
 * how many of its pages were resident (cached).  An area that starts in a
 * resident run and ends in a zero or guarded one has that run's state and
 * *resident > 0: its first *resident pages are stale, the rest as the state
 * says.  With resident_only, only the lists that need no page fault (dirty,
 * protected).
 */
static uintptr_t carve_locked(struct vmap_shard *s, bool *big, uint64_t pages, size_t align,
			      unsigned *state_out, uint64_t *resident_out, bool resident_only)
{
	const bool k = *big;
	const unsigned order[9] = {
		list_of(k, VMAP_RUN_DIRTY),     list_of(!k, VMAP_RUN_DIRTY),
		list_of(k, VMAP_RUN_PROTECTED), list_of(!k, VMAP_RUN_PROTECTED),
		list_of(k, VMAP_RUN_ADVISED),   list_of(k, VMAP_RUN_GUARDED),
		list_of(k, VMAP_RUN_ZERO),
		/* small requests may also use the zero lead fragments of big chunks */
		list_of(true, VMAP_RUN_ZERO),   list_of(!k, VMAP_RUN_GUARDED),
	};
	uintptr_t found = 0;
	for (int i = 0; i < (resident_only ? 4 : 9) && !found; i++)
		found = run_find(s, order[i], pages, align);
	*resident_out = 0;
	if (!found)
		return 0;
	struct vmap_region *r = vmap_region_of(found);
	struct vmap_pte *e = vmap_pte_of(r, found);
	uint64_t t = e->tag, m = vmap_tag_pages(t), stamp = e->stamp;
	unsigned state = vmap_tag_run_state(t);
	bool kind = t & VMAP_TAG_BIG;
	if ((state == VMAP_RUN_ZERO || state == VMAP_RUN_GUARDED) && align <= VMAP_PAGE &&
	    found > r->base) {
		/* Fresh memory right after a resident run too small for the
		 * request (else it would have been found): the area starts in
		 * the resident run and takes from the fresh one only what is
		 * missing.  Fewer pages fault, and the resident run, which
		 * nothing that big could use, does not stay behind as a hole
		 * (bench random: the heap grows past its live blocks into
		 * fresh memory until fragmentation is steady). */
		uint64_t lt = __atomic_load_n(&e[-1].tag, __ATOMIC_RELAXED);
		unsigned lst = vmap_tag_state(lt);
		uint64_t lp = vmap_tag_pages(lt);
		if ((lst == VMAP_ST_FREE_TAIL || (lst == VMAP_ST_FREE && lp == 1)) &&
		    run_mergeable(lt, s->id, kind, VMAP_RUN_DIRTY) && lp < pages) {
			uintptr_t ls = found - (lp << VMAP_PAGE_SHIFT);
			struct vmap_pte *le = vmap_pte_of(r, ls);
			vmap_run_take_locked(s, le, le->tag);
			vmap_run_take_locked(s, e, t);
			uint64_t fresh = pages - lp;
			if (m > fresh)
				vmap_run_set_locked(s, r, found + (fresh << VMAP_PAGE_SHIFT), m - fresh,
						    state, kind, stamp);
			*state_out = state; /* of the fresh part; contents not known zero */
			*resident_out = lp;
			*big = kind;
			return ls;
		}
	}
	vmap_run_take_locked(s, e, t);
	uintptr_t al = (found + align - 1) & ~(uintptr_t)(align - 1);
	uint64_t lead = (al - found) >> VMAP_PAGE_SHIFT;
	uint64_t rest = m - lead - pages;
	if (lead)
		vmap_run_set_locked(s, r, found, lead, state, kind, stamp);
	if (rest)
		vmap_run_set_locked(s, r, al + (pages << VMAP_PAGE_SHIFT), rest, state, kind, stamp);
	*state_out = state;
	*resident_out = state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED ? pages : 0;
	*big = kind;
	return al;
}

/* VMAPALLOC_GUARD=1: the guard page of every malloc area traps.  Installed
 * when an area is carved, removed when its pages go back to the free runs
 * (pools and thread caches keep areas whole, marker included). */
static bool vmap_guard_on;

static void guard_page(uintptr_t area, uint64_t pages, int advice)
{
	if (vmap_guard_on)
		vmap_os_madvise((void *)(area + ((pages - 1) << VMAP_PAGE_SHIFT)), VMAP_PAGE, advice);
}

bool vmap_range_guard_on(void)
{
	return vmap_guard_on;
}

/* Makes lazily unmapped pages usable again (contents: stale). */
/* When the call that makes them usable fails (ENOMEM: the kernel could not
 * split a VMA, or an injected fault, rel-strace-inject), a fresh mapping
 * over them does it (zero-filled: every caller zeroes or wants zero); the
 * pages were handed out faulting before. */
int vmap_unprotect(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	int rc = vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE);
	if (rc)
		rc = vmap_os_map_fresh((void *)a, len);
	__atomic_sub_fetch(&vmap_protected_runs, 1, __ATOMIC_RELAXED);
	return rc;
}

/* Can this kernel mark pages as faulting without splitting the VMA
 * (MADV_GUARD_INSTALL, Linux >= 6.13)?  Asked of the kernel the first
 * time it matters (VMAPALLOC_GUARD, or the program's first munmap of served
 * memory), so a process that never needs it makes no system call for it. */
bool vmap_guard_markers(void)
{
	int st = __atomic_load_n(&vmap_guard_markers_state, __ATOMIC_RELAXED);
	if (__builtin_expect(st != 0, 1))
		return st > 0;
	/* The kernel checks the advice before the range: an empty range at 0
	 * tells a known advice (0) from an unknown one (EINVAL). */
	st = vmap_os_madvise(NULL, 0, MADV_GUARD_INSTALL) == 0 ? 1 : -1;
	__atomic_store_n(&vmap_guard_markers_state, st, __ATOMIC_RELAXED);
	return st > 0;
}

/* Makes guarded pages (munmap()ed by the program) usable again: zero-filled.
 * 0, or -errno: they may still fault (on a kernel without guard markers, at
 * vm.max_map_count neither mprotect nor a fresh mapping can split the VMA). */
int vmap_unguard(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	if (!(vmap_guard_markers() ? vmap_os_madvise((void *)a, len, MADV_GUARD_REMOVE)
				   : vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE)))
		return 0;
	return vmap_os_map_fresh((void *)a, len);
}

unsigned vmap_dirty_take_locked(struct vmap_shard *s, uint64_t older_than, uint64_t want_bytes,
				struct vmap_victim *out, unsigned max, uint64_t *taken)
{
	/* Oldest first (the kernel's decay order): gather up to DIRTY_SCAN runs,
	 * then repeatedly take the oldest of them.  Runs are not kept in age
	 * order, so the scan is bounded; what it misses waits for the next purge. */
	enum { DIRTY_SCAN = 512 };
	uintptr_t cand[DIRTY_SCAN];
	uint64_t stamp[DIRTY_SCAN];
	unsigned nc = 0;
	for (unsigned l = 0; l < 4; l++) {
		unsigned li = list_of(l & 1, l < 2 ? VMAP_RUN_DIRTY : VMAP_RUN_PROTECTED);
		uint64_t mask = s->free_bin_mask[li];
		while (mask && nc < DIRTY_SCAN) {
			unsigned b = (unsigned)__builtin_ctzll(mask);
			mask &= mask - 1;
			for (uintptr_t a = s->free_bin[li][b]; a && nc < DIRTY_SCAN;) {
				struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
				if (!older_than || e->stamp <= older_than) {
					cand[nc] = a;
					stamp[nc++] = e->stamp;
				}
				a = e->next;
			}
		}
	}
	unsigned n = 0;
	uint64_t got = 0;
	while (n < max && got < want_bytes && nc > 0) {
		unsigned oldest = 0;
		for (unsigned i = 1; i < nc; i++)
			if (stamp[i] < stamp[oldest])
				oldest = i;
		uintptr_t a = cand[oldest];
		cand[oldest] = cand[--nc];
		stamp[oldest] = stamp[nc];
		struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
		uint64_t t = e->tag, np = vmap_tag_pages(t);
		vmap_run_take_locked(s, e, t);
		/* Atomic: a free next to it reads it without the lock (range free). */
		__atomic_store_n(&e->tag,
				 vmap_tag_make(VMAP_ST_PURGING, s->id, np,
					       t & (VMAP_TAG_BIG | VMAP_TAG_PROTECTED)),
				 __ATOMIC_RELAXED);
		out[n++] = (struct vmap_victim){a, np, e->tag};
		got += np << VMAP_PAGE_SHIFT;
	}
	*taken += got;
	return n;
}

/* ---- pools (shard lock held) ------------------------------------------- */

void vmap_pool_push_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now)
{
	uint64_t pages = vmap_tag_pages(e->tag);
	struct vmap_pool *p = &s->pool[pages];
	e->next = p->head;
	e->prev = 0;
	e->stamp = now;
	if (p->head)
		vmap_pte_of(vmap_region_of(p->head), p->head)->prev = a;
	else
		p->tail = a;
	p->head = a;
	__atomic_store_n(&p->count, p->count + 1, __ATOMIC_RELAXED);
	s->pool_mask[pages >> 6] |= 1ull << (pages & 63);
	s->pool_bytes += pages << VMAP_PAGE_SHIFT;
	cached_add(s, pages << VMAP_PAGE_SHIFT);
}

void vmap_pool_remove_locked(struct vmap_shard *s, unsigned cls, uintptr_t a)
{
	struct vmap_pool *p = &s->pool[cls];
	struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
	if (e->prev)
		vmap_pte_of(vmap_region_of(e->prev), e->prev)->next = e->next;
	else
		p->head = e->next;
	if (e->next)
		vmap_pte_of(vmap_region_of(e->next), e->next)->prev = e->prev;
	else
		p->tail = e->prev;
	__atomic_store_n(&p->count, p->count - 1, __ATOMIC_RELAXED);
	if (!p->count)
		s->pool_mask[cls >> 6] &= ~(1ull << (cls & 63));
	s->pool_bytes -= vmap_tag_pages(e->tag) << VMAP_PAGE_SHIFT;
	cached_add(s, -(vmap_tag_pages(e->tag) << VMAP_PAGE_SHIFT));
}

unsigned vmap_pool_pop_many_locked(struct vmap_shard *s, unsigned pages, uintptr_t *out,
				   unsigned max)
{
	unsigned n = 0;
	struct vmap_pool *p = &s->pool[pages];
	while (n < max && p->head) {
		uintptr_t a = p->head;
		vmap_pool_remove_locked(s, pages, a);
		out[n++] = a;
	}
	return n;
}

/* Grows a cached area of this thread's (tag CACHED, in its cache, not in a
 * pool) from `pages` to `want` pages into the free run that follows it, when
 * that run is the same shard's and kind's, resident or known zero, and long
 * enough: the thread cache's hot area grows in place, as glibc's top chunk
 * does, instead of a larger area being carved elsewhere while it stays
 * resident, unused.  Returns the bytes taken from a resident run (0 from a
 * zero one), or -1 when it cannot grow. */
int64_t vmap_cached_extend(uintptr_t a, uint64_t pages, uint64_t want)
{
	struct vmap_region *r = vmap_region_of(a);
	struct vmap_pte *e = vmap_pte_of(r, a);
	uint64_t t = e->tag;
	uintptr_t end = a + (pages << VMAP_PAGE_SHIFT);
	if (end >= r->base + r->size)
		return -1;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	bool big = t & VMAP_TAG_BIG;
	int64_t got = -1;
	vmap_shard_lock(s);
	struct vmap_pte *re = vmap_pte_of(r, end);
	uint64_t rt = __atomic_load_n(&re->tag, __ATOMIC_RELAXED), rp = vmap_tag_pages(rt);
	unsigned rs = vmap_tag_run_state(rt);
	if (vmap_tag_state(rt) == VMAP_ST_FREE && vmap_tag_shard(rt) == s->id &&
	    !!(rt & VMAP_TAG_BIG) == big && (rs == VMAP_RUN_DIRTY || rs == VMAP_RUN_ZERO) &&
	    pages + rp >= want) {
		uint64_t stamp = re->stamp, extra = want - pages;
		vmap_run_take_locked(s, re, rt);
		if (rp > extra)
			vmap_run_set_locked(s, r, end + (extra << VMAP_PAGE_SHIFT), rp - extra, rs, big,
					    stamp);
		__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_CACHED, s->id, want, t & VMAP_TAG_BIG),
				 __ATOMIC_RELEASE);
		got = rs == VMAP_RUN_DIRTY ? (int64_t)(extra << VMAP_PAGE_SHIFT) : 0;
	}
	vmap_shard_unlock(s);
	if (got > 0)
		vmap_stat_add_cpu(s->id, VMAP_STAT_cached_bytes, -got);
	return got;
}

/* ---- the public range operations --------------------------------------- */

/* Area pages (guard included) for a request, 0 on overflow. */
static uint64_t area_pages(size_t size, bool *big)
{
	if (size > ((size_t)1 << 46))
		return 0; /* 64 TiB: larger than any arena could be */
	uint64_t n = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	if (n < 2)
		n = 2;
	/* Big areas start 2 MiB aligned in THP-advised chunks, but keep their
	 * exact size: rounding them to whole huge pages was measured to cost
	 * more in fragmentation (bench random: 1/3 of each 2-4 MiB block) than
	 * it saved in huge-page splits at purge. */
	*big = vmap_opt.hugepage && (n - 1) << VMAP_PAGE_SHIFT >= vmap_opt.hugepage_min;
	return n;
}

/* Pooled bytes per shard: beyond them, freed areas go to the free runs,
 * where they merge and serve any size.  Pools pay off while sizes repeat;
 * with random sizes (bench aligned, random: 64 KiB-4 MiB), 16/8/4 areas of
 * each of 256 sizes held 80 MiB unmerged and the footprint grew: faults
 * 57k -> 38k, peak RSS 344 -> 268 MiB over 60k operations with this cap. */
#define POOL_MAX_BYTES ((uint64_t)4 << 20)
static inline uint32_t pool_cap(uint64_t pages)
{
	return pages <= 17 ? 16 : pages <= 65 ? 8 : 4; /* usable <= 64 KiB, <= 256 KiB, more */
}

void vmap_area_park_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now)
{
	uint64_t t = e->tag, pages = vmap_tag_pages(t);
	/* (With guards, areas carry their marker: kept whole, in the pools.) */
	if (vmap_guard_on || (pages <= vmap_pool_exact && s->pool[pages].count < pool_cap(pages) &&
			      s->pool_bytes + (pages << VMAP_PAGE_SHIFT) <= POOL_MAX_BYTES))
		vmap_pool_push_locked(s, e, a, now);
	else
		vmap_free_insert_locked(s, a, pages, VMAP_RUN_DIRTY, t & VMAP_TAG_BIG, now);
}

static inline void publish_live(struct vmap_pte *e, unsigned shard, uint64_t pages, bool big)
{
	__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_LIVE, shard, pages, big ? VMAP_TAG_BIG : 0),
			 __ATOMIC_RELEASE);
}

/*
 * Before carving fresh memory, which faults, pooled areas of other sizes are
 * turned into resident free runs so that this request can reuse them: exact
 * pools pay off while sizes repeat; when they do not (random sizes), the
 * memory is worth more merged than waiting for its exact size.
 */
static void pools_to_runs_locked(struct vmap_shard *s)
{
	if (!s->cached_bytes)
		return;
	for (unsigned w = 0; w < sizeof s->pool_mask / sizeof s->pool_mask[0]; w++)
		while (s->pool_mask[w]) {
			unsigned c = w * 64 + (unsigned)__builtin_ctzll(s->pool_mask[w]);
			struct vmap_pool *p = &s->pool[c];
			uintptr_t a = p->tail;
			struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
			uint64_t stamp = e->stamp, t = e->tag;
			vmap_pool_remove_locked(s, c, a);
			vmap_free_insert_locked(s, a, vmap_tag_pages(t), VMAP_RUN_DIRTY, t & VMAP_TAG_BIG,
						stamp);
		}
}

/* Publishes the area carved at a from s's runs (shard lock held on entry,
 * released) and does what its former state asks. */
static void *carve_finish(struct vmap_shard *s, unsigned cpu, uintptr_t a, uint64_t pages,
			  bool kind, unsigned state, uint64_t resident, bool *zero, uint64_t tag)
{
	struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
	__atomic_store_n(&e->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, pages, (kind ? VMAP_TAG_BIG : 0) | tag),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	*zero = (state == VMAP_RUN_ZERO || state == VMAP_RUN_GUARDED) && !resident;
	int bad = 0;
	if (state == VMAP_RUN_GUARDED) /* (after a resident start: the rest) */
		bad = vmap_unguard(a + (resident << VMAP_PAGE_SHIFT), pages - resident);
	if (state == VMAP_RUN_PROTECTED)
		bad = vmap_unprotect(a, pages);
	if (bad) {
		/* Pages that still fault (at vm.max_map_count neither mprotect
		 * nor a fresh mapping can split the VMA): never handed out,
		 * kept out of circulation as foreign space until the program
		 * unmaps it (F20: a live block with a PROT_NONE page killed the
		 * soak).  Its resident part is no longer cached. */
		vmap_shard_lock(s);
		__atomic_store_n(&e->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, pages, kind ? VMAP_TAG_BIG : 0),
				 __ATOMIC_RELEASE);
		vmap_shard_unlock(s);
		if (resident)
			vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes,
					  -(int64_t)(resident << VMAP_PAGE_SHIFT));
		return NULL;
	}
	if (!tag)
		guard_page(a, pages, MADV_GUARD_INSTALL);
	if (resident)
		vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes, -(int64_t)(resident << VMAP_PAGE_SHIFT));
	if (resident == pages) {
		vmap_stat_add_cpu(cpu, VMAP_STAT_run_hits, 1);
	} else {
		if (resident)
			vmap_stat_add_cpu(cpu, VMAP_STAT_run_extends, 1);
		vmap_stat_add_cpu(cpu, VMAP_STAT_pool_misses, 1);
		if (vmap_opt.populate && *zero)
			vmap_os_madvise((void *)a, (pages - !(tag & VMAP_TAG_MMAP)) << VMAP_PAGE_SHIFT,
					MADV_POPULATE_WRITE);
	}
	return (void *)a;
}

/* Resident memory of this shard that fits, its pools merged into runs first
 * when its runs alone do not (shard lock held). */
static uintptr_t carve_resident_locked(struct vmap_shard *s, bool *kind, uint64_t pages,
				       size_t align, unsigned *state, uint64_t *resident)
{
	if (!*kind && !vmap_guard_on && !run_find(s, list_of(false, VMAP_RUN_DIRTY), pages, align))
		pools_to_runs_locked(s); /* (with guards, pooled areas carry markers: kept whole) */
	return carve_locked(s, kind, pages, align, state, resident, true);
}

/* pages: the whole area; tag: VMAP_TAG_MMAP for the program's mmap (no guard
 * page, so all pages are usable), 0 for malloc blocks.
 *
 * Resident memory first, this shard's, then any other shard's: an area keeps
 * the shard that owns its chunk whatever CPU carved it, so taking another
 * shard's freed memory costs one more lock where fresh memory costs a fault
 * per page.  A thread the scheduler moves between CPUs frees into both
 * shards; carving fresh memory whenever the shard of the moment had no
 * resident run that fitted split its working set in two and faulted it in
 * twice (bench random, 1 thread on 2 CPUs: 6-35k ops/s and 2-3 purges of
 * 100-177 MiB in the runs that moved, 67-98k in those that did not). */
__attribute__((noinline, cold)) void *vmap_alloc_carve(struct vmap_shard *s, unsigned cpu,
							 uint64_t pages, bool big, size_t align,
							 bool *zero, uint64_t tag)
{
	/* Shard lock held on entry, released on return. */
	unsigned state;
	uint64_t resident;
	bool kind = big;
	uintptr_t a = carve_resident_locked(s, &kind, pages, align, &state, &resident);
	if (a)
		return carve_finish(s, cpu, a, pages, kind, state, resident, zero, tag);
	if (vmap_nshards > 1) {
		/* Bounded on many-CPU machines: the next STEAL_SCAN shards are
		 * looked at (one cache line each), STEAL_TRIES of them locked. */
		enum { STEAL_SCAN = 16, STEAL_TRIES = 4 };
		unsigned tries = 0;
		vmap_shard_unlock(s);
		for (unsigned i = 1; i < vmap_nshards && i <= STEAL_SCAN && tries < STEAL_TRIES; i++) {
			struct vmap_shard *o = &vmap_shards[(s->id + i) % vmap_nshards];
			if (__atomic_load_n(&o->cached_bytes, __ATOMIC_RELAXED) <
			    pages << VMAP_PAGE_SHIFT) /* a hint: too little to fit */
				continue;
			tries++;
			vmap_shard_lock(o);
			kind = big;
			a = carve_resident_locked(o, &kind, pages, align, &state, &resident);
			if (a) {
				vmap_stat_add_cpu(cpu, VMAP_STAT_run_steals, 1);
				return carve_finish(o, cpu, a, pages, kind, state, resident, zero, tag);
			}
			vmap_shard_unlock(o);
		}
		vmap_shard_lock(s);
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		kind = big;
		a = carve_locked(s, &kind, pages, align, &state, &resident, false);
		if (a)
			return carve_finish(s, cpu, a, pages, kind, state, resident, zero, tag);
		vmap_shard_unlock(s);
		if (attempt == 1)
			vmap_range_purge(true); /* arena full: give everything back, retry */
		uint64_t need = pages + (align >> VMAP_PAGE_SHIFT);
		size_t nchunks = (size_t)((need + VMAP_CHUNK_PAGES - 1) / VMAP_CHUNK_PAGES);
		uintptr_t c = chunks_acquire(s, big, nchunks);
		vmap_shard_lock(s);
		if (c)
			vmap_free_insert_locked(s, c, (uint64_t)nchunks * VMAP_CHUNK_PAGES, VMAP_RUN_ZERO,
						big, 0);
	}
	vmap_shard_unlock(s);
	return NULL;
}

/* After large_bytes_in_use grew: in atomic mode the peak is noted here, from
 * the base and this thread's unfolded delta.  Per-CPU mode notes it at folds,
 * which a block of tens of MiB that lives between two folds escapes: then the
 * purge's limit, which may grow to twice the peak, stayed at its start and
 * every free of such a block purged it (bench/large realloc: one 64 MiB
 * purge and refault per growth cycle, 130-600 ops/s against 18 000 when a
 * fold happened to see it).  Blocks of 8 MiB and more (rare, and costing
 * thousands of page touches each) read the counter exactly. */
static inline void note_peak(uint64_t pages)
{
	if (!vmap_counter_slots)
		vmap_stat_note_peak(vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
				    vmap_local.n[VMAP_STAT_large_bytes_in_use]);
	else if (pages >= (8u << 20) >> VMAP_PAGE_SHIFT)
		vmap_stat_note_peak(vmap_stat_read(VMAP_STAT_large_bytes_in_use));
}

void *vmap_range_alloc(size_t size, size_t align, bool *zero)
{
	bool big;
	unsigned cpu = 0;
	uint64_t pages = area_pages(size, &big);
	if (!pages || !vmap_nregions)
		return NULL;
	size_t natural = big ? VMAP_BIG_MIN : VMAP_PAGE;
	if (align < natural)
		align = natural;
	void *p;
	uintptr_t a = 0;
	enum vmap_stat from = VMAP_STAT_thread_cached_bytes;
	/* The thread's cache first: a hit needs neither the CPU nor a lock. */
	bool cacheable = pages <= vmap_pool_exact && align == natural;
	if (cacheable)
		a = vmap_cache_pop(&pages); /* may be a near fit: pages grows */
	struct vmap_shard *s = NULL;
	if (!a) {
		s = vmap_shard_here(&cpu);
		if (cacheable)
			a = vmap_cache_refill(s, pages);
		if (!a && cacheable)
			a = vmap_cache_grow_hot(&pages); /* pages: the hot area's, grown */
	}
	if (!a && pages <= vmap_pool_exact) {
		from = VMAP_STAT_cached_bytes;
		if (__atomic_load_n(&s->pool[pages].count, __ATOMIC_RELAXED)) { /* a hint */
			/* Aligned requests take the pool head only if it happens to
			 * be aligned (the kernel's vmap pools do the same). */
			vmap_shard_lock(s);
			uintptr_t h = s->pool[pages].head;
			if (h && !(h & (align - 1))) {
				a = h;
				vmap_pool_remove_locked(s, (unsigned)pages, a);
			}
			vmap_shard_unlock(s);
		}
	}
	if (a) {
		/* A pooled area: resident, dirty, exactly this size. */
		struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
		publish_live(e, vmap_tag_shard(e->tag), pages, big);
		vmap_stat_add_local(VMAP_STAT_pool_hits, 1);
		if (from == VMAP_STAT_thread_cached_bytes) /* (the purge does not read it) */
			vmap_stat_add_local(from, -(int64_t)(pages << VMAP_PAGE_SHIFT));
		else
			vmap_stat_add_cpu(cpu, from, -(int64_t)(pages << VMAP_PAGE_SHIFT));
		*zero = false;
		p = (void *)a;
	} else {
		vmap_shard_lock(s);
		p = vmap_alloc_carve(s, cpu, pages, big, align, zero, 0);
		if (!p)
			return NULL;
	}
	int64_t usable = (int64_t)((pages - 1) << VMAP_PAGE_SHIFT);
	vmap_stat_add_local(VMAP_STAT_large_allocs, 1);
	vmap_stat_add_local(VMAP_STAT_large_blocks_in_use, 1);
	vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, usable);
	vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, usable);
	note_peak(pages);
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	return p;
}

__attribute__((noinline, cold, noreturn)) static void invalid_pointer(const char *who,
								     const void *p,
								     uint64_t tag)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_invalid_pointer(&b, who, p);
	unsigned st = vmap_tag_state(tag);
	if (st == VMAP_ST_CACHED || st == VMAP_ST_PURGING || st == VMAP_ST_FREE)
		vmap_buf_str(&b, " (double free: the block was already freed)");
	else
		vmap_buf_str(&b, " (not the start of a live block: interior pointer or double free?)");
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
	vmap_os_abort();
}

/* The pte of a live block start (and, when region is not NULL, its
 * region), or stop the program naming `who`. */
static struct vmap_pte *live_pte(const void *p, const char *who, uint64_t *tag,
				 struct vmap_region **region)
{
	struct vmap_pte_ref ref;
	if (!vmap_pte_lookup((uintptr_t)p, VMAP_PTE_LIVE, &ref))
		invalid_pointer(who, p, ref.tag);
	*tag = ref.tag;
	if (region)
		*region = ref.region;
	return ref.pte;
}

/* The counters of a large block freed (its usable bytes: all but the guard). */
static void count_large_free(int64_t usable)
{
	vmap_stat_add_local(VMAP_STAT_large_frees, 1);
	vmap_stat_add_local(VMAP_STAT_large_blocks_in_use, -1);
	vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, -usable);
}

static __thread uint32_t vmap_cached_frees;

/*
 * A freed area with a resident free run of its shard and kind just before or
 * after it (tags read without the lock: a hint).  Such an area goes to the
 * free runs at once, past the thread cache and the exact-size pools: merged,
 * it serves any size, where kept whole it waits for its own size while the
 * run beside it stays too small for the larger requests, which then take
 * fresh memory.  Repeated sizes are unaffected: their neighbours are live
 * or pooled areas, not free runs.  (bench random, 64 KiB-4 MiB, 0.3 s:
 * 26-35k page faults with the pools, 19-20k without them.)
 */
static bool beside_resident_run(struct vmap_region *r, struct vmap_pte *e, uintptr_t a,
				uint64_t pages, uint64_t t)
{
	unsigned shard = vmap_tag_shard(t);
	bool big = t & VMAP_TAG_BIG;
	if (a > r->base) {
		uint64_t lt = __atomic_load_n(&e[-1].tag, __ATOMIC_RELAXED);
		unsigned st = vmap_tag_state(lt);
		if ((st == VMAP_ST_FREE_TAIL || (st == VMAP_ST_FREE && vmap_tag_pages(lt) == 1)) &&
		    run_mergeable(lt, shard, big, VMAP_RUN_DIRTY))
			return true;
	}
	if (a + (pages << VMAP_PAGE_SHIFT) < r->base + r->size) {
		uint64_t rt = __atomic_load_n(&e[pages].tag, __ATOMIC_RELAXED);
		if (vmap_tag_state(rt) == VMAP_ST_FREE && run_mergeable(rt, shard, big, VMAP_RUN_DIRTY))
			return true;
	}
	return false;
}

void vmap_range_free(void *p, const char *who)
{
	uint64_t t;
	struct vmap_region *r;
	struct vmap_pte *e = live_pte(p, who, &t, &r);
	uint64_t pages = vmap_tag_pages(t);
	uint64_t cached = vmap_tag_make(VMAP_ST_CACHED, vmap_tag_shard(t), pages, t & VMAP_TAG_BIG);
	if (!__atomic_compare_exchange_n(&e->tag, &t, cached, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		invalid_pointer(who, p, t); /* lost a race with another free of p */
	struct vmap_shard *owner = &vmap_shards[vmap_tag_shard(t)];
	int64_t bytes = (int64_t)(pages << VMAP_PAGE_SHIFT);
	bool to_runs = pages > vmap_pool_exact ||
		       (!vmap_guard_on && beside_resident_run(r, e, (uintptr_t)p, pages, t));
	if (__builtin_expect(!(t & VMAP_TAG_ATTR), 1) && !to_runs &&
	    vmap_cache_push(owner, (uintptr_t)p, pages)) {
		/* In this thread's cache: outside the purge's reach and budget; no
		 * CPU number, clock or lock needed.  The age purge is looked at on
		 * every 64th such free (it is looked at on every other free). */
		count_large_free(bytes - (int64_t)VMAP_PAGE);
		vmap_stat_add_local(VMAP_STAT_thread_cached_bytes, bytes);
		if (!(++vmap_cached_frees & 63))
			vmap_purge_maybe(vmap_os_now_ns());
		return;
	}
	unsigned cpu;
	vmap_shard_here(&cpu);
	uint64_t now = vmap_os_now_ns();
	if (__builtin_expect(t & VMAP_TAG_ATTR, 0)) {
		/* The program changed this block's protection or advice (a guard
		 * page under a thread stack, MADV_DONTFORK...): a fresh mapping over
		 * it restores plain read-write memory, zero-filled. */
		if (!vmap_os_map_fresh(p, (size_t)bytes)) {
			vmap_shard_lock(owner);
			vmap_chunks_give_back_locked(
				owner, vmap_free_insert_locked(owner, (uintptr_t)p, pages, VMAP_RUN_ZERO,
							       t & VMAP_TAG_BIG, now));
			vmap_shard_unlock(owner);
			count_large_free(bytes - (int64_t)VMAP_PAGE);
			return;
		}
		/* Could not reset it: keep it out of circulation rather than hand
		 * out memory with the wrong protection (counted as still in use). */
		return;
	}
	if (to_runs) {
		/* Larger areas (and those beside a resident run) become a
		 * resident free run, merged with its free neighbours, reusable
		 * by any size. */
		guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE);
		vmap_shard_lock(owner);
		vmap_free_insert_locked(owner, (uintptr_t)p, pages, VMAP_RUN_DIRTY, t & VMAP_TAG_BIG, now);
		vmap_shard_unlock(owner);
	} else {
		vmap_shard_lock(owner);
		/* A pool holds a few areas of its size (16/8/4 like the thread
		 * caches); more would sit unused when sizes vary, while in the
		 * runs they merge and serve any size. */
		vmap_area_park_locked(owner, e, (uintptr_t)p, now);
		vmap_shard_unlock(owner);
	}
	count_large_free(bytes - (int64_t)VMAP_PAGE);
	vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes, bytes);
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	vmap_purge_maybe(now);
}

size_t vmap_range_usable(const void *p, const char *who)
{
	uint64_t t;
	live_pte(p, who, &t, NULL);
	return (size_t)((vmap_tag_pages(t) - 1) << VMAP_PAGE_SHIFT);
}

bool vmap_range_owns(const void *p)
{
	return vmap_region_of((uintptr_t)p) != NULL;
}

bool vmap_range_resize(void *p, size_t size)
{
	uint64_t t;
	struct vmap_pte *e = live_pte(p, "realloc", &t, NULL);
	uint64_t pages = vmap_tag_pages(t);
	if (size > ((size_t)1 << 46))
		return false;
	uint64_t want = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	if (want <= pages)
		return true; /* fits already; the caller decides whether shrinking should move */
	bool big = t & VMAP_TAG_BIG;
	if (!big && vmap_opt.hugepage && (want - 1) << VMAP_PAGE_SHIFT >= vmap_opt.hugepage_min)
		return false; /* growing into the big kind: move to a THP-friendly chunk */
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	uintptr_t end = (uintptr_t)p + (pages << VMAP_PAGE_SHIFT);
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	bool done = false;
	vmap_shard_lock(s);
	if (end < r->base + r->size) {
		struct vmap_pte *re = vmap_pte_of(r, end);
		/* Atomic: a free of the neighbour CASes LIVE to CACHED without
		 * the lock (either value is not FREE: the same decision). */
		uint64_t rt = __atomic_load_n(&re->tag, __ATOMIC_RELAXED), rp = vmap_tag_pages(rt);
		/* A guarded neighbour is unguarded first (under the lock: one
		 * madvise): if that fails, no growth, nothing changed. */
		if (vmap_tag_state(rt) == VMAP_ST_FREE && vmap_tag_shard(rt) == s->id &&
		    !!(rt & VMAP_TAG_BIG) == big && pages + rp >= want &&
		    vmap_tag_run_state(rt) != VMAP_RUN_PROTECTED &&
		    (vmap_tag_run_state(rt) != VMAP_RUN_GUARDED || !vmap_unguard(end, want - pages))) {
			uint64_t stamp = re->stamp;
			unsigned rs = vmap_tag_run_state(rt);
			vmap_run_take_locked(s, re, rt);
			uint64_t extra = want - pages;
			if (rp > extra)
				vmap_run_set_locked(s, r, end + (extra << VMAP_PAGE_SHIFT), rp - extra, rs, big,
					       stamp);
			if (rs == VMAP_RUN_DIRTY || rs == VMAP_RUN_PROTECTED)
				vmap_stat_add_cpu(s->id, VMAP_STAT_cached_bytes,
						  -(int64_t)(extra << VMAP_PAGE_SHIFT));
			__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_LIVE, s->id, want, t & VMAP_TAG_BIG),
					 __ATOMIC_RELEASE);
			done = true;
			int64_t grown = (int64_t)(extra << VMAP_PAGE_SHIFT);
			vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, grown);
			note_peak(want); /* (the purge's limit grows up to twice the peak) */
			vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, grown);
		}
	}
	vmap_shard_unlock(s);
	if (done && vmap_guard_on) {
		guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE);
		guard_page((uintptr_t)p, want, MADV_GUARD_INSTALL);
	}
	return done;
}

/*
 * Undoing a move that failed part way.  Since Linux 6.17 mremap moves a
 * source made of several VMAs one VMA at a time, and near vm.max_map_count
 * it can fail after the first pieces have moved: their pages are in q, their
 * old range is empty (MREMAP_DONTUNMAP) or unmapped, and the destination of
 * the piece that failed may be unmapped too.  Nothing says where the pieces
 * end; but if q read zero before the move, every page is in exactly one of p
 * and q, the other reading zero, so ORing q into p page by page puts every
 * byte back in p.  Pages of p still resident never moved (moving empties the
 * source) and are skipped.  Holes in p and q are mapped again (NOREPLACE:
 * another thread's mapping may have taken a hole since).  Returns 0 when p
 * holds its content and q is whole again, 1 when p does but part of q could
 * not be mapped again, -1 when a hole in p could not be refilled (its pages
 * stay in q, which the caller must then keep).
 */
#define UNDO_PAGES 256 /* pages per mincore call */
#define UNDO_HOLE 2    /* vec mark: not mapped */

static void undo_residency(uintptr_t a, size_t n, unsigned char *vec)
{
	if (vmap_os_mincore((void *)a, n << VMAP_PAGE_SHIFT, vec) == 0) {
		for (size_t i = 0; i < n; i++)
			vec[i] &= 1;
		return;
	}
	for (size_t i = 0; i < n; i++) /* something is unmapped: page by page */
		if (vmap_os_mincore((void *)(a + (i << VMAP_PAGE_SHIFT)), VMAP_PAGE, &vec[i]) == 0)
			vec[i] &= 1;
		else
			vec[i] = UNDO_HOLE;
}

/* Maps every run of holes in vec again; false if one could not be. */
static bool undo_refill(uintptr_t a, size_t n, const unsigned char *vec)
{
	bool ok = true;
	for (size_t i = 0; i < n;) {
		if (vec[i] != UNDO_HOLE) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && vec[j] == UNDO_HOLE)
			j++;
		if (vmap_os_map_hole((void *)(a + (i << VMAP_PAGE_SHIFT)), (j - i) << VMAP_PAGE_SHIFT))
			ok = false;
		i = j;
	}
	return ok;
}

int vmap_move_undo(void *p, void *q, size_t len)
{
	unsigned char pv[UNDO_PAGES], qv[UNDO_PAGES];
	size_t pages = len >> VMAP_PAGE_SHIFT;
	bool p_ok = true, q_ok = true;
	for (size_t at = 0; at < pages; at += UNDO_PAGES) {
		size_t n = pages - at < UNDO_PAGES ? pages - at : UNDO_PAGES;
		uintptr_t pa = (uintptr_t)p + (at << VMAP_PAGE_SHIFT);
		uintptr_t qa = (uintptr_t)q + (at << VMAP_PAGE_SHIFT);
		undo_residency(pa, n, pv);
		undo_residency(qa, n, qv);
		bool refilled = undo_refill(pa, n, pv);
		p_ok &= refilled;
		for (size_t i = 0; i < n; i++) {
			if (pv[i] == 1 || qv[i] == UNDO_HOLE || (pv[i] == UNDO_HOLE && !refilled))
				continue;
			uint64_t *d = (uint64_t *)(pa + (i << VMAP_PAGE_SHIFT));
			const uint64_t *src = (const uint64_t *)(qa + (i << VMAP_PAGE_SHIFT));
			for (size_t w = 0; w < VMAP_PAGE / sizeof(uint64_t); w++)
				if (src[w])
					d[w] |= src[w];
		}
		q_ok &= undo_refill(qa, n, qv);
	}
	return !p_ok ? -1 : !q_ok;
}

/* Retires q, a fresh area the caller will not get (part of it could not be
 * mapped again): foreign (mmap.c) = out of circulation, no longer a live
 * block, ours again if the program ever munmaps it. */
static void retire_destination(void *q)
{
	struct vmap_pte *qe = vmap_pte_of(vmap_region_of((uintptr_t)q), (uintptr_t)q);
	uint64_t qt = __atomic_load_n(&qe->tag, __ATOMIC_ACQUIRE);
	struct vmap_shard *qs = &vmap_shards[vmap_tag_shard(qt)];
	unsigned qcpu = vmap_os_cpu();
	vmap_shard_lock(qs);
	__atomic_store_n(&qe->tag,
			 vmap_tag_make(VMAP_ST_FOREIGN, qs->id, vmap_tag_pages(qt), qt & VMAP_TAG_BIG),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(qs);
	vmap_stat_add_cpu(qcpu, VMAP_STAT_large_blocks_in_use, -1);
	vmap_stat_add_cpu(qcpu, VMAP_STAT_large_bytes_in_use,
			  -(int64_t)((vmap_tag_pages(qt) - 1) << VMAP_PAGE_SHIFT));
}

/* The VMAs a move left in a's chunk (see vmap_moves): up to two more on
 * each side (the source's VMA split around the range it keeps; the moved
 * VMA and the split of the one it landed in). */
static void count_move(uintptr_t a)
{
	struct vmap_region *r = vmap_region_of(a);
	if (r)
		__atomic_add_fetch(&r->chunk_moves[(a - r->base) >> VMAP_CHUNK_SHIFT], 2,
				   __ATOMIC_RELAXED);
	__atomic_add_fetch(&vmap_moves, 2, __ATOMIC_RELAXED);
}

bool vmap_moves_allowed(void)
{
	return __atomic_load_n(&vmap_moves, __ATOMIC_RELAXED) + 4 <= vmap_vma_budget() / 2;
}

void vmap_moves_count(uintptr_t from, uintptr_t to)
{
	count_move(from);
	count_move(to);
}

void *vmap_range_move(void *p, size_t size, bool *moved)
{
	uint64_t t;
	struct vmap_pte *e = live_pte(p, "realloc", &t, NULL);
	uint64_t pages = vmap_tag_pages(t);
	size_t old_usable = (size_t)((pages - 1) << VMAP_PAGE_SHIFT);
	bool zero;
	void *q = vmap_range_alloc(size, VMAP_PAGE, &zero);
	*moved = false;
	if (!q)
		return NULL;
	/* Each move leaves the moved pages in a VMA of their own (the kernel
	 * keeps their old page offset, so it cannot merge them back) until
	 * their chunk goes back to the arena: bound them so that a
	 * realloc-heavy program stays far from vm.max_map_count, an eighth of
	 * it (vmap_vma_budget); past the budget, copy. */
	if (!vmap_moves_allowed())
		return q;
	/* Move the page tables, not the bytes; the old range stays mapped (and
	 * empty, hence zero) thanks to MREMAP_DONTUNMAP, so the arena keeps no
	 * hole another mapping could take.  The guard page moves too: an area
	 * carved from a resident run may have stale bytes there, and the whole
	 * old range is about to be declared zero.  q's usable part holds it,
	 * since size > old_usable. */
	size_t span = (size_t)(pages - vmap_guard_on) << VMAP_PAGE_SHIFT;
	/* A move that fails part way is undone by merging q back into p, which
	 * needs q to read zero where nothing moved (vmap_move_undo). */
	if (__atomic_load_n(&vmap_moves_refused, __ATOMIC_RELAXED))
		return q; /* a kernel before 5.7: copy */
	if (!zero && vmap_os_madvise(q, span, MADV_DONTNEED))
		return q; /* (cannot happen to an arena area: then copy) */
	void *m = vmap_os_mremap(p, span, span, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, q);
	if (vmap_os_is_err(m) && vmap_os_err(m) == EINVAL) {
		/* The arguments are checked before anything moves: this kernel
		 * does not know MREMAP_DONTUNMAP.  Copy, now and from now on. */
		__atomic_store_n(&vmap_moves_refused, true, __ATOMIC_RELAXED);
		return q;
	}
	if (!vmap_os_is_err(m))
		guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE); /* marker gone: reads zero */
	if (vmap_os_is_err(m)) {
		/* Nothing moved (EFAULT before Linux 6.17 for a source of several
		 * VMAs; no MREMAP_DONTUNMAP before 5.7), or near vm.max_map_count
		 * some pieces did: either way p gets all its bytes back, and the
		 * caller copies them into q.  DONTUNMAP leaves p mapped, so only q
		 * can have holes; if one cannot be mapped again (the VMA limit),
		 * q is retired and the caller gets NULL. */
		if (vmap_move_undo(p, q, span) != 0) {
			retire_destination(q);
			return NULL;
		}
		return q; /* caller copies and frees p */
	}
	count_move((uintptr_t)p);
	count_move((uintptr_t)q);
	/* p is now zero-filled address space: straight back to free space. */
	bool big = t & VMAP_TAG_BIG;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	unsigned cpu = vmap_os_cpu();
	vmap_shard_lock(s);
	__atomic_store_n(&e->tag, 0, __ATOMIC_RELAXED);
	vmap_chunks_give_back_locked(s, vmap_free_insert_locked(s, (uintptr_t)p, pages, VMAP_RUN_ZERO,
								big, 0));
	vmap_shard_unlock(s);
	count_large_free((int64_t)old_usable);
	vmap_stat_add_cpu(cpu, VMAP_STAT_realloc_moved_pages, 1);
	*moved = true;
	return q;
}

/* ---- init, fork -------------------------------------------------------- */

static size_t fit_reservation(size_t want)
{
	uint64_t cur, max;
	if (vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) != 0 || cur == UINT64_MAX)
		return want;
	/* Leave the program at least three quarters of what is left. */
	uint64_t vsize = proc_vsize();
	uint64_t avail = cur > vsize ? cur - vsize : 0;
	uint64_t fit = (avail / 4) & ~(uint64_t)(VMAP_CHUNK - 1);
	return fit < want ? (size_t)fit : want;
}

int vmap_range_init(void)
{
	static struct vmap_lock_set shard_locks = {"shards", VMAP_RANK_SHARD, NULL,
						   sizeof(struct vmap_shard), &vmap_nshards};
	static const struct vmap_lock_set global_locks = {"arena", VMAP_RANK_GLOBAL,
							  &vmap_global_lock, 0, NULL};
	vmap_purge_register_locks();
	vmap_lock_register(&global_locks);
	unsigned ncpu = vmap_os_ncpu();
	unsigned n = vmap_opt.shards ? (unsigned)vmap_opt.shards : ncpu;
	if (n > VMAP_MAX_SHARDS)
		n = VMAP_MAX_SHARDS;
	n = n ? n : 1;
	/* POOL_PAGES counts usable pages; areas carry one more, the guard. */
	vmap_pool_exact = vmap_opt.pool_pages + 1;
	vmap_lazy_max = vmap_opt.lazy_max ? vmap_opt.lazy_max
					  : (uint64_t)(log2_floor(ncpu) + 1) * (32u << 20);
	vmap_lazy_limit = vmap_lazy_max;
	vmap_counter_set_batch(vmap_lazy_max);
	vmap_shards_bytes = ((size_t)n * sizeof(struct vmap_shard) + VMAP_PAGE - 1) &
			    ~(VMAP_PAGE - 1);
	void *sh = vmap_os_mmap(NULL, vmap_shards_bytes, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (vmap_os_is_err(sh))
		return vmap_os_err(sh); /* (no shards: nothing for fork or purge to walk) */
	vmap_shards = sh;
	for (unsigned i = 0; i < n; i++)
		vmap_shards[i].id = i;
	shard_locks.first = &vmap_shards[0].lock;
	vmap_lock_register(&shard_locks);
	__atomic_store_n(&vmap_nshards, n, __ATOMIC_RELEASE);
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)vmap_shards_bytes);
	vmap_reserve_size = fit_reservation(vmap_opt.reserve);
	if (vmap_reserve_size < REGION_FLOOR)
		return -ENOMEM;
	int rc = region_add(vmap_reserve_size, REGION_FLOOR);
	if (rc)
		return rc;
	vmap_moves_refused = false;
	vmap_guard_on = vmap_opt.guard && vmap_guard_markers();
	if (vmap_opt.guard && !vmap_guard_on)
		vmap_say("VMAPALLOC_GUARD=1 needs MADV_GUARD_INSTALL (Linux 6.13 or later); ",
			 "guard gaps stay in place but do not trap", NULL);
	return 0;
}

void vmap_range_flush_cached(void)
{
	vmap_cache_trim();
	for (unsigned i = 0; i < vmap_nshards; i++) {
		vmap_shard_lock(&vmap_shards[i]);
		pools_to_runs_locked(&vmap_shards[i]);
		vmap_shard_unlock(&vmap_shards[i]);
	}
}

bool vmap_range_is_metadata(uintptr_t a, uintptr_t e)
{
	for (unsigned i = 0; i < vmap_nregions; i++) {
		uintptr_t m = (uintptr_t)vmap_regions[i].pt;
		uintptr_t me = m + vmap_regions[i].pt_bytes + vmap_regions[i].owner_bytes;
		if (a < me && e > m)
			return true;
	}
	uintptr_t sh = (uintptr_t)vmap_shards;
	return sh && a < sh + vmap_shards_bytes && e > sh;
}

unsigned vmap_range_nshards(void)
{
	return vmap_nshards;
}


/* ---- set-up on first use ------------------------------------------------ */

/*
 * The arena, the shards and the thread caches are set up on the first request
 * that needs them (a large block, a servable mmap), not at init: a process
 * that makes only small allocations -- most processes of a shell script or a
 * build -- reserves nothing, maps no shard and makes none of the set-up's
 * system calls (bench/startup.py: issue 5).
 */
int vmap_range_state VMAP_HOT;
bool vmap_range_ok VMAP_HOT;
size_t vmap_large_above VMAP_HOT;
static __thread bool vmap_tls_in_range_setup;

__attribute__((noinline, cold)) bool vmap_range_setup_slow(void)
{
	if (vmap_tls_in_range_setup)
		return false; /* re-entered (a signal handler) during the set-up: glibc */
	int expected = VMAP_RANGE_NONE;
	if (__atomic_compare_exchange_n(&vmap_range_state, &expected, VMAP_RANGE_BUSY, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		vmap_tls_in_range_setup = true;
		bool ok = vmap_range_init() == 0;
		if (ok) {
			vmap_cache_init(vmap_os_ncpu());
			/* Its set-up paid for, the arena takes all it is best at. */
			__atomic_store_n(&vmap_large_above, vmap_opt.small_max, __ATOMIC_RELAXED);
		} else {
			vmap_say("could not reserve an arena (the system refused even 256 MiB); ",
				 "large allocations go to glibc", NULL);
		}
		__atomic_store_n(&vmap_range_ok, ok, __ATOMIC_RELEASE);
		__atomic_store_n(&vmap_range_state, VMAP_RANGE_DONE, __ATOMIC_RELEASE);
		vmap_tls_in_range_setup = false;
		return ok;
	}
	while (__atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) != VMAP_RANGE_DONE)
		vmap_os_yield();
	return __atomic_load_n(&vmap_range_ok, __ATOMIC_ACQUIRE);
}

void vmap_range_refuse(void)
{
	vmap_range_ok = false;
	__atomic_store_n(&vmap_range_state, VMAP_RANGE_DONE, __ATOMIC_RELEASE);
	vmap_large_above = SIZE_MAX;
}

void vmap_range_setup_wait(void)
{
	while (!vmap_tls_in_range_setup &&
	       __atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == VMAP_RANGE_BUSY)
		vmap_os_yield();
}

/* ---- debug model check --------------------------------------------------- */

__attribute__((noreturn)) static void check_fail(const char *what, uintptr_t a)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_str(&b, "vmapalloc: internal check failed: ");
	vmap_buf_str(&b, what);
	vmap_buf_str(&b, " at ");
	vmap_buf_hex(&b, a);
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
	vmap_os_abort();
}

/*
 * The slow, obvious model: walk every page of every claimed chunk in address
 * order; areas and free runs must tile each chunk run exactly, tags must sit
 * only at heads (and free tails), adjacent free runs that could merge must
 * have been merged, every free run must be on the bin list its tag names,
 * every pooled area on its pool, and the shard's page and byte counts must
 * equal what the walk finds.  O(arena pages): unit tests only, one thread.
 */
void vmap_range_check(void)
{
	static uint64_t freed[VMAP_MAX_SHARDS][VMAP_RUN_LISTS], dirty_bytes[VMAP_MAX_SHARDS];
	uint64_t pooled = 0;
	for (unsigned i = 0; i < vmap_nshards; i++) {
		dirty_bytes[i] = 0;
		for (unsigned k = 0; k < VMAP_RUN_LISTS; k++)
			freed[i][k] = 0;
	}
	for (unsigned i = 0; i < vmap_nregions; i++) {
		struct vmap_region *r = &vmap_regions[i];
		uintptr_t a = r->base, end = r->base + r->size;
		uint64_t prev_free = UINT64_MAX;
		while (a < end) {
			size_t c = (a - r->base) >> VMAP_CHUNK_SHIFT;
			if (vmap_chunk_is_free(r->chunk_owner[c])) {
				a = r->base + ((c + 1) << VMAP_CHUNK_SHIFT);
				prev_free = UINT64_MAX;
				continue;
			}
			struct vmap_pte *e = vmap_pte_of(r, a);
			uint64_t t = e->tag, n = vmap_tag_pages(t);
			unsigned st = vmap_tag_state(t), sh = vmap_tag_shard(t);
			if (st == VMAP_ST_NONE || st == VMAP_ST_FREE_TAIL || n == 0)
				check_fail("no head tag where an area or free run must start", a);
			if (sh + 1u != (r->chunk_owner[c] & 0x7fffu))
				check_fail("area owner differs from chunk owner", a);
			for (uint64_t k = 1; k < n; k++) {
				uint64_t kt = e[k].tag;
				bool tail_ok = st == VMAP_ST_FREE && k == n - 1 &&
					       vmap_tag_state(kt) == VMAP_ST_FREE_TAIL;
				if (kt && !tail_ok)
					check_fail("stray tag inside an area", a + (k << VMAP_PAGE_SHIFT));
			}
			bool big = t & VMAP_TAG_BIG;
			unsigned rs = vmap_tag_run_state(t);
			/* (zero and guarded runs merge too: states_merge) */
			unsigned ms = rs == VMAP_RUN_GUARDED ? VMAP_RUN_ZERO : rs;
			uint64_t key = (uint64_t)sh * VMAP_RUN_LISTS + list_of(big, ms);
			if (st == VMAP_ST_FREE) {
				if (prev_free == key)
					check_fail("two adjacent free runs were not merged", a);
				prev_free = key;
				freed[sh][list_of(big, rs)] += n;
				if (rs == VMAP_RUN_DIRTY || rs == VMAP_RUN_PROTECTED)
					dirty_bytes[sh] += n << VMAP_PAGE_SHIFT;
				bool listed = false;
				for (uintptr_t x = vmap_shards[sh].free_bin[list_of(big, rs)][bin_of(n)]; x;
				     x = vmap_pte_of(vmap_region_of(x), x)->next)
					if (x == a)
						listed = true;
				if (!listed)
					check_fail("free run missing from its bin", a);
			} else {
				prev_free = UINT64_MAX;
			}
			if (st == VMAP_ST_CACHED)
				pooled += n;
			a += n << VMAP_PAGE_SHIFT;
		}
	}
	uint64_t pool_pages = 0;
	for (unsigned i = 0; i < vmap_nshards; i++) {
		struct vmap_shard *s = &vmap_shards[i];
		uint64_t shard_pool_bytes = 0;
		for (unsigned k = 0; k < VMAP_RUN_LISTS; k++)
			if (freed[i][k] != s->free_pages[k])
				check_fail("free-page count of a shard disagrees with the walk", i);
		for (unsigned c = 0; c < VMAP_NCLASSES; c++) {
			uint32_t cnt = 0;
			for (uintptr_t a = s->pool[c].head; a; a = vmap_pte_of(vmap_region_of(a), a)->next) {
				uint64_t t = vmap_pte_of(vmap_region_of(a), a)->tag;
				if (vmap_tag_state(t) != VMAP_ST_CACHED || vmap_tag_pages(t) != c)
					check_fail("pooled area with a wrong tag or size", a);
				pool_pages += c;
				shard_pool_bytes += (uint64_t)c << VMAP_PAGE_SHIFT;
				cnt++;
			}
			if (cnt != s->pool[c].count)
				check_fail("pool count disagrees with its list", c);
		}
		if (s->pool_bytes != shard_pool_bytes)
			check_fail("pooled bytes of a shard disagree with its pools", i);
		if (s->cached_bytes != shard_pool_bytes + dirty_bytes[i])
			check_fail("cached bytes of a shard disagree with its pools and dirty runs", i);
	}
	if (pool_pages + vmap_cache_pages_held() != pooled)
		check_fail("cached areas missing from pools", pooled);
}
