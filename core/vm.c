/*
 * vm.c — page-state changes of arena pages: the guard page of each area
 * (VMAPALLOC_GUARD=1), guard markers (MADV_GUARD_INSTALL, probed once; a
 * PROT_NONE mapping on kernels without them) and taking them off again.
 */
#include "range_impl.h"

/* VMAPALLOC_GUARD=1: the guard page of every malloc area traps.  Installed
 * when an area is carved, removed when its pages go back to the free runs
 * (pools and thread caches keep areas whole, marker included). */
bool vmap_guard_on;
static int vmap_guard_markers_state; /* 0 not probed yet, 1 MADV_GUARD_INSTALL works, -1 not */

void vmap_guard_page(uintptr_t area, uint64_t pages, int advice)
{
	if (vmap_guard_on)
		vmap_os_madvise((void *)(area + ((pages - 1) << VMAP_PAGE_SHIFT)), VMAP_PAGE, advice);
}

bool vmap_range_guard_on(void)
{
	return vmap_guard_on;
}

/* Makes lazily unmapped pages usable again (contents: stale). */
/* When the call that makes them usable fails (ENOMEM: the kernel could not
 * split a VMA, or an injected fault, rel-strace-inject), a fresh mapping
 * over them does it (zero-filled: every caller zeroes or wants zero); the
 * pages were handed out faulting before. */
int vmap_unprotect(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	int rc = vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE);
	if (rc)
		rc = vmap_os_map_fresh((void *)a, len);
	return rc;
}

/* Can this kernel mark pages as faulting without splitting the VMA
 * (MADV_GUARD_INSTALL, Linux >= 6.13)?  Asked of the kernel the first
 * time it matters (VMAPALLOC_GUARD, or the program's first munmap of served
 * memory), so a process that never needs it makes no system call for it. */
bool vmap_guard_markers(void)
{
	int st = __atomic_load_n(&vmap_guard_markers_state, __ATOMIC_RELAXED);
	if (__builtin_expect(st != 0, 1))
		return st > 0;
	/* The kernel checks the advice before the range: an empty range at 0
	 * tells a known advice (0) from an unknown one (EINVAL). */
	st = vmap_os_madvise(NULL, 0, MADV_GUARD_INSTALL) == 0 ? 1 : -1;
	__atomic_store_n(&vmap_guard_markers_state, st, __ATOMIC_RELAXED);
	return st > 0;
}

/* Makes guarded pages (munmap()ed by the program) usable again: zero-filled.
 * 0, or -errno: they may still fault (on a kernel without guard markers, at
 * vm.max_map_count neither mprotect nor a fresh mapping can split the VMA). */
int vmap_unguard(uintptr_t a, uint64_t pages)
{
	size_t len = (size_t)pages << VMAP_PAGE_SHIFT;
	if (!(vmap_guard_markers() ? vmap_os_madvise((void *)a, len, MADV_GUARD_REMOVE)
				   : vmap_os_mprotect((void *)a, len, PROT_READ | PROT_WRITE)))
		return 0;
	return vmap_os_map_fresh((void *)a, len);
}

