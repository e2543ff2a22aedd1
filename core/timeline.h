/*
 * timeline.h — the report's timeline (VMAPALLOC_TIMELINE_MS): bytes in use,
 * resident, cached and mapped and the mapping count, sampled at most once
 * per interval on the allocator's slow paths.
 *
 * The facade calls vmap_timeline_tick from its counter fold (every 128
 * counted calls, alloc.c), where it already reads the clock: with the
 * timeline off, next_ns stays at UINT64_MAX and the tick is one compare.
 * It counts large frees too (vmap_timeline_count), behind a flag it tests
 * anyway for the purger thread.
 *
 * The program's mmap and munmap (preload/mmap.c) poll it as well: a program
 * that maps its own memory (CPython's arenas) makes few malloc calls.
 *
 * Defined in: timeline.c.  Called by: alloc.c (tick), preload/mmap.c (poll),
 * init.c (init), stats_out.c (the JSON), tests/unit.
 */
#ifndef VMAP_TIMELINE_H
#define VMAP_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"
#include "os.h"
#include "section.h"

#define VMAP_TIMELINE_POINTS 256 /* a point is 48 bytes: 12 KiB of .bss, touched when on */

struct vmap_timeline_point {
	uint64_t t_ns; /* since the report's start (vmap_report_start_ns) */
	uint64_t in_use, resident, cached, mapped, mappings;
};

/* When the next sample is due (CLOCK_MONOTONIC ns); UINT64_MAX while off. */
extern uint64_t vmap_timeline_next_ns VMAP_HIDDEN;

/* At init, after the options: on when VMAPALLOC_TIMELINE_MS > 0. */
void vmap_timeline_init(void);
/* A sample now, if one is due and no other thread is taking one. */
void vmap_timeline_sample(uint64_t now);
static inline void vmap_timeline_tick(uint64_t now)
{
	if (__builtin_expect(now >= __atomic_load_n(&vmap_timeline_next_ns, __ATOMIC_RELAXED), 0))
		vmap_timeline_sample(now);
}
/* From large frees (alloc.c), whose figures fold in large.c and so rarely
 * pass the facade's fold: true on every VMAP_TIMELINE_FREES-th large free
 * of this thread while the timeline is on, when the caller ticks (a clock
 * reading costs about a tenth of a large malloc/free pair). */
#define VMAP_TIMELINE_FREES 16
extern __thread int32_t vmap_timeline_frees;
static inline bool vmap_timeline_count(void)
{
	if (__atomic_load_n(&vmap_timeline_next_ns, __ATOMIC_RELAXED) == UINT64_MAX ||
	    --vmap_timeline_frees > 0)
		return false;
	vmap_timeline_frees = VMAP_TIMELINE_FREES;
	return true;
}
/* From an entry point that does not pass the fold (mmap, munmap), inside
 * its depth bracket: the clock is read only while the timeline is on. */
static inline void vmap_timeline_poll(void)
{
	if (__builtin_expect(__atomic_load_n(&vmap_timeline_next_ns, __ATOMIC_RELAXED) != UINT64_MAX, 0))
		vmap_timeline_tick(vmap_os_now_ns());
}
/* The timeline as JSON (null while off); a last point first, now, unless
 * in a signal handler. */
void vmap_timeline_json(struct vmap_buf *b, bool in_signal);

/* In a forked child: a sampler another thread ran at the fork is gone, and
 * the points so far are the parent's: start afresh. */
void vmap_timeline_fork_child(void);

/* For tests: the points held, the current spacing, the halvings so far. */
unsigned vmap_timeline_points(struct vmap_timeline_point *out, unsigned cap);
uint64_t vmap_timeline_interval_ns(void);
/* For tests: start over with this spacing (0: off). */
void vmap_timeline_reset(uint64_t interval_ns);
/* For tests: record one point as given (the ring's rules apply). */
void vmap_timeline_record(const struct vmap_timeline_point *p);

#endif
