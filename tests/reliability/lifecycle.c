/*
 * lifecycle.c — start-up, fork handlers, exit, thread churn, backtrace
 * sampling against dlopen, RTLD_DEEPBIND (REQUIREMENTS.md #1, #5, #16, #19,
 * #20, #22).  Linked with librel_early.so (helper_lib.c); run under
 * LD_PRELOAD=libvmapalloc.so.
 *
 *   lifecycle early              blocks allocated by librel_early.so's
 *                                constructor (which runs before vmapalloc's)
 *                                are intact and free/realloc correctly
 *   lifecycle atfork LATE_LIB [S]  (with REL_ATFORK=1) fork from 2 threads
 *                                while 3 allocate, with allocating atfork
 *                                handlers registered before vmapalloc's
 *                                (librel_early) and after it (LATE_LIB,
 *                                dlopen()ed): every fork completes; runs in
 *                                this process with an in-process watchdog
 *   lifecycle exit [N]           N times: a child starts 4 allocating threads
 *                                and calls exit() while they run; atexit and
 *                                destructor handlers free and allocate; every
 *                                child must exit 0 (no crash, no hang)
 *   lifecycle churn [N]          N thread create/exit cycles, each thread
 *                                allocating (a block is freed by main after it
 *                                exited): VmRSS and VMAs stay bounded
 *   lifecycle dlstorm LIB [S]    threads dlopen/dlclose LIB in a loop while
 *                                others allocate; run with VMAPALLOC_PROFILE=1
 *                                VMAPALLOC_PROFILE_SAMPLE=1 (a backtrace for
 *                                every allocation): no deadlock
 *   lifecycle deepbind LATE_LIB  dlopen(RTLD_DEEPBIND) of LATE_LIB, by its bare
 *                                name (found through this program's RUNPATH
 *                                only: the caller is passed on): vmapalloc
 *                                clears the flag with one stderr line for two
 *                                opens, so LATE_LIB's malloc/free/realloc are
 *                                vmapalloc's: its block freed by the program,
 *                                the program's large blocks freed and
 *                                realloc'd by it (in a child: status reported)
 * Hangs are caught by a watchdog that prints gdb backtraces.
 */
#include "rel.h"

#include <malloc.h>
#include <pthread.h>

extern void *rel_early_small, *rel_early_large;
unsigned long rel_early_atfork_calls(void);

static atomic_int stop;
static atomic_ulong ops, events, failures;
static double seconds = 10;
static const char *lib_arg;

static void *allocator(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 11;
	void *keep[8] = {0};
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned k = (unsigned)(rel_rnd(&s) % 8);
		free(keep[k]);
		uint64_t r = rel_rnd(&s);
		size_t n = r % 2 ? 16 + r % 4000 : 70000 + r % (3 * MiB);
		keep[k] = malloc(n);
		if (keep[k])
			((volatile char *)keep[k])[n - 1] = 1;
		atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
	}
	for (int k = 0; k < 8; k++)
		free(keep[k]);
	return NULL;
}

static int early(void *arg)
{
	(void)arg;
	CHECK(rel_early_small && !strcmp(rel_early_small, "allocated by a constructor that ran before vmapalloc's"),
	      "the constructor's string is damaged");
	CHECK(rel_early_large != NULL, "the constructor's large block is missing");
	const unsigned char *c = rel_early_large;
	for (size_t i = 0; i < MiB; i += 4093)
		CHECK(c[i] == 0x5a, "the constructor's large block is damaged at %zu", i);
	int owned = vmt_vm ? vm.owns(rel_early_large) : 0;
	char *s = realloc(rel_early_small, 300 * KiB);
	CHECK(s && !strncmp(s, "allocated by a constructor", 26), "realloc of the constructor's string");
	unsigned char *l = realloc(rel_early_large, 3 * MiB);
	CHECK(l != NULL, "realloc of the constructor's large block");
	for (size_t i = 0; l && i < MiB; i += 4093)
		CHECK(l[i] == 0x5a, "realloc lost byte %zu of the constructor's block", i);
	free(s);
	free(l);
	printf("lifecycle early: the constructor's blocks are intact (its large block %s vmapalloc's) and freed\n",
	       owned ? "is" : "is not");
	vmt_done("lifecycle");
	return 0;
}

