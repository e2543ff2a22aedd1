/*
 * mmap_impl.h — what the files of the program's mmap family share, and
 * nothing else uses: the pieces arena pages are classified into and the walk
 * over them, the attributes that mirror the program's VMAs (mmap_vma.c), and
 * the served-mapping primitives of mmap.c that mremap.c builds on.
 *
 * Layers, downward only:  mremap.c -> mmap.c -> mmap_vma.c -> range.h
 */
#ifndef VMAP_MMAP_IMPL_H
#define VMAP_MMAP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "counter.h"
#include "range.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

/* Ranges ending above the user address space are the kernel's EINVAL
 * (x86-64 and arm64 with 4-level tables: 128 TiB). */
#define TASK_TOP (((uintptr_t)1 << 47) - VMAP_PAGE)

static inline void count(enum vmap_stat s, int64_t d)
{
	vmap_stat_add_cpu(0, s, d);
}

static inline bool overlaps_arena(uintptr_t a, uintptr_t e)
{
	return e > vmap_span_lo && a < vmap_span_hi;
}

/* ---- classification of arena pages (mmap_vma.c) ------------------------ */

enum piece_kind {
	PIECE_MAPPED,  /* a live served mapping: the program's */
	PIECE_FOREIGN, /* the program's own MAP_FIXED mapping over arena pages */
	PIECE_MALLOC,  /* a live malloc block */
	PIECE_CACHED,  /* a freed block vmapalloc holds (pools, caches, a purge) */
	PIECE_HOLE,    /* free arena space: unmapped from the program's point of view */
};

struct piece {
	uintptr_t head;
	uint64_t tag;
	uintptr_t end;
	enum piece_kind kind;
};

/* The area or free run containing page a (tags sit at heads and free tails). */
struct piece vmap_piece_at(uintptr_t a);

/* Calls fn on each piece of [a, e) inside the arena; stops at a non-zero
 * return.  Pieces outside the arena are reported with r == NULL. */
typedef int (*piece_fn)(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
			void *arg);
int vmap_walk(uintptr_t a, uintptr_t e, piece_fn fn, void *arg);

/* piece_fn tests: 1 at a live malloc block, at a mapping of the program's
 * (served or foreign), at sealed served pages. */
int vmap_find_malloc(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg);
int vmap_find_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg);
int vmap_find_sealed(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg);

/* Flushes freed blocks held for reuse out of [a, e); false if some remain. */
bool vmap_release_cached(uintptr_t a, uintptr_t e);

/* ---- the program's VMAs inside a served mapping (mmap_vma.c) ----------- */

/* The attributes of one page, as the kernel's VMA flags would hold them. */
enum {
	VA_PROT = 0x7,     /* PROT_READ | PROT_WRITE | PROT_EXEC */
	VA_RA_SHIFT = 3,   /* 2 bits: 0 normal, 1 MADV_RANDOM, 2 MADV_SEQUENTIAL */
	VA_DONTCOPY = 1 << 5,
	VA_DONTDUMP = 1 << 6,
	VA_WIPEONFORK = 1 << 7,
	VA_THP_SHIFT = 8,  /* 2 bits: 0 default, 1 MADV_HUGEPAGE, 2 MADV_NOHUGEPAGE */
	VA_MERGEABLE = 1 << 10,
	VA_LOCKED = 1 << 11,
	VA_ONFAULT = 1 << 12,
	VA_SEALED = 1 << 14, /* mseal: bit 44 of the head tag (VMAP_TAG_VMA) */
	VA_BITS = 0x1fff | VA_SEALED,
	VA_APART = 1 << 13, /* a label, in a page's page_attr only (mmap_vma.c) */
	/* State the kernel keeps per VMA and does not show (mmap_vma.c): never
	 * applied to the kernel, never in a head tag. */
	VA_NOACCT = 1 << 15, /* VM_ACCOUNT dropped: a flag VMAs merge by */
	VA_NOANON = 1 << 16, /* no anon_vma ... */
	VA_ANON_SHIFT = 17,  /* ... or which one: 4 bits, told apart in a mapping */
	VA_ANON = 0xf << VA_ANON_SHIFT,
	VA_POPULATE = 1 << 21, /* no anon_vma, one due: a passing mark */
	VA_PGOFF = 1 << 22,    /* a label: where it differs, page offsets do not follow */
	VA_HIDDEN = VA_NOACCT | VA_NOANON | VA_ANON | VA_POPULATE | VA_PGOFF,
	VA_FLAGS = VA_BITS | VA_NOACCT, /* what neighbours must share to merge */
};
#define VA_FRESH ((unsigned)(PROT_READ | PROT_WRITE)) /* what a served mmap() has */
#define VA_PUB(v) ((v) & (unsigned)VA_BITS) /* the attributes without the label */
/* What tells a page's VMA from its neighbours: a boundary is where it differs. */
#define VA_KEY(v) ((v) & (unsigned)(VA_FLAGS | VA_APART | VA_PGOFF))

