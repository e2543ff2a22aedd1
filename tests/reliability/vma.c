/*
 * vma.c — vm.max_map_count pressure (REQUIREMENTS.md #14, #27).
 *
 *   vma [MARGINS...]      default margins: 0 2 8 64
 *
 * Fills the process's VMA budget: small files mapped page by page (each its
 * own VMA) and one anonymous region split page by page with mprotect until
 * the kernel refuses the next split (ENOMEM): the process is then at
 * vm.max_map_count.  At each margin (VMAs left free, made by merging pages
 * back) it runs a malloc-family workload over every size class — malloc,
 * calloc, realloc up and down, posix_memalign, free, malloc_trim, the
 * program's own mmap/munmap (also a partial munmap) — where an allocation may
 * return NULL (with errno ENOMEM) but:
 *   - nothing crashes or aborts, and no block loses content;
 *   - free never changes errno;
 *   - a failed realloc leaves its block intact, a failed mmap returns
 *     MAP_FAILED with ENOMEM.
 * Then the pressure is released and the same workload must fully succeed,
 * and vmapalloc's live-block counter is back at its starting value.
 * Prints how many operations failed cleanly at each margin.
 */
#include "rel.h"

#include <malloc.h>

static char outbuf[1 << 16]; /* stdout's buffer: printf must not need malloc */

struct tally {
	unsigned long ops, nulls;
};

static void check_errno_free(void *p)
{
	errno = 1234;
	free(p);
	CHECK(errno == 1234, "free(%p) changed errno to %d", p, errno);
}

