/*
 * stats.h — the report: every figure of stats.def, as text, JSON or the XML
 * of malloc_info(), formatted without malloc or stdio.
 */
#ifndef VMAP_STATS_H
#define VMAP_STATS_H

#include <stdint.h>

#include "fmt.h"

/* Index of the statistic called name, or -1. */
int vmap_stat_lookup(const char *name);
const char *vmap_stat_name(unsigned i);
uint64_t vmap_stat_value(unsigned i); /* exact, clamped at 0 */

int vmap_stats_write(int fd, int format);
void vmap_stats_xml(struct vmap_buf *b);
/* The exit report to VMAPALLOC_STATS (stderr or a new file). */
void vmap_stats_at_exit(int main_pid);
/* With VMAPALLOC_STATS=1: duplicate stderr now, for the exit report. */
void vmap_stats_keep_stderr(void);

#endif
