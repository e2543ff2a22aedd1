/*
 * profile_live.c — the profiler's live table: the sampled pointers still
 * allocated, in lock-striped open-addressing tables, so that a free of a
 * sampled block takes its bytes off its site; and the filter that lets the
 * free of an unsampled block skip the table.
 */
#include "profile_impl.h"

uint8_t vmap_profile_filter[1u << VMAP_PROFILE_FILTER_BITS];
struct stripe stripes[STRIPES];
const unsigned nstripes = STRIPES;

/* ---- the live table ---------------------------------------------------- */

static void stripe_lock(struct stripe *st)
{
	vmap_lock(&st->lock, VMAP_RANK_PROFILE);
}

static void stripe_unlock(struct stripe *st)
{
	vmap_unlock(&st->lock, VMAP_RANK_PROFILE);
}

static inline uint64_t ptr_hash(uintptr_t p)
{
	uint64_t h = (uint64_t)(p >> 4) * 0x9E3779B97F4A7C15ull;
	return h ^ (h >> 32);
}

static inline struct stripe *stripe_of(uint64_t h)
{
	return &stripes[h >> (64 - 6)];
}

static void filter_inc(unsigned slot)
{
	uint8_t *c = &vmap_profile_filter[slot];
	uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
	while (v != 255 && !__atomic_compare_exchange_n(c, &v, (uint8_t)(v + 1), true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

static void filter_dec(unsigned slot)
{
	uint8_t *c = &vmap_profile_filter[slot];
	uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
	while (v != 255 && v != 0 &&
	       !__atomic_compare_exchange_n(c, &v, (uint8_t)(v - 1), true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED)) {
	}
}

/* Rehashes a stripe into an array of cap entries.  Lock held. */
static bool stripe_grow_locked(struct stripe *st, uint32_t cap)
{
	vmap_lock_assert_held(&st->lock, VMAP_RANK_PROFILE);
	size_t len = (size_t)cap * sizeof(struct live_entry);
	struct live_entry *e = vmap_prof_map_zeroed(len);
	if (!e)
		return false;
	for (uint32_t i = 0; i < st->cap; i++) {
		uintptr_t k = st->e[i].key;
		if (k == KEY_EMPTY || k == KEY_TOMB)
			continue;
		uint32_t j = (uint32_t)ptr_hash(k) & (cap - 1);
		while (e[j].key)
			j = (j + 1) & (cap - 1);
		e[j] = st->e[i];
	}
	if (st->e) {
		size_t old = (size_t)st->cap * sizeof(struct live_entry);
		vmap_os_munmap(st->e, old);
		__atomic_sub_fetch(&profile_mapped, old, __ATOMIC_RELAXED);
	}
	st->e = e;
	st->cap = cap;
	st->tombs = 0;
	return true;
}

/* Finds p's slot, or NULL. Lock held. */
static struct live_entry *stripe_find_locked(struct stripe *st, uintptr_t p, uint64_t h)
{
	vmap_lock_assert_held(&st->lock, VMAP_RANK_PROFILE);
	if (!st->e)
		return NULL;
	for (uint32_t i = (uint32_t)h & (st->cap - 1), n = 0; n < st->cap;
	     i = (i + 1) & (st->cap - 1), n++) {
		uintptr_t k = st->e[i].key;
		if (k == p)
			return &st->e[i];
		if (k == KEY_EMPTY)
			return NULL;
	}
	return NULL;
}

/* Drops an entry (its site's live figures too). Lock held. */
static void entry_drop_locked(struct stripe *st, struct live_entry *e)
{
	vmap_lock_assert_held(&st->lock, VMAP_RANK_PROFILE);
	vmap_prof_site_delta(e->site, 0, 0, -e->bytes, -e->count, 0);
	filter_dec(vmap_profile_filter_slot((void *)e->key));
	e->key = KEY_TOMB;
	st->used--;
	st->tombs++;
}

bool vmap_prof_live_insert(uintptr_t p, uint32_t site, int64_t bytes, int64_t count)
{
	uint64_t h = ptr_hash(p);
	struct stripe *st = stripe_of(h);
	stripe_lock(st);
	struct live_entry *old = stripe_find_locked(st, p, h);
	if (old) /* a stale record (its free was not seen): replace it */
		entry_drop_locked(st, old);
	if ((uint64_t)(st->used + st->tombs + 1) * 4 > (uint64_t)st->cap * 3) {
		uint32_t cap = STRIPE_MIN;
		while ((uint64_t)cap < (uint64_t)(st->used + 1) * 2)
			cap *= 2;
		if (!stripe_grow_locked(st, cap)) {
			stripe_unlock(st);
			return false;
		}
	}
	uint32_t i = (uint32_t)h & (st->cap - 1);
	while (st->e[i].key != KEY_EMPTY && st->e[i].key != KEY_TOMB)
		i = (i + 1) & (st->cap - 1);
	if (st->e[i].key == KEY_TOMB)
		st->tombs--;
	st->e[i] = (struct live_entry){p, site, 0, bytes, count};
	st->used++;
	filter_inc(vmap_profile_filter_slot((void *)p));
	stripe_unlock(st);
	return true;
}

void vmap_profile_forget(void *ptr)
{
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (!vmap_profile_on)
		return;
	uintptr_t p = (uintptr_t)ptr;
	struct vmap_region *r = vmap_region_of(p);
	if (r && !vmap_slab_of(r, p)) {
		if (!(p & (VMAP_PAGE - 1))) /* else not a block: free() will say so */
			vmap_prof_pte_forget(vmap_pte_of(r, p));
		return;
	}
	if (t->busy)
		return;
	uint64_t h = ptr_hash(p);
	struct stripe *st = stripe_of(h);
	if (!__atomic_load_n(&st->used, __ATOMIC_RELAXED))
		return;
	t->busy = 1;
	stripe_lock(st);
	struct live_entry *e = stripe_find_locked(st, p, h);
	if (e)
		entry_drop_locked(st, e);
	stripe_unlock(st);
	t->busy = 0;
}

