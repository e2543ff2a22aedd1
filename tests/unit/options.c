/*
 * options.c — unit tests of core/options.c: the VMAPALLOC_* parser.
 *
 * Every rejected value keeps the default, prints exactly one line to fd 2
 * naming the variable and the default, and counts as one problem.
 */
#include "unit.h"

#include <sys/wait.h>

#include "alloc_impl.h"

static int parse_capture(const char *const *env, char *out, size_t cap)
{
	struct capture c = capture_begin();
	int problems = unit_parse(env);
	capture_end(c, out, cap);
	return problems;
}

/* One rejected value of NAME: default kept, one problem, one line. */
static void expect_rejected(const char *assignment, const char *name, const char *default_text)
{
	const char *env[] = {assignment, NULL};
	char err[2048];
	int problems = parse_capture(env, err, sizeof err);
	cr_assert_eq(problems, 1, "%s: %d problems, want 1", assignment, problems);
	cr_assert_eq(count_lines(err), 1, "%s: want one line, got: %s", assignment, err);
	cr_assert(strncmp(err, "vmapalloc: ", 11) == 0, "%s: line: %s", assignment, err);
	cr_assert(strstr(err, name) != NULL, "%s: line lacks the name %s: %s", assignment, name, err);
	char want[128];
	snprintf(want, sizeof want, "using the default %s\n", default_text);
	cr_assert(strstr(err, want) != NULL, "%s: line lacks '%s': %s", assignment, want, err);
}

Test(options, defaults_match_options_def)
{
	vmap_options_defaults();
	cr_assert_eq(vmap_opt.help, 0);
	cr_assert_eq(vmap_opt.verbose, 0);
	cr_assert_eq(vmap_opt.backend, 2); /* auto */
	cr_assert_eq(vmap_opt.auto_after, 65536);
	cr_assert_eq(vmap_opt.small_max, 65536);
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
	cr_assert_eq(vmap_opt.shards, 0);
	cr_assert_eq(vmap_opt.pool_pages, 256);
	cr_assert_eq(vmap_opt.cache, 1);
	cr_assert_eq(vmap_opt.lazy_max, 0);
	cr_assert_eq(vmap_opt.purge_delay_ms, 2000);
	cr_assert_eq(vmap_opt.purge_advice, VMAP_ADVICE_DONTNEED);
	cr_assert_eq(vmap_opt.hugepage, 1);
	cr_assert_eq(vmap_opt.populate, 2, "auto");
	cr_assert_eq(vmap_opt.cache_bytes, 8 * MiB);
	cr_assert_not_null(vmap_opt.stats);
	cr_assert_str_empty(vmap_opt.stats);
	cr_assert_eq(vmap_opt.stats_format, VMAP_FORMAT_TEXT);
}

Test(options, empty_environment_gives_defaults_and_no_problems)
{
	const char *env[] = {"PATH=/usr/bin", "HOME=/root", NULL};
	char err[256];
	cr_assert_eq(parse_capture(env, err, sizeof err), 0);
	cr_assert_str_empty(err);
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
	cr_assert_eq(vmap_options_parse(NULL, false), 0);
	cr_assert_eq(vmap_opt.shards, 0);
}

/* The constructor's test (alloc.c vmap_init_at_start): any VMAPALLOC_*
 * entry, accepted, bad, unknown or without '=', means init at start. */
Test(options, any_vmapalloc_entry_is_seen_in_the_environment)
{
	char *none[] = {"PATH=/usr/bin", "VMAPALLO_X=1", "vmapalloc_stats=1", "XVMAPALLOC_STATS=1", NULL};
	cr_assert_not(vmap_options_in_env(none));
	char *empty[] = {NULL};
	cr_assert_not(vmap_options_in_env(empty));
	const char *const some[] = {"VMAPALLOC_STATS=1", "VMAPALLOC_NO_SUCH=2", "VMAPALLOC_HELP",
				    "VMAPALLOC_SMALL_MAX=12Q"};
	for (size_t i = 0; i < sizeof some / sizeof some[0]; i++) {
		char *env[] = {"PATH=/usr/bin", (char *)some[i], "HOME=/", NULL};
		cr_assert(vmap_options_in_env(env), "%s", some[i]);
	}
}

