/*
 * arena.c — the arena: its regions, the 64 MiB chunks shards claim from it,
 * the address-space limits (RLIMIT_AS, the VMA budget) and the shards.
 *
 * The arena is reserved once (PROT_NONE + NORESERVE, 64 MiB aligned); a chunk
 * is made read-write when a shard claims it, so that no overcommit mode
 * charges the reservation:
 *
 *   arena region
 *   +----------+----------+----------+----------+---- ... ----+
 *   | chunk    | chunk    | chunk    | free     |             |
 *   | shard 0  | shard 1  | shard 0  | (global) |             |
 *   | small    | small    | big/THP  |          |             |
 *   +----------+----------+----------+----------+---- ... ----+
 *   inside a chunk:  [area|g][area   |g][ free run ][area|g] ...
 *                     g = guard page: part of the area, never handed out
 *
 * Invariants:
 *  - A chunk goes back to the arena (owner 0, any shard may claim it) only
 *    when one zero or guarded free run covers it whole, after a purge, a
 *    move or at the trim: otherwise a program that frees everything on one
 *    CPU would leave the address space to that CPU's shard alone.
 *  - Areas of 2 MiB and more live in "big" chunks (2 MiB aligned, advised
 *    MADV_HUGEPAGE) so transparent huge pages can back them; small areas never
 *    share a chunk with them, so THP cannot inflate small blocks.
 *  - Under a finite RLIMIT_AS, a claim of chunks keeps VmSize less the
 *    unclaimed reservation (vmap_unclaimed) within the limit, and a new
 *    region leaves a quarter of the limit outside the arena (as_room).
 *
 * Locks: vmap_global_lock (rank GLOBAL) protects the chunk maps and the
 * region list; it is taken only to hand out chunks (once per 64 MiB) and to
 * take whole ones back (under a shard lock: rank SHARD, then GLOBAL).
 */
#include "range_impl.h"

#include <string.h>

struct vmap_slab_index vmap_slab0 VMAP_HOT;
/* VMAs moved areas may have added: an upper bound, counted again from
 * /proc/self/maps when it nears the budget (move.c). */
uint64_t vmap_moves;

bool vmap_moves_left(void)
{
	return __atomic_load_n(&vmap_moves, __ATOMIC_RELAXED) != 0;
}
bool vmap_moves_refused; /* the kernel refused a move (EINVAL): realloc copies */
struct vmap_shard *vmap_shards;
unsigned vmap_nshards; /* 0 until the shards are mapped */
unsigned vmap_nshards_large;
bool vmap_mmap_apart = true;
uint64_t vmap_lazy_max;
struct vmap_lock vmap_global_lock = VMAP_LOCK_INIT;
uint64_t vmap_pool_exact;
size_t vmap_reserve_size;
size_t vmap_shards_bytes;
/* Arena address space no shard has claimed (global lock): reserved, so in
 * VmSize, but not in use by the program (see as_room). */
static uint64_t vmap_unclaimed;

void vmap_unclaimed_add(unsigned cpu, int64_t d)
{
	vmap_unclaimed += (uint64_t)d;
	vmap_stat_add_cpu(cpu, VMAP_STAT_unclaimed_bytes, d);
}


/* ---- regions and chunks ------------------------------------------------ */

int vmap_region_add(size_t want, size_t at_least)
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
		if (size / 2 < vmap_region_floor() || size / 2 < at_least)
			return vmap_os_err(base);
		size /= 2;
	}
	size_t pages = size >> VMAP_PAGE_SHIFT;
	size_t pt_bytes = ((pages * sizeof(struct vmap_pte) + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1)) +
			  VMAP_PAGE; /* (VMAP_PT_SHIFT) */
	size_t nchunks = size >> VMAP_CHUNK_SHIFT;
	size_t owner_bytes = (nchunks * sizeof(uint16_t) + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
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
	r->pt = (struct vmap_pte *)((char *)pt + VMAP_PT_SHIFT);
	r->chunk_owner = (uint16_t *)((char *)pt + pt_bytes);
	r->nchunks = nchunks;
	r->whole = size;
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
	vmap_unclaimed_add(0, (int64_t)size);
	vmap_stat_add_cpu(0, VMAP_STAT_regions, 1);
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)(size + pt_bytes + owner_bytes));
	return 0;
}


