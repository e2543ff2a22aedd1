/*
 * alloc.c — the malloc family: glibc's malloc contracts on top of two
 * allocators.
 *
 *   size <= VMAPALLOC_SMALL_MAX, alignment < page  -> small backend (glibc,
 *                                                     the builtin slabs or
 *                                                     mimalloc)
 *   larger, page-aligned or page-granular requests -> range allocator
 *   pointer outside every arena region             -> glibc (its own, or
 *                                                     allocated before us,
 *                                                     or none: glibc stops
 *                                                     the program as it
 *                                                     would without us)
 *
 * Start-up and mode state are init.c's, fork handlers fork.c's, parked frees
 * and escape blocks escape.c's.
 *
 * Invariants:
 *  - Every entry point calls enter() first (alloc_impl.h): init runs on the
 *    first call from any entry point, a call during init goes to glibc.
 *  - errno is preserved by free, and set to ENOMEM/EINVAL exactly where
 *    glibc sets it.
 *  - A request the range allocator cannot serve falls back to glibc before
 *    failing: nothing the system could have served is refused.
 */
#include "alloc_impl.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <gnu/lib-names.h>

#include "background.h"
#include "cache.h"
#include "counter.h"
#include "fast.h"
#include "fmt.h"
#include "options.h"
#include "profile.h"
#include "range.h"
#include "slab.h"
#include "stats.h"
#include "timeline.h"

/*
 * The fold of this thread's counts, every VMAP_LOCAL_BATCH (128) counted
 * calls, is also where any call -- small or large, glibc's or the slabs' --
 * looks at the clock: the age purge runs there once it is due, so that a
 * program that freed large blocks and then makes only small calls still
 * gives them back after the delay, where glibc's heap is trimmed after
 * auto's switch (init.c), and where the timeline takes its samples
 * (timeline.c).  Entry points only, with no lock held.
 */
__attribute__((noinline)) void vmap_fold_and_tick(void)
{
	vmap_counter_flush_local();
	bool timeline = __atomic_load_n(&vmap_timeline_next_ns, __ATOMIC_RELAXED) != UINT64_MAX;
	if ((vmap_shards || timeline) && !vmap_reentered()) {
		vmap_depth_enter();
		uint64_t now = vmap_os_now_ns();
		if (vmap_shards) {
			vmap_purge_tick(now);
			vmap_auto_trim_tick(now);
		}
		vmap_timeline_tick(now);
		vmap_depth_leave();
	}
}

/* ---- small backend ------------------------------------------------------ */

static void *small_refused(size_t size);

/* BACKEND=auto: one more small request of this thread's (init.c). */
static inline void auto_count(void)
{
	if (__builtin_expect(++vmap_tls_small_count == __atomic_load_n(&vmap_auto_step,
									 __ATOMIC_RELAXED), 0)) {
		vmap_tls_small_count = 0;
		vmap_auto_add();
	}
}

/* Whether the builtin slabs serve a small request of this size now (0 =
 * they are off: only the size-0 test then needs the second compare). */
static inline bool slab_serves(size_t size)
{
	size_t limit = __atomic_load_n(&vmap_slab_limit, __ATOMIC_RELAXED);
	return size - 1 < limit || (size == 0 && limit);
}

static inline void *small_malloc(size_t size)
{
	if (slab_serves(size) && !vmap_reentered()) {
		void *p = vmap_slab_malloc(size);
		if (__builtin_expect(p != NULL, 1)) {
			count(VMAP_STAT_small_slab_allocs);
			return p;
		}
	}
	void *p; /* BACKEND=mimalloc once loaded (backend_mimalloc.c); glibc if it refuses */
	if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE) &&
	    (p = VMAP_MI_CALL(vmap_mi.malloc(vmap_mi_size(size)), size, 0))) {
		count(VMAP_STAT_small_mimalloc_allocs);
		return p;
	}
	p = vmap_libc.malloc(size); /* or no slab could be had */
	if (__builtin_expect(p != NULL, 1)) {
		count(VMAP_STAT_small_glibc_allocs);
		return p;
	}
	return small_refused(size);
}

