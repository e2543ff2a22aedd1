/*
 * stats.h — the statistics of stats.def by name, and the report: every
 * figure and what the system says, as text, JSON or the XML of malloc_info(),
 * formatted without malloc or stdio, to its destinations (stderr, a new
 * file, at exit, on a signal).
 *
 * Defined in: stats.c (the statistics and the figures), stats_text.c and
 * stats_json.c (the renderings, and vmap_stats_xml), stats_out.c (the
 * destinations, init and fork); stats_report.h is what they share.
 * Called by: alloc.c, preload/shim.c.
 */
#ifndef VMAP_STATS_H
#define VMAP_STATS_H

#include <stdint.h>

#include "fmt.h"

/* Index of the statistic called name, or -1. */
int vmap_stat_lookup(const char *name);
const char *vmap_stat_name(unsigned i);
uint64_t vmap_stat_value(unsigned i); /* exact, clamped at 0 */

/* The report on request (vmapalloc_stats_print, malloc_stats): 0 or -errno. */
int vmap_stats_write(int fd, int format);
void vmap_stats_xml(struct vmap_buf *b);

/* At init, after the options: the start time, the duplicate of stderr for
 * the report, the VMAPALLOC_STATS_SIGNAL handler. */
void vmap_stats_init(void);
/* Before fork (the parent's pid) and in the forked child: the parent's pid
 * becomes the report's label. */
void vmap_stats_fork_prepare(void);
void vmap_stats_fork_child(void);
/* The exit report to VMAPALLOC_STATS (stderr or a new file), if set. */
void vmap_stats_at_exit(void);

#endif
