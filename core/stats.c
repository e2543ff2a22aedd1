/*
 * stats.c — the report (text and JSON), its destinations, and malloc_info's XML.
 *
 * A report is written (1) at exit, from the library's destructor, when
 * VMAPALLOC_STATS is set: to a private duplicate of stderr (=1), or to a new
 * file (=PATH; %p = pid, %e = program name, %% = %) created with
 * O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, so that no existing file is ever
 * overwritten or followed through a symbolic link; (2) on VMAPALLOC_STATS_SIGNAL
 * while the program runs, to the same stderr, or to PATH with "-sigN" put
 * before its extension (the N-th signal), from a SA_RESTART handler installed
 * at init — a handler the program installs later for that signal replaces
 * ours, and the program's wins; (3) on request (vmapalloc_stats_print,
 * malloc_stats).  A forked child that does not exec writes its own report at
 * its exit, labelled with its pid and its parent's (and, with %p, to its own
 * file); one that leaves with _exit() or exec writes none.  VMAPALLOC_PROFILE=1
 * without VMAPALLOC_STATS reports to stderr at exit.
 *
 * Contents, "at a glance" first: bytes in use (large: counters; small: glibc's
 * mallinfo2, except in a signal handler where it is not safe), resident and
 * peak (/proc/self/status), AnonHugePages and LazyFree (/proc/self/smaps_rollup),
 * reserved and cached bytes, mappings against vm.max_map_count, calls, reuse,
 * purges, the program's mmaps, locks, the counter mode; then a per-shard and a
 * per-size table, then the allocation sites (profile.c).  The JSON has the same
 * figures under stable keys ("vmapalloc_report_version": 1).
 *
 * Invariants:
 *  - Never allocates, never uses stdio, never takes a lock: figures are read
 *    with relaxed loads (shard tables without their locks: "approximate"), so a
 *    report cannot wait on a thread stopped anywhere.
 *  - The signal path makes only raw system calls and reads memory: the
 *    counters without folding this thread's pending counts (it may have been
 *    interrupted in the middle of an update), no mallinfo2, no dladdr.
 *
 * Called by: alloc.c (init, fork, exit, malloc_stats, malloc_info),
 * preload/shim.c (the public vmapalloc_* functions).
 */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <gnu/lib-names.h>
#include <signal.h>
#include <string.h>

#include "alloc.h"
#include "backend.h"
#include "counter.h"
#include "options.h"
#include "os.h"
#include "profile.h"
#include "range.h"
#include "section.h"
#include "slab.h"
#include "vmapalloc.h"

#define REPORT_VERSION 1

/* Inline arrays, not pointers: no relocation for ld.so at load (issue 5). */
static const char stat_names[VMAP_STAT_COUNT][32] = {
#define X(name, kind, doc) #name,
#include "stats.def"
#undef X
};

static bool str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

int vmap_stat_lookup(const char *name)
{
	for (unsigned i = 0; i < VMAP_STAT_COUNT; i++)
		if (str_eq(stat_names[i], name))
			return (int)i;
	if (str_eq("large_bytes_peak", name))
		return VMAP_STAT_COUNT;
	return -1;
}

const char *vmap_stat_name(unsigned i)
{
	if (i < VMAP_STAT_COUNT)
		return stat_names[i];
	return i == VMAP_STAT_COUNT ? "large_bytes_peak" : NULL;
}

/* What the slab fast paths counted in the heaps (slab.h) into statistic i. */
static int64_t fast_part(unsigned i)
{
	if (i != VMAP_STAT_malloc_calls && i != VMAP_STAT_small_allocs &&
	    i != VMAP_STAT_free_calls && i != VMAP_STAT_small_frees)
		return 0;
	uint64_t m, f;
	vmap_slab_fast_counts(&m, &f);
	return (int64_t)(i == VMAP_STAT_malloc_calls || i == VMAP_STAT_small_allocs ? m : f);
}

uint64_t vmap_stat_value(unsigned i)
{
	int64_t v;
	if (i == VMAP_STAT_COUNT) {
		int64_t now = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
		vmap_stat_note_peak(now);
		v = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	} else {
		v = vmap_stat_read((enum vmap_stat)i) + fast_part(i);
	}
	return v < 0 ? 0 : (uint64_t)v;
}

/* In a signal handler: base + every slot + this thread's pending counts,
 * without folding (the interrupted code may be in the middle of an update). */
static uint64_t stat_peek(unsigned i)
{
	int64_t v;
	if (i == VMAP_STAT_COUNT) {
		int64_t peak = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
		int64_t now = (int64_t)stat_peek(VMAP_STAT_large_bytes_in_use);
		v = now > peak ? now : peak;
	} else {
		v = __atomic_load_n(&vmap_counter_base[i], __ATOMIC_RELAXED);
		int64_t *slots = __atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE);
		if (slots)
			for (unsigned c = 0; c < vmap_counter_nslots; c++)
				v += __atomic_load_n(&slots[c * VMAP_STAT_STRIDE + i], __ATOMIC_RELAXED);
		v += (int64_t)vmap_local.n[i] + fast_part(i);
	}
	return v < 0 ? 0 : (uint64_t)v;
}