static void *forker(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pid_t pid = fork();
		if (pid == 0) {
			void *p = malloc(2 * MiB), *q = malloc(100);
			if (!p || !q)
				_exit(1);
			memset(p, 1, 2 * MiB);
			free(p);
			free(q);
			_exit(0);
		}
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			atomic_fetch_add(&failures, 1);
		atomic_fetch_add(&events, 1);
	}
	return NULL;
}

static int atfork(void *arg)
{
	(void)arg;
	void *h = dlopen(lib_arg, RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL, "dlopen %s: %s", lib_arg, dlerror());
	unsigned long (*late_calls)(void) =
		h ? (unsigned long (*)(void))dlsym(h, "rel_late_atfork_calls") : NULL;
	pthread_t a[3], f[2];
	for (int i = 0; i < 3; i++)
		pthread_create(&a[i], NULL, allocator, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < 2; i++)
		pthread_create(&f[i], NULL, forker, NULL);
	double t0 = rel_now();
	while (rel_now() - t0 < seconds)
		usleep(10000);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(f[i], NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(a[i], NULL);
	printf("lifecycle atfork: %lu forks, %lu failed; handlers ran %lu (early lib) and %lu (late lib) times\n",
	       (unsigned long)events, (unsigned long)failures, rel_early_atfork_calls(),
	       late_calls ? late_calls() : 0ul);
	CHECK(events > 0 && failures == 0, "forks failed");
	CHECK(rel_early_atfork_calls() == events && late_calls && late_calls() == events,
	      "an atfork handler did not run for every fork");
	vmt_done("lifecycle");
	return 0;
}

static void *exit_keep[16];
static void at_exit_free(void)
{
	for (int i = 0; i < 16; i++)
		free(exit_keep[i]);
	void *p = malloc(5 * MiB);
	free(p);
}

__attribute__((destructor)) static void late_destructor(void)
{
	void *p = malloc(3 * MiB), *q = malloc(10);
	free(q);
	free(p);
}

static int exit_race(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	unsigned crashed = 0;
	uint64_t s = 5;
	for (unsigned i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			for (int k = 0; k < 16; k++)
				exit_keep[k] = malloc(k % 2 ? 100 : 200 * KiB);
			atexit(at_exit_free);
			pthread_t t[4];
			for (int k = 0; k < 4; k++)
				pthread_create(&t[k], NULL, allocator, (void *)(uintptr_t)(k + 1));
			usleep((useconds_t)(rel_rnd(&s) % 3000));
			exit(0);
		}
		int st;
		double t0 = rel_now();
		while (waitpid(pid, &st, WNOHANG) == 0) {
			if (rel_now() - t0 > 30) {
				fprintf(stderr, "FAIL: exit race %u: child hung; backtrace:\n", i);
				rel_backtrace(pid);
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				break;
			}
			usleep(500);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			crashed++;
			if (crashed < 4)
				fprintf(stderr, "FAIL: exit race %u: child %s\n", i, rel_status_str(st));
		}
	}
	printf("lifecycle exit: %u runs of exit() while 4 threads allocate, %u failed\n", n, crashed);
	CHECK(crashed == 0, "%u of %u children crashed or hung in exit()", crashed, n);
	vmt_done("lifecycle");
	return 0;
}

static void *short_thread(void *arg)
{
	void **out = arg;
	void *a = malloc(300 * KiB), *b = malloc(40), *c = malloc(MiB);
	if (a)
		memset(a, 1, 300 * KiB);
	free(a);
	free(b);
	*out = c; /* freed by main after this thread exited */
	return NULL;
}