/* VmSize from /proc/self/statm (its first field, in pages). */
uint64_t vmap_proc_vsize(void)
{
	return vmap_os_read_number("/proc/self/statm") << VMAP_PAGE_SHIFT;
}

/*
 * The VMAs vmapalloc may add to the few its arena and tables take (the
 * arena, its tables, the THP-advised chunks): pages it moved with mremap
 * and pages the program unmapped that it keeps PROT_NONE for reuse each cut
 * the arena's VMA in up to three.  A program under glibc has a few dozen
 * mappings; one under vmapalloc should not have many more, since every fork
 * copies them and every page fault searches them.  VMAP_SPLIT_BUDGET, or a
 * quarter of vm.max_map_count if that is less (tests/reliability/REQUIREMENTS.md #28: far below
 * half of it, whatever the administrator set it to); read once at the first
 * use (three system calls), the kernel's default, 65530, if it cannot be
 * read.  Moves get two thirds of it (move.c), lazily unmapped pieces the
 * rest (mmap.c); past it, realloc copies and munmap drops the pages.
 */
#define VMAP_SPLIT_BUDGET 48
uint64_t vmap_vma_budget(void)
{
	static uint64_t budget;
	uint64_t b = __atomic_load_n(&budget, __ATOMIC_RELAXED);
	if (!b) {
		uint64_t max = vmap_os_read_number("/proc/sys/vm/max_map_count");
		b = (max ? max : 65530) / 4;
		b = b < VMAP_SPLIT_BUDGET ? b : VMAP_SPLIT_BUDGET;
		b = b ? b : 1;
		__atomic_store_n(&budget, b, __ATOMIC_RELAXED);
	}
	return b;
}

/*
 * RLIMIT_AS as the arena honours it.  The kernel charges the limit
 * against VmSize, which holds the arena's whole reservation, made once; a
 * limit the program lowers later would never be met, since claiming chunks
 * inside a reservation maps nothing.  What the program uses is VmSize minus
 * the reserved space no shard has claimed, and that is what a claim must fit
 * under.  A new region grows VmSize itself: it must fit in the kernel's
 * terms, and leave a quarter of the limit (as_headroom) to what is not the
 * arena — glibc's fallback for requests the arena refuses, thread stacks,
 * the program's other mappings — instead of filling the limit region by
 * region and leaving glibc nothing.  Claims need no headroom: they do
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
	 * region leaves free at init (vmap_fit_reservation) the other way round:
	 * the arena starts at a quarter of the room and grows to three. */
	return limit / 4;
}

struct vmap_as_room vmap_as_room_locked(void)
{
	vmap_lock_assert_held(&vmap_global_lock, VMAP_RANK_GLOBAL);
	uint64_t cur, max;
	struct vmap_as_room room = {UINT64_MAX, UINT64_MAX};
	if (vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) != 0 || cur == UINT64_MAX)
		return room;
	uint64_t vsize = vmap_proc_vsize();
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
 * Strict overcommit (vm.overcommit_memory=2) ignores MAP_NORESERVE: a
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
	/* The pages the chunks' entries lie on: the last one is the next
	 * chunk's first too (VMAP_PT_SHIFT), writable early. */
	int rc = vmap_os_mprotect((char *)vmap_region_tables(r) + first * each, n * each + VMAP_PAGE,
				  rw);
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

/* Makes chunks [first, first + n) of r, free, the shard's (its kind); false
 * if the system would not commit them.  Global lock held. */
bool vmap_chunks_take_locked(struct vmap_region *r, size_t first, size_t n, unsigned shard,
			       bool big, bool *unadvise)
{
	if (commit_chunks(r, first, n))
		return false;
	uint16_t owner = (uint16_t)((shard + 1) | (big ? 0x8000u : 0));
	for (size_t k = first; k < first + n; k++) {
		*unadvise |= !big && r->chunk_owner[k] == VMAP_CHUNK_WAS_BIG;
		__atomic_store_n(&r->chunk_owner[k], owner, __ATOMIC_RELEASE);
	}
	vmap_unclaimed_add(shard, -(int64_t)(n << VMAP_CHUNK_SHIFT));
	return true;
}

