/*
 * stats.c — the statistics' values and names, and the report: its figures
 * (the counters of stats.def, what /proc says, glibc's own figures, the shard
 * tables), its text and JSON from tables, malloc_info's XML, and its
 * destinations.
 *
 * A report is written (1) at exit, from the library's destructor, when
 * VMAPALLOC_STATS is set: to a private duplicate of stderr (=1), or to a new
 * file (=PATH; %p = pid, %e = program name, %% = %) created with
 * O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, so that no existing file is ever
 * overwritten or followed through a symbolic link; (2) on VMAPALLOC_STATS_SIGNAL
 * while the program runs, to the same stderr, or to PATH with "-sigN" put
 * before its extension (the N-th signal), from a SA_RESTART handler installed
 * at init -- a handler the program installs later for that signal replaces
 * ours, and the program's wins; (3) on request (vmapalloc_stats_print,
 * malloc_stats).  A forked child that does not exec writes its own report at
 * its exit, labelled with its pid and its parent's (and, with %p, to its own
 * file); one that leaves with _exit() or exec writes none.  VMAPALLOC_PROFILE=1
 * without VMAPALLOC_STATS reports to stderr at exit.
 *
 * Invariants:
 *  - Never allocates, never uses stdio, never takes a lock: figures are read
 *    with relaxed loads (shard tables without their locks: "approximate"), so
 *    a report cannot wait on a thread stopped anywhere.
 *  - In a signal handler (VMAP_WHEN_SIGNAL) only raw system calls and memory
 *    reads: the counters without folding this thread's pending counts (it may
 *    have been interrupted in the middle of an update), and no mallinfo2.
 *  - Renderers read only the figures and the shard tables.  The formats of
 *    lines[] use only conversions that take one uint64_t (%U, %B, %M) or two
 *    (%P): every argument is a figure, and the unused ones of the eight
 *    passed are ignored.  The JSON keys are stable: never renamed or moved.
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
#include "stats_report.h"
#include "vmapalloc.h"

uint64_t vmap_report_start_ns VMAP_HOT;
int vmap_report_parent_pid;

/* Inline arrays, not pointers: no relocation for ld.so to apply at load. */
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

/* s starts with key[0..kl): strncmp without importing it from libc. */
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

void vmap_report_program_name(char *out, size_t cap)
{
	long n = vmap_os_read_file("/proc/self/comm", out, cap);
	for (long i = 0; i < n; i++)
		if (out[i] == '\n')
			out[i] = '\0';
		else if (out[i] == '/')
			out[i] = '_';
}

/* Lines of /proc/self/maps: the process's mappings (VMAs).  Streamed, not
 * vmap_os_read_file: the file is ~100 bytes a mapping, and vm.max_map_count
 * allows 65530 of them. */
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

/* ---- shard and size tables (no locks: approximate) ----------------------- */

static const char state_names[][12] = {"zero", "dirty", "advised", "guarded", "protected"};

const char *vmap_report_state_name(unsigned k)
{
	return k < sizeof state_names / sizeof state_names[0] ? state_names[k] : "other";
}

unsigned vmap_report_nshards(void)
{
	return vmap_range_enabled() && vmap_shards ? vmap_nshards : 0;
}

void vmap_report_shard_row(unsigned i, struct vmap_shard_row *r)
{
	const struct vmap_shard *s = &vmap_shards[i];
	memset(r, 0, sizeof *r);
	r->cached = __atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED);
	r->locks = __atomic_load_n(&s->lock_acquisitions, __ATOMIC_RELAXED);
	r->contended = __atomic_load_n(&s->lock_contended, __ATOMIC_RELAXED);
	for (unsigned c = 0; c < VMAP_NCLASSES; c++)
		r->pooled_areas += __atomic_load_n(&s->pool[c].count, __ATOMIC_RELAXED);
	for (unsigned l = 0; l < VMAP_RUN_LISTS; l++)
		r->free_bytes[l % VMAP_NSTATES] +=
			__atomic_load_n(&s->free_pages[l], __ATOMIC_RELAXED) << VMAP_PAGE_SHIFT;
}

uint64_t vmap_report_class_areas(unsigned c)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < vmap_report_nshards(); i++)
		n += __atomic_load_n(&vmap_shards[i].pool[c].count, __ATOMIC_RELAXED);
	return n;
}

