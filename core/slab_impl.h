/*
 * slab_impl.h — what slab.c shares with slab_heap.c only: the owner's list
 * operations, giving slabs back, and the abandoned slabs' lists.
 */
#ifndef VMAP_SLAB_IMPL_H
#define VMAP_SLAB_IMPL_H

#include "lock.h"
#include "slab.h"

/* Leaf lock: heap recycling and the abandoned lists below. */
extern struct vmap_lock vmap_slab_lock VMAP_HIDDEN;
/* Per class, slabs an exited thread left with live objects (doubly linked). */
extern struct vmap_slab *vmap_slab_abandoned[NCLASSES] VMAP_HIDDEN;
/* Remote frees into abandoned slabs, and the count when they were last reaped. */
extern uint64_t vmap_slab_abandoned_frees VMAP_HIDDEN, vmap_slab_abandoned_reaped VMAP_HIDDEN;

/* Moves d's remote stack onto its free list; returns how many objects. */
uint32_t vmap_slab_collect(struct vmap_slab *d) VMAP_HIDDEN;
void vmap_slab_list_push(struct vmap_slab **head, struct vmap_slab *d) VMAP_HIDDEN;
void vmap_slab_list_unlink(struct vmap_slab **head, struct vmap_slab *d) VMAP_HIDDEN;
/* An empty slab back to the range allocator. */
void vmap_slab_retire(struct vmap_slab *d) VMAP_HIDDEN;
/* An empty slab of h's: kept as its class's spare, or retired. */
void vmap_slab_empty(struct vmap_heap *h, struct vmap_slab *d) VMAP_HIDDEN;
/* Class c's spare slab, taken out of h's spares (NULL if none). */
struct vmap_slab *vmap_slab_spare_take(struct vmap_heap *h, unsigned c) VMAP_HIDDEN;
/* d (nothing free, nothing to carve) onto h's full list: true; false when a
 * remote free slipped in (collected: d is SLAB_CUR again, on no list). */
bool vmap_slab_file_full(struct vmap_heap *h, struct vmap_slab *d) VMAP_HIDDEN;
/* h's full slabs of class c that remote frees reached: partial or retired. */
void vmap_slab_rescan_full(struct vmap_heap *h, unsigned c) VMAP_HIDDEN;
/* Abandoned slabs that remote frees emptied: retired. */
void vmap_slab_reap_abandoned(void) VMAP_HIDDEN;

#endif
