/*
 * pte.h — the arena's metadata: its regions, the page-table entry kept for
 * every arena page, the states and tag bits of that entry, and the one
 * checking lookup (vmap_pte_lookup) through which every module turns an
 * address the program gave into an entry.
 *
 * This header sits below the large allocator, the program's mmap and the
 * profile: it knows the encoding, not the policies that use it.
 */
#ifndef VMAP_PTE_H
#define VMAP_PTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h"
#include "section.h"

/* The unit shards take from the arena: 64 MiB, or 2 MiB in an arena fitted
 * under a tight RLIMIT_AS, where a few 64 MiB chunks would be all of it
 * (tight.c).  Set once, before the first region is reserved: every region of
 * the process has the same. */
#define VMAP_CHUNK_SHIFT_WIDE 26
#define VMAP_CHUNK_SHIFT_TIGHT 21
extern unsigned vmap_chunk_shift VMAP_HIDDEN;
#define VMAP_CHUNK_SHIFT vmap_chunk_shift
#define VMAP_CHUNK ((size_t)1 << VMAP_CHUNK_SHIFT)
#define VMAP_CHUNK_PAGES (VMAP_CHUNK >> VMAP_PAGE_SHIFT)
#define VMAP_MAX_REGIONS 64
#define VMAP_MAX_SHARDS 128
/* Shard ids: as many again for the program's mmap (arena.c), in the tag's 8 bits. */
#define VMAP_MAX_SHARD_IDS (2 * VMAP_MAX_SHARDS)
#define VMAP_BIG_MIN VMAP_HUGE_PAGE /* areas this large are 2 MiB aligned */
#define VMAP_BIG_PAGES (VMAP_BIG_MIN >> VMAP_PAGE_SHIFT)

/*
 * Page-table entry, one per arena page, out of band (in its own mapping, so
 * an overflow of user data cannot reach it).  Only "head" pages carry a tag:
 *
 *   bit  63..60  59   58  57      56      55..48 47   46   45        44     43   42..30 29..0
 *       +------+----+----+-------+-------+------+----+----+---------+------+----+------+-----+
 *       |state |zero|big |advised|guarded|shard |mmap|attr|protected|sealed|segs| vma  |pages|
 *       +------+----+----+-------+-------+------+----+----+---------+------+----+------+-----+
 *
 *   LIVE       start of a block the program owns
 *   CACHED     start of a freed area held resident in a pool
 *   PURGING    start of an area a purge is releasing
 *   FREE       start of a run of free address space (in a shard's bins)
 *   FREE_TAIL  last page of a free run of more than one page
 *   FOREIGN    start of arena pages the program mapped over (MAP_FIXED), or
 *              of a freed block it had mapped over (VMAP_TAG_OVER)
 *
 * Every other entry's tag is 0: that is what makes `free` of an interior
 * pointer or of a freed block detectable in O(1).  The three words after the
 * tag mean one thing per state of the head (the union below):
 *
 *   CACHED, FREE    next, prev link areas in pools and runs in free bins;
 *                   stamp is when the area entered its pool (for decay).
 *   LIVE, sampled   the allocation profile's record of the block: prof_site
 *                   = VMAP_PTE_SITE | site id (bit 63, which no link has),
 *                   prof_count, prof_bytes.  The large allocator neither
 *                   reads nor writes these words while the block is live;
 *                   the profile writes them after the block is published and
 *                   clears prof_site before it is freed.
 *   LIVE MMAP       `vma` in the tag holds the attributes mprotect, madvise,
 *                   mlock and mseal gave the first page (0: as mmap() made
 *                   them); with `segs` set, every other page's page_attr
 *                   holds that page's (VMAP_PTE_SEG | attributes; an
 *                   interior entry is otherwise unused while the area is
 *                   live).
 *
 * Pages are at most 2^30 per area: a region is at most 1 TiB (2^28 pages).
 */
struct vmap_pte {
	uint64_t tag;
	union {
		struct {
			uintptr_t next, prev;
			uint64_t stamp;
		};
		struct {
			uint64_t prof_count, prof_site, prof_bytes;
		};
		struct {
			uint64_t unused_[2];
			uint64_t page_attr;
		};
	};
};
_Static_assert(sizeof(struct vmap_pte) == 32, "one pte is four words");