static uint64_t shards_cached(void)
{
	uint64_t t = 0;
	for (unsigned i = 0; i < vmap_report_nshards(); i++)
		t += __atomic_load_n(&vmap_shards[i].cached_bytes, __ATOMIC_RELAXED);
	return t;
}

/* ---- the figures of one report ----------------------------------------- */

void vmap_report_derive(struct vmap_figures *f)
{
	uint64_t *v = f->v;
	uint32_t is = f->is & (IS_SMALL | IS_ROLLUP); /* read by collect */
	is |= f->when == VMAP_WHEN_EXIT ? IS_EXIT : IS_NOT_EXIT;
	is |= v[FIG_parent_pid] ? IS_PARENT : 0;
	is |= v[FIG_threads] > 1 ? IS_THREADS | IS_APPROX : 0;
	is |= f->when == VMAP_WHEN_SIGNAL ? IS_APPROX : 0;
	is |= is & IS_SMALL ? 0 : IS_NO_SMALL;
	is |= v[FIG_slabs_made] ? IS_SLABS : IS_NO_SLABS;
	is |= vmap_range_enabled() ? IS_ARENA : IS_NO_ARENA;
	is |= vmap_lazy_limit != vmap_lazy_max ? IS_RAISED : 0;
	is |= vmap_opt.purge_delay_ms ? IS_DELAY : 0;
	is |= v[FIG_max_maps] ? IS_MAX_MAPS : 0;
	is |= v[FIG_foreign_pointers] ? IS_FOREIGN : 0;
	is |= vmap_opt.purge_advice == VMAP_ADVICE_FREE ? IS_MADV_FREE : IS_MADV_DONTNEED;
	is |= !v[FIG_switch_ns]       ? IS_ATOMIC
	      : v[FIG_switch_ns] == 1 ? IS_PERCPU | IS_PERCPU_START
				      : IS_PERCPU | IS_PERCPU_LATER;
	f->is = is;

	v[FIG_threads_other] = v[FIG_threads] ? v[FIG_threads] - 1 : 0;
	v[FIG_small_all] = v[FIG_small_in_use] + v[FIG_slab_bytes] + v[FIG_large_bytes_in_use] +
			   v[FIG_mmap_bytes_in_use];
	v[FIG_bytes_in_use] =
		v[FIG_small_in_use] + v[FIG_large_bytes_in_use] + v[FIG_mmap_bytes_in_use];
	v[FIG_counter_switch_ns] = v[FIG_switch_ns] == 1 ? 0 : v[FIG_switch_ns];
	v[FIG_lazy_max] = vmap_lazy_max;
	v[FIG_lazy_limit] = vmap_lazy_limit;
	v[FIG_purge_delay_ms] = vmap_opt.purge_delay_ms;
	v[FIG_shards] = vmap_report_nshards();
	uint64_t in_shards = shards_cached();
	v[FIG_thread_cache_bytes] = v[FIG_cached_bytes] > in_shards ? v[FIG_cached_bytes] - in_shards : 0;
	v[FIG_large_served] = v[FIG_pool_hits] + v[FIG_run_hits] + v[FIG_pool_misses];
}

void vmap_report_collect(struct vmap_figures *f, int when)
{
	char buf[4096];
	uint64_t *v = f->v;
	memset(f, 0, sizeof *f);
	f->when = when;
	v[FIG_pid] = (uint64_t)vmap_os_getpid();
	v[FIG_parent_pid] = (uint64_t)vmap_report_parent_pid;
	vmap_report_program_name(f->comm, sizeof f->comm);
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++)
		v[i] = when == VMAP_WHEN_SIGNAL ? stat_peek(i) : vmap_stat_value(i);
	uint64_t now = vmap_os_now_ns(), start = vmap_report_start_ns;
	v[FIG_elapsed_ns] = start && now > start ? now - start : 0;
	if (vmap_counter_is_percpu()) {
		uint64_t sw = vmap_counter_switch_ns();
		v[FIG_switch_ns] = sw > start ? sw - start : 1;
	}
	vmap_os_read_file("/proc/self/status", buf, sizeof buf);
	v[FIG_rss] = field(buf, "VmRSS:", NULL) * 1024;
	v[FIG_hwm] = field(buf, "VmHWM:", NULL) * 1024;
	v[FIG_threads] = field(buf, "Threads:", NULL);
	vmap_os_read_file("/proc/self/smaps_rollup", buf, sizeof buf);
	bool found = false;
	v[FIG_anon_huge] = field(buf, "AnonHugePages:", &found) * 1024;
	v[FIG_lazy_free] = field(buf, "LazyFree:", &found) * 1024;
	f->is |= found ? IS_ROLLUP : 0;
	v[FIG_maps] = count_mappings();
	v[FIG_max_maps] = vmap_os_read_number("/proc/sys/vm/max_map_count");
	if (when != VMAP_WHEN_SIGNAL && vmap_libc.mallinfo2) {
		/* glibc's own figures: it takes its arena locks, so never here
		 * from a signal handler. */
		struct mallinfo2 mi = vmap_libc.mallinfo2();
		f->is |= IS_SMALL;
		v[FIG_small_in_use] = mi.uordblks + mi.hblkhd;
		v[FIG_small_heap] = mi.arena + mi.hblkhd;
	}
	vmap_report_derive(f);
}

