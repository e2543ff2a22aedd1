/*
 * cache.h — per-thread partial caches of freed areas (see cache.c).
 */
#ifndef VMAP_CACHE_H
#define VMAP_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "range.h"

void vmap_cache_init(unsigned ncpu);
/* An area of exactly `pages` pages from this thread's cache (refilled from
 * shard s), or 0. */
uintptr_t vmap_cache_pop(struct vmap_shard *s, uint64_t pages);
/* Keeps a freed area (tag already CACHED) in this thread's cache; false when
 * it must go to its owner shard instead. */
bool vmap_cache_push(struct vmap_shard *here, struct vmap_shard *owner, uintptr_t a,
		     uint64_t pages, uint64_t now);
/* At thread exit: drains the thread's cache for good. */
void vmap_cache_thread_exit(void);
/* malloc_trim: every thread drains its cache on its next call; this one now. */
void vmap_cache_trim(void);
/* Pages held in the calling thread's cache (debug model check). */
uint64_t vmap_cache_pages_held(void);
void vmap_cache_fork_prepare(void);
void vmap_cache_fork_parent(void);
void vmap_cache_fork_child(void);

#endif
