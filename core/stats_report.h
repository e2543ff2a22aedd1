/*
 * stats_report.h — what the files of the report share, and nothing else uses:
 * the figures of one report (collected by stats.c), the renderers of the
 * text (stats_text.c) and of JSON and XML (stats_json.c), and the shard
 * tables they read.  stats_out.c puts them together for each destination.
 *
 * The figures are a flat array of uint64_t: first every statistic of
 * stats.def in its order (FIG_<name> == VMAP_STAT_<name>), then
 * large_bytes_peak, then what the system says and what is derived from the
 * rest.  Renderers read only the figures and the shard tables, never a
 * counter or an option, so one report shows one consistent set of figures,
 * and the tables of stats_text.c and stats_json.c name figures, not code.
 */
#ifndef VMAP_STATS_REPORT_H
#define VMAP_STATS_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "counter.h"
#include "fmt.h"
#include "range.h"
#include "section.h"

enum vmap_when { VMAP_WHEN_EXIT, VMAP_WHEN_SIGNAL, VMAP_WHEN_REQUEST };

enum vmap_fig {
#define X(name, kind, doc) FIG_##name,
#include "stats.def"
#undef X
	FIG_large_bytes_peak, /* vmap_stat_value(VMAP_STAT_COUNT) */
	FIG_pid,
	FIG_parent_pid,       /* 0 unless a forked child */
	FIG_elapsed_ns,       /* since vmap_stats_init */
	FIG_threads,          /* Threads: of /proc/self/status */
	FIG_threads_other,    /* threads - 1: the others, at exit */
	FIG_rss,              /* VmRSS, bytes */
	FIG_hwm,              /* VmHWM, bytes */
	FIG_anon_huge,        /* AnonHugePages of smaps_rollup, bytes */
	FIG_lazy_free,        /* LazyFree of smaps_rollup, bytes */
	FIG_maps,             /* lines of /proc/self/maps */
	FIG_own_maps,         /* of them, in vmapalloc's arena and tables */
	FIG_max_maps,         /* vm.max_map_count, 0 if unread */
	FIG_small_in_use,     /* glibc's mallinfo2: uordblks + hblkhd */
	FIG_small_heap,       /* glibc's mallinfo2: arena + hblkhd */
	FIG_small_all,        /* small + slabs + large + served mmaps: the text's "in all" */
	FIG_bytes_in_use,     /* small + large + served mmaps: JSON's bytes_in_use */
	FIG_switch_ns,        /* counters per-CPU since: 0 atomic, 1 from the start */
	FIG_counter_switch_ns, /* the same for JSON: 0 from the start */
	FIG_lazy_max,         /* vmap_lazy_max */
	FIG_lazy_limit,       /* vmap_lazy_limit */
	FIG_purge_delay_ms,   /* VMAPALLOC_PURGE_DELAY_MS */
	FIG_shards,           /* shards of the arena, 0 before it is set up */
	FIG_thread_cache_bytes, /* cached_bytes not in a shard's pools or runs */
	FIG_large_served,     /* pool_hits + run_hits + pool_misses */
	FIG_slab_in_use,      /* bytes of the builtin slabs' objects in use (mallinfo's) */
	FIG_backend,          /* VMAPALLOC_BACKEND in use (enum vmap_backend) */
	FIG_mimalloc_bytes,   /* mimalloc's committed memory (its mi_process_info) */
	FIG_mimalloc_peak,    /* ... at its peak */
	FIG_lock_waits,       /* waits for any of vmapalloc's locks (lock.c) */
	FIG_lock_sleeps,      /* ... that slept in the kernel */
	FIG_COUNT
};
_Static_assert(FIG_large_bytes_peak == (int)VMAP_STAT_COUNT, "statistics first");
_Static_assert(FIG_COUNT <= 256, "figure indexes fit in a byte");

/* What holds for one report: the conditions of the renderers' tables.  Both
 * polarities have a bit where a table needs them, so a table entry's
 * condition is just the bits that must all be set (0: always). */
