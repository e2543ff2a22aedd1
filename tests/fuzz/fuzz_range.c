/*
 * fuzz_range.c — libFuzzer target: random byte strings as sequences of
 * range-allocator operations, checked against a shadow model.
 *
 * The core is linked directly (its sources compiled into the fuzzer by
 * tests/fuzz/build.sh with clang, -DVMAP_DEBUG=1: every vmap_range_alloc and
 * vmap_range_free also runs the slow model check vmap_range_check(), and this
 * target runs it after the other operations too).  Initialisation is the unit
 * tier's: vmap_options_parse (RESERVE=1G, SHARDS=2, LAZY_MAX=32M,
 * PURGE_DELAY_MS=1; any VMAPALLOC_* variable in the fuzzer's environment is
 * applied on top, which is how tests/fuzz/run.sh runs other configurations),
 * vmap_counter_init, vmap_range_init, vmap_cache_init.
 *
 * Input: a sequence of operations, each an opcode byte followed by its
 * argument bytes (missing bytes read as 0):
 *
 *   alloc  slot sizeclass size24 align   vmap_range_alloc into an empty slot
 *   free   slot                           vmap_range_free
 *   resize slot mode size24               vmap_range_resize (grow or shrink)
 *   move   slot size24                    vmap_range_move to a larger size
 *                                         (moved: p is gone; else copy + free,
 *                                         as alloc.c's realloc does)
 *   purge  mode delta                     purge all / pressure / purge_maybe
 *   write  slot                           a new pattern over the whole block
 *   verify slot                           check a block's pattern
 *   cpu    n                              pin this thread to CPU n (shard)
 *   trim                                  vmap_cache_trim (drain this cache)
 *   query  slot                           usable size, ownership of both ends
 *
 * Shadow model, checked on every operation: a slot table (address, requested
 * size, usable size, pattern seed).  Live blocks never overlap (address
 * ranges), every block keeps its pattern (sampled at 3 offsets per page), the
 * usable size covers the request and matches vmap_range_usable, alignment is
 * honoured, a block said to be zero reads zero over its requested size, and
 * the counters large_blocks_in_use / large_bytes_in_use equal the model's.
 * At the end of every input: everything is verified and freed, the cache
 * drained, everything purged; then no block is live and nothing is cached
 * (counters back to baseline) and the model check passes.
 *
 * The shard an operation uses is the CPU it runs on: the target pins itself
 * to CPU 0 at the start of every input (and the `cpu` op moves it), so a
 * crashing input replays the same way.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "counter.h"
#include "options.h"
#include "os.h"
#include "range.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define SLOTS 32
#define LIVE_BUDGET (192 * MiB) /* the model refuses allocations past this */

extern char **environ;

struct slot {
	unsigned char *p;
	size_t size;   /* requested */
	size_t usable; /* vmap_range_usable */
	size_t align;
	uint64_t seed;
};

static struct slot slots[SLOTS];
static size_t live_bytes;
static unsigned ncpu_allowed;
static int cpu_ids[1024];

#define FUZZ_NAME "fuzz_range"
#include "fuzz_input.h"

/* ---- patterns (unit.h's function, 3 offsets per page) ------------------- */

static inline unsigned char pat(uint64_t seed, size_t off)
{
	uint64_t x = (seed ^ (off >> 12)) * 0x9e3779b97f4a7c15ull;
	return (unsigned char)((x >> 56) ^ off);
}

static void fill(unsigned char *c, size_t n, uint64_t seed)
{
	for (size_t off = 0; off < n; off += 4096) {
		size_t mid = off + 2048 < n ? off + 2048 : n - 1;
		size_t last = off + 4095 < n ? off + 4095 : n - 1;
		c[off] = pat(seed, off);
		c[mid] = pat(seed, mid);
		c[last] = pat(seed, last);
	}
}

static void verify(const struct slot *s, const char *when)
{
	const unsigned char *c = s->p;
	size_t n = s->usable;
	for (size_t off = 0; off < n; off += 4096) {
		size_t mid = off + 2048 < n ? off + 2048 : n - 1;
		size_t last = off + 4095 < n ? off + 4095 : n - 1;
		size_t o[3] = {off, mid, last};
		for (int k = 0; k < 3; k++)
			if (c[o[k]] != pat(s->seed, o[k]))
				FAIL("%s: block %p (usable %zu) corrupted at offset %zu: %#x, expected %#x",
				     when, (void *)s->p, s->usable, o[k], c[o[k]], pat(s->seed, o[k]));
	}
}