/* Transparent huge pages for claimed big chunks; none for small ones a big
 * claim left advised (THP would inflate small blocks; one more VMA, rare). */
void vmap_chunks_advise(uintptr_t a, size_t n, bool big, bool unadvise)
{
	if (big && vmap_opt.hugepage)
		vmap_os_madvise((void *)a, n << VMAP_CHUNK_SHIFT, MADV_HUGEPAGE);
	else if (unadvise)
		vmap_os_madvise((void *)a, n << VMAP_CHUNK_SHIFT, MADV_NOHUGEPAGE);
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
	vmap_lock_assert_held(&vmap_global_lock, VMAP_RANK_GLOBAL);
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
					*refused = !vmap_chunks_take_locked(r, first, n, shard, big,
									    unadvise);
					return *refused ? 0 : r->base + (first << VMAP_CHUNK_SHIFT);
				}
			}
		}
	return 0;
}

/* Maps the chunks of [first, first + n) that r lent (tight.c) again,
 * reserved as at the start (PROT_NONE), each run in one call, if nothing took
 * their place (MAP_FIXED_NOREPLACE; a kernel before 4.17 takes it for a hint,
 * and what it mapped elsewhere is unmapped again): free chunks from then on.
 * False when one could not be.  Global lock held. */
bool vmap_chunks_unlend_locked(struct vmap_region *r, size_t first, size_t n)
{
	vmap_lock_assert_held(&vmap_global_lock, VMAP_RANK_GLOBAL);
	for (size_t c = first, e; c < first + n; c = e) {
		for (e = c; e < first + n && r->chunk_owner[e] == VMAP_CHUNK_LENT;)
			e++;
		if (e == c) {
			e++;
			continue;
		}
		size_t bytes = (e - c) << VMAP_CHUNK_SHIFT;
		if (vmap_os_reserve_at((void *)(r->base + (c << VMAP_CHUNK_SHIFT)), bytes))
			return false;
		for (size_t k = c; k < e; k++)
			__atomic_store_n(&r->chunk_owner[k], 0, __ATOMIC_RELEASE);
		vmap_lent_chunks -= (unsigned)(e - c);
		if (!vmap_lent_chunks)
			__atomic_store_n(&r->whole, r->size, __ATOMIC_RELEASE);
		vmap_unclaimed_add(0, (int64_t)bytes);
		vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)bytes);
		vmap_stat_add_cpu(0, VMAP_STAT_lent_bytes, -(int64_t)bytes);
	}
	return true;
}

/* n chunks in a row, free or lent, for a claim that found no n free ones:
 * the lent ones taken back.  Global lock held. */
static bool unlend_locked(size_t n)
{
	if (!vmap_lent_chunks)
		return false;
	for (unsigned i = 0; i < vmap_nregions; i++) {
		struct vmap_region *r = &vmap_regions[i];
		size_t run = 0;
		for (size_t c = 0; c < r->nchunks; c++) {
			uint16_t o = r->chunk_owner[c];
			run = vmap_chunk_is_free(o) || o == VMAP_CHUNK_LENT ? run + 1 : 0;
			if (run == n) {
				if (vmap_chunks_unlend_locked(r, c + 1 - n, n))
					return true;
				run = 0;
			}
		}
	}
	return false;
}

static bool unused_state(unsigned st)
{
	return st == VMAP_RUN_ZERO || st == VMAP_RUN_GUARDED;
}