Test(options, parse_resets_earlier_values_to_defaults)
{
	const char *a[] = {"VMAPALLOC_SHARDS=7", NULL};
	cr_assert_eq(unit_parse(a), 0);
	cr_assert_eq(vmap_opt.shards, 7);
	const char *b[] = {NULL};
	cr_assert_eq(unit_parse(b), 0);
	cr_assert_eq(vmap_opt.shards, 0);
}

Test(options, size_suffixes_are_binary_units)
{
	const char *env[] = {"VMAPALLOC_SMALL_MAX=64K", "VMAPALLOC_RESERVE=3G",
			     "VMAPALLOC_LAZY_MAX=2M", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(vmap_opt.small_max, 64 * KiB);
	cr_assert_eq(vmap_opt.reserve, 3 * GiB);
	cr_assert_eq(vmap_opt.lazy_max, 2 * MiB);

	const char *t[] = {"VMAPALLOC_RESERVE=1T", NULL};
	cr_assert_eq(unit_parse(t), 0);
	cr_assert_eq(vmap_opt.reserve, 1ull << 40);
}

Test(options, size_suffixes_accept_kib_kb_and_any_case)
{
	static const struct {
		const char *v;
		uint64_t want;
	} cases[] = {
		{"2KiB", 2048},   {"2kib", 2048},      {"2KB", 2048},         {"2kb", 2048},
		{"2k", 2048},     {"5MiB", 5 * MiB},   {"5MB", 5 * MiB},      {"1GiB", GiB},
		{"1gb", GiB},     {"12345", 12345},    {"0", 0},              {"1024M", GiB},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t v = 777;
		int rc = vmap_option_parse_value(VMAP_OPT_SMALL_MAX, cases[i].v, &v);
		cr_assert_eq(rc, 0, "SMALL_MAX=%s rejected", cases[i].v);
		cr_assert_eq(v, cases[i].want, "SMALL_MAX=%s gave %lu", cases[i].v, (unsigned long)v);
	}
}

Test(options, malformed_suffixes_are_rejected)
{
	static const char *const bad[] = {"2Ki", "2KiBx", "2KBB", "2X", "2 K", "2i", "2iB", "K",
					  "2KK", "2.5M", "0x10", "+4", "-1", " 4", "4 "};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 777;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_SMALL_MAX, bad[i], &v), -1,
			     "SMALL_MAX=\"%s\" was accepted", bad[i]);
		cr_assert_eq(v, 777, "a rejected value must not write *out");
	}
}

Test(options, uint_options_take_no_suffix)
{
	uint64_t v = 0;
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_SHARDS, "4", &v), 0);
	cr_assert_eq(v, 4);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_SHARDS, "4K", &v), -1);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_PURGE_DELAY_MS, "1K", &v), -1);
}

Test(options, bool_spellings)
{
	static const char *const yes[] = {"1", "yes", "on", "true", "TRUE", "Yes", "ON", "True"};
	static const char *const no[] = {"0", "no", "off", "false", "FALSE", "No", "OFF", "False"};
	static const char *const bad[] = {"", "2", "y", "n", "yess", "tru", "enable", "01", "on ",
					  "truex"};
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		uint64_t v = 9;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, yes[i], &v), 0, "%s", yes[i]);
		cr_assert_eq(v, 1, "%s", yes[i]);
	}
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		uint64_t v = 9;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_HUGEPAGE, no[i], &v), 0, "%s", no[i]);
		cr_assert_eq(v, 0, "%s", no[i]);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 9;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_HUGEPAGE, bad[i], &v), -1,
			     "\"%s\" was accepted as a bool", bad[i]);
	}
	const char *env[] = {"VMAPALLOC_HUGEPAGE=off", "VMAPALLOC_POPULATE=yes", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(vmap_opt.hugepage, 0);
	cr_assert_eq(vmap_opt.populate, 1);
}