/* Zero over the requested size, at every pattern position and the first page. */
static void verify_zero(const unsigned char *c, size_t n, const char *when)
{
	for (size_t i = 0; i < n && i < 4096; i++)
		if (c[i])
			FAIL("%s: block %p said zero but byte %zu is %#x", when, (const void *)c, i, c[i]);
	for (size_t off = 0; off < n; off += 4096) {
		size_t o[3] = {off, off + 2048, off + 4095};
		for (int k = 0; k < 3; k++)
			if (o[k] < n && c[o[k]])
				FAIL("%s: block %p said zero but byte %zu is %#x", when, (const void *)c,
				     o[k], c[o[k]]);
	}
}

/* ---- model checks ------------------------------------------------------- */

static void check_no_overlap(int i)
{
	uintptr_t a = (uintptr_t)slots[i].p, ae = a + slots[i].usable;
	for (int j = 0; j < SLOTS; j++) {
		if (j == i || !slots[j].p)
			continue;
		uintptr_t b = (uintptr_t)slots[j].p, be = b + slots[j].usable;
		if (a < be && b < ae)
			FAIL("slot %d [%#lx,%#lx) overlaps slot %d [%#lx,%#lx)", i, (unsigned long)a,
			     (unsigned long)ae, j, (unsigned long)b, (unsigned long)be);
	}
}

static void check_block(int i, const char *when)
{
	struct slot *s = &slots[i];
	if (s->usable < s->size)
		FAIL("%s: usable %zu < requested %zu", when, s->usable, s->size);
	if ((uintptr_t)s->p & (s->align - 1))
		FAIL("%s: %p not aligned to %zu", when, (void *)s->p, s->align);
	if (!vmap_range_owns(s->p) || !vmap_range_owns(s->p + s->usable - 1))
		FAIL("%s: block %p..+%zu not owned by the arena", when, (void *)s->p, s->usable);
	size_t u = vmap_range_usable(s->p, "fuzz");
	if (u != s->usable)
		FAIL("%s: usable changed from %zu to %zu", when, s->usable, u);
	check_no_overlap(i);
}

static void check_counters(const char *when)
{
	int64_t blocks = 0, bytes = 0;
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].p) {
			blocks++;
			bytes += (int64_t)slots[i].usable;
		}
	int64_t cb = vmap_stat_read(VMAP_STAT_large_blocks_in_use);
	int64_t cy = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
	if (cb != blocks || cy != bytes)
		FAIL("%s: counters say %lld blocks / %lld bytes in use, the model %lld / %lld", when,
		     (long long)cb, (long long)cy, (long long)blocks, (long long)bytes);
	if (vmap_stat_read(VMAP_STAT_cached_bytes) < 0)
		FAIL("%s: cached_bytes went negative: %lld", when,
		     (long long)vmap_stat_read(VMAP_STAT_cached_bytes));
}

/* ---- operations ---------------------------------------------------------- */

static size_t pick_size(uint8_t cls, uint32_t v)
{
	switch (cls % 10) {
	case 0: return v % (4 * KiB + 1);                         /* 0 .. one page */
	case 1: return v % (64 * KiB);                            /* a few pages */
	case 2: return 64 * KiB + v % MiB;                        /* pool / cache sizes */
	case 3: return (size_t)(v % 520) * 4096;                  /* exact pages, around POOL_PAGES */
	case 4: return (size_t)(v % 520) * 4096 + 1;
	case 5: return 2 * MiB - 16 * KiB + v % (32 * KiB);       /* the big-kind boundary */
	case 6: return v % (4 * MiB);
	case 7: return 2 * MiB + (size_t)(v % 2048) * 4096;       /* big, page multiples */
	case 8: return v % (16 * MiB);
	default: return (v & 0xff) == 0 ? 64 * MiB + (v >> 8) * 4 : v % (12 * MiB); /* > a chunk, rarely */
	}
}

static size_t pick_align(uint8_t a)
{
	/* Alignments above a chunk claim several chunks that stay with their
	 * shard for the life of the process (and that every model check walks
	 * from then on): rare. */
	static const size_t table[] = {
		16, 16, 16, 16, 16, 16, 16, 16, 64, 2048, 4096, 4096, 8192, 16 * KiB, 64 * KiB,
		256 * KiB, MiB, 2 * MiB, 4 * MiB, 8 * MiB, 32 * MiB,
	};
	if (a == 255)
		return GiB;
	if (a >= 252)
		return 64 * MiB << (a - 252); /* 64, 128, 256 MiB */
	return table[a % (sizeof table / sizeof table[0])];
}

