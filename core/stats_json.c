/*
 * stats_json.c — the report as JSON ("vmapalloc_report_version": 1), and the
 * XML of malloc_info().
 *
 * The JSON keys are stable: programs parse them.  A key is never renamed or
 * moved; a new one goes at the end of its object.  The top-level figures are
 * a table (top[]) of key, figure and condition; "counters" is every statistic
 * of stats.def under its own name.
 *
 * Invariants: reads only the figures and the shard tables (stats.c); no
 * allocation, stdio or lock.
 *
 * Called by: stats_out.c (write_report), alloc.c (malloc_info, through
 * vmap_stats_xml).
 */
#include "stats.h"
#include "stats_report.h"
#include "vmapalloc.h"

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

/* Inline arrays, not pointers: no relocation for ld.so to apply at load. */
static const struct json_key top[] = {
	{"elapsed_ns", F(elapsed_ns), NUMBER, 0},
	{"threads", F(threads), NUMBER, 0},
	{"approximate", 0, WORD_BOOL, IS_APPROX},
	{"large_bytes_in_use", F(large_bytes_in_use), NUMBER, 0},
	{"large_blocks_in_use", F(large_blocks_in_use), NUMBER, 0},
	{"large_bytes_peak", F(large_bytes_peak), NUMBER, 0},
	{"small_bytes_in_use", F(small_in_use), NUMBER, IS_SMALL},
	{"small_heap_bytes", F(small_heap), NUMBER, IS_SMALL},
	{"slab_bytes_in_use", F(slab_in_use), NUMBER, 0},
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
	{"mappings_own", F(own_maps), NUMBER, 0},
	{"max_map_count", F(max_maps), NUMBER, IS_MAX_MAPS},
	{"shards", F(shards), NUMBER, 0},
	{"lock_waits", F(lock_waits), NUMBER, 0},
	{"lock_sleeps", F(lock_sleeps), NUMBER, 0},
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
		vmap_buf_printf(b, "%s{\"shard\": %u, \"serves\": \"%s\", \"cached_bytes\": %U, "
				"\"pooled_areas\": %U", i ? ", " : "", i, r.mmap ? "mmap" : "malloc",
				r.cached, r.pooled_areas);
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

static const char backend_name[][10] = {"libc", "builtin", "auto", "mimalloc"};

/* The small backend in use, and what each small allocator served and holds:
 * glibc's bytes from its mallinfo2 (null in a signal handler), the slabs'
 * address space, mimalloc's committed memory. */
static void write_backends(struct vmap_buf *b, const struct vmap_figures *f)
{
	const uint64_t *v = f->v;
	vmap_buf_printf(b, ", \"backend\": \"%s\", \"small_backends\": {\"glibc\": {\"allocs\": %U, "
			"\"frees\": %U, \"bytes_in_use\": ",
			backend_name[v[FIG_backend] & 3], v[FIG_small_glibc_allocs],
			v[FIG_small_glibc_frees]);
	if (f->is & IS_SMALL)
		vmap_buf_printf(b, "%U", v[FIG_small_in_use]);
	else
		vmap_buf_str(b, "null");
	vmap_buf_printf(b, "}, \"slabs\": {\"allocs\": %U, \"frees\": %U, \"bytes\": %U}, "
			"\"mimalloc\": {\"allocs\": %U, \"frees\": %U, \"committed_bytes\": %U, "
			"\"committed_peak_bytes\": %U}}",
			v[FIG_small_slab_allocs], v[FIG_small_slab_frees], v[FIG_slab_bytes],
			v[FIG_small_mimalloc_allocs], v[FIG_small_mimalloc_frees],
			v[FIG_mimalloc_bytes], v[FIG_mimalloc_peak]);
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
	write_backends(b, f);
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
		{"slab_bytes_in_use", FIG_slab_in_use}, {"mappings", FIG_maps},
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
