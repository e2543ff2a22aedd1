/*
 * slab.h — the builtin small backend (VMAPALLOC_BACKEND=builtin): size
 * classes, slabs carved from the arena, per-thread heaps (see slab.c).
 */
#ifndef VMAP_SLAB_H
#define VMAP_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "range.h"

#define VMAP_SLAB_MAX ((size_t)65536) /* the largest size class */
#define VMAP_SLAB_UNIT_SHIFT 16       /* slabs are 1 or 4 units of 64 KiB */

struct vmap_heap;

/*
 * A slab's descriptor, out of band: one per 64 KiB unit of a region
 * (vmap_region.slabs), so that free() finds it from the address alone.  Every
 * unit of a slab points at the slab's first descriptor with `head`; a unit
 * that is not part of a slab has head NULL.  Three cache lines, so that no
 * line is written by one thread at every call while another reads or writes
 * it: what other threads' frees read (owner, state, the geometry), the
 * owner's free list and count, and `remote`, which other threads' frees
 * write.  With the free list on the first line, a producer whose blocks a
 * consumer freed ran 0.85x as many operations a second: each of its mallocs
 * took the line from the consumer's cache, and each free took it back.
 * 256 bytes a 64 KiB unit (0.4%), in mapped pages only where slabs are.
 */
struct vmap_slab {
	/* The descriptors of a region lie 256 bytes apart from a page boundary:
	 * every sixteenth one at a page's first line, the L1 set of every
	 * page-aligned object's first line.  With them (and the heaps) there, a
	 * malloc(4096)/write/free loop ran at 7-24 ns a pair from one start of
	 * the program to the next (tcmalloc 6-9); with the unused line first,
	 * so that no descriptor's fields share that set, at 7-10.  The likely
	 * cause: AMD's L1 predicts the way from a hash of the virtual address,
	 * so two lines of one set can evict each other with the other ways
	 * free, depending on where the arena landed. */
	char pad0[64];
	/* first used line: what every thread's free reads; the owner writes it
	 * only when it carves or moves the slab */
	struct vmap_slab *head;  /* this slab's first descriptor; NULL: no slab */
	struct vmap_heap *owner; /* VMAP_SLAB_ORPHAN while abandoned */
	uintptr_t start;         /* first object (the slab's first byte) */
	uint32_t size, cap;      /* object size; objects in the slab */
	uint32_t bump;           /* owner only: objects ever carved */
	uint8_t cls;
	uint8_t state;           /* SLAB_CUR / PARTIAL / FULL / ABANDONED (slab.c) */
	uint8_t units;
	uint8_t shift;           /* size = odd << shift */
	uint32_t span;           /* cap * size: a link outside [start, start + span) is corrupt */
	uint32_t inv;            /* odd's inverse mod 2^32: offset -> index (vmap_slab_check) */
	int32_t wake;            /* owner only: a free that brings used to this or below moves the slab */
	uint8_t ahead;           /* the pop's prefetch: this far into the next object (vmap_slab_prefetch) */
	/* second: the owner's, written by its every malloc and free */
	_Alignas(64) void *free;       /* owner only: objects to hand out, LIFO */
	int32_t over;                  /* owner only: objects out (used) - wake (vmap_slab_used) */
	struct vmap_slab *next, *prev; /* the owner's list for this class */
	/* third: other threads' frees */
	_Alignas(64) uintptr_t remote; /* a lock-free stack (vmap_slab_remote_top) */
	char pad1[56];                 /* (a power of two: free finds a descriptor with a shift) */
};

_Static_assert(sizeof(struct vmap_slab) == 256, "a power of two, four lines");

#define NCLASSES 44

/*
 * A slab's remote stack is one word: the address of its top object in the low
 * 48 bits and, above them, how many objects are on it.  A push sets both with
 * one compare-and-swap, and the owner takes both with one exchange, so that
 * it need not walk the stack to count what it collected: that walk chased one
 * pointer per object, each a cache miss on a line the freeing thread had just
 * written, back to back (a producer/consumer pair spent a fifth of its time
 * there); the owner's pops take the same misses one at a time, each behind
 * the program's own work on the object before.  A slab holds at most 4096
 * objects, and slabs lie in the arena, below 2^48 (region_slabs).
 */
