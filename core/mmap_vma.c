/*
 * mmap_vma.c — what the program's address space looks like inside the arena:
 * which piece a page belongs to (a served or foreign mapping, a malloc block,
 * a block vmapalloc holds, a hole), and, inside a served mapping, the
 * attributes and boundaries of the VMAs the kernel would have given the
 * program (protection, advice, locking, seals).  mmap.c and mremap.c read
 * and change them; nothing here makes a system call but to give fresh pages
 * the attributes they must have (vmap_realize_attrs).
 */
#include "mmap_impl.h"

#include "range.h"

/* ---- classification of arena pages --------------------------------------- */

/* The area or free run containing page a (tags sit at heads and free tails). */
struct piece vmap_piece_at(uintptr_t a)
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
int vmap_walk(uintptr_t a, uintptr_t e, piece_fn fn, void *arg)
{
	while (a < e) {
		struct vmap_region *r = vmap_region_of(a);
		if (!r) {
			/* Up to the next region start, or e; in a chunk the
			 * arena lent (tight.c), up to the chunk's end. */
			uintptr_t next = e;
			for (unsigned i = 0; i < vmap_nregions; i++) {
				struct vmap_region *q = &vmap_regions[i];
				uintptr_t off = a - q->base;
				uintptr_t end = off < q->size ? q->base + (off | (VMAP_CHUNK - 1)) + 1
							      : q->base;
				if (end > a && end < next)
					next = end;
			}
			struct piece p = {a, 0, next, PIECE_HOLE};
			int rc = fn(NULL, &p, a, next, arg);
			if (rc)
				return rc;
			a = next;
			continue;
		}
		struct piece p = vmap_piece_at(a);
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

int vmap_find_malloc(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
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
bool vmap_release_cached(uintptr_t a, uintptr_t e)
{
	if (!vmap_walk(a, e, find_cached, NULL))
		return true;
	vmap_range_flush_cached();
	return !vmap_walk(a, e, find_cached, NULL);
}

int vmap_find_mapped(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)a;
	(void)e;
	(void)arg;
	return r && (p->kind == PIECE_MAPPED || p->kind == PIECE_FOREIGN) ? 1 : 0;
}

/* Sealed pages of the program's (mseal): munmap, MAP_FIXED and mremap over
 * them fail with EPERM, having changed nothing, as the kernel's do. */
int vmap_find_sealed(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e, void *arg)
{
	(void)arg;
	return r && p->kind == PIECE_MAPPED && vmap_sealed_in(r, p->head, p->tag, a, e - a) ? 1 : 0;
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
 *
 * VA_APART: the kernel can keep two neighbouring VMAs apart although their
 * attributes are equal.  MREMAP_DONTUNMAP clears VM_LOCKED of the whole VMA
 * the pages leave without merging it with its neighbours (mm/mremap.c,
 * dontunmap_complete: vm_flags_clear(vrm->vma, VM_LOCKED_MASK), no
 * vma_merge), so that VMA stays one of its own: mremap across it fails with
 * EFAULT.  Such boundaries are kept by labels: two neighbouring pages of
 * equal attributes are in different VMAs where VA_APART differs.  The first
 * page's label is 0 (its head tag has no room); the others' is in their
 * page_attr words.  A label is never applied to the kernel
 * (vmap_realize_attrs), never written to a head tag (attrs_bits), and
 * dropped where pages move (vmap_inherit_attrs).  It follows the kernel's
 * merges (vmap_relabel): a VMA whose flags change by mprotect/madvise/mlock/
 * munlock/mseal merges with the neighbours whose flags are then equal
 * (mm/vma.c, vma_modify_flags -> vma_merge_existing_range); VMAs whose flags
 * do not change are left alone (mprotect_fixup, madvise_update_vma,
 * mlock_fixup return early), and so are the boundaries between them.
 *
 *   attrs:  A A A | B B | A A : A A     ('|': the attributes differ,
 *   label:  0 0 0   0 0   0 0   1 1      ':': only the labels do)
 */

/* The attributes of page x of the served mapping at head (tag t). */
unsigned vmap_attrs_at(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x)
{
	if (x == head || !(t & VMAP_TAG_SEGS))
		return head_attrs(t);
	return ((unsigned)vmap_pte_of(r, x)->page_attr & (VA_BITS | VA_APART)) ^ VA_FRESH;
}

void vmap_set_attrs(struct vmap_region *r, uintptr_t x, uintptr_t e, unsigned v)
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
bool vmap_spans_vmas(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	if (!(t & VMAP_TAG_SEGS) || len <= VMAP_PAGE)
		return false;
	unsigned v = vmap_attrs_at(r, head, t, x);
	for (uintptr_t y = x + VMAP_PAGE; y < x + len; y += VMAP_PAGE)
		if (vmap_attrs_at(r, head, t, y) != v)
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
		if (vmap_attrs_at(r, head, t, y) & va)
			return true;
	return false;
}

bool vmap_locked_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	return attr_in(r, head, t, x, len, VA_LOCKED);
}

bool vmap_sealed_in(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, size_t len)
{
	return attr_in(r, head, t, x, len, VA_SEALED);
}

/* Makes fresh pages [x, x + len) (read-write, no advice, unlocked) have the
 * attributes v, as the kernel's pages of a VMA with them would. */
void vmap_realize_attrs(uintptr_t x, size_t len, unsigned v)
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

/* vmap_realize_attrs over [x, e) of the served mapping at head, run by run. */
void vmap_realize_range(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			uintptr_t e)
{
	while (x < e) {
		unsigned v = vmap_attrs_at(r, head, t, x);
		uintptr_t y = x + VMAP_PAGE;
		while (y < e && vmap_attrs_at(r, head, t, y) == v)
			y += VMAP_PAGE;
		vmap_realize_attrs(x, y - x, v);
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
void vmap_inherit_attrs(struct vmap_region *r, uint64_t st, uintptr_t head, uintptr_t x,
			size_t len, uintptr_t q, size_t qlen, size_t from)
{
	if (!(st & VMAP_TAG_ATTR))
		return; /* as mmap() made it, like the new mapping */
	struct vmap_region *rq = vmap_region_of(q);
	if (!rq)
		return;
	uint64_t set = VMAP_TAG_ATTR | attrs_bits(vmap_attrs_at(r, head, st, x));
	if (vmap_spans_vmas(r, head, st, x, len)) {
		/* (Without labels: VMAs that were apart only by them merge where
		 * they land, vma_merge_new_range in copy_vma.) */
		for (size_t o = VMAP_PAGE; o < len; o += VMAP_PAGE)
			vmap_set_attrs(rq, q + o, q + o + VMAP_PAGE,
				       VA_PUB(vmap_attrs_at(r, head, st, x + o)));
		vmap_set_attrs(rq, q + len, q + qlen,
			       VA_PUB(vmap_attrs_at(r, head, st, x + len - VMAP_PAGE)));
		set |= VMAP_TAG_SEGS;
	}
	struct vmap_pte *h = vmap_pte_of(rq, q);
	tag_attrs(h, VMAP_TAG_VMA | VMAP_TAG_SEGS, set);
	vmap_realize_range(rq, q, __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE), q + from, q + qlen);
}

/* Page x of the served mapping at head (tag t) is to be the first page of a
 * mapping, whose label is 0: if x's is not, the labels of the pages after it
 * with attributes equal to its are flipped, which keeps every boundary. */
void vmap_rebase_labels(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x,
			uintptr_t end)
{
	if (!(t & VMAP_TAG_SEGS) || x == head)
		return;
	unsigned v = vmap_attrs_at(r, head, t, x);
	if (!(v & VA_APART))
		return;
	for (x += VMAP_PAGE; x < end; x += VMAP_PAGE) {
		struct vmap_pte *q = vmap_pte_of(r, x);
		if (VA_PUB(((unsigned)q->page_attr) ^ VA_FRESH) != VA_PUB(v))
			break;
		q->page_attr ^= VA_APART;
	}
}

/* The attributes v once the call op(arg) changed them. */
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
void vmap_relabel(struct vmap_region *r, uintptr_t head, uintptr_t end, uint64_t t, uintptr_t a,
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
		oprev = nprev = vmap_attrs_at(r, head, t, x - VMAP_PAGE);
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
void vmap_record_attrs(struct vmap_region *r, struct piece *p, uintptr_t a, uintptr_t e,
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
		vmap_set_attrs(r, p->head + VMAP_PAGE, p->end, v);
		tag_attrs(h, 0, VMAP_TAG_SEGS);
		t |= VMAP_TAG_SEGS;
	}
	vmap_relabel(r, p->head, p->end, t, a, e, ap->op, ap->arg, false);
}
