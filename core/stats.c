/*
 * stats.c — the statistics report (text and JSON) and malloc_info's XML.
 *
 * Owns no state: every figure comes from counter.c (the list in stats.def)
 * and from /proc/self/status read with raw system calls.  Never allocates,
 * never takes an allocator lock, so it can run from a destructor after other
 * threads were stopped anywhere.
 *
 * Called by: alloc.c (exit, malloc_stats, malloc_info), preload/shim.c (the
 * public vmapalloc_* functions).
 */
#include "stats.h"

#include <fcntl.h>

#include "counter.h"
#include "options.h"
#include "os.h"
#include "range.h"

static const char *const stat_names[VMAP_STAT_COUNT] = {
#define X(name, kind, doc) #name,
#include "stats.def"
#undef X
};

int vmap_stat_lookup(const char *name)
{
	for (unsigned i = 0; i < VMAP_STAT_COUNT; i++) {
		const char *a = stat_names[i], *b = name;
		while (*a && *a == *b)
			a++, b++;
		if (*a == *b)
			return (int)i;
	}
	if (name[0] == 'l') {
		const char *peak = "large_bytes_peak", *b = name;
		while (*peak && *peak == *b)
			peak++, b++;
		if (*peak == *b)
			return VMAP_STAT_COUNT;
	}
	return -1;
}

const char *vmap_stat_name(unsigned i)
{
	if (i < VMAP_STAT_COUNT)
		return stat_names[i];
	return i == VMAP_STAT_COUNT ? "large_bytes_peak" : NULL;
}

uint64_t vmap_stat_value(unsigned i)
{
	int64_t v;
	if (i == VMAP_STAT_COUNT) {
		int64_t now = vmap_stat_read(VMAP_STAT_large_bytes_in_use);
		vmap_stat_note_peak(now);
		v = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	} else {
		v = vmap_stat_read((enum vmap_stat)i);
	}
	return v < 0 ? 0 : (uint64_t)v;
}

/* VmRSS / VmHWM in bytes from /proc/self/status. */
static void read_rss(uint64_t *rss, uint64_t *hwm)
{
	char buf[4096];
	*rss = *hwm = 0;
	int fd = vmap_os_open("/proc/self/status", O_RDONLY, 0);
	if (fd < 0)
		return;
	long n = vmap_os_read(fd, buf, sizeof buf - 1);
	vmap_os_close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	for (long i = 0; i < n; i++) {
		if (i && buf[i - 1] != '\n')
			continue;
		uint64_t *dst = NULL;
		if (buf[i] == 'V' && buf[i + 1] == 'm' && buf[i + 2] == 'R' && buf[i + 3] == 'S' &&
		    buf[i + 4] == 'S')
			dst = rss;
		else if (buf[i] == 'V' && buf[i + 1] == 'm' && buf[i + 2] == 'H' && buf[i + 3] == 'W' &&
			 buf[i + 4] == 'M')
			dst = hwm;
		if (!dst)
			continue;
		long j = i + 6;
		while (j < n && (buf[j] == ' ' || buf[j] == '\t'))
			j++;
		uint64_t v = 0;
		while (j < n && buf[j] >= '0' && buf[j] <= '9')
			v = v * 10 + (uint64_t)(buf[j++] - '0');
		*dst = v * 1024;
	}
}

static void program_name(char *out, size_t cap)
{
	out[0] = '\0';
	int fd = vmap_os_open("/proc/self/comm", O_RDONLY, 0);
	if (fd < 0)
		return;
	long n = vmap_os_read(fd, out, cap - 1);
	vmap_os_close(fd);
	if (n < 0)
		n = 0;
	out[n] = '\0';
	for (long i = 0; i < n; i++)
		if (out[i] == '\n' || out[i] == '/')
			out[i] = i == n - 1 || out[i] == '\n' ? '\0' : '_';
}

#define V(name) vmap_stat_value(VMAP_STAT_##name)

static void pct(struct vmap_buf *b, uint64_t part, uint64_t whole)
{
	if (!whole) {
		vmap_buf_str(b, "-");
		return;
	}
	uint64_t t = part * 1000 / whole;
	vmap_buf_u64(b, t / 10);
	vmap_buf_char(b, '.');
	vmap_buf_u64(b, t % 10);
	vmap_buf_char(b, '%');
}