#define VMAP_SLAB_REMOTE_SHIFT 48
#define VMAP_SLAB_REMOTE_ONE ((uintptr_t)1 << VMAP_SLAB_REMOTE_SHIFT)

static inline void **vmap_slab_remote_top(uintptr_t w)
{
	return (void **)(w & (VMAP_SLAB_REMOTE_ONE - 1));
}

static inline uint32_t vmap_slab_remote_count(uintptr_t w)
{
	return (uint32_t)(w >> VMAP_SLAB_REMOTE_SHIFT);
}
#define VMAP_HEAP_STEP 128 /* the fast paths' counting step, and malloc's tick */

/* The objects of d handed out and not freed (frees on the remote stack count
 * as out): kept as over = used - wake, so that the owner's free decrements
 * one field and tests it for zero (vmap_slab_push: one instruction and a
 * jump, where a compare with wake took three more). */
static inline uint32_t vmap_slab_used(const struct vmap_slab *d)
{
	return (uint32_t)(d->over + d->wake);
}

/* The bytes of d's slab: 64 or 256 KiB (slab.c slab_bytes). */
static inline size_t vmap_slab_bytes(const struct vmap_slab *d)
{
	return (size_t)d->units << VMAP_SLAB_UNIT_SHIFT;
}

enum { SLAB_NONE = 0, SLAB_CUR, SLAB_PARTIAL, SLAB_FULL, SLAB_ABANDONED };

/* The owner of a slab that has none (abandoned, or given back): never a
 * heap (heaps are mapped pages) and never NULL, so that a thread without a
 * heap (NULL) never passes free's owner test, which needs no test of its
 * own.  Never dereferenced. */
#define VMAP_SLAB_ORPHAN ((struct vmap_heap *)(uintptr_t)1)

/* The fast paths' calls other than malloc and free, counted by kind. */
enum vmap_fast_kind { VMAP_FAST_CALLOC, VMAP_FAST_MEMALIGN, VMAP_FAST_REALLOC, VMAP_FAST_KINDS };

/* A thread's heap: per class, the slab it allocates from and its others. */
struct vmap_heap {
	/* Mallocs and frees served by the fast paths (alloc.c), counted here
	 * and not in the statistics' per-thread deltas.  Written by the owner
	 * only, in steps: the fast paths count down mallocs_left and
	 * frees_left, and each time one reaches 0 it adds VMAP_HEAP_STEP to
	 * its total (one decrement and a jump a call, where a plain count was
	 * a load, an add and a store, and malloc's tick every 128th a test
	 * more); the thread's exit adds the rest.  The statistics add every
	 * heap's totals at a read, and the calling thread's own rest (exact
	 * for it and for exited threads; other running threads' lag by less
	 * than a step).  Heaps are never unmapped, a recycled heap keeps
	 * counting. */
	uint64_t fast_mallocs, fast_frees;
	int32_t mallocs_left, frees_left;
	/* The same for calloc's, the aligned calls' (neither in fast_mallocs)
	 * and the reallocs kept in place by realloc's fast path, by
	 * enum vmap_fast_kind. */
	int32_t kinds_left[VMAP_FAST_KINDS];
	uint64_t fast_kinds[VMAP_FAST_KINDS];
	struct vmap_heap *all_next; /* every heap ever made (vmap_slab_fast_counts) */
	struct vmap_slab *cur[NCLASSES];     /* never NULL: &vmap_slab_none when there is none */
	struct vmap_slab *partial[NCLASSES]; /* doubly linked through next/prev */
	struct vmap_slab *full[NCLASSES];
	struct vmap_slab *spare[NCLASSES];  /* one empty slab kept back, on no list (slab.c) */
	size_t spare_bytes;                 /* their bytes, at most SPARE_MAX */
	uint32_t hint[NCLASSES];      /* atomic: full slabs of this heap whose remote stack filled */
	uint32_t hint_seen[NCLASSES];
	uint8_t turns[NCLASSES]; /* slab changes of each class, up to slab.c's SMALL_SLABS */
	struct vmap_heap *next_free; /* on the recycle list */
};