Test(options, a_bool_with_a_third_choice_takes_it_and_only_it)
{
	uint64_t v = 9;
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, "auto", &v), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, "AUTO", &v), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, "off", &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, "2", &v), -1);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_POPULATE, "autox", &v), -1);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_HUGEPAGE, "auto", &v), -1,
		     "a plain bool took a third choice");
}

Test(options, bad_bool_keeps_default_with_one_line)
{
	expect_rejected("VMAPALLOC_HUGEPAGE=maybe", "VMAPALLOC_HUGEPAGE", "1");
	cr_assert_eq(vmap_opt.hugepage, 1);
}

Test(options, out_of_range_keeps_default)
{
	expect_rejected("VMAPALLOC_SHARDS=129", "VMAPALLOC_SHARDS", "0");
	cr_assert_eq(vmap_opt.shards, 0);
	expect_rejected("VMAPALLOC_RESERVE=255M", "VMAPALLOC_RESERVE", "64G");
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
	expect_rejected("VMAPALLOC_RESERVE=2T", "VMAPALLOC_RESERVE", "64G");
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
	expect_rejected("VMAPALLOC_PURGE_DELAY_MS=3600001", "VMAPALLOC_PURGE_DELAY_MS", "2000");
	cr_assert_eq(vmap_opt.purge_delay_ms, 2000);
}

Test(options, range_limits_are_inclusive)
{
	const char *env[] = {"VMAPALLOC_SHARDS=128", "VMAPALLOC_RESERVE=256M",
			     "VMAPALLOC_PURGE_DELAY_MS=3600000", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(vmap_opt.shards, 128);
	cr_assert_eq(vmap_opt.reserve, 256 * MiB);
	cr_assert_eq(vmap_opt.purge_delay_ms, 3600000);
}

Test(options, non_numeric_keeps_default)
{
	expect_rejected("VMAPALLOC_SHARDS=abc", "VMAPALLOC_SHARDS", "0");
	cr_assert_eq(vmap_opt.shards, 0);
	expect_rejected("VMAPALLOC_SMALL_MAX=lots", "VMAPALLOC_SMALL_MAX", "64K");
	cr_assert_eq(vmap_opt.small_max, 65536);
}

Test(options, overflowing_value_keeps_default)
{
	expect_rejected("VMAPALLOC_RESERVE=99999999999999999999G", "VMAPALLOC_RESERVE", "64G");
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
	/* 2^34 G = 2^64: the digits fit, the shift does not. */
	expect_rejected("VMAPALLOC_RESERVE=17179869184G", "VMAPALLOC_RESERVE", "64G");
	expect_rejected("VMAPALLOC_SHARDS=18446744073709551616", "VMAPALLOC_SHARDS", "0");
	uint64_t v = 5;
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_LAZY_MAX, "18446744073709551615", &v), -1);
	cr_assert_eq(v, 5);
}

Test(options, empty_value_keeps_default)
{
	expect_rejected("VMAPALLOC_SHARDS=", "VMAPALLOC_SHARDS", "0");
	cr_assert_eq(vmap_opt.shards, 0);
	expect_rejected("VMAPALLOC_PURGE_ADVICE=", "VMAPALLOC_PURGE_ADVICE", "dontneed");
	expect_rejected("VMAPALLOC_CACHE=", "VMAPALLOC_CACHE", "1");
}

