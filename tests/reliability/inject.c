/*
 * inject.c — the program run by inject.sh under `strace -e inject=...`
 * (REQUIREMENTS.md #26): system calls of the memory family fail from the
 * N-th on, and every failure must surface cleanly.
 *
 *   inject [OPS] [SEED]
 *
 * One thread, OPS (default 1500) random operations over 48 slots: malloc,
 * calloc, posix_memalign, realloc (grow and shrink), free, malloc_trim, and
 * the program's own mmap, munmap, mremap(MAYMOVE) and mprotect (RO and back)
 * of anonymous mappings; sizes 16 B - 4 MiB.  Oracles, checked after every
 * operation that could fail:
 *  - an allocation that fails returns NULL with errno ENOMEM (posix_memalign:
 *    returns ENOMEM, leaves its pointer alone); mmap/mremap fail with
 *    MAP_FAILED and ENOMEM or EAGAIN; munmap/mprotect with -1 and ENOMEM or
 *    EAGAIN (what the kernel gives when it cannot split a VMA);
 *  - a failed realloc or mremap leaves the old block with its content; a
 *    successful one keeps the prefix;
 *  - calloc'd memory and fresh mmaps read zero (a purge that failed must
 *    not leave dirty memory marked zero);
 *  - free keeps errno; every live block keeps its pattern (one random block
 *    after every operation, all of them every 64 operations and at the end).
 * A mapping whose mprotect back to read-write failed stays read-only (only
 * read) until it is unmapped.
 *
 * getppid() is called once at the start of main: inject.sh counts, in a run
 * without injection, the calls of each system call before it (the loader's)
 * and after it, to choose N among the program's own.
 *
 * Output: one summary line "inject: ..."; "FAIL: ..." lines and exit 1 on a
 * violated oracle.  A crash, abort or hang is seen by the driver.
 */
#include "rel.h"

#include <malloc.h>

#define SLOTS 48

enum kind { EMPTY, HEAP, MAPPED };

struct slot {
	enum kind kind;
	unsigned char *p;
	size_t n;
	uint64_t seed;
	bool ro; /* a mapping left read-only by a failed mprotect */
};

static struct slot slot[SLOTS];
static unsigned long fails, nulls, map_fails, unmap_fails, remap_fails, prot_fails, ops_done;

#define BAD(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "FAIL: op %lu: ", ops_done);                                       \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		fails++;                                                                           \
	} while (0)

static bool soft_errno(int e)
{
	return e == ENOMEM || e == EAGAIN;
}

static void verify(unsigned i)
{
	struct slot *s = &slot[i];
	if (s->kind != EMPTY && !rel_marked(s->p, s->n, s->seed))
		BAD("slot %u (%s of %zu bytes) lost its content", i, s->kind == HEAP ? "block" : "mapping",
		    s->n);
}

/* The whole block reads zero (sparsely above 256 KiB: a word per 512 bytes). */
static bool is_zero(const unsigned char *p, size_t n)
{
	size_t step = n > 256 * KiB ? 512 : 1;
	for (size_t i = 0; i < n; i += step)
		if (p[i])
			return false;
	return !p[n - 1];
}

static size_t pick_size(uint64_t *r)
{
	uint64_t x = rel_rnd(r);
	switch (x % 8) {
	case 0: case 1: case 2: return 16 + x % 4096;
	case 3: return 4096 + x % (60 * KiB);
	case 4: case 5: return 64 * KiB + x % (448 * KiB);
	case 6: return 512 * KiB + x % (1536 * KiB);
	default: return 2 * MiB + x % (2 * MiB);
	}
}

static void set(unsigned i, enum kind k, void *p, size_t n, uint64_t *r)
{
	slot[i] = (struct slot){k, p, n, rel_rnd(r), false};
	rel_mark(p, n, slot[i].seed);
}

static void release(unsigned i)
{
	struct slot *s = &slot[i];
	verify(i);
	if (s->kind == HEAP) {
		errno = 4321;
		free(s->p);
		if (errno != 4321)
			BAD("free changed errno to %d", errno);
		s->kind = EMPTY;
	} else if (s->kind == MAPPED) {
		errno = 0;
		if (munmap(s->p, s->n) != 0) {
			unmap_fails++;
			if (!soft_errno(errno))
				BAD("munmap failed with errno %d", errno);
			return; /* still mapped: verified again later */
		}
		s->kind = EMPTY;
	}
}