static void *small_memalign(size_t align, size_t size)
{
	void *p;
	if (slab_serves(size) && !vmap_reentered()) {
		p = vmap_slab_memalign(align, size);
		if (p) {
			count(VMAP_STAT_small_slab_allocs);
			return p;
		}
	}
	if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE) && (p = vmap_mi_memalign(size, align))) {
		count(VMAP_STAT_small_mimalloc_allocs);
		return p;
	}
	p = vmap_libc.memalign(align, size);
	if (p)
		count(VMAP_STAT_small_glibc_allocs);
	return p;
}

/* A small block that is neither the arena's nor foreign: mimalloc's if its
 * range or segment map says so (only once mimalloc is loaded), else glibc's. */
static inline void small_free(void *p)
{
	if (vmap_mi_owns(p)) {
		count(VMAP_STAT_small_mimalloc_frees);
		vmap_mi.free(p);
		return;
	}
	count(VMAP_STAT_small_glibc_frees);
	if (__builtin_expect(__atomic_load_n(&vmap_auto_switched, __ATOMIC_RELAXED), 0))
		vmap_auto_note_free(p);
	vmap_libc.free(p);
}

/* The profiler takes locks of its own: its hooks are bracketed like the range
 * path, and skipped when re-entered (that block goes unrecorded).  The
 * allocation hook is a macro, so that it stays inlined in the entry point:
 * it keys its stack cache on the entry point's return address. */
#define PROF_ALLOC(p, size, kind)                                              \
	do {                                                                   \
		if (__builtin_expect(vmap_profile_on, 0) && !vmap_reentered()) { \
			vmap_depth_enter();                                  \
			vmap_profile_alloc(p, size, kind);                     \
			vmap_depth_leave();                                    \
		}                                                              \
	} while (0)
/* Frees need no call site: out of line, off the free path. */
__attribute__((noinline, cold)) static void prof_free(void *p, int owned)
{
	if (vmap_reentered())
		return;
	vmap_depth_enter();
	if (owned < 0)
		vmap_profile_free(p);
	else
		vmap_profile_free_known(p, owned);
	vmap_depth_leave();
}

/* ---- the malloc family ---------------------------------------------------- */

/* glibc refused a small block: its heap cannot grow.  Typically RLIMIT_AS was
 * lowered below VmSize, which holds the arena's reservation, and the kernel
 * now refuses every new mapping while the arena still has room under the
 * limit: the arena serves it, one page and its guard.  free, realloc
 * and malloc_usable_size find it by its address, like any arena block. */
__attribute__((noinline, cold)) static void *small_refused(size_t size)
{
	if (!vmap_range_enabled() || vmap_reentered())
		return NULL;
	bool zero;
	vmap_depth_enter();
	void *p = vmap_range_alloc(size ? size : 1, SMALL_ALIGN, &zero);
	vmap_depth_leave();
	/* Or, under a tight RLIMIT_AS, glibc again once the arena has lent the
	 * kernel free chunks (tight.c). */
	return p || !vmap_range_lend(size + VMAP_PAGE) ? p : vmap_libc.malloc(size);
}

static bool is_large(size_t size)
{
	return size > __atomic_load_n(&vmap_large_above, __ATOMIC_RELAXED) && vmap_range_ready();
}

/* Range allocation with glibc as the fallback; NULL only when both refuse.
 * Re-entered: an escape block or NULL (glibc's locks may be this thread's). */