Test(options, overlong_value_keeps_default_and_is_cut_in_the_message)
{
	char assignment[400] = "VMAPALLOC_STATS=";
	size_t n = strlen(assignment);
	memset(assignment + n, 'x', 300);
	assignment[n + 300] = '\0';
	const char *env[] = {assignment, NULL};
	char err[2048];
	cr_assert_eq(parse_capture(env, err, sizeof err), 1);
	cr_assert_str_empty(vmap_opt.stats);
	cr_assert_eq(count_lines(err), 1, "%s", err);
	cr_assert(strstr(err, "VMAPALLOC_STATS") != NULL, "%s", err);
	cr_assert(strstr(err, "using the default") != NULL, "%s", err);
	cr_assert(strstr(err, "...") != NULL, "a long value is shown cut with ...: %s", err);
	cr_assert(strlen(err) < 300, "the value is cut to 64 bytes in the line: %zu", strlen(err));

	/* 300 digits: too long for any number. */
	char digits[400] = "VMAPALLOC_SMALL_MAX=";
	n = strlen(digits);
	memset(digits + n, '1', 300);
	digits[n + 300] = '\0';
	expect_rejected(digits, "VMAPALLOC_SMALL_MAX", "64K");
	cr_assert_eq(vmap_opt.small_max, 65536);
}

Test(options, string_of_255_bytes_is_kept_and_256_rejected)
{
	char ok[300] = "VMAPALLOC_STATS=";
	size_t n = strlen(ok);
	memset(ok + n, 'a', 255);
	ok[n + 255] = '\0';
	const char *env[] = {ok, NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(strlen(vmap_opt.stats), 255);

	uint64_t v;
	char s256[257];
	memset(s256, 'b', 256);
	s256[256] = '\0';
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_STATS, s256, &v), -1);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_STATS, s256 + 1, &v), 0);
}

Test(options, string_option_is_stored)
{
	const char *env[] = {"VMAPALLOC_STATS=/tmp/report.%p", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_str_eq(vmap_opt.stats, "/tmp/report.%p");
}

Test(options, unknown_name_is_counted_and_suggests_the_nearest)
{
	const char *env[] = {"VMAPALLOC_SHARD=2", NULL};
	char err[1024];
	cr_assert_eq(parse_capture(env, err, sizeof err), 1);
	cr_assert_eq(count_lines(err), 1, "%s", err);
	cr_assert(strstr(err, "VMAPALLOC_SHARD=2") != NULL, "%s", err);
	cr_assert(strstr(err, "did you mean VMAPALLOC_SHARDS?") != NULL, "%s", err);
	cr_assert_eq(vmap_opt.shards, 0);
}

Test(options, overlong_unknown_name_is_cut_in_the_message)
{
	char assignment[1200] = "VMAPALLOC_";
	size_t n = strlen(assignment);
	memset(assignment + n, 'N', 1000);
	strcpy(assignment + n + 1000, "=1");
	const char *env[] = {assignment, NULL};
	char err[4096];
	cr_assert_eq(parse_capture(env, err, sizeof err), 1);
	cr_assert_eq(count_lines(err), 1, "%s", err);
	cr_assert(strstr(err, "unknown option VMAPALLOC_NNNN") != NULL, "%s", err);
	cr_assert(strstr(err, "N...=1") != NULL, "the name is shown cut with ...: %s", err);
	cr_assert(strlen(err) < 300, "the name is cut to 64 bytes in the line: %zu", strlen(err));
}

Test(options, unknown_far_name_points_to_help)
{
	const char *env[] = {"VMAPALLOC_ZZZZZZZZZZZZ=1", "VMAPALLOC_QQ=1", NULL};
	char err[1024];
	cr_assert_eq(parse_capture(env, err, sizeof err), 2);
	cr_assert_eq(count_lines(err), 2, "%s", err);
	cr_assert(strstr(err, "unknown option VMAPALLOC_ZZZZZZZZZZZZ=1") != NULL, "%s", err);
	cr_assert(strstr(err, "VMAPALLOC_HELP=1") != NULL, "%s", err);
}

Test(options, names_are_case_sensitive_and_need_the_prefix)
{
	const char *env[] = {"vmapalloc_shards=3", "VMAPALLOCSHARDS=3", "XVMAPALLOC_SHARDS=3",
			     "VMAPALLOC_SHARDS", NULL};
	char err[256];
	cr_assert_eq(parse_capture(env, err, sizeof err), 0, "%s", err);
	cr_assert_str_empty(err);
	cr_assert_eq(vmap_opt.shards, 0);
}

Test(options, problems_are_counted_one_per_bad_entry)
{
	const char *env[] = {"VMAPALLOC_SHARDS=x",   "VMAPALLOC_RESERVE=1",   "VMAPALLOC_NOPE=1",
			     "VMAPALLOC_POOL_PAGES=8", "VMAPALLOC_CACHE=perhaps", NULL};
	char err[4096];
	cr_assert_eq(parse_capture(env, err, sizeof err), 4);
	cr_assert_eq(count_lines(err), 4, "%s", err);
	cr_assert_eq(vmap_opt.pool_pages, 8, "good entries still apply");
}

Test(options, last_assignment_wins)
{
	const char *env[] = {"VMAPALLOC_SHARDS=2", "VMAPALLOC_SHARDS=3", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(vmap_opt.shards, 3);
}

Test(options, secure_execution_ignores_everything)
{
	const char *env[] = {"VMAPALLOC_SHARDS=4", "VMAPALLOC_STATS=/tmp/x", "VMAPALLOC_BOGUS=1",
			     "VMAPALLOC_RESERVE=junk", NULL};
	char err[256];
	struct capture c = capture_begin();
	int problems = vmap_options_parse((char *const *)env, true);
	capture_end(c, err, sizeof err);
	cr_assert_eq(problems, 0);
	cr_assert_str_empty(err, "secure mode prints nothing: %s", err);
	cr_assert_eq(vmap_opt.shards, 0);
	cr_assert_str_empty(vmap_opt.stats);
	cr_assert_eq(vmap_opt.reserve, 64ull << 30);
}

Test(options, enum_choices_map_to_their_index)
{
	const char *env[] = {"VMAPALLOC_PURGE_ADVICE=free", "VMAPALLOC_STATS_FORMAT=json",
			     "VMAPALLOC_BACKEND=libc", NULL};
	cr_assert_eq(unit_parse(env), 0);
	cr_assert_eq(vmap_opt.purge_advice, VMAP_ADVICE_FREE);
	cr_assert_eq(vmap_opt.stats_format, VMAP_FORMAT_JSON);
	cr_assert_eq(vmap_opt.backend, 0);

	uint64_t v = 9;
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_PURGE_ADVICE, "DONTNEED", &v), 0);
	cr_assert_eq(v, VMAP_ADVICE_DONTNEED);
	cr_assert_eq(vmap_option_parse_value(VMAP_OPT_PURGE_ADVICE, "Free", &v), 0);
	cr_assert_eq(v, VMAP_ADVICE_FREE);
}

