/*
 * observe.h — the switch and the callbacks through which the layers below
 * the observability layer tell it what happened, without calling it by name.
 *
 * profile.c fills vmap_observe in and then sets vmap_profile_on (sequentially
 * consistent); a caller tests the switch first, so that an unprofiled
 * process pays one predictable branch and never calls through a pointer:
 *
 *     if (__builtin_expect(vmap_profile_on, 0))
 *             vmap_observe.mmap_grow(head, bytes);
 *
 * The facade (alloc.c) is above profile.c and calls it directly.
 */
#ifndef VMAP_OBSERVE_H
#define VMAP_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "section.h"

enum vmap_profile_kind {
	VMAP_PROFILE_SMALL = 0, /* sampled: figures are estimates scaled by the sampling weight */
	VMAP_PROFILE_LARGE = 1, /* a range-allocator block: sampled, or every one (LARGE_SAMPLE=0) */
	VMAP_PROFILE_MMAP = 2,  /* a program mmap() served from the arena: every one */
};

/* Set once, when VMAPALLOC_PROFILE=1 and the profile's tables could be
 * mapped; never cleared. */
extern bool vmap_profile_on VMAP_HIDDEN;

/* Served mappings (mmap.c), whose record lives in their head's page-table
 * entry: recording a new one (ra and cfa: the caller's return address and
 * frame, the key of the profile's stack cache); munmap of [a, e) from the
 * mapping [head, end) (shard lock held, before the tags change); mremap
 * growing one in place; mremap moving pages of one to the new served mapping
 * q (len bytes, added of them new), before the old pages are cut. */
struct vmap_observe {
	void (*record)(void *p, size_t size, int kind, uintptr_t ra, uintptr_t cfa);
	void (*mmap_cut)(uintptr_t head, uintptr_t end, uintptr_t a, uintptr_t e);
	void (*mmap_grow)(uintptr_t head, size_t bytes);
	void (*mmap_moved)(uintptr_t head, uintptr_t q, size_t len, size_t added);
};
extern struct vmap_observe vmap_observe VMAP_HIDDEN;

#endif