__attribute__((always_inline)) static inline void *large_alloc(size_t size, size_t align,
								      bool *zero)
{
	if (vmap_reentered()) {
		*zero = true; /* fresh from the kernel */
		return vmap_escape_alloc(size, align);
	}
	vmap_depth_enter();
	void *p = vmap_range_alloc(size, align, zero);
	vmap_depth_leave();
	if (p)
		return p;
	*zero = false;
	if (align <= SMALL_ALIGN)
		return small_malloc(size);
	p = vmap_libc.memalign(align, size);
	if (!p && vmap_range_lend(size + align))
		p = vmap_libc.memalign(align, size);
	/* glibc maps size + align to trim: under a tight RLIMIT_AS an escape
	 * block may still fit, placed at an aligned address (escape.c). */
	return p || align <= VMAP_PAGE ? p : vmap_escape_alloc(size, align);
}

__attribute__((noinline)) void *vmap_malloc_general(size_t size)
{
	enter();
	/* The builtin backend's objects first: the common case, in a few tests. */
	if (slab_serves(size) && !vmap_reentered()) {
		void *p = vmap_slab_malloc(size);
		if (__builtin_expect(p != NULL, 1)) {
			count3(VMAP_STAT_malloc_calls, VMAP_STAT_small_allocs,
			       VMAP_STAT_small_slab_allocs);
			PROF_ALLOC(p, size, VMAP_PROFILE_SMALL);
			return p;
		}
	}
	count(VMAP_STAT_malloc_calls);
	void *p;
	if (!is_large(size)) {
		count(VMAP_STAT_small_allocs);
		auto_count();
		p = small_malloc(size);
	} else {
		bool zero;
		p = size > PTRDIFF_MAX ? NULL : large_alloc(size, SMALL_ALIGN, &zero);
	}
	if (!p)
		errno = ENOMEM;
	else
		PROF_ALLOC(p, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
	return p;
}

/* An arena block freed from a handler that interrupted a range section: done
 * when the interrupted call leaves.  Slots full (eight frees from handlers
 * within one call): the block is leaked, said once, rather than deadlock. */
__attribute__((noinline, cold)) static void free_reentered(void *p)
{
	static bool said;
	if (vmap_defer(p, 0))
		return;
	if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		vmap_say("free() re-entered from a signal handler too often within one call: ",
			 "a large block is leaked", NULL);
}

/* The purger thread (its start) and the timeline (a tick every few large
 * frees: large.c folds its own figures, so the facade's fold rarely follows
 * a large call) want large frees; vmap_large_free_hooks (init.c) says
 * whether: one branch per free for a process with neither. */
__attribute__((noinline, cold)) static void large_free_hooks(void)
{
	if (vmap_opt.background)
		vmap_background_kick();
	if (vmap_timeline_count() && !vmap_reentered()) {
		vmap_depth_enter();
		vmap_timeline_tick(vmap_os_now_ns());
		vmap_depth_leave();
	}
}

static void free_large(void *p)
{
	if (vmap_reentered()) {
		free_reentered(p);
		return;
	}
	vmap_depth_enter();
	vmap_range_free(p, "free");
	vmap_depth_leave();
	if (__builtin_expect(vmap_large_free_hooks, 0))
		large_free_hooks();
}

__attribute__((noinline)) void vmap_free_general(void *p)
{
	enter();
	/* errno survives: the range path makes only raw system calls, which
	 * never touch it, and glibc's free preserves it (since 2.33). */
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	struct vmap_slab *sl = r ? vmap_slab_of(r, (uintptr_t)p) : NULL;
	if (sl) {
		if (__builtin_expect(vmap_profile_on, 0))
			prof_free(p, 0);
		count3(VMAP_STAT_free_calls, VMAP_STAT_small_frees, VMAP_STAT_small_slab_frees);
		if (vmap_reentered())
			free_reentered(p);
		else
			vmap_slab_free(sl, p, "free");
		return;
	}
	count(VMAP_STAT_free_calls);
	/* An escape block is looked for first: the kernel may place one
	 * inside the arena, in the hole a realloc's move leaves in it until
	 * mapped again (move.c); another thread's signal handler's block
	 * landed there, and its free was taken for an arena block's. */
	bool owned = r != NULL && !escape_of(p);
	if (__builtin_expect(vmap_profile_on, 0))
		prof_free(p, owned);
	if (owned) {
		free_large(p);
	} else if (__builtin_expect(__atomic_load_n(&vmap_escape_live, __ATOMIC_RELAXED) != 0, 0) &&
		   vmap_free_escape(p)) {
		return;
	} else {
		/* mimalloc's block, glibc's, or no block at all (on the stack, in
		 * static data): glibc's free stops the program on a pointer it
		 * does not know, as it would without vmapalloc. */
		count(VMAP_STAT_small_frees);
		small_free(p);
	}
}

void *vmap_calloc(size_t n, size_t size)
{
	enter();
	count(VMAP_STAT_calloc_calls);
	size_t total;
	if (__builtin_mul_overflow(n, size, &total) || total > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (!is_large(total)) {
		count(VMAP_STAT_small_allocs);
		auto_count();
		void *p;
		if (slab_serves(total)) {
			p = small_malloc(total);
			if (p)
				memset(p, 0, total);
		} else if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE) &&
			   (p = VMAP_MI_CALL(vmap_mi.calloc(1, vmap_mi_size(total)), total, 0))) {
			count(VMAP_STAT_small_mimalloc_allocs);
		} else {
			p = vmap_libc.calloc(n, size);
			if (p)
				count(VMAP_STAT_small_glibc_allocs);
		}
		if (!p)
			errno = ENOMEM;
		else
			PROF_ALLOC(p, total, VMAP_PROFILE_SMALL);
		return p;
	}
	bool zero;
	void *p = large_alloc(total, SMALL_ALIGN, &zero);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	if (zero)
		count(VMAP_STAT_calloc_zero_skipped);
	else
		memset(p, 0, total);
	PROF_ALLOC(p, total, VMAP_PROFILE_LARGE);
	return p;
}

