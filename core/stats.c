/*
 * stats.c — the statistics' values and names, and the figures of one report:
 * the counters of stats.def, what /proc says, glibc's own figures and the
 * shard tables.  What the report looks like is in stats_text.c and
 * stats_json.c; where it goes, in stats_out.c.
 *
 * Invariants:
 *  - Never allocates, never uses stdio, never takes a lock: figures are read
 *    with relaxed loads (shard tables without their locks: "approximate"), so
 *    a report cannot wait on a thread stopped anywhere.
 *  - In a signal handler (VMAP_WHEN_SIGNAL) only raw system calls and memory
 *    reads: the counters without folding this thread's pending counts (it may
 *    have been interrupted in the middle of an update), and no mallinfo2.
 *  - Every /proc read is vmap_os_read_file, except /proc/self/maps, whose
 *    lines are counted as they stream by (it has no bound on its size).
 *
 * Called by: preload/shim.c (vmapalloc_counter_get and _name: lookup, name,
 * value), tests/unit, and the report's files (vmap_report_*).
 */
#include "stats.h"

#include <fcntl.h>
#include <string.h>

#include "alloc.h"
#include "backend.h"
#include "counter.h"
#include "options.h"
#include "os.h"
#include "range.h"
#include "section.h"
#include "slab.h"
#include "stats_report.h"

uint64_t vmap_report_start_ns VMAP_HOT;
int vmap_report_parent_pid;

/* Inline arrays, not pointers: no relocation for ld.so to apply at load. */
static const char stat_names[VMAP_STAT_COUNT][32] = {
#define X(name, kind, doc) #name,
#include "stats.def"
#undef X
};

static bool str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

int vmap_stat_lookup(const char *name)
{
	for (unsigned i = 0; i < VMAP_STAT_COUNT; i++)
		if (str_eq(stat_names[i], name))
			return (int)i;
	if (str_eq("large_bytes_peak", name))
		return VMAP_STAT_COUNT;
	return -1;
}

const char *vmap_stat_name(unsigned i)
{
	if (i < VMAP_STAT_COUNT)
		return stat_names[i];
	return i == VMAP_STAT_COUNT ? "large_bytes_peak" : NULL;
}

/* What the slab fast paths counted in the heaps (slab.h) into statistic i. */
static int64_t fast_part(unsigned i)
{
	bool alloc = i == VMAP_STAT_small_allocs || i == VMAP_STAT_small_slab_allocs;
	bool kind = i == VMAP_STAT_malloc_calls || i == VMAP_STAT_calloc_calls ||
		    i == VMAP_STAT_memalign_calls || i == VMAP_STAT_realloc_calls;
	if (!alloc && !kind && i != VMAP_STAT_free_calls && i != VMAP_STAT_small_frees &&
	    i != VMAP_STAT_small_slab_frees)
		return 0;
	uint64_t m, f, c = 0, a = 0, r = 0;
	if (kind)
		vmap_slab_fast_kinds(&c, &a, &r);
	if (i == VMAP_STAT_realloc_calls)
		return (int64_t)r;
	vmap_slab_fast_counts(&m, &f);
	if (i == VMAP_STAT_calloc_calls)
		return (int64_t)c;
	if (i == VMAP_STAT_memalign_calls)
		return (int64_t)a;
	if (i == VMAP_STAT_malloc_calls)
		return (int64_t)(m - c - a);
	return (int64_t)(alloc ? m : f);
}

uint64_t vmap_stat_value(unsigned i)
{
	int64_t v;
	if (i == VMAP_STAT_COUNT) {
		int64_t now = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
		vmap_stat_note_peak(now);
		v = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	} else {
		v = vmap_stat_read((enum vmap_stat)i) + fast_part(i);
	}
	return v < 0 ? 0 : (uint64_t)v;
}

/* In a signal handler: base + every slot + this thread's pending counts,
 * without folding (the interrupted code may be in the middle of an update). */
static uint64_t stat_peek(unsigned i)
{
	int64_t v;
	if (i == VMAP_STAT_COUNT) {
		int64_t peak = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
		int64_t now = (int64_t)stat_peek(VMAP_STAT_large_bytes_in_use);
		v = now > peak ? now : peak;
	} else {
		v = __atomic_load_n(&vmap_counter_base[i], __ATOMIC_RELAXED);
		int64_t *slots = __atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE);
		if (slots)
			for (unsigned c = 0; c < vmap_counter_nslots; c++)
				v += __atomic_load_n(&slots[c * VMAP_STAT_STRIDE + i], __ATOMIC_RELAXED);
		v += (int64_t)vmap_local.n[i] + vmap_counter_direct_pending((enum vmap_stat)i) + fast_part(i);
	}
	return v < 0 ? 0 : (uint64_t)v;
}