/* The attributes held in a head tag, and the tag bits holding v (the label
 * is never written to a head tag). */
static inline unsigned head_attrs(uint64_t t)
{
	return (unsigned)((t & VMAP_TAG_VMA) >> VMAP_TAG_VMA_SHIFT) ^ VA_FRESH;
}

static inline uint64_t attrs_bits(unsigned v)
{
	return (uint64_t)(VA_PUB(v) ^ VA_FRESH) << VMAP_TAG_VMA_SHIFT;
}

/* What mprotect/madvise/mincore/mlock/munlock/mlock2/mseal of a range does
 * (mmap.c): the call, its argument, and what the walk found. */
enum range_op { OP_MPROTECT, OP_MADVISE, OP_MINCORE, OP_MLOCK, OP_MUNLOCK, OP_MLOCK2, OP_MSEAL };

struct apply {
	enum range_op op;
	long arg;
	unsigned char *vec;
	uintptr_t start;
	bool attr, hole;
	int rc;
};

unsigned vmap_attrs_at(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x);
void vmap_set_attrs(struct vmap_region *r, uintptr_t x, uintptr_t e, unsigned v);
bool vmap_spans_vmas(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len);
bool vmap_locked_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len);
bool vmap_sealed_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len);
void vmap_realize_attrs(uintptr_t x, size_t len, unsigned v);
void vmap_realize_range(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			uintptr_t e);
void vmap_inherit_attrs(struct vmap_region *r, uint64_t st, uintptr_t head, uintptr_t x,
			size_t len, uintptr_t q, size_t qlen, size_t from);
void vmap_rebase_labels(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			uintptr_t end);
void vmap_relabel(struct vmap_region *r, uintptr_t head, uintptr_t end, uint64_t t, uintptr_t a,
		  uintptr_t e, int op, long arg, bool keep);
void vmap_record_attrs(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
		       struct apply *ap);
void vmap_clear_hidden(struct vmap_region *r, uintptr_t head);
void vmap_set_head_hidden(struct vmap_region *r, uintptr_t head, unsigned v, bool any);
bool vmap_has_hidden(struct vmap_region *r, uintptr_t head);
void vmap_emptied(struct vmap_region *r, uintptr_t head, uintptr_t x, uintptr_t e);
void vmap_populated(struct vmap_region *r, uintptr_t head, uintptr_t x);

/* ---- served mappings (mmap.c), for mremap.c ---------------------------- */

/* One diagnostic line for a call aimed at vmapalloc's memory (EINVAL). */
void vmap_mmap_refuse(const char *call, uintptr_t a);
/* Cuts [a, e) out of the served mapping p.  0 or -errno. */
int vmap_cut_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e);
/* piece_fn: unmaps the piece from the program's view (arg: bool *, set
 * when a served mapping was cut). */
int vmap_unmap_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg);
/* piece_fn: carves the free piece out for the kernel to map (a foreign
 * range); 1 if it is not free. */
int vmap_take_hole(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg);
/* A new served mapping of len bytes, zero-filled; NULL when the arena is full. */
void *vmap_serve(size_t len, int flags);
/* The system call of ap->op over [a, a + len).  0 or -errno. */
int vmap_kernel_op(struct apply *ap, uintptr_t a, size_t len);

#endif