/* ---- text ---------------------------------------------------------------- */

struct text_piece {
	uint32_t need;   /* IS_* bits that must all be set; 0: always */
	char label[24];  /* if not empty: a new line, the label in a 26-column cell */
	char fmt[88];
	uint8_t arg[8];  /* FIG_* indexes, in the order fmt takes them */
};

#define F(name) FIG_##name

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
	{IS_SMALL | IS_SLABS, "", " + builtin slabs %B in %U", {F(slab_bytes), F(slabs_in_use)}},
	{IS_SMALL, "", "; in all %B", {F(small_all)}},
	{IS_NO_SMALL, "small blocks in use", "(glibc's figures are not read in a signal handler)", {0}},

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

	{0, "mappings", "%U", {F(maps)}},
	{IS_MAX_MAPS, "", " of vm.max_map_count %U (%P)", {F(max_maps), F(maps), F(max_maps)}},

	{0, "calls", "malloc %U, free %U, calloc %U, realloc %U, aligned %U",
	 {F(malloc_calls), F(free_calls), F(calloc_calls), F(realloc_calls), F(memalign_calls)}},

	{IS_SLABS, "small / large", "", {0}},
	{IS_NO_SLABS, "small (glibc) / large", "", {0}},
	{0, "", "%U / %U allocations (%B large in total); frees %U / %U",
	 {F(small_allocs), F(large_allocs), F(large_bytes_allocated), F(small_frees), F(large_frees)}},
	{IS_FOREIGN, "", "; foreign pointers left alone %U", {F(foreign_pointers)}},

	{0, "large reuse", "pool hits %U (%P), resident runs %U (%P; %U from another shard)",
	 {F(pool_hits), F(pool_hits), F(large_served), F(run_hits), F(run_hits), F(large_served),
	  F(run_steals)}},
	{0, "", ", fresh %U (page faults; %U extending a resident run); calloc zeroing skipped %U",
	 {F(pool_misses), F(run_extends), F(calloc_zero_skipped)}},

	{0, "realloc of large blocks", "in place %U, pages moved %U, copied %U",
	 {F(realloc_in_place), F(realloc_moved_pages), F(realloc_copied)}},

	{0, "purges", "%U: %B returned in %U", {F(purges), F(purged_bytes), F(purge_syscalls)}},
	{IS_MADV_FREE, "", " system calls (MADV_FREE), ", {0}},
	{IS_MADV_DONTNEED, "", " system calls (MADV_DONTNEED), ", {0}},
	{0, "", "%M", {F(purge_ns)}},

	{0, "program's mmap", "served %U (%B in use), passed to the kernel %U",
	 {F(mmap_served), F(mmap_bytes_in_use), F(mmap_passed)}},
	{0, "", "; munmap %U (partial %U), mremap %U, refused %U",
	 {F(munmap_served), F(munmap_partial), F(mremap_calls), F(mmap_refused)}},

	{0, "locks", "shared %U, shard %U (contended %P)",
	 {F(shared_lock_acquisitions), F(shard_lock_acquisitions), F(shard_lock_contended),
	  F(shard_lock_acquisitions)}},

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
	vmap_buf_printf(b, "\n  shards (read without their locks: approximate; free runs by state)"
			   "\n    shard     cached  pooled");
	for (unsigned k = 0; k < VMAP_NSTATES; k++)
		vmap_buf_printf(b, "%11s", vmap_report_state_name(k));
	vmap_buf_printf(b, "      locks  contended");
	for (unsigned i = 0; i < ns; i++) {
		struct vmap_shard_row r;
		vmap_report_shard_row(i, &r);
		if (shard_idle(i, &r))
			continue;
		vmap_buf_printf(b, "\n    %5u%11B%8U", i, r.cached, r.pooled_areas);
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

/* ---- JSON and XML -------------------------------------------------------- */

#define REPORT_VERSION 1u

/* JSON's literals for a condition, false first: WORD_* index. */
enum { NUMBER, WORD_BOOL, WORD_ADVICE, WORD_COUNTERS };
static const char words[][2][12] = {
	{"", ""},
	{"false", "true"},
	{"\"dontneed\"", "\"free\""},
	{"\"atomic\"", "\"percpu\""},
};

/* A NUMBER prints figure fig, or null when need is set and not all of its
 * bits hold; a WORD_* prints words[kind][whether need holds]. */
struct json_key {
	char key[24];
	uint8_t fig;
	uint8_t kind;
	uint32_t need;
};

#define F(name) FIG_##name

static const struct json_key top[] = {
	{"elapsed_ns", F(elapsed_ns), NUMBER, 0},
	{"threads", F(threads), NUMBER, 0},
	{"approximate", 0, WORD_BOOL, IS_APPROX},
	{"large_bytes_in_use", F(large_bytes_in_use), NUMBER, 0},
	{"large_blocks_in_use", F(large_blocks_in_use), NUMBER, 0},
	{"large_bytes_peak", F(large_bytes_peak), NUMBER, 0},
	{"small_bytes_in_use", F(small_in_use), NUMBER, IS_SMALL},
	{"small_heap_bytes", F(small_heap), NUMBER, IS_SMALL},
	{"bytes_in_use", F(bytes_in_use), NUMBER, IS_SMALL},
	{"resident_bytes", F(rss), NUMBER, 0},
	{"resident_peak_bytes", F(hwm), NUMBER, 0},
	{"anon_huge_pages_bytes", F(anon_huge), NUMBER, IS_ROLLUP},
	{"lazy_free_bytes", F(lazy_free), NUMBER, IS_ROLLUP},
	{"mapped_bytes", F(mapped_bytes), NUMBER, 0},
	{"cached_bytes", F(cached_bytes), NUMBER, 0},
	{"lazy_max_bytes", F(lazy_max), NUMBER, 0},
	{"lazy_limit_bytes", F(lazy_limit), NUMBER, 0},
	{"purge_delay_ms", F(purge_delay_ms), NUMBER, 0},
	{"purge_advice", 0, WORD_ADVICE, IS_MADV_FREE},
	{"mappings", F(maps), NUMBER, 0},
	{"max_map_count", F(max_maps), NUMBER, IS_MAX_MAPS},
	{"shards", F(shards), NUMBER, 0},
	{"counter_mode", 0, WORD_COUNTERS, IS_PERCPU},
	{"counter_switch_ns", F(counter_switch_ns), NUMBER, IS_PERCPU},
};

#undef F

static const char when_name[][8] = {"exit", "signal", "request"};

static void write_shard_table(struct vmap_buf *b)
{
	vmap_buf_printf(b, ", \"shard_table\": [");
	for (unsigned i = 0; i < vmap_report_nshards(); i++) {
		struct vmap_shard_row r;
		vmap_report_shard_row(i, &r);
		vmap_buf_printf(b, "%s{\"shard\": %u, \"cached_bytes\": %U, \"pooled_areas\": %U",
				i ? ", " : "", i, r.cached, r.pooled_areas);
		for (unsigned k = 0; k < VMAP_NSTATES; k++)
			vmap_buf_printf(b, ", \"free_%s_bytes\": %U", vmap_report_state_name(k),
					r.free_bytes[k]);
		vmap_buf_printf(b, ", \"lock_acquisitions\": %U, \"lock_contended\": %U}", r.locks,
				r.contended);
	}
	vmap_buf_char(b, ']');
}

static void write_size_table(struct vmap_buf *b)
{
	vmap_buf_printf(b, ", \"size_table\": [");
	bool first = true;
	for (unsigned c = 2; c < VMAP_NCLASSES && vmap_report_nshards(); c++) {
		uint64_t n = vmap_report_class_areas(c);
		if (!n)
			continue;
		vmap_buf_printf(b, "%s{\"usable_bytes\": %U, \"areas\": %U}", first ? "" : ", ",
				(uint64_t)(c - 1) << VMAP_PAGE_SHIFT, n);
		first = false;
	}
	vmap_buf_char(b, ']');
}

void vmap_report_json(struct vmap_buf *b, const struct vmap_figures *f)
{
	const uint64_t *v = f->v;
	vmap_buf_printf(b,
			"{\"vmapalloc_report_version\": %u, \"version\": %J, \"when\": %J, "
			"\"pid\": %U, \"parent_pid\": %U, \"program\": %J",
			REPORT_VERSION, VMAPALLOC_VERSION_STRING, when_name[f->when], v[FIG_pid],
			v[FIG_parent_pid], f->comm);
	for (unsigned i = 0; i < sizeof top / sizeof top[0]; i++) {
		const struct json_key *k = &top[i];
		bool holds = (f->is & k->need) == k->need;
		vmap_buf_printf(b, ", \"%s\": ", k->key);
		if (k->kind != NUMBER)
			vmap_buf_str(b, words[k->kind][holds]);
		else if (!holds)
			vmap_buf_str(b, "null");
		else
			vmap_buf_printf(b, "%U", v[k->fig]);
	}
	vmap_buf_printf(b, ", \"counters\": ");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++)
		vmap_buf_printf(b, "%s\"%s\": %U", i ? ", " : "{", vmap_stat_name(i), v[i]);
	vmap_buf_char(b, '}');
	write_shard_table(b);
	vmap_buf_printf(b, ", \"thread_cache_bytes\": %U", v[FIG_thread_cache_bytes]);
	write_size_table(b);
}

