/*
 * tight.c — the arena under RLIMIT_AS: the size of its first region, and
 * under a tight limit (the arena is then smaller than a region normally is)
 * what goes with it: 2 MiB chunks, fewer shards, blocks over a quarter of it
 * left to glibc, free chunks lent to the kernel when glibc is refused, blocks
 * growing in place across chunks.
 *
 *   RLIMIT_AS  arena (1st region)  chunks  largest block  shards (default)
 *   64 MiB     30 MiB              2 MiB   7.5 MiB        1
 *   128 MiB    62 MiB              2 MiB   15.5 MiB       CPUs, at most 3
 *   200 MiB    98 MiB              2 MiB   24.5 MiB       CPUs, at most 6
 *   300 MiB    148 MiB             2 MiB   37 MiB         CPUs, at most 9
 *   1 GiB      256 MiB             2 MiB   64 MiB         CPUs, at most 16
 *   2 GiB      448 MiB             64 MiB  any            one per CPU
 *   (a program whose VmSize is 3 MiB when the arena is set up)
 *
 * A tight arena adds no region: new regions (arena.c) would leave glibc a
 * quarter of a limit that is small already.
 *
 * Called by: large.c (set-up, realloc in place), alloc.c and mmap.c through
 * range.h (vmap_range_lend).  Calls arena.c for the chunks.
 */
#include "range_impl.h"

#include "cache.h"

size_t vmap_area_max = SIZE_MAX;

/*
 * The first region's size under RLIMIT_AS.  The kernel counts the whole
 * reservation against the limit, so the arena is fitted to what the limit
 * leaves (limit - VmSize): a quarter of it, as long as that is a region
 * (REGION_FLOOR, 256 MiB: a limit of about 1 GiB).  Below, half of it, up to
 * REGION_FLOOR, in 2 MiB chunks (vmap_range_init sets the chunk size): a
 * smaller arena is still an arena, and a quarter of a tight limit would hold
 * few of the program's large blocks.  Half, not more: the program needs the
 * kernel's address space for more than its malloc blocks -- thread stacks
 * (8 MiB each by default), glibc's heaps (64 MiB reserved per thread arena,
 * and every request the arena cannot place), the libraries it dlopens, its
 * file mappings -- none of which vmapalloc can serve or see coming, so
 * those get the same share as the arena; when glibc is refused all the same,
 * the arena lends back the part it does not use (vmap_range_lend).  *tight
 * says which; 0: not even REGION_FLOOR_TIGHT fits, no arena.
 */
size_t vmap_fit_reservation(size_t want, bool *tight)
{
	uint64_t cur, max;
	*tight = false;
	if (vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) != 0 || cur == UINT64_MAX)
		return want;
	uint64_t vsize = vmap_proc_vsize();
	uint64_t avail = cur > vsize ? cur - vsize : 0;
	uint64_t fit = (avail / 4) & ~(((uint64_t)1 << VMAP_CHUNK_SHIFT_WIDE) - 1);
	if (fit < REGION_FLOOR) {
		*tight = true;
		fit = avail / 2 < REGION_FLOOR ? avail / 2 : REGION_FLOOR;
		fit &= ~(((uint64_t)1 << VMAP_CHUNK_SHIFT_TIGHT) - 1);
		if (fit < REGION_FLOOR_TIGHT)
			return 0;
	}
	return fit < want ? (size_t)fit : want;
}

/*
 * A tight arena, before its region is reserved (vmap_range_init): 2 MiB
 * chunks, where a few of 64 MiB would be all of it and each would hold far
 * more than the shard using it needs.  A shard keeps partly used chunks of
 * both kinds and freed areas of its own: one per 16 MiB of arena strands
 * about a quarter of it at most, where one per CPU could strand all of it
 * (VMAPALLOC_SHARDS, if set, is kept).  A block over a quarter of the arena
 * would leave it little room for the rest and could not grow in place:
 * glibc serves those (its mmap, its mremap to grow them), as without
 * vmapalloc, and so does the kernel the program's own mappings that size.
 * Returns the shard count for n asked.
 */
unsigned vmap_tight_setup(unsigned n)
{
	vmap_chunk_shift = VMAP_CHUNK_SHIFT_TIGHT;
	vmap_area_max = vmap_reserve_size / 4;
	size_t most = vmap_reserve_size >> 24;
	return !vmap_opt.shards && n > most ? (unsigned)most : n;
}

/*
 * Lending.  The arena's reservation is address space the rest of the
 * program cannot have, and the kernel refuses glibc a block the arena could
 * not place either, where glibc alone would have served it.  Then the
 * arena's free address space goes back to the system first (this thread's
 * cache, the purge and trim: whole free chunks back to the arena), and free
 * chunks are lent to the kernel (unmapped), from the end of the region
 * down, until `want` bytes are, or none are left: anywhere, since RLIMIT_AS
 * counts address space, not where it lies.  A lent chunk is not the arena's
 * (vmap_region_of) until a claim maps it again, when it needs chunks and
 * nothing took their place (arena.c vmap_chunks_unlend_locked).  Returns the
 * bytes lent; the caller retries glibc.  Not under an infinite limit: there a
 * refusal is the commit limit's, which the reservation is not charged to.
 * Called from the facade, outside the range layer's brackets: it brackets
 * itself, and a signal handler that interrupted the allocator lends nothing.
 */
