/*
 * purge_policy.c — when cached areas go back to the system, and how many:
 * purge.c does the taking and the releasing.
 *
 * A free does not give memory back: the area waits, resident, in its shard's
 * pool, because reusing it costs nothing while refaulting it costs a fault per
 * page.  A purge runs when
 *   - the cached bytes pass the pressure limit, vmap_lazy_limit: resident
 *     free runs (oldest first) and a quarter of every pool go, for at most
 *     PURGE_ROUNDS rounds or until the cache is under 3/4 of the limit.  The
 *     limit starts at vmap_lazy_max (fls(ncpu) x 4 MiB: small, so that a
 *     long-running program's resident memory stays near its live heap) and
 *     adapts: pressure again within REFAULT_WINDOW_NS of the last pressure
 *     purge means the program refaults what was just purged (a loop freeing
 *     and allocating one big block), so the limit doubles instead (or jumps
 *     to what is cached), up to twice the peak of large bytes in use and
 *     the most seen in slabs, plus vmap_lazy_max; a delay without pressure
 *     halves it back.  Whatever the limit, a cache no larger than the large
 *     bytes in use is not pressure (pressure_limit); while the limit is
 *     raised, in use and cached together stay under twice the peak in use
 *     plus vmap_lazy_max (raised_room).  Served mmaps do not count there:
 *     CPython's arenas are tens of MiB of them, and as a floor they kept as
 *     much cached.  A VMAPALLOC_LAZY_MAX set by the user is a hard cap: no
 *     growth, no floor.  Age still returns whatever waits longer than the
 *     delay;
 *   - or the process forks: the cache goes first (fork.c says why);
 *   - or cached areas have waited longer than VMAPALLOC_PURGE_DELAY_MS: those
 *     (and only those) are released, checked at most once per delay;
 *   - or malloc_trim()/vmapalloc_purge() asks for everything.
 *
 * Owns: the pressure limit and its history, the fresh-memory debt, the most
 * slab bytes seen.
 *
 * Called by: large.c (free path, fresh carves, arena exhaustion), alloc.c
 * (the tick), background.c (the purger thread).
 */
#include "cache.h"
#include "counter.h"
#include "options.h"
#include "purge.h"
#include "range_impl.h"

#define REFAULT_WINDOW_NS (50 * 1000000ull)

uint64_t vmap_lazy_limit; /* the pressure limit now (see above) */
/* Blocks carved from fresh memory (large.c): exact where the pool_misses
 * counter, per CPU, is read only approximately between folds.  Not the
 * program's mappings, served apart: they cannot have refaulted the blocks'
 * cache. */
uint64_t vmap_fresh_carves;
static uint64_t vmap_pressure_ns; /* when the last pressure purge ran */
static uint64_t fresh_since_pressure_ns; /* the first fresh carve after it (0: none yet) */

/* Fresh memory carved since the cache last paid for it (vmap_purge_fresh). */
static uint64_t vmap_fresh_debt;

/*
 * The most bytes seen in slabs (at the purge's decisions).  Slabs are areas
 * of the range allocator too, counted out of the large bytes in use
 * (slab.c), and a program of small blocks refaults them: a thread's exit
 * retires its empty slabs into the cache, the purge releases them, and the
 * next thread's slabs fault the same pages in again.  So the limit a
 * refaulting program raises may grow up to them as well (limit_grows); by
 * their most seen, since they fall when the threads that held them exit,
 * just as the cache rises.  Slab bytes are address space, of which only the
 * pages used are resident: a bound, as the large bytes are.
 */
static uint64_t slab_bytes_most;

static uint64_t slab_bytes_most_seen(void)
{
	uint64_t b = vmap_gauge(VMAP_STAT_slab_bytes);
	uint64_t most = __atomic_load_n(&slab_bytes_most, __ATOMIC_RELAXED);
	if (b > most)
		__atomic_store_n(&slab_bytes_most, most = b, __ATOMIC_RELAXED);
	return most;
}

/*
 * What the cache may hold while the limit is raised.  A raised limit is for
 * a program that refaults what was purged: the fragments its blocks leave
 * behind are what its next blocks reuse, even when they fit none of the next
 * few requests (a block grown by realloc leaves an area smaller than the
 * next one).  So in use and cached together may reach twice the peak in use
 * (large blocks, and the most seen in slabs) plus vmap_lazy_max, and not
 * more: the rest of the cache pays.  Bounded by the peak alone, a
 * realloc-heavy run (64 blocks grown by 1.5 up to 8 MiB; 84 MiB its peak)
 * purged 1.1 GiB in 5 s and faulted it in again, 4.7-5.1 s and 97-100 MB of
 * peak RSS; bounded by twice the peak, 0.8-1.1 s and 113-117 MB (glibc
 * 3.4 s and 110 MB, tcmalloc 1.1 s and 135 MB).  Blocks of 64 KiB..4 MiB at
 * alignments of 4 KiB..2 MiB ran 7x as fast.
 */
