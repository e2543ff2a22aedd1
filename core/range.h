/*
 * range.h — the large path: a CPU-sharded, vmap-like address-range allocator.
 *
 * The layer's interface: arena.c (regions, chunks, shards), runs.c (free
 * runs), vm.c (page states), pool.c (per-size pools), cache.c (thread
 * caches), purge_policy.c and purge.c (lazy purge), large.c (alloc, free, resize, set-up),
 * move.c (realloc by moving pages) and range_check.c (the debug check).
 * The rest of the core uses the vmap_range_* functions, mmap.c also the
 * pieces marked for it; what the layer's files share among themselves
 * only is in range_impl.h.
 */
#ifndef VMAP_RANGE_H
#define VMAP_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"
#include "os.h"
#include "pte.h"
#include "section.h"
#include "thread.h"

/* ---- public to the core ---------------------------------------------- */

int vmap_range_init(void);
/* The arena is set up on the first request that needs it (a large block, a
 * servable mmap, the slabs), not at init.  vmap_range_ready sets it up if
 * need be and says whether it can be had; vmap_range_enabled only asks. */
enum { VMAP_RANGE_NONE, VMAP_RANGE_BUSY, VMAP_RANGE_DONE };
extern int vmap_range_state VMAP_HIDDEN;
extern bool vmap_range_ok VMAP_HIDDEN;
bool vmap_range_setup_slow(void);
static inline bool vmap_range_ready(void)
{
	if (__builtin_expect(__atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == VMAP_RANGE_DONE, 1))
		return vmap_range_ok;
	return vmap_range_setup_slow();
}
static inline bool vmap_range_enabled(void)
{
	return __atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == VMAP_RANGE_DONE &&
	       vmap_range_ok;
}
/* The process gets no arena (inert: not its malloc). */
void vmap_range_refuse(void);
/* Before fork: another thread setting the arena up finishes first. */
void vmap_range_setup_wait(void);
/* Requests above this many bytes are large (the arena's): SMALL_MAX once the
 * arena is set up; before, with BACKEND=auto, at least glibc's first mmap
 * threshold (the facade sets it at init). */
extern size_t vmap_large_above VMAP_HIDDEN;
/* The largest request the arena takes (blocks, the program's mmaps): under a
 * tight RLIMIT_AS a quarter of it, glibc and the kernel the larger ones
 * (tight.c vmap_tight_setup); SIZE_MAX otherwise. */
extern size_t vmap_area_max VMAP_HIDDEN;
/* A block of at least size bytes aligned to align (a power of two); *zero is
 * set when its first size bytes are known to be zero.  NULL when the system
 * refuses, or size is over vmap_area_max (errno is the caller's to set). */
void *vmap_range_alloc(size_t size, size_t align, bool *zero);
/* The same (page aligned) for the copy of a block that realloc grows: placed
 * in the lowest free run that fits (runs.c vmap_run_find says why). */
void *vmap_range_alloc_grown(size_t size, bool *zero);
/* The same, aligned to its size, for a slab (slab.c). */
void *vmap_range_alloc_slab(size_t size, bool *zero);
/* Frees a block; a pointer inside the arena that is not a live block start
 * stops the program with one line naming `who`. */
void vmap_range_free(void *p, const char *who);
/* Frees the block a growing realloc copied out of.  Its size is one the
 * program has outgrown: it goes to the free runs, merged with its
 * neighbours, not to the thread's cache of areas reused as they are. */
void vmap_range_free_outgrown(void *p);
size_t vmap_range_usable(const void *p, const char *who);
/* Resizes in place when it can (shrink, or grow into a free neighbour).
 * Returns true on success. */
bool vmap_range_resize(void *p, size_t size);
/* A live block p shrunk to size in place: when 4 pages or more are past it,
 * they go back (purged, a free run).  Returns whether they did. */
bool vmap_range_shrink(void *p, size_t size);
/* A new area of at least size bytes for a live block p; when *moved is set,
 * p's pages were moved there (mremap) and p is gone; otherwise the caller
 * copies and frees p.  NULL when no area could be had (p intact). */
void *vmap_range_move(void *p, size_t size, bool *moved);
/* After an mremap of p (len bytes) to q that failed, possibly part way: puts
 * every byte back in p, given that q read zero before; maps holes in p and q
 * again.  0: done; 1: p done but part of q could not be mapped again; -1: a
 * hole in p could not be refilled (its bytes are still in q). */
