/*
 * mmap.c — the program's own anonymous mmap, served by the range allocator
 * with the kernel's semantics (DESIGN.md §3).
 *
 * Served: private, anonymous, read-write requests without an address hint,
 * fd -1, offset 0, and none of MAP_FIXED(_NOREPLACE), MAP_SHARED, MAP_HUGETLB,
 * MAP_GROWSDOWN, MAP_STACK, MAP_32BIT, MAP_LOCKED; MAP_POPULATE and
 * MAP_NORESERVE are honoured.  Everything else goes to the kernel unchanged
 * through the raw system call, with the kernel's result and errno.
 *
 * A served mapping is an area tagged VMAP_TAG_MMAP: all its pages are the
 * program's (no guard page), zero-filled when handed out.  munmap() of any
 * part of it — head, tail, middle, several mappings and holes in one call —
 * splits the area exactly; the unmapped pages get guard markers
 * (MADV_GUARD_INSTALL: they fault like unmapped memory without splitting the
 * arena's VMA; mprotect(PROT_NONE) on kernels without it) and become a
 * "guarded" free run, un-guarded when reused.  mprotect/madvise/mincore/
 * mremap aimed at such pages fail as on unmapped memory (ENOMEM, EFAULT).
 * An area whose protection or advice the program changed is flagged ATTR and
 * reset with a fresh mapping before reuse; where it changed them for part of
 * the area only, the area mirrors the VMAs the kernel would have split it
 * into, and mremap refuses to resize across them (EFAULT) as the kernel does
 * ("the program's VMAs" below).  mremap moves a served mapping into a new
 * served one, also with MREMAP_FIXED to free arena space (carve_at).
 * munmap/mremap/MAP_FIXED aimed at a live malloc block or at vmapalloc's
 * metadata are refused with EINVAL and one diagnostic line.  MAP_FIXED,
 * MAP_FIXED_NOREPLACE and hints aimed at arena pages that are free from the
 * program's point of view get them: the pages are carved out and handed to
 * the kernel (a "foreign" range, ours again once the program unmaps it).
 *
 * Owns no state of its own beyond counters; every tag change happens under
 * the owner shard's lock (range.h), system calls outside it — but for the
 * attribute bits of a live served mapping (ATTR, VMA, SEGS), which
 * mprotect/madvise/mlock change lock-free with an atomic read-modify-write.
 *
 * Re-entered (a signal handler that interrupted this thread inside the
 * allocator, alloc.h): nothing here may take a shard lock, so mmap goes to
 * the kernel, munmap of arena pages is deferred to the end of the
 * interrupted call, and MAP_FIXED or mremap into the arena is refused with
 * ENOMEM (vmap_*_reentered below).  mprotect, madvise, mincore and mlock
 * take no lock: they need no other path.
 *
 * Called by: preload/mmap.c (the exported names).
 */
#include "mmap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "counter.h"
#include "fmt.h"
#include "options.h"
#include "observe.h"
#include "range.h"
#include "thread.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

#define SERVED_MAX ((size_t)1 << 36) /* 64 GiB: larger requests go to the kernel */
/* Ranges ending above the user address space are the kernel's EINVAL
 * (x86-64 and arm64 with 4-level tables: 128 TiB). */
#define TASK_TOP (((uintptr_t)1 << 47) - VMAP_PAGE)

static inline void count(enum vmap_stat s, int64_t d)
{
	vmap_stat_add_cpu(0, s, d);
}

static void refuse(const char *call, uintptr_t a)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_str(&b, "vmapalloc: ");
	vmap_buf_str(&b, call);
	vmap_buf_str(&b, "(");
	vmap_buf_hex(&b, a);
	vmap_buf_str(&b, ") aimed at memory vmapalloc uses (a live malloc block or its metadata): "
			 "refused with EINVAL\n");
	vmap_buf_flush(&b);
	count(VMAP_STAT_mmap_refused, 1);
}

/* ---- classification of arena pages --------------------------------------- */

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
static struct piece piece_at(uintptr_t a)
{
	struct vmap_pte_ref ref;
	vmap_pte_lookup(a, VMAP_PTE_AREA, &ref);
	struct piece p = {ref.head, ref.tag, ref.end, PIECE_HOLE};
	if (!ref.pte)
		return p; /* a chunk no shard took yet: free, up to the chunk's end */
	switch (vmap_tag_state(ref.tag)) {
	case VMAP_ST_LIVE:
		p.kind = (ref.tag & VMAP_TAG_MMAP) ? PIECE_MAPPED : PIECE_MALLOC;
		break;
	case VMAP_ST_FOREIGN:
		p.kind = PIECE_FOREIGN;
		break;
	case VMAP_ST_FREE:
		p.kind = PIECE_HOLE;
		break;
	default:
		p.kind = PIECE_CACHED; /* CACHED / PURGING: vmapalloc's */
		break;
	}
	return p;
}

/* Calls fn on each piece of [a, e) inside the arena; stops at a non-zero
 * return.  Pieces outside the arena are reported with r == NULL. */
typedef int (*piece_fn)(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
			void *arg);

static int walk(uintptr_t a, uintptr_t e, piece_fn fn, void *arg)
{
	while (a < e) {
		struct vmap_region *r = vmap_region_of(a);
		if (!r) {
			/* Up to the next region start, or e. */
			uintptr_t next = e;
			for (unsigned i = 0; i < vmap_nregions; i++)
				if (vmap_regions[i].base > a && vmap_regions[i].base < next)
					next = vmap_regions[i].base;
			struct piece p = {a, 0, next, PIECE_HOLE};
			int rc = fn(NULL, &p, a, next, arg);
			if (rc)
				return rc;
			a = next;
			continue;
		}
		struct piece p = piece_at(a);
		uintptr_t pe = p.end < e ? p.end : e;
		if (pe > r->base + r->size)
			pe = r->base + r->size;
		int rc = fn(r, &p, a, pe, arg);
		if (rc)
			return rc;
		a = pe;
	}
	return 0;
}

static int find_malloc(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)e;
	(void)arg;
	(void)a;
	return r && p->kind == PIECE_MALLOC ? 1 : 0;
}

static int find_cached(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)a;
	(void)e;
	(void)arg;
	return r && p->kind == PIECE_CACHED ? 1 : 0;
}

/*
 * Freed blocks that vmapalloc keeps for reuse are free address space from
 * the program's point of view: before a MAP_FIXED-like call takes [a, e),
 * this thread's cache and the shards' pools are flushed into free runs so
 * that the range can be carved.  (Other threads' caches are out of reach;
 * a range still holding some of their blocks is refused.)
 */
static bool release_cached(uintptr_t a, uintptr_t e)
{
	if (!walk(a, e, find_cached, NULL))
		return true;
	vmap_range_flush_cached();
	return !walk(a, e, find_cached, NULL);
}

static int find_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)a;
	(void)e;
	(void)arg;
	return r && (p->kind == PIECE_MAPPED || p->kind == PIECE_FOREIGN) ? 1 : 0;
}

static bool sealed_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len);

/* Sealed pages of the program's (mseal): munmap, MAP_FIXED and mremap over
 * them fail with EPERM, having changed nothing, as the kernel's do. */
static int find_sealed(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)arg;
	return r && p->kind == PIECE_MAPPED && sealed_in(r, p->head, p->tag, a, e - a) ? 1 : 0;
}

/* ---- the program's VMAs inside a served mapping ----------------------------- */