/* ---- what the system says: /proc, read with raw system calls ------------ */

/* s starts with key[0..kl): strncmp without importing it from libc. */
static bool starts_with(const char *s, const char *key, size_t kl)
{
	for (size_t i = 0; i < kl; i++)
		if (s[i] != key[i])
			return false;
	return true;
}

/* The number after "key" at the start of a line, or 0 (*found false). */
static uint64_t field(const char *buf, const char *key, bool *found)
{
	size_t kl = strlen(key);
	for (const char *l = buf; *l; l++) {
		if ((l == buf || l[-1] == '\n') && starts_with(l, key, kl)) {
			const char *p = l + kl;
			while (*p == ' ' || *p == '\t')
				p++;
			uint64_t v = 0;
			while (*p >= '0' && *p <= '9')
				v = v * 10 + (uint64_t)(*p++ - '0');
			if (found)
				*found = true;
			return v;
		}
	}
	return 0;
}

void vmap_report_program_name(char *out, size_t cap)
{
	long n = vmap_os_read_file("/proc/self/comm", out, cap);
	for (long i = 0; i < n; i++)
		if (out[i] == '\n')
			out[i] = '\0';
		else if (out[i] == '/')
			out[i] = '_';
}

/* Lines of /proc/self/maps: the process's mappings (VMAs), and in *own
 * those of vmapalloc's arena and its tables.  Streamed: the file is ~100
 * bytes a mapping, and vm.max_map_count allows 65530 of them. */
static uint64_t count_mappings(uint64_t *own)
{
	uintptr_t lo[VMAP_OWN_RANGES_MAX], hi[VMAP_OWN_RANGES_MAX];
	unsigned n = vmap_range_enabled() ? vmap_own_ranges(lo, hi, VMAP_OWN_RANGES_MAX, true) : 0;
	return vmap_os_count_maps(lo, hi, n, own);
}

/* ---- shard and size tables (no locks: approximate) ----------------------- */

static const char state_names[][12] = {"zero", "dirty", "advised", "guarded", "protected"};

const char *vmap_report_state_name(unsigned k)
{
	return k < sizeof state_names / sizeof state_names[0] ? state_names[k] : "other";
}

unsigned vmap_report_nshards(void)
{
	return vmap_range_enabled() && vmap_shards ? vmap_nshards : 0;
}

void vmap_report_shard_row(unsigned i, struct vmap_shard_row *r)
{
	const struct vmap_shard *s = &vmap_shards[i];
	memset(r, 0, sizeof *r);
	r->mmap = i >= vmap_nshards_large;
	r->cached = __atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED);
	r->locks = __atomic_load_n(&s->lock_acquisitions, __ATOMIC_RELAXED);
	r->contended = __atomic_load_n(&s->lock_contended, __ATOMIC_RELAXED);
	for (unsigned c = 0; c < VMAP_NCLASSES; c++)
		r->pooled_areas += __atomic_load_n(&s->pool[c].count, __ATOMIC_RELAXED);
	for (unsigned l = 0; l < VMAP_RUN_LISTS; l++)
		r->free_bytes[l % VMAP_NSTATES] +=
			__atomic_load_n(&s->free_pages[l], __ATOMIC_RELAXED) << VMAP_PAGE_SHIFT;
}

uint64_t vmap_report_class_areas(unsigned c)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < vmap_report_nshards(); i++)
		n += __atomic_load_n(&vmap_shards[i].pool[c].count, __ATOMIC_RELAXED);
	return n;
}

static uint64_t shards_cached(void)
{
	uint64_t t = 0;
	for (unsigned i = 0; i < vmap_report_nshards(); i++)
		t += __atomic_load_n(&vmap_shards[i].cached_bytes, __ATOMIC_RELAXED);
	return t;
}

/* ---- the figures of one report ----------------------------------------- */

