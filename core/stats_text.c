/*
 * stats_text.c — the report as text: the "at a glance" lines, then the shard
 * and size tables.
 *
 * The lines are a table (lines[]): each entry is a piece of text with its
 * condition (IS_* bits that must all hold), an optional label that starts a
 * new line, a vmap_buf_printf format and the figures it prints.  Change what
 * the report says here, not in code.
 *
 * Invariants: reads only the figures and the shard tables (stats.c), so it is
 * as safe as they are in a signal handler; no allocation, stdio or lock.
 * The formats of lines[] use only conversions that take one uint64_t (%U, %B,
 * %M) or two (%P): every argument is a figure, and the unused ones of the
 * eight passed are ignored.
 *
 * Called by: stats_out.c (write_report).
 */
#include "stats_report.h"
#include "vmapalloc.h"

struct text_piece {
	uint32_t need;   /* IS_* bits that must all be set; 0: always */
	char label[24];  /* if not empty: a new line, the label in a 26-column cell */
	char fmt[88];
	uint8_t arg[8];  /* FIG_* indexes, in the order fmt takes them */
};

#define F(name) FIG_##name

/* Inline arrays, not pointers: no relocation for ld.so to apply at load. */
static const struct text_piece lines[] = {
	{IS_PARENT, "", ", forked child of pid %U", {F(parent_pid)}},
	{0, "", ", %M after start", {F(elapsed_ns)}},
	{IS_THREADS | IS_EXIT, "", "\n  (%U other thread(s) still running: figures may be approximate)",
	 {F(threads_other)}},
	{IS_THREADS | IS_NOT_EXIT, "", "\n  (%U thread(s) running: figures may be approximate)",
	 {F(threads)}},

	{0, "large blocks in use", "%B in %U blocks (peak %B)",
	 {F(large_bytes_in_use), F(large_blocks_in_use), F(large_bytes_peak)}},

	{IS_SMALL, "small blocks in use", "%B (glibc, of a %B heap)", {F(small_in_use), F(small_heap)}},
	{IS_SMALL | IS_SLABS, "", " + builtin slabs %B in use of %B in %U",
	 {F(slab_in_use), F(slab_bytes), F(slabs_in_use)}},
	{IS_SMALL | IS_BACKEND_MIMALLOC, "", " + mimalloc %B committed", {F(mimalloc_bytes)}},
	{IS_SMALL, "", "; in all %B", {F(small_all)}},
	{IS_NO_SMALL, "small blocks in use", "(glibc's figures are not read in a signal handler)", {0}},

	/* Who served the small requests: allocations / frees of each. */
	{IS_BACKEND_LIBC, "small backend", "libc: glibc %U / %U", {F(small_glibc_allocs),
	 F(small_glibc_frees)}},
	{IS_BACKEND_BUILTIN, "small backend", "builtin: slabs %U / %U, glibc %U / %U",
	 {F(small_slab_allocs), F(small_slab_frees), F(small_glibc_allocs), F(small_glibc_frees)}},
	{IS_BACKEND_AUTO, "small backend", "auto: glibc %U / %U, slabs %U / %U",
	 {F(small_glibc_allocs), F(small_glibc_frees), F(small_slab_allocs), F(small_slab_frees)}},
	{IS_BACKEND_MIMALLOC, "small backend", "mimalloc: %U / %U (%B committed, peak %B; range %B)",
	 {F(small_mimalloc_allocs), F(small_mimalloc_frees), F(mimalloc_bytes), F(mimalloc_peak),
	  F(mimalloc_range_bytes)}},
	{IS_BACKEND_MIMALLOC, "", ", glibc %U / %U", {F(small_glibc_allocs), F(small_glibc_frees)}},
	{0, "", " (allocations / frees)", {0}},
	{IS_BACKEND_AUTO, "", "; trims of glibc's heap %U", {F(small_glibc_trims)}},

	{0, "resident (VmRSS)", "%B (peak %B)", {F(rss), F(hwm)}},
	{IS_ROLLUP, "", "; AnonHugePages %B, LazyFree %B", {F(anon_huge), F(lazy_free)}},

	{0, "cached for reuse", "%B", {F(cached_bytes)}},
	{IS_NO_ARENA, "", " (no arena yet: set up on the first large block or served mmap)", {0}},
	{IS_ARENA, "", " (purged above %B", {F(lazy_limit)}},
	{IS_ARENA | IS_RAISED, "", ", raised from %B", {F(lazy_max)}},
	{IS_ARENA | IS_DELAY, "", " or after %U ms", {F(purge_delay_ms)}},
	{IS_ARENA, "", ")", {0}},

	{0, "address space reserved",
	 "%B in %U region(s), %U shard(s) (virtual: untouched pages cost nothing)",
	 {F(mapped_bytes), F(regions), F(shards)}},
	{IS_LENT, "", "; %B lent to the kernel for glibc (tight RLIMIT_AS)", {F(lent_bytes)}},

	{0, "mappings", "%U", {F(maps)}},
	{IS_MAX_MAPS, "", " of vm.max_map_count %U (%P)", {F(max_maps), F(maps), F(max_maps)}},
	{0, "", "; vmapalloc's own %U", {F(own_maps)}},

	{0, "calls", "malloc %U, free %U, calloc %U, realloc %U, aligned %U",
	 {F(malloc_calls), F(free_calls), F(calloc_calls), F(realloc_calls), F(memalign_calls)}},

	{IS_SLABS, "small / large", "", {0}},
	{IS_NO_SLABS, "small (glibc) / large", "", {0}},
	{IS_NO_SLABS_MIMALLOC, "small / large", "", {0}},
	{0, "", "%U / %U allocations (%B large in total); frees %U / %U",
	 {F(small_allocs), F(large_allocs), F(large_bytes_allocated), F(small_frees), F(large_frees)}},

	{0, "large reuse", "pool hits %U (%P), resident runs %U (%P; %U from another shard)",
	 {F(pool_hits), F(pool_hits), F(large_served), F(run_hits), F(run_hits), F(large_served),
	  F(run_steals)}},
	{0, "", ", fresh %U (page faults; %U extending a resident run, %U populated)",
	 {F(pool_misses), F(run_extends), F(populated)}},
	{0, "", "; calloc zeroing skipped %U", {F(calloc_zero_skipped)}},

	{0, "realloc of large blocks", "in place %U, pages moved %U, copied %U; shrunk %U",
	 {F(realloc_in_place), F(realloc_moved_pages), F(realloc_copied), F(realloc_tails_released)}},

	{0, "purges", "%U: %B returned in %U", {F(purges), F(purged_bytes), F(purge_syscalls)}},
	{IS_MADV_FREE, "", " system calls (MADV_FREE), ", {0}},
	{IS_MADV_DONTNEED, "", " system calls (MADV_DONTNEED), ", {0}},
	{0, "", "%M", {F(purge_ns)}},

	{0, "program's mmap", "served %U (%B in use), passed to the kernel %U",
	 {F(mmap_served), F(mmap_bytes_in_use), F(mmap_passed)}},
	{0, "", "; munmap %U (partial %U), mremap %U, refused %U",
	 {F(munmap_served), F(munmap_partial), F(mremap_calls), F(mmap_refused)}},

	{0, "locks", "shared %U, shard %U (contended %P); waits for any lock %U, slept %U",
	 {F(shared_lock_acquisitions), F(shard_lock_acquisitions), F(shard_lock_contended),
	  F(shard_lock_acquisitions), F(lock_waits), F(lock_sleeps)}},

	{IS_ATOMIC, "counters", "atomic (no second thread has allocated yet)", {0}},
	{IS_PERCPU_START, "counters", "per-CPU from the start", {0}},
	{IS_PERCPU_LATER, "counters", "per-CPU since the second thread, %M after start",
	 {F(switch_ns)}},
};

