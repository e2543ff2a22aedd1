/*
 * timeline.c — the report's timeline: what the process held, sampled while
 * it ran (VMAPALLOC_TIMELINE_MS; off by default).
 *
 * A point is the time since start, the bytes in use (glibc's small blocks,
 * the slabs, large blocks and served mmaps: the text report's "in all"),
 * resident (VmRSS, /proc/self/statm), cached for reuse, mapped by vmapalloc,
 * and the process's mapping count (/proc/self/maps).  Points are taken on
 * the allocator's slow paths -- the facade's counter fold (every 128 counted
 * calls), every 16th large free of a thread, the exported mmap and munmap --
 * at most once per interval: a quiet process adds none, and the report adds
 * a last one when it is written.
 *
 * The points live in one fixed array; when it is full its resolution
 * halves, so that a run of any length keeps its whole shape:
 *
 *     full:    | a | b | c | d | ... | y | z |      spacing T
 *     halved:  |a^b|c^d| ... |y^z|   (free)  |      spacing 2T
 *
 * each pair becomes one point at the first one's time holding the larger of
 * each figure (peaks survive), and samples are taken twice as far apart.
 *
 * Invariants:
 *  - No allocation, no thread, no lock: one sampler at a time by a try-flag
 *    (a thread that finds it taken skips the sample); the report reads the
 *    points without it (at exit no sampler runs; on a signal or a request
 *    from another thread a point may be half written: approximate, like the
 *    shard tables).
 *  - /proc is read with raw system calls (os.h); glibc's mallinfo2 only on
 *    a slow path with no lock of ours held, never for a report written in a
 *    signal handler.  (A handler's own malloc that samples while glibc's
 *    malloc was interrupted would wait on glibc's lock, as a glibc malloc
 *    from that handler would.)
 *  - Off, vmap_timeline_next_ns is UINT64_MAX: the fold's tick is one
 *    compare that never holds.
 *
 * Called by: alloc.c (the tick), preload/mmap.c (the poll), init.c (init),
 * stats_out.c (the JSON, and the forked child's reset).
 */
#include "timeline.h"

#include "backend.h"
#include "counter.h"
#include "options.h"
#include "os.h"
#include "stats_report.h"

uint64_t vmap_timeline_next_ns = UINT64_MAX;
__thread int32_t vmap_timeline_frees;

static struct vmap_timeline_point ring[VMAP_TIMELINE_POINTS];
static unsigned npoints;
static uint64_t interval_ns; /* current spacing; 0: off */
static unsigned halvings;
static int sampling; /* the try-flag */

void vmap_timeline_reset(uint64_t ns)
{
	npoints = 0;
	halvings = 0;
	interval_ns = ns;
	__atomic_store_n(&vmap_timeline_next_ns, ns ? 0 : UINT64_MAX, __ATOMIC_RELAXED);
}