/*
 * The kernel gives a mapping one VMA per run of pages with equal attributes
 * (protection, the VMA-flag advice, locking): mprotect, madvise or mlock of a
 * strict sub-range that changes them splits it, and a later call that makes
 * neighbours equal again merges them.  mremap then resizes or moves one VMA
 * only (EFAULT across a boundary; since Linux 6.17 a same-size MREMAP_FIXED
 * move may take several).  The arena's own VMAs say nothing about this (they
 * are split by vmapalloc's page moves too), so a served mapping mirrors the
 * program's view in its page-table entries (range.h): the attributes of its
 * first page in the head tag, and, once the program made them differ inside
 * it (VMAP_TAG_SEGS), each other page's in that page's entry.  A boundary is
 * wherever two neighbouring pages differ, which is where the kernel has one.
 *
 * Written only by mprotect/madvise/mlock/munlock of served pages and by
 * mremap; read only by mremap and when a mapping is cut or grown: the served
 * mmap/munmap paths do not touch it (a fresh mapping's attributes encode as
 * 0).  Two threads changing attributes of the same mapping at once may leave
 * it approximate (no lock: these calls must work from a signal handler);
 * the kernel would serialise them.
 */
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
	VA_APART = 1 << 13, /* a label, in a page's page_attr only: see below */
};
/*
 * VA_APART: the kernel can keep two neighbouring VMAs apart although their
 * attributes are equal.  MREMAP_DONTUNMAP clears VM_LOCKED of the whole VMA
 * the pages leave without merging it with its neighbours (mm/mremap.c,
 * dontunmap_complete: vm_flags_clear(vrm->vma, VM_LOCKED_MASK), no
 * vma_merge), so that VMA stays one of its own: mremap across it fails with
 * EFAULT.  Such boundaries are kept by labels: two neighbouring pages of
 * equal attributes are in different VMAs where VA_APART differs.  The first
 * page's label is 0 (its head tag has no room); the others' is in their
 * page_attr words.  A label is never applied to the kernel (realize_attrs), never
 * written to a head tag (attrs_bits), and dropped where pages move
 * (inherit_attrs).  It follows the kernel's merges (relabel): a VMA whose
 * flags change by mprotect/madvise/mlock/munlock/mseal merges with the
 * neighbours whose flags are then equal (mm/vma.c, vma_modify_flags ->
 * vma_merge_existing_range); VMAs whose flags do not change are left alone
 * (mprotect_fixup, madvise_update_vma, mlock_fixup return early), and so are
 * the boundaries between them.
 */
#define VA_FRESH ((unsigned)(PROT_READ | PROT_WRITE)) /* what a served mmap() has */
#define VA_PUB(v) ((v) & (unsigned)VA_BITS) /* the attributes without the label */

static inline unsigned head_attrs(uint64_t t)
{
	return (unsigned)((t & VMAP_TAG_VMA) >> VMAP_TAG_VMA_SHIFT) ^ VA_FRESH;
}

static inline uint64_t attrs_bits(unsigned v)
{
	return (uint64_t)(VA_PUB(v) ^ VA_FRESH) << VMAP_TAG_VMA_SHIFT;
}

/* The attributes of page x of the served mapping at head (tag t). */
static unsigned attrs_at(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x)
{
	if (x == head || !(t & VMAP_TAG_SEGS))
		return head_attrs(t);
	return ((unsigned)vmap_pte_of(r, x)->page_attr & (VA_BITS | VA_APART)) ^ VA_FRESH;
}

static void set_attrs(struct vmap_region *r, uintptr_t x, uintptr_t e, unsigned v)
{
	for (struct vmap_pte *p = vmap_pte_of(r, x); x < e; x += VMAP_PAGE, p++)
		p->page_attr = VMAP_PTE_SEG | (v ^ VA_FRESH);
}

/* Changes the attribute bits of a live served mapping's head tag (the rest
 * of the tag may change under the owner shard's lock meanwhile). */
static void tag_attrs(struct vmap_pte *h, uint64_t clear, uint64_t set)
{
	uint64_t t = __atomic_load_n(&h->tag, __ATOMIC_RELAXED);
	while (vmap_tag_state(t) == VMAP_ST_LIVE &&
	       !__atomic_compare_exchange_n(&h->tag, &t, (t & ~clear) | set, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
}

/* Does [x, x + len) of the served mapping cross one of the program's VMA
 * boundaries?  O(len / page) when the mapping was split, O(1) otherwise. */
static bool spans_vmas(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	if (!(t & VMAP_TAG_SEGS) || len <= VMAP_PAGE)
		return false;
	unsigned v = attrs_at(r, head, t, x);
	for (uintptr_t y = x + VMAP_PAGE; y < x + len; y += VMAP_PAGE)
		if (attrs_at(r, head, t, y) != v)
			return true;
	return false;
}

/* Do any pages of [x, x + len) of the served mapping carry attribute bit
 * `va` (VA_LOCKED: mlocked; VA_SEALED: mseal)? */
static bool attr_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len,
		    unsigned va)
{
	if (!(t & VMAP_TAG_ATTR))
		return false;
	if (!(t & VMAP_TAG_SEGS))
		return head_attrs(t) & va;
	for (uintptr_t y = x; y < x + len; y += VMAP_PAGE)
		if (attrs_at(r, head, t, y) & va)
			return true;
	return false;
}

static bool locked_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	return attr_in(r, head, t, x, len, VA_LOCKED);
}

static bool sealed_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	return attr_in(r, head, t, x, len, VA_SEALED);
}

/* Makes fresh pages [x, x + len) (read-write, no advice, unlocked) have the
 * attributes v, as the kernel's pages of a VMA with them would. */
static void realize_attrs(uintptr_t x, size_t len, unsigned v)
{
	static const int ra[4] = {0, MADV_RANDOM, MADV_SEQUENTIAL, 0};
	static const int thp[4] = {0, MADV_HUGEPAGE, MADV_NOHUGEPAGE, 0};
	v = VA_PUB(v); /* the label is vmapalloc's alone */
	if (v == VA_FRESH || !len)
		return;
	void *p = (void *)x;
	if (ra[(v >> VA_RA_SHIFT) & 3])
		vmap_os_madvise(p, len, ra[(v >> VA_RA_SHIFT) & 3]);
	if (thp[(v >> VA_THP_SHIFT) & 3])
		vmap_os_madvise(p, len, thp[(v >> VA_THP_SHIFT) & 3]);
	if (v & VA_DONTCOPY)
		vmap_os_madvise(p, len, MADV_DONTFORK);
	if (v & VA_DONTDUMP)
		vmap_os_madvise(p, len, MADV_DONTDUMP);
	if (v & VA_WIPEONFORK)
		vmap_os_madvise(p, len, MADV_WIPEONFORK);
	if (v & VA_MERGEABLE)
		vmap_os_madvise(p, len, MADV_MERGEABLE);
	if (v & VA_LOCKED)
		vmap_os_mlock(p, len, (v & VA_ONFAULT) ? 1 /* MLOCK_ONFAULT */ : 0);
	if ((v & VA_PROT) != VA_FRESH)
		vmap_os_mprotect(p, len, (int)(v & VA_PROT));
}

/* realize_attrs over [x, e) of the served mapping at head, run by run. */
static void realize_range(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			  uintptr_t e)
{
	while (x < e) {
		unsigned v = attrs_at(r, head, t, x);
		uintptr_t y = x + VMAP_PAGE;
		while (y < e && attrs_at(r, head, t, y) == v)
			y += VMAP_PAGE;
		realize_attrs(x, y - x, v);
		x = y;
	}
}

/*
 * The pages [x, x + len) of the served mapping src (head, tag st) went to the
 * served mapping at q of qlen bytes (tag set, no attributes yet): q takes
 * their attributes, and the pages past len those of the last one (the
 * kernel grows the moved VMA).  The attributes of [q + from, q + qlen) are
 * then made real (pages that were not moved but are fresh).
 */
static void inherit_attrs(struct vmap_region *r, uint64_t st, uintptr_t head, uintptr_t x,
			  size_t len, uintptr_t q, size_t qlen, size_t from)
{
	if (!(st & VMAP_TAG_ATTR))
		return; /* as mmap() made it, like the new mapping */
	struct vmap_region *rq = vmap_region_of(q);
	if (!rq)
		return;
	uint64_t set = VMAP_TAG_ATTR | attrs_bits(attrs_at(r, head, st, x));
	if (spans_vmas(r, head, st, x, len)) {
		/* (Without labels: VMAs that were apart only by them merge where
		 * they land, vma_merge_new_range in copy_vma.) */
		for (size_t o = VMAP_PAGE; o < len; o += VMAP_PAGE)
			set_attrs(rq, q + o, q + o + VMAP_PAGE, VA_PUB(attrs_at(r, head, st, x + o)));
		set_attrs(rq, q + len, q + qlen, VA_PUB(attrs_at(r, head, st, x + len - VMAP_PAGE)));
		set |= VMAP_TAG_SEGS;
	}
	struct vmap_pte *h = vmap_pte_of(rq, q);
	tag_attrs(h, VMAP_TAG_VMA | VMAP_TAG_SEGS, set);
	realize_range(rq, q, __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE), q + from, q + qlen);
}

/* Page x of the served mapping at head (tag t) is to be the first page of a
 * mapping, whose label is 0: if x's is not, the labels of the pages after it
 * with attributes equal to its are flipped, which keeps every boundary. */