int vmap_move_undo(void *p, void *q, size_t len);
bool vmap_range_owns(const void *p);
size_t vmap_range_purge(bool all);
/* Areas carved from memory that faults (purge_policy.c reads it: refaulting). */
extern uint64_t vmap_fresh_carves;
/* Before fork: the cache the copy would pay for goes (fork.c), but for the
 * lazily unmapped pieces, whose PROT_NONE a child keeps where guard markers
 * may not survive the copy. */
void vmap_range_purge_for_fork(void);
/* malloc_trim: everything cached purged, then huge-page remnants swept from
 * the free runs (purge.c).  Bytes purged. */
size_t vmap_range_trim(void);
unsigned vmap_range_nshards(void);
/* Debug builds: checks every structure against a linear walk; aborts on error. */
void vmap_range_check(void);

/* ---- within the layer (pools, runs, the purge and the caches) ---------- */

/* Pools: one per exact area size of 2..POOL_PAGES+1 pages (guard included).
 * Larger freed areas become resident ("dirty") free runs that coalesce with
 * their free neighbours, so any later size can reuse them (see runs.c). */
#define VMAP_NCLASSES 514

struct vmap_pool {
	uintptr_t head, tail; /* head = most recently freed */
	uint32_t count;
};

#define VMAP_FREE_BINS 48
/* Free-run lists per shard: [big * 5 + run state]. */
#define VMAP_RUN_LISTS 10
static inline unsigned vmap_run_list(bool big, unsigned state)
{
	return (big ? 5u : 0u) + state;
}

struct vmap_shard {
	struct vmap_lock lock;
	/* Counted by vmap_shard_lock with the lock held (plain stores, beside
	 * the lock word: no extra cache line), read by the report without it. */
	uint64_t lock_acquisitions, lock_contended;
	unsigned id;
	uint64_t free_bin_mask[VMAP_RUN_LISTS]; /* bit b set = bin b non-empty (relaxed stores) */
	uintptr_t free_bin[VMAP_RUN_LISTS][VMAP_FREE_BINS];
	uint64_t free_pages[VMAP_RUN_LISTS];
	uint64_t cached_bytes;            /* pooled areas + dirty runs, under lock */
	uint64_t pool_bytes;              /* pooled areas, under lock */
	uint64_t pool_mask[(VMAP_NCLASSES + 63) / 64]; /* bit c set = pool c non-empty */
	struct vmap_pool pool[VMAP_NCLASSES];
} __attribute__((aligned(64)));

extern struct vmap_shard *vmap_shards;
extern unsigned vmap_nshards;
/* The first vmap_nshards_large shards serve malloc; the rest, as many, the
 * program's mmap (none when MMAP=0 or the arena is tight): its mappings in
 * chunks of their own, as the kernel keeps them apart from the heap. */
extern unsigned vmap_nshards_large;
/* Whether the program's mmap gets shards of its own (set before init; the
 * unit tests clear it to lay mappings and blocks side by side, as a tight
 * arena does). */
extern bool vmap_mmap_apart;
extern uint64_t vmap_lazy_max;
extern uint64_t vmap_lazy_limit; /* the adaptive pressure limit (purge_policy.c) */
extern uint64_t vmap_pool_exact; /* areas of up to this many pages are pooled */
/* Thread caches (cache.c) hold areas of up to this many pages (1 MiB + guard). */
#define VMAP_CACHE_MAX_PAGES 257

/* The first region's slab descriptors, for free()'s fast path (alloc.c):
 * one compare tells a pointer in that region, and the descriptor is one
 * index away.  size is 0 until the region's slab table is published (base
 * and tab are written first; size is stored with release, read with
 * acquire), and changes after only to 0, when the profile comes on. */
struct vmap_slab_index {
	uintptr_t base;
	size_t size;
	struct vmap_slab *tab;
};
extern struct vmap_slab_index vmap_slab0 VMAP_HIDDEN;
/* Profiling: size 0 for good (vmap_fast_paths_off). */
void vmap_range_fast_free_off(void);

/* Locks a shard, counting the acquisition and whether it waited. */
void vmap_shard_lock(struct vmap_shard *s);
static inline void vmap_shard_unlock(struct vmap_shard *s)
{
	vmap_unlock(&s->lock, VMAP_RANK_SHARD);
}
/* Turns a purged (or never used) run into free space, merging with free
 * neighbours of the same shard and kind.  Shard lock held.  Returns the start
 * of the merged run. */
uintptr_t vmap_free_insert_locked(struct vmap_shard *s, uintptr_t start, uint64_t pages,
			     unsigned state, bool big, uint64_t now);
