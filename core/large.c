/*
 * large.c — the large allocator's operations: allocate, free, resize in
 * place, usable size, and the arena's set-up on first use.  The top of the
 * layer: it takes areas from the thread cache (cache.c), the pools and the
 * free runs, and hands freed ones back to them and to the purge (purge.c).
 *
 * Invariants:
 *  - LIVE -> CACHED is a CAS without a lock (so two frees of one block cannot
 *    both win); every other tag change happens under the owner shard's lock.
 *  - An area belongs to the shard that owns its chunk, for its whole life.
 *  - No shard lock is held across a system call, but in the rare cases
 *    named where they are: a chunk going back to the arena, the trim's
 *    sweep, realloc growing in place into a guarded neighbour.
 *
 * Locks: shard->lock (rank SHARD) protects the shard's pools, bins and the
 * tags of its areas.
 */
#include "range_impl.h"

#include "cache.h"

/* ---- the public range operations --------------------------------------- */

/* Area pages (guard included) for a request, 0 on overflow. */
static uint64_t area_pages(size_t size, bool *big)
{
	if (size > ((size_t)1 << 46))
		return 0; /* 64 TiB: larger than any arena could be */
	uint64_t n = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	if (n < 2)
		n = 2;
	/* Big areas start 2 MiB aligned in THP-advised chunks, but keep their
	 * exact size: rounding them to whole huge pages cost more in
	 * fragmentation than it saved in huge-page splits at purge. */
	*big = vmap_opt.hugepage && (n - 1) << VMAP_PAGE_SHIFT >= vmap_opt.hugepage_min;
	return n;
}

/* Publishes the area carved at a from s's runs (shard lock held on entry,
 * released) and does what its former state asks. */
static void *carve_finish(struct vmap_shard *s, unsigned cpu, uintptr_t a, uint64_t pages,
			  bool kind, unsigned state, uint64_t resident, bool *zero, uint64_t tag,
			  bool fill)
{
	struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
	__atomic_store_n(&e->tag,
			 vmap_tag_make(VMAP_ST_LIVE, s->id, pages, (kind ? VMAP_TAG_BIG : 0) | tag),
			 __ATOMIC_RELEASE);
	vmap_shard_unlock(s);
	*zero = (state == VMAP_RUN_ZERO || state == VMAP_RUN_GUARDED) && !resident;
	int bad = 0;
	if (state == VMAP_RUN_GUARDED) /* (after a resident start: the rest) */
		bad = vmap_unguard(a + (resident << VMAP_PAGE_SHIFT), pages - resident);
	if (state == VMAP_RUN_PROTECTED)
		bad = vmap_unprotect(a, pages);
	if (bad) {
		/* Pages that still fault (at vm.max_map_count neither mprotect
		 * nor a fresh mapping can split the VMA): never handed out,
		 * kept out of circulation as foreign space until the program
		 * unmaps it (a live block with a PROT_NONE page would kill
		 * the program).  Its resident part is no longer cached. */
		vmap_shard_lock(s);
		__atomic_store_n(&e->tag,
				 vmap_tag_make(VMAP_ST_FOREIGN, s->id, pages, kind ? VMAP_TAG_BIG : 0),
				 __ATOMIC_RELEASE);
		vmap_shard_unlock(s);
		if (resident)
			vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes,
					  -(int64_t)(resident << VMAP_PAGE_SHIFT));
		return NULL;
	}
	if (!tag)
		vmap_guard_page(a, pages, MADV_GUARD_INSTALL);
	if (resident)
		vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes, -(int64_t)(resident << VMAP_PAGE_SHIFT));
	if (resident == pages) {
		vmap_stat_add_cpu(cpu, VMAP_STAT_run_hits, 1);
	} else {
		if (resident)
			vmap_stat_add_cpu(cpu, VMAP_STAT_run_extends, 1);
		vmap_stat_add_cpu(cpu, VMAP_STAT_pool_misses, 1);
		if (!(tag & VMAP_TAG_MMAP)) /* (the policy's sign of refaulting) */
			__atomic_add_fetch(&vmap_fresh_carves, 1, __ATOMIC_RELAXED);
		if (*zero && fill && vmap_opt.populate) {
			uint64_t n = pages - !(tag & VMAP_TAG_MMAP); /* (not the guard page) */
			if (vmap_opt.populate == 2) /* auto: malloc blocks only */
				n = tag & VMAP_TAG_MMAP ? 0 : vmap_populate_auto(a, n);
			if (n) {
				vmap_os_madvise((void *)a, n << VMAP_PAGE_SHIFT, MADV_POPULATE_WRITE);
				vmap_stat_add_cpu(cpu, VMAP_STAT_populated, 1);
			}
		}
		/* The program's mmap, served apart, never takes the cache: its
		 * fresh pages do not pay for it (CPython's arenas each round
		 * purged the blocks' cache, 20% more faults than glibc's). */
		if (!(tag & VMAP_TAG_MMAP))
			vmap_purge_fresh((pages - resident) << VMAP_PAGE_SHIFT);
	}
	return (void *)a;
}