/* Set once the slabs are switched on (BACKEND=builtin at init, auto later). */
extern bool vmap_slab_on;
extern uint64_t vmap_slab_key VMAP_HIDDEN; /* a freed object's second word is key ^ address */
extern struct vmap_slab vmap_slab_none; /* its free list is always empty */

void vmap_slab_init(void);

/* The out-of-line halves of the inline paths below (slab.c). */
struct vmap_heap *vmap_slab_heap_first(void);
struct vmap_slab *vmap_slab_refill(struct vmap_heap *h, unsigned c);
void vmap_slab_owner_free_slow(struct vmap_heap *h, struct vmap_slab *d);
void vmap_slab_remote_free(struct vmap_slab *d, void **o);
__attribute__((noreturn)) void vmap_slab_die(const char *who, const void *p, const char *what);

/* Sizes 1..VMAP_SLAB_MAX to classes in 16-byte steps (every class size is a
 * multiple of 16), filled by vmap_slab_init and tested against
 * vmap_slab_class for every size: one load instead of a bit scan and
 * five operations.  4 KiB, of which a program touches the lines of the
 * sizes it asks for. */
#define VMAP_SLAB_CLASS_SLOTS ((VMAP_SLAB_MAX >> 4) + 1)
extern uint8_t vmap_slab_class_tab[VMAP_SLAB_CLASS_SLOTS] VMAP_HIDDEN;

static inline unsigned vmap_slab_class_fast(size_t size)
{
	return vmap_slab_class_tab[(size + 15) >> 4];
}

/* The aligned calls' classes: for alignment 1 << k (k < VMAP_SLAB_ALIGNS, up
 * to 4 KiB: larger alignments go to the range allocator) and class c, the
 * first class from c on whose size is a multiple of the alignment (so are
 * its objects' addresses: slabs start 64 KiB-aligned), or NCLASSES when none
 * is; c itself for k up to 4 (every object is 16-aligned).  Rows of 64, for
 * the fast path's index (fast.h, vmap_slab_memalign). */
#define VMAP_SLAB_ALIGNS 13
extern uint8_t vmap_slab_align_tab[VMAP_SLAB_ALIGNS][64] VMAP_HIDDEN;

/* Every heap's fast-path counts (approximate for other running threads):
 * allocations of every kind and frees; of the allocations, calloc's and the
 * aligned calls'. */
void vmap_slab_fast_counts(uint64_t *allocs, uint64_t *frees);
void vmap_slab_fast_kinds(uint64_t *callocs, uint64_t *memaligns, uint64_t *reallocs);
/* Bytes of the slabs' objects in use, and the rest of the slabs (mallinfo). */
void vmap_slab_usage(uint64_t *in_use, uint64_t *rest);

/* 16-byte steps up to 128, then four classes per power of two. */
static inline unsigned vmap_slab_class(size_t size)
{
	if (size <= 128)
		return size ? (unsigned)((size - 1) >> 4) : 0;
	size_t s = size - 1;
	unsigned lg = 63u - (unsigned)__builtin_clzll(s); /* 7..15 */
	return 8 + (lg - 7) * 4 + (unsigned)(s >> (lg - 2)) - 4;
}

/* The next object a pop hands out, asked for now, for writing: when another
 * thread freed it (its remote stack), its line is in that thread's cache,
 * and the miss would stall the next pop on its first word; asked for here, it
 * overlaps with the caller's work on this object.  A producer that hands
 * its blocks to a consumer ran 1.4x as many operations a second with it.  A
 * prefetch faults on nothing (next may be NULL).  For sizes that are a
 * multiple of 4 KiB, next lies a multiple of 4 KiB from the object whose
 * free-list stores are still pending, the same low address bits, and a
 * prefetch of its first line cost a malloc(4096)/write/free loop a quarter
 * of its speed (about 50 M pairs a second against 70 M): for those the
 * prefetch asks for the second line (d->ahead 64), of no use but out of
 * that way, which costs two instructions fewer than a test of the size and
 * a jump around it. */
static inline void vmap_slab_prefetch(const struct vmap_slab *d, const void *next)
{
	/* (in integers: next may be NULL, and NULL + 0 is undefined in C) */
	__builtin_prefetch((const void *)((uintptr_t)next + d->ahead), 1);
}