bool vmap_chunks_give_back_locked(struct vmap_shard *s, uintptr_t run)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	struct vmap_region *r = vmap_region_of(run);
	uint64_t t = vmap_pte_of(r, run)->tag;
	if (!unused_state(vmap_tag_run_state(t)))
		return false; /* the common case: one compare */
	/* Zero and guarded runs touch without merging (runs.c): the chunks a
	 * row of them covers go back as if one run covered them.  A row has
	 * three runs at most ([ zero | G | zero ]: a zero run between two
	 * guarded ones joins them); bounded all the same.
	 *
	 *   runs:    [ zero |  G  |  chunk  |  chunk  | zero ]
	 *   kept:    [ zero |G]                        [zero]   (free runs of s, their states)
	 *   given:            [ owner 0 | owner 0 ]            (tags all 0)
	 */
	enum { ROW_MAX = 8 };
	bool big = t & VMAP_TAG_BIG;
	unsigned st;
	uintptr_t start = run, end = run + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT), x;
	for (int i = 0; i < ROW_MAX && (x = vmap_run_before(s, r, start, big, &st)) && unused_state(st); i++)
		start = x;
	for (int i = 0; i < ROW_MAX && vmap_run_at(s, r, end, big, &st) && unused_state(st); i++)
		end += vmap_tag_pages(vmap_pte_of(r, end)->tag) << VMAP_PAGE_SHIFT;
	uintptr_t cs = (start + VMAP_CHUNK - 1) & ~(uintptr_t)(VMAP_CHUNK - 1);
	uintptr_t ce = end & ~(uintptr_t)(VMAP_CHUNK - 1);
	if (ce <= cs)
		return false;
	bool guarded = false;
	for (uintptr_t a = start; a < end; a += vmap_tag_pages(t) << VMAP_PAGE_SHIFT) {
		t = vmap_pte_of(r, a)->tag;
		uintptr_t b = a + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
		guarded |= vmap_tag_run_state(t) == VMAP_RUN_GUARDED && a < ce && b > cs;
	}
	/* The chunks are mapped again, read-write (one call per 64 MiB
	 * returned, rare; the one system call made under a shard lock).
	 * Writable, not PROT_NONE as reserved: the arena's writable part stays
	 * the chunks ever claimed, a few VMAs, where chunks going back and
	 * forth between PROT_NONE and RW cut it into one VMA per chunk (and
	 * their table slices as many again); strict
	 * overcommit keeps charging them, as the kernel would after a claim.
	 * That takes with them
	 *  - pages still resident in zero runs: a 2 MiB page a block faulted
	 *    in reaches into them, and purging the block splits it and frees
	 *    only the block's range;
	 *  - MADV_HUGEPAGE: it comes back at the next claim.
	 * Chunks with pages the program unmapped (which must keep faulting as
	 * the kernel's unmapped pages do) are mapped PROT_NONE instead, as
	 * reserved: the claim makes them writable again.  If that fails (the
	 * VMA limit), the runs stay as they are, a huge-page chunk's pages are
	 * dropped and the rest stays as it was. */
	bool remapped = guarded ? !vmap_os_is_err(vmap_os_mmap((void *)cs, ce - cs, PROT_NONE,
								 MAP_PRIVATE | MAP_ANONYMOUS |
									 MAP_FIXED | MAP_NORESERVE,
								 -1, 0))
				: vmap_os_map_fresh((void *)cs, ce - cs) == 0;
	if (!remapped && guarded)
		return false;
	for (uintptr_t a = start, b; a < end; a = b) {
		struct vmap_pte *e = vmap_pte_of(r, a);
		t = e->tag;
		b = a + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
		uint64_t stamp = e->stamp;
		unsigned state = vmap_tag_run_state(t);
		vmap_run_take_locked(s, e, t);
		if (a < cs)
			vmap_run_set_locked(s, r, a, ((b < cs ? b : cs) - a) >> VMAP_PAGE_SHIFT, state,
					    big, stamp);
		if (b > ce) {
			uintptr_t k = a > ce ? a : ce;
			vmap_run_set_locked(s, r, k, (b - k) >> VMAP_PAGE_SHIFT, state, big, stamp);
		}
	}
	if (!remapped && big)
		vmap_os_madvise((void *)cs, ce - cs, MADV_DONTNEED);
	/* The chunks' slices of the page table and of the slab descriptors
	 * hold nothing now (tags 0, no slab: what a never-used slice reads),
	 * but stay resident as long as nobody claims them again: 512 KiB a
	 * chunk. */
	size_t first = (cs - r->base) >> VMAP_CHUNK_SHIFT, n = (ce - cs) >> VMAP_CHUNK_SHIFT;
	size_t each = VMAP_CHUNK_PAGES * sizeof(struct vmap_pte);
	/* The pages the slices have to themselves go; on the two they share
	 * with the neighbouring chunks' slices (VMAP_PT_SHIFT), their entries
	 * are cleared, as the dropped pages read. */
	char *slice = (char *)vmap_region_tables(r) + first * each;
	memset(slice + VMAP_PT_SHIFT, 0, VMAP_PAGE - VMAP_PT_SHIFT);
	memset(slice + n * each, 0, VMAP_PT_SHIFT);
	vmap_os_madvise(slice + VMAP_PAGE, n * each - VMAP_PAGE, MADV_DONTNEED);
	struct vmap_slab *slabs = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
	if (slabs)
		vmap_os_madvise((char *)slabs + first * r->slabs_each, n * r->slabs_each,
				MADV_DONTNEED);
	/* Rank GLOBAL under rank SHARD: the order vmap_chunks_acquire's callers never
	 * invert (they hold no shard lock while they take the global one). */
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	for (uintptr_t c = cs; c < ce; c += VMAP_CHUNK) {
		size_t i = (c - r->base) >> VMAP_CHUNK_SHIFT;
		__atomic_store_n(&r->chunk_owner[i], (uint16_t)(big && !remapped ? VMAP_CHUNK_WAS_BIG : 0),
				 __ATOMIC_RELEASE);
	}
	vmap_unclaimed_add(s->id, (int64_t)(ce - cs));
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_chunks_returned, (int64_t)((ce - cs) >> VMAP_CHUNK_SHIFT));
	return true;
}