void vmap_report_derive(struct vmap_figures *f)
{
	uint64_t *v = f->v;
	uint32_t is = f->is & (IS_SMALL | IS_ROLLUP); /* read by collect */
	is |= f->when == VMAP_WHEN_EXIT ? IS_EXIT : IS_NOT_EXIT;
	is |= v[FIG_parent_pid] ? IS_PARENT : 0;
	is |= v[FIG_threads] > 1 ? IS_THREADS | IS_APPROX : 0;
	is |= f->when == VMAP_WHEN_SIGNAL ? IS_APPROX : 0;
	is |= is & IS_SMALL ? 0 : IS_NO_SMALL;
	is |= v[FIG_slabs_made]				     ? IS_SLABS
	      : vmap_opt.backend == VMAP_BACKEND_MIMALLOC ? IS_NO_SLABS_MIMALLOC
							  : IS_NO_SLABS;
	is |= vmap_range_enabled() ? IS_ARENA : IS_NO_ARENA;
	is |= vmap_lazy_limit != vmap_lazy_max ? IS_RAISED : 0;
	is |= vmap_opt.purge_delay_ms ? IS_DELAY : 0;
	is |= v[FIG_max_maps] ? IS_MAX_MAPS : 0;
	is |= v[FIG_lent_bytes] ? IS_LENT : 0;
	is |= vmap_opt.purge_advice == VMAP_ADVICE_FREE ? IS_MADV_FREE : IS_MADV_DONTNEED;
	is |= !v[FIG_switch_ns]       ? IS_ATOMIC
	      : v[FIG_switch_ns] == 1 ? IS_PERCPU | IS_PERCPU_START
				      : IS_PERCPU | IS_PERCPU_LATER;
	f->is = is;

	v[FIG_threads_other] = v[FIG_threads] ? v[FIG_threads] - 1 : 0;
	v[FIG_small_all] = v[FIG_small_in_use] + v[FIG_slab_in_use] + v[FIG_large_bytes_in_use] +
			   v[FIG_mmap_bytes_in_use];
	v[FIG_bytes_in_use] = v[FIG_small_all];
	v[FIG_counter_switch_ns] = v[FIG_switch_ns] == 1 ? 0 : v[FIG_switch_ns];
	v[FIG_lazy_max] = vmap_lazy_max;
	v[FIG_lazy_limit] = vmap_lazy_limit;
	v[FIG_purge_delay_ms] = vmap_opt.purge_delay_ms;
	v[FIG_shards] = vmap_report_nshards();
	uint64_t in_shards = shards_cached();
	v[FIG_thread_cache_bytes] = v[FIG_cached_bytes] > in_shards ? v[FIG_cached_bytes] - in_shards : 0;
	v[FIG_large_served] = v[FIG_pool_hits] + v[FIG_run_hits] + v[FIG_pool_misses];
	v[FIG_backend] = vmap_opt.backend;
	f->is |= IS_BACKEND_LIBC << (vmap_opt.backend & 3);
	v[FIG_small_all] += v[FIG_mimalloc_bytes];
}

void vmap_report_collect(struct vmap_figures *f, int when)
{
	char buf[4096];
	uint64_t *v = f->v;
	memset(f, 0, sizeof *f);
	f->when = when;
	v[FIG_pid] = (uint64_t)vmap_os_getpid();
	v[FIG_parent_pid] = (uint64_t)vmap_report_parent_pid;
	vmap_report_program_name(f->comm, sizeof f->comm);
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++)
		v[i] = when == VMAP_WHEN_SIGNAL ? stat_peek(i) : vmap_stat_value(i);
	uint64_t now = vmap_os_now_ns(), start = vmap_report_start_ns;
	v[FIG_elapsed_ns] = start && now > start ? now - start : 0;
	if (vmap_counter_is_percpu()) {
		uint64_t sw = vmap_counter_switch_ns();
		v[FIG_switch_ns] = sw > start ? sw - start : 1;
	}
	vmap_os_read_file("/proc/self/status", buf, sizeof buf);
	v[FIG_rss] = field(buf, "VmRSS:", NULL) * 1024;
	v[FIG_hwm] = field(buf, "VmHWM:", NULL) * 1024;
	v[FIG_threads] = field(buf, "Threads:", NULL);
	vmap_os_read_file("/proc/self/smaps_rollup", buf, sizeof buf);
	bool found = false;
	v[FIG_anon_huge] = field(buf, "AnonHugePages:", &found) * 1024;
	v[FIG_lazy_free] = field(buf, "LazyFree:", &found) * 1024;
	f->is |= found ? IS_ROLLUP : 0;
	v[FIG_maps] = count_mappings(&v[FIG_own_maps]);
	uint64_t slab_rest;
	vmap_slab_usage(&v[FIG_slab_in_use], &slab_rest); /* no lock: fine in a handler */
	v[FIG_max_maps] = vmap_os_read_number("/proc/sys/vm/max_map_count");
	if (when != VMAP_WHEN_SIGNAL && vmap_libc.mallinfo2) {
		/* glibc's own figures: it takes its arena locks, so never here
		 * from a signal handler. */
		struct mallinfo2 mi = vmap_libc.mallinfo2();
		f->is |= IS_SMALL;
		v[FIG_small_in_use] = mi.uordblks + mi.hblkhd;
		v[FIG_small_heap] = mi.arena + mi.hblkhd;
	}
	vmap_mimalloc_held(&v[FIG_mimalloc_bytes], &v[FIG_mimalloc_peak]); /* no lock, no allocation */
	vmap_lock_wait_counts(&v[FIG_lock_waits], &v[FIG_lock_sleeps]);
	vmap_report_derive(f);
}
