/*
 * timeline.c — unit tests of core/timeline.c: the fixed array of points
 * that halves its resolution when full, the sampling interval, the JSON.
 */
#include "unit.h"

#include "fmt.h"
#include "timeline.h"

#define N VMAP_TIMELINE_POINTS

static struct vmap_timeline_point pt(uint64_t i)
{
	/* in_use peaks on odd points, resident on even ones: a halving must
	 * keep the larger of each pair for each figure. */
	return (struct vmap_timeline_point){
		.t_ns = i * 1000,
		.in_use = i % 2 ? 10 * i : i,
		.resident = i % 2 ? i : 10 * i,
		.cached = i,
		.mapped = 7,
		.mappings = i,
	};
}

Test(timeline, off_by_default_never_due)
{
	cr_assert_eq(vmap_timeline_next_ns, UINT64_MAX);
	vmap_timeline_init(); /* TIMELINE_MS is 0 */
	cr_assert_eq(vmap_timeline_next_ns, UINT64_MAX);
	vmap_timeline_tick(UINT64_MAX - 1);
	struct vmap_timeline_point out[1];
	cr_assert_eq(vmap_timeline_points(out, 1), 0);
}

Test(timeline, points_kept_in_order_until_full)
{
	vmap_timeline_reset(1000);
	for (uint64_t i = 0; i < N; i++) {
		struct vmap_timeline_point p = pt(i);
		vmap_timeline_record(&p);
	}
	static struct vmap_timeline_point out[N];
	cr_assert_eq(vmap_timeline_points(out, N), N);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(out[i].t_ns, i * 1000ull);
	cr_assert_eq(vmap_timeline_interval_ns(), 1000);
}

Test(timeline, full_ring_halves_keeping_peaks_and_doubles_the_interval)
{
	vmap_timeline_reset(1000);
	for (uint64_t i = 0; i <= N; i++) { /* one more than fits */
		struct vmap_timeline_point p = pt(i);
		vmap_timeline_record(&p);
	}
	static struct vmap_timeline_point out[N];
	unsigned n = vmap_timeline_points(out, N);
	cr_assert_eq(n, N / 2 + 1, "%u points after the halving", n);
	cr_assert_eq(vmap_timeline_interval_ns(), 2000);
	for (unsigned i = 0; i < N / 2; i++) {
		uint64_t a = 2 * i, b = a + 1;
		cr_assert_eq(out[i].t_ns, a * 1000, "point %u keeps its first sample's time", i);
		cr_assert_eq(out[i].in_use, 10 * b, "point %u: in use %lu", i, (unsigned long)out[i].in_use);
		cr_assert_eq(out[i].resident, 10 * a > b ? 10 * a : b);
		cr_assert_eq(out[i].cached, b);
		cr_assert_eq(out[i].mappings, b);
	}
	cr_assert_eq(out[N / 2].t_ns, (uint64_t)N * 1000, "the new point follows");
}

Test(timeline, a_long_run_keeps_its_whole_span)
{
	/* A tick every microsecond for 100 rings' worth at a 1 us interval: the
	 * ring fills at 256 us, 512 us, 1024 us, ... so 25.6 ms of ticks are 7
	 * halvings, and the points still run from the start to the end. */
	vmap_timeline_reset(1000);
	uint64_t t0 = 1000000000ull, end = t0 + 100ull * N * 1000;
	for (uint64_t t = t0; t < end; t += 1000)
		vmap_timeline_tick(t);
	static struct vmap_timeline_point out[N];
	unsigned n = vmap_timeline_points(out, N);
	cr_assert(n > N / 2 && n <= N, "%u points", n);
	cr_assert_eq(vmap_timeline_interval_ns(), 128 * 1000, "7 halvings: %lu",
		     (unsigned long)vmap_timeline_interval_ns());
	cr_assert_eq(out[0].t_ns, t0, "the start survives every halving");
	cr_assert_geq(out[n - 1].t_ns, end - 128 * 1000, "the end is recent");
	for (unsigned i = 1; i < n; i++)
		cr_assert_gt(out[i].t_ns, out[i - 1].t_ns);
}

Test(timeline, samples_at_most_once_per_interval)
{
	vmap_timeline_reset(50 * 1000 * 1000);
	uint64_t t0 = vmap_os_now_ns();
	vmap_timeline_tick(t0);
	vmap_timeline_tick(t0 + 1);                    /* too soon */
	vmap_timeline_tick(t0 + 49 * 1000 * 1000);     /* still too soon */
	vmap_timeline_tick(t0 + 50 * 1000 * 1000);     /* due */
	struct vmap_timeline_point out[4];
	cr_assert_eq(vmap_timeline_points(out, 4), 2);
	cr_assert_gt(out[1].resident, 0, "VmRSS read from /proc/self/statm");
	cr_assert_gt(out[1].mappings, 0, "mappings counted in /proc/self/maps");
}

Test(timeline, json_lists_points_then_one_now)
{
	vmap_timeline_reset(1000000);
	struct vmap_timeline_point p = pt(3);
	vmap_timeline_record(&p);
	char out[4096];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof out - 1, out, 0};
	vmap_timeline_json(&b, false);
	out[b.len] = '\0';
	cr_assert(strstr(out, "\"points\": [[3000, 30, 3, 3, 7, 3], ["), "%s", out);
	cr_assert(strstr(out, "\"interval_ms\": "), "%s", out);
	cr_assert_eq(out[b.len - 1], '}');
}

Test(timeline, a_forked_child_starts_afresh)
{
	vmap_opt.timeline_ms = 5;
	vmap_timeline_init();
	for (uint64_t i = 0; i <= N; i++) { /* a halving: the spacing doubles */
		struct vmap_timeline_point p = pt(i);
		vmap_timeline_record(&p);
	}
	cr_assert_eq(vmap_timeline_interval_ns(), 10000000);
	vmap_timeline_fork_child();
	struct vmap_timeline_point out[1];
	cr_assert_eq(vmap_timeline_points(out, 1), 0, "the parent's points are the parent's");
	cr_assert_eq(vmap_timeline_interval_ns(), 5000000);
	cr_assert_eq(vmap_timeline_next_ns, 0, "the child's first tick samples");
}