static int churn(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	long rss0 = 0, vma0 = 0;
	for (unsigned i = 0; i < n; i++) {
		pthread_t t;
		void *left = NULL;
		CHECK(pthread_create(&t, NULL, short_thread, &left) == 0, "pthread_create %u", i);
		pthread_join(t, NULL);
		free(left);
		if (i == n / 10) {
			rss0 = rel_status_kb("VmRSS:");
			vma0 = rel_vmas();
		}
	}
	long rss1 = rel_status_kb("VmRSS:"), vma1 = rel_vmas();
	printf("lifecycle churn: %u threads created and exited; from 10%% to the end VmRSS %ld -> %ld KiB, VMAs %ld -> %ld\n",
	       n, rss0, rss1, vma0, vma1);
	CHECK(rss1 - rss0 < 64 * 1024, "VmRSS grew by %ld KiB over the churn", rss1 - rss0);
	CHECK(vma1 - vma0 < 64, "VMAs grew by %ld over the churn", vma1 - vma0);
	vmt_done("lifecycle");
	return 0;
}

static void *dl_thread(void *arg)
{
	(void)arg;
	static const char *const libs[] = {"libresolv.so.2", "libutil.so.1", NULL};
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (int i = 0; i < 3; i++) {
			const char *name = libs[i] ? libs[i] : lib_arg;
			void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
			if (h)
				dlclose(h);
			atomic_fetch_add(&events, 1);
		}
	}
	return NULL;
}

