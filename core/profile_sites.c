/*
 * profile_sites.c — the profile's site table: one record per distinct
 * stack, found by hash; the per-thread batch that folds a site's updates
 * into it; and the site a sampled large block carries in its page record.
 */
#include "profile_impl.h"

__thread struct vmap_profile_tls vmap_profile_tls;
struct vmap_site *sites;
uint32_t *site_index;
uint32_t nsites;
struct vmap_lock site_lock = VMAP_LOCK_INIT;
uint64_t profile_mapped;

void *vmap_prof_map_zeroed(size_t len)
{
	void *p = vmap_os_mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (vmap_os_is_err(p))
		return NULL;
	__atomic_add_fetch(&profile_mapped, len, __ATOMIC_RELAXED);
	return p;
}

static uint64_t stack_hash(const uintptr_t *f, unsigned n, int kind)
{
	uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
	for (unsigned i = 0; i < n; i++) {
		h ^= f[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/* ---- sites ------------------------------------------------------------- */

static uint32_t site_find(uint64_t h, const uintptr_t *f, unsigned n, int kind)
{
	for (uint32_t i = (uint32_t)h & (SITE_INDEX - 1);; i = (i + 1) & (SITE_INDEX - 1)) {
		uint32_t id = __atomic_load_n(&site_index[i], __ATOMIC_ACQUIRE);
		if (!id)
			return 0;
		const struct vmap_site *s = &sites[id];
		if (s->hash != h || s->nframes != n || s->kind != (uint32_t)kind)
			continue;
		unsigned j = 0;
		while (j < n && s->frames[j] == f[j])
			j++;
		if (j == n)
			return id;
	}
}

/* The record for this stack, created if new; 0 (the overflow record) when
 * the table is full. */
uint32_t vmap_prof_site_get(const uintptr_t *f, unsigned n, int kind)
{
	uint64_t h = stack_hash(f, n, kind);
	uint32_t id = site_find(h, f, n, kind);
	if (id)
		return id;
	vmap_lock(&site_lock, VMAP_RANK_PROFILE);
	id = site_find(h, f, n, kind);
	if (!id && nsites + 1 < SITE_MAX) {
		id = nsites + 1;
		struct vmap_site *s = &sites[id];
		s->hash = h;
		s->nframes = n;
		s->kind = (uint32_t)kind;
		for (unsigned j = 0; j < n; j++)
			s->frames[j] = f[j];
		__atomic_store_n(&nsites, id, __ATOMIC_RELEASE);
		uint32_t i = (uint32_t)h & (SITE_INDEX - 1);
		while (site_index[i])
			i = (i + 1) & (SITE_INDEX - 1);
		__atomic_store_n(&site_index[i], id, __ATOMIC_RELEASE);
	}
	vmap_unlock(&site_lock, VMAP_RANK_PROFILE);
	return id;
}

/*
 * Per-thread batch of one site's deltas: a loop that allocates and frees at
 * one site changes the shared record (atomically) once per BATCH updates
 * instead of six atomic operations per block.  Flushed when the thread moves
 * to another site, at BATCH updates, at thread exit, and by the reporting
 * thread before it reads; a thread still running when the report is written
 * may hold up to BATCH - 1 updates of one site (the report says "approximate"
 * when other threads run).  The live peak is the site's live bytes before the
 * flush plus the highest running total within the batch: exact for one
 * thread, approximate when several update one site at once.
 */
__thread struct batch vmap_profile_batch;

void vmap_prof_batch_flush(struct batch *bt)
{
	if (!bt->site1)
		return;
	struct vmap_site *s = &sites[bt->site1 - 1];
	if (bt->bytes)
		__atomic_add_fetch(&s->bytes, bt->bytes, __ATOMIC_RELAXED);
	if (bt->count)
		__atomic_add_fetch(&s->count, bt->count, __ATOMIC_RELAXED);
	if (bt->samples)
		__atomic_add_fetch(&s->samples, bt->samples, __ATOMIC_RELAXED);
	if (bt->live_count)
		__atomic_add_fetch(&s->live_count, bt->live_count, __ATOMIC_RELAXED);
	int64_t after = bt->live_bytes ? __atomic_add_fetch(&s->live_bytes, bt->live_bytes,
							    __ATOMIC_RELAXED)
				       : __atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED);
	int64_t cand = after - bt->live_bytes + bt->live_max;
	int64_t peak = __atomic_load_n(&s->live_peak, __ATOMIC_RELAXED);
	while (cand > peak && !__atomic_compare_exchange_n(&s->live_peak, &peak, cand, true,
							   __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	*bt = (struct batch){0};
}

/* Adds to site id's figures through this thread's batch. */
void vmap_prof_site_delta(uint32_t id, int64_t bytes, int64_t count, int64_t live_bytes,
		       int64_t live_count, int samples)
{
	struct batch *bt = &vmap_profile_batch;
	if (bt->site1 != id + 1) {
		vmap_prof_batch_flush(bt);
		bt->site1 = id + 1;
	}
	bt->bytes += bytes;
	bt->count += count;
	bt->samples += samples;
	bt->live_count += live_count;
	bt->live_bytes += live_bytes;
	if (bt->live_bytes > bt->live_max)
		bt->live_max = bt->live_bytes;
	if (++bt->n >= BATCH)
		vmap_prof_batch_flush(bt);
}


/* Takes the record of the block whose head entry is e (if it has one) off its
 * site's live figures. */
void vmap_prof_pte_forget(struct vmap_pte *e)
{
	uintptr_t w = __atomic_load_n(&e->prof_site, __ATOMIC_RELAXED);
	if (!(w & VMAP_PTE_SITE))
		return;
	__atomic_store_n(&e->prof_site, 0, __ATOMIC_RELAXED);
	struct vmap_profile_tls *t = &vmap_profile_tls;
	if (t->busy) { /* a signal handler freeing in the middle of a record */
		vmap_stat_inc_local(VMAP_STAT_profile_skipped);
		return;
	}
	t->busy = 1;
	vmap_prof_site_delta((uint32_t)w, 0, 0, -(int64_t)e->prof_bytes, -(int64_t)e->prof_count, 0);
	t->busy = 0;
}