/* ---- what the system says: /proc, read with raw system calls ------------ */


/* s starts with key[0..kl): strncmp without importing it (issue 5). */
static bool starts_with(const char *s, const char *key, size_t kl)
{
	for (size_t i = 0; i < kl; i++)
		if (s[i] != key[i])
			return false;
	return true;
}

/* The number after "key" at the start of a line, or 0 (*found false). */
static uint64_t field(const char *buf, const char *key, bool *found)
{
	size_t kl = strlen(key);
	for (const char *l = buf; *l; l++) {
		if ((l == buf || l[-1] == '\n') && starts_with(l, key, kl)) {
			const char *p = l + kl;
			while (*p == ' ' || *p == '\t')
				p++;
			uint64_t v = 0;
			while (*p >= '0' && *p <= '9')
				v = v * 10 + (uint64_t)(*p++ - '0');
			if (found)
				*found = true;
			return v;
		}
	}
	return 0;
}

static void program_name(char *out, size_t cap)
{
	long n = vmap_os_read_file("/proc/self/comm", out, cap);
	for (long i = 0; i < n; i++)
		if (out[i] == '\n')
			out[i] = '\0';
		else if (out[i] == '/')
			out[i] = '_';
}

/* Lines of /proc/self/maps: the process's mappings (VMAs). */
static uint64_t count_mappings(void)
{
	int fd = vmap_os_open("/proc/self/maps", O_RDONLY, 0);
	if (fd < 0)
		return 0;
	char buf[4096];
	uint64_t lines = 0;
	long r;
	while ((r = vmap_os_read(fd, buf, sizeof buf)) > 0)
		for (long i = 0; i < r; i++)
			lines += buf[i] == '\n';
	vmap_os_close(fd);
	return lines;
}

/* ---- the figures of one report ----------------------------------------- */

enum { WHEN_EXIT, WHEN_SIGNAL, WHEN_REQUEST };
static const char when_name[][8] = {"exit", "signal", "request"};

static uint64_t start_ns VMAP_HOT;
static int parent_pid;
static int fork_parent_pid; /* the forking process, taken before fork() */
static int report_fd = 2;
static int report_signal;
static unsigned signal_reports;
static int signal_busy;

struct figures {
	int when;
	int pid, parent;
	char comm[64];
	uint64_t v[VMAP_STAT_COUNT + 1]; /* + large_bytes_peak */
	uint64_t elapsed_ns;
	uint64_t rss, hwm, threads;
	bool rollup;
	uint64_t anon_huge, lazy_free;
	uint64_t maps, max_maps;
	bool small; /* glibc figures: not in a signal handler */
	uint64_t small_in_use, small_heap;
	uint64_t switch_ns; /* after start; 0 = atomic mode */
};

static void collect(struct figures *f, int when)
{
	char buf[4096];
	memset(f, 0, sizeof *f);
	f->when = when;
	f->pid = vmap_os_getpid();
	f->parent = parent_pid;
	program_name(f->comm, sizeof f->comm);
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++)
		f->v[i] = when == WHEN_SIGNAL ? stat_peek(i) : vmap_stat_value(i);
	uint64_t now = vmap_os_now_ns();
	f->elapsed_ns = start_ns && now > start_ns ? now - start_ns : 0;
	if (vmap_counter_is_percpu()) {
		uint64_t sw = vmap_counter_switch_ns();
		f->switch_ns = sw > start_ns ? sw - start_ns : 1;
	}
	vmap_os_read_file("/proc/self/status", buf, sizeof buf);
	f->rss = field(buf, "VmRSS:", NULL) * 1024;
	f->hwm = field(buf, "VmHWM:", NULL) * 1024;
	f->threads = field(buf, "Threads:", NULL);
	vmap_os_read_file("/proc/self/smaps_rollup", buf, sizeof buf);
	bool found = false;
	f->anon_huge = field(buf, "AnonHugePages:", &found) * 1024;
	f->lazy_free = field(buf, "LazyFree:", &found) * 1024;
	f->rollup = found;
	f->maps = count_mappings();
	vmap_os_read_file("/proc/sys/vm/max_map_count", buf, sizeof buf);
	f->max_maps = field(buf, "", NULL);
	if (when != WHEN_SIGNAL && vmap_libc.mallinfo2) {
		/* glibc's own figures: it takes its arena locks, so never here
		 * from a signal handler. */
		struct mallinfo2 mi = vmap_libc.mallinfo2();
		f->small = true;
		f->small_in_use = mi.uordblks + mi.hblkhd;
		f->small_heap = mi.arena + mi.hblkhd;
	}
}

