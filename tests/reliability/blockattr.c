/*
 * blockattr.c — the program changes the pages of its own large malloc
 * blocks, then frees them (REQUIREMENTS.md #37): a posix_memalign()ed
 * "thread stack" whose lowest page is made PROT_NONE as a guard, blocks with
 * pages given back by MADV_DONTNEED or MADV_FREE, a block made read-only.
 * free() must not crash, and the memory must be read-write and correct (calloc:
 * zero) when the allocator hands it out again.  Run under the preload.
 */
#include "rel.h"

#include <malloc.h>

#define ROUNDS 64

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("blockattr");
	rel_catch_faults();
	uint64_t blocks0 = vmt_vm ? CTR("large_blocks_in_use") : 0;
	static const size_t sizes[] = {64 * KiB, 256 * KiB, MiB, 3 * MiB, 8 * MiB};
	unsigned long reused = 0;
	for (int r = 0; r < ROUNDS; r++) {
		size_t n = sizes[r % 5];
		unsigned char *p = NULL;
		CHECK(posix_memalign((void **)&p, 4096, n) == 0, "posix_memalign(4096, %zu)", n);
		memset(p, 0x11, n);
		switch (r % 4) {
		case 0: /* a guard page at the bottom of a "stack" */
			CHECK(mprotect(p, 4096, PROT_NONE) == 0, "mprotect NONE: %s", strerror(errno));
			break;
		case 1:
			CHECK(madvise(p + n / 2, n / 4 & ~(size_t)4095, MADV_DONTNEED) == 0, "DONTNEED");
			break;
		case 2:
			CHECK(madvise(p, n / 2 & ~(size_t)4095, MADV_FREE) == 0, "MADV_FREE");
			break;
		default: /* all read-only */
			CHECK(mprotect(p, n, PROT_READ) == 0, "mprotect READ");
			break;
		}
		errno = 77;
		free(p);
		CHECK(errno == 77, "free changed errno");
		/* The same size again (likely the same area), then calloc. */
		unsigned char *q = malloc(n);
		CHECK(q != NULL, "malloc(%zu) after free", n);
		reused += q == p;
		memset(q, 0x22, n); /* every page writable */
		for (size_t i = 0; i < n; i += 4096)
			CHECK(q[i] == 0x22, "reused block byte %zu", i);
		free(q);
		unsigned char *c = calloc(1, n);
		CHECK(c != NULL, "calloc(%zu)", n);
		CHECK(vmt_first_nonzero(c, n) == SIZE_MAX, "calloc(%zu) after the attribute change not zero", n);
		memset(c, 0x33, n);
		free(c);
	}
	printf("blockattr: %d blocks changed (PROT_NONE guard, DONTNEED, MADV_FREE, read-only) and freed; "
	       "%lu reused at the same address, all writable and correct\n", ROUNDS, reused);
	if (vmt_vm)
		CHECK(CTR("large_blocks_in_use") == blocks0, "large blocks in use");
	vmt_done("blockattr");
	return 0;
}