static void rebase_labels(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			  uintptr_t end)
{
	if (!(t & VMAP_TAG_SEGS) || x == head)
		return;
	unsigned v = attrs_at(r, head, t, x);
	if (!(v & VA_APART))
		return;
	for (x += VMAP_PAGE; x < end; x += VMAP_PAGE) {
		struct vmap_pte *q = vmap_pte_of(r, x);
		if (VA_PUB(((unsigned)q->page_attr) ^ VA_FRESH) != VA_PUB(v))
			break;
		q->page_attr ^= VA_APART;
	}
}

/* ---- unmapping part of a served mapping ----------------------------------- */

/* Makes [a, e) fault like unmapped memory.  0 or -errno. */
static int make_unmapped(uintptr_t a, uintptr_t e, bool attr)
{
	size_t len = e - a;
	if (attr) {
		/* Reset protection/advice/locking with a fresh mapping first. */
		int rc = vmap_os_map_fresh((void *)a, len);
		if (rc)
			return rc;
	}
	if (vmap_guard_markers()) {
		int rc = vmap_os_madvise((void *)a, len, MADV_GUARD_INSTALL);
		if (rc == 0)
			return 0;
		if (!attr && rc == -EINVAL) /* e.g. mlocked: reset, then try again */
			return make_unmapped(a, e, true);
		/* After the fresh mapping the content is gone: the unmap took
		 * place, only its pages do not fault (they read zero, as a
		 * guarded run must).  Failing would tell the program its
		 * mapping is still there (rel-strace-inject). */
		return attr ? 0 : rc;
	}
	/* Older kernels: PROT_NONE (splits the VMA; the pages are dropped first
	 * so that they are zero when un-guarded). */
	if (vmap_os_madvise((void *)a, len, MADV_DONTNEED)) {
		int rc = vmap_os_map_fresh((void *)a, len);
		if (rc)
			return attr ? 0 : rc; /* (as above) */
	}
	return vmap_os_mprotect((void *)a, len, PROT_NONE);
}

/* At most vmap_vma_budget() / 32 lazily unmapped runs (511 of the default
 * 65530): each may cost the arena VMA two splits. */

/* Cuts [a, e) out of the served mapping p (shard lock not held).  Lazily
 * when it can: PROT_NONE keeps the pages resident for the next mmap (one
 * mprotect and a memset instead of a page fault per page), within the cache
 * budget; otherwise guard markers drop them. */
static int cut_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e)
{
	uint64_t t = p->tag;
	unsigned state = VMAP_RUN_GUARDED;
	int rc = -1;
	if (!(t & VMAP_TAG_ATTR) && e - a <= vmap_lazy_max / 4 &&
	    __atomic_add_fetch(&vmap_protected_runs, 1, __ATOMIC_RELAXED) <= (int)(vmap_vma_budget() / 32)) {
		rc = vmap_os_mprotect((void *)a, e - a, PROT_NONE);
		if (rc == 0)
			state = VMAP_RUN_PROTECTED;
	}
	if (rc) {
		if (!(t & VMAP_TAG_ATTR) && e - a <= vmap_lazy_max / 4)
			__atomic_sub_fetch(&vmap_protected_runs, 1, __ATOMIC_RELAXED);
		rc = make_unmapped(a, e, t & VMAP_TAG_ATTR);
		if (rc)
			return rc;
	}
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	bool big = t & VMAP_TAG_BIG;
	uint64_t keep = t & (VMAP_TAG_BIG | VMAP_TAG_MMAP | VMAP_TAG_ATTR);
	vmap_shard_lock(s);
	struct vmap_pte *h = vmap_pte_of(r, p->head);
	uint64_t left = (a - p->head) >> VMAP_PAGE_SHIFT, right = (p->end - e) >> VMAP_PAGE_SHIFT;
	/* The pieces left keep the attributes the program gave their pages (its
	 * VMAs): the right one's first page's go to its head tag.  Read before
	 * the profile takes e's entry over.  (The attribute bits may have
	 * changed since p was read: mprotect takes no lock.) */
	uint64_t cur = __atomic_load_n(&h->tag, __ATOMIC_RELAXED);
	if ((cur ^ t) & ~(VMAP_TAG_VMA | VMAP_TAG_SEGS))
		cur = t;
	uint64_t lkeep = keep | (cur & (VMAP_TAG_VMA | VMAP_TAG_SEGS));
	uint64_t rkeep = keep | (cur & VMAP_TAG_SEGS);
	if (right && (cur & VMAP_TAG_ATTR)) {
		rkeep |= attrs_bits(attrs_at(r, p->head, cur, e));
		rebase_labels(r, p->head, cur, e, p->end);
	}
	if (__builtin_expect(vmap_profile_on, 0)) /* its record follows the pieces left */
		vmap_observe.mmap_cut(p->head, p->end, a, e);
	__atomic_store_n(&h->tag,
			 left ? vmap_tag_make(VMAP_ST_LIVE, s->id, left, lkeep) : 0, __ATOMIC_RELEASE);
	if (right)
		__atomic_store_n(&vmap_pte_of(r, e)->tag,
				 vmap_tag_make(VMAP_ST_LIVE, s->id, right, rkeep), __ATOMIC_RELEASE);
	vmap_free_insert_locked(s, a, (e - a) >> VMAP_PAGE_SHIFT, state, big, vmap_os_now_ns());
	vmap_shard_unlock(s);
	count(VMAP_STAT_mmap_bytes_in_use, -(int64_t)(e - a));
	if (state == VMAP_RUN_PROTECTED) {
		count(VMAP_STAT_cached_bytes, (int64_t)(e - a));
		vmap_purge_maybe(vmap_os_now_ns());
	}
	if (left || right)
		count(VMAP_STAT_munmap_partial, 1);
	return 0;
}

/* A foreign range the program unmaps: back to the kernel, then ours again. */
static int cut_foreign(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e)
{
	int rc = vmap_os_munmap((void *)a, e - a);
	if (rc)
		return rc;
	if (vmap_os_map_fresh((void *)a, e - a))
		return 0; /* a hole in the arena: it stays foreign (never reused) */
	/* The placeholder must fault like the unmapped memory it stands for. */
	if (make_unmapped(a, e, false))
		return 0; /* cannot: keep it foreign, never handed out */
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	vmap_shard_lock(s);
	uint64_t left = (a - p->head) >> VMAP_PAGE_SHIFT, right = (p->end - e) >> VMAP_PAGE_SHIFT;
	uint64_t keep = t & VMAP_TAG_BIG;
	__atomic_store_n(&vmap_pte_of(r, p->head)->tag,
			 left ? vmap_tag_make(VMAP_ST_FOREIGN, s->id, left, keep) : 0, __ATOMIC_RELEASE);
	if (right)
		__atomic_store_n(&vmap_pte_of(r, e)->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, right, keep), __ATOMIC_RELEASE);
	vmap_free_insert_locked(s, a, (e - a) >> VMAP_PAGE_SHIFT, VMAP_RUN_GUARDED, t & VMAP_TAG_BIG,
				0);
	vmap_shard_unlock(s);
	return 0;
}

static int unmap_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	bool *any = arg;
	if (!r) {
		/* Outside the arena: the kernel's business. */
		int rc = vmap_os_munmap((void *)a, e - a);
		return rc ? rc : 0;
	}
	if (p->kind == PIECE_MAPPED) {
		*any = true;
		return cut_mapped(r, p, a, e);
	}
	if (p->kind == PIECE_FOREIGN)
		return cut_foreign(r, p, a, e);
	return 0; /* a hole: already unmapped from the program's view */
}

static bool overlaps_arena(uintptr_t a, uintptr_t e)
{
	return e > vmap_span_lo && a < vmap_span_hi;
}

/* munmap's argument checks, the kernel's: the page-rounded length, or 0 for
 * EINVAL. */
static size_t munmap_len(uintptr_t a, size_t len)
{
	if ((a & (VMAP_PAGE - 1)) || len == 0)
		return 0;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!rounded || e <= a || e > TASK_TOP)
		return 0;
	return rounded;
}

int vmap_munmap(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_munmap(addr, len);
	size_t rounded = munmap_len(a, len);
	if (!rounded)
		return -EINVAL;
	uintptr_t e = a + rounded;
	if (vmap_range_is_metadata(a, e)) {
		refuse("munmap", a);
		return -EINVAL;
	}
	if (!overlaps_arena(a, e))
		return vmap_os_munmap(addr, len);
	if (walk(a, e, find_malloc, NULL)) {
		refuse("munmap", a);
		return -EINVAL;
	}
	if (walk(a, e, find_sealed, NULL))
		return -EPERM;
	bool any = false;
	int rc = walk(a, e, unmap_piece, &any);
	if (any)
		count(VMAP_STAT_munmap_served, 1);
	return rc;
}