static size_t usable(void *p)
{
	struct vmap_slab *sl = vmap_slab_at((uintptr_t)p);
	if (sl)
		return vmap_slab_usable(sl, p, "malloc_usable_size", false);
	struct escape *e = escape_of(p); /* (first: one may sit in the arena, free above) */
	if (e)
		return e->len;
	if (vmap_range_owns(p))
		return vmap_range_usable(p, "malloc_usable_size");
	if (vmap_mi_owns(p))
		return vmap_mi.usable_size(p);
	return vmap_libc.usable_size(p);
}

/* Moves a block to a new allocation of size bytes by copying.  A small block
 * that grows takes a quarter more room (if that stays small): a string grown
 * a few bytes at a time then moves once per quarter of growth, not at every
 * size class (realloc chains of 8 bytes to 4 KiB: 40% fewer bytes copied). */
static void *realloc_copy(void *p, size_t old, size_t size)
{
	void *q;
	if (!is_large(size)) {
		size_t roomy = old + old / 4;
		q = small_malloc(size > old && roomy > size && !is_large(roomy) ? roomy : size);
	} else {
		bool zero;
		q = large_alloc(size, SMALL_ALIGN, &zero);
	}
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	count(VMAP_STAT_realloc_copied);
	vmap_free_general(p);
	return q;
}

static bool realloc_resize(void *p, size_t size, bool shrink)
{
	vmap_depth_enter();
	bool ok = shrink ? vmap_range_shrink(p, size) : vmap_range_resize(p, size);
	vmap_depth_leave();
	return ok;
}

