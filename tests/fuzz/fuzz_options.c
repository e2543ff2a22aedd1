/*
 * fuzz_options.c — libFuzzer target for the option parser (core/options.c).
 *
 * The input becomes an environment: entries separated by '\n' or NUL, each
 * copied into its own exactly-sized heap buffer (so ASan catches a read past
 * the NUL).  The first byte of an entry picks its shape: a real option name
 * from core/options.def followed by '=' and the rest (a value to try), the
 * VMAPALLOC_ prefix followed by the rest (unknown or misspelt names), or the
 * raw bytes (anything at all).  The first input byte's low bit asks for
 * secure execution (AT_SECURE).
 *
 * Oracle: an independent reference parser written here from the documented
 * rules (options.def's header and README) computes the expected value of every
 * option (last valid assignment wins, otherwise the default) and the expected
 * number of problems (one per unknown VMAPALLOC_ name or rejected value).
 * Checked on every input:
 *  - vmap_options_parse returns that count and vmap_opt holds exactly the
 *    expected values; every value is the default or within [min, max]
 *    (booleans 0/1, or 2 for a third choice, enums below the number of
 *    choices, strings < 256 bytes);
 *  - it wrote exactly one line per problem to fd 2, each starting
 *    "vmapalloc: " and naming the variable; in secure mode nothing at all and
 *    every option at its default;
 *  - vmap_options_print (the HELP table and the effective values) runs, and
 *    every effective value it prints parses back to the value it printed;
 *  - vmap_option_parse_value agrees with the reference on every entry's value
 *    for every option.
 * Output to fd 2 is captured in a memfd while the parser runs (it is what
 * the line checks read); set FUZZ_OPTIONS_STDERR=1 to leave fd 2 alone.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "options.h"

#define FAIL(...)                                                                   \
	do {                                                                        \
		if (saved_stderr >= 0)                                              \
			dup2(saved_stderr, 2);                                      \
		fprintf(stderr, "fuzz_options: FAIL: " __VA_ARGS__);                \
		fputc('\n', stderr);                                                \
		abort();                                                            \
	} while (0)

static int saved_stderr = -1;
static int capture_fd = -1;
static int null_fd = -1;
static bool keep_stderr;

/* ---- the reference table, from options.def itself ------------------------- */

enum rtype { R_SIZE, R_UINT, R_BOOL, R_ENUM, R_STR };

struct ref {
	const char *name;
	enum rtype type;
	uint64_t def, min, max;
	const char *choices;
	size_t offset;
};

static const struct ref refs[] = {
#define X(NAME, field, type, def, min, max, choices, doc) \
	{#NAME, R_##type, (uint64_t)(def), (uint64_t)(min), (uint64_t)(max), choices, \
	 offsetof(struct vmap_options, field)},
#include "options.def"
#undef X
};
#define NREFS (sizeof refs / sizeof refs[0])

_Static_assert(NREFS == VMAP_OPT_COUNT, "options.def and options.h disagree");