/* ---- mmap ------------------------------------------------------------------ */

static bool servable(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	/* The mapping type (low bits) must be exactly MAP_PRIVATE, and no flag
	 * but these may be set: anything else (MAP_FIXED*, MAP_HUGETLB,
	 * MAP_GROWSDOWN, MAP_STACK, MAP_32BIT, MAP_LOCKED, unknown bits that the
	 * kernel may reject) goes to the kernel. */
	const int allowed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_NORESERVE;
	return !addr && len && len <= SERVED_MAX && prot == (PROT_READ | PROT_WRITE) &&
	       (flags & 0x0f) == MAP_PRIVATE && (flags & MAP_ANONYMOUS) && !(flags & ~allowed) &&
	       fd == -1 && off == 0;
}

/* Carves exactly [a, e) out of free arena space (any free run state) so that
 * the kernel can map it for the program; false if any part is not free. */
static int take_hole(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)arg;
	if (!r)
		return 0;
	if (p->kind == PIECE_HOLE && !p->tag) {
		/* A chunk no shard has taken: take it now (as free space of this
		 * CPU's shard), then carve from it like any free run. */
		unsigned cpu;
		struct vmap_shard *here = vmap_shard_here(&cpu);
		if (!vmap_chunk_claim_at(a, here))
			return 1;
		struct piece np = piece_at(a);
		return take_hole(r, &np, a, e, arg);
	}
	if (p->kind != PIECE_HOLE)
		return 1;
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	vmap_shard_lock(s);
	struct vmap_pte *h = vmap_pte_of(r, p->head);
	if (h->tag != t) {
		vmap_shard_unlock(s);
		return 1; /* changed under us */
	}
	unsigned state = vmap_tag_run_state(t);
	bool big = t & VMAP_TAG_BIG;
	uint64_t stamp = h->stamp;
	vmap_run_take_locked(s, h, t);
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		count(VMAP_STAT_cached_bytes, -(int64_t)(p->end - p->head));
	if (a > p->head)
		vmap_run_set_locked(s, r, p->head, (a - p->head) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (p->end > e)
		vmap_run_set_locked(s, r, e, (p->end - e) >> VMAP_PAGE_SHIFT, state, big, stamp);
	if (state == VMAP_RUN_DIRTY || state == VMAP_RUN_PROTECTED)
		count(VMAP_STAT_cached_bytes, (int64_t)((a - p->head) + (p->end - e)));
	__atomic_store_n(&vmap_pte_of(r, a)->tag,
			 vmap_tag_make(VMAP_ST_FOREIGN, s->id, (e - a) >> VMAP_PAGE_SHIFT, t & VMAP_TAG_BIG),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	return 0;
}

/* MAP_FIXED, MAP_FIXED_NOREPLACE or a hint aimed at the arena. */
static void *map_into_arena(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	bool fixed = flags & MAP_FIXED, noreplace = flags & MAP_FIXED_NOREPLACE;
	uintptr_t a = (uintptr_t)addr;
	if (a & (VMAP_PAGE - 1)) {
		if (fixed || noreplace)
			return (void *)(intptr_t)-EINVAL;
		a &= ~(uintptr_t)(VMAP_PAGE - 1); /* the kernel rounds a hint down */
		addr = (void *)a;
	}
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!rounded || e <= a || e > TASK_TOP)
		return vmap_os_mmap(addr, len, prot, flags, fd, off); /* the kernel's error */
	if (!fixed && !noreplace) {
		/* A hint: honoured when the range is free, else the kernel picks. */
		if (walk(a, e, find_mapped, NULL) || walk(a, e, find_malloc, NULL) ||
		    vmap_range_is_metadata(a, e) || !release_cached(a, e))
			return vmap_os_mmap(NULL, len, prot, flags, fd, off);
		flags |= MAP_FIXED;
	} else if (walk(a, e, find_malloc, NULL) || vmap_range_is_metadata(a, e) ||
		   !release_cached(a, e)) {
		refuse(noreplace ? "mmap(MAP_FIXED_NOREPLACE)" : "mmap(MAP_FIXED)", a);
		return (void *)(intptr_t)-EINVAL;
	} else if (noreplace) {
		if (walk(a, e, find_mapped, NULL))
			return (void *)(intptr_t)-EEXIST;
		flags = (flags & ~MAP_FIXED_NOREPLACE) | MAP_FIXED;
	} else {
		/* MAP_FIXED replaces whatever the program had there. */
		if (walk(a, e, find_sealed, NULL))
			return (void *)(intptr_t)-EPERM;
		bool any = false;
		int rc = walk(a, e, unmap_piece, &any);
		if (rc)
			return (void *)(intptr_t)rc;
	}
	/* Every page is now free arena space: take it out, then let the kernel map. */
	if (walk(a, e, take_hole, NULL))
		return vmap_os_mmap(fixed || noreplace ? addr : NULL, len, prot,
				    fixed || noreplace ? flags : flags & ~MAP_FIXED, fd, off);
	void *m = vmap_os_mmap(addr, len, prot, flags, fd, off);
	if (vmap_os_is_err(m)) {
		bool any = false;
		walk(a, e, unmap_piece, &any); /* give the pages back */
	}
	return m;
}

/* A new served mapping of len bytes, zero-filled; NULL when the arena is full. */
static void *serve(size_t len, int flags)
{
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uint64_t pages = rounded >> VMAP_PAGE_SHIFT;
	/* Served mappings stay out of the THP chunks: the kernel gives an
	 * anonymous mapping no huge pages in THP "madvise" mode either, and
	 * 2 MiB alignment was measured to defeat reuse of lazily unmapped
	 * runs (mmap cycles of 64 KiB-4 MiB: half the calls faulted fresh
	 * memory; without it, none). */
	bool big = false, zero;
	unsigned cpu;
	struct vmap_shard *s = vmap_shard_here(&cpu);
	vmap_shard_lock(s);
	void *p = vmap_alloc_carve(s, cpu, pages, big, VMAP_PAGE, &zero, VMAP_TAG_MMAP);
	if (!p)
		return NULL;
	if (!zero)
		memset(p, 0, rounded);
	else if (flags & MAP_POPULATE)
		vmap_os_madvise(p, rounded, 23 /* MADV_POPULATE_WRITE */);
	count(VMAP_STAT_mmap_served, 1);
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)rounded);
	return p;
}

void *vmap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (!vmap_opt.mmap || !(vmap_range_enabled() || (servable(addr, len, prot, flags, fd, off) &&
							  vmap_range_ready()))) {
		count(VMAP_STAT_mmap_passed, 1);
		return vmap_os_mmap(addr, len, prot, flags, fd, off);
	}
	if (servable(addr, len, prot, flags, fd, off)) {
		void *p = serve(len, flags);
		if (p) {
			if (__builtin_expect(vmap_profile_on, 0))
				vmap_observe.record(p, (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1),
						    VMAP_PROFILE_MMAP,
						    (uintptr_t)__builtin_return_address(0),
						    (uintptr_t)__builtin_dwarf_cfa());
			return p;
		}
		/* Arena exhausted: the kernel may still have room. */
	}
	count(VMAP_STAT_mmap_passed, 1);
	uintptr_t a = (uintptr_t)addr;
	if (addr && overlaps_arena(a, a + len) && len)
		return map_into_arena(addr, len, prot, flags, fd, off);
	return vmap_os_mmap(addr, len, prot, flags, fd, off);
}

/* ---- mprotect, madvise, mincore -------------------------------------------- */

/*
 * mprotect, madvise, mincore, mlock and munlock over a range that touches the
 * arena: the kernel sees one big read-write mapping there, so vmapalloc walks
 * the range itself and gives each piece the program has mapped to the kernel,
 * in order, as the kernel would walk its VMAs.  At a hole (pages the program
 * unmapped, or never got) mprotect, mlock, munlock and mincore stop with
 * ENOMEM, having changed what came before; madvise carries on and returns
 * ENOMEM at the end.  A live block whose protection, advice or locking the
 * program changed is flagged, to be reset before reuse.
 */
enum range_op { OP_MPROTECT, OP_MADVISE, OP_MINCORE, OP_MLOCK, OP_MUNLOCK, OP_MLOCK2, OP_MSEAL };

struct apply {
	enum range_op op;
	long arg;
	unsigned char *vec;
	uintptr_t start;
	bool attr, hole;
	int rc;
};

