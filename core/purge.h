/*
 * purge.h — between the purge's policy (purge_policy.c: when, and how much)
 * and its mechanism (purge.c: what to take, and how to give it back).
 */
#ifndef VMAP_PURGE_H
#define VMAP_PURGE_H

#include <stddef.h>
#include <stdint.h>

#include "counter.h"

enum vmap_purge_mode { PURGE_PRESSURE, PURGE_FRESH, PURGE_AGE, PURGE_ALL, PURGE_FORK };

/* One purge: for PURGE_PRESSURE, until the cache is under `amount`; for
 * PURGE_FRESH, about `amount` bytes, the oldest first; for PURGE_AGE, what was freed
 * more than a delay before `now`; everything for PURGE_ALL and PURGE_FORK.
 * Returns the bytes released; 0 at once if another thread is purging (but
 * for PURGE_ALL and PURGE_FORK, which wait). */
size_t vmap_purge_run(enum vmap_purge_mode mode, uint64_t now, uint64_t amount);

/* When the age purge is next due: every purge but a fresh one sets it one
 * delay ahead. */
extern uint64_t vmap_purge_next_ns;

/* The approximate read of a gauge, clamped at 0.  In per-CPU mode the base
 * alone can be below zero (one CPU's slot holds the frees, another's the
 * allocations); cast to unsigned, -1 MiB of cached bytes looked like 16 EiB,
 * over every limit: a pressure purge on every free. */
static inline uint64_t vmap_gauge(enum vmap_stat s)
{
	int64_t v = vmap_stat_read_approx(s);
	return v > 0 ? (uint64_t)v : 0;
}

#endif