static void line(struct vmap_buf *b, const char *label)
{
	vmap_buf_str(b, "\n  ");
	vmap_buf_str(b, label);
	size_t n = 0;
	while (label[n])
		n++;
	for (; n < 26; n++)
		vmap_buf_char(b, ' ');
}

static void write_text(struct vmap_buf *b, int main_pid)
{
	char comm[64];
	uint64_t rss, hwm;
	program_name(comm, sizeof comm);
	read_rss(&rss, &hwm);
	int pid = vmap_os_getpid();
	vmap_buf_str(b, "vmapalloc 0.1.0 report: pid ");
	vmap_buf_u64(b, (uint64_t)pid);
	vmap_buf_str(b, " (");
	vmap_buf_str(b, comm);
	vmap_buf_str(b, ")");
	if (main_pid && pid != main_pid) {
		vmap_buf_str(b, ", forked child of pid ");
		vmap_buf_u64(b, (uint64_t)main_pid);
	}
	line(b, "large blocks in use");
	vmap_buf_bytes(b, V(large_bytes_in_use));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, V(large_blocks_in_use));
	vmap_buf_str(b, " blocks (peak ");
	vmap_buf_bytes(b, vmap_stat_value(VMAP_STAT_COUNT));
	vmap_buf_str(b, ")");
	line(b, "resident (VmRSS)");
	vmap_buf_bytes(b, rss);
	vmap_buf_str(b, " (peak ");
	vmap_buf_bytes(b, hwm);
	vmap_buf_str(b, ")");
	line(b, "cached for reuse");
	vmap_buf_bytes(b, V(cached_bytes));
	vmap_buf_str(b, " (purge above ");
	vmap_buf_bytes(b, vmap_lazy_max);
	vmap_buf_str(b, ")");
	line(b, "address space reserved");
	vmap_buf_bytes(b, V(mapped_bytes));
	vmap_buf_str(b, " in ");
	vmap_buf_u64(b, V(regions));
	vmap_buf_str(b, " region(s), ");
	vmap_buf_u64(b, vmap_range_nshards());
	vmap_buf_str(b, " shard(s)");
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
	line(b, "small (glibc) / large");
	vmap_buf_u64(b, V(small_allocs));
	vmap_buf_str(b, " / ");
	vmap_buf_u64(b, V(large_allocs));
	vmap_buf_str(b, " allocations (");
	vmap_buf_bytes(b, V(large_bytes_allocated));
	vmap_buf_str(b, " large in total)");
	line(b, "large reuse");
	vmap_buf_str(b, "pool hits ");
	vmap_buf_u64(b, V(pool_hits));
	vmap_buf_str(b, " (");
	pct(b, V(pool_hits), V(pool_hits) + V(run_hits) + V(pool_misses));
	vmap_buf_str(b, "), resident runs ");
	vmap_buf_u64(b, V(run_hits));
	vmap_buf_str(b, ", fresh ");
	vmap_buf_u64(b, V(pool_misses));
	vmap_buf_str(b, ", calloc zeroing skipped ");
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
	vmap_buf_str(b, " system calls, ");
	vmap_buf_u64(b, V(purge_ns) / 1000000);
	vmap_buf_char(b, '.');
	uint64_t us = V(purge_ns) / 1000 % 1000;
	vmap_buf_char(b, (char)('0' + us / 100));
	vmap_buf_char(b, (char)('0' + us / 10 % 10));
	vmap_buf_char(b, (char)('0' + us % 10));
	vmap_buf_str(b, " ms");
	line(b, "locks");
	vmap_buf_str(b, "shared ");
	vmap_buf_u64(b, V(shared_lock_acquisitions));
	vmap_buf_str(b, ", shard ");
	vmap_buf_u64(b, V(shard_lock_acquisitions));
	vmap_buf_str(b, " (contended ");
	pct(b, V(shard_lock_contended), V(shard_lock_acquisitions));
	vmap_buf_str(b, ")");
	line(b, "counters");
	vmap_buf_str(b, vmap_counter_is_percpu() ? "per-CPU (switched at the second thread)"
						 : "atomic (one thread so far)");
	vmap_buf_char(b, '\n');
}