static int kernel_op(struct apply *ap, uintptr_t a, size_t len)
{
	switch (ap->op) {
	case OP_MPROTECT: return vmap_os_mprotect((void *)a, len, (int)ap->arg);
	case OP_MADVISE: return vmap_os_madvise((void *)a, len, (int)ap->arg);
	case OP_MINCORE:
		return vmap_os_mincore((void *)a, len, ap->vec + ((a - ap->start) >> VMAP_PAGE_SHIFT));
	case OP_MLOCK: return vmap_os_mlock((void *)a, len, 0);
	case OP_MUNLOCK: return vmap_os_munlock((void *)a, len);
	case OP_MLOCK2:
		return vmap_os_mlock((void *)a, len, (unsigned)ap->arg);
	case OP_MSEAL: return 0; /* done by vmap_mseal, for the whole range */
	}
	return -EINVAL;
}

static unsigned attrs_after(unsigned v, int op, long arg)
{
	switch (op) {
	case OP_MPROTECT: return (v & ~(unsigned)VA_PROT) | ((unsigned)arg & VA_PROT);
	case OP_MLOCK: return (v & ~(unsigned)VA_ONFAULT) | VA_LOCKED;
	case OP_MLOCK2: return (v & ~(unsigned)VA_ONFAULT) | VA_LOCKED | ((arg & 1) ? VA_ONFAULT : 0);
	case OP_MUNLOCK: return v & ~(unsigned)(VA_LOCKED | VA_ONFAULT);
	case OP_MSEAL: return v | VA_SEALED;
	case OP_MADVISE: break;
	default: return v;
	}
	const unsigned ra = 3u << VA_RA_SHIFT, thp = 3u << VA_THP_SHIFT;
	switch (arg) {
	case MADV_NORMAL: return v & ~ra;
	case MADV_RANDOM: return (v & ~ra) | (1u << VA_RA_SHIFT);
	case MADV_SEQUENTIAL: return (v & ~ra) | (2u << VA_RA_SHIFT);
	case MADV_DONTFORK: return v | VA_DONTCOPY;
	case MADV_DOFORK: return v & ~(unsigned)VA_DONTCOPY;
	case MADV_DONTDUMP: return v | VA_DONTDUMP;
	case MADV_DODUMP: return v & ~(unsigned)VA_DONTDUMP;
	case MADV_WIPEONFORK: return v | VA_WIPEONFORK;
	case MADV_KEEPONFORK: return v & ~(unsigned)VA_WIPEONFORK;
	case MADV_HUGEPAGE: return (v & ~thp) | (1u << VA_THP_SHIFT);
	case MADV_NOHUGEPAGE: return (v & ~thp) | (2u << VA_THP_SHIFT);
	case MADV_MERGEABLE: return v | VA_MERGEABLE;
	case MADV_UNMERGEABLE: return v & ~(unsigned)VA_MERGEABLE;
	default: return v;
	}
}

/*
 * Pages [a, e) of the served mapping at head (tag t, split: VMAP_TAG_SEGS)
 * take the attributes `op` gives them, and the labels after a - 1 are set so
 * that the boundaries are the kernel's: where a page changed on either side,
 * there is one if the attributes differ (the changed VMAs merge with equal
 * neighbours); elsewhere, and everywhere when `keep` (flags changed without a
 * merge), the boundaries are as they were.  Labels right of e are flipped as
 * far as that keeps the boundaries there.
 */
static void relabel(struct vmap_region *r, uintptr_t head, uintptr_t end, uint64_t t, uintptr_t a,
		    uintptr_t e, int op, long arg, bool keep)
{
	uintptr_t x = a;
	unsigned oprev, nprev; /* page x - 1 before and after */
	bool cprev = false;    /* did its attributes change? */
	if (x == head) {
		oprev = head_attrs(t);
		nprev = attrs_after(oprev, op, arg);
		cprev = nprev != oprev;
		if (cprev)
			tag_attrs(vmap_pte_of(r, head), VMAP_TAG_VMA, attrs_bits(nprev));
		x += VMAP_PAGE;
	} else {
		oprev = nprev = attrs_at(r, head, t, x - VMAP_PAGE);
	}
	for (struct vmap_pte *q = vmap_pte_of(r, x); x < end; x += VMAP_PAGE, q++) {
		unsigned o = ((unsigned)q->page_attr & (VA_BITS | VA_APART)) ^ VA_FRESH;
		unsigned pub = x < e ? VA_PUB(attrs_after(o, op, arg)) : VA_PUB(o);
		bool c = pub != VA_PUB(o);
		bool bound = !keep && (c || cprev) ? pub != VA_PUB(nprev) : o != oprev;
		unsigned label = pub != VA_PUB(nprev) ? o & VA_APART /* (free) */
				 : bound	       ? (nprev & VA_APART) ^ VA_APART
						       : nprev & VA_APART;
		unsigned n = pub | label;
		if (x >= e && n == o)
			break; /* the rest is as it was */
		q->page_attr = VMAP_PTE_SEG | (n ^ VA_FRESH);
		oprev = o;
		nprev = n;
		cprev = c;
	}
}

/* The kernel changed the attributes of [a, e) of the served mapping p as the
 * program asked: mirror it (see "the program's VMAs" above). */
static void record_attrs(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
			 struct apply *ap)
{
	struct vmap_pte *h = vmap_pte_of(r, p->head);
	uint64_t t = __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE);
	if ((t ^ p->tag) & ~(VMAP_TAG_VMA | VMAP_TAG_SEGS | VMAP_TAG_ATTR))
		return; /* cut or grown meanwhile by another thread: a race of the program's */
	if (!(t & VMAP_TAG_SEGS)) {
		unsigned v = head_attrs(t), nv = attrs_after(v, ap->op, ap->arg);
		if (nv == v)
			return; /* no change: no split either */
		if (a == p->head && e == p->end) {
			tag_attrs(h, VMAP_TAG_VMA, attrs_bits(nv));
			return;
		}
		/* Part of the mapping changes: the kernel splits it.  Every other
		 * page gets its own entry before the tag says so. */
		set_attrs(r, p->head + VMAP_PAGE, p->end, v);
		tag_attrs(h, 0, VMAP_TAG_SEGS);
		t |= VMAP_TAG_SEGS;
	}
	relabel(r, p->head, p->end, t, a, e, ap->op, ap->arg, false);
}

/* The program moved pages [x, e) of the served mapping at head out with
 * MREMAP_DONTUNMAP, which clears VM_LOCKED of the whole VMA they were in
 * (dontunmap_complete), pages not moved included, and merges it with
 * nothing: the VMA stays one of its own (its labels say so). */
static void unlock_vmas(struct vmap_region *r, uintptr_t head, uintptr_t x, uintptr_t e)
{
	struct piece p = piece_at(head);
	uint64_t t = p.tag;
	unsigned vx = attrs_at(r, head, t, x), ve = attrs_at(r, head, t, e - VMAP_PAGE);
	while (x > head && attrs_at(r, head, t, x - VMAP_PAGE) == vx)
		x -= VMAP_PAGE;
	while (e < p.end && attrs_at(r, head, t, e) == ve)
		e += VMAP_PAGE;
	struct apply ap = {OP_MUNLOCK, 0, NULL, x, false, false, 0};
	if (kernel_op(&ap, x, e - x) != 0)
		return;
	struct vmap_pte *h = vmap_pte_of(r, head);
	if (!(t & VMAP_TAG_SEGS)) {
		/* One VMA, the whole mapping: nothing to keep apart. */
		record_attrs(r, &p, x, e, &ap);
		return;
	}
	if ((__atomic_load_n(&h->tag, __ATOMIC_ACQUIRE) ^ t) & ~(VMAP_TAG_VMA | VMAP_TAG_ATTR))
		return; /* (a race of the program's) */
	relabel(r, head, p.end, t, x, e, OP_MUNLOCK, 0, true);
}

static int apply_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	struct apply *ap = arg;
	if (r && p->kind == PIECE_HOLE) {
		ap->hole = true;
		return ap->op == OP_MADVISE ? 0 : 1;
	}
	if (r && ap->attr && vmap_tag_state(p->tag) == VMAP_ST_LIVE && !(p->tag & VMAP_TAG_ATTR))
		__atomic_fetch_or(&vmap_pte_of(r, p->head)->tag, VMAP_TAG_ATTR, __ATOMIC_RELAXED);
	int rc = kernel_op(ap, a, e - a);
	if (rc) {
		ap->rc = rc;
		return ap->op == OP_MADVISE && rc == -ENOMEM ? 0 : 1;
	}
	if (r && p->kind == PIECE_MAPPED && (ap->attr || ap->op == OP_MUNLOCK) &&
	    ap->op != OP_MINCORE)
		record_attrs(r, p, a, e, ap);
	return 0;
}