enum {
	VMAP_ST_NONE = 0,
	VMAP_ST_LIVE = 1,
	VMAP_ST_CACHED = 2,
	VMAP_ST_PURGING = 3,
	VMAP_ST_FREE = 4,
	VMAP_ST_FREE_TAIL = 5,
	VMAP_ST_FOREIGN = 6,
};
#define VMAP_TAG_ZERO (1ull << 59)
#define VMAP_TAG_BIG (1ull << 58)
#define VMAP_TAG_ADVISED (1ull << 57)
/* The same bit on a LIVE head: the area's pages were moved there by mremap
 * (realloc, or the program's mremap of a served mapping) and sit in a VMA of
 * their own, the kernel keeping their old page offset; the fresh mapping a
 * purge or munmap makes over them lets the arena's VMA merge again. */
#define VMAP_TAG_MOVED (1ull << 57)
#define VMAP_TAG_GUARDED (1ull << 56)
/* The same bit on the LIVE head of a malloc block: the program mapped over
 * some of its pages with MAP_FIXED (mmap.c).  Those pages are the program's
 * from then on: the block never grows or moves in place, and its free turns
 * the whole area FOREIGN instead of cached (large.c). */
#define VMAP_TAG_OVER VMAP_TAG_GUARDED
#define VMAP_TAG_SHARD_SHIFT 48 /* 8 bits */
#define VMAP_TAG_MMAP (1ull << 47) /* a live area the program got from mmap() */
#define VMAP_TAG_ATTR (1ull << 46) /* the program changed its protection/advice/lock */
#define VMAP_TAG_PROTECTED (1ull << 45)
#define VMAP_TAG_SEALED (1ull << 44) /* part of VMAP_TAG_VMA: mseal()ed */
#define VMAP_TAG_SEGS (1ull << 43) /* a live MMAP area whose pages differ in attributes */
#define VMAP_TAG_VMA_SHIFT 30
/* Attributes of the first page: bits 30-42, and bit 44 (sealed). */
#define VMAP_TAG_VMA ((0x1fffull << VMAP_TAG_VMA_SHIFT) | VMAP_TAG_SEALED)
#define VMAP_TAG_PAGES ((1ull << 30) - 1)

/* prof_site of a live head: the block was sampled (no link has bit 63). */
#define VMAP_PTE_SITE (1ull << 63)
/* page_attr of an interior page of a split served mapping: its attributes
 * follow in the low bits (the mark is for a reader's eye). */
#define VMAP_PTE_SEG (1ull << 62)

/* The state of a free run: known zero (fresh, or purged with MADV_DONTNEED),
 * dirty (freed, resident, counted as cached, to be purged), advised
 * (released with MADV_FREE, or a purge whose madvise failed: not zero, not
 * cached, never purged again), guarded (pages the program munmap()ed:
 * they fault on access until un-guarded, and are zero after), or protected
 * (munmap()ed lazily: PROT_NONE so they fault, but still resident, counted as
 * cached; reuse costs one mprotect and a memset instead of a fault per page). */
enum vmap_run_state {
	VMAP_RUN_ZERO = 0,
	VMAP_RUN_DIRTY = 1,
	VMAP_RUN_ADVISED = 2,
	VMAP_RUN_GUARDED = 3,
	VMAP_RUN_PROTECTED = 4,
};

static inline unsigned vmap_tag_run_state(uint64_t t)
{
	return (t & VMAP_TAG_ZERO)      ? VMAP_RUN_ZERO
	       : (t & VMAP_TAG_GUARDED) ? VMAP_RUN_GUARDED
	       : (t & VMAP_TAG_PROTECTED) ? VMAP_RUN_PROTECTED
	       : (t & VMAP_TAG_ADVISED) ? VMAP_RUN_ADVISED
					: VMAP_RUN_DIRTY;
}

static inline unsigned vmap_tag_state(uint64_t t) { return (unsigned)(t >> 60); }
static inline uint64_t vmap_tag_pages(uint64_t t) { return t & VMAP_TAG_PAGES; }
static inline unsigned vmap_tag_shard(uint64_t t)
{
	return (unsigned)(t >> VMAP_TAG_SHARD_SHIFT) & 0xff;
}
static inline uint64_t vmap_tag_make(unsigned state, unsigned shard, uint64_t pages, uint64_t flags)
{
	return ((uint64_t)state << 60) | flags | ((uint64_t)shard << VMAP_TAG_SHARD_SHIFT) | pages;
}

