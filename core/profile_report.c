/*
 * profile_report.c — the profile's part of the report: the top sites by
 * bytes, by count and live at exit, with their stacks, as text or JSON.
 *
 * A JSON frame names its object's file ("module") and the return address's
 * offset from the object's load address ("module_offset"), so that a tool
 * can find file:line with addr2line later; nothing here reads debug
 * information.
 *
 * Invariants: no allocation, stdio or lock; in a signal handler frames are
 * located, not named (vmap_prof_locate_in_signal).
 *
 * Called by: stats_out.c (vmap_profile_report, _in_signal).
 */
#include "profile_impl.h"

/* ---- the report ------------------------------------------------------------ */

enum { BY_BYTES, BY_COUNT, BY_LIVE, NTABLES };
/* Arrays of arrays, not of pointers: no relocations at load. */
static const char table_title[NTABLES][40] = {"by bytes allocated", "by number of allocations",
					      "still live (leak candidates at exit)"};
static const char table_key[NTABLES][12] = {"by_bytes", "by_count", "live"};
static const char kind_name[][8] = {"small", "large", "mmap"};

/* A site of sampled blocks: its figures are estimates. */
static bool estimated(const struct vmap_site *s)
{
	return s->kind == VMAP_PROFILE_SMALL || (s->kind == VMAP_PROFILE_LARGE && large_mean);
}

static int64_t site_key(const struct vmap_site *s, int table)
{
	int64_t v = table == BY_BYTES ? __atomic_load_n(&s->bytes, __ATOMIC_RELAXED)
		    : table == BY_COUNT ? __atomic_load_n(&s->count, __ATOMIC_RELAXED)
					: __atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED);
	return v;
}

/* Top `top` site ids by the table's key (> 0 only), largest first. */
static unsigned select_top(int table, uint32_t *out, unsigned top)
{
	uint32_t n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);
	unsigned k = 0;
	for (uint32_t id = 0; id <= n; id++) {
		int64_t v = site_key(&sites[id], table);
		if (v <= 0)
			continue;
		if (k == top && v <= site_key(&sites[out[k - 1]], table))
			continue;
		unsigned j = k < top ? k++ : top - 1;
		while (j > 0 && site_key(&sites[out[j - 1]], table) < v) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = id;
	}
	return k;
}

static uint64_t clamp0(int64_t v)
{
	return v < 0 ? 0 : (uint64_t)v;
}

static uint64_t whole_count(int64_t fp)
{
	return (clamp0(fp) + COUNT_ONE / 2) / COUNT_ONE;
}

static void frame_text(struct vmap_buf *b, const struct frame_name *fn)
{
	if (fn->func) {
		vmap_buf_str(b, fn->func);
		vmap_buf_char(b, '+');
		vmap_buf_hex(b, fn->off);
	} else {
		vmap_buf_hex(b, fn->rel);
	}
	if (fn->object) {
		vmap_buf_str(b, fn->func ? " (" : " in ");
		vmap_buf_str(b, fn->object);
		if (fn->func)
			vmap_buf_char(b, ')');
	}
}

static bool is_main(const char *f)
{
	return f && f[0] == 'm' && f[1] == 'a' && f[2] == 'i' && f[3] == 'n' && !f[4];
}

static void site_text(struct vmap_buf *b, struct symbolizer *z, const struct vmap_site *s,
		      bool frames)
{
	bool est = estimated(s);
	const char *approx = est ? "~" : "";
	vmap_buf_str(b, approx);
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, " in ");
	vmap_buf_str(b, approx);
	uint64_t count = whole_count(__atomic_load_n(&s->count, __ATOMIC_RELAXED));
	vmap_buf_u64(b, count);
	vmap_buf_char(b, ' ');
	vmap_buf_str(b, kind_name[s->kind < 3 ? s->kind : 0]);
	vmap_buf_str(b, s->kind == VMAP_PROFILE_MMAP ? " mapping" : " block");
	if (count != 1)
		vmap_buf_char(b, 's');
	if (s == &sites[0])
		vmap_buf_str(b, " of stacks that did not fit the site table");
	if (est) {
		int64_t n = __atomic_load_n(&s->samples, __ATOMIC_RELAXED);
		vmap_buf_str(b, " (");
		vmap_buf_u64(b, clamp0(n));
		vmap_buf_str(b, n == 1 ? " sample)" : " samples)");
	}
	vmap_buf_str(b, "; live ");
	vmap_buf_str(b, approx);
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->live_count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", peak ");
	vmap_buf_bytes(b, clamp0(__atomic_load_n(&s->live_peak, __ATOMIC_RELAXED)));
	if (!frames)
		return;
	unsigned shown = 0;
	for (unsigned i = 0; i < s->nframes; i++) {
		if (shown == FRAMES_SHOWN) {
			vmap_buf_str(b, "\n            ... ");
			vmap_buf_u64(b, s->nframes - i);
			vmap_buf_str(b, " more frame(s)");
			break;
		}
		struct frame_name fn;
		if (z->in_signal)
			vmap_prof_locate_in_signal(z, s->frames[i], &fn);
		else
			vmap_prof_symbolize(z, s->frames[i], &fn);
		vmap_buf_str(b, "\n            ");
		frame_text(b, &fn);
		shown++;
		if (is_main(fn.func))
			break; /* what lies below main is the C runtime */
	}
	if (!s->nframes)
		vmap_buf_str(b, "\n            (no stack)");
}

