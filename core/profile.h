/*
 * profile.h — allocation sites (VMAPALLOC_PROFILE=1): who allocated what.
 *
 * The hooks in alloc.c are one predictable branch when the profile is off:
 *
 *     if (__builtin_expect(vmap_profile_on, 0))
 *             vmap_profile_alloc(p, size, VMAP_PROFILE_KIND(p));
 *
 * and, when it is on, a per-thread byte countdown for small blocks (inline
 * below) so that only one small allocation in about PROFILE_SAMPLE bytes
 * leaves the fast path, and another for large blocks (PROFILE_LARGE_SAMPLE;
 * 0 records every one); every mmap served from the arena is recorded.  A
 * sampled large block or mapping keeps its record in its own page-table
 * entry (profile.c).  A free of a
 * pointer that cannot have been recorded (outside the arena, and not in the
 * filter of sampled small pointers) costs one load.
 */
#ifndef VMAP_PROFILE_H
#define VMAP_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fmt.h"
#include "observe.h"
#include "range.h"
#include "slab.h"


/* The kind of a block just allocated by the malloc family (inline: the
 * span compare of range.h rejects glibc's pointers in one test). */
#define VMAP_PROFILE_KIND(p) \
	(vmap_region_of((uintptr_t)(p)) && !vmap_in_slab((uintptr_t)(p)) ? VMAP_PROFILE_LARGE \
									  : VMAP_PROFILE_SMALL)


struct vmap_profile_tls {
	int64_t countdown;       /* small-block bytes until the next sample */
	int64_t large_countdown; /* large-block bytes; kept at 0 when every one is recorded */
	uint64_t rng;            /* xorshift64* state, 0 until seeded */
	uint32_t busy;           /* recursion guard: set while this thread records */
	uint8_t small_drawn, large_drawn; /* the first distance was drawn */
};
extern __thread struct vmap_profile_tls vmap_profile_tls;

/* Filter of sampled small pointers: a counter per hash bucket (saturating);
 * zero means "certainly not recorded". */
#define VMAP_PROFILE_FILTER_BITS 16
extern uint8_t vmap_profile_filter[1u << VMAP_PROFILE_FILTER_BITS];

static inline unsigned vmap_profile_filter_slot(const void *p)
{
	return (unsigned)((((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) >>
			  (64 - VMAP_PROFILE_FILTER_BITS));
}

/* At init: maps the tables.  With libunwind, profiling starts only when
 * vmap_profile_start() (the library's constructor: dlopen may allocate) has
 * loaded it; blocks allocated before are not profiled. */
/* Both return true when they turned the profile on (the caller then turns
 * the malloc family's fast paths off). */
bool vmap_profile_init(void);
bool vmap_profile_start(void);
/* Out of line: the sample (backtrace, aggregation) and the forget.  ra and
 * cfa are the return address and call frame of the function the hook is
 * inlined in: the program's call site when that function was entered by a
 * tail call from preload/ (the key of the stack cache; anything else, such
 * as an address inside vmapalloc, only disables the cache). */
void vmap_profile_record(void *p, size_t size, int kind, uintptr_t ra, uintptr_t cfa);
void vmap_profile_forget(void *p);


/* After a successful allocation of size bytes at p. */
__attribute__((always_inline)) static inline void vmap_profile_alloc(void *p, size_t size, int kind)
{
	if (kind == VMAP_PROFILE_SMALL) {
		if ((vmap_profile_tls.countdown -= (int64_t)size) > 0)
			return;
	} else if (kind == VMAP_PROFILE_LARGE &&
		   (vmap_profile_tls.large_countdown -= (int64_t)size) > 0) {
		return;
	}
	vmap_profile_record(p, size, kind, (uintptr_t)__builtin_return_address(0),
			    (uintptr_t)__builtin_dwarf_cfa());
}

/* Before p is released by free or realloc; owned: p lies in the arena
 * (vmap_range_owns), which the caller knows.  Inline so that the free of a
 * block that was not sampled costs a few loads. */
static inline void vmap_profile_free_known(void *p, bool owned)
{
	if (owned) {
		struct vmap_pte_ref ref;
		if (vmap_pte_lookup((uintptr_t)p, VMAP_PTE_LIVE, &ref) &&
		    (__atomic_load_n(&ref.pte->prof_site, __ATOMIC_RELAXED) & VMAP_PTE_SITE))
			vmap_profile_forget(p);
	} else if (vmap_profile_filter[vmap_profile_filter_slot(p)]) {
		vmap_profile_forget(p);
	}
}

static inline void vmap_profile_free(void *p)
{
	vmap_profile_free_known(p, vmap_region_of((uintptr_t)p) != NULL && !vmap_in_slab((uintptr_t)p));
}

/*
 * The site tables (top PROFILE_TOP by bytes, by count, still live) as text,
 * or as JSON (the value of the report's "profile" member).  Frames are named
 * with dladdr() and the objects' own symbol tables (.symtab, mapped read-only
 * for the duration of the report): not for signal handlers.
 */
void vmap_profile_report(struct vmap_buf *b, int format);
/* The same, async-signal-safe: raw addresses with object+offset
 * (_dl_find_object), no lock, no dladdr. */
void vmap_profile_report_in_signal(struct vmap_buf *b, int format);
/* Resets every site's live peak to its live bytes (vmapalloc_reset_peaks). */
void vmap_profile_reset_peaks(void);

/* At thread exit (pthread key destructor): folds this thread's pending figures. */
void vmap_profile_thread_exit(void);


#endif
