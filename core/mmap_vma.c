/*
 * mmap_vma.c — what the program's address space looks like inside the arena:
 * which piece a page belongs to (a served or foreign mapping, a malloc block,
 * a block vmapalloc holds, a hole), and, inside a served mapping, the
 * attributes and boundaries of the VMAs the kernel would have given the
 * program (protection, advice, locking, seals, and the state it merges them
 * by without showing it: anon_vma, VM_ACCOUNT, page offsets).  mmap.c and
 * mremap.c read and change them; nothing here makes a system call but to
 * give fresh pages the attributes they must have (vmap_realize_attrs).
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

/*
 * What the kernel keeps per VMA and does not show, and which still decides
 * whether neighbours merge (mm/mprotect.c mprotect_fixup, mm/vma.c
 * is_mergeable_anon_vma, mm/rmap.c find_mergeable_anon_vma, mm/mremap.c):
 *
 *   anon_vma    a VMA gets one at its first write fault -- also mlock's
 *               populate of a writable VMA, mprotect making a locked VMA
 *               writable, mremap growing a locked one -- the one of a
 *               neighbour whose flags differ at most in protection, or a new
 *               one; then keeps it.  MREMAP_DONTUNMAP of a whole VMA drops it
 *               (dontunmap_complete: unlink_anon_vmas).  Moved pages take
 *               their VMA's along.  Neighbours merge if one has none (the
 *               merged VMA has the other's) or both have the same.
 *   VM_ACCOUNT  mprotect to read-only drops it from a VMA that has no
 *               anon_vma, to writable gives it back: VMAs that differ in it
 *               do not merge.
 *   vm_pgoff    neighbours merge only where page offsets follow on; a moved
 *               VMA without an anon_vma takes the offset of its new place,
 *               one with keeps its old (copy_vma), so VMAs moved together
 *               follow on only where both have one or neither has.
 *
 * A served mapping is taken as written when it is made: one anon_vma, id 0.
 * VA_NOANON, VA_ANON (an id, equal in a mapping where the anon_vmas are),
 * VA_NOACCT and VA_PGOFF (a label: offsets do not follow on between pages
 * where it differs) are kept per page like the attributes; for
 * the first page in the head entry's page_attr word (VMAP_PTE_SEG | bits),
 * which a live served head leaves unused unless the profile holds a record
 * there (then the first page is taken as written).  HEAD_ANY there: some page
 * of the mapping may have such state.  Without it (every mapping no
 * whole-VMA DONTUNMAP touched, nor a move from one) no VMA is walked for it.
 *
 * The kernel also merges a mapping's edge VMAs with the program's other
 * mappings next to it, which vmapalloc places elsewhere: a VMA at an edge
 * is taken to end there.
 */
#define HEAD_ANY (1u << 24)

static unsigned anon_of(unsigned v)
{
	return v & (VA_NOANON | VA_ANON);
}

/* May VMAs whose pages are u and v merge, as far as anon_vmas go? */
static bool anon_compat(unsigned u, unsigned v)
{
	return (u & VA_NOANON) || (v & VA_NOANON) || anon_of(u) == anon_of(v);
}

static bool head_word_ours(struct vmap_pte *h)
{
	return !(__atomic_load_n(&h->prof_site, __ATOMIC_RELAXED) & VMAP_PTE_SITE);
}

static uint64_t head_word(struct vmap_region *r, uintptr_t head)
{
	struct vmap_pte *h = vmap_pte_of(r, head);
	uint64_t w = h->page_attr;
	return (w & VMAP_PTE_SEG) && head_word_ours(h) ? w : 0;
}

bool vmap_has_hidden(struct vmap_region *r, uintptr_t head)
{
	return head_word(r, head) & HEAD_ANY;
}

/* The first page's hidden state is v's; any: HEAD_ANY. */
void vmap_set_head_hidden(struct vmap_region *r, uintptr_t head, unsigned v, bool any)
{
	struct vmap_pte *h = vmap_pte_of(r, head);
	if (head_word_ours(h))
		h->page_attr = VMAP_PTE_SEG | (v & VA_HIDDEN) | (any ? HEAD_ANY : 0);
}

/* A new served mapping at head: written, as far as it knows. */
void vmap_clear_hidden(struct vmap_region *r, uintptr_t head)
{
	vmap_pte_of(r, head)->page_attr = 0;
}

/* The attributes of page x of the served mapping at head (tag t). */
unsigned vmap_attrs_at(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x)
{
	if (x == head || !(t & VMAP_TAG_SEGS))
		return head_attrs(t) | ((unsigned)head_word(r, head) & VA_HIDDEN);
	return ((unsigned)vmap_pte_of(r, x)->page_attr & (VA_BITS | VA_APART | VA_HIDDEN)) ^
	       VA_FRESH;
}