#undef F

static void write_lines(struct vmap_buf *b, const struct vmap_figures *f)
{
	const uint64_t *v = f->v;
	for (unsigned i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		const struct text_piece *p = &lines[i];
		if ((f->is & p->need) != p->need)
			continue;
		if (p->label[0])
			vmap_buf_printf(b, "\n  %-26s", p->label);
		const uint8_t *a = p->arg;
		vmap_buf_printf(b, p->fmt, v[a[0]], v[a[1]], v[a[2]], v[a[3]], v[a[4]], v[a[5]],
				v[a[6]], v[a[7]]);
	}
}

/* Shards with nothing in them past the first 8 are left out: a machine with
 * many CPUs has many idle shards. */
static bool shard_idle(unsigned i, const struct vmap_shard_row *r)
{
	if (i < 8 || r->cached || r->pooled_areas || r->locks)
		return false;
	for (unsigned k = 0; k < VMAP_NSTATES; k++)
		if (r->free_bytes[k])
			return false;
	return true;
}

static void write_tables(struct vmap_buf *b, const struct vmap_figures *f)
{
	unsigned ns = vmap_report_nshards();
	if (!ns)
		return;
	vmap_buf_printf(b, "\n  shards (read without their locks: approximate; free runs by state;"
			   " m: the program's mmap)\n    shard     cached  pooled");
	for (unsigned k = 0; k < VMAP_NSTATES; k++)
		vmap_buf_printf(b, "%11s", vmap_report_state_name(k));
	vmap_buf_printf(b, "      locks  contended");
	for (unsigned i = 0; i < ns; i++) {
		struct vmap_shard_row r;
		vmap_report_shard_row(i, &r);
		if (shard_idle(i, &r))
			continue;
		vmap_buf_printf(b, "\n    %4u%c%11B%8U", i, r.mmap ? 'm' : ' ', r.cached,
				r.pooled_areas);
		for (unsigned k = 0; k < VMAP_NSTATES; k++)
			vmap_buf_printf(b, "%11B", r.free_bytes[k]);
		vmap_buf_printf(b, "%11U%11U", r.locks, r.contended);
	}
	vmap_buf_printf(b, "\n  pools by size (freed areas waiting for reuse; thread caches hold %B more)",
			f->v[FIG_thread_cache_bytes]);
	bool any = false;
	for (unsigned c = 2; c < VMAP_NCLASSES; c++) {
		uint64_t n = vmap_report_class_areas(c);
		if (!n)
			continue;
		if (!any)
			vmap_buf_printf(b, "\n          size   areas      bytes");
		any = true;
		uint64_t usable = (uint64_t)(c - 1) << VMAP_PAGE_SHIFT;
		vmap_buf_printf(b, "\n    %10B%8U%11B", usable, n, n * usable);
	}
	if (!any)
		vmap_buf_printf(b, "\n    none");
}

static const char when_text[][12] = {"at exit", "on signal", "on request"};

void vmap_report_text(struct vmap_buf *b, const struct vmap_figures *f)
{
	vmap_buf_printf(b, "vmapalloc " VMAPALLOC_VERSION_STRING " report %s: pid %U (%s)",
			when_text[f->when], f->v[FIG_pid], f->comm);
	write_lines(b, f);
	write_tables(b, f);
}
