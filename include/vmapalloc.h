/*
 * vmapalloc.h — the public API of vmapalloc.
 *
 * Everything here is optional: a program preloaded with libvmapalloc.so needs
 * none of it.  Programs that want to read the allocator's figures, purge now,
 * or print the report link with -lvmapalloc (pkg-config vmapalloc), or look
 * the functions up with dlsym() so that they still run without vmapalloc.
 */
#ifndef VMAPALLOC_H
#define VMAPALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMAPALLOC_VERSION_MAJOR 0
#define VMAPALLOC_VERSION_MINOR 1
#define VMAPALLOC_VERSION_PATCH 0
#define VMAPALLOC_VERSION_STRING "0.1.0"

/* Formats for vmapalloc_stats_print(). */
#define VMAPALLOC_FORMAT_TEXT 0
#define VMAPALLOC_FORMAT_JSON 1

/* The library's version string, e.g. "0.1.0". */
const char *vmapalloc_version(void);

/*
 * 1 if p lies inside one of vmapalloc's reserved regions (a block the range
 * allocator handed out, live or not), 0 otherwise (glibc's heap, the stack,
 * another mapping).  Cheap: one compare per region.
 */
int vmapalloc_owns(const void *p);

/*
 * Reads one statistic by the name it has in the report and the JSON
 * (for example "malloc_calls", "large_bytes_in_use", "purges").  Returns 0
 * and stores the exact value, or -1 when the name is unknown.
 */
int vmapalloc_counter_get(const char *name, uint64_t *value);

/* The name of the i-th statistic, or NULL past the end; for enumeration. */
const char *vmapalloc_counter_name(unsigned i);

/* Resets every peak statistic to its current value. */
void vmapalloc_reset_peaks(void);

/*
 * Hands every cached free area back to the system now (as malloc_trim does).
 * Returns the number of bytes released.
 */
size_t vmapalloc_purge(void);

/*
 * Writes the statistics report to fd in VMAPALLOC_FORMAT_TEXT or _JSON.
 * Never allocates.  Returns 0, or -1 with errno set if the write failed.
 */
int vmapalloc_stats_print(int fd, int format);

#ifdef __cplusplus
}
#endif

#endif /* VMAPALLOC_H */