/* Marks chunks [c, e) of the first region lent (or free again); whole says
 * so to vmap_region_of.  Global lock held. */
static void mark_lent(struct vmap_region *r, size_t c, size_t e, uint16_t owner)
{
	for (size_t k = c; k < e; k++)
		__atomic_store_n(&r->chunk_owner[k], owner, __ATOMIC_RELAXED);
	unsigned n = (unsigned)(e - c);
	vmap_lent_chunks = owner ? vmap_lent_chunks + n : vmap_lent_chunks - n;
	__atomic_store_n(&r->whole, vmap_lent_chunks ? 0 : r->size, __ATOMIC_RELEASE);
}

size_t vmap_range_lend(size_t want)
{
	uint64_t cur, max;
	if (!vmap_arena_tight() || !vmap_nregions || vmap_reentered() ||
	    vmap_os_prlimit(9 /* RLIMIT_AS */, &cur, &max) != 0 || cur == UINT64_MAX)
		return 0;
	size_t lent = 0;
	vmap_depth_enter();
	vmap_cache_drain_self(0);
	vmap_range_trim();
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	struct vmap_region *r = &vmap_regions[0]; /* (the only one: no other in a tight arena) */
	for (size_t e = r->nchunks, c; e > 0 && lent < want; e = c) {
		for (c = e; c > 0 && vmap_chunk_is_free(r->chunk_owner[c - 1]) &&
			    lent + ((e - c) << VMAP_CHUNK_SHIFT) < want;)
			c--;
		if (c == e) {
			c--;
			continue;
		}
		/* Lent first, then unmapped: an address the kernel hands
		 * out there is never taken for the arena's. */
		size_t bytes = (e - c) << VMAP_CHUNK_SHIFT;
		mark_lent(r, c, e, VMAP_CHUNK_LENT);
		if (vmap_os_munmap((void *)(r->base + (c << VMAP_CHUNK_SHIFT)), bytes)) {
			mark_lent(r, c, e, 0); /* (the VMA limit: still the arena's) */
			continue;
		}
		vmap_unclaimed_add(0, -(int64_t)bytes);
		vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, -(int64_t)bytes);
		vmap_stat_add_cpu(0, VMAP_STAT_lent_bytes, (int64_t)bytes);
		lent += bytes;
	}
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_depth_leave();
	return lent;
}

/*
 * realloc growing a block in place in a tight arena (2 MiB chunks: blocks
 * span many), where moving it would need the old and the new size at once,
 * and glibc's mremap would not.  When the block, or the free run of its
 * shard and kind after it, ends where a chunk does, the free chunks from
 * there on that it lacks become the shard's, taken back if they were lent,
 * and a zero run: one with that run if it is zero, else right after it
 * (runs in different states do not merge, runs.c), where
 * vmap_range_resize takes the two.  extra: the pages the block lacks.  No
 * lock held (the run is read as a hint: at worst the chunks are the
 * shard's free space for later).
 */
void vmap_tight_room_after(struct vmap_shard *s, struct vmap_region *r, uintptr_t end,
			   uint64_t extra, bool big)
{
	if (!vmap_arena_tight() || end >= r->base + r->size)
		return;
	uint64_t have = 0;
	unsigned st;
	/* (Lazily unmapped pages, protected, are not grown into.) */
	if (vmap_run_at(s, r, end, big, &st) && st != VMAP_RUN_PROTECTED)
		have = vmap_tag_pages(__atomic_load_n(&vmap_pte_of(r, end)->tag, __ATOMIC_RELAXED));
	uintptr_t a = end + (have << VMAP_PAGE_SHIFT);
	if (have >= extra || ((a - r->base) & (VMAP_CHUNK - 1)))
		return;
	size_t first = (a - r->base) >> VMAP_CHUNK_SHIFT;
	size_t n = (((extra - have) << VMAP_PAGE_SHIFT) + VMAP_CHUNK - 1) >> VMAP_CHUNK_SHIFT;
	bool unadvise = false;
	vmap_lock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	vmap_stat_add_cpu(s->id, VMAP_STAT_shared_lock_acquisitions, 1);
	bool ok = first + n <= r->nchunks && (n << VMAP_CHUNK_SHIFT) <= vmap_as_room_locked().claim;
	for (size_t c = first; ok && c < first + n; c++)
		ok = vmap_chunk_is_free(r->chunk_owner[c]) || r->chunk_owner[c] == VMAP_CHUNK_LENT;
	ok = ok && vmap_chunks_unlend_locked(r, first, n) &&
	     vmap_chunks_take_locked(r, first, n, s->id, big, &unadvise);
	vmap_unlock(&vmap_global_lock, VMAP_RANK_GLOBAL);
	if (!ok)
		return;
	vmap_stat_add_cpu(s->id, VMAP_STAT_chunks_taken, (int64_t)n);
	vmap_chunks_advise(a, n, big, unadvise);
	vmap_shard_lock(s);
	vmap_free_insert_locked(s, a, (uint64_t)n * VMAP_CHUNK_PAGES, VMAP_RUN_ZERO, big, 0);
	vmap_shard_unlock(s);
}
