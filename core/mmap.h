/*
 * mmap.h — the program's own mmap family (mmap.c; mremap: mremap.c).
 * Results follow the OS seam: pointers are checked with vmap_os_is_err(),
 * integers are 0 or -errno.
 */
#ifndef VMAP_MMAP_H
#define VMAP_MMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

void *vmap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int vmap_munmap(void *addr, size_t len);
void *vmap_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
int vmap_mprotect(void *addr, size_t len, int prot);
int vmap_madvise(void *addr, size_t len, int advice);
int vmap_mincore(void *addr, size_t len, unsigned char *vec);
int vmap_mlock(const void *addr, size_t len, unsigned flags, bool two);
int vmap_munlock(const void *addr, size_t len);
int vmap_mseal(void *addr, size_t len, unsigned long flags);

/* The same, from a call that re-entered the allocator (alloc.h): no lock. */
void *vmap_mmap_reentered(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int vmap_munmap_reentered(void *addr, size_t len);
void *vmap_mremap_reentered(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);

#endif