/* The owner, in a section: takes o, the first object of d's free list, off
 * it, and returns NULL; or, when o's link leaves the slab (written by the
 * program after free), takes nothing and returns the link, for the caller
 * to stop on (vmap_slab_pop; the fast paths jump to their stop). */
static inline void *vmap_slab_pop_checked(struct vmap_slab *d, void **o)
{
	void *next = o[0];
	if (__builtin_expect((uintptr_t)next - d->start >= d->span, 0) && next)
		return next;
	d->free = next;
	vmap_slab_prefetch(d, next);
	d->over++;
	o[1] = NULL; /* the double-free mark */
	return NULL;
}

static inline void vmap_slab_pop(struct vmap_slab *d, void **o)
{
	void *bad = vmap_slab_pop_checked(d, o);
	if (__builtin_expect(bad != NULL, 0))
		vmap_slab_die("malloc", bad, "heap corruption: a freed object was overwritten");
}

/* Pops an object of class c; NULL when no slab could be had.  The caller
 * has checked that this thread is not re-entered (alloc.h). */
static inline void *vmap_slab_take(struct vmap_heap *h, unsigned c)
{
	vmap_depth_enter();
	struct vmap_slab *d = h->cur[c];
	void **o = (void **)d->free;
	if (__builtin_expect(!o, 0)) {
		d = vmap_slab_refill(h, c);
		if (!d) {
			vmap_depth_leave();
			return NULL;
		}
		o = (void **)d->free;
	}
	vmap_slab_pop(d, o);
	vmap_depth_leave();
	return o;
}

/* An object of at least size bytes (<= VMAP_SLAB_MAX), or NULL when no slab
 * could be had (the caller falls back to glibc).  Not re-entered. */
static inline void *vmap_slab_malloc(size_t size)
{
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(!h, 0) && !(h = vmap_slab_heap_first()))
		return NULL;
	return vmap_slab_take(h, vmap_slab_class(size));
}

/* The same with align (a power of two below the page size). */
void *vmap_slab_memalign(size_t align, size_t size);

/*
 * The index of p among d's objects when p is an object's start that the slab
 * has handed out; otherwise a number >= d->bump.  Without a division: with
 * size = odd << shift and off = p - start (< 2^18, slabs are at most 256 KiB),
 * off * inv mod 2^32 rotated right by shift is off / size when size divides
 * off; when it does not, either the low shift bits of the product are not
 * zero (inv is odd), so the rotation puts them on top (>= 2^16), or the
 * rotated value exceeds (2^(32-shift) - 1) / odd, the divisibility test by
 * multiplication with the inverse; both are above any slab's object count.
 * One compare instead of the index, its product and two compares.
 */
static inline uint32_t vmap_slab_index(const struct vmap_slab *d, const void *p)
{
	uint32_t x = (uint32_t)((uintptr_t)p - d->start) * d->inv;
	unsigned s = d->shift;
	return (x >> s) | (x << ((32 - s) & 31));
}

/* p must be an object's start that the slab has handed out. */
static inline void **vmap_slab_check(struct vmap_slab *d, const void *p, const char *who)
{
	if (__builtin_expect(vmap_slab_index(d, p) >= __atomic_load_n(&d->bump, __ATOMIC_RELAXED), 0))
		vmap_slab_die(who, p, "not the start of a block");
	return (void **)p;
}

/* Checks that p is the start of an object of slab d that is not free, and
 * marks it free; otherwise stops the program with one line naming `who`. */
static inline void **vmap_slab_mark_free(struct vmap_slab *d, void *p, const char *who)
{
	void **o = vmap_slab_check(d, p, who);
	uintptr_t mark = vmap_slab_key ^ (uintptr_t)p;
	if (__builtin_expect((uintptr_t)o[1] == mark, 0))
		vmap_slab_die(who, p, "double free: the block was already freed");
	o[1] = (void *)mark;
	return o;
}