#define V(name) (f->v[VMAP_STAT_##name])
#define PEAK (f->v[VMAP_STAT_COUNT])

/* ---- shard and size tables (no locks: approximate) ----------------------- */

/* Free-run lists are [big * NSTATES + enum vmap_run_state] (range.h). */
#define NSTATES (VMAP_RUN_LISTS / 2)
static const char state_names[][12] = {"zero", "dirty", "advised", "guarded", "protected"};

static const char *state_name(unsigned k)
{
	return k < sizeof state_names / sizeof state_names[0] ? state_names[k] : "other";
}

struct shard_row {
	uint64_t cached, pooled_areas;
	uint64_t free_bytes[NSTATES];
	uint64_t locks, contended;
};

static void shard_row(unsigned i, struct shard_row *r)
{
	const struct vmap_shard *s = &vmap_shards[i];
	memset(r, 0, sizeof *r);
	r->cached = __atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED);
	r->locks = __atomic_load_n(&s->lock_acquisitions, __ATOMIC_RELAXED);
	r->contended = __atomic_load_n(&s->lock_contended, __ATOMIC_RELAXED);
	for (unsigned c = 0; c < VMAP_NCLASSES; c++)
		r->pooled_areas += __atomic_load_n(&s->pool[c].count, __ATOMIC_RELAXED);
	for (unsigned l = 0; l < VMAP_RUN_LISTS; l++)
		r->free_bytes[l % NSTATES] += __atomic_load_n(&s->free_pages[l], __ATOMIC_RELAXED)
					      << VMAP_PAGE_SHIFT;
}

static unsigned nshards_now(void)
{
	return vmap_range_enabled() && vmap_shards ? vmap_nshards : 0;
}

static uint64_t class_areas(unsigned c)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < nshards_now(); i++)
		n += __atomic_load_n(&vmap_shards[i].pool[c].count, __ATOMIC_RELAXED);
	return n;
}

static uint64_t shards_cached(void)
{
	uint64_t t = 0;
	for (unsigned i = 0; i < nshards_now(); i++)
		t += __atomic_load_n(&vmap_shards[i].cached_bytes, __ATOMIC_RELAXED);
	return t;
}

/* ---- text ---------------------------------------------------------------- */

static void line(struct vmap_buf *b, const char *label)
{
	vmap_buf_str(b, "\n  ");
	vmap_buf_str(b, label);
	size_t n = strlen(label);
	for (; n < 26; n++)
		vmap_buf_char(b, ' ');
}

static void cell_bytes(struct vmap_buf *b, uint64_t v, int w)
{
	char s[32];
	struct vmap_buf c = {VMAP_BUF_COLLECT, 0, sizeof s - 1, s, 0};
	vmap_buf_bytes(&c, v);
	s[c.len] = '\0';
	vmap_buf_cell(b, s, w);
}

static void cell_u64(struct vmap_buf *b, uint64_t v, int w)
{
	char s[32];
	struct vmap_buf c = {VMAP_BUF_COLLECT, 0, sizeof s - 1, s, 0};
	vmap_buf_u64(&c, v);
	s[c.len] = '\0';
	vmap_buf_cell(b, s, w);
}

static void write_tables_text(struct vmap_buf *b, const struct figures *f)
{
	unsigned ns = nshards_now();
	if (!ns)
		return;
	vmap_buf_str(b, "\n  shards (read without their locks: approximate; free runs by state)"
			"\n    shard     cached  pooled");
	for (unsigned k = 0; k < NSTATES; k++)
		vmap_buf_cell(b, state_name(k), 11);
	vmap_buf_str(b, "      locks  contended");
	for (unsigned i = 0; i < ns; i++) {
		struct shard_row r;
		shard_row(i, &r);
		if (!r.cached && !r.pooled_areas && !r.locks && i >= 8) {
			bool any = false;
			for (unsigned k = 0; k < NSTATES; k++)
				any |= r.free_bytes[k] != 0;
			if (!any)
				continue; /* many idle shards: only the busy ones */
		}
		vmap_buf_str(b, "\n    ");
		cell_u64(b, i, 5);
		cell_bytes(b, r.cached, 11);
		cell_u64(b, r.pooled_areas, 8);
		for (unsigned k = 0; k < NSTATES; k++)
			cell_bytes(b, r.free_bytes[k], 11);
		cell_u64(b, r.locks, 11);
		cell_u64(b, r.contended, 11);
	}
	uint64_t in_shards = shards_cached(), total = V(cached_bytes);
	vmap_buf_str(b, "\n  pools by size (freed areas waiting for reuse; thread caches hold ");
	vmap_buf_bytes(b, total > in_shards ? total - in_shards : 0);
	vmap_buf_str(b, " more)");
	bool any = false;
	for (unsigned c = 2; c < VMAP_NCLASSES; c++) {
		uint64_t n = class_areas(c);
		if (!n)
			continue;
		if (!any)
			vmap_buf_str(b, "\n          size   areas      bytes");
		any = true;
		uint64_t usable = (uint64_t)(c - 1) << VMAP_PAGE_SHIFT;
		vmap_buf_str(b, "\n    ");
		cell_bytes(b, usable, 10);
		cell_u64(b, n, 8);
		cell_bytes(b, n * usable, 11);
	}
	if (!any)
		vmap_buf_str(b, "\n    none");
}