static int range_op(enum range_op op, void *addr, size_t len, long arg, unsigned char *vec,
		    bool attr)
{
	uintptr_t a = (uintptr_t)addr;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	struct apply ap = {op, arg, vec, a, attr, false, 0};
	if (!vmap_opt.mmap || (a & (VMAP_PAGE - 1)) || !rounded || e <= a || e > TASK_TOP ||
	    !overlaps_arena(a, e))
		return kernel_op(&ap, a, len);
	walk(a, e, apply_piece, &ap);
	if (ap.rc)
		return ap.rc;
	/* The kernel refuses an advice it does not know before looking at the
	 * range; with no mapped piece to try it on, ask it with an empty range. */
	if (ap.hole && op == OP_MADVISE && vmap_os_madvise(NULL, 0, arg) == -EINVAL)
		return -EINVAL;
	return ap.hole ? -ENOMEM : 0;
}

static bool advice_changes_vma(int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_FREE:
	case MADV_WILLNEED:
	case 20: /* MADV_COLD */
	case 21: /* MADV_PAGEOUT */
	case 22: /* MADV_POPULATE_READ */
	case 23: /* MADV_POPULATE_WRITE */
		return false;
	default:
		return true;
	}
}

int vmap_mprotect(void *addr, size_t len, int prot)
{
	return range_op(OP_MPROTECT, addr, len, prot, NULL, true);
}

int vmap_madvise(void *addr, size_t len, int advice)
{
	return range_op(OP_MADVISE, addr, len, advice, NULL, advice_changes_vma(advice));
}

int vmap_mincore(void *addr, size_t len, unsigned char *vec)
{
	return range_op(OP_MINCORE, addr, len, 0, vec, false);
}

int vmap_mlock(const void *addr, size_t len, unsigned flags, bool two)
{
	/* mlock works on the pages containing [addr, addr+len): align down. */
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(VMAP_PAGE - 1);
	len += (uintptr_t)addr - a;
	return range_op(two ? OP_MLOCK2 : OP_MLOCK, (void *)a, len, flags, NULL, true);
}

int vmap_munlock(const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(VMAP_PAGE - 1);
	len += (uintptr_t)addr - a;
	return range_op(OP_MUNLOCK, (void *)a, len, 0, NULL, false);
}

/* ---- mremap ------------------------------------------------------------------ */

/* Free pages [a, a + bytes) of a run in `state`, just taken for the program:
 * zero-filled and accessible.  0, or -errno: some may still fault (at
 * vm.max_map_count the VMA cannot be split); no longer counted as cached. */
static int make_usable(uintptr_t a, size_t bytes, unsigned state)
{
	uint64_t pages = bytes >> VMAP_PAGE_SHIFT;
	if (state == VMAP_RUN_DIRTY) {
		count(VMAP_STAT_cached_bytes, -(int64_t)bytes);
		memset((void *)a, 0, bytes);
	} else if (state == VMAP_RUN_ADVISED) {
		memset((void *)a, 0, bytes);
	} else if (state == VMAP_RUN_GUARDED) {
		return vmap_unguard(a, pages);
	} else if (state == VMAP_RUN_PROTECTED) {
		count(VMAP_STAT_cached_bytes, -(int64_t)bytes);
		int rc = vmap_unprotect(a, pages);
		if (rc)
			return rc;
		memset((void *)a, 0, bytes);
	}
	return 0;
}

/* Grows the served mapping that ends at `end` by `extra` pages into free
 * space right after it; true on success.  The new pages read zero. */
static bool grow_in_place(struct vmap_region *r, struct piece *p, uint64_t extra)
{
	uint64_t t = p->tag;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	uintptr_t end = p->end;
	if (end + (extra << VMAP_PAGE_SHIFT) > r->base + r->size)
		return false;
	vmap_shard_lock(s);
	struct vmap_pte *re = vmap_pte_of(r, end);
	uint64_t rt = re->tag, rp = vmap_tag_pages(rt);
	if (vmap_pte_of(r, p->head)->tag != t || vmap_tag_state(rt) != VMAP_ST_FREE ||
	    vmap_tag_shard(rt) != s->id || rp < extra) {
		vmap_shard_unlock(s);
		return false;
	}
	unsigned state = vmap_tag_run_state(rt);
	uint64_t stamp = re->stamp;
	vmap_run_take_locked(s, re, rt);
	if (rp > extra)
		vmap_run_set_locked(s, r, end + (extra << VMAP_PAGE_SHIFT), rp - extra, state,
				    rt & VMAP_TAG_BIG, stamp);
	uint64_t pages = vmap_tag_pages(t) + extra;
	/* The kernel grows the last VMA: the new pages take its attributes. */
	unsigned last = attrs_at(r, p->head, t, end - VMAP_PAGE);
	if (t & VMAP_TAG_SEGS)
		set_attrs(r, end, end + (extra << VMAP_PAGE_SHIFT), last);
	__atomic_store_n(&vmap_pte_of(r, p->head)->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, pages,
				       t & (VMAP_TAG_BIG | VMAP_TAG_MMAP | VMAP_TAG_ATTR |
					    VMAP_TAG_VMA | VMAP_TAG_SEGS)),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	size_t bytes = (size_t)extra << VMAP_PAGE_SHIFT;
	if (make_usable(end, bytes, state)) {
		/* Pages that still fault cannot join the mapping: it keeps its
		 * size, and they stay out of circulation (as in carve_finish). */
		vmap_shard_lock(s);
		__atomic_store_n(&vmap_pte_of(r, p->head)->tag, t, __ATOMIC_RELEASE);
		__atomic_store_n(&re->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, extra, rt & VMAP_TAG_BIG),
				 __ATOMIC_RELEASE);
		vmap_shard_unlock(s);
		return false;
	}
	realize_attrs(end, bytes, last);
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)bytes);
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_observe.mmap_grow(p->head, bytes);
	return true;
}

/*
 * MREMAP_FIXED to a destination in the arena: like MAP_FIXED there — the
 * program's own mappings in the way are unmapped, the pages are carved out of
 * free space and handed to the kernel, which moves the old pages in.  A
 * destination over a live malloc block or metadata is refused.
 */
static int clear_destination(uintptr_t d, size_t nl)
{
	uintptr_t de = d + nl;
	if (!overlaps_arena(d, de))
		return 0;
	if (walk(d, de, find_malloc, NULL) || vmap_range_is_metadata(d, de) ||
	    !release_cached(d, de)) {
		refuse("mremap(MREMAP_FIXED)", d);
		return -EINVAL;
	}
	if (walk(d, de, find_sealed, NULL))
		return -EPERM;
	bool any = false;
	return walk(d, de, unmap_piece, &any);
}

static int claim_destination(uintptr_t d, size_t nl)
{
	int rc = clear_destination(d, nl);
	if (rc || !overlaps_arena(d, d + nl))
		return rc;
	return walk(d, d + nl, take_hole, NULL) ? -ENOMEM : 0;
}

/*
 * MREMAP_FIXED of a served mapping into free arena space: the destination
 * becomes a served mapping itself, exactly [d, d + len), when it is free runs
 * of one shard (small chunks, at most CARVE_RUNS runs).  The kernel moves the
 * pages in, and what the program does with them next (resize, move back) is
 * ours to do, as for any served mapping.  Handed to the kernel instead (a
 * foreign range) they would keep the arena's VMAs: vmapalloc's own page moves
 * split a served mapping into several, which Linux 6.17+ moves only at the
 * same size and then refuses to resize (EFAULT) — the program sees one.
 * False (nothing changed) when it cannot: the caller hands the range over.
 */
#define CARVE_RUNS 8