struct vmap_victim {
	uintptr_t a;
	uint64_t pages;
	uint64_t tag;
};
/* Detaches dirty runs (and, with protected_too, lazily unmapped ones) for
 * a purge, oldest first, until want_bytes or max (with older_than, only
 * runs freed before it): tags become PURGING.  Returns the count and adds
 * the bytes to *taken. */
unsigned vmap_dirty_take_locked(struct vmap_shard *s, uint64_t older_than, uint64_t want_bytes,
				struct vmap_victim *out, unsigned max, uint64_t *taken,
				bool protected_too);
void vmap_pool_remove_locked(struct vmap_shard *s, unsigned cls, uintptr_t a);
/* A freed area (tag CACHED) goes to its pool while the pool and the shard's
 * pooled bytes are under their caps, else to the free runs (merging). */
void vmap_area_park_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now);
/* Files a freed area (tag CACHED) in its pool, the newest at the head. */
void vmap_pool_push_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now);
/* Moves up to max areas of the pool for `pages` into out[]; returns how many. */
unsigned vmap_pool_pop_many_locked(struct vmap_shard *s, unsigned pages, uintptr_t *out,
				   unsigned max);
void vmap_purge_maybe(uint64_t now);
/* After carving `bytes` of fresh (faulting) memory, with no lock held: the
 * cache pays for them, in batches (purge_policy.c). */
void vmap_purge_fresh(uint64_t bytes);
/* A fresh malloc area of `pages` usable pages carved at a, under
 * VMAPALLOC_POPULATE=auto: how many of its first pages to populate; the
 * rest is watched (populate.c). */
uint64_t vmap_populate_auto(uintptr_t a, uint64_t pages);
/* The block at a goes to the shared cache: if it is the one watched, its
 * measure is taken now, before a purge can release its pages (populate.c). */
void vmap_populate_freeing(uintptr_t a);
/* From the allocator's calls, every 128th (alloc.c): the age purge if it is
 * due.  Cheap when it is not: one load and compare. */
void vmap_purge_tick(uint64_t now);
/* The purger thread's pass (background.c): pressure, and the age purge with
 * every thread's idle cache. */
void vmap_purge_background(uint64_t now);
/* Grows a cached area of the calling thread's into the free run after it
 * (cache.c's hot area); bytes taken from a resident run, or -1. */
int64_t vmap_cached_extend(uintptr_t a, uint64_t pages, uint64_t want);

/* For mmap.c: the pieces of the large allocator it builds on (shard lock held where
 * the name says _locked). */
/* MADV_GUARD_INSTALL works (Linux >= 6.13); probed on first use. */
bool vmap_guard_markers(void);
struct vmap_shard *vmap_shard_here(unsigned *cpu);
/* This CPU's shard for the program's mmap (vmap_shard_here's when it has none). */
struct vmap_shard *vmap_shard_mmap_here(unsigned *cpu);
void vmap_run_set_locked(struct vmap_shard *s, struct vmap_region *r, uintptr_t a, uint64_t pages,
			 unsigned state, bool big, uint64_t stamp);
void vmap_run_take_locked(struct vmap_shard *s, struct vmap_pte *e, uint64_t t);
/* 0, or -errno: the pages may still fault. */
int vmap_unguard(uintptr_t a, uint64_t pages);
/* 0, or -errno: the pages could not be made writable (they stay PROT_NONE). */
int vmap_unprotect(uintptr_t a, uint64_t pages);
extern int vmap_protected_runs;
/* Makes [a, a+len) fault as unmapped with a fresh PROT_NONE mapping (vm.c),
 * within the VMA budget unless `counted` (the pages are PROT_NONE already:
 * a lazily unmapped run). 0, or -errno: nothing changed. */
int vmap_guard_none(uintptr_t a, size_t len, bool counted);
/* Drops the page tables under the whole 2 MiB spans of the zero run at
 * `run` that [a, e) reaches into: they are mapped afresh (shard lock held). */
void vmap_zero_spans_locked(uintptr_t run, uintptr_t a, uintptr_t e);
/* Drops the records of the free run at `run` for its pages in [a, e) but
 * its head and tail, whole pages of them (runs.c; shard lock held). */
void vmap_run_drop_records_locked(uintptr_t run, uintptr_t a, uintptr_t e);
extern uint64_t vmap_none_vmas; /* VMAs guarded runs may cut: two each (runs.c) */
extern bool vmap_none_made;
/* What a carve is for: a block (malloc, or the program's mmap with
 * VMAP_TAG_MMAP), the new place of a block realloc grows (resident runs by
 * address, runs.c vmap_run_find; its pages are moved in), or a slab (whose
 * pages are used as small blocks come).  Only a block's fresh pages may be
 * populated (populate.c). */