void *vmap_realloc(void *p, size_t size)
{
	if (!p)
		return vmap_malloc_general(size);
	enter();
	count(VMAP_STAT_realloc_calls);
	if (size == 0) {
		/* glibc: realloc(p, 0) frees p and returns NULL. */
		vmap_free_general(p);
		return NULL;
	}
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	if (!is_large(size))
		auto_count();
	/* Before it can move and its address be reused. */
	if (__builtin_expect(vmap_profile_on, 0))
		prof_free(p, -1);
	void *q;
	struct escape *e;
	struct vmap_slab *sl = vmap_slab_at((uintptr_t)p);
	if (sl) {
		/* Kept while it fits and at least half of it stays used. */
		size_t old = vmap_slab_usable(sl, p, "realloc", true);
		q = size <= old && size >= old / 2 ? p : realloc_copy(p, old, size);
	} else if ((e = escape_of(p))) { /* (first: one may sit in the arena, free above) */
		q = realloc_copy(p, e->len, size);
	} else if (!vmap_range_owns(p)) {
		/* mimalloc's or glibc's block (or none: glibc stops the program):
		 * its owner resizes it while it stays small; a large one is
		 * copied into the arena. */
		bool mi = vmap_mi_owns(p);
		if (!is_large(size)) {
			q = mi ? VMAP_MI_CALL(vmap_mi.realloc(p, vmap_mi_size(size)), size, 0)
			       : vmap_libc.realloc(p, size);
		} else {
			q = realloc_copy(p, mi ? vmap_mi.usable_size(p) : vmap_libc.usable_size(p),
					 size);
			if (!q && !mi) /* a tight RLIMIT_AS: glibc's mremap needs only the growth */
				q = vmap_libc.realloc(p, size);
		}
	} else {
		size_t old = vmap_range_usable(p, "realloc");
		if (!is_large(size) || (size <= old / 2 && old - size >= 64 * VMAP_PAGE) ||
		    vmap_reentered()) {
			/* Shrinking far: copying the kept part is cheaper than keeping
			 * the whole area resident.  Re-entered: a copy into an escape
			 * block (or glibc's), the old block's free deferred. */
			q = realloc_copy(p, old, size);
		} else if (size <= old || realloc_resize(p, size, false)) {
			if (size > old)
				count(VMAP_STAT_realloc_in_place);
			else /* (a tail of 4 pages or more goes back: move.c) */
				realloc_resize(p, size, true);
			q = p;
		} else {
			bool moved;
			vmap_depth_enter();
			q = vmap_range_move(p, size, &moved);
			if (q && !moved) {
				memcpy(q, p, old);
				count(VMAP_STAT_realloc_copied);
				vmap_range_free_outgrown(p);
			}
			vmap_depth_leave();
			if (!q)
				q = realloc_copy(p, old, size); /* glibc as the last resort */
		}
	}
	if (!q)
		errno = ENOMEM;
	else
		PROF_ALLOC(q, size, is_large(size) ? VMAP_PROFILE_LARGE : VMAP_PROFILE_SMALL);
	return q;
}

void *vmap_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return vmap_realloc(p, total);
}

/* align: a power of two. */
static void *aligned(size_t align, size_t size)
{
	enter();
	count(VMAP_STAT_memalign_calls);
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	void *p;
	if (align <= SMALL_ALIGN && !is_large(size)) {
		count(VMAP_STAT_small_allocs);
		auto_count();
		p = small_malloc(size);
	} else if ((align < VMAP_PAGE || (align == VMAP_PAGE && slab_serves(size))) &&
		   !is_large(size)) { /* a page: from whole-page classes if slabs serve */
		count(VMAP_STAT_small_allocs);
		auto_count();
		p = small_memalign(align, size);
	} else if (vmap_range_ready()) {
		bool zero;
		p = large_alloc(size, align, &zero);
	} else {
		p = vmap_libc.memalign(align, size);
	}
	if (!p)
		errno = ENOMEM;
	else
		PROF_ALLOC(p, size, VMAP_PROFILE_KIND(p));
	return p;
}

static bool pow2(size_t x)
{
	return x && !(x & (x - 1));
}

int vmap_posix_memalign(void **out, size_t align, size_t size)
{
	if (!pow2(align) || align % sizeof(void *) != 0)
		return EINVAL;
	/* errno: ENOMEM on failure, as glibc's sets it (the return value says
	 * so too; programs check both); untouched on success. */
	int saved = errno;
	void *p = aligned(align, size);
	if (!p) {
		errno = ENOMEM;
		return ENOMEM;
	}
	errno = saved;
	*out = p;
	return 0;
}

