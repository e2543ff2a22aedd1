/*
 * cache.h — per-thread partial caches of freed areas (see cache.c).
 */
#ifndef VMAP_CACHE_H
#define VMAP_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "range.h"

void vmap_cache_init(unsigned ncpu);
/* An area of `*pages` pages from this thread's cache -- or up to an eighth
 * more, with *pages updated -- or 0. */
uintptr_t vmap_cache_pop(uint64_t *pages);
/* After a miss: refills the cache for `pages` from shard s (the shard of the
 * CPU this thread runs on, which becomes its home) and pops one, or 0. */
uintptr_t vmap_cache_refill(struct vmap_shard *s, uint64_t pages);
/* After a miss: grows this thread's hot area in place to `*pages` when the
 * free run after it allows, and pops it, or 0. */
uintptr_t vmap_cache_grow_hot(uint64_t *pages);
/* Keeps a freed area (tag already CACHED) in this thread's cache; false when
 * it must go to its owner shard instead (owner is not the thread's home, the
 * thread is a consumer, or the cache is full by bytes). */
bool vmap_cache_push(struct vmap_shard *owner, uintptr_t a, uint64_t pages);
/* Sends what the calling thread's cache holds to the shards' pools, stamped
 * `stamp` (0: as old as can be).  For the purges that must reach
 * it: fork (the copy would pay for it) and fresh memory carved while it holds
 * areas that did not fit (purge_policy.c, vmap_purge_fresh). */
void vmap_cache_drain_self(uint64_t stamp);
/* At thread exit: drains the thread's cache for good. */
void vmap_cache_thread_exit(void);
/* malloc_trim: every thread drains its cache on its next call; this one now. */
void vmap_cache_trim(void);
/* From the age purge and the purger thread: drains the caches idle for a
 * delay and a half -- the calling thread's own, or with `others` (the
 * purger thread, VMAPALLOC_BACKGROUND) every thread's. */
void vmap_cache_idle_pass(uint64_t now, bool others);
/* The coarse clock operations note (set by the passes and the tick). */
extern uint64_t vmap_cache_clock_ns;
/* Pages held in the calling thread's cache (debug model check). */
uint64_t vmap_cache_pages_held(void);

#endif