static void write_text(struct vmap_buf *b, const struct figures *f)
{
	vmap_buf_str(b, "vmapalloc " VMAPALLOC_VERSION_STRING " report ");
	vmap_buf_str(b, f->when == WHEN_EXIT ? "at exit" : f->when == WHEN_SIGNAL ? "on signal"
										 : "on request");
	vmap_buf_str(b, ": pid ");
	vmap_buf_u64(b, (uint64_t)f->pid);
	vmap_buf_str(b, " (");
	vmap_buf_str(b, f->comm);
	vmap_buf_char(b, ')');
	if (f->parent) {
		vmap_buf_str(b, ", forked child of pid ");
		vmap_buf_u64(b, (uint64_t)f->parent);
	}
	vmap_buf_str(b, ", ");
	vmap_buf_ms(b, f->elapsed_ns);
	vmap_buf_str(b, " after start");
	if (f->threads > 1) {
		vmap_buf_str(b, "\n  (");
		vmap_buf_u64(b, f->threads - (f->when == WHEN_EXIT ? 1 : 0));
		vmap_buf_str(b, f->when == WHEN_EXIT ? " other thread(s) still running"
						     : " thread(s) running");
		vmap_buf_str(b, ": figures may be approximate)");
	}

	line(b, "large blocks in use");
	vmap_buf_bytes(b, V(large_bytes_in_use));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, V(large_blocks_in_use));
	vmap_buf_str(b, " blocks (peak ");
	vmap_buf_bytes(b, PEAK);
	vmap_buf_char(b, ')');
	line(b, "small blocks in use");
	if (f->small) {
		vmap_buf_bytes(b, f->small_in_use);
		vmap_buf_str(b, " (glibc, of a ");
		vmap_buf_bytes(b, f->small_heap);
		vmap_buf_str(b, " heap)");
		if (V(slabs_made)) {
			vmap_buf_str(b, " + builtin slabs ");
			vmap_buf_bytes(b, V(slab_bytes));
			vmap_buf_str(b, " in ");
			vmap_buf_u64(b, V(slabs_in_use));
		}
		vmap_buf_str(b, "; in all ");
		vmap_buf_bytes(b, f->small_in_use + V(slab_bytes) + V(large_bytes_in_use) +
				      V(mmap_bytes_in_use));
	} else {
		vmap_buf_str(b, "(glibc's figures are not read in a signal handler)");
	}
	line(b, "resident (VmRSS)");
	vmap_buf_bytes(b, f->rss);
	vmap_buf_str(b, " (peak ");
	vmap_buf_bytes(b, f->hwm);
	vmap_buf_char(b, ')');
	if (f->rollup) {
		vmap_buf_str(b, "; AnonHugePages ");
		vmap_buf_bytes(b, f->anon_huge);
		vmap_buf_str(b, ", LazyFree ");
		vmap_buf_bytes(b, f->lazy_free);
	}
	line(b, "cached for reuse");
	vmap_buf_bytes(b, V(cached_bytes));
	if (!vmap_range_enabled()) {
		vmap_buf_str(b, " (no arena yet: set up on the first large block or served mmap)");
		goto reserved;
	}
	vmap_buf_str(b, " (purged above ");
	vmap_buf_bytes(b, vmap_lazy_limit);
	if (vmap_lazy_limit != vmap_lazy_max) {
		vmap_buf_str(b, ", raised from ");
		vmap_buf_bytes(b, vmap_lazy_max);
	}
	if (vmap_opt.purge_delay_ms) {
		vmap_buf_str(b, " or after ");
		vmap_buf_u64(b, vmap_opt.purge_delay_ms);
		vmap_buf_str(b, " ms");
	}
	vmap_buf_char(b, ')');
