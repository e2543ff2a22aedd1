/*
 * pool.c — each shard's per-size pools of freed areas, kept resident and
 * whole for the next request of their size, and the way from the pools back
 * into the free runs.  Every function here runs under the shard's lock.
 */
#include "range_impl.h"

/* ---- pools (shard lock held) ------------------------------------------- */

/* Pooled bytes per shard: beyond them, freed areas go to the free runs,
 * where they merge and serve any size.  Pools pay off while sizes repeat;
 * with random sizes, 16/8/4 areas of each of 256 sizes would hold tens of
 * MiB unmerged and the footprint would grow. */
#define POOL_MAX_BYTES ((uint64_t)4 << 20)

void vmap_pool_push_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	uint64_t pages = vmap_tag_pages(e->tag);
	struct vmap_pool *p = &s->pool[pages];
	e->stamp = now;
	if (!now && p->tail) {
		/* Stamped as old as can be (a thread cache drained idle): at the
		 * old end, where the age purge looks first. */
		e->next = 0;
		e->prev = p->tail;
		vmap_pte_of(vmap_region_of(p->tail), p->tail)->next = a;
		p->tail = a;
	} else {
		e->next = p->head;
		e->prev = 0;
		if (p->head)
			vmap_pte_of(vmap_region_of(p->head), p->head)->prev = a;
		else
			p->tail = a;
		p->head = a;
	}
	__atomic_store_n(&p->count, p->count + 1, __ATOMIC_RELAXED);
	s->pool_mask[pages >> 6] |= 1ull << (pages & 63);
	s->pool_bytes += pages << VMAP_PAGE_SHIFT;
	cached_add(s, pages << VMAP_PAGE_SHIFT);
}

void vmap_pool_remove_locked(struct vmap_shard *s, unsigned cls, uintptr_t a)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
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
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
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

static inline uint32_t pool_cap(uint64_t pages)
{
	return pages <= 17 ? 16 : pages <= 65 ? 8 : 4; /* usable <= 64 KiB, <= 256 KiB, more */
}

void vmap_area_park_locked(struct vmap_shard *s, struct vmap_pte *e, uintptr_t a, uint64_t now)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	uint64_t t = e->tag, pages = vmap_tag_pages(t);
	/* (With guards, areas carry their marker: kept whole, in the pools.) */
	if (vmap_guard_on || (pages <= vmap_pool_exact && s->pool[pages].count < pool_cap(pages) &&
			      s->pool_bytes + (pages << VMAP_PAGE_SHIFT) <= POOL_MAX_BYTES))
		vmap_pool_push_locked(s, e, a, now);
	else
		vmap_free_insert_locked(s, a, pages, VMAP_RUN_DIRTY, t & VMAP_TAG_BIG, now);
}


/*
 * Before carving fresh memory, which faults, pooled areas of other sizes are
 * turned into resident free runs so that this request can reuse them: exact
 * pools pay off while sizes repeat; when they do not (random sizes), the
 * memory is worth more merged than waiting for its exact size.
 */
void vmap_pools_to_runs_locked(struct vmap_shard *s)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
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