void vmap_set_attrs(struct vmap_region *r, uintptr_t x, uintptr_t e, unsigned v)
{
	v &= VA_BITS | VA_APART | VA_HIDDEN;
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
	unsigned v = VA_KEY(vmap_attrs_at(r, head, t, x));
	for (uintptr_t y = x + VMAP_PAGE; y < x + len; y += VMAP_PAGE)
		if (VA_KEY(vmap_attrs_at(r, head, t, y)) != v)
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
	unsigned first = vmap_attrs_at(r, head, st, x);
	uint64_t set = VMAP_TAG_ATTR | attrs_bits(first);
	if (vmap_spans_vmas(r, head, st, x, len)) {
		/* Without the labels: VMAs that were apart only by them merge
		 * where they land (vma_merge_new_range in copy_vma) -- unless their
		 * anon_vmas differ, or one has none: the kernel gives that one the
		 * page offset of its new place, the other keeps its old. */
		unsigned src = first, prev = first & ~(unsigned)(VA_APART | VA_PGOFF);
		for (size_t o = VMAP_PAGE; o < len; o += VMAP_PAGE) {
			unsigned w = vmap_attrs_at(r, head, st, x + o);
			unsigned v = w & ~(unsigned)(VA_APART | VA_PGOFF);
			bool follows = (w & src & VA_NOANON) ||
				       (!((w | src) & VA_NOANON) && !((w ^ src) & VA_PGOFF));
			v |= (prev ^ (follows ? 0 : VA_PGOFF)) & VA_PGOFF;
			if ((v & VA_FLAGS) == (prev & VA_FLAGS) && follows)
				v |= (prev ^ (anon_of(v) != anon_of(prev) ? VA_APART : 0)) & VA_APART;
			vmap_set_attrs(rq, q + o, q + o + VMAP_PAGE, v);
			prev = v;
			src = w;
		}
		vmap_set_attrs(rq, q + len, q + qlen, prev);
		set |= VMAP_TAG_SEGS;
	}
	struct vmap_pte *h = vmap_pte_of(rq, q);
	tag_attrs(h, VMAP_TAG_VMA | VMAP_TAG_SEGS, set);
	vmap_set_head_hidden(rq, q, first & ~(unsigned)VA_PGOFF, vmap_has_hidden(r, head));
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
		if ((((unsigned)q->page_attr ^ VA_FRESH) & VA_FLAGS) != (v & VA_FLAGS))
			break;
		q->page_attr ^= VA_APART;
	}
}

/* A locked VMA that is writable is populated with write faults (mlock,
 * mprotect, mremap growing it): without an anon_vma, it gets one
 * (settle_anon). */
static unsigned populated(unsigned v)
{
	bool w = (v & (VA_LOCKED | VA_ONFAULT | PROT_WRITE)) == (VA_LOCKED | PROT_WRITE);
	return w && (v & VA_NOANON) ? v | VA_POPULATE : v;
}

/* mprotect to prot of a page whose attributes are v. */
static unsigned reprotected(unsigned v, unsigned prot)
{
	unsigned n = (v & ~(unsigned)VA_PROT) | (prot & VA_PROT);
	if (n == v)
		return v; /* the flags do not change: nothing does */
	if (!(prot & PROT_WRITE))
		return v & VA_NOANON ? n | VA_NOACCT : n;
	n &= ~(unsigned)VA_NOACCT; /* charged again */
	return v & PROT_WRITE ? n : populated(n);
}