enum {
	IS_EXIT = 1u << 0,
	IS_NOT_EXIT = 1u << 1,
	IS_PARENT = 1u << 2,       /* a forked child */
	IS_THREADS = 1u << 3,      /* more than one thread */
	IS_APPROX = 1u << 4,       /* more than one thread, or in a signal handler */
	IS_SMALL = 1u << 5,        /* glibc's figures were read (not in a handler) */
	IS_NO_SMALL = 1u << 6,
	IS_SLABS = 1u << 7,        /* the builtin small backend made slabs */
	IS_NO_SLABS = 1u << 8,
	IS_ROLLUP = 1u << 9,       /* /proc/self/smaps_rollup was read */
	IS_ARENA = 1u << 10,       /* the range allocator is set up */
	IS_NO_ARENA = 1u << 11,
	IS_RAISED = 1u << 12,      /* the pressure limit was raised */
	IS_DELAY = 1u << 13,       /* purges after a delay too */
	IS_MAX_MAPS = 1u << 14,    /* vm.max_map_count was read */
	IS_LENT = 1u << 15,        /* arena chunks are lent to the kernel (tight RLIMIT_AS) */
	IS_MADV_FREE = 1u << 16,   /* purges use MADV_FREE */
	IS_MADV_DONTNEED = 1u << 17,
	IS_ATOMIC = 1u << 18,      /* counters still atomic */
	IS_PERCPU = 1u << 19,      /* counters per-CPU */
	IS_PERCPU_START = 1u << 20, /* ... from the start */
	IS_PERCPU_LATER = 1u << 21, /* ... since the second thread */
	IS_BACKEND_LIBC = 1u << 22, /* the small backend in use */
	IS_BACKEND_BUILTIN = 1u << 23,
	IS_BACKEND_AUTO = 1u << 24,
	IS_BACKEND_MIMALLOC = 1u << 25,
	IS_NO_SLABS_MIMALLOC = 1u << 26, /* no slabs, but not glibc's alone either */
};

struct vmap_figures {
	int when;        /* enum vmap_when */
	uint32_t is;     /* IS_* */
	char comm[64];   /* the program's name (/proc/self/comm) */
	uint64_t v[FIG_COUNT];
};

/* Set by stats_out.c: the start time (at init) and, in a forked child, the
 * parent's pid. */
extern uint64_t vmap_report_start_ns VMAP_HIDDEN;
extern int vmap_report_parent_pid VMAP_HIDDEN;

/* stats.c: every figure of one report, read now (relaxed loads, raw system
 * calls; in a signal handler without folding or glibc). */
void vmap_report_collect(struct vmap_figures *f, int when);
/* stats.c: the derived figures and the IS_* bits, from the figures read and
 * the settings (part of collect; apart so that a test can render chosen
 * figures). */
void vmap_report_derive(struct vmap_figures *f);
/* stats.c: the program's name, '/' replaced by '_' ("" if unread). */
void vmap_report_program_name(char *out, size_t cap);

/* stats.c: the shard tables, read without their locks (approximate).
 * Free-run lists are [big * VMAP_NSTATES + enum vmap_run_state] (range.h). */
#define VMAP_NSTATES (VMAP_RUN_LISTS / 2)
struct vmap_shard_row {
	bool mmap; /* one of the program's mmap shards */
	uint64_t cached, pooled_areas;
	uint64_t free_bytes[VMAP_NSTATES];
	uint64_t locks, contended;
};
unsigned vmap_report_nshards(void);
void vmap_report_shard_row(unsigned i, struct vmap_shard_row *r);
uint64_t vmap_report_class_areas(unsigned c); /* pooled areas of size class c */
const char *vmap_report_state_name(unsigned k);

/* stats_text.c, stats_json.c: one report's body (the profile follows). */
void vmap_report_text(struct vmap_buf *b, const struct vmap_figures *f);
void vmap_report_json(struct vmap_buf *b, const struct vmap_figures *f);
void vmap_report_xml(struct vmap_buf *b, const struct vmap_figures *f);

#endif