static void op_free(int i)
{
	struct slot *s = &slots[i];
	if (!s->p)
		return;
	verify(s, "before free");
	vmap_range_free(s->p, "fuzz");
	live_bytes -= s->usable;
	memset(s, 0, sizeof *s);
}

static void op_alloc(int i, size_t size, size_t align)
{
	op_free(i);
	if (live_bytes + size > LIVE_BUDGET)
		return;
	bool zero = false;
	void *p = vmap_range_alloc(size, align, &zero);
	if (!p) {
		/* Allowed only when the system refuses: with a 1 GiB arena that
		 * grows by regions, a request this model admits must succeed. */
		FAIL("vmap_range_alloc(%zu, %zu) returned NULL with %zu bytes live", size, align,
		     live_bytes);
	}
	struct slot *s = &slots[i];
	s->p = p;
	s->size = size;
	s->align = align < VMAP_PAGE ? 1 : align;
	s->usable = vmap_range_usable(p, "fuzz");
	s->seed = (uint64_t)(uintptr_t)p * 31 + size;
	if (zero)
		verify_zero(s->p, size, "alloc");
	check_block(i, "alloc");
	live_bytes += s->usable;
	fill(s->p, s->usable, s->seed);
}

static void op_resize(int i, uint8_t mode, uint32_t v)
{
	struct slot *s = &slots[i];
	if (!s->p)
		return;
	size_t want;
	switch (mode % 4) {
	case 0: want = s->usable + 1 + v % (64 * KiB); break;      /* grow a little */
	case 1: want = s->usable + 1 + v % (4 * MiB); break;       /* grow more */
	case 2: want = v % (s->usable + 1); break;                 /* shrink (stays) */
	default: want = s->usable + (size_t)(v % 64) * 4096; break; /* page steps */
	}
	if (live_bytes + (want > s->usable ? want - s->usable : 0) > LIVE_BUDGET)
		return;
	size_t old = s->usable;
	bool ok = vmap_range_resize(s->p, want);
	size_t u = vmap_range_usable(s->p, "fuzz");
	if (want <= old && (!ok || u != old))
		FAIL("resize(%zu) within usable %zu: ok=%d usable now %zu", want, old, ok, u);
	if (ok && u < want)
		FAIL("resize(%zu) said ok but usable is %zu", want, u);
	if (!ok && u != old)
		FAIL("failed resize changed usable %zu -> %zu", old, u);
	/* The old part is intact either way. */
	struct slot keep = *s;
	verify(&keep, "resize");
	if (ok && u > old) {
		s->usable = u;
		s->size = want;
		live_bytes += u - old;
		check_block(i, "resize");
		fill(s->p, s->usable, s->seed); /* same seed: old positions rewritten alike */
	}
#ifdef VMAP_DEBUG
	vmap_range_check();
#endif
}

static void op_move(int i, uint32_t v)
{
	struct slot *s = &slots[i];
	if (!s->p)
		return;
	/* alloc.c moves only to a larger size (range.c relies on it: the moved
	 * span, guard page included, must fit in the new area). */
	size_t want = s->usable + 1 + v % (8 * MiB);
	if (live_bytes + want > LIVE_BUDGET)
		return;
	bool moved = false;
	unsigned char *q = vmap_range_move(s->p, want, &moved);
	if (!q) {
		verify(s, "failed move");
		return;
	}
	struct slot ns = *s;
	ns.p = q;
	ns.usable = vmap_range_usable(q, "fuzz");
	ns.align = 1;
	if (ns.usable < want)
		FAIL("move(%zu) gave usable %zu", want, ns.usable);
	if (moved) {
		/* p's pages are at q now; p itself is free space. */
		if (vmap_range_usable(q, "fuzz") < want)
			FAIL("moved block too small");
		struct slot chk = ns;
		chk.usable = s->usable;
		verify(&chk, "moved block");
	} else {
		memcpy(q, s->p, s->usable);
		vmap_range_free(s->p, "fuzz");
	}
	live_bytes += ns.usable - s->usable;
	ns.size = want;
	*s = ns;
	check_block(i, "move");
	fill(s->p, s->usable, s->seed);
#ifdef VMAP_DEBUG
	vmap_range_check();
#endif
}