enum vmap_carve_use { VMAP_CARVE_BLOCK, VMAP_CARVE_GROWN, VMAP_CARVE_SLAB };
/* Carves `pages` pages (all of them usable when tag has VMAP_TAG_MMAP) with
 * the shard lock held on entry; releases it.  *zero: contents known zero. */
void *vmap_alloc_carve(struct vmap_shard *s, unsigned cpu, uint64_t pages, bool big, size_t align,
		       bool *zero, uint64_t tag, enum vmap_carve_use use);
bool vmap_range_is_metadata(uintptr_t a, uintptr_t e);
bool vmap_range_guard_on(void);
/* Drains this thread's cache and every shard's pools into free runs. */
void vmap_range_flush_cached(void);
/* The zero or guarded free run starting at run: the whole chunks it covers
 * go back to the arena, mapped afresh, for any shard to claim.
 * Shard lock held; takes the global lock (a higher rank) only when there is
 * a whole chunk to give.  Returns whether chunks went back: those are no
 * longer the shard's once the global lock is released, and under a tight
 * RLIMIT_AS another thread may lend them to the kernel at once (unmapped,
 * and not the arena's for vmap_region_of), so the caller reads nothing of
 * the runs it had there, run's own entry included, after a true. */
bool vmap_chunks_give_back_locked(struct vmap_shard *s, uintptr_t run);
/* Page moves with mremap (realloc, and the program's mremap of served
 * memory) leave the moved area in a VMA of its own until its pages are
 * purged or unmapped (move.c: vmap_moves): whether one more fits the
 * budget, and counting `areas` new moved areas. */
bool vmap_moves_allowed(void);
void vmap_moves_count(unsigned areas);
/* Whether moved areas may have left VMAs (the purge then maps afresh). */
bool vmap_moves_left(void);
/* A fresh mapping over [a, a+len), arena pages, with the advice of their
 * chunk (MADV_HUGEPAGE in a big one), so that it merges with the arena's VMA
 * around it; vmap_arena_advise gives the advice alone (pages moved in carry
 * their old VMA's).  0 or -errno. */
int vmap_map_fresh_arena(uintptr_t a, size_t len);
void vmap_arena_advise(uintptr_t a, size_t len);
/* The address ranges of vmapalloc's own mappings: the arena's regions and,
 * with tables, their page tables, slab descriptors and the shards; up to max
 * ranges into lo/hi, returns how many. */
unsigned vmap_own_ranges(uintptr_t *lo, uintptr_t *hi, unsigned max, bool tables);
#define VMAP_OWN_RANGES_MAX (3 * VMAP_MAX_REGIONS + 1) /* enough for every region's */
/* VMAs in the arena beyond those its chunks make (moved areas, lazily
 * unmapped pieces, the program's mprotect of served memory), read from
 * /proc/self/maps: one pass over it; UINT64_MAX if it cannot be read. */
uint64_t vmap_arena_extra_vmas(void);
/* The same, for an estimate kept in *counted_ns's name: UINT64_MAX when it
 * was counted less than 10 ms ago or another thread is counting it now. */
uint64_t vmap_arena_recount(uint64_t *counted_ns);
/* How many VMAs vmapalloc may add of its own (arena.c). */
uint64_t vmap_vma_budget(void);
/* Claims the unclaimed chunk holding a for shard s, as zero free space. */
bool vmap_chunk_claim_at(uintptr_t a, struct vmap_shard *s);
/* Under a tight RLIMIT_AS, after glibc (or the kernel) was refused what the
 * arena could not place either: lends the kernel at least want bytes of the
 * arena's free chunks (unmapped), if it has them, for glibc to retry with;
 * the bytes lent (tight.c). */
size_t vmap_range_lend(size_t want);
/* Publishes t, a table of each bytes per chunk mapped PROT_READ, as r's slab
 * descriptors: the slices of claimed chunks are made writable now, those of
 * chunks claimed later at their claim.  Returns the table in use (an earlier
 * one if another thread won), or NULL if a slice cannot be made writable. */
struct vmap_slab *vmap_region_slabs_publish(struct vmap_region *r, struct vmap_slab *t, size_t each);
/* Puts the purge lock in the registry (vmap_range_init). */
void vmap_purge_register_locks(void);

#endif
