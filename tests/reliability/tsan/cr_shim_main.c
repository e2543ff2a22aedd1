/*
 * cr_shim_main.c — the runner of the Criterion stand-in (criterion/criterion.h).
 *
 *   unit-X-tsan [FILTER...]
 *
 * Runs every registered Test (or those whose "suite::name" contains one of
 * the FILTERs), each in its own forked process, one after the other; prints
 * "[PASS]"/"[FAIL]" per Test and a synthesis line; exits 1 if any failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "criterion/criterion.h"

#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 512
#define MAX_SUITES 64

static struct cr_shim_test *tests[MAX_TESTS];
static unsigned ntests;
static struct cr_shim_suite *suites[MAX_SUITES];
static unsigned nsuites;

void cr_shim_register(struct cr_shim_test *t)
{
	if (ntests < MAX_TESTS)
		tests[ntests++] = t;
}

void cr_shim_register_suite(struct cr_shim_suite *s)
{
	if (nsuites < MAX_SUITES)
		suites[nsuites++] = s;
}

void cr_shim_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	fprintf(stderr, "%s:%d: assertion failed: %s", file, line, cond);
	if (fmt && fmt[0] && fmt[1]) {
		va_list ap;
		va_start(ap, fmt);
		fputc(':', stderr);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
	fflush(stderr);
	_exit(1);
}

static const struct cr_shim_suite *suite_of(const char *name)
{
	for (unsigned i = 0; i < nsuites; i++)
		if (strcmp(suites[i]->name, name) == 0)
			return suites[i];
	return NULL;
}

static bool selected(const struct cr_shim_test *t, int argc, char **argv)
{
	if (argc < 2)
		return true;
	char full[256];
	snprintf(full, sizeof full, "%s::%s", t->suite, t->name);
	for (int i = 1; i < argc; i++)
		if (argv[i][0] != '-' && strstr(full, argv[i]))
			return true;
	for (int i = 1; i < argc; i++)
		if (argv[i][0] != '-')
			return false;
	return true; /* only options (e.g. --ascii): everything */
}

static int run_one(const struct cr_shim_test *t)
{
	const struct cr_shim_suite *s = suite_of(t->suite);
	struct cr_shim_opts o = t->opts;
	if (s) {
		if (!o.init)
			o.init = s->opts.init;
		if (!o.fini)
			o.fini = s->opts.fini;
		if (o.timeout <= 0)
			o.timeout = s->opts.timeout;
	}
	if (o.timeout <= 0)
		o.timeout = 120;
	/* Sanitized code runs several times slower: give it room. */
	unsigned limit = (unsigned)(o.timeout * 4) + 1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		alarm(limit);
		if (o.init)
			o.init();
		t->fn();
		if (o.fini)
			o.fini();
		fflush(NULL);
		exit(0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		;
	bool ok;
	char why[128] = "";
	if (WIFSIGNALED(st)) {
		ok = o.signal == WTERMSIG(st);
		snprintf(why, sizeof why, "killed by signal %d%s", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
	} else {
		int code = WEXITSTATUS(st);
		ok = !o.signal && code == o.exit_code;
		snprintf(why, sizeof why, "exit status %d%s", code,
			 code == 66 ? " (ThreadSanitizer report)" : "");
	}
	if (ok && o.signal)
		snprintf(why, sizeof why, "signal %d as expected", o.signal);
	printf("[%s] %s::%s%s%s%s\n", ok ? "PASS" : "FAIL", t->suite, t->name, why[0] ? " (" : "", why,
	       why[0] ? ")" : "");
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned run = 0, failed = 0;
	for (unsigned i = 0; i < ntests; i++) {
		if (tests[i]->opts.disabled || !selected(tests[i], argc, argv))
			continue;
		run++;
		failed += (unsigned)run_one(tests[i]);
	}
	printf("[====] Synthesis: Tested: %u | Passing: %u | Failing: %u\n", run, run - failed, failed);
	return failed ? 1 : 0;
}