/* Resident memory of this shard that fits, its pools merged into runs first
 * when its runs alone do not (shard lock held). */
static uintptr_t carve_resident_locked(struct vmap_shard *s, bool *kind, uint64_t pages,
				       size_t align, unsigned *state, uint64_t *resident, bool low)
{
	vmap_lock_assert_held(&s->lock, VMAP_RANK_SHARD);
	if (!*kind && !vmap_guard_on &&
	    !vmap_run_find(s, list_of(false, VMAP_RUN_DIRTY), pages, align, low))
		vmap_pools_to_runs_locked(s); /* (with guards, pooled areas carry markers: kept whole) */
	return vmap_carve_locked(s, kind, pages, align, state, resident, true, low);
}

/* pages: the whole area; tag: VMAP_TAG_MMAP for the program's mmap (no guard
 * page, so all pages are usable), 0 for malloc blocks.
 *
 * Resident memory first, this shard's, then any other shard's: an area keeps
 * the shard that owns its chunk whatever CPU carved it, so taking another
 * shard's freed memory costs one more lock where fresh memory costs a fault
 * per page.  A thread the scheduler moves between CPUs frees into both
 * shards; carving fresh memory whenever the shard of the moment had no
 * resident run that fitted split its working set in two and faulted it in
 * twice. */
__attribute__((noinline, cold)) void *vmap_alloc_carve(struct vmap_shard *s, unsigned cpu,
							 uint64_t pages, bool big, size_t align,
							 bool *zero, uint64_t tag,
							 enum vmap_carve_use use)
{
	/* Shard lock held on entry, released on return. */
	bool low = use == VMAP_CARVE_GROWN, fill = use == VMAP_CARVE_BLOCK;
	unsigned state;
	uint64_t resident;
	bool kind = big;
	uintptr_t a = carve_resident_locked(s, &kind, pages, align, &state, &resident, low);
	if (a)
		return carve_finish(s, cpu, a, pages, kind, state, resident, zero, tag, fill);
	if (vmap_nshards_large > 1) {
		/* Bounded on many-CPU machines: the next STEAL_SCAN shards are
		 * looked at (one cache line each), STEAL_TRIES of them locked. */
		enum { STEAL_SCAN = 16, STEAL_TRIES = 4 };
		unsigned tries = 0, n = vmap_nshards_large, base = s->id < n ? 0 : n;
		vmap_shard_unlock(s);
		for (unsigned i = 1; i < n && i <= STEAL_SCAN && tries < STEAL_TRIES; i++) {
			struct vmap_shard *o = &vmap_shards[base + (s->id - base + i) % n];
			if (__atomic_load_n(&o->cached_bytes, __ATOMIC_RELAXED) <
			    pages << VMAP_PAGE_SHIFT) /* a hint: too little to fit */
				continue;
			tries++;
			vmap_shard_lock(o);
			kind = big;
			a = carve_resident_locked(o, &kind, pages, align, &state, &resident, low);
			if (a) {
				vmap_stat_add_cpu(cpu, VMAP_STAT_run_steals, 1);
				return carve_finish(o, cpu, a, pages, kind, state, resident, zero, tag, fill);
			}
			vmap_shard_unlock(o);
		}
		vmap_shard_lock(s);
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		kind = big;
		a = vmap_carve_locked(s, &kind, pages, align, &state, &resident, false, low);
		if (a)
			return carve_finish(s, cpu, a, pages, kind, state, resident, zero, tag, fill);
		vmap_shard_unlock(s);
		if (attempt == 1)
			vmap_range_purge(true); /* arena full: give everything back, retry */
		uint64_t need = pages + (align >> VMAP_PAGE_SHIFT);
		size_t nchunks = (size_t)((need + VMAP_CHUNK_PAGES - 1) / VMAP_CHUNK_PAGES);
		uintptr_t c = vmap_chunks_acquire(s, big, nchunks);
		vmap_shard_lock(s);
		if (c)
			vmap_free_insert_locked(s, c, (uint64_t)nchunks * VMAP_CHUNK_PAGES, VMAP_RUN_ZERO,
						big, 0);
	}
	vmap_shard_unlock(s);
	return NULL;
}