static uint64_t raised_room(uint64_t in_use)
{
	int64_t peak = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	uint64_t most = peak > 0 && (uint64_t)peak > in_use ? (uint64_t)peak : in_use;
	uint64_t top = 2 * most + __atomic_load_n(&slab_bytes_most, __ATOMIC_RELAXED) +
		       vmap_lazy_max;
	uint64_t room = top > in_use ? top - in_use : 0;
	return room > vmap_lazy_max ? room : vmap_lazy_max;
}

/*
 * The pressure limit in effect: the adaptive limit, or the bytes the program
 * has in use in large blocks when that is more (served mmaps not: see above).  A cache
 * smaller than the live heap is what a program that frees and allocates at
 * random keeps needing: the fragments between its live blocks.  Purging it
 * only made the next allocations fault it in again.  Cached bytes stay bounded:
 * under the larger of the limit and the bytes in use, so RSS stays within
 * twice the live heap plus the limit, as the adaptive limit allowed already;
 * while the limit is raised, within twice the peak in use plus vmap_lazy_max
 * (raised_room).
 * A VMAPALLOC_LAZY_MAX set by the user is a hard cap: no floor.
 *
 * A program winding down (most of its heap freed) keeps its cache until the
 * age purge: capping a raised limit by twice the bytes in use made a
 * program whose heap swings between a quarter and all of its peak purge at
 * every swing and fault the cache in again.
 */
static uint64_t pressure_limit(void)
{
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	if (vmap_opt.lazy_max)
		return limit;
	/* This thread's unfolded delta too (its frees just before this call):
	 * other threads' are at most a few dozen operations each. */
	int64_t large = vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
			vmap_local.n[VMAP_STAT_large_bytes_in_use];
	uint64_t in_use = large > 0 ? (uint64_t)large : 0;
	if (limit > vmap_lazy_max) {
		uint64_t room = raised_room(in_use);
		limit = limit < room ? limit : room;
	}
	return in_use > limit ? in_use : limit;
}

/* After a pressure purge that found nothing to release (what is cached sits
 * in thread caches, out of its reach), wait for the cache to grow by another
 * eighth of the limit before trying again, instead of on every free. */
static int64_t vmap_purge_futile_at = -1;

/* Pressure again within one delay of the last pressure purge: the limit
 * doubles, up to twice the bytes in use (large blocks and served mmaps), and
 * the purge is skipped if the cache now fits.  With PURGE_DELAY_MS=0 (no age
 * purge, so nothing would bring it back down) the limit stays fixed. */
static bool limit_grows(uint64_t cached, uint64_t now)
{
	uint64_t window = vmap_opt.purge_delay_ms * 1000000ull;
	if (window > REFAULT_WINDOW_NS)
		window = REFAULT_WINDOW_NS;
	if (!window || vmap_opt.lazy_max)
		return false; /* a LAZY_MAX the user set is a hard cap */
	uint64_t last = __atomic_load_n(&vmap_pressure_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&vmap_pressure_ns, now, __ATOMIC_RELAXED);
	uint64_t refault_ns = __atomic_exchange_n(&fresh_since_pressure_ns, 0, __ATOMIC_RELAXED);
	/* Refaulting means fresh memory was carved since the last pressure
	 * purge: a burst of frees alone passes the limit again and again
	 * within the window without refaulting anything.  The window ends at
	 * the first such carve, where the refault starts, not at this
	 * pressure, where it ends: faulting 16 MiB in again took 61 ms at
	 * 15 us a fault, past the window every time, and a program that
	 * freed and allocated one 16 MiB block purged and faulted all of it
	 * at every round (16 operations a second against 12k). */
	static uint64_t fresh_at_last;
	uint64_t fresh = __atomic_load_n(&vmap_fresh_carves, __ATOMIC_RELAXED);
	uint64_t before = __atomic_exchange_n(&fresh_at_last, fresh, __ATOMIC_RELAXED);
	if (!refault_ns || refault_ns < last)
		refault_ns = now;
	if (!last || refault_ns - last > window || fresh == before)
		return false;
	/* In use: now, or at the peak of large blocks -- a program that frees
	 * its biggest block just before allocating it again is at its low point
	 * exactly when the pressure comes -- and the most seen in slabs.  Memory
	 * cached on the strength of an old peak still goes with age, and the
	 * limit decays once the refaulting stops. */
	uint64_t in_use = vmap_gauge(VMAP_STAT_large_bytes_in_use);
	int64_t peak = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	if (peak > 0 && (uint64_t)peak > in_use)
		in_use = (uint64_t)peak;
	in_use += slab_bytes_most_seen();
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	uint64_t ceiling = 2 * in_use + vmap_lazy_max; /* (the fragments: raised_room) */
	if (limit >= ceiling)
		return false;
	/* Straight to what the cache holds now, if that is more than twice
	 * the limit: a program that frees one 64 MiB block and allocates it
	 * again should not pay for four doublings. */
	limit = cached > limit * 2 ? cached : limit * 2;
	limit = limit < ceiling ? limit : ceiling;
	__atomic_store_n(&vmap_lazy_limit, limit, __ATOMIC_RELAXED);
	vmap_stat_add_cpu(vmap_os_cpu(), VMAP_STAT_lazy_limit_raised, 1);
	return cached <= pressure_limit();
}