static void site_json(struct vmap_buf *b, struct symbolizer *z, const struct vmap_site *s)
{
	vmap_buf_str(b, "{\"kind\": \"");
	vmap_buf_str(b, kind_name[s->kind < 3 ? s->kind : 0]);
	vmap_buf_str(b, "\", \"estimated\": ");
	vmap_buf_str(b, estimated(s) ? "true" : "false");
	vmap_buf_str(b, ", \"bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"count\": ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->live_bytes, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_count\": ");
	vmap_buf_u64(b, whole_count(__atomic_load_n(&s->live_count, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"live_peak_bytes\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->live_peak, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"samples\": ");
	vmap_buf_u64(b, clamp0(__atomic_load_n(&s->samples, __ATOMIC_RELAXED)));
	vmap_buf_str(b, ", \"frames\": [");
	for (unsigned i = 0; i < s->nframes; i++) {
		struct frame_name fn;
		if (z->in_signal)
			vmap_prof_locate_in_signal(z, s->frames[i], &fn);
		else
			vmap_prof_symbolize(z, s->frames[i], &fn);
		vmap_buf_str(b, i ? ", {\"addr\": \"" : "{\"addr\": \"");
		vmap_buf_hex(b, s->frames[i]);
		vmap_buf_str(b, "\", \"function\": ");
		if (fn.func)
			vmap_buf_json_str(b, fn.func);
		else
			vmap_buf_str(b, "null");
		vmap_buf_str(b, ", \"offset\": ");
		vmap_buf_u64(b, fn.func ? fn.off : fn.rel);
		vmap_buf_str(b, ", \"object\": ");
		if (fn.object)
			vmap_buf_json_str(b, fn.object);
		else
			vmap_buf_str(b, "null");
		/* For addr2line -e module, at report time (vmapalloc-report). */
		vmap_buf_str(b, ", \"module\": ");
		if (fn.path)
			vmap_buf_json_str(b, fn.path);
		else
			vmap_buf_str(b, "null");
		vmap_buf_str(b, ", \"module_offset\": ");
		vmap_buf_u64(b, fn.rel);
		vmap_buf_char(b, '}');
	}
	vmap_buf_str(b, "]}");
}

/* Non-empty buckets: the largest size of each, the blocks and their bytes. */
static void write_histogram(struct vmap_buf *b)
{
	vmap_buf_str(b, ", \"size_histogram\": [");
	bool first = true;
	for (unsigned k = 0; k < 3; k++)
		for (unsigned i = 0; i < HIST_BUCKETS; i++) {
			const struct prof_hist *h = &vmap_prof_hist[k][i];
			int64_t n = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
			if (n <= 0)
				continue;
			vmap_buf_str(b, first ? "{\"kind\": \"" : ", {\"kind\": \"");
			vmap_buf_str(b, kind_name[k]);
			vmap_buf_str(b, "\", \"max_bytes\": ");
			vmap_buf_u64(b, 1ull << i);
			vmap_buf_str(b, ", \"count\": ");
			vmap_buf_u64(b, whole_count(n));
			vmap_buf_str(b, ", \"bytes\": ");
			vmap_buf_u64(b, clamp0(__atomic_load_n(&h->bytes, __ATOMIC_RELAXED)));
			vmap_buf_char(b, '}');
			first = false;
		}
	vmap_buf_char(b, ']');
}

static void report(struct vmap_buf *b, int format, struct symbolizer *z)
{
	bool json = format == VMAP_FORMAT_JSON;
	if (!vmap_profile_on) {
		if (json)
			vmap_buf_str(b, "null");
		return;
	}
	unsigned top = (unsigned)(vmap_opt.profile_top ? vmap_opt.profile_top : 10);
	if (top > 1000)
		top = 1000;
	uint32_t ids[NTABLES][1000];
	unsigned cnt[NTABLES];
	for (int t = 0; t < NTABLES; t++)
		cnt[t] = select_top(t, ids[t], top);
	uint32_t n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);
	int64_t samples = 0;
	for (uint32_t i = 0; i <= n; i++)
		samples += __atomic_load_n(&sites[i].samples, __ATOMIC_RELAXED);
	if (json) {
		vmap_buf_str(b, "{\"sample_bytes\": ");
		vmap_buf_u64(b, mean_bytes);
		vmap_buf_str(b, ", \"large_sample_bytes\": ");
		vmap_buf_u64(b, large_mean);
		vmap_buf_str(b, ", \"top\": ");
		vmap_buf_u64(b, top);
		vmap_buf_str(b, ", \"sites\": ");
		vmap_buf_u64(b, n);
		vmap_buf_str(b, ", \"samples\": ");
		vmap_buf_u64(b, clamp0(samples));
		vmap_buf_str(b, ", \"table_full\": ");
		vmap_buf_str(b, n + 1 >= SITE_MAX ? "true" : "false");
		vmap_buf_str(b, ", \"symbolized\": ");
		vmap_buf_str(b, z->in_signal ? "false" : "true");
		vmap_buf_str(b, ", \"tables_bytes\": ");
		vmap_buf_u64(b, __atomic_load_n(&profile_mapped, __ATOMIC_RELAXED));
		for (int t = 0; t < NTABLES; t++) {
			vmap_buf_str(b, ", \"");
			vmap_buf_str(b, table_key[t]);
			vmap_buf_str(b, "\": [");
			for (unsigned i = 0; i < cnt[t]; i++) {
				if (i)
					vmap_buf_str(b, ", ");
				site_json(b, z, &sites[ids[t][i]]);
			}
			vmap_buf_char(b, ']');
		}
		write_histogram(b); /* a later key: after the tables */
		vmap_buf_char(b, '}');
		return;
	}
	vmap_buf_str(b, "\n  allocation sites          ");
	vmap_buf_u64(b, n);
	vmap_buf_str(b, " call stacks from ");
	vmap_buf_u64(b, clamp0(samples));
	vmap_buf_str(b, " records: small blocks sampled every ");
	vmap_buf_bytes(b, mean_bytes);
	if (large_mean) {
		vmap_buf_str(b, " on average, large ones every ");
		vmap_buf_bytes(b, large_mean);
		vmap_buf_str(b, " (~ = estimate); every served mmap");
	} else {
		vmap_buf_str(b, " on average (~ = estimate); every large block and served mmap");
	}
	if (z->in_signal)
		vmap_buf_str(b, "\n    (in a signal handler: addresses only, as object+offset for addr2line)");
	for (int t = 0; t < NTABLES; t++) {
		vmap_buf_str(b, "\n    ");
		vmap_buf_str(b, table_title[t]);
		if (!cnt[t])
			vmap_buf_str(b, ": none");
		for (unsigned i = 0; i < cnt[t]; i++) {
			uint32_t id = ids[t][i];
			/* A site already shown with its stack is referred to. */
			int seen_t = -1;
			unsigned seen_i = 0;
			for (int u = 0; u < t && seen_t < 0; u++)
				for (unsigned j = 0; j < cnt[u]; j++)
					if (ids[u][j] == id) {
						seen_t = u;
						seen_i = j;
						break;
					}
			vmap_buf_str(b, "\n      ");
			vmap_buf_u64w(b, i + 1, 3);
			vmap_buf_str(b, ". ");
			site_text(b, z, &sites[id], seen_t < 0);
			if (seen_t >= 0) {
				vmap_buf_str(b, "\n            stack: ");
				vmap_buf_str(b, seen_t == BY_BYTES ? "by bytes" : "by number");
				vmap_buf_str(b, " #");
				vmap_buf_u64(b, seen_i + 1);
			}
		}
	}
	if (n + 1 >= SITE_MAX)
		vmap_buf_str(b, "\n    (the site table filled up: later stacks are counted together)");
	vmap_buf_str(b, "\n    (function+offset from the objects' symbol tables; no file:line,"
			" C++ names not demangled)");
}

void vmap_profile_report(struct vmap_buf *b, int format)
{
	if (vmap_profile_on && !vmap_profile_tls.busy)
		vmap_prof_batch_flush(&vmap_profile_batch); /* this thread's pending figures */
	struct symbolizer z;
	z.n = 0;
	z.in_signal = false;
	report(b, format, &z);
	vmap_prof_symbolizer_done(&z);
}

void vmap_profile_report_in_signal(struct vmap_buf *b, int format)
{
	struct symbolizer z;
	z.n = 0;
	z.in_signal = true;
	report(b, format, &z);
}