static bool carve_at(uintptr_t d, size_t len)
{
	struct vmap_region *r = vmap_region_of(d);
	uintptr_t e = d + len;
	if (!r || e > r->base + r->size)
		return false;
	struct piece p = piece_at(d);
	if (p.kind != PIECE_HOLE || !p.tag)
		return false;
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(p.tag)];
	struct {
		uintptr_t head, end;
		uint64_t tag, stamp;
	} run[CARVE_RUNS];
	unsigned n = 0;
	vmap_shard_lock(s);
	for (uintptr_t x = d; x < e; x = p.end) {
		p = piece_at(x);
		if (n == CARVE_RUNS || vmap_tag_state(p.tag) != VMAP_ST_FREE ||
		    vmap_tag_shard(p.tag) != s->id || (p.tag & VMAP_TAG_BIG)) {
			vmap_shard_unlock(s);
			return false;
		}
		run[n].head = p.head;
		run[n].end = p.end;
		run[n].tag = p.tag;
		run[n].stamp = vmap_pte_of(r, p.head)->stamp;
		n++;
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned state = vmap_tag_run_state(run[i].tag);
		vmap_run_take_locked(s, vmap_pte_of(r, run[i].head), run[i].tag);
		if (run[i].head < d)
			vmap_run_set_locked(s, r, run[i].head, (d - run[i].head) >> VMAP_PAGE_SHIFT,
					    state, false, run[i].stamp);
		if (run[i].end > e)
			vmap_run_set_locked(s, r, e, (run[i].end - e) >> VMAP_PAGE_SHIFT, state, false,
					    run[i].stamp);
	}
	__atomic_store_n(&vmap_pte_of(r, d)->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, len >> VMAP_PAGE_SHIFT, VMAP_TAG_MMAP),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	/* (Failing leaves pages that fault: the kernel's MREMAP_FIXED replaces
	 * the whole destination anyway.) */
	for (unsigned i = 0; i < n; i++) {
		uintptr_t x = run[i].head > d ? run[i].head : d, y = run[i].end < e ? run[i].end : e;
		(void)make_usable(x, y - x, vmap_tag_run_state(run[i].tag));
	}
	count(VMAP_STAT_mmap_bytes_in_use, (int64_t)len);
	return true;
}

static void *remap_fixed(struct vmap_region *r, struct piece *p, void *old, size_t old_len,
			 size_t new_len, int flags, void *new_addr, size_t ol, size_t nl)
{
	uintptr_t a = (uintptr_t)old, d = (uintptr_t)new_addr;
	int rc = claim_destination(d, nl);
	if (rc)
		return (void *)(intptr_t)rc;
	void *m = vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	if (vmap_os_is_err(m)) {
		bool any = false;
		if (overlaps_arena(d, d + nl))
			walk(d, d + nl, unmap_piece, &any); /* give the destination back */
		return m;
	}
	if (r && !(flags & MREMAP_DONTUNMAP) && p->kind == PIECE_MAPPED) {
		/* The pages left this place: fill the hole, then it is unmapped. */
		vmap_os_map_fresh(old, ol);
		struct piece cur = piece_at(a);
		cut_mapped(r, &cur, a, a + ol);
	}
	return m;
}

/* Does the kernel know MREMAP_DONTUNMAP (Linux >= 5.7)?  It checks the flags
 * before it looks up the range: for a page that cannot be mapped it says
 * EFAULT where it knows the flag, EINVAL where it does not.  On x86_64 the
 * page just below 2^47 is past TASK_SIZE (never mapped, 4-level or not
 * opted into 5-level addresses); elsewhere the flag is taken as known.
 * Asked once, on the program's first DONTUNMAP of served memory. */
static bool kernel_has_dontunmap(void)
{
#if defined(__x86_64__)
	static int known; /* 0 not asked, 1 yes, -1 no */
	int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
	if (!k) {
		void *m = vmap_os_mremap((void *)0x7ffffffff000UL, VMAP_PAGE, VMAP_PAGE,
					 MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
		k = vmap_os_is_err(m) && vmap_os_err(m) == EINVAL ? -1 : 1;
		__atomic_store_n(&known, k, __ATOMIC_RELAXED);
	}
	return k > 0;
#else
	return true;
#endif
}

void *vmap_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	uintptr_t a = (uintptr_t)old, d = (uintptr_t)new_addr;
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	/* The kernel's argument checks, in its order. */
	if (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP))
		return (void *)(intptr_t)-EINVAL;
	if ((flags & MREMAP_FIXED) && !(flags & MREMAP_MAYMOVE))
		return (void *)(intptr_t)-EINVAL;
	if ((flags & MREMAP_DONTUNMAP) && (!(flags & MREMAP_MAYMOVE) || old_len != new_len))
		return (void *)(intptr_t)-EINVAL;
	if ((flags & MREMAP_DONTUNMAP) && !kernel_has_dontunmap())
		return (void *)(intptr_t)-EINVAL; /* as the kernel says: it knows no such flag */
	if (a & (VMAP_PAGE - 1))
		return (void *)(intptr_t)-EINVAL;
	size_t ol = (old_len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t nl = (new_len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	if (!nl || nl < new_len || nl > TASK_TOP)
		return (void *)(intptr_t)-EINVAL;
	if (flags & MREMAP_FIXED) {
		if ((d & (VMAP_PAGE - 1)) || d + nl > TASK_TOP || d + nl < d)
			return (void *)(intptr_t)-EINVAL;
		if (d < a + ol && a < d + nl)
			return (void *)(intptr_t)-EINVAL; /* old and new overlap */
	}
	struct vmap_region *r = overlaps_arena(a, a + 1) ? vmap_region_of(a) : NULL;
	if (!r) {
		/* Not ours; the destination may be. */
		if ((flags & MREMAP_FIXED) && overlaps_arena(d, d + nl))
			return remap_fixed(NULL, NULL, old, old_len, new_len, flags, new_addr, ol, nl);
		return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	}
	struct piece p = piece_at(a);
	if (p.kind == PIECE_MALLOC) {
		refuse("mremap", a);
		return (void *)(intptr_t)-EINVAL;
	}
	if (p.kind == PIECE_HOLE || p.kind == PIECE_CACHED)
		return (void *)(intptr_t)-EFAULT;
	if (!ol)
		return (void *)(intptr_t)-EINVAL; /* old_len 0 duplicates shared mappings only */
	if (a + ol > p.end)
		return (void *)(intptr_t)-EFAULT; /* the old range spans more than one mapping */
	if (p.kind == PIECE_MAPPED && sealed_in(r, p.head, p.tag, a, ol))
		return (void *)(intptr_t)-EPERM; /* sealed: neither resized nor moved */
	if (p.kind == PIECE_FOREIGN) {
		if (flags & MREMAP_FIXED)
			return remap_fixed(r, &p, old, old_len, new_len, flags, new_addr, ol, nl);
		return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
	}
	/* The program's own VMA boundaries in the mapping (its mprotect, madvise
	 * and mlock calls split it): the kernel resizes or moves one VMA only,
	 * but since Linux 6.17 moves several with MREMAP_FIXED at the same size
	 * (after a shrink, what is left must be one). */
	size_t one = nl > ol ? ol
		     : (flags & MREMAP_FIXED) ? (nl < ol ? nl : 0)
		     : (flags & MREMAP_DONTUNMAP) ? ol : 0;
	if (one && spans_vmas(r, p.head, p.tag, a, one))
		return (void *)(intptr_t)-EFAULT;
	count(VMAP_STAT_mremap_calls, 1);
	if (!(flags & MREMAP_FIXED) && !(flags & MREMAP_DONTUNMAP)) {
		if (nl == ol)
			return old;
		if (nl < ol) {
			int rc = cut_mapped(r, &p, a + nl, a + ol);
			return rc ? (void *)(intptr_t)rc : old;
		}
		if (a + ol == p.end && grow_in_place(r, &p, (nl - ol) >> VMAP_PAGE_SHIFT))
			return old;
		if (!(flags & MREMAP_MAYMOVE))
			return (void *)(intptr_t)-ENOMEM;
	}
	/* Move.  The destination: the program's address (a served mapping carved
	 * there when it is free arena space, else the kernel's), or a new served
	 * mapping. */
	void *q;
	bool from_kernel = false; /* q is a fresh mapping of the kernel's */
	if (flags & MREMAP_FIXED) {
		if (!overlaps_arena(d, d + nl))
			return remap_fixed(r, &p, old, old_len, new_len, flags, new_addr, ol, nl);
		int rc = clear_destination(d, nl);
		if (rc)
			return (void *)(intptr_t)rc;
		if (!carve_at(d, nl))
			return remap_fixed(r, &p, old, old_len, new_len, flags, new_addr, ol, nl);
		q = new_addr;
		p = piece_at(a); /* the destination may have cut the mapping's head off */
	} else {
		q = serve(nl, 0);
		if (!q) {
			count(VMAP_STAT_mmap_passed, 1);
			q = vmap_os_mmap(NULL, nl, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
					 -1, 0);
			from_kernel = true;
		}
		if (vmap_os_is_err(q))
			return q;
	}
	/* The new mapping is the old one moved: the profile keeps its site
	 * rather than record the mremap as a new allocation. */
	if (__builtin_expect(vmap_profile_on, 0))
		vmap_observe.mmap_moved(p.head, (uintptr_t)q, nl,
					(flags & MREMAP_DONTUNMAP) ? nl : nl > ol ? nl - ol : 0);
	size_t moved = ol < nl ? ol : nl;
	uint64_t st = __atomic_load_n(&vmap_pte_of(r, p.head)->tag, __ATOMIC_ACQUIRE);
	/* MREMAP_DONTUNMAP keeps the old range mapped until it is cut (no hole
	 * in the arena for another thread's mmap to land in).  But it unlocks
	 * the whole kernel VMA the pages leave, pages not moved included (Linux
	 * 6.18), and the arena's VMAs are not the program's: locked pages are
	 * moved the plain way, and the hole they leave is filled at once. */
	int how = MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP;
	bool locked = locked_in(r, p.head, st, a, moved);
	if (locked || !kernel_has_dontunmap())
		how &= ~MREMAP_DONTUNMAP;
	void *m;
	if ((from_kernel && nl > moved) || (!locked && !vmap_moves_allowed())) {
		/* The arena could not serve (full, or a chunk it could not
		 * commit): pages moved into the head of the kernel's mapping
		 * would stay a VMA of their own (their old page offset), and a
		 * later mremap of the whole would fail with EFAULT where the
		 * kernel's own grow leaves one VMA.  Copied instead (rare).
		 * Copied too past the budget of VMAs moves may leave (range.c:
		 * a quarter of vm.max_map_count for all of vmapalloc; F20: a
		 * soak's mremaps of served memory, never counted, reached the
		 * limit). */
		if (st & VMAP_TAG_ATTR)
			vmap_os_mprotect(old, moved, PROT_READ | PROT_WRITE);
		memcpy(q, old, moved);
		m = (void *)(intptr_t)-ENOMEM; /* not moved: the pages are copies */
		goto copied;
	}
	m = vmap_os_mremap(old, moved, moved, how, q);
	if (!vmap_os_is_err(m) && !(how & MREMAP_DONTUNMAP))
		vmap_os_map_fresh(old, moved);
	if (!vmap_os_is_err(m) && !from_kernel)
		vmap_moves_count(a, (uintptr_t)q);
	if (vmap_os_is_err(m)) {
		/* Nothing moved (kernels without MREMAP_DONTUNMAP; before 6.17 a
		 * range of several VMAs), or, near the VMA limit, some pieces did
		 * (6.17+ moves VMA by VMA): every byte goes back to the old range
		 * (q, served or carved, read zero), holes in q are mapped again,
		 * then the bytes are copied.  The program may have made the old
		 * pages unreadable: they are reset after. */
		if (st & VMAP_TAG_ATTR)
			vmap_os_mprotect(old, moved, PROT_READ | PROT_WRITE);
		if (vmap_move_undo(old, q, moved) != 0) {
			/* (-1, a hole left in the old range by a plain move that
			 * cannot be mapped again, loses the pieces moved: only
			 * for locked pages at the VMA limit.) */
			bool any = false;
			walk((uintptr_t)q, (uintptr_t)q + nl, unmap_piece, &any); /* give q back */
			return (void *)(intptr_t)-ENOMEM;
		}
		memcpy(q, old, moved);
	}
copied:
	/* The moved pages carry their VMAs' attributes; copied or added pages
	 * are given them. */
	inherit_attrs(r, st, p.head, a, moved, (uintptr_t)q, nl, vmap_os_is_err(m) ? 0 : moved);
	if (!(flags & MREMAP_DONTUNMAP)) {
		struct piece cur = piece_at(a);
		cut_mapped(r, &cur, a, a + ol);
	} else if (locked || vmap_os_is_err(m)) {
		/* The program's DONTUNMAP: the old range stays, reads zero and keeps
		 * its attributes (it was refilled fresh, or copied from) — but the
		 * kernel unlocks the whole VMAs the locked pages left. */
		if (vmap_os_is_err(m))
			memset(old, 0, moved);
		if (locked)
			unlock_vmas(r, p.head, a, a + moved);
		if (st & VMAP_TAG_ATTR)
			realize_range(r, p.head,
				      __atomic_load_n(&vmap_pte_of(r, p.head)->tag, __ATOMIC_ACQUIRE),
				      a, a + moved);
	}
	return q;
}

/* ---- mseal -------------------------------------------------------------------- */

/*
 * mseal(2) (Linux 6.10; glibc 2.43 has the wrapper, older programs call
 * syscall(SYS_mseal), both exported by preload/mmap.c).  The kernel seals
 * VMAs; over the arena it would seal vmapalloc's pages, and vmapalloc's
 * emulated munmap would then "succeed" (returning 0 where the kernel says
 * EPERM) and its space be reused.  So: the kernel's argument checks; every
 * arena page of the range must be the program's (a served or foreign
 * mapping: a hole or a freed block vmapalloc holds is unmapped memory,
 * ENOMEM; a live malloc block is refused with EINVAL and one line); then the
 * kernel seals the range (it checks the pages outside the arena itself) and
 * the served pages are marked sealed (VA_SEALED, split like any attribute):
 * munmap, MAP_FIXED and mremap aimed at them fail with EPERM (find_sealed,
 * vmap_mremap), and as they are never unmapped their space is never reused.
 * mprotect and madvise meet the kernel's own seal.  Foreign pieces are the
 * kernel's (its munmap refuses them).  A kernel without mseal: ENOSYS.
 */

static int seal_check(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)e;
	(void)arg;
	if (!r || p->kind == PIECE_MAPPED || p->kind == PIECE_FOREIGN)
		return 0;
	if (p->kind == PIECE_MALLOC) {
		refuse("mseal", a);
		return -EINVAL;
	}
	return -ENOMEM;
}