/* A delay without pressure: the limit halves, back towards vmap_lazy_max. */
static void limit_decays(uint64_t now)
{
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	uint64_t last = __atomic_load_n(&vmap_pressure_ns, __ATOMIC_RELAXED);
	if (limit > vmap_lazy_max && now - last > vmap_opt.purge_delay_ms * 1000000ull)
		__atomic_store_n(&vmap_lazy_limit,
				 limit / 2 > vmap_lazy_max ? limit / 2 : vmap_lazy_max,
				 __ATOMIC_RELAXED);
}

/*
 * The age purge, at most once per delay: what waited longer than the delay
 * goes.  First the idle pass of the thread caches (cache.c), whose idle
 * areas are stamped old and so go in the same purge: the calling thread's
 * own cache, or from the purger thread every thread's.  Memory cached only
 * in thread caches counts: a thread that freed large blocks and then makes
 * only small calls holds them there.
 */
static void age_purge(uint64_t now, uint64_t cached)
{
	uint64_t next = __atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED);
	if (!vmap_opt.purge_delay_ms || now < next ||
	    (!cached && !vmap_gauge(VMAP_STAT_thread_cached_bytes)))
		return;
	if (next == 0) {
		/* First time: nothing can be old yet; look again after one delay. */
		__atomic_store_n(&vmap_purge_next_ns, now + vmap_opt.purge_delay_ms * 1000000ull,
				 __ATOMIC_RELAXED);
		return;
	}
	limit_decays(now);
	vmap_cache_idle_pass(now, false);
	vmap_purge_run(PURGE_AGE, now, 0);
}

/* The pressure purge if the cache is over its limit: true if it was. */
static bool pressure_check(uint64_t now, uint64_t cached)
{
	/* One compare in the common case: the limit, or the lowest the room
	 * can make it once it was raised (pressure_limit). */
	uint64_t limit = __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED);
	if (limit > vmap_lazy_max)
		limit = vmap_lazy_max;
	if (cached > limit && cached > (limit = pressure_limit())) {
		int64_t futile = __atomic_load_n(&vmap_purge_futile_at, __ATOMIC_RELAXED);
		if (futile >= 0 && (int64_t)cached < futile + (int64_t)(limit / 8))
			return true;
		if (limit_grows(cached, now))
			return true;
		size_t released = vmap_purge_run(PURGE_PRESSURE, now, limit / 4 * 3);
		__atomic_store_n(&vmap_purge_futile_at, released ? -1 : (int64_t)cached, __ATOMIC_RELAXED);
		return true;
	}
	if (__atomic_load_n(&vmap_purge_futile_at, __ATOMIC_RELAXED) >= 0)
		__atomic_store_n(&vmap_purge_futile_at, -1, __ATOMIC_RELAXED);
	return false;
}

void vmap_purge_maybe(uint64_t now)
{
	uint64_t cached = vmap_gauge(VMAP_STAT_cached_bytes);
	if (!pressure_check(now, cached))
		age_purge(now, cached);
}

/*
 * Fresh memory pays for itself out of the cache.  Pages carved from the zero
 * runs fault in, while the areas cached did not fit the request: kept
 * resident beside the new pages, they are what makes resident memory grow
 * past the live heap.  So every fresh page carved releases one cached page,
 * the oldest first, in batches of FRESH_BATCH, of what is cached past the
 * large bytes in use (and FRESH_FLOOR): resident memory grows with the
 * program's heap and not with what the cache holds.  A program whose blocks
 * fit the cache carves nothing fresh and keeps it all (the pressure limit and
 * the age purge bound it).  The calling thread's own cache is drained into
 * the pools first, where carves reuse it and the purge reaches it; other
 * threads' caches are out of reach (bounded by VMAPALLOC_CACHE_BYTES each,
 * and drained when idle).
 *
 * The floor of the bytes in use is for the fragments of a heap of random
 * sizes, which its next requests reuse.  A fresh area at least as large as
 * everything cached (thread caches included) and twice the largest cached
 * area is not such a request: it pays at once for the whole cache, down to
 * FRESH_FLOOR (never more than the carve faults in), unless the pressure
 * limit was raised (purged memory was being refaulted).
 *
 * Cost: one madvise per batch, against FRESH_BATCH / 4 KiB page faults of
 * about a microsecond each that the carve already pays.
 */
