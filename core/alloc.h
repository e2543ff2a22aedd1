/*
 * alloc.h — the facade that preload/ calls: the malloc family with glibc's
 * contracts, routed to the small backend or the range allocator.
 */
#ifndef VMAP_ALLOC_H
#define VMAP_ALLOC_H

#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

void *vmap_malloc(size_t size);
void vmap_free(void *p);
void *vmap_calloc(size_t n, size_t size);
void *vmap_realloc(void *p, size_t size);
void *vmap_reallocarray(void *p, size_t n, size_t size);
int vmap_posix_memalign(void **out, size_t align, size_t size);
void *vmap_aligned_alloc(size_t align, size_t size);
void *vmap_memalign(size_t align, size_t size);
void *vmap_valloc(size_t size);
void *vmap_pvalloc(size_t size);
size_t vmap_usable_size(void *p);
int vmap_trim(size_t pad);
int vmap_mallopt(int param, int value);
struct mallinfo2 vmap_mallinfo2(void);
void vmap_malloc_stats(void);
int vmap_malloc_info(int options, FILE *fp);

/* Life cycle. */
void vmap_init(void);            /* idempotent; every entry point calls it */
void vmap_at_exit(void);         /* the destructor: the report */
bool vmap_range_enabled(void);   /* the arena is set up (does not set it up) */
bool vmap_range_ready(void);     /* sets the arena up if need be; false if it cannot be had */   /* false when no arena could be reserved */

#endif
