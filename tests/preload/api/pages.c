/*
 * pages.c — the pages of libvmapalloc.so's data that a short process writes
 * (every page written costs every process a page fault).
 *
 *   api_pages           no allocation of its own
 *   api_pages small     100 small allocations and frees first
 *
 * Counts the pages of the library's mappings that this process has written --
 * present in /proc/self/pagemap and no longer the file's page
 * (bit 61 clear: an anonymous copy) -- and fails above 1: the first page
 * of the read-write segment, which holds what ld.so relocates (no RELRO,
 * the segment page-aligned: preload/bss.ld) and the VMAP_HOT variables
 * (core/section.h).  A second means something ld.so, init or the small path
 * writes lies outside that page.  Pages of the .bss that were only read map
 * the kernel's zero page (not resident memory): they are told apart by its
 * page frame number, which pagemap shows to root, and counted apart.  Some
 * kernels (seen in a virtual machine) give every read fault a page of its
 * own: there a private page that holds only zeros counts as read.
 *
 * The library's segments come from dl_iterate_phdr (which does not allocate);
 * /proc/self/pagemap is read with pread(2): stdio would allocate, and the
 * measure is of a process that does not.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_WRITTEN 1

static int pm = -1;
static int found;
static unsigned long present, written, zero_read;
static uint64_t zero_pfn; /* the zero page's frame, 0 if pagemap hides frames */
static int read_own_page;  /* a read fault maps a fresh page, not the zero page */

#define PFN(ent) ((ent) & ((1ull << 55) - 1))

/* The frame a read of a fresh anonymous page maps: the zero page's, the
 * same for two pages; two frames mean every read got a page of its own. */
static void find_zero_pfn(void)
{
	volatile char *z = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t ent[2] = {0, 0};
	if (z == MAP_FAILED)
		return;
	(void)z[0];
	(void)z[4096];
	if (pread(pm, ent, sizeof ent, (off_t)((uintptr_t)z / 4096 * 8)) == sizeof ent &&
	    (ent[0] >> 63) && (ent[1] >> 63) && PFN(ent[0])) {
		if (PFN(ent[0]) == PFN(ent[1]))
			zero_pfn = PFN(ent[0]);
		else
			read_own_page = 1;
	}
	munmap((void *)z, 8192);
}

static int all_zero(unsigned long a)
{
	const unsigned long *w = (const unsigned long *)a;
	for (size_t i = 0; i < 4096 / sizeof *w; i++)
		if (w[i])
			return 0;
	return 1;
}

static int count_pages(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "libvmapalloc.so"))
		return 0;
	found = 1;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		unsigned long lo = (info->dlpi_addr + ph->p_vaddr) & ~4095ul;
		unsigned long hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + 4095) & ~4095ul;
		for (unsigned long a = lo; a < hi; a += 4096) {
			uint64_t ent = 0;
			if (pread(pm, &ent, sizeof ent, (off_t)(a / 4096 * 8)) != sizeof ent || !(ent >> 63))
				continue;
			present++;
			/* Not the file's page (bit 61 clear): a private copy, i.e.
			 * written, or the zero page that a read of the .bss mapped. */
			if (!((ent >> 61) & 1) &&
			    ((zero_pfn && PFN(ent) == zero_pfn) || (read_own_page && all_zero(a)))) {
				zero_read++;
			} else if (!((ent >> 61) & 1)) {
				written++;
				if (getenv("PAGES_VERBOSE"))
					printf("written: %#lx (segment at %#lx)\n", a - info->dlpi_addr,
					       (unsigned long)ph->p_vaddr);
			}
		}
	}
	return 1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "small") == 0) {
		void *p[100];
		for (int i = 0; i < 100; i++)
			p[i] = malloc((size_t)(16 + 37 * i));
		for (int i = 0; i < 100; i++)
			free(p[(i * 37) % 100]);
	}
	pm = open("/proc/self/pagemap", O_RDONLY);
	if (pm < 0) {
		printf("SKIP: no /proc/self/pagemap\n");
		return 77;
	}
	find_zero_pfn();
	dl_iterate_phdr(count_pages, NULL);
	close(pm);
	if (!found) {
		printf("FAIL: libvmapalloc.so is not loaded (run with LD_PRELOAD)\n");
		return 1;
	}
	printf("libvmapalloc.so: %lu pages present, %lu written, %lu of the .bss read (%s)\n",
	       present, written, zero_read,
	       zero_pfn ? "the zero page"
	       : read_own_page ? "a page per read fault here: the pages of zeros"
			       : "the zero page: not told apart here");
	if (written > MAX_WRITTEN) {
		printf("FAIL: %lu pages of libvmapalloc.so's data written by a process %s; at most %d "
		       "(the first page of the read-write segment: relocations and VMAP_HOT)\n",
		       written, argc > 1 ? "making small allocations" : "that does not allocate",
		       MAX_WRITTEN);
		return 1;
	}
	return 0;
}