reserved:
	line(b, "address space reserved");
	vmap_buf_bytes(b, V(mapped_bytes));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, V(regions));
	vmap_buf_str(b, " region(s), ");
	vmap_buf_u64(b, nshards_now());
	vmap_buf_str(b, " shard(s) (virtual: untouched pages cost nothing)");
	line(b, "mappings");
	vmap_buf_u64(b, f->maps);
	if (f->max_maps) {
		vmap_buf_str(b, " of vm.max_map_count ");
		vmap_buf_u64(b, f->max_maps);
		vmap_buf_str(b, " (");
		vmap_buf_pct(b, f->maps, f->max_maps);
		vmap_buf_char(b, ')');
	}
	line(b, "calls");
	vmap_buf_str(b, "malloc ");
	vmap_buf_u64(b, V(malloc_calls));
	vmap_buf_str(b, ", free ");
	vmap_buf_u64(b, V(free_calls));
	vmap_buf_str(b, ", calloc ");
	vmap_buf_u64(b, V(calloc_calls));
	vmap_buf_str(b, ", realloc ");
	vmap_buf_u64(b, V(realloc_calls));
	vmap_buf_str(b, ", aligned ");
	vmap_buf_u64(b, V(memalign_calls));
	line(b, V(slabs_made) ? "small / large" : "small (glibc) / large");
	vmap_buf_u64(b, V(small_allocs));
	vmap_buf_str(b, " / ");
	vmap_buf_u64(b, V(large_allocs));
	vmap_buf_str(b, " allocations (");
	vmap_buf_bytes(b, V(large_bytes_allocated));
	vmap_buf_str(b, " large in total); frees ");
	vmap_buf_u64(b, V(small_frees));
	vmap_buf_str(b, " / ");
	vmap_buf_u64(b, V(large_frees));
	if (V(foreign_pointers)) {
		vmap_buf_str(b, "; foreign pointers left alone ");
		vmap_buf_u64(b, V(foreign_pointers));
	}
	line(b, "large reuse");
	uint64_t served = V(pool_hits) + V(run_hits) + V(pool_misses);
	vmap_buf_str(b, "pool hits ");
	vmap_buf_u64(b, V(pool_hits));
	vmap_buf_str(b, " (");
	vmap_buf_pct(b, V(pool_hits), served);
	vmap_buf_str(b, "), resident runs ");
	vmap_buf_u64(b, V(run_hits));
	vmap_buf_str(b, " (");
	vmap_buf_pct(b, V(run_hits), served);
	vmap_buf_str(b, "; ");
	vmap_buf_u64(b, V(run_steals));
	vmap_buf_str(b, " from another shard), fresh ");
	vmap_buf_u64(b, V(pool_misses));
	vmap_buf_str(b, " (page faults; ");
	vmap_buf_u64(b, V(run_extends));
	vmap_buf_str(b, " extending a resident run); calloc zeroing skipped ");
	vmap_buf_u64(b, V(calloc_zero_skipped));
	line(b, "realloc of large blocks");
	vmap_buf_str(b, "in place ");
	vmap_buf_u64(b, V(realloc_in_place));
	vmap_buf_str(b, ", pages moved ");
	vmap_buf_u64(b, V(realloc_moved_pages));
	vmap_buf_str(b, ", copied ");
	vmap_buf_u64(b, V(realloc_copied));
	line(b, "purges");
	vmap_buf_u64(b, V(purges));
	vmap_buf_str(b, ": ");
	vmap_buf_bytes(b, V(purged_bytes));
	vmap_buf_str(b, " returned in ");
	vmap_buf_u64(b, V(purge_syscalls));
	vmap_buf_str(b, vmap_opt.purge_advice == VMAP_ADVICE_FREE ? " system calls (MADV_FREE), "
								   : " system calls (MADV_DONTNEED), ");
	vmap_buf_ms(b, V(purge_ns));
	line(b, "program's mmap");
	vmap_buf_str(b, "served ");
	vmap_buf_u64(b, V(mmap_served));
	vmap_buf_str(b, " (");
	vmap_buf_bytes(b, V(mmap_bytes_in_use));
	vmap_buf_str(b, " in use), passed to the kernel ");
	vmap_buf_u64(b, V(mmap_passed));
	vmap_buf_str(b, "; munmap ");
	vmap_buf_u64(b, V(munmap_served));
	vmap_buf_str(b, " (partial ");
	vmap_buf_u64(b, V(munmap_partial));
	vmap_buf_str(b, "), mremap ");
	vmap_buf_u64(b, V(mremap_calls));
	vmap_buf_str(b, ", refused ");
	vmap_buf_u64(b, V(mmap_refused));
	line(b, "locks");
	vmap_buf_str(b, "shared ");
	vmap_buf_u64(b, V(shared_lock_acquisitions));
	vmap_buf_str(b, ", shard ");
	vmap_buf_u64(b, V(shard_lock_acquisitions));
	vmap_buf_str(b, " (contended ");
	vmap_buf_pct(b, V(shard_lock_contended), V(shard_lock_acquisitions));
	vmap_buf_char(b, ')');
	line(b, "counters");
	if (!f->switch_ns) {
		vmap_buf_str(b, "atomic (no second thread has allocated yet)");
	} else if (f->switch_ns == 1) {
		vmap_buf_str(b, "per-CPU from the start");
	} else {
		vmap_buf_str(b, "per-CPU since the second thread, ");
		vmap_buf_ms(b, f->switch_ns);
		vmap_buf_str(b, " after start");
	}
	write_tables_text(b, f);
}

