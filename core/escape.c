/*
 * escape.c — what re-entered calls leave for later and get instead: the
 * drain of frees parked by re-entered calls, and the escape blocks (mapped
 * straight from the kernel, outside both allocators) that serve large
 * requests made while re-entered, and aligned requests that neither the
 * arena nor glibc could place (alloc.c large_alloc).
 */
#include "alloc_impl.h"

#include <errno.h>
#include <sys/mman.h>

#include "mmap.h"
#include "os.h"
#include "profile.h"
#include "range.h"
#include "slab.h"

/* ---- re-entry: signal handlers and fork handlers --------------------------- */

/* One parked free (len 0) or munmap, done at depth 0 (thread.c). */
void vmap_drain_one(uintptr_t a, size_t len)
{
	struct vmap_slab *sl = len ? NULL : vmap_slab_at(a);
	if (len) {
		vmap_munmap((void *)a, len);
	} else if (sl) {
		vmap_slab_free(sl, (void *)a, "free");
	} else {
		if (__builtin_expect(vmap_profile_on, 0))
			vmap_profile_free_known((void *)a, true);
		vmap_range_free((void *)a, "free");
	}
}

/* ---- escape blocks (alloc_impl.h) ----------------------------------------- */

#define ESCAPE_SLOTS 64
#define ESCAPE_CLAIMED 1 /* never a block address: those are page-aligned */
static struct escape escapes[ESCAPE_SLOTS];
unsigned vmap_escape_live VMAP_HOT; /* claimed slots */

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define ALIGNED_TRIES 8

/*
 * len bytes at an align-aligned address, without mapping len + align first
 * as the trimmed over-map does (and glibc's memalign): under a tight
 * RLIMIT_AS those align bytes can be what is missing (a 1 GiB-aligned block
 * under a 2 GiB limit).  The kernel's own place for len, rounded down to the
 * alignment, then up to ALIGNED_TRIES lower aligned addresses, each asked
 * for with MAP_FIXED_NOREPLACE (a kernel before 4.17 takes it for a hint:
 * a mapping elsewhere is given back).
 */
static void *map_aligned_exact(size_t len, size_t align)
{
	const int rw = PROT_READ | PROT_WRITE, anon = MAP_PRIVATE | MAP_ANONYMOUS;
	void *m = vmap_os_mmap(NULL, len, rw, anon, -1, 0);
	if (vmap_os_is_err(m) || !((uintptr_t)m & (align - 1)))
		return m;
	vmap_os_munmap(m, len);
	uintptr_t a = (uintptr_t)m & ~(uintptr_t)(align - 1);
	for (int i = 0; i < ALIGNED_TRIES && a; i++, a -= align) {
		m = vmap_os_mmap((void *)a, len, rw, anon | MAP_FIXED_NOREPLACE, -1, 0);
		if ((uintptr_t)m == a)
			return m;
		if (!vmap_os_is_err(m))
			vmap_os_munmap(m, len);
		if (a < align)
			break;
	}
	return (void *)(intptr_t)-ENOMEM;
}

__attribute__((noinline, cold)) void *vmap_escape_alloc(size_t size, size_t align)
{
	size_t len = (size + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t extra = align > VMAP_PAGE ? align : 0; /* mapped, then trimmed */
	if (len < size || len + extra < len)
		return NULL;
	__atomic_fetch_add(&vmap_escape_live, 1, __ATOMIC_RELAXED);
	struct escape *e = NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS && !e; i++) {
		uintptr_t z = 0;
		if (__atomic_compare_exchange_n(&escapes[i].a, &z, ESCAPE_CLAIMED, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			e = &escapes[i];
	}
	void *m = e ? vmap_os_mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
		    : NULL;
	if (e && extra && vmap_os_is_err(m)) {
		m = map_aligned_exact(len, align);
		extra = 0; /* nothing to trim */
	}
	if (!e || vmap_os_is_err(m)) {
		if (e)
			__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&vmap_escape_live, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	uintptr_t a = (uintptr_t)m;
	if (extra) {
		uintptr_t b = (a + align - 1) & ~(uintptr_t)(align - 1);
		if (b > a)
			vmap_os_munmap(m, b - a);
		if (a + extra > b)
			vmap_os_munmap((void *)(b + len), a + extra - b);
		a = b;
	}
	e->len = len;
	__atomic_store_n(&e->a, a, __ATOMIC_RELEASE);
	return (void *)a;
}

__attribute__((noinline, cold)) struct escape *vmap_escape_find(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	if (!a || (a & (VMAP_PAGE - 1)))
		return NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS; i++)
		if (__atomic_load_n(&escapes[i].a, __ATOMIC_ACQUIRE) == a)
			return &escapes[i];
	return NULL;
}

static void escape_free(struct escape *e)
{
	/* The slot is emptied before the munmap: once the range is unmapped,
	 * another thread's escape block may get the same address, and a stale
	 * slot holding it would be found (and freed) in its place. */
	void *a = (void *)e->a;
	size_t len = e->len;
	__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
	vmap_os_munmap(a, len);
	__atomic_fetch_sub(&vmap_escape_live, 1, __ATOMIC_RELAXED);
}

__attribute__((noinline, cold)) bool vmap_free_escape(void *p)
{
	struct escape *e = vmap_escape_find(p);
	if (e)
		escape_free(e);
	return e != NULL;
}