void *vmap_aligned_alloc(size_t align, size_t size)
{
	/* Any size (C17, DR 460).  The alignment: as the running glibc does it
	 * — from 2.38 a power of two or EINVAL (C17), before that memalign's
	 * rounding up — so that a program behaves as it did without vmapalloc. */
	enter();
	if (!pow2(align) && vmap_glibc_at_least(2, 38)) { /* asked only here: rare */
		errno = EINVAL;
		return NULL;
	}
	return vmap_memalign(align, size);
}

void *vmap_memalign(size_t align, size_t size)
{
	/* glibc: alignments are rounded up to a power of two; absurd ones fail. */
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align < SMALL_ALIGN)
		align = SMALL_ALIGN;
	if (!pow2(align))
		align = (size_t)1 << (64 - __builtin_clzll(align));
	return aligned(align, size);
}

void *vmap_valloc(size_t size)
{
	return aligned(VMAP_PAGE, size);
}

void *vmap_pvalloc(size_t size)
{
	size_t rounded;
	if (__builtin_add_overflow(size, VMAP_PAGE - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	rounded &= ~(VMAP_PAGE - 1);
	return aligned(VMAP_PAGE, rounded ? rounded : VMAP_PAGE);
}

size_t vmap_usable_size(void *p)
{
	if (!p)
		return 0;
	enter();
	return usable(p);
}

int vmap_trim(size_t pad)
{
	enter();
	size_t released = 0;
	if (!vmap_reentered()) {
		vmap_depth_enter();
		vmap_slab_trim();
		vmap_cache_trim();
		released = vmap_range_trim();
		vmap_depth_leave();
	}
	if (__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE))
		vmap_mi.collect(true); /* mimalloc's free pages back to the system */
	int glibc = vmap_libc.trim(pad);
	return released > 0 || glibc;
}

int vmap_mallopt(int param, int value)
{
	enter();
	return vmap_libc.mallopt(param, value);
}

struct mallinfo2 vmap_mallinfo2(void)
{
	enter();
	struct mallinfo2 mi = vmap_libc.mallinfo2();
	/* Large blocks are reported the way glibc reports its mmapped chunks. */
	size_t live = (size_t)vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	size_t cached = (size_t)vmap_stat_read(VMAP_STAT_cached_bytes);
	mi.hblks += (size_t)vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	mi.hblkhd += live + cached;
	mi.uordblks += live;
	mi.fordblks += cached;
	mi.keepcost += cached;
	/* The builtin slabs as glibc reports its heap: in use and free. */
	uint64_t slab_used, slab_rest;
	vmap_slab_usage(&slab_used, &slab_rest);
	mi.arena += slab_used + slab_rest;
	mi.uordblks += slab_used;
	mi.fordblks += slab_rest;
	uint64_t mi_now, mi_peak; /* mimalloc's committed memory: its heap, all in use */
	vmap_mimalloc_held(&mi_now, &mi_peak);
	mi.arena += mi_now;
	mi.uordblks += mi_now;
	return mi;
}

void vmap_malloc_stats(void)
{
	enter();
	vmap_stats_write(2, VMAP_FORMAT_TEXT);
}

int vmap_malloc_info(int options, FILE *fp)
{
	enter();
	if (options != 0 || !fp) {
		errno = EINVAL;
		return -1;
	}
	char buf[4096];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof buf, buf, 0};
	vmap_stats_xml(&b);
	/* Looked up on use, not imported: an import costs every process a
	 * symbol look-up at load. */
	size_t (*fwrite_fn)(const void *, size_t, size_t, FILE *) =
		(__typeof__(fwrite_fn))vmap_elf_symbol(LIBC_SO, "fwrite");
	if (!fwrite_fn) {
		errno = ENOSYS;
		return -1;
	}
	return fwrite_fn(buf, 1, b.len, fp) == b.len ? 0 : -1;
}