#define FRESH_BATCH (256u << 10)
#define FRESH_FLOOR (vmap_lazy_max / 32)

static bool fresh_pays_in_full(uint64_t bytes)
{
	if (bytes < FRESH_BATCH || vmap_opt.lazy_max ||
	    __atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED) > vmap_lazy_max)
		return false;
	uint64_t cached = vmap_gauge(VMAP_STAT_cached_bytes);
	if (bytes < cached + vmap_gauge(VMAP_STAT_thread_cached_bytes) ||
	    bytes < vmap_cached_area_bound() << (VMAP_PAGE_SHIFT + 1))
		return false;
	vmap_cache_drain_self(vmap_os_now_ns());
	cached = vmap_gauge(VMAP_STAT_cached_bytes);
	if (cached > FRESH_FLOOR)
		vmap_purge_run(PURGE_FRESH, vmap_os_now_ns(), cached - FRESH_FLOOR);
	return true;
}

void vmap_purge_fresh(uint64_t bytes)
{
	if (!__atomic_load_n(&fresh_since_pressure_ns, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&vmap_pressure_ns, __ATOMIC_RELAXED)) /* (a clock read a pressure purge) */
		__atomic_store_n(&fresh_since_pressure_ns, vmap_os_now_ns(), __ATOMIC_RELAXED);
	if (fresh_pays_in_full(bytes))
		return;
	if (__atomic_add_fetch(&vmap_fresh_debt, bytes, __ATOMIC_RELAXED) < FRESH_BATCH)
		return;
	uint64_t debt = __atomic_exchange_n(&vmap_fresh_debt, 0, __ATOMIC_RELAXED);
	if (vmap_opt.lazy_max)
		return;
	slab_bytes_most_seen(); /* (slabs are made by fresh carves) */
	vmap_cache_drain_self(vmap_os_now_ns());
	int64_t large = vmap_stat_read_approx(VMAP_STAT_large_bytes_in_use) +
			vmap_local.n[VMAP_STAT_large_bytes_in_use];
	/* What is cached up to the heap in use is the fragments a program that
	 * frees and allocates at random keeps reusing (purging it made a
	 * random-size benchmark refault 100 times as often): only the rest
	 * pays; and while the limit is raised, what passes raised_room. */
	uint64_t keep = large > 0 ? (uint64_t)large : 0;
	if (__atomic_load_n(&vmap_lazy_limit, __ATOMIC_RELAXED) > vmap_lazy_max)
		keep = raised_room(keep + bytes); /* (the carve: not counted yet) */
	keep = keep > FRESH_FLOOR ? keep : FRESH_FLOOR;
	uint64_t cached = vmap_gauge(VMAP_STAT_cached_bytes);
	if (cached <= keep)
		return;
	uint64_t over = cached - keep;
	vmap_purge_run(PURGE_FRESH, vmap_os_now_ns(), debt < over ? debt : over);
}

void vmap_purge_tick(uint64_t now)
{
	__atomic_store_n(&vmap_cache_clock_ns, now, __ATOMIC_RELAXED);
	if (vmap_opt.purge_delay_ms && now >= __atomic_load_n(&vmap_purge_next_ns, __ATOMIC_RELAXED))
		vmap_purge_maybe(now);
}

/*
 * The purger thread's pass, every half delay: the idle pass of every
 * thread's cache, then the age purge each time (not once per delay as on
 * the allocator's calls: the thread costs the program nothing), so that an
 * area goes back between one and one and a half delays after its free.
 */
void vmap_purge_background(uint64_t now)
{
	vmap_cache_idle_pass(now, true);
	uint64_t cached = vmap_gauge(VMAP_STAT_cached_bytes);
	if (!pressure_check(now, cached) && cached) {
		limit_decays(now);
		vmap_purge_run(PURGE_AGE, now, 0);
	}
	/* The purger thread's own figures (the drained caches' bytes): it
	 * makes no call that would fold them. */
	vmap_counter_flush_local();
}

size_t vmap_range_purge(bool all)
{
	if (!vmap_shards)
		return 0;
	return vmap_purge_run(all ? PURGE_ALL : PURGE_PRESSURE, vmap_os_now_ns(),
			      all ? 0 : pressure_limit() / 4 * 3);
}