/* The owner, in a section: pushes o onto d's free list.  True when d has to
 * change lists (the caller calls vmap_slab_owner_free_slow): full -> partial
 * once an eighth of its objects are free again (at the first free, a slab
 * went back and forth: the next refill took the slab with one free object,
 * which ran dry at the next malloc -- alloc-test's random frees took a
 * refill every 3.3 mallocs), partial -> given back when empty; the current
 * slab stays, even empty.  The state's threshold is in wake, and over
 * counts down to it (vmap_slab_set_state): one decrement and a jump for every
 * state, where the state's own tests took up to eight instructions more for
 * the frees into slabs other than the current one, most frees of a program
 * that frees at random. */
static inline bool vmap_slab_push(struct vmap_slab *d, void **o)
{
	o[0] = d->free;
	d->free = o;
	return __builtin_expect(--d->over == 0, 0);
}

/* The threshold of vmap_slab_push for state st: never for the current slab
 * (or one on no list), empty for a partial one, an eighth free for a full
 * one. */
static inline int32_t vmap_slab_wake(const struct vmap_slab *d, unsigned st)
{
	if (st == SLAB_PARTIAL)
		return 0;
	if (st == SLAB_FULL)
		return (int32_t)(d->cap - (d->cap + 7) / 8);
	return -1;
}

/* The owner (or whoever takes the slab over): d's state and its threshold,
 * used kept.  over stays >= 1 while the slab is the owner's: the owner's
 * free that brings it to 0 is the one that moves the slab. */
__attribute__((always_inline)) static inline void vmap_slab_set_state(struct vmap_slab *d, unsigned st, int order)
{
	int32_t used = d->over + d->wake, wake = vmap_slab_wake(d, st);
	if (wake >= used) /* (a full slab at its threshold already: the next free moves it) */
		wake = used - 1;
	d->wake = wake;
	d->over = used - wake; /* >= 1: the free that brings it to 0 moves the slab */
	__atomic_store_n(&d->state, (uint8_t)st, order);
}

/* Frees object p of slab d; a pointer that is not an object's start, or an
 * object already free, stops the program with one line naming `who`. */
static inline void vmap_slab_free(struct vmap_slab *d, void *p, const char *who)
{
	void **o = vmap_slab_mark_free(d, p, who);
	struct vmap_heap *h = vmap_tls.heap;
	if (__builtin_expect(__atomic_load_n(&d->owner, __ATOMIC_RELAXED) == h, 1)) {
		vmap_depth_enter();
		if (vmap_slab_push(d, o))
			vmap_slab_owner_free_slow(h, d);
		vmap_depth_leave();
	} else {
		vmap_slab_remote_free(d, o);
	}
}

/* The slab holding p (an address inside region r), or NULL. */
static inline struct vmap_slab *vmap_slab_of(struct vmap_region *r, uintptr_t p)
{
	struct vmap_slab *t = __atomic_load_n(&r->slabs, __ATOMIC_ACQUIRE);
	if (!t)
		return NULL;
	return __atomic_load_n(&t[(p - r->base) >> VMAP_SLAB_UNIT_SHIFT].head, __ATOMIC_RELAXED);
}

/* The slab holding p, or NULL (a large block, glibc's, or no pointer of
 * ours): the span test of vmap_region_of rejects glibc's pointers with two
 * words of the hot page, without reading the region table. */
static inline struct vmap_slab *vmap_slab_at(uintptr_t p)
{
	struct vmap_region *r = vmap_region_of(p);
	return r ? vmap_slab_of(r, p) : NULL;
}

/* Whether p lies in a slab (so is a small object, not a large block). */
static inline bool vmap_in_slab(uintptr_t p)
{
	return vmap_slab_at(p) != NULL;
}

/* The usable size of object p (checked as for free; with live, a freed
 * object stops the program too: realloc). */
size_t vmap_slab_usable(struct vmap_slab *d, const void *p, const char *who, bool live);
/* Gives this thread's slabs up (empty ones back to the arena, the others to
 * whichever thread next needs their class). */
void vmap_slab_thread_exit(void);
/* malloc_trim: slabs exited threads left and the caller's own slabs, emptied
 * since by other threads' frees, go back to the range allocator (to be
 * purged with the rest). */
void vmap_slab_trim(void);
/* Size classes, for the tests. */
unsigned vmap_slab_class_of(size_t size);
size_t vmap_slab_class_size(unsigned cls);
unsigned vmap_slab_nclasses(void);

#endif