static inline __attribute__((always_inline)) void *range_alloc(size_t size, size_t align,
								   bool *zero,
								   enum vmap_carve_use use)
{
	bool big;
	unsigned cpu = 0;
	uint64_t pages = area_pages(size, &big);
	if (!pages || !vmap_nregions)
		return NULL;
	size_t natural = big ? VMAP_BIG_MIN : VMAP_PAGE;
	if (align < natural)
		align = natural;
	void *p;
	uintptr_t a = 0;
	enum vmap_stat from = VMAP_STAT_thread_cached_bytes;
	/* The thread's cache first: a hit needs neither the CPU nor a lock. */
	bool cacheable = pages <= vmap_pool_exact && align == natural;
	if (cacheable)
		a = vmap_cache_pop(&pages); /* may be a near fit: pages grows */
	struct vmap_shard *s = NULL;
	if (!a) {
		s = vmap_shard_here(&cpu);
		if (cacheable)
			a = vmap_cache_refill(s, pages);
		if (!a && cacheable)
			a = vmap_cache_grow_hot(&pages); /* pages: the hot area's, grown */
	}
	if (!a && pages <= vmap_pool_exact) {
		from = VMAP_STAT_cached_bytes;
		if (__atomic_load_n(&s->pool[pages].count, __ATOMIC_RELAXED)) { /* a hint */
			/* Aligned requests take the pool head only if it happens to
			 * be aligned (the kernel's vmap pools do the same). */
			vmap_shard_lock(s);
			uintptr_t h = s->pool[pages].head;
			if (h && !(h & (align - 1))) {
				a = h;
				vmap_pool_remove_locked(s, (unsigned)pages, a);
			}
			vmap_shard_unlock(s);
		}
	}
	if (a) {
		/* A pooled area: resident, dirty, exactly this size. */
		struct vmap_pte *e = vmap_pte_of(vmap_region_of(a), a);
		publish_live(e, vmap_tag_shard(e->tag), pages, big);
		vmap_stat_add_quiet(VMAP_STAT_pool_hits, 1);
		if (from == VMAP_STAT_thread_cached_bytes) /* (the purge does not read it) */
			vmap_stat_add_quiet(from, -(int64_t)(pages << VMAP_PAGE_SHIFT));
		else
			vmap_stat_add_cpu(cpu, from, -(int64_t)(pages << VMAP_PAGE_SHIFT));
		*zero = false;
		p = (void *)a;
	} else {
		if (size > vmap_area_max)
			return NULL; /* (cached and pooled areas were not) */
		vmap_shard_lock(s);
		p = vmap_alloc_carve(s, cpu, pages, big, align, zero, 0, use);
		if (!p)
			return NULL;
	}
	int64_t usable = (int64_t)((pages - 1) << VMAP_PAGE_SHIFT);
	vmap_count_large_alloc_quiet(usable);
	vmap_stat_local_event();
	vmap_note_peak(pages);
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	return p;
}