/* ---- JSON ---------------------------------------------------------------- */

static void key(struct vmap_buf *b, const char *k)
{
	vmap_buf_str(b, ", \"");
	vmap_buf_str(b, k);
	vmap_buf_str(b, "\": ");
}

static void kv(struct vmap_buf *b, const char *k, uint64_t v)
{
	key(b, k);
	vmap_buf_u64(b, v);
}

static void kv_opt(struct vmap_buf *b, const char *k, bool have, uint64_t v)
{
	key(b, k);
	if (have)
		vmap_buf_u64(b, v);
	else
		vmap_buf_str(b, "null");
}

static void write_json(struct vmap_buf *b, const struct figures *f)
{
	vmap_buf_str(b, "{\"vmapalloc_report_version\": ");
	vmap_buf_u64(b, REPORT_VERSION);
	key(b, "version");
	vmap_buf_json_str(b, VMAPALLOC_VERSION_STRING);
	key(b, "when");
	vmap_buf_json_str(b, when_name[f->when]);
	kv(b, "pid", (uint64_t)f->pid);
	kv(b, "parent_pid", (uint64_t)f->parent);
	key(b, "program");
	vmap_buf_json_str(b, f->comm);
	kv(b, "elapsed_ns", f->elapsed_ns);
	kv(b, "threads", f->threads);
	key(b, "approximate");
	vmap_buf_str(b, f->threads > 1 || f->when == WHEN_SIGNAL ? "true" : "false");
	kv(b, "large_bytes_in_use", V(large_bytes_in_use));
	kv(b, "large_blocks_in_use", V(large_blocks_in_use));
	kv(b, "large_bytes_peak", PEAK);
	kv_opt(b, "small_bytes_in_use", f->small, f->small_in_use);
	kv_opt(b, "small_heap_bytes", f->small, f->small_heap);
	kv_opt(b, "bytes_in_use", f->small,
	       f->small_in_use + V(large_bytes_in_use) + V(mmap_bytes_in_use));
	kv(b, "resident_bytes", f->rss);
	kv(b, "resident_peak_bytes", f->hwm);
	kv_opt(b, "anon_huge_pages_bytes", f->rollup, f->anon_huge);
	kv_opt(b, "lazy_free_bytes", f->rollup, f->lazy_free);
	kv(b, "mapped_bytes", V(mapped_bytes));
	kv(b, "cached_bytes", V(cached_bytes));
	kv(b, "lazy_max_bytes", vmap_lazy_max);
	kv(b, "lazy_limit_bytes", vmap_lazy_limit);
	kv(b, "purge_delay_ms", vmap_opt.purge_delay_ms);
	key(b, "purge_advice");
	vmap_buf_str(b, vmap_opt.purge_advice == VMAP_ADVICE_FREE ? "\"free\"" : "\"dontneed\"");
	kv(b, "mappings", f->maps);
	kv_opt(b, "max_map_count", f->max_maps != 0, f->max_maps);
	kv(b, "shards", nshards_now());
	key(b, "counter_mode");
	vmap_buf_str(b, f->switch_ns ? "\"percpu\"" : "\"atomic\"");
	kv_opt(b, "counter_switch_ns", f->switch_ns != 0, f->switch_ns == 1 ? 0 : f->switch_ns);
	key(b, "counters");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		vmap_buf_str(b, i ? ", \"" : "{\"");
		vmap_buf_str(b, vmap_stat_name(i));
		vmap_buf_str(b, "\": ");
		vmap_buf_u64(b, f->v[i]);
	}
	vmap_buf_char(b, '}');
	key(b, "shard_table");
	vmap_buf_char(b, '[');
	for (unsigned i = 0; i < nshards_now(); i++) {
		struct shard_row r;
		shard_row(i, &r);
		vmap_buf_str(b, i ? ", {\"shard\": " : "{\"shard\": ");
		vmap_buf_u64(b, i);
		kv(b, "cached_bytes", r.cached);
		kv(b, "pooled_areas", r.pooled_areas);
		for (unsigned k = 0; k < NSTATES; k++) {
			char name[32] = "free_";
			size_t n = 5;
			for (const char *p = state_name(k); *p; p++)
				name[n++] = *p;
			memcpy(name + n, "_bytes", 7);
			kv(b, name, r.free_bytes[k]);
		}
		kv(b, "lock_acquisitions", r.locks);
		kv(b, "lock_contended", r.contended);
		vmap_buf_char(b, '}');
	}
	vmap_buf_char(b, ']');
	uint64_t in_shards = shards_cached();
	kv(b, "thread_cache_bytes", V(cached_bytes) > in_shards ? V(cached_bytes) - in_shards : 0);
	key(b, "size_table");
	vmap_buf_char(b, '[');
	bool first = true;
	for (unsigned c = 2; c < VMAP_NCLASSES && nshards_now(); c++) {
		uint64_t n = class_areas(c);
		if (!n)
			continue;
		vmap_buf_str(b, first ? "{\"usable_bytes\": " : ", {\"usable_bytes\": ");
		first = false;
		vmap_buf_u64(b, (uint64_t)(c - 1) << VMAP_PAGE_SHIFT);
		kv(b, "areas", n);
		vmap_buf_char(b, '}');
	}
	vmap_buf_char(b, ']');
}

