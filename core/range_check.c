/*
 * range_check.c — the debug model check of the large allocator: a walk of
 * every arena page that compares the tags, bins, pools and counts with what
 * they must be.  Unit tests call it (VMAP_DEBUG); it is never on a hot path.
 */
#include "range_impl.h"

#include "cache.h"

/* ---- debug model check --------------------------------------------------- */

__attribute__((noreturn)) static void check_fail(const char *what, uintptr_t a)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_str(&b, "vmapalloc: internal check failed: ");
	vmap_buf_str(&b, what);
	vmap_buf_str(&b, " at ");
	vmap_buf_hex(&b, a);
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
	vmap_os_abort();
}

/*
 * The slow, obvious model: walk every page of every claimed chunk in address
 * order; areas and free runs must tile each chunk run exactly, tags must sit
 * only at heads (and free tails), adjacent free runs that could merge must
 * have been merged, every free run must be on the bin list its tag names,
 * every pooled area on its pool, and the shard's page and byte counts must
 * equal what the walk finds.  O(arena pages): unit tests only, one thread.
 */
void vmap_range_check(void)
{
	static uint64_t freed[VMAP_MAX_SHARD_IDS][VMAP_RUN_LISTS], dirty_bytes[VMAP_MAX_SHARD_IDS];
	uint64_t pooled = 0;
	for (unsigned i = 0; i < vmap_nshards; i++) {
		dirty_bytes[i] = 0;
		for (unsigned k = 0; k < VMAP_RUN_LISTS; k++)
			freed[i][k] = 0;
	}
	for (unsigned i = 0; i < vmap_nregions; i++) {
		struct vmap_region *r = &vmap_regions[i];
		uintptr_t a = r->base, end = r->base + r->size;
		uint64_t prev_free = UINT64_MAX;
		while (a < end) {
			size_t c = (a - r->base) >> VMAP_CHUNK_SHIFT;
			if (vmap_chunk_is_free(r->chunk_owner[c]) ||
			    r->chunk_owner[c] == VMAP_CHUNK_LENT) {
				a = r->base + ((c + 1) << VMAP_CHUNK_SHIFT);
				prev_free = UINT64_MAX;
				continue;
			}
			struct vmap_pte *e = vmap_pte_of(r, a);
			uint64_t t = e->tag, n = vmap_tag_pages(t);
			unsigned st = vmap_tag_state(t), sh = vmap_tag_shard(t);
			if (st == VMAP_ST_NONE || st == VMAP_ST_FREE_TAIL || n == 0)
				check_fail("no head tag where an area or free run must start", a);
			if (sh + 1u != (r->chunk_owner[c] & 0x7fffu))
				check_fail("area owner differs from chunk owner", a);
			for (uint64_t k = 1; k < n; k++) {
				uint64_t kt = e[k].tag;
				bool tail_ok = st == VMAP_ST_FREE && k == n - 1 &&
					       vmap_tag_state(kt) == VMAP_ST_FREE_TAIL;
				if (kt && !tail_ok)
					check_fail("stray tag inside an area", a + (k << VMAP_PAGE_SHIFT));
			}
			bool big = t & VMAP_TAG_BIG;
			unsigned rs = vmap_tag_run_state(t);
			uint64_t key = (uint64_t)sh * VMAP_RUN_LISTS + list_of(big, rs);
			if (st == VMAP_ST_FREE) {
				if (prev_free == key)
					check_fail("two adjacent free runs were not merged", a);
				prev_free = key;
				freed[sh][list_of(big, rs)] += n;
				if (rs == VMAP_RUN_DIRTY || rs == VMAP_RUN_PROTECTED)
					dirty_bytes[sh] += n << VMAP_PAGE_SHIFT;
				bool listed = false;
				for (uintptr_t x = vmap_shards[sh].free_bin[list_of(big, rs)][bin_of(n)]; x;
				     x = vmap_pte_of(vmap_region_of(x), x)->next)
					if (x == a)
						listed = true;
				if (!listed)
					check_fail("free run missing from its bin", a);
			} else {
				prev_free = UINT64_MAX;
			}
			if (st == VMAP_ST_CACHED)
				pooled += n;
			a += n << VMAP_PAGE_SHIFT;
		}
	}
	uint64_t pool_pages = 0;
	for (unsigned i = 0; i < vmap_nshards; i++) {
		struct vmap_shard *s = &vmap_shards[i];
		uint64_t shard_pool_bytes = 0;
		for (unsigned k = 0; k < VMAP_RUN_LISTS; k++)
			if (freed[i][k] != s->free_pages[k])
				check_fail("free-page count of a shard disagrees with the walk", i);
		for (unsigned c = 0; c < VMAP_NCLASSES; c++) {
			uint32_t cnt = 0;
			for (uintptr_t a = s->pool[c].head; a; a = vmap_pte_of(vmap_region_of(a), a)->next) {
				uint64_t t = vmap_pte_of(vmap_region_of(a), a)->tag;
				if (vmap_tag_state(t) != VMAP_ST_CACHED || vmap_tag_pages(t) != c)
					check_fail("pooled area with a wrong tag or size", a);
				pool_pages += c;
				shard_pool_bytes += (uint64_t)c << VMAP_PAGE_SHIFT;
				cnt++;
			}
			if (cnt != s->pool[c].count)
				check_fail("pool count disagrees with its list", c);
		}
		if (s->pool_bytes != shard_pool_bytes)
			check_fail("pooled bytes of a shard disagree with its pools", i);
		if (s->cached_bytes != shard_pool_bytes + dirty_bytes[i])
			check_fail("cached bytes of a shard disagree with its pools and dirty runs", i);
	}
	if (pool_pages + vmap_cache_pages_held() != pooled)
		check_fail("cached areas missing from pools", pooled);
}

