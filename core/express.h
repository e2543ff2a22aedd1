/*
 * express.h — the short path of large blocks the calling thread's cache
 * holds (express.c).
 */
#ifndef VMAP_EXPRESS_H
#define VMAP_EXPRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "range.h"

/* Usable bytes of the largest area a thread's cache holds (1 MiB). */
#define VMAP_EXPRESS_MAX (((size_t)VMAP_CACHE_MAX_PAGES - 1) << VMAP_PAGE_SHIFT)

/* A block of `size` bytes (over the small limit, at most VMAP_EXPRESS_MAX)
 * that the thread's cache holds under exactly its page count, or NULL: the
 * general path then asks the cache again, near fits and refills included.
 * The caller counts the call (one event) and brackets it (re-entry). */
void *vmap_express_alloc(size_t size) VMAP_HIDDEN;
/* Frees p, a pointer of region r outside the slabs, into the thread's cache
 * when it is a live block that goes there without a lock or a look at its
 * neighbours: its hot area's block coming back, or an area of a size the
 * cache has room for.  false: nothing was done (anything else, including
 * every invalid pointer, which the general path then reports).  Counted and
 * bracketed by the caller, as above. */
bool vmap_express_free(void *p, struct vmap_region *r) VMAP_HIDDEN;

#endif