static void op(uint64_t *r)
{
	unsigned i = (unsigned)(rel_rnd(r) % SLOTS);
	struct slot *s = &slot[i];
	uint64_t x = rel_rnd(r);
	if (s->kind == EMPTY) {
		size_t n = pick_size(r);
		void *p = NULL;
		errno = 0;
		switch (x % 6) {
		case 0: case 1:
			p = malloc(n);
			break;
		case 2:
			p = calloc(1, n);
			if (p && !is_zero(p, n))
				BAD("calloc(%zu) is not zero", n);
			break;
		case 3: {
			size_t al = (size_t)4096 << (x / 8 % 10); /* 4 KiB - 2 MiB */
			void *q = (void *)0x1;
			int rc = posix_memalign(&q, al, n);
			if (rc) {
				if (rc != ENOMEM)
					BAD("posix_memalign(%zu, %zu) returned %d", al, n, rc);
				if (q != (void *)0x1)
					BAD("posix_memalign changed its pointer on failure");
				nulls++;
				return;
			}
			p = q;
			if ((uintptr_t)p % al)
				BAD("posix_memalign(%zu) misaligned", al);
			break;
		}
		default: {
			size_t len = (n + 4095) & ~(size_t)4095;
			p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				map_fails++;
				if (!soft_errno(errno))
					BAD("mmap(%zu) failed with errno %d", len, errno);
				return;
			}
			if (!is_zero(p, len))
				BAD("fresh mmap of %zu bytes is not zero", len);
			set(i, MAPPED, p, len, r);
			return;
		}
		}
		if (!p) {
			nulls++;
			if (errno != ENOMEM)
				BAD("allocation of %zu failed with errno %d", n, errno);
			return;
		}
		set(i, HEAP, p, n, r);
		return;
	}
	switch (x % 5) {
	case 0: case 1:
		release(i);
		return;
	case 2:
		if (s->kind == HEAP) {
			size_t n = x & 64 ? pick_size(r) : s->n + s->n / 2 + 1;
			errno = 0;
			unsigned char *q = realloc(s->p, n);
			if (!q) {
				nulls++;
				if (errno != ENOMEM)
					BAD("realloc(%zu -> %zu) failed with errno %d", s->n, n, errno);
				verify(i);
				return;
			}
			size_t keep = n < s->n ? n : s->n;
			/* The prefix: the first 64 bytes and one byte a page keep the
			 * pattern (the last byte's own mark is not in a shrunk prefix). */
			for (size_t k = 0; k < keep - 1 && k < 64; k++)
				if (q[k] != (unsigned char)(s->seed + k * 7)) {
					BAD("realloc(%zu -> %zu) lost byte %zu", s->n, n, k);
					break;
				}
			for (size_t k = 4096; k < keep - 1; k += 4096)
				if (q[k] != (unsigned char)(s->seed ^ (k >> 12))) {
					BAD("realloc(%zu -> %zu) lost byte %zu", s->n, n, k);
					break;
				}
			set(i, HEAP, q, n, r);
		} else if (!s->ro) {
			size_t nl = s->n * 2;
			errno = 0;
			void *q = mremap(s->p, s->n, nl, MREMAP_MAYMOVE);
			if (q == MAP_FAILED) {
				remap_fails++;
				if (!soft_errno(errno))
					BAD("mremap(%zu -> %zu) failed with errno %d", s->n, nl, errno);
				verify(i);
				return;
			}
			s->p = q;
			verify(i);
			if (!is_zero(s->p + s->n, nl - s->n))
				BAD("mremap grew %zu -> %zu: the new pages are not zero", s->n, nl);
			set(i, MAPPED, q, nl, r);
		}
		return;
	case 3:
		if (s->kind == MAPPED) {
			errno = 0;
			if (mprotect(s->p, s->n, PROT_READ) != 0) {
				prot_fails++;
				if (!soft_errno(errno))
					BAD("mprotect(READ) failed with errno %d", errno);
				verify(i);
				return;
			}
			verify(i);
			errno = 0;
			if (mprotect(s->p, s->n, PROT_READ | PROT_WRITE) != 0) {
				prot_fails++;
				if (!soft_errno(errno))
					BAD("mprotect(READ|WRITE) failed with errno %d", errno);
				s->ro = true;
				return;
			}
			s->ro = false;
			rel_mark(s->p, s->n, s->seed); /* writable again */
		} else {
			malloc_trim(0); /* purges: madvise / process_madvise */
		}
		return;
	default:
		verify(i);
		return;
	}
}

int main(int argc, char **argv)
{
	(void)getppid(); /* the marker: see the head of the file */
	unsigned long ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 1500;
	uint64_t r = argc > 2 ? strtoull(argv[2], NULL, 10) : 88172645463325252ull;
	for (ops_done = 0; ops_done < ops && fails < 20; ops_done++) {
		op(&r);
		verify((unsigned)(rel_rnd(&r) % SLOTS));
		if (ops_done % 64 == 63)
			for (unsigned i = 0; i < SLOTS; i++)
				verify(i);
	}
	for (unsigned i = 0; i < SLOTS; i++)
		release(i);
	for (unsigned i = 0; i < SLOTS; i++)
		verify(i); /* mappings whose munmap failed */
	printf("inject: %lu operations; failed: allocations %lu, mmap %lu, munmap %lu, mremap %lu, "
	       "mprotect %lu; oracle violations %lu\n",
	       ops_done, nulls, map_fails, unmap_fails, remap_fails, prot_fails, fails);
	return fails ? 1 : 0;
}