/*
 * The page table starts this far into its mapping, not at a page boundary.
 * A chunk's first block (the first carve of every chunk, and every block
 * of a fixed size allocated and freed in a loop) had its entry at a page's
 * first line, the L1 set where all page-aligned blocks keep their first
 * line (a block written a word a page has up to a line a page there):
 * malloc's tag store and free's compare-and-swap missed L1 on every call
 * (bench/large fix_size_17, 68 KiB blocks with a word written a page: 185-220
 * ns a malloc/free pair; with this and the thread cache's fields off that set
 * too (cache.c), 140-155, tcmalloc 130-190).
 * A chunk's slice of the table then shares its first and last pages with
 * its neighbours' (arena.c commit_chunks and the give-back handle it).
 */
#define VMAP_PT_SHIFT 128

struct vmap_slab;
struct vmap_region {
	uintptr_t base;
	size_t size;
	size_t whole;            /* size, but 0 while a chunk of it is lent (vmap_region_of) */
	struct vmap_pte *pt;     /* size / PAGE entries, VMAP_PT_SHIFT into their mapping */
	uint16_t *chunk_owner;   /* (shard + 1) | big << 15; shard bits 0: free (see below) */
	size_t nchunks;
	size_t pt_bytes, owner_bytes; /* pt_bytes: the mapped bytes of the table (a page more) */
	struct vmap_slab *slabs; /* slab descriptors, one per 64 KiB (slab.c); NULL until the first slab */
	size_t slabs_each;       /* bytes of slabs per chunk (global lock) */
};

/* A chunk whose owner has no shard bits is free for any shard to claim.
 * VMAP_CHUNK_WAS_BIG alone marks a free chunk a shard gave back after using it
 * for the big kind: its range is still advised MADV_HUGEPAGE, so claims prefer
 * it for big areas and a small claim that has to take it advises it back. */
#define VMAP_CHUNK_WAS_BIG 0x8000u
static inline bool vmap_chunk_is_free(uint16_t owner)
{
	return !(owner & 0x7fffu);
}
/* A chunk the arena lent to the kernel under a tight RLIMIT_AS (tight.c):
 * unmapped, so that glibc could have the address space, until the arena
 * takes it back.  Neither free nor a shard's (its big bit is set: walks of
 * small chunks skip it), and not the arena's: the kernel may have mapped
 * anything there.  Only the first region lends (a tight arena has no
 * other); while it does, its `whole` is 0. */
#define VMAP_CHUNK_LENT 0xffffu
/* Chunks lent now (global lock). */
extern unsigned vmap_lent_chunks VMAP_HIDDEN;

extern struct vmap_region vmap_regions[VMAP_MAX_REGIONS] VMAP_HIDDEN;
extern unsigned vmap_nregions VMAP_HIDDEN;
/* [vmap_span_lo, vmap_span_hi) covers every region: one compare rejects the
 * pointers of glibc's heap, the common case of free() under the libc backend. */
extern uintptr_t vmap_span_lo VMAP_HIDDEN, vmap_span_hi VMAP_HIDDEN;

/* The region holding a, or NULL. */
static inline struct vmap_region *vmap_region_of(uintptr_t a)
{
	uintptr_t hi = __atomic_load_n(&vmap_span_hi, __ATOMIC_ACQUIRE); /* a plain load on x86-64 */
	if (a - vmap_span_lo >= hi - vmap_span_lo)
		return NULL;
	/* The first region (the usual one): no count to load, no loop.  Its
	 * base and size are written before the span covers it (release, read
	 * above with acquire), and never change after; `whole` is its size but
	 * while it lends chunks (tight.c).  A plain load, like size's, so that
	 * the compiler folds it as before (a relaxed atomic one cost every
	 * large malloc/free pair 6 instructions): an aligned word, stored
	 * atomically under the global lock before the chunk is unmapped, and
	 * a stale 0 only takes the check below. */
	struct vmap_region *r = &vmap_regions[0];
	if (a - r->base < r->whole)
		return r;
	unsigned n = __atomic_load_n(&vmap_nregions, __ATOMIC_ACQUIRE);
	for (unsigned i = 1; i < n; i++)
		if (a - vmap_regions[i].base < vmap_regions[i].size)
			return &vmap_regions[i];
	/* The first region while it lends chunks: not in those.  A chunk is
	 * marked lent (and whole 0) before it is unmapped, and free again only
	 * once it is mapped again: an address the kernel hands out there
	 * reads lent. */
	if (a - r->base < r->size &&
	    __atomic_load_n(&r->chunk_owner[(a - r->base) >> VMAP_CHUNK_SHIFT], __ATOMIC_RELAXED) !=
		    VMAP_CHUNK_LENT)
		return r;
	return NULL;
}