static int dlstorm(void *arg)
{
	(void)arg;
	pthread_t a[3], d[2];
	for (int i = 0; i < 3; i++)
		pthread_create(&a[i], NULL, allocator, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < 2; i++)
		pthread_create(&d[i], NULL, dl_thread, NULL);
	double t0 = rel_now();
	while (rel_now() - t0 < seconds)
		usleep(10000);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(d[i], NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(a[i], NULL);
	const char *prof = getenv("VMAPALLOC_PROFILE");
	printf("lifecycle dlstorm: %.0f s, %lu dlopen/dlclose, %lu allocations (VMAPALLOC_PROFILE=%s)\n",
	       seconds, (unsigned long)events, (unsigned long)ops, prof ? prof : "unset");
	CHECK(events > 0 && ops > 0, "no progress");
	vmt_done("lifecycle");
	return 0;
}

/* Opens LATE_LIB by its bare name, which only this program's RUNPATH
 * ($ORIGIN) finds: a dlopen wrapper that does not pass on its caller (glibc
 * takes it from the return address) would search its own and fail.  stderr
 * goes to a file meanwhile: two DEEPBIND opens, one warning line. */
static void *deep_open(void)
{
	const char *base = strrchr(lib_arg, '/') ? strrchr(lib_arg, '/') + 1 : lib_arg;
	char path[] = "/tmp/rel-deepbind-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);
	fflush(stderr);
	int saved = dup(2);
	dup2(fd, 2);
	void *h = dlopen(base, RTLD_NOW | RTLD_DEEPBIND);
	char why[256] = "";
	if (!h)
		snprintf(why, sizeof why, "%s", dlerror());
	void *h2 = dlopen(lib_arg, RTLD_NOW | RTLD_DEEPBIND);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	CHECK(h != NULL, "dlopen(\"%s\", RTLD_DEEPBIND) from a program whose RUNPATH has it: %s",
	      base, why);
	CHECK(h2 == h, "dlopen(%s) again: another handle", lib_arg);
	char said[4096] = {0};
	ssize_t n = pread(fd, said, sizeof said - 1, 0);
	close(fd);
	int lines = 0;
	for (ssize_t i = 0; i < n; i++)
		lines += said[i] == '\n';
	printf("lifecycle deepbind: opened by bare name through the program's RUNPATH; stderr of "
	       "two DEEPBIND opens: %d line(s): %s", lines, n > 0 ? said : "(none)\n");
	if (vmt_vm)
		CHECK(lines == 1 && strstr(said, "vmapalloc: ") && strstr(said, "RTLD_DEEPBIND") &&
			      strstr(said, base),
		      "expected one vmapalloc line about RTLD_DEEPBIND naming %s", base);
	dlclose(h2);
	return h;
}

static int deepbind(void *arg)
{
	(void)arg;
	void *h = deep_open();
	void (*deep_free)(void *) = (void (*)(void *))dlsym(h, "rel_deep_free");
	void *(*deep_malloc)(size_t) = (void *(*)(size_t))dlsym(h, "rel_deep_malloc");
	void *(*deep_realloc)(void *, size_t) =
		(void *(*)(void *, size_t))dlsym(h, "rel_deep_realloc");
	CHECK(deep_free && deep_malloc && deep_realloc, "helper symbols");
	/* 1. The library's block, freed by the program: vmapalloc's now (the
	 * flag was cleared, the library binds to the global malloc). */
	void *g = deep_malloc(2 * MiB);
	CHECK(g != NULL, "deep malloc");
	int g_owned = vmt_vm ? vm.owns(g) : 0;
	memset(g, 3, 2 * MiB);
	free(g);
	printf("lifecycle deepbind: a DEEPBIND library's 2 MiB block (%s) freed by the program: ok\n",
	       g_owned ? "vmapalloc's" : "glibc's");
	if (vmt_vm)
		CHECK(g_owned, "the DEEPBIND library's malloc is not vmapalloc's");
	fflush(stdout);
	/* 2. The program's (vmapalloc's) large blocks, reallocated and freed by
	 * the library (in a child: a crash is reported, not suffered). */
	char *s = malloc(MiB);
	memset(s, 'x', MiB - 1);
	s[MiB - 1] = 0;
	char *d = strdup(s);
	free(s);
	pid_t pid = fork();
	if (pid == 0) {
		deep_free(d);
		char *r = malloc(200 * KiB);
		memset(r, 7, 200 * KiB);
		r = deep_realloc(r, 3 * MiB);
		if (!r || r[200 * KiB - 1] != 7)
			_exit(3);
		deep_free(r);
		void *p = malloc(3 * MiB);
		memset(p, 1, 3 * MiB);
		free(p);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("lifecycle deepbind: the program's 1 MiB strdup freed and a 200 KiB block realloc'd "
	       "by the DEEPBIND library: child %s\n",
	       rel_status_str(st));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "a vmapalloc block freed through a DEEPBIND library's free: %s (REQUIREMENTS.md #5)",
	      rel_status_str(st));
	free(d);
	dlclose(h);
	vmt_done("lifecycle");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	vmt_init("lifecycle");
	const char *mode = argc > 1 ? argv[1] : "early";
	int (*fn)(void *) = NULL;
	void *arg = NULL;
	double limit = 120;
	if (!strcmp(mode, "early")) {
		fn = early;
	} else if (!strcmp(mode, "atfork") || !strcmp(mode, "dlstorm") || !strcmp(mode, "deepbind")) {
		lib_arg = argc > 2 ? argv[2] : NULL;
		if (!lib_arg) {
			fprintf(stderr, "lifecycle %s: LIB argument needed\n", mode);
			return 2;
		}
		if (argc > 3)
			seconds = atof(argv[3]);
		fn = !strcmp(mode, "atfork") ? atfork : !strcmp(mode, "dlstorm") ? dlstorm : deepbind;
		if (fn == deepbind && getenv("LD_LIBRARY_PATH")) {
			/* meson points LD_LIBRARY_PATH at the build directory: without
			 * it only the RUNPATH finds LATE_LIB by its bare name. */
			unsetenv("LD_LIBRARY_PATH");
			execv("/proc/self/exe", argv);
			fprintf(stderr, "lifecycle deepbind: re-exec: %s\n", strerror(errno));
			return 2;
		}
		limit = seconds + 60;
	} else if (!strcmp(mode, "exit")) {
		fn = exit_race;
		arg = (void *)(uintptr_t)(argc > 2 ? atoi(argv[2]) : 200);
		limit = 600;
	} else if (!strcmp(mode, "churn")) {
		fn = churn;
		arg = (void *)(uintptr_t)(argc > 2 ? atoi(argv[2]) : 20000);
		limit = 600;
	} else {
		fprintf(stderr, "usage: lifecycle early|atfork LIB|exit N|churn N|dlstorm LIB|deepbind LIB\n");
		return 2;
	}
	if (fn == atfork) {
		/* fork() itself may hang here: no child process to watch from. */
		rel_selfwatch(limit);
		return atfork(NULL);
	}
	int st = rel_watchdog(mode, fn, arg, limit);
	if (st == -1)
		return 1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL: lifecycle %s: %s\n", mode, rel_status_str(st));
		return 1;
	}
	return 0;
}