void *vmap_range_alloc(size_t size, size_t align, bool *zero)
{
	return range_alloc(size, align, zero, VMAP_CARVE_BLOCK);
}

void *vmap_range_alloc_slab(size_t size, bool *zero)
{
	return range_alloc(size, size, zero, VMAP_CARVE_SLAB);
}

void *vmap_range_alloc_grown(size_t size, bool *zero)
{
	return range_alloc(size, VMAP_PAGE, zero, VMAP_CARVE_GROWN);
}

__attribute__((noinline, cold, noreturn)) static void invalid_pointer(const char *who,
								     const void *p,
								     uint64_t tag)
{
	VMAP_BUF(b, 2, 256);
	vmap_buf_invalid_pointer(&b, who, p);
	unsigned st = vmap_tag_state(tag);
	if (st == VMAP_ST_CACHED || st == VMAP_ST_PURGING || st == VMAP_ST_FREE)
		vmap_buf_str(&b, " (double free: the block was already freed)");
	else
		vmap_buf_str(&b, " (not the start of a live block: interior pointer or double free?)");
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
	vmap_os_abort();
}

/* The pte of a live block start (and, when region is not NULL, its
 * region), or stop the program naming `who`. */
struct vmap_pte *vmap_live_pte(const void *p, const char *who, uint64_t *tag,
				 struct vmap_region **region)
{
	struct vmap_pte_ref ref;
	if (!vmap_pte_lookup((uintptr_t)p, VMAP_PTE_LIVE, &ref))
		invalid_pointer(who, p, ref.tag);
	*tag = ref.tag;
	if (region)
		*region = ref.region;
	return ref.pte;
}

__thread uint32_t vmap_cached_frees;

/* A block the program mapped over (VMAP_TAG_OVER): its pages hold the
 * program's mappings, which no purge, reuse or fresh mapping may touch.  The
 * free ends the block's bookkeeping only; the area becomes FOREIGN, ours
 * again piece by piece as the program unmaps it (mmap.c). */