static char lc(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool ieq(const char *a, const char *b, size_t bn)
{
	/* a (NUL-terminated) equals b[0..bn) ignoring ASCII case */
	size_t i = 0;
	for (; i < bn; i++)
		if (!a[i] || lc(a[i]) != lc(b[i]))
			return false;
	return a[i] == '\0';
}

static unsigned nchoices(const char *c)
{
	unsigned n = 1;
	for (; *c; c++)
		n += *c == '|';
	return n;
}

/* The documented grammar, written independently of options.c. */
static bool ref_value(const struct ref *r, const char *v, uint64_t *out)
{
	switch (r->type) {
	case R_SIZE:
	case R_UINT: {
		if (!(*v >= '0' && *v <= '9'))
			return false;
		unsigned __int128 x = 0;
		const char *p = v;
		while (*p >= '0' && *p <= '9') {
			x = x * 10 + (unsigned)(*p++ - '0');
			if (x > UINT64_MAX)
				return false;
		}
		if (*p) {
			if (r->type != R_SIZE)
				return false;
			unsigned sh;
			switch (lc(*p)) {
			case 'k': sh = 10; break;
			case 'm': sh = 20; break;
			case 'g': sh = 30; break;
			case 't': sh = 40; break;
			default: return false;
			}
			p++;
			if (lc(p[0]) == 'i' && lc(p[1]) == 'b')
				p += 2;
			else if (lc(p[0]) == 'b')
				p++;
			if (*p)
				return false;
			x <<= sh;
			if (x > UINT64_MAX)
				return false;
		}
		/* options.c refuses numbers within 9 of overflowing (a conservative
		 * overflow test); every such number is far above every option's max. */
		if ((uint64_t)x < r->min || (uint64_t)x > r->max)
			return false;
		*out = (uint64_t)x;
		return true;
	}
	case R_BOOL:
		if (ieq(v, "1", 1) || ieq(v, "yes", 3) || ieq(v, "on", 2) || ieq(v, "true", 4)) {
			*out = 1;
			return true;
		}
		if (ieq(v, "0", 1) || ieq(v, "no", 2) || ieq(v, "off", 3) || ieq(v, "false", 5)) {
			*out = 0;
			return true;
		}
		if (r->choices[0] && ieq(v, r->choices, strlen(r->choices))) {
			*out = 2; /* a third choice, such as "auto" */
			return true;
		}
		return false;
	case R_ENUM: {
		const char *c = r->choices;
		for (uint64_t i = 0;; i++) {
			size_t n = strcspn(c, "|");
			if (ieq(v, c, n)) {
				*out = i;
				return true;
			}
			if (!c[n])
				return false;
			c += n + 1;
		}
	}
	case R_STR:
		*out = 0;
		return strlen(v) < 256;
	}
	return false;
}

/* ---- capture of fd 2 ------------------------------------------------------ */

static void capture_begin(void)
{
	if (keep_stderr)
		return;
	ftruncate(capture_fd, 0);
	lseek(capture_fd, 0, SEEK_SET);
	dup2(capture_fd, 2);
}

/* Restores fd 2; returns the captured bytes (NUL-terminated, static). */
static const char *capture_end(size_t *len)
{
	static char buf[1 << 20];
	*len = 0;
	buf[0] = '\0';
	if (keep_stderr)
		return NULL;
	dup2(saved_stderr, 2);
	off_t n = lseek(capture_fd, 0, SEEK_CUR);
	if (n <= 0)
		return buf;
	if ((size_t)n >= sizeof buf)
		n = sizeof buf - 1;
	ssize_t r = pread(capture_fd, buf, (size_t)n, 0);
	if (r < 0)
		r = 0;
	buf[r] = '\0';
	*len = (size_t)r;
	return buf;
}

/* ---- the environment ------------------------------------------------------- */

#define MAX_ENV 128

struct env {
	char *e[MAX_ENV + 1];
	int n;
};

static void env_add(struct env *env, const char *a, size_t an, const char *b, size_t bn)
{
	if (env->n >= MAX_ENV)
		return;
	char *s = malloc(an + bn + 1); /* exactly sized: ASan sees any overread */
	if (!s)
		abort();
	memcpy(s, a, an);
	memcpy(s + an, b, bn);
	s[an + bn] = '\0';
	env->e[env->n++] = s;
}

static void env_free(struct env *env)
{
	for (int i = 0; i < env->n; i++)
		free(env->e[i]);
	env->n = 0;
}

static void build_env(struct env *env, const uint8_t *d, size_t n)
{
	size_t i = 0;
	while (i < n && env->n < MAX_ENV) {
		size_t j = i;
		while (j < n && d[j] != '\n' && d[j] != '\0')
			j++;
		if (j > i) {
			uint8_t k = d[i];
			const char *rest = (const char *)d + i + 1;
			size_t rn = j - i - 1;
			char head[64];
			switch (k % 4) {
			case 0:
			case 1: { /* a real name, the rest is the value */
				const struct ref *r = &refs[(k / 4) % NREFS];
				int hn = snprintf(head, sizeof head, "VMAPALLOC_%s=", r->name);
				env_add(env, head, (size_t)hn, rest, rn);
				break;
			}
			case 2: /* the prefix, the rest is a name (and maybe '=' and a value) */
				env_add(env, "VMAPALLOC_", 10, rest, rn);
				break;
			default: /* raw */
				env_add(env, "", 0, rest, rn);
				break;
			}
		}
		i = j + 1;
	}
	env->e[env->n] = NULL;
}

/* ---- checks ------------------------------------------------------------------ */

static uint64_t opt_u64(const struct ref *r)
{
	return *(const uint64_t *)((const char *)&vmap_opt + r->offset);
}

static const char *opt_str(const struct ref *r)
{
	return *(char *const *)((const char *)&vmap_opt + r->offset);
}

static void check_ranges(void)
{
	for (size_t k = 0; k < NREFS; k++) {
		const struct ref *r = &refs[k];
		if (r->type == R_STR) {
			const char *s = opt_str(r);
			if (!s || strnlen(s, 256) >= 256)
				FAIL("VMAPALLOC_%s: string missing or too long", r->name);
			continue;
		}
		uint64_t v = opt_u64(r);
		bool ok = v == r->def;
		switch (r->type) {
		case R_BOOL: ok = v <= 1 || (v == 2 && r->choices[0]); break;
		case R_ENUM: ok = v < nchoices(r->choices); break;
		default: ok = ok || (v >= r->min && v <= r->max); break;
		}
		if (!ok)
			FAIL("VMAPALLOC_%s = %llu is outside its declared range", r->name,
			     (unsigned long long)v);
	}
}

/* The longest line a problem may print: "vmapalloc: unknown option
 * VMAPALLOC_" + 64-byte name + "..." + "=" + 64-byte value + "..." + the
 * suggestion (~330 bytes), or a rejected value with what is accepted. */
#define LINE_MAX_BYTES 400

static void check_lines(const char *out, size_t len, int problems, const char *what)
{
	int lines = 0;
	const char *p = out;
	while (p < out + len) {
		const char *nl = memchr(p, '\n', (size_t)(out + len - p));
		if (!nl)
			FAIL("%s: unterminated line in the output: %.80s", what, p);
		if (strncmp(p, "vmapalloc: ", 11) != 0)
			FAIL("%s: line does not start with 'vmapalloc: ': %.80s", what, p);
		if (!memmem(p, (size_t)(nl - p), "VMAPALLOC_", 10))
			FAIL("%s: line does not name the variable: %.80s", what, p);
		/* Names and values are cut to 64 bytes in the messages: a line
		 * is bounded whatever the entry's length (the fixed text, the
		 * longest option name, two cut fields, an enum's choices). */
		if ((size_t)(nl - p) > LINE_MAX_BYTES)
			FAIL("%s: line of %zu bytes", what, (size_t)(nl - p));
		lines++;
		p = nl + 1;
	}
	if (lines != problems)
		FAIL("%s: %d problem(s) reported but %d line(s) printed", what, problems, lines);
}

/* The effective-values listing parses back to what vmap_opt holds. */
static void check_print_roundtrip(const char *out, size_t len)
{
	for (size_t k = 0; k < NREFS; k++) {
		const struct ref *r = &refs[k];
		char key[64];
		int kn = snprintf(key, sizeof key, "\n  VMAPALLOC_%s=", r->name);
		const char *at = memmem(out, len, key, (size_t)kn);
		if (!at)
			FAIL("effective listing lacks VMAPALLOC_%s", r->name);
		if (r->type == R_STR)
			continue; /* printed as given, or "(unset)" */
		at += kn;
		const char *nl = memchr(at, '\n', (size_t)(out + len - at));
		if (!nl || nl - at > 60)
			FAIL("effective listing: bad line for VMAPALLOC_%s", r->name);
		char val[64];
		memcpy(val, at, (size_t)(nl - at));
		val[nl - at] = '\0';
		uint64_t v;
		struct ref wide = *r;
		wide.min = 0;
		wide.max = UINT64_MAX; /* a default may sit outside [min, max] */
		if (!ref_value(&wide, val, &v) || v != opt_u64(r))
			FAIL("VMAPALLOC_%s: printed as \"%s\", which does not parse back to %llu", r->name,
			     val, (unsigned long long)opt_u64(r));
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *k = getenv("FUZZ_OPTIONS_STDERR");
	keep_stderr = k && strcmp(k, "1") == 0;
	saved_stderr = dup(2);
	capture_fd = memfd_create("fuzz_options_stderr", MFD_CLOEXEC);
	null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (saved_stderr < 0 || capture_fd < 0 || null_fd < 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool secure = size > 0 && (data[0] & 1);
	struct env env = {{0}, 0};
	build_env(&env, size ? data + 1 : data, size ? size - 1 : 0);

	/* Reference: expected values and problem count. */
	uint64_t want[NREFS];
	const char *want_str[NREFS];
	int want_problems = 0;
	for (size_t k = 0; k < NREFS; k++) {
		want[k] = refs[k].def;
		want_str[k] = "";
	}
	if (!secure) {
		for (int i = 0; i < env.n; i++) {
			const char *s = env.e[i];
			if (strncmp(s, "VMAPALLOC_", 10) != 0)
				continue;
			const char *name = s + 10, *eq = strchr(name, '=');
			if (!eq)
				continue;
			size_t nn = (size_t)(eq - name);
			int found = -1;
			for (size_t k = 0; k < NREFS; k++)
				if (strlen(refs[k].name) == nn && memcmp(refs[k].name, name, nn) == 0)
					found = (int)k;
			if (found < 0) {
				want_problems++;
				continue;
			}
			uint64_t v;
			if (!ref_value(&refs[found], eq + 1, &v)) {
				want_problems++;
				continue;
			}
			want[found] = v;
			want_str[found] = eq + 1;
		}
	}

	capture_begin();
	int problems = vmap_options_parse(env.e, secure);
	size_t len;
	const char *out = capture_end(&len);
	if (problems != want_problems)
		FAIL("parse reported %d problem(s), the reference %d", problems, want_problems);
	if (out) {
		if (secure && len)
			FAIL("secure mode printed: %.80s", out);
		check_lines(out, len, problems, "parse");
	}
	check_ranges();
	for (size_t k = 0; k < NREFS; k++) {
		const struct ref *r = &refs[k];
		if (r->type == R_STR) {
			if (strcmp(opt_str(r), want_str[k]) != 0)
				FAIL("VMAPALLOC_%s = \"%.40s\", expected \"%.40s\"", r->name, opt_str(r),
				     want_str[k]);
		} else if (opt_u64(r) != want[k]) {
			FAIL("VMAPALLOC_%s = %llu, expected %llu", r->name,
			     (unsigned long long)opt_u64(r), (unsigned long long)want[k]);
		}
	}

	/* The listings: HELP to /dev/null, the effective values checked. */
	vmap_options_print(null_fd, false);
	if (!keep_stderr) {
		ftruncate(capture_fd, 0);
		lseek(capture_fd, 0, SEEK_SET);
		vmap_options_print(capture_fd, true);
		off_t n = lseek(capture_fd, 0, SEEK_CUR);
		static char buf[1 << 16];
		if (n > 0 && (size_t)n < sizeof buf) {
			ssize_t r = pread(capture_fd, buf, (size_t)n, 0);
			if (r > 0)
				check_print_roundtrip(buf, (size_t)r);
		}
	}

	/* Every entry's value against every option, through the value parser. */
	for (int i = 0; i < env.n && i < 8; i++) {
		const char *eq = strchr(env.e[i], '=');
		const char *v = eq ? eq + 1 : env.e[i];
		for (size_t k = 0; k < NREFS; k++) {
			uint64_t got = 0, exp = 0;
			int rc = vmap_option_parse_value((enum vmap_option_id)k, v, &got);
			bool ok = ref_value(&refs[k], v, &exp);
			if ((rc == 0) != ok || (ok && got != exp))
				FAIL("VMAPALLOC_%s=\"%.60s\": parse_value rc %d value %llu, reference %d %llu",
				     refs[k].name, v, rc, (unsigned long long)got, ok,
				     (unsigned long long)exp);
		}
	}
	env_free(&env);
	return 0;
}
