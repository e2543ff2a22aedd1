/*
 * shim.c — every libc-named symbol of libvmapalloc.so, and the public
 * vmapalloc_* API.  Nothing else: each function enters the core facade
 * (core/alloc.h) in one call.  The __libc_* names are aliases so that code
 * calling glibc's internal names directly still reaches vmapalloc.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc.h"
#include "counter.h"
#include "fast.h"
#include "profile.h"
#include "range.h"
#include "stats.h"
#include "vmapalloc.h"

#define EXPORT __attribute__((visibility("default")))
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))

/* malloc, free, calloc and the aligned calls of up to 16: the fast paths
 * inline (fast.h), the rest a jump away. */
EXPORT void *malloc(size_t size) { return vmap_fast_malloc(size); }
EXPORT void free(void *p) { vmap_fast_free(p); }
EXPORT void *calloc(size_t n, size_t size) { return vmap_fast_calloc(n, size); }
EXPORT void *realloc(void *p, size_t size) { return vmap_fast_realloc(p, size); }
EXPORT void *reallocarray(void *p, size_t n, size_t size) { return vmap_reallocarray(p, n, size); }
/* A general path for the fast one's misses: the pointer, or NULL with
 * errno ENOMEM (vmap_posix_memalign sets it). */
static void *posix_memalign_general(size_t align, size_t size)
{
	void *p;
	return vmap_posix_memalign(&p, align, size) ? NULL : p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
	if (!(align >= 8 && align <= 4096 && !(align & (align - 1)))) /* 8: sizeof(void *) */
		return vmap_posix_memalign(out, align, size);
	void *p = vmap_fast_aligned(align, size, posix_memalign_general);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}
EXPORT void *aligned_alloc(size_t align, size_t size)
{
	if (align && align <= 4096 && !(align & (align - 1)))
		return vmap_fast_aligned(align, size, vmap_aligned_alloc);
	return vmap_aligned_alloc(align, size);
}
EXPORT void *memalign(size_t align, size_t size)
{
	if (align <= 16) /* any alignment up to 16: glibc rounds it up to a power of two */
		return vmap_fast_pop_via(size, 0, false, vmap_memalign, align, size);
	if (align <= 4096 && !(align & (align - 1)))
		return vmap_fast_aligned(align, size, vmap_memalign);
	return vmap_memalign(align, size);
}
EXPORT void *valloc(size_t size) { return vmap_valloc(size); }
EXPORT void *pvalloc(size_t size) { return vmap_pvalloc(size); }
EXPORT size_t malloc_usable_size(void *p) { return vmap_usable_size(p); }
EXPORT void free_sized(void *p, size_t size)
{
	(void)size;
	vmap_free(p);
}
EXPORT void free_aligned_sized(void *p, size_t align, size_t size)
{
	(void)align;
	(void)size;
	vmap_free(p);
}
EXPORT void cfree(void *p) { vmap_free(p); }
EXPORT int malloc_trim(size_t pad) { return vmap_trim(pad); }
EXPORT int mallopt(int param, int value) { return vmap_mallopt(param, value); }
EXPORT struct mallinfo2 mallinfo2(void) { return vmap_mallinfo2(); }
EXPORT struct mallinfo mallinfo(void)
{
	struct mallinfo2 m = vmap_mallinfo2();
	struct mallinfo r;
#define CLAMP(x) ((int)((x) > INT32_MAX ? INT32_MAX : (x)))
	r.arena = CLAMP(m.arena);
	r.ordblks = CLAMP(m.ordblks);
	r.smblks = CLAMP(m.smblks);
	r.hblks = CLAMP(m.hblks);
	r.hblkhd = CLAMP(m.hblkhd);
	r.usmblks = CLAMP(m.usmblks);
	r.fsmblks = CLAMP(m.fsmblks);
	r.uordblks = CLAMP(m.uordblks);
	r.fordblks = CLAMP(m.fordblks);
	r.keepcost = CLAMP(m.keepcost);
#undef CLAMP
	return r;
}
EXPORT void malloc_stats(void) { vmap_malloc_stats(); }
EXPORT int malloc_info(int options, FILE *fp) { return vmap_malloc_info(options, fp); }

/* The aliases need not repeat glibc's declaration attributes (nothrow, leaf...). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmissing-attributes"
void *__libc_malloc(size_t size) ALIAS(malloc);
void __libc_free(void *p) ALIAS(free);
void *__libc_calloc(size_t n, size_t size) ALIAS(calloc);
void *__libc_realloc(void *p, size_t size) ALIAS(realloc);
void *__libc_memalign(size_t align, size_t size) ALIAS(memalign);
void *__libc_valloc(size_t size) ALIAS(valloc);
void *__libc_pvalloc(size_t size) ALIAS(pvalloc);
int __posix_memalign(void **out, size_t align, size_t size) ALIAS(posix_memalign);
#pragma GCC diagnostic pop

/* ---- public API (vmapalloc.h) ------------------------------------------ */

EXPORT const char *vmapalloc_version(void) { return VMAPALLOC_VERSION_STRING; }

EXPORT int vmapalloc_owns(const void *p)
{
	vmap_init();
	return vmap_range_owns(p);
}

EXPORT int vmapalloc_counter_get(const char *name, uint64_t *value)
{
	vmap_init();
	int i = name ? vmap_stat_lookup(name) : -1;
	if (i < 0)
		return -1;
	if (value)
		*value = vmap_stat_value((unsigned)i);
	return 0;
}

EXPORT const char *vmapalloc_counter_name(unsigned i) { return vmap_stat_name(i); }

EXPORT void vmapalloc_reset_peaks(void)
{
	vmap_init();
	vmap_stat_reset_peak();
	vmap_profile_reset_peaks();
}

EXPORT size_t vmapalloc_purge(void)
{
	vmap_init();
	return vmap_range_trim();
}

EXPORT int vmapalloc_stats_print(int fd, int format)
{
	vmap_init();
	int rc = fd < 0 ? -EBADF : vmap_stats_write(fd, format);
	if (rc < 0) {
		errno = -rc;
		return -1;
	}
	return 0;
}

/* A constructor as well as lazy init: programs that never allocate still get
 * their options checked (and VMAPALLOC_HELP answered); with no option set and
 * nothing to say, init waits for the first call (alloc.c vmap_init_at_start). */
__attribute__((constructor)) static void vmapalloc_ctor(void)
{
	vmap_init_at_start();
	vmap_backend_start(); /* loads mimalloc if VMAPALLOC_BACKEND=mimalloc: not inside malloc */
	if (vmap_profile_start()) /* loads libunwind if VMAPALLOC_PROFILE=1: not inside malloc */
		vmap_fast_paths_off();
}
__attribute__((destructor)) static void vmapalloc_dtor(void) { vmap_at_exit(); }
