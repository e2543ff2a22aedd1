/*
 * populate.c — whether a fresh area is faulted in by one call
 * (MADV_POPULATE_WRITE) or left to fault page by page as the program
 * writes it.
 *
 * One madvise populates N pages for a fraction of N faults: each fault is a
 * trap into the kernel and back, the call is one.  On this project's test
 * machine blocks of 64 KiB..4 MiB at random alignments, each page written
 * once, ran 3x as fast populated, random sizes 1.28x, 16 MiB blocks 1.13x.
 * But a page populated and never written is resident for nothing: a program
 * that sizes a buffer for the worst case and writes its first pages would
 * hold all of it.  So VMAPALLOC_POPULATE=auto (the default) follows what
 * the program does with the fresh blocks it gets:
 *   - part of each fresh block is watched: all of it while populating is
 *     off, its last eighth (at most TAIL_MAX pages) while it is on, the rest
 *     being populated.  At the next fresh carve, mincore() says how many of
 *     the watched pages are resident.  No one but the program made them so
 *     (they were not populated, and vmapalloc writes nothing in a large
 *     block);
 *   - each look is one sample, the share of its pages found resident; the
 *     samples add up, decaying by a quarter at each look, and populating is
 *     on while they average 3/4 or more.  A program that starts writing
 *     only the start of its blocks turns it off within two looks (blocks),
 *     one that writes its blocks whole turns it on at the first look, or
 *     after five when it was off; it then pays faults for an eighth of
 *     each block;
 *   - a watched block that goes to the shared cache, where a purge may
 *     release its pages, is looked at as it goes; one that went to its
 *     thread's cache keeps its pages resident until the look;
 *   - only blocks of up to twice the largest block a look found mostly
 *     written are populated: the samples say how the program writes the
 *     blocks it had, not the next one ten times their size.  mimalloc-bench's
 *     barnes wrote its first block (19 MiB) whole, and got its next three,
 *     of 64-250 MiB and mostly never written, populated: 486 MB of peak
 *     RSS against glibc's 57, and 1.37x glibc's time.
 * A look reads at most LOOK_CHUNKS x LOOK_PAGES pages, spread over the
 * watched part: a few microseconds against the faults a fresh block costs.
 *
 * VMAPALLOC_POPULATE=1 populates every fresh area, the program's own
 * mappings too; 0 none.
 *
 * Owns: the watched block, the decaying sums, the largest block proven
 * written.  Called by large.c (fresh carves of malloc blocks under auto;
 * never of the program's own mappings, which the kernel does not populate
 * either).
 */
#include "range_impl.h"

#define TAIL_MAX 64 /* pages left to fault, and watched, while populating */
#define LOOK_PAGES 256 /* one mincore call: a vector of 256 bytes on the stack */
#define LOOK_CHUNKS 4

/* The watched block: its address's page number above, its pages (at most
 * 2^20 of them are looked at) below; 0 for none. */
#define WATCH_PAGE_BITS 20
#define WATCH_PAGES ((1ull << WATCH_PAGE_BITS) - 1)
static uint64_t watched;
static uintptr_t watched_block; /* the start of the block watched */
static uint64_t watched_whole;  /* its pages, watched or populated */
static uint64_t proven;         /* pages of the largest block a look found mostly written */
static uint64_t looks, written; /* decaying sums: 256 a look, and its share written */
static bool populating;

/* Resident pages of [a, a + pages) in up to LOOK_CHUNKS windows spread over
 * it; *seen gets the pages looked at. */
static uint64_t look(uintptr_t a, uint64_t pages, uint64_t *seen)
{
	unsigned char vec[LOOK_PAGES];
	uint64_t chunks = (pages + LOOK_PAGES - 1) / LOOK_PAGES, resident = 0;
	uint64_t step = chunks > LOOK_CHUNKS ? chunks / LOOK_CHUNKS : 1;
	*seen = 0;
	for (uint64_t c = 0; c < chunks && *seen < LOOK_CHUNKS * LOOK_PAGES; c += step) {
		uint64_t first = c * LOOK_PAGES, n = pages - first < LOOK_PAGES ? pages - first : LOOK_PAGES;
		if (vmap_os_mincore((void *)(a + (first << VMAP_PAGE_SHIFT)), n << VMAP_PAGE_SHIFT,
				    vec) != 0)
			return 0;
		for (uint64_t i = 0; i < n; i++)
			resident += vec[i] & 1;
		*seen += n;
	}
	return resident;
}

/* Takes the watched block's measure, if one is watched. */
static void measure(void)
{
	uint64_t old = __atomic_exchange_n(&watched, 0, __ATOMIC_RELAXED);
	if (!old)
		return;
	uint64_t seen;
	uint64_t resident = look((uintptr_t)(old >> WATCH_PAGE_BITS) << VMAP_PAGE_SHIFT,
				 old & WATCH_PAGES, &seen);
	if (!seen)
		return;
	/* One look, one sample, whatever its size: the share of its pages
	 * found resident, in 1/256ths.  Racing updates may lose a look: an
	 * estimate either way. */
	uint64_t whole = __atomic_load_n(&watched_whole, __ATOMIC_RELAXED);
	if (4 * resident >= 3 * seen && whole > __atomic_load_n(&proven, __ATOMIC_RELAXED))
		__atomic_store_n(&proven, whole, __ATOMIC_RELAXED);
	uint64_t s = __atomic_load_n(&looks, __ATOMIC_RELAXED);
	uint64_t r = __atomic_load_n(&written, __ATOMIC_RELAXED);
	s = s - s / 4 + 256;
	r = r - r / 4 + resident * 256 / seen;
	__atomic_store_n(&looks, s, __ATOMIC_RELAXED);
	__atomic_store_n(&written, r, __ATOMIC_RELAXED);
	__atomic_store_n(&populating, 4 * r >= 3 * s, __ATOMIC_RELAXED);
}

uint64_t vmap_populate_auto(uintptr_t a, uint64_t pages)
{
	measure();
	uint64_t n = 0;
	if (__atomic_load_n(&populating, __ATOMIC_RELAXED) &&
	    pages <= 2 * __atomic_load_n(&proven, __ATOMIC_RELAXED)) {
		uint64_t tail = pages / 8 < TAIL_MAX ? pages / 8 : TAIL_MAX;
		n = pages - (tail ? tail : 1);
	}
	/* (Another thread's watch set meanwhile is replaced: one look less.) */
	uint64_t w = pages - n;
	__atomic_store_n(&watched_block, a, __ATOMIC_RELAXED);
	__atomic_store_n(&watched_whole, pages, __ATOMIC_RELAXED);
	__atomic_store_n(&watched,
			 ((uint64_t)(a + (n << VMAP_PAGE_SHIFT)) >> VMAP_PAGE_SHIFT << WATCH_PAGE_BITS) |
				 (w < WATCH_PAGES ? w : WATCH_PAGES),
			 __ATOMIC_RELAXED);
	return n;
}

void vmap_populate_freeing(uintptr_t a)
{
	if (__atomic_load_n(&watched_block, __ATOMIC_RELAXED) == a)
		measure();
}