unsigned vmap_own_ranges(uintptr_t *lo, uintptr_t *hi, unsigned max, bool tables)
{
	unsigned n = 0;
	for (unsigned i = 0; i < vmap_nregions && n + 3 <= max; i++) {
		struct vmap_region *r = &vmap_regions[i];
		lo[n] = r->base;
		hi[n++] = r->base + r->size;
		if (!tables)
			continue;
		lo[n] = vmap_region_tables(r);
		hi[n++] = vmap_region_tables(r) + r->pt_bytes + r->owner_bytes;
		struct vmap_slab *sl = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
		if (sl) {
			lo[n] = (uintptr_t)sl;
			hi[n++] = (uintptr_t)sl + r->nchunks * r->slabs_each;
		}
	}
	if (tables && vmap_shards && n < max) {
		lo[n] = (uintptr_t)vmap_shards;
		hi[n++] = (uintptr_t)vmap_shards + vmap_shards_bytes;
	}
	return n;
}

/* The VMAs the regions have of their own making: one per run of chunks of a
 * kind (unclaimed, small, big: protection and THP advice differ).  Chunks
 * given back are writable but unclaimed: counted with the unclaimed, which
 * errs towards fewer natural VMAs, so towards more extra ones. */
static uint64_t natural_vmas(void)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < vmap_nregions; i++) {
		struct vmap_region *r = &vmap_regions[i];
		unsigned prev = 4;
		for (size_t c = 0; c < r->nchunks; c++) {
			uint16_t o = __atomic_load_n(&r->chunk_owner[c], __ATOMIC_RELAXED);
			unsigned kind = vmap_chunk_is_free(o) ? 0 : (o & 0x8000u) ? 2 : 1;
			kind = o == VMAP_CHUNK_LENT ? 3 : kind; /* unmapped, or the kernel's */
			n += kind != prev;
			prev = kind;
		}
	}
	return n;
}

/* An upper-bound estimate (moves, PROT_NONE pieces) is checked against
 * /proc/self/maps when it reaches its budget, but not more often than this:
 * a pass over the maps costs microseconds per mapping. */
#define RECOUNT_NS (10 * 1000000ull)

