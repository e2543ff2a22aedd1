/*
 * pte.c — the storage of the arena's metadata (pte.h): the region table, the
 * chunk size and the span every pointer test reads first.  Below every module that reads
 * them; the arena (arena.c) fills them in.
 */
#include "pte.h"

struct vmap_region vmap_regions[VMAP_MAX_REGIONS];
unsigned vmap_nregions;
uintptr_t vmap_span_lo VMAP_HOT, vmap_span_hi VMAP_HOT; /* read by every free */
unsigned vmap_chunk_shift = VMAP_CHUNK_SHIFT_WIDE;
unsigned vmap_lent_chunks;
