/*
 * stats_out.c — where the report goes, and when: at exit, on a signal, on
 * request; to stderr or to a new file.
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
 * A report is the figures (stats.c) as text (stats_text.c) or JSON
 * (stats_json.c), then the allocation sites (profile.c) and, in JSON, the
 * timeline (timeline.c).
 *
 * Invariants: no allocation, stdio or lock; one report at a time from the
 * signal handler, which makes only raw system calls, saves errno and keeps
 * the profile's hooks from re-entering (vmap_profile_tls.busy).
 *
 * Called by: alloc.c (init, fork, exit, malloc_stats), preload/shim.c
 * (vmapalloc_stats_print).
 */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <gnu/lib-names.h>
#include <signal.h>
#include <string.h>

#include "backend.h"
#include "options.h"
#include "os.h"
#include "profile.h"
#include "stats_report.h"
#include "timeline.h"

static int fork_parent_pid; /* the forking process, taken before fork() */
static int report_fd = 2;
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
	if (format == VMAP_FORMAT_JSON) {
		vmap_buf_str(b, ", \"timeline\": ");
		vmap_timeline_json(b, when == VMAP_WHEN_SIGNAL);
	}
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

VMAP_START_TEXT static void install_signal(void)
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
	sigaction_fn(sigs[i], &sa, NULL); /* cannot fail: a valid signal and handler */
}

VMAP_START_TEXT void vmap_stats_init(void)
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
	vmap_timeline_fork_child();
}

VMAP_START_TEXT void vmap_stats_at_exit(void)
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