/* The attributes v once the call op(arg) changed them. */
static unsigned attrs_after(unsigned v, int op, long arg)
{
	switch (op) {
	case OP_MPROTECT: return reprotected(v, (unsigned)arg);
	case OP_MLOCK: return populated((v & ~(unsigned)VA_ONFAULT) | VA_LOCKED);
	case OP_MLOCK2:
		return populated((v & ~(unsigned)VA_ONFAULT) | VA_LOCKED | ((arg & 1) ? VA_ONFAULT : 0));
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

/* Pages [x, e) of the served mapping at head (tag t) are given the anon_vma
 * state `anon` (VA_NOANON or an id). */
static void set_anon(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t x, uintptr_t e,
		     unsigned anon)
{
	if (x == head) {
		unsigned v = (unsigned)head_word(r, head);
		vmap_set_head_hidden(r, head, (v & VA_NOACCT) | anon, true);
		x += VMAP_PAGE;
	}
	if (!(t & VMAP_TAG_SEGS))
		return;
	const uint64_t mask = VA_NOANON | VA_ANON | VA_POPULATE;
	for (struct vmap_pte *q = vmap_pte_of(r, x); x < e; x += VMAP_PAGE, q++)
		q->page_attr = (q->page_attr & ~mask) | anon;
}

/* The anon_vma a VMA of flags v at [x, y) gets at its first write fault:
 * that of its next or previous neighbour in the mapping if their flags
 * differ at most in protection (anon_vma_compatible), else a new one (an id
 * no page of the mapping has; the last one when all 16 are taken). */
static unsigned new_anon(struct vmap_region *r, uintptr_t head, uint64_t t, uintptr_t end,
			 uintptr_t x, uintptr_t y, unsigned v)
{
	const unsigned like = (VA_FLAGS & ~(unsigned)VA_PROT) | VA_PGOFF;
	if (y < end) {
		unsigned n = vmap_attrs_at(r, head, t, y);
		if (!(n & VA_NOANON) && !((n ^ v) & like))
			return anon_of(n);
	}
	if (x > head) {
		unsigned n = vmap_attrs_at(r, head, t, x - VMAP_PAGE);
		if (!(n & VA_NOANON) && !((n ^ v) & like))
			return anon_of(n);
	}
	unsigned used = 0;
	for (uintptr_t z = head; z < end; z += VMAP_PAGE) {
		unsigned n = vmap_attrs_at(r, head, t, z);
		if (!(n & VA_NOANON))
			used |= 1u << ((n & VA_ANON) >> VA_ANON_SHIFT);
	}
	unsigned id = 0;
	while (id < 15 && (used & (1u << id)))
		id++;
	return id << VA_ANON_SHIFT;
}

/*
 * The VMAs from the one holding page a - 1 to the one holding page e (after
 * a change that may have merged some) each take the anon_vma one of their
 * parts has (the merge checked that they agree), or, with none, a new one if
 * a page of them was populated (VA_POPULATE).  Only in mappings with hidden
 * state.
 */
static void settle_anon(struct vmap_region *r, uintptr_t head, uintptr_t a, uintptr_t e)
{
	if (!vmap_has_hidden(r, head))
		return;
	uint64_t t = __atomic_load_n(&vmap_pte_of(r, head)->tag, __ATOMIC_ACQUIRE);
	uintptr_t end = head + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
	if (e > end)
		return; /* (a race of the program's) */
	if (!(t & VMAP_TAG_SEGS)) {
		unsigned v = vmap_attrs_at(r, head, t, head);
		if (v & VA_POPULATE)
			set_anon(r, head, t, head, end, 0);
		return;
	}
	uintptr_t lo = a > head ? a - VMAP_PAGE : a, hi = e;
	while (lo > head && VA_KEY(vmap_attrs_at(r, head, t, lo - VMAP_PAGE)) ==
				    VA_KEY(vmap_attrs_at(r, head, t, lo)))
		lo -= VMAP_PAGE;
	while (hi < end && VA_KEY(vmap_attrs_at(r, head, t, hi)) ==
				   VA_KEY(vmap_attrs_at(r, head, t, hi - VMAP_PAGE)))
		hi += VMAP_PAGE;
	for (uintptr_t x = lo, y; x < hi; x = y) {
		unsigned v = vmap_attrs_at(r, head, t, x), k = VA_KEY(v);
		unsigned anon = VA_NOANON, pop = 0, same = 1;
		for (y = x; y < hi; y += VMAP_PAGE) {
			unsigned w = vmap_attrs_at(r, head, t, y);
			if (VA_KEY(w) != k)
				break;
			if (!(w & VA_NOANON))
				anon = anon_of(w);
			pop |= w & VA_POPULATE;
			same &= anon_of(w) == anon_of(v) && !(w & VA_POPULATE);
		}
		if ((anon & VA_NOANON) && pop)
			anon = new_anon(r, head, t, end, x, y, v);
		if (!same || anon != anon_of(v))
			set_anon(r, head, t, x, y, anon);
	}
}

/* mremap grew the served mapping at head, whose last page is x: the kernel
 * populates the new pages of a locked VMA, which then has an anon_vma if it
 * is writable. */
void vmap_populated(struct vmap_region *r, uintptr_t head, uintptr_t x)
{
	uint64_t t = __atomic_load_n(&vmap_pte_of(r, head)->tag, __ATOMIC_ACQUIRE);
	unsigned v = vmap_attrs_at(r, head, t, x);
	if (!vmap_has_hidden(r, head) || populated(v) == v)
		return;
	if (x == head || !(t & VMAP_TAG_SEGS))
		vmap_set_head_hidden(r, head, (unsigned)head_word(r, head) | VA_POPULATE, true);
	else
		vmap_pte_of(r, x)->page_attr |= VA_POPULATE;
	settle_anon(r, head, x, x + VMAP_PAGE);
}

/*
 * The program moved pages [x, e) of the served mapping at head out with
 * MREMAP_DONTUNMAP.  If they were a whole VMA, the kernel unlinked its
 * anon_vma (the pages are gone); of part of one, it kept it.
 */
void vmap_emptied(struct vmap_region *r, uintptr_t head, uintptr_t x, uintptr_t e)
{
	struct vmap_pte *h = vmap_pte_of(r, head);
	uint64_t t = __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE);
	uintptr_t end = head + (vmap_tag_pages(t) << VMAP_PAGE_SHIFT);
	if (vmap_tag_state(t) != VMAP_ST_LIVE || e > end || !head_word_ours(h))
		return;
	if (x > head && VA_KEY(vmap_attrs_at(r, head, t, x - VMAP_PAGE)) ==
				VA_KEY(vmap_attrs_at(r, head, t, x)))
		return;
	if (e < end && VA_KEY(vmap_attrs_at(r, head, t, e)) ==
			       VA_KEY(vmap_attrs_at(r, head, t, e - VMAP_PAGE)))
		return;
	tag_attrs(h, 0, VMAP_TAG_ATTR); /* (reset before reuse) */
	vmap_set_head_hidden(r, head, vmap_attrs_at(r, head, t, head), true);
	set_anon(r, head, t, x, e, VA_NOANON);
}

/*
 * Pages [a, e) of the served mapping at head (tag t, split: VMAP_TAG_SEGS)
 * take the attributes `op` gives them, and the labels after a - 1 are set so
 * that the boundaries are the kernel's: where a page changed on either side,
 * there is one if the attributes differ (the changed VMAs merge with equal
 * neighbours); elsewhere, and everywhere when `keep` (flags changed without a
 * merge), the boundaries are as they were.  Labels right of e are flipped as
 * far as that keeps the boundaries there.  The hidden state follows
 * (settle_anon).
 */
void vmap_relabel(struct vmap_region *r, uintptr_t head, uintptr_t end, uint64_t t, uintptr_t a,
		  uintptr_t e, int op, long arg, bool keep)
{
	uintptr_t x = a;
	unsigned oprev, nprev; /* page x - 1 before and after */
	unsigned run;	       /* the anon_vma of the VMA it ends up in */
	bool cprev = false;    /* did its flags change? */
	if (x == head) {
		oprev = vmap_attrs_at(r, head, t, head);
		nprev = attrs_after(oprev, op, arg);
		cprev = (nprev & VA_FLAGS) != (oprev & VA_FLAGS);
		if (VA_PUB(nprev) != VA_PUB(oprev))
			tag_attrs(vmap_pte_of(r, head), VMAP_TAG_VMA, attrs_bits(nprev));
		if (nprev != oprev)
			vmap_set_head_hidden(r, head, nprev, vmap_has_hidden(r, head));
		x += VMAP_PAGE;
	} else {
		oprev = nprev = vmap_attrs_at(r, head, t, x - VMAP_PAGE);
	}
	run = anon_of(nprev);
	for (struct vmap_pte *q = vmap_pte_of(r, x); x < end; x += VMAP_PAGE, q++) {
		unsigned o = ((unsigned)q->page_attr & (VA_BITS | VA_APART | VA_HIDDEN)) ^ VA_FRESH;
		unsigned na = x < e ? attrs_after(o, op, arg) : o;
		unsigned flags = na & VA_FLAGS;
		bool c = flags != (o & VA_FLAGS);
		bool bound = !keep && (c || cprev)
				     ? flags != (nprev & VA_FLAGS) || !anon_compat(na, run) ||
					       ((na ^ nprev) & VA_PGOFF)
				     : VA_KEY(o) != VA_KEY(oprev);
		unsigned label = flags != (nprev & VA_FLAGS) ? o & VA_APART /* (free) */
				 : bound ? (nprev & VA_APART) ^ VA_APART
					 : nprev & VA_APART;
		unsigned n = flags | label | (na & (VA_NOANON | VA_ANON | VA_POPULATE | VA_PGOFF));
		run = bound || (run & VA_NOANON) ? anon_of(n) : run;
		if (x >= e && n == o)
			break; /* the rest is as it was */
		q->page_attr = VMAP_PTE_SEG | (n ^ VA_FRESH);
		oprev = o;
		nprev = n;
		cprev = c;
	}
	settle_anon(r, head, a, x < end ? x + VMAP_PAGE : end);
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
		unsigned v = vmap_attrs_at(r, p->head, t, p->head), nv = attrs_after(v, ap->op, ap->arg);
		bool whole = (nv & VA_FLAGS) == (v & VA_FLAGS) || (a == p->head && e == p->end);
		if (whole) {
			/* One VMA still (its hidden state may change: populated). */
			if (VA_PUB(nv) != VA_PUB(v))
				tag_attrs(h, VMAP_TAG_VMA, attrs_bits(nv));
			if (nv != v) {
				vmap_set_head_hidden(r, p->head, nv, vmap_has_hidden(r, p->head));
				settle_anon(r, p->head, p->head, p->end);
			}
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
