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

#include "thread.h"

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
void vmap_init_at_start(void);   /* the library's constructor (see init.c) */
void vmap_backend_start(void);   /* then: loads mimalloc if it is the backend */
void vmap_at_exit(void);         /* the destructor: the report */
/* Around glibc's _Fork (preload/fork.c), which runs no fork handler: the
 * handlers fork() runs, when vmapalloc is initialised. */
void vmap_fork_hook_prepare(void);
void vmap_fork_hook_after(bool child);
/* Not the process's malloc (dlopen, or under a valgrind tool): everything
 * passes to glibc and the kernel (init.c go_inert).  Valid after init. */
bool vmap_is_inert(void);
/* The profile is on (vmap_profile_on set, sequentially consistent): every
 * malloc and free from now on takes the general path, which has the hooks. */
void vmap_fast_paths_off(void);

#endif