static int seal_piece(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	struct apply *ap = arg;
	if (r && p->kind == PIECE_MAPPED) {
		if (!(p->tag & VMAP_TAG_ATTR))
			__atomic_fetch_or(&vmap_pte_of(r, p->head)->tag, VMAP_TAG_ATTR, __ATOMIC_RELAXED);
		record_attrs(r, p, a, e, ap);
	}
	return 0;
}

int vmap_mseal(void *addr, size_t len, unsigned long flags)
{
	uintptr_t a = (uintptr_t)addr;
	size_t rounded = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	uintptr_t e = a + rounded;
	if (!vmap_opt.mmap || !vmap_range_enabled() || flags || (a & (VMAP_PAGE - 1)) || !rounded ||
	    e < a || !overlaps_arena(a, e))
		return vmap_os_mseal(addr, len, flags);
	/* Does this kernel have it?  (mseal(0, 0, 0) is a no-op that succeeds.) */
	int have = vmap_os_mseal(NULL, 0, 0);
	if (have)
		return have;
	int rc = walk(a, e, seal_check, NULL);
	if (rc)
		return rc;
	rc = vmap_os_mseal(addr, len, 0);
	if (rc)
		return rc;
	struct apply ap = {OP_MSEAL, 0, NULL, a, true, false, 0};
	walk(a, e, seal_piece, &ap);
	return 0;
}

/* ---- re-entered ----------------------------------------------------------- */

void *vmap_mmap_reentered(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uintptr_t a = (uintptr_t)addr;
	/* Without MAP_FIXED the kernel never places a mapping over the arena's
	 * reservation: a hint there is simply not honoured. */
	if ((flags & MAP_FIXED) && vmap_range_enabled() && len && overlaps_arena(a, a + len))
		return (void *)(intptr_t)-ENOMEM;
	count(VMAP_STAT_mmap_passed, 1);
	return vmap_os_mmap(addr, len, prot, flags, fd, off);
}

int vmap_munmap_reentered(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	if (!vmap_opt.mmap || !vmap_range_enabled())
		return vmap_os_munmap(addr, len);
	size_t rounded = munmap_len(a, len);
	if (!rounded)
		return -EINVAL;
	if (!overlaps_arena(a, a + rounded))
		return vmap_os_munmap(addr, len);
	/* Checked again (and refused there, with its line) when it is done. */
	return vmap_defer(addr, rounded) ? 0 : -ENOMEM;
}

void *vmap_mremap_reentered(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	uintptr_t a = (uintptr_t)old, d = (uintptr_t)new_addr;
	if (vmap_opt.mmap && vmap_range_enabled() &&
	    (overlaps_arena(a, a + (old_len ? old_len : 1)) ||
	     ((flags & MREMAP_FIXED) && overlaps_arena(d, d + new_len))))
		return (void *)(intptr_t)-ENOMEM;
	return vmap_os_mremap(old, old_len, new_len, flags, new_addr);
}
