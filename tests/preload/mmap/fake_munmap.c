/*
 * fake_munmap.c — a deliberately wrong preload: munmap returns 0 and unmaps
 * nothing.  The test 'mmap-diff-catches-fake' runs diff.sh with it in place
 * of libvmapalloc.so and must fail: proof that the differential harness sees
 * a wrong munmap (pages that should fault stay readable and writable).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <sys/mman.h>

__attribute__((visibility("default")))
int munmap(void *addr, size_t len)
{
    (void)addr;
    (void)len;
    return 0;
}