/* ---- one report, whatever its destination -------------------------------- */

static void write_report(struct vmap_buf *b, int format, int when)
{
	struct figures f;
	collect(&f, when);
	if (format == VMAP_FORMAT_JSON) {
		write_json(b, &f);
		key(b, "profile");
	} else {
		write_text(b, &f);
	}
	if (when == WHEN_SIGNAL)
		vmap_profile_report_in_signal(b, (int)format);
	else
		vmap_profile_report(b, (int)format);
	vmap_buf_str(b, format == VMAP_FORMAT_JSON ? "}\n" : "\n");
}

int vmap_stats_write(int fd, int format)
{
	VMAP_BUF(b, fd, 4096);
	write_report(&b, format, WHEN_REQUEST);
	vmap_buf_flush(&b);
	return b.err;
}

void vmap_stats_xml(struct vmap_buf *b)
{
	struct figures f;
	collect(&f, WHEN_REQUEST);
	vmap_buf_str(b, "<malloc version=\"vmapalloc-1\">\n");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		vmap_buf_str(b, "<stat name=\"");
		vmap_buf_str(b, vmap_stat_name(i));
		vmap_buf_str(b, "\" value=\"");
		vmap_buf_u64(b, f.v[i]);
		vmap_buf_str(b, "\"/>\n");
	}
	static const char sys[][24] = {"resident_bytes", "resident_peak_bytes", "small_bytes_in_use",
				       "small_heap_bytes", "mappings"};
	uint64_t val[] = {f.rss, f.hwm, f.small_in_use, f.small_heap, f.maps};
	for (unsigned i = 0; i < sizeof val / sizeof val[0]; i++) {
		vmap_buf_str(b, "<system name=\"");
		vmap_buf_str(b, sys[i]);
		vmap_buf_str(b, "\" value=\"");
		vmap_buf_u64(b, val[i]);
		vmap_buf_str(b, "\"/>\n");
	}
	vmap_buf_str(b, "</malloc>\n");
}

/* ---- destinations -------------------------------------------------------- */

/* Expands %p (pid), %e (program name) and %% into out, then inserts suffix
 * (if any) before the extension of the last path component; false if it
 * does not fit. */
static bool expand_path(const char *pat, const char *suffix, char *out, size_t cap)
{
	char comm[64], num[24];
	size_t n = 0;
	for (const char *p = pat; *p; p++) {
		const char *ins;
		char one[2] = {*p, 0};
		if (p[0] == '%' && p[1] == 'p') {
			struct vmap_buf nb = {VMAP_BUF_COLLECT, 0, sizeof num - 1, num, 0};
			vmap_buf_u64(&nb, (uint64_t)vmap_os_getpid());
			num[nb.len] = '\0';
			ins = num;
			p++;
		} else if (p[0] == '%' && p[1] == 'e') {
			program_name(comm, sizeof comm);
			ins = comm;
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			ins = "%";
			p++;
		} else {
			ins = one;
		}
		for (; *ins; ins++) {
			if (n + 1 >= cap)
				return false;
			out[n++] = *ins;
		}
	}
	out[n] = '\0';
	if (suffix) {
		size_t dot = n, sl = strlen(suffix);
		for (size_t i = n; i-- > 0 && out[i] != '/';)
			if (out[i] == '.' && i > 0 && out[i - 1] != '/') {
				dot = i;
				break;
			}
		if (n + sl + 1 > cap)
			return false;
		/* By hand, not memmove: one libc import (a symbol look-up in
		 * every process at load, issue 5) for a path of a few bytes. */
		for (size_t i = n + 1; i-- > dot;)
			out[i + sl] = out[i];
		memcpy(out + dot, suffix, sl);
	}
	return true;
}

static bool to_stderr(void)
{
	const char *d = vmap_opt.stats;
	return !d[0] || (d[0] == '1' && d[1] == '\0');
}