VMAP_START_TEXT void vmap_timeline_init(void)
{
	if (vmap_opt.timeline_ms)
		vmap_timeline_reset(vmap_opt.timeline_ms * 1000000ull);
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static void halve(void)
{
	for (unsigned i = 0; i < VMAP_TIMELINE_POINTS / 2; i++) {
		const struct vmap_timeline_point *a = &ring[2 * i], *b = &ring[2 * i + 1];
		ring[i] = (struct vmap_timeline_point){
			.t_ns = a->t_ns,
			.in_use = max64(a->in_use, b->in_use),
			.resident = max64(a->resident, b->resident),
			.cached = max64(a->cached, b->cached),
			.mapped = max64(a->mapped, b->mapped),
			.mappings = max64(a->mappings, b->mappings),
		};
	}
	npoints = VMAP_TIMELINE_POINTS / 2;
	if (interval_ns < UINT64_MAX / 2)
		interval_ns *= 2;
	halvings++;
}

void vmap_timeline_record(const struct vmap_timeline_point *p)
{
	if (npoints == VMAP_TIMELINE_POINTS)
		halve();
	ring[npoints] = *p;
	__atomic_store_n(&npoints, npoints + 1, __ATOMIC_RELEASE);
}

/* A gauge, clamped at 0; in a signal handler the base only (the
 * interrupted code may be in the middle of an update). */
static uint64_t gauge(enum vmap_stat s, bool in_signal)
{
	int64_t v = in_signal ? vmap_stat_read_approx(s) : vmap_stat_read(s);
	return v < 0 ? 0 : (uint64_t)v;
}

/* The figures now.  in_signal: no glibc, approximate counters. */
static void measure(struct vmap_timeline_point *p, uint64_t now, bool in_signal)
{
	uint64_t start = vmap_report_start_ns;
	p->t_ns = now > start ? now - start : 0;
	uint64_t small = 0;
	if (!in_signal && vmap_libc.mallinfo2) {
		struct mallinfo2 mi = vmap_libc.mallinfo2();
		small = mi.uordblks + mi.hblkhd;
	}
	p->in_use = small + gauge(VMAP_STAT_slab_bytes, in_signal) +
		    gauge(VMAP_STAT_large_bytes_in_use, in_signal) +
		    gauge(VMAP_STAT_mmap_bytes_in_use, in_signal);
	p->cached = gauge(VMAP_STAT_cached_bytes, in_signal);
	p->mapped = gauge(VMAP_STAT_mapped_bytes, in_signal);
	/* statm: "size resident shared ..." in pages; the second number. */
	char buf[128];
	p->resident = 0;
	if (vmap_os_read_file("/proc/self/statm", buf, sizeof buf) > 0) {
		const char *c = buf;
		while (*c >= '0' && *c <= '9')
			c++;
		while (*c == ' ')
			c++;
		uint64_t pages = 0;
		while (*c >= '0' && *c <= '9')
			pages = pages * 10 + (uint64_t)(*c++ - '0');
		p->resident = pages << VMAP_PAGE_SHIFT;
	}
	uint64_t own;
	p->mappings = vmap_os_count_maps(NULL, NULL, 0, &own);
}

void vmap_timeline_sample(uint64_t now)
{
	if (__atomic_exchange_n(&sampling, 1, __ATOMIC_ACQUIRE))
		return;
	if (now >= __atomic_load_n(&vmap_timeline_next_ns, __ATOMIC_RELAXED)) {
		struct vmap_timeline_point p;
		measure(&p, now, false);
		vmap_timeline_record(&p);
		/* After the record: a halving doubles the spacing. */
		__atomic_store_n(&vmap_timeline_next_ns, now + interval_ns, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&sampling, 0, __ATOMIC_RELEASE);
}

/* The child's timeline starts at the fork: the points before it are the
 * parent's, in the parent's report (a merged view would count them twice). */
void vmap_timeline_fork_child(void)
{
	__atomic_store_n(&sampling, 0, __ATOMIC_RELAXED);
	if (interval_ns)
		vmap_timeline_init();
}

static void point_json(struct vmap_buf *b, const struct vmap_timeline_point *p, bool first)
{
	vmap_buf_printf(b, "%s[%U, %U, %U, %U, %U, %U]", first ? "" : ", ", p->t_ns, p->in_use,
			p->resident, p->cached, p->mapped, p->mappings);
}

void vmap_timeline_json(struct vmap_buf *b, bool in_signal)
{
	if (!interval_ns) {
		vmap_buf_str(b, "null");
		return;
	}
	unsigned n = __atomic_load_n(&npoints, __ATOMIC_ACQUIRE);
	vmap_buf_printf(b,
			"{\"interval_ms\": %U, \"sampled_every_ms\": %U, \"halvings\": %u, "
			"\"capacity\": %u, \"start_ns\": %U, \"columns\": [\"t_ns\", \"in_use_bytes\", "
			"\"resident_bytes\", \"cached_bytes\", \"mapped_bytes\", \"mappings\"], "
			"\"points\": [",
			vmap_opt.timeline_ms, interval_ns / 1000000, halvings,
			(unsigned)VMAP_TIMELINE_POINTS, vmap_report_start_ns);
	for (unsigned i = 0; i < n; i++)
		point_json(b, &ring[i], i == 0);
	struct vmap_timeline_point last;
	measure(&last, vmap_os_now_ns(), in_signal);
	point_json(b, &last, n == 0);
	vmap_buf_str(b, "]}");
}

unsigned vmap_timeline_points(struct vmap_timeline_point *out, unsigned cap)
{
	unsigned n = __atomic_load_n(&npoints, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n && i < cap; i++)
		out[i] = ring[i];
	return n;
}

uint64_t vmap_timeline_interval_ns(void)
{
	return interval_ns;
}