static void write_json(struct vmap_buf *b, int main_pid)
{
	uint64_t rss, hwm;
	read_rss(&rss, &hwm);
	vmap_buf_str(b, "{\"vmapalloc_report_version\": 1, \"pid\": ");
	vmap_buf_u64(b, (uint64_t)vmap_os_getpid());
	vmap_buf_str(b, ", \"parent_pid\": ");
	vmap_buf_u64(b, (uint64_t)(main_pid && main_pid != vmap_os_getpid() ? main_pid : 0));
	vmap_buf_str(b, ", \"resident_bytes\": ");
	vmap_buf_u64(b, rss);
	vmap_buf_str(b, ", \"resident_peak_bytes\": ");
	vmap_buf_u64(b, hwm);
	vmap_buf_str(b, ", \"lazy_max_bytes\": ");
	vmap_buf_u64(b, vmap_lazy_max);
	vmap_buf_str(b, ", \"shards\": ");
	vmap_buf_u64(b, vmap_range_nshards());
	vmap_buf_str(b, ", \"counter_mode\": \"");
	vmap_buf_str(b, vmap_counter_is_percpu() ? "percpu" : "atomic");
	vmap_buf_str(b, "\", \"counters\": {");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		vmap_buf_str(b, i ? ", \"" : "\"");
		vmap_buf_str(b, vmap_stat_name(i));
		vmap_buf_str(b, "\": ");
		vmap_buf_u64(b, vmap_stat_value(i));
	}
	vmap_buf_str(b, "}}\n");
}

int vmap_stats_write(int fd, int format)
{
	VMAP_BUF(b, fd, 4096);
	if (format == VMAP_FORMAT_JSON)
		write_json(&b, 0);
	else
		write_text(&b, 0);
	vmap_buf_flush(&b);
	return b.err;
}

void vmap_stats_xml(struct vmap_buf *b)
{
	vmap_buf_str(b, "<malloc version=\"vmapalloc-1\">\n");
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		vmap_buf_str(b, "<stat name=\"");
		vmap_buf_str(b, vmap_stat_name(i));
		vmap_buf_str(b, "\" value=\"");
		vmap_buf_u64(b, vmap_stat_value(i));
		vmap_buf_str(b, "\"/>\n");
	}
	vmap_buf_str(b, "</malloc>\n");
}

/* Expands %p (pid) and %e (program name) into out; false if it does not fit. */
static bool expand_path(const char *pat, char *out, size_t cap)
{
	char comm[64], num[24];
	size_t n = 0;
	for (const char *p = pat; *p; p++) {
		const char *ins = NULL;
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
	return true;
}

static int vmap_report_fd = 2;

void vmap_stats_keep_stderr(void)
{
	/* Programs may close fd 2 before our destructor runs (coreutils does it
	 * in an atexit handler): keep a private duplicate, close-on-exec, high
	 * enough to stay out of the program's way. */
	int fd = vmap_os_dup_cloexec(2, 500);
	if (fd >= 0)
		vmap_report_fd = fd;
}

void vmap_stats_at_exit(int main_pid)
{
	const char *dest = vmap_opt.stats;
	int fd = vmap_report_fd;
	bool close_fd = false;
	if (!(dest[0] == '1' && dest[1] == '\0')) {
		char path[512];
		if (!expand_path(dest, path, sizeof path)) {
			vmap_say("VMAPALLOC_STATS path is too long; no report written", NULL, NULL);
			return;
		}
		fd = vmap_os_open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
		if (fd < 0) {
			vmap_say("cannot create the report file ", path,
				 " (it exists, or the directory is not writable); no report written");
			return;
		}
		close_fd = true;
	}
	VMAP_BUF(b, fd, 4096);
	if (vmap_opt.stats_format == VMAP_FORMAT_JSON)
		write_json(&b, main_pid);
	else
		write_text(&b, main_pid);
	vmap_buf_flush(&b);
	if (close_fd)
		vmap_os_close(fd);
}