/* malloc_info()'s XML: every statistic, then what the system says. */
void vmap_report_xml(struct vmap_buf *b, const struct vmap_figures *f)
{
	static const struct {
		char name[24];
		uint8_t fig;
	} sys[] = {
		{"resident_bytes", FIG_rss},         {"resident_peak_bytes", FIG_hwm},
		{"small_bytes_in_use", FIG_small_in_use}, {"small_heap_bytes", FIG_small_heap},
		{"mappings", FIG_maps},
	};
	vmap_buf_printf(b, "<malloc version=\"vmapalloc-1\">\n");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++)
		vmap_buf_printf(b, "<stat name=\"%s\" value=\"%U\"/>\n", vmap_stat_name(i), f->v[i]);
	for (unsigned i = 0; i < sizeof sys / sizeof sys[0]; i++)
		vmap_buf_printf(b, "<system name=\"%s\" value=\"%U\"/>\n", sys[i].name,
				f->v[sys[i].fig]);
	vmap_buf_printf(b, "</malloc>\n");
}

void vmap_stats_xml(struct vmap_buf *b)
{
	struct vmap_figures f;
	vmap_report_collect(&f, VMAP_WHEN_REQUEST);
	vmap_report_xml(b, &f);
}

static int fork_parent_pid; /* the forking process, taken before fork() */
static int report_fd = 2;
static int report_signal;
static unsigned signal_reports;
static int signal_busy;

