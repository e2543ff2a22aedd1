/*
 * unit.h — helpers shared by the unit tests (the tests/unit/ files).
 *
 * The unit tier drives the core directly: options, counters and the range
 * allocator are set up by hand (range_setup), with no preload and no facade.
 * Criterion runs every Test in its own forked process, so the core's globals
 * start from zero in each Test.
 */
#ifndef VMAP_UNIT_H
#define VMAP_UNIT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counter.h"
#include "options.h"
#include "os.h"
#include "range.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Parses a NULL-terminated list of "VMAPALLOC_X=v" strings into vmap_opt;
 * returns the number of problems reported. */
static inline int unit_parse(const char *const *env)
{
	return vmap_options_parse((char *const *)env, false);
}

/* Options from env (may be NULL), counters for 2 CPUs, the range allocator. */
static inline void range_setup(const char *const *env)
{
	static const char *const none[] = {NULL};
	cr_assert_eq(unit_parse(env ? env : none), 0, "test options must parse cleanly");
	vmap_counter_init(2);
	int rc = vmap_range_init();
	cr_assert_eq(rc, 0, "vmap_range_init failed: %d", rc);
	/* Set up, as the first large request sets it up: a served mmap
	 * (vmap_range_ready) must not set up a second arena over the first. */
	vmap_range_ok = true;
	__atomic_store_n(&vmap_range_state, VMAP_RANGE_DONE, __ATOMIC_RELEASE);
}

static inline int64_t ctr(enum vmap_stat s)
{
	return vmap_stat_read(s);
}

/* The page-table tag of the area or run starting at p. */
static inline uint64_t tag_of(const void *p)
{
	struct vmap_region *r = vmap_region_of((uintptr_t)p);
	cr_assert_not_null(r, "%p is outside every arena region", p);
	return __atomic_load_n(&vmap_pte_of(r, (uintptr_t)p)->tag, __ATOMIC_ACQUIRE);
}

/* A byte pattern that depends on the block and the offset. */
static inline unsigned char pat(uintptr_t seed, size_t off)
{
	uint64_t x = (seed ^ (off >> 12)) * 0x9e3779b97f4a7c15ull;
	return (unsigned char)((x >> 56) ^ off);
}

/* Writes the pattern to the first and last byte of every page of [p, p+n). */
static inline void fill(void *p, size_t n, uintptr_t seed)
{
	unsigned char *c = p;
	for (size_t off = 0; off < n; off += 4096) {
		c[off] = pat(seed, off);
		size_t last = off + 4095 < n ? off + 4095 : n - 1;
		c[last] = pat(seed, last);
	}
}

static inline bool check(const void *p, size_t n, uintptr_t seed)
{
	const unsigned char *c = p;
	for (size_t off = 0; off < n; off += 4096) {
		size_t last = off + 4095 < n ? off + 4095 : n - 1;
		if (c[off] != pat(seed, off) || c[last] != pat(seed, last))
			return false;
	}
	return true;
}

/* Sparse variant for big blocks: one byte per MiB and the last byte. */
static inline void mark(void *p, size_t n, uintptr_t seed)
{
	unsigned char *c = p;
	for (size_t off = 0; off < n; off += (size_t)1 << 20)
		c[off] = pat(seed, off);
	c[n - 1] = pat(seed, n - 1);
}

static inline bool marked(const void *p, size_t n, uintptr_t seed)
{
	const unsigned char *c = p;
	for (size_t off = 0; off < n; off += (size_t)1 << 20)
		if (c[off] != pat(seed, off))
			return false;
	return c[n - 1] == pat(seed, n - 1);
}

static inline bool all_zero(const void *p, size_t n)
{
	const uint64_t *w = p;
	for (size_t i = 0; i < n / 8; i++)
		if (w[i])
			return false;
	const unsigned char *c = p;
	for (size_t i = n / 8 * 8; i < n; i++)
		if (c[i])
			return false;
	return true;
}

/* Captures what is written to fd 2 between begin and end (at most cap-1
 * bytes; the writers here are raw write(2) calls, not stdio). */
struct capture {
	int saved;
	int rd;
};

static inline struct capture capture_begin(void)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	fflush(stderr);
	struct capture c = {dup(2), p[0]};
	cr_assert(c.saved >= 0);
	cr_assert(dup2(p[1], 2) == 2);
	close(p[1]);
	return c;
}

static inline size_t capture_end(struct capture c, char *buf, size_t cap)
{
	fflush(stderr);
	dup2(c.saved, 2); /* drops the last write end of the pipe */
	close(c.saved);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(c.rd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	close(c.rd);
	return n;
}

static inline unsigned count_lines(const char *s)
{
	unsigned n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

#endif