static void op_purge(uint8_t mode, uint8_t delta)
{
	switch (mode % 4) {
	case 0: vmap_range_purge(true); break;
	case 1: vmap_range_purge(false); break;
	default:
		/* The slow path's check, as if delta ms had passed. */
		vmap_purge_maybe(vmap_os_now_ns() + (uint64_t)delta * 1000000ull);
		break;
	}
#ifdef VMAP_DEBUG
	vmap_range_check();
#endif
}

static void pin(unsigned n)
{
	if (!ncpu_allowed)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu_ids[n % ncpu_allowed], &set);
	sched_setaffinity(0, sizeof set, &set);
}

/* ---- libFuzzer entry points ------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	static char *env[64] = {
		"VMAPALLOC_RESERVE=1G",      "VMAPALLOC_SHARDS=2",           "VMAPALLOC_LAZY_MAX=32M",
		"VMAPALLOC_PURGE_DELAY_MS=1", "VMAPALLOC_CACHE_BYTES=4M",
	};
	int n = 5;
	/* Configuration from the environment on top (last assignment wins). */
	for (char **e = environ; *e && n < 63; e++)
		if (strncmp(*e, "VMAPALLOC_", 10) == 0)
			env[n++] = *e;
	env[n] = NULL;
	if (vmap_options_parse(env, false) != 0)
		FAIL("the fuzzer's options do not parse");
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		for (int c = 0; c < CPU_SETSIZE && ncpu_allowed < 1024; c++)
			if (CPU_ISSET(c, &set))
				cpu_ids[ncpu_allowed++] = c;
	unsigned ncpu = vmap_os_ncpu();
	vmap_counter_init(ncpu);
	int rc = vmap_range_init();
	if (rc != 0)
		FAIL("vmap_range_init: %d", rc);
	vmap_cache_init(ncpu);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = {data, size, 0};
	pin(0);
	unsigned ops = 0;
	while (in.i < in.n && ops++ < 256) {
		uint8_t op = u8(&in);
		int i;
		switch (op % 16) {
		case 0: case 1: case 2: case 3: {
			i = u8(&in) % SLOTS;
			uint8_t cls = u8(&in);
			uint32_t v = u24(&in);
			op_alloc(i, pick_size(cls, v), pick_align(u8(&in)));
			break;
		}
		case 4: case 5:
			op_free(u8(&in) % SLOTS);
			break;
		case 6: case 7: {
			i = u8(&in) % SLOTS;
			uint8_t mode = u8(&in);
			op_resize(i, mode, u24(&in));
			break;
		}
		case 8:
			i = u8(&in) % SLOTS;
			op_move(i, u24(&in));
			break;
		case 9: {
			uint8_t mode = u8(&in);
			op_purge(mode, u8(&in));
			break;
		}
		case 10:
			i = u8(&in) % SLOTS;
			if (slots[i].p) {
				verify(&slots[i], "before rewrite");
				slots[i].seed = slots[i].seed * 6364136223846793005ull + 1442695040888963407ull;
				fill(slots[i].p, slots[i].usable, slots[i].seed);
			}
			break;
		case 11:
			i = u8(&in) % SLOTS;
			if (slots[i].p)
				verify(&slots[i], "verify");
			break;
		case 12:
			pin(u8(&in));
			break;
		case 13:
			vmap_cache_trim();
#ifdef VMAP_DEBUG
			vmap_range_check();
#endif
			break;
		default:
			i = u8(&in) % SLOTS;
			if (slots[i].p)
				check_block(i, "query");
			break;
		}
		check_counters("after an operation");
	}
	/* Everything verified and freed; the cache drained; everything purged:
	 * the counters are back to their baseline. */
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].p)
			check_block(i, "end");
	for (int i = 0; i < SLOTS; i++)
		op_free(i);
	if (live_bytes != 0)
		FAIL("model leak: %zu live bytes after freeing everything", live_bytes);
	pin(0);
	vmap_cache_trim();
	vmap_range_purge(true);
	check_counters("at the end");
	int64_t cached = vmap_stat_read(VMAP_STAT_cached_bytes);
	if (cached != 0)
		FAIL("%lld bytes still cached after trim + purge of everything", (long long)cached);
	for (unsigned s = 0; s < vmap_nshards; s++)
		if (vmap_shards[s].cached_bytes != 0)
			FAIL("shard %u still holds %llu cached bytes", s,
			     (unsigned long long)vmap_shards[s].cached_bytes);
#ifdef VMAP_DEBUG
	vmap_range_check();
#endif
	return 0;
}