/* Opens the destination of one report; -1 after saying why on stderr. */
static int open_dest(const char *suffix, bool *close_it)
{
	*close_it = false;
	if (to_stderr())
		return report_fd;
	char path[512];
	if (!expand_path(vmap_opt.stats, suffix, path, sizeof path)) {
		vmap_say("VMAPALLOC_STATS: the path is too long; no report written", NULL, NULL);
		return -1;
	}
	int fd = vmap_os_open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd < 0) {
		vmap_say("VMAPALLOC_STATS: no report written: cannot create ", path,
			 fd == -EEXIST ? " (it exists: vmapalloc never overwrites a file or follows a "
					 "symbolic link; use %p for one file per process)"
				       : " (the directory is missing or not writable)");
		return -1;
	}
	*close_it = true;
	return fd;
}

static void report_to(int fd, int when)
{
	VMAP_BUF(b, fd, 4096);
	write_report(&b, (int)vmap_opt.stats_format, when);
	vmap_buf_flush(&b);
}

static void on_signal(int sig)
{
	(void)sig;
	int saved = errno;
	if (__atomic_exchange_n(&signal_busy, 1, __ATOMIC_ACQUIRE)) {
		errno = saved;
		return; /* a report is being written: one at a time */
	}
	uint32_t was_busy = vmap_profile_tls.busy;
	vmap_profile_tls.busy = 1; /* a profile hook interrupted here: do not re-enter it */
	char suffix[24] = "-sig";
	struct vmap_buf nb = {VMAP_BUF_COLLECT, 4, sizeof suffix - 1, suffix, 0};
	vmap_buf_u64(&nb, __atomic_add_fetch(&signal_reports, 1, __ATOMIC_RELAXED));
	suffix[nb.len] = '\0';
	bool close_it;
	int fd = open_dest(suffix, &close_it);
	if (fd >= 0) {
		report_to(fd, WHEN_SIGNAL);
		if (close_it)
			vmap_os_close(fd);
	}
	vmap_profile_tls.busy = was_busy;
	__atomic_store_n(&signal_busy, 0, __ATOMIC_RELEASE);
	errno = saved;
}

static void install_signal(void)
{
	static const int sigs[] = {0, SIGUSR1, SIGUSR2, SIGPROF};
	unsigned i = (unsigned)vmap_opt.stats_signal;
	if (i == 0 || i >= sizeof sigs / sizeof sigs[0])
		return;
	/* Looked up here, not imported: only VMAPALLOC_STATS_SIGNAL needs it,
	 * and an import costs every process a symbol look-up at load. */
	int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *) =
		(__typeof__(sigaction_fn))vmap_elf_symbol(LIBC_SO, "sigaction");
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa); /* sa_mask: the empty set */
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	if (!sigaction_fn) {
		vmap_say("VMAPALLOC_STATS_SIGNAL: glibc's sigaction not found; no report on the signal",
			 NULL, NULL);
		return;
	}
	if (sigaction_fn(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_DFL &&
	    old.sa_handler != SIG_IGN) {
		vmap_say("VMAPALLOC_STATS_SIGNAL: the signal already has a handler; "
			 "leaving it (no report on the signal)", NULL, NULL);
		return;
	}
	if (sigaction_fn(sigs[i], &sa, NULL) == 0)
		report_signal = sigs[i];
}

void vmap_stats_init(void)
{
	start_ns = vmap_os_now_ns_syscall(); /* no vDSO page touched at start */
	/* Programs may close fd 2 before our destructor runs (coreutils does it
	 * in an atexit handler): keep a private duplicate, close-on-exec, high
	 * enough to stay out of the program's way. */
	if (to_stderr() && (vmap_opt.stats[0] || vmap_opt.stats_signal || vmap_opt.profile)) {
		int fd = vmap_os_dup_cloexec(2, 500);
		if (fd >= 0)
			report_fd = fd;
	}
	install_signal();
}

/* The parent's pid is asked for by fork, not at start: one getpid fewer in
 * every process, and one more per fork, which costs far more anyway. */
void vmap_stats_fork_prepare(void)
{
	fork_parent_pid = vmap_os_getpid();
}

void vmap_stats_fork_child(void)
{
	parent_pid = fork_parent_pid;
	__atomic_store_n(&signal_busy, 0, __ATOMIC_RELAXED);
	signal_reports = 0;
}

void vmap_stats_at_exit(void)
{
	/* VMAPALLOC_PROFILE=1 alone: the sites are what was asked for, on stderr. */
	if (!vmap_opt.stats[0] && !vmap_opt.profile)
		return;
	bool close_it;
	int fd = open_dest(NULL, &close_it);
	if (fd < 0)
		return;
	report_to(fd, WHEN_EXIT);
	if (close_it)
		vmap_os_close(fd);
}