/* ---- one report, whatever its destination -------------------------------- */

static void write_report(struct vmap_buf *b, int format, int when)
{
	struct vmap_figures f;
	vmap_report_collect(&f, when);
	if (format == VMAP_FORMAT_JSON) {
		vmap_report_json(b, &f);
		vmap_buf_str(b, ", \"profile\": ");
	} else {
		vmap_report_text(b, &f);
	}
	if (when == VMAP_WHEN_SIGNAL)
		vmap_profile_report_in_signal(b, format);
	else
		vmap_profile_report(b, format);
	vmap_buf_str(b, format == VMAP_FORMAT_JSON ? "}\n" : "\n");
}

int vmap_stats_write(int fd, int format)
{
	VMAP_BUF(b, fd, 4096);
	write_report(&b, format, VMAP_WHEN_REQUEST);
	vmap_buf_flush(&b);
	return b.err;
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
			vmap_report_program_name(comm, sizeof comm);
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
		 * every process at load) for a path of a few bytes. */
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
		report_to(fd, VMAP_WHEN_SIGNAL);
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
	vmap_report_start_ns = vmap_os_now_ns_syscall(); /* no vDSO page touched at start */
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
	vmap_report_parent_pid = fork_parent_pid;
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
	report_to(fd, VMAP_WHEN_EXIT);
	if (close_it)
		vmap_os_close(fd);
}