__attribute__((noinline, cold)) static void free_mapped_over(void *p, const char *who,
							     struct vmap_pte *e, uint64_t t)
{
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	uint64_t pages = vmap_tag_pages(t);
	vmap_shard_lock(s);
	bool ok = __atomic_compare_exchange_n(
		&e->tag, &t, vmap_tag_make(VMAP_ST_FOREIGN, s->id, pages, t & VMAP_TAG_BIG), false,
		__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	vmap_shard_unlock(s);
	if (!ok)
		invalid_pointer(who, p, t); /* lost a race with another free of p */
	vmap_count_large_free((int64_t)((pages - 1) << VMAP_PAGE_SHIFT));
}

static inline __attribute__((always_inline)) void range_free(void *p, const char *who,
								 bool outgrown)
{
	uint64_t t;
	struct vmap_region *r;
	struct vmap_pte *e = vmap_live_pte(p, who, &t, &r);
	uint64_t pages = vmap_tag_pages(t);
	if (__builtin_expect(t & VMAP_TAG_OVER, 0)) {
		free_mapped_over(p, who, e, t);
		return;
	}
	uint64_t cached = vmap_tag_make(VMAP_ST_CACHED, vmap_tag_shard(t), pages, t & VMAP_TAG_BIG);
	if (!__atomic_compare_exchange_n(&e->tag, &t, cached, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		invalid_pointer(who, p, t); /* lost a race with another free of p */
	struct vmap_shard *owner = &vmap_shards[vmap_tag_shard(t)];
	int64_t bytes = (int64_t)(pages << VMAP_PAGE_SHIFT);
	bool to_runs = pages > vmap_pool_exact || outgrown ||
		       (!vmap_guard_on && vmap_beside_resident_run(r, e, (uintptr_t)p, pages, t));
	if (__builtin_expect(!(t & VMAP_TAG_ATTR), 1) && !to_runs &&
	    vmap_cache_push(owner, (uintptr_t)p, pages)) {
		/* In this thread's cache: outside the purge's reach and budget; no
		 * CPU number, clock or lock needed.  The age purge is looked at on
		 * every 64th such free (it is looked at on every other free). */
		vmap_stat_add_quiet(VMAP_STAT_thread_cached_bytes, bytes); /* (counted with:) */
		vmap_count_large_free(bytes - (int64_t)VMAP_PAGE);
		if (!(++vmap_cached_frees & 63))
			vmap_purge_maybe(vmap_os_now_ns());
		return;
	}
	if (vmap_opt.populate == 2) /* (before a purge can take what it tells) */
		vmap_populate_freeing((uintptr_t)p);
	unsigned cpu;
	vmap_shard_here(&cpu);
	uint64_t now = vmap_os_now_ns();
	if (__builtin_expect(t & VMAP_TAG_ATTR, 0)) {
		/* The program changed this block's protection or advice (a guard
		 * page under a thread stack, MADV_DONTFORK...): a fresh mapping over
		 * it restores plain read-write memory, zero-filled, merged with the
		 * arena's VMA around it. */
		if (!vmap_map_fresh_arena((uintptr_t)p, (size_t)bytes)) {
			vmap_shard_lock(owner);
			vmap_chunks_give_back_locked(
				owner, vmap_free_insert_locked(owner, (uintptr_t)p, pages, VMAP_RUN_ZERO,
							       t & VMAP_TAG_BIG, now));
			vmap_shard_unlock(owner);
			vmap_count_large_free(bytes - (int64_t)VMAP_PAGE);
			return;
		}
		/* Could not reset it: keep it out of circulation rather than hand
		 * out memory with the wrong protection (counted as still in use). */
		return;
	}
	if (to_runs) {
		/* Larger areas (and those beside a resident run, and those a
		 * realloc outgrew) become a resident free run, merged with its
		 * free neighbours, reusable by any size. */
		vmap_guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE);
		vmap_shard_lock(owner);
		vmap_free_insert_locked(owner, (uintptr_t)p, pages, VMAP_RUN_DIRTY, t & VMAP_TAG_BIG, now);
		vmap_shard_unlock(owner);
	} else {
		vmap_shard_lock(owner);
		/* A pool holds a few areas of its size (16/8/4 like the thread
		 * caches); more would sit unused when sizes vary, while in the
		 * runs they merge and serve any size. */
		vmap_area_park_locked(owner, e, (uintptr_t)p, now);
		vmap_shard_unlock(owner);
	}
	vmap_count_large_free(bytes - (int64_t)VMAP_PAGE);
	vmap_stat_add_cpu(cpu, VMAP_STAT_cached_bytes, bytes);
#ifdef VMAP_DEBUG
	if (!__atomic_load_n(&vmap_threads_seen, __ATOMIC_RELAXED)) /* the model walk: one thread only */
		vmap_range_check();
#endif
	vmap_purge_maybe(now);
}

void vmap_range_free(void *p, const char *who)
{
	range_free(p, who, false);
}

void vmap_range_free_outgrown(void *p)
{
	range_free(p, "realloc", true);
}

size_t vmap_range_usable(const void *p, const char *who)
{
	uint64_t t;
	vmap_live_pte(p, who, &t, NULL);
	return (size_t)((vmap_tag_pages(t) - 1) << VMAP_PAGE_SHIFT);
}

VMAP_START_TEXT bool vmap_range_owns(const void *p)
{
	return vmap_region_of((uintptr_t)p) != NULL;
}

bool vmap_range_resize(void *p, size_t size)
{
	uint64_t t;
	struct vmap_pte *e = vmap_live_pte(p, "realloc", &t, NULL);
	uint64_t pages = vmap_tag_pages(t);
	if (size > ((size_t)1 << 46))
		return false;
	uint64_t want = ((size + VMAP_PAGE - 1) >> VMAP_PAGE_SHIFT) + 1;
	if (want <= pages)
		return true; /* fits already; the caller decides whether shrinking should move */
	bool big = t & VMAP_TAG_BIG;
	if (!big && vmap_opt.hugepage && (want - 1) << VMAP_PAGE_SHIFT >= vmap_opt.hugepage_min)
		return false; /* growing into the big kind: move to a THP-friendly chunk */
	if (t & (VMAP_TAG_MOVED | VMAP_TAG_OVER))
		return false; /* moved again instead: one VMA, where growing would make two (move.c);
			       * mapped over: copied */
	struct vmap_shard *s = &vmap_shards[vmap_tag_shard(t)];
	uintptr_t end = (uintptr_t)p + (pages << VMAP_PAGE_SHIFT);
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	bool done = false;
	vmap_tight_room_after(s, r, end, want - pages, big);
	vmap_shard_lock(s);
	if (end < r->base + r->size) {
		struct vmap_pte *re = vmap_pte_of(r, end);
		/* Atomic: a free of the neighbour CASes LIVE to CACHED without
		 * the lock (either value is not FREE: the same decision). */
		uint64_t rt = __atomic_load_n(&re->tag, __ATOMIC_RELAXED), rp = vmap_tag_pages(rt);
		unsigned rs = vmap_tag_run_state(rt), zs;
		uint64_t extra = want - pages, first = extra < rp ? extra : rp, zp = 0;
		bool free_run = vmap_tag_state(rt) == VMAP_ST_FREE && vmap_tag_shard(rt) == s->id &&
				!!(rt & VMAP_TAG_BIG) == big && rs != VMAP_RUN_PROTECTED;
		/* A neighbour in another state (dirty, advised, guarded) that is
		 * too small may be followed by a zero run, which does not merge
		 * with it: the free chunks vmap_tight_room_after took. */
		uintptr_t z = end + (rp << VMAP_PAGE_SHIFT);
		if (free_run && pages + rp < want && vmap_run_at(s, r, z, big, &zs) &&
		    zs == VMAP_RUN_ZERO)
			zp = vmap_tag_pages(vmap_pte_of(r, z)->tag);
		/* A guarded neighbour is unguarded first (under the lock: one
		 * madvise): if that fails, no growth, nothing changed. */
		if (free_run && pages + rp + zp >= want &&
		    (rs != VMAP_RUN_GUARDED || !vmap_unguard(end, first))) {
			uint64_t stamp = re->stamp;
			vmap_run_take_locked(s, re, rt);
			if (rp > extra)
				vmap_run_set_locked(s, r, end + (extra << VMAP_PAGE_SHIFT), rp - extra, rs, big,
					       stamp);
			if (extra > rp) {
				struct vmap_pte *ze = vmap_pte_of(r, z);
				uint64_t zstamp = ze->stamp, more = extra - rp;
				vmap_run_take_locked(s, ze, ze->tag);
				if (zp > more)
					vmap_run_set_locked(s, r, z + (more << VMAP_PAGE_SHIFT), zp - more,
							    VMAP_RUN_ZERO, big, zstamp);
			}
			if (rs == VMAP_RUN_DIRTY || rs == VMAP_RUN_PROTECTED)
				vmap_stat_add_cpu(s->id, VMAP_STAT_cached_bytes,
						  -(int64_t)(first << VMAP_PAGE_SHIFT));
			__atomic_store_n(&e->tag, vmap_tag_make(VMAP_ST_LIVE, s->id, want, t & VMAP_TAG_BIG),
					 __ATOMIC_RELEASE);
			done = true;
			int64_t grown = (int64_t)(extra << VMAP_PAGE_SHIFT);
			vmap_stat_add_local(VMAP_STAT_large_bytes_in_use, grown);
			vmap_note_peak(want); /* (the purge's limit grows up to twice the peak) */
			vmap_stat_add_local(VMAP_STAT_large_bytes_allocated, grown);
		}
	}
	vmap_shard_unlock(s);
	if (done && vmap_guard_on) {
		vmap_guard_page((uintptr_t)p, pages, MADV_GUARD_REMOVE);
		vmap_guard_page((uintptr_t)p, want, MADV_GUARD_INSTALL);
	}
	return done;
}

/* ---- init, fork -------------------------------------------------------- */

int vmap_range_init(void)
{
	static struct vmap_lock_set shard_locks = {"shards", VMAP_RANK_SHARD, NULL,
						   sizeof(struct vmap_shard), &vmap_nshards};
	static const struct vmap_lock_set global_locks = {"arena", VMAP_RANK_GLOBAL,
							  &vmap_global_lock, 0, NULL};
	vmap_purge_register_locks();
	vmap_lock_register(&global_locks);
	unsigned ncpu = vmap_os_ncpu();
	unsigned n = vmap_opt.shards ? (unsigned)vmap_opt.shards : ncpu;
	if (n > VMAP_MAX_SHARDS)
		n = VMAP_MAX_SHARDS;
	/* Sized before anything is mapped: a tight RLIMIT_AS (tight.c) sets
	 * the chunk size, and the default shard count, to the arena. */
	bool tight;
	vmap_reserve_size = vmap_fit_reservation(vmap_opt.reserve, &tight);
	if (tight)
		n = vmap_tight_setup(n);
	n = n ? n : 1;
	/* The program's mmap gets shards of its own, as many, unless the arena
	 * is tight (its chunks are few) or mmap is not served. */
	unsigned total = vmap_opt.mmap && vmap_mmap_apart && !tight ? 2 * n : n;
	/* POOL_PAGES counts usable pages; areas carry one more, the guard. */
	vmap_pool_exact = vmap_opt.pool_pages + 1;
	vmap_lazy_max = vmap_opt.lazy_max ? vmap_opt.lazy_max
					  : (uint64_t)(log2_floor(ncpu) + 1) * (4u << 20);
	vmap_lazy_limit = vmap_lazy_max;
	vmap_counter_set_batch(vmap_opt.lazy_max ? vmap_opt.lazy_max
						: (uint64_t)(log2_floor(ncpu) + 1) * (32u << 20),
			       vmap_lazy_max);
	vmap_shards_bytes = ((size_t)total * sizeof(struct vmap_shard) + VMAP_PAGE - 1) &
			    ~(VMAP_PAGE - 1);
	void *sh = vmap_os_mmap(NULL, vmap_shards_bytes, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (vmap_os_is_err(sh))
		return vmap_os_err(sh); /* (no shards: nothing for fork or purge to walk) */
	vmap_shards = sh;
	for (unsigned i = 0; i < total; i++)
		vmap_shards[i].id = i;
	shard_locks.first = &vmap_shards[0].lock;
	vmap_lock_register(&shard_locks);
	vmap_nshards_large = n;
	__atomic_store_n(&vmap_nshards, total, __ATOMIC_RELEASE);
	vmap_stat_add_cpu(0, VMAP_STAT_mapped_bytes, (int64_t)vmap_shards_bytes);
	if (vmap_reserve_size < vmap_region_floor())
		return -ENOMEM;
	int rc = vmap_region_add(vmap_reserve_size, vmap_region_floor());
	if (rc)
		return rc;
	vmap_moves_refused = false;
	vmap_guard_on = vmap_opt.guard && vmap_guard_markers();
	if (vmap_opt.guard && !vmap_guard_on)
		vmap_say("VMAPALLOC_GUARD=1 needs MADV_GUARD_INSTALL (Linux 6.13 or later); ",
			 "guard gaps stay in place but do not trap", NULL);
	return 0;
}

void vmap_range_flush_cached(void)
{
	vmap_cache_trim();
	for (unsigned i = 0; i < vmap_nshards; i++) {
		vmap_shard_lock(&vmap_shards[i]);
		vmap_pools_to_runs_locked(&vmap_shards[i]);
		vmap_shard_unlock(&vmap_shards[i]);
	}
}

bool vmap_range_is_metadata(uintptr_t a, uintptr_t e)
{
	for (unsigned i = 0; i < vmap_nregions; i++) {
		uintptr_t m = vmap_region_tables(&vmap_regions[i]);
		uintptr_t me = m + vmap_regions[i].pt_bytes + vmap_regions[i].owner_bytes;
		if (a < me && e > m)
			return true;
	}
	uintptr_t sh = (uintptr_t)vmap_shards;
	return sh && a < sh + vmap_shards_bytes && e > sh;
}

unsigned vmap_range_nshards(void)
{
	return vmap_nshards_large;
}


/* ---- set-up on first use ------------------------------------------------ */

/*
 * The arena, the shards and the thread caches are set up on the first request
 * that needs them (a large block, a servable mmap), not at init: a process
 * that makes only small allocations -- most processes of a shell script or a
 * build -- reserves nothing, maps no shard and makes none of the set-up's
 * system calls.
 */
int vmap_range_state VMAP_HOT;
bool vmap_range_ok VMAP_HOT;
size_t vmap_large_above VMAP_HOT;
static __thread bool vmap_tls_in_range_setup;

static int range_setup_pid; /* the process that claimed the set-up; 0: none */

__attribute__((noinline, cold)) bool vmap_range_setup_slow(void)
{
	if (vmap_tls_in_range_setup)
		return false; /* re-entered (a signal handler) during the set-up: glibc */
	/* The set-up is claimed with the claiming process's pid: a child forked
	 * while a thread of its parent set the arena up (fork.c waits for one
	 * under way, but one may start after that wait) has no thread to finish
	 * it, and takes glibc for its large blocks instead of waiting for ever. */
	int me = vmap_os_getpid(), expected = 0;
	if (__atomic_compare_exchange_n(&range_setup_pid, &expected, me, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		__atomic_store_n(&vmap_range_state, VMAP_RANGE_BUSY, __ATOMIC_RELEASE);
		vmap_tls_in_range_setup = true;
		bool ok = vmap_range_init() == 0;
		if (ok) {
			vmap_cache_init(vmap_os_ncpu());
			/* Its set-up paid for, the arena takes all it is best at. */
			__atomic_store_n(&vmap_large_above, vmap_opt.small_max, __ATOMIC_RELAXED);
		} else {
			vmap_say("could not reserve an arena (the system or RLIMIT_AS refused it); ",
				 "large allocations go to glibc", NULL);
		}
		__atomic_store_n(&vmap_range_ok, ok, __ATOMIC_RELEASE);
		__atomic_store_n(&vmap_range_state, VMAP_RANGE_DONE, __ATOMIC_RELEASE);
		vmap_tls_in_range_setup = false;
		return ok;
	}
	while (__atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) != VMAP_RANGE_DONE) {
		if (__atomic_load_n(&range_setup_pid, __ATOMIC_ACQUIRE) != me) {
			vmap_range_refuse(); /* claimed by the parent, before the fork */
			break;
		}
		vmap_os_yield();
	}
	return __atomic_load_n(&vmap_range_ok, __ATOMIC_ACQUIRE);
}

void vmap_range_refuse(void)
{
	vmap_range_ok = false;
	__atomic_store_n(&vmap_range_state, VMAP_RANGE_DONE, __ATOMIC_RELEASE);
	vmap_large_above = SIZE_MAX;
}

void vmap_range_setup_wait(void)
{
	while (!vmap_tls_in_range_setup &&
	       __atomic_load_n(&vmap_range_state, __ATOMIC_ACQUIRE) == VMAP_RANGE_BUSY)
		vmap_os_yield();
}