/* Where r's tables are mapped: the page table, then the chunk owners;
 * pt_bytes + owner_bytes long. */
static inline uintptr_t vmap_region_tables(const struct vmap_region *r)
{
	return (uintptr_t)r->pt - VMAP_PT_SHIFT;
}

/* The entry of page a of region r, unchecked: for addresses the allocator
 * itself holds (links, run ends).  Addresses from the program go through
 * vmap_pte_lookup. */
static inline struct vmap_pte *vmap_pte_of(struct vmap_region *r, uintptr_t a)
{
	return &r->pt[(a - r->base) >> VMAP_PAGE_SHIFT];
}

/* The entry of an arena address the allocator holds (unchecked). */
static inline struct vmap_pte *vmap_pte_at(uintptr_t a)
{
	return vmap_pte_of(vmap_region_of(a), a);
}

/* ---- the checking lookup ------------------------------------------------- */

enum vmap_pte_find {
	/* a must be the first byte of a live block (a LIVE head). */
	VMAP_PTE_LIVE,
	/* The area or free run containing page a, whatever its state: walks
	 * back from a to the tagged head (a free run's tail names its head).
	 * In a chunk no shard has claimed, the piece is the rest of the chunk
	 * and its tag is 0. */
	VMAP_PTE_AREA,
};

struct vmap_pte_ref {
	struct vmap_region *region; /* NULL: a is not in the arena */
	struct vmap_pte *pte;       /* the head's entry (NULL in an unclaimed chunk) */
	uintptr_t head, end;        /* the piece: [head, end) */
	uint64_t tag;               /* the head's tag, read with acquire (0: none) */
};

/*
 * The one lookup of an address the program gave.  Fills *ref and says
 * whether a is what `how` asks for: for VMAP_PTE_LIVE, the start of a live
 * block (ref->tag then tells the caller what is wrong when it is not: 0 for
 * an interior or unmapped page, the state otherwise); for VMAP_PTE_AREA,
 * inside the arena.  Lock-free: a tag read without the owner shard's lock is
 * a snapshot, which the caller confirms under the lock where it matters.
 */
static inline bool vmap_pte_lookup(uintptr_t a, enum vmap_pte_find how, struct vmap_pte_ref *ref)
{
	struct vmap_region *r = vmap_region_of(a);
	ref->region = r;
	ref->pte = NULL;
	ref->head = ref->end = 0;
	ref->tag = 0;
	if (!r)
		return false;
	size_t i = (a - r->base) >> VMAP_PAGE_SHIFT;
	struct vmap_pte *e = &r->pt[i];
	if (how == VMAP_PTE_LIVE) {
		if (a & (VMAP_PAGE - 1))
			return false;
		uint64_t t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
		ref->tag = t;
		if (vmap_tag_state(t) != VMAP_ST_LIVE)
			return false;
		ref->pte = e;
		ref->head = a;
		ref->end = a + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
		return true;
	}
	a &= ~(uintptr_t)(VMAP_PAGE - 1);
	size_t c = i >> (VMAP_CHUNK_SHIFT - VMAP_PAGE_SHIFT);
	if (vmap_chunk_is_free(__atomic_load_n(&r->chunk_owner[c], __ATOMIC_RELAXED))) {
		ref->head = a;
		ref->end = r->base + ((c + 1) << VMAP_CHUNK_SHIFT);
		return true;
	}
	uint64_t t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
	if (vmap_tag_state(t) == VMAP_ST_FREE_TAIL) {
		i -= vmap_tag_pages(t) - 1;
		e = &r->pt[i];
		t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
	} else {
		while (!t && i > 0) {
			i--;
			e--;
			t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
		}
	}
	ref->pte = e;
	ref->tag = t;
	ref->head = r->base + (i << VMAP_PAGE_SHIFT);
	ref->end = ref->head + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
	return true;
}

#endif