Test(options, enum_rejects_other_words)
{
	static const char *const bad[] = {"", "fre", "freee", "dontneed|free", "madv_free", "0",
					  "|", "free|"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 9;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_PURGE_ADVICE, bad[i], &v), -1,
			     "PURGE_ADVICE=\"%s\" accepted", bad[i]);
		cr_assert_eq(v, 9);
	}
	expect_rejected("VMAPALLOC_STATS_FORMAT=xml", "VMAPALLOC_STATS_FORMAT", "text");
	cr_assert_eq(vmap_opt.stats_format, VMAP_FORMAT_TEXT);
	expect_rejected("VMAPALLOC_BACKEND=jemalloc", "VMAPALLOC_BACKEND", "auto");
}

Test(options, rejection_message_says_what_is_accepted)
{
	const char *env[] = {"VMAPALLOC_SHARDS=abc", NULL};
	char err[1024];
	cr_assert_eq(parse_capture(env, err, sizeof err), 1);
	cr_assert_str_eq(err, "vmapalloc: VMAPALLOC_SHARDS=\"abc\" is not accepted: expected an "
			      "integer from 0 to 128; using the default 0\n");
	const char *env2[] = {"VMAPALLOC_RESERVE=1K", NULL};
	cr_assert_eq(parse_capture(env2, err, sizeof err), 1);
	cr_assert(strstr(err, "from 256M to 1T") != NULL, "%s", err);
}