uint64_t vmap_arena_recount(uint64_t *counted_ns)
{
	uint64_t now = vmap_os_now_ns(), last = __atomic_load_n(counted_ns, __ATOMIC_RELAXED);
	if (now - last < RECOUNT_NS ||
	    !__atomic_compare_exchange_n(counted_ns, &last, now, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return UINT64_MAX;
	return vmap_arena_extra_vmas();
}

uint64_t vmap_arena_extra_vmas(void)
{
	uintptr_t lo[VMAP_OWN_RANGES_MAX], hi[VMAP_OWN_RANGES_MAX];
	unsigned n = vmap_own_ranges(lo, hi, VMAP_OWN_RANGES_MAX, false);
	uint64_t inside;
	if (!vmap_os_count_maps(lo, hi, n, &inside))
		return UINT64_MAX; /* cannot tell: as if over any budget */
	uint64_t natural = natural_vmas();
	return inside > natural ? inside - natural : 0;
}

void vmap_arena_advise(uintptr_t a, size_t len)
{
	struct vmap_region *r = vmap_region_of(a);
	if (r && vmap_opt.hugepage &&
	    (__atomic_load_n(&r->chunk_owner[(a - r->base) >> VMAP_CHUNK_SHIFT], __ATOMIC_RELAXED) &
	     0x8000u))
		vmap_os_madvise((void *)a, len, MADV_HUGEPAGE);
}

int vmap_map_fresh_arena(uintptr_t a, size_t len)
{
	int rc = vmap_os_map_fresh((void *)a, len);
	if (!rc)
		vmap_arena_advise(a, len);
	return rc;
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
	if (vmap_chunk_is_free(r->chunk_owner[c]) || r->chunk_owner[c] == VMAP_CHUNK_LENT) {
		/* (Lent since the look-up: not the arena's any more.) */
		if (r->chunk_owner[c] == VMAP_CHUNK_LENT || commit_chunks(r, c, 1)) {
			vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
			return false;
		}
		unadvise = r->chunk_owner[c] == VMAP_CHUNK_WAS_BIG;
		__atomic_store_n(&r->chunk_owner[c], (uint16_t)(s->id + 1), __ATOMIC_RELEASE);
		vmap_unclaimed_add(s->id, -(int64_t)VMAP_CHUNK);
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

uintptr_t vmap_chunks_acquire(struct vmap_shard *s, bool big, size_t n)
{
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	bool unadvise = false, refused = false;
	uintptr_t a = 0;
	size_t need = n << VMAP_CHUNK_SHIFT;
	struct vmap_as_room room = vmap_as_room_locked();
	if (need <= room.claim)
		a = chunks_claim_locked(s->id, big, n, &unadvise, &refused);
	if (!a && !refused && need <= room.claim && unlend_locked(n))
		a = chunks_claim_locked(s->id, big, n, &unadvise, &refused);
	/* (A tight arena keeps its first region's size: tight.c.) */
	if (!a && !refused && !vmap_arena_tight() && need <= room.claim && need <= room.reserve) {
		size_t want = vmap_reserve_size > need ? vmap_reserve_size : need;
		if (want > room.reserve)
			want = (size_t)room.reserve;
		if (vmap_region_add(want, need) == 0)
			a = chunks_claim_locked(s->id, big, n, &unadvise, &refused);
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	if (!a)
		return 0;
	vmap_stat_add_cpu(s->id, VMAP_STAT_chunks_taken, (int64_t)n);
	vmap_chunks_advise(a, n, big, unadvise);
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
 * purge limit and the purges refaulted it (ten times the page faults of a
 * pinned thread).  Threads
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
		vmap_tls_shard = h = (int)(*cpu % vmap_nshards_large);
	return &vmap_shards[h];
}

struct vmap_shard *vmap_shard_mmap_here(unsigned *cpu)
{
	struct vmap_shard *s = vmap_shard_here(cpu);
	if (vmap_nshards == vmap_nshards_large)
		return s;
	return &vmap_shards[vmap_nshards_large + s->id];
}