static void workload(struct tally *t, bool must_succeed)
{
	static const size_t sizes[] = {0,         1,          100,      4096,     64 * KiB + 1,
				       128 * KiB, 1 * MiB,    3 * MiB,  16 * MiB, 100 * MiB};
	uint64_t seed = 42;
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			size_t n = sizes[i] ? sizes[i] : 1;
			for (int kind = 0; kind < 4; kind++) {
				void *p = NULL;
				t->ops++;
				errno = 0;
				if (kind == 0) {
					p = malloc(n);
				} else if (kind == 1) {
					p = calloc(1, n);
					if (p)
						CHECK(vmt_first_nonzero(p, n < 65536 ? n : 65536) == SIZE_MAX,
						      "calloc(%zu) not zero", n);
				} else if (kind == 2) {
					void *q = (void *)0x77;
					int rc = posix_memalign(&q, i % 2 ? 64 * KiB : 2 * MiB, n);
					if (rc == 0)
						p = q;
					else {
						CHECK(rc == ENOMEM && q == (void *)0x77,
						      "posix_memalign failed with %d, *memptr %p", rc, q);
						errno = ENOMEM;
					}
				} else {
					p = realloc(NULL, n);
				}
				if (!p) {
					CHECK(!must_succeed, "allocation of %zu (kind %d) failed with no pressure",
					      n, kind);
					CHECK(errno == ENOMEM, "failed allocation of %zu: errno %d", n, errno);
					t->nulls++;
					continue;
				}
				seed++;
				rel_mark(p, n, seed);
				/* Grow and shrink: a failure keeps the block. */
				size_t ups[] = {n * 2 + 4096, n / 3 + 1};
				for (int k = 0; k < 2; k++) {
					t->ops++;
					errno = 0;
					void *q = realloc(p, ups[k]);
					if (!q) {
						CHECK(!must_succeed, "realloc to %zu failed with no pressure", ups[k]);
						CHECK(errno == ENOMEM, "failed realloc: errno %d", errno);
						CHECK(rel_marked(p, n, seed), "failed realloc damaged the block");
						t->nulls++;
						continue;
					}
					size_t keep = n < ups[k] ? n : ups[k];
					const unsigned char *c = q;
					for (size_t o = 0; o < keep && o < 64 && o + 1 < n; o++)
						CHECK(c[o] == (unsigned char)(seed + o * 7),
						      "realloc %zu -> %zu lost byte %zu", n, ups[k], o);
					/* Every page of the kept part (rel_mark's byte per page),
					 * and the old last byte when growing. */
					for (size_t o = 4096; o < keep && o + 1 < n; o += 4096)
						CHECK(c[o] == (unsigned char)(seed ^ (o >> 12)),
						      "realloc %zu -> %zu lost page %zu", n, ups[k], o >> 12);
					if (keep == n)
						CHECK(c[n - 1] == (unsigned char)(seed * 3 + 1),
						      "realloc %zu -> %zu lost the last byte", n, ups[k]);
					p = q;
					n = ups[k];
					rel_mark(p, n, seed);
				}
				CHECK(rel_marked(p, n, seed), "block of %zu damaged", n);
				check_errno_free(p);
			}
		}
		/* The program's own anonymous mmap, and a partial munmap. */
		t->ops++;
		unsigned char *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
					-1, 0);
		if (m == MAP_FAILED) {
			CHECK(!must_succeed, "mmap failed with no pressure");
			CHECK(errno == ENOMEM, "failed mmap: errno %d", errno);
			t->nulls++;
		} else {
			m[0] = 1, m[4096] = 2, m[8192] = 3;
			t->ops++;
			if (munmap(m + 4096, 4096) != 0) {
				CHECK(!must_succeed, "partial munmap failed with no pressure");
				CHECK(errno == ENOMEM, "failed munmap: errno %d", errno);
				t->nulls++;
			}
			CHECK(m[0] == 1 && m[8192] == 3, "partial munmap damaged the rest");
			munmap(m, 3 * 4096);
		}
		t->ops++;
		errno = 555;
		malloc_trim(0);
		if (vmt_vm)
			vm.purge();
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, outbuf, _IOLBF, sizeof outbuf);
	vmt_init("vma");
	rel_catch_faults();
	uint64_t blocks0 = vmt_vm ? CTR("large_blocks_in_use") : 0;
	long max = rel_read_long("/proc/sys/vm/max_map_count");
	CHECK(max > 1000, "vm.max_map_count unreadable");
	struct tally before = {0, 0};
	workload(&before, true);

	/* 1. Small files, each mapped page by page at its own address. */
	char path[] = "/tmp/vmapalloc-vma-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);
	CHECK(ftruncate(fd, 4096) == 0, "ftruncate");
	static void *files[2000];
	for (int i = 0; i < 2000; i++) {
		files[i] = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		CHECK(files[i] != MAP_FAILED, "file mmap %d: %s", i, strerror(errno));
	}
	/* 2. One anonymous region, every other page made read-only until the
	 *    kernel refuses to split any more. */
	size_t pages = (size_t)max + 16;
	unsigned char *reg = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	CHECK(reg != MAP_FAILED, "region mmap");
	size_t split = 0;
	for (size_t i = 1; i + 1 < pages; i += 2) {
		if (mprotect(reg + i * 4096, 4096, PROT_READ) != 0) {
			CHECK(errno == ENOMEM, "mprotect split: errno %d", errno);
			break;
		}
		split = i;
	}
	long at_limit = rel_vmas();
	printf("vma: vm.max_map_count %ld; %ld VMAs after %zu splits and 2000 file maps\n", max,
	       at_limit, split / 2 + 1);
	CHECK(at_limit >= max - 2, "could not reach the limit (%ld of %ld)", at_limit, max);

	int margins[16] = {0, 2, 8, 64};
	int nm = 4;
	if (argc > 1) {
		nm = 0;
		for (int i = 1; i < argc && nm < 16; i++)
			margins[nm++] = atoi(argv[i]);
	}
	size_t merged_to = split; /* pages [merged_to+2 ...) are merged back */
	for (int k = 0; k < nm; k++) {
		/* Merge read-only pages back (from the top) until margin VMAs are free. */
		while (rel_vmas() > max - margins[k] && merged_to >= 1) {
			CHECK(mprotect(reg + merged_to * 4096, 4096, PROT_READ | PROT_WRITE) == 0,
			      "merge mprotect");
			merged_to -= 2;
		}
		struct tally t = {0, 0};
		long v0 = rel_vmas();
		workload(&t, false);
		printf("vma: margin %d (%ld VMAs): %lu operations, %lu failed cleanly (NULL/ENOMEM)\n",
		       margins[k], v0, t.ops, t.nulls);
	}
	/* Release the pressure: everything works again. */
	munmap(reg, pages * 4096);
	for (int i = 0; i < 2000; i++)
		munmap(files[i], 4096);
	close(fd);
	struct tally after = {0, 0};
	workload(&after, true);
	printf("vma: pressure released (%ld VMAs): %lu operations, all succeeded\n", rel_vmas(), after.ops);
	if (vmt_vm)
		CHECK(CTR("large_blocks_in_use") == blocks0, "large blocks in use: %llu, %llu at the start",
		      (unsigned long long)CTR("large_blocks_in_use"), (unsigned long long)blocks0);
	vmt_done("vma");
	return 0;
}