Test(options, print_lists_every_option)
{
	vmap_options_defaults();
	int p[2];
	cr_assert_eq(pipe(p), 0);
	vmap_options_print(p[1], false);
	close(p[1]);
	static char out[65536];
	size_t n = 0;
	ssize_t r;
	while (n + 1 < sizeof out && (r = read(p[0], out + n, sizeof out - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	close(p[0]);
	static const char *const names[] = {
#define X(NAME, field, type, def, min, max, choices, doc) "VMAPALLOC_" #NAME "=",
#include "options.def"
#undef X
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		cr_assert(strstr(out, names[i]) != NULL, "%s missing from HELP output", names[i]);
	cr_assert(strstr(out, "VMAPALLOC_RESERVE=64G") != NULL);
}

/* The environment an init that finds environ not set reads instead: the
 * kernel's copy of the one the process started with, entry for entry. */
Test(options, the_environment_read_from_proc_is_the_one_at_start)
{
	extern char **environ;
	char **env = vmap_env_from_proc();
	cr_assert_not_null(env);
	size_t n = 0;
	for (; environ[n]; n++) {
		cr_assert_not_null(env[n], "entry %zu (%s) missing", n, environ[n]);
		cr_assert_str_eq(env[n], environ[n]);
	}
	cr_assert_null(env[n], "an entry more than environ holds: %s", env[n]);
	cr_assert_gt(n, 0, "the test runs with an environment");
}

/* A child of this test binary, started with the environment envp, runs
 * only the named test; its exit status. */
static int run_child(const char *test, char **envp)
{
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	cr_assert_gt(len, 0);
	self[len] = 0;
	char filter[256];
	snprintf(filter, sizeof filter, "options/%s", test);
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = {self, "--filter", filter, NULL};
		execve(self, argv, envp);
		_exit(2);
	}
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "the child died of a signal");
	return WEXITSTATUS(st);
}

/* The entries of the copy from /proc: how many, and whether each of those
 * named X... has the length `len` that every one of them was given. */
static size_t proc_entries(size_t len, bool *whole)
{
	char **env = vmap_env_from_proc();
	cr_assert_not_null(env);
	size_t n = 0;
	*whole = true;
	for (; env[n]; n++)
		if (env[n][0] == 'X' && strlen(env[n]) != len)
			*whole = false;
	return n;
}

/* Past 1,023 entries the copy is cut short, the entries it holds whole. */
Test(options, many_entries_read_from_proc_are_cut_at_the_table)
{
	if (getenv("VMAP_UNIT_CHILD")) {
		bool whole;
		size_t n = proc_entries(38, &whole);
		cr_assert_eq(n, 1023);
		cr_assert(whole);
		return;
	}
	enum { N = 3000 };
	static char entries[N][48];
	static char *envp[N + 2];
	envp[0] = "VMAP_UNIT_CHILD=1";
	for (int i = 0; i < N; i++) {
		snprintf(entries[i], sizeof entries[i], "X%05d=%031d", i, i);
		envp[i + 1] = entries[i];
	}
	cr_assert_eq(run_child("many_entries_read_from_proc_are_cut_at_the_table", envp), 0);
}

/* Past its 64 KiB buffer, the copy leaves out the entry the buffer cut:
 * a value read cut would be another value. */
Test(options, long_entries_read_from_proc_are_never_cut)
{
	if (getenv("VMAP_UNIT_CHILD")) {
		bool whole;
		size_t n = proc_entries(999, &whole);
		cr_assert(n > 1 && n < 100, "%zu entries", n);
		cr_assert(whole, "an entry was cut");
		return;
	}
	enum { N = 100 };
	static char entries[N][1000];
	static char *envp[N + 2];
	envp[0] = "VMAP_UNIT_CHILD=1";
	for (int i = 0; i < N; i++) {
		snprintf(entries[i], sizeof entries[i], "X%03d=", i);
		memset(entries[i] + 5, 'v', 994);
		entries[i][999] = 0;
		envp[i + 1] = entries[i];
	}
	cr_assert_eq(run_child("long_entries_read_from_proc_are_never_cut", envp), 0);
}
