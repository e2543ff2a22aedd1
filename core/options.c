/*
 * options.c — the option table and its parser.
 *
 * Owns: vmap_opt (written once, during init, before any other thread can see
 * the allocator; read-only afterwards) and the table expanded from options.def.
 *
 * Invariants:
 *  - Every value in vmap_opt is within its declared range or is the default.
 *  - Parsing never allocates, never calls getenv or stdio, and never reads
 *    past a NUL: it is fuzzed (tests/fuzz) and runs before the heap exists.
 *  - In a secure-execution process (AT_SECURE) the environment is ignored
 *    entirely: no tuning and no output path comes from it.
 *
 * Called by: alloc.c (init), the unit tests and the fuzzer.
 */
#include "options.h"

#include "fmt.h"
#include "section.h"

enum vmap_opt_type { T_SIZE, T_UINT, T_BOOL, T_ENUM, T_STR };

/*
 * No pointer in the table: the names and choices are inline arrays, the docs
 * are reached by their offset in one block (option_docs).  A pointer each
 * was a relocation that ld.so applied at load in every process, 78 of them,
 * in the page of data it writes; now the table is read-only data.
 */
struct vmap_option_desc {
	char name[24];    /* longest: PROFILE_LARGE_SAMPLE */
	char choices[32]; /* longest: libc|builtin|auto|mimalloc */
	enum vmap_opt_type type;
	uint32_t doc;     /* offset in option_docs */
	uint64_t def, min, max;
	size_t offset;
};

static const struct option_docs {
#define X(NAME, field, type, def, min, max, choices, doc) char field[sizeof(doc)];
#include "options.def"
#undef X
} option_docs = {
#define X(NAME, field, type, def, min, max, choices, doc) doc,
#include "options.def"
#undef X
};

#define VMAP_STR_MAX 256
static char vmap_opt_str_storage[VMAP_OPT_COUNT][VMAP_STR_MAX];
/* What an unset string option points at, instead of its empty storage: the
 * storage's 6 KiB then stay untouched, not even read, in a process that sets
 * no string option (a read maps a page too). */
static char vmap_opt_str_unset[1] VMAP_HOT;

static const struct vmap_option_desc vmap_options_table[VMAP_OPT_COUNT] VMAP_START_DATA = {
#define X(NAME, field, type, def, min, max, choices, doc) \
	{#NAME, choices, T_##type, __builtin_offsetof(struct option_docs, field), \
	 (uint64_t)(def), (uint64_t)(min), (uint64_t)(max), \
	 __builtin_offsetof(struct vmap_options, field)},
#include "options.def"
#undef X
};

struct vmap_options vmap_opt VMAP_HOT;

static uint64_t *opt_slot(enum vmap_option_id id)
{
	return (uint64_t *)((char *)&vmap_opt + vmap_options_table[id].offset);
}

VMAP_START_TEXT void vmap_options_defaults(void)
{
	for (int i = 0; i < VMAP_OPT_COUNT; i++) {
		const struct vmap_option_desc *d = &vmap_options_table[i];
		if (d->type == T_STR) {
			*(char **)((char *)&vmap_opt + d->offset) = vmap_opt_str_unset;
		} else {
			*opt_slot((enum vmap_option_id)i) = d->def;
		}
	}
}

VMAP_START_TEXT static bool str_eq_n(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

static size_t str_len(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static char lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Case-insensitive equality of value against s[0..n). */
static bool word_eq(const char *value, const char *s, size_t n)
{
	size_t i = 0;
	for (; i < n; i++)
		if (value[i] == '\0' || lower(value[i]) != lower(s[i]))
			return false;
	return value[i] == '\0';
}

static int parse_u64(const char *s, uint64_t *out, bool allow_suffix)
{
	uint64_t v = 0;
	size_t i = 0;
	if (s[0] < '0' || s[0] > '9')
		return -1;
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (s[i] != '\0') {
		if (!allow_suffix)
			return -1;
		int shift;
		switch (lower(s[i])) {
		case 'k': shift = 10; break;
		case 'm': shift = 20; break;
		case 'g': shift = 30; break;
		case 't': shift = 40; break;
		default: return -1;
		}
		i++;
		if (lower(s[i]) == 'i' && lower(s[i + 1]) == 'b')
			i += 2; /* KiB, MiB */
		else if (lower(s[i]) == 'b')
			i++; /* KB, MB: still binary units */
		if (s[i] != '\0')
			return -1;
		if (v > (UINT64_MAX >> shift))
			return -1;
		v <<= shift;
	}
	*out = v;
	return 0;
}

int vmap_option_parse_value(enum vmap_option_id id, const char *value, uint64_t *out)
{
	const struct vmap_option_desc *d = &vmap_options_table[id];
	uint64_t v;
	switch (d->type) {
	case T_SIZE:
	case T_UINT:
		if (parse_u64(value, &v, d->type == T_SIZE) != 0 || v < d->min || v > d->max)
			return -1;
		*out = v;
		return 0;
	case T_BOOL:
		if (word_eq(value, "1", 1) || word_eq(value, "yes", 3) || word_eq(value, "on", 2) ||
		    word_eq(value, "true", 4)) {
			*out = 1;
			return 0;
		}
		if (word_eq(value, "0", 1) || word_eq(value, "no", 2) || word_eq(value, "off", 3) ||
		    word_eq(value, "false", 5)) {
			*out = 0;
			return 0;
		}
		if (d->choices[0] && word_eq(value, d->choices, str_len(d->choices))) {
			*out = 2; /* a BOOL with a third choice: "auto" */
			return 0;
		}
		return -1;
	case T_ENUM: {
		const char *c = d->choices;
		for (uint64_t idx = 0;; idx++) {
			size_t n = 0;
			while (c[n] && c[n] != '|')
				n++;
			if (word_eq(value, c, n)) {
				*out = idx;
				return 0;
			}
			if (!c[n])
				return -1;
			c += n + 1;
		}
	}
	case T_STR:
		if (str_len(value) >= VMAP_STR_MAX)
			return -1;
		*out = 0;
		return 0;
	}
	return -1;
}

static void describe_accepted(struct vmap_buf *b, const struct vmap_option_desc *d)
{
	switch (d->type) {
	case T_SIZE:
		vmap_buf_str(b, "a size in bytes (K/M/G/T suffixes allowed) from ");
		vmap_buf_size_opt(b, d->min);
		vmap_buf_str(b, " to ");
		vmap_buf_size_opt(b, d->max);
		break;
	case T_UINT:
		vmap_buf_str(b, "an integer from ");
		vmap_buf_u64(b, d->min);
		vmap_buf_str(b, " to ");
		vmap_buf_u64(b, d->max);
		break;
	case T_BOOL:
		vmap_buf_str(b, d->choices[0] ? "0/1, yes/no, on/off, true/false or " :
						"0/1, yes/no, on/off or true/false");
		vmap_buf_str(b, d->choices);
		break;
	case T_ENUM:
		vmap_buf_str(b, "one of ");
		vmap_buf_str(b, d->choices);
		break;
	case T_STR:
		vmap_buf_str(b, "a string shorter than 256 bytes");
		break;
	}
}

static void print_value(struct vmap_buf *b, const struct vmap_option_desc *d, uint64_t v,
			const char *str)
{
	switch (d->type) {
	case T_SIZE: vmap_buf_size_opt(b, v); break;
	case T_BOOL:
		if (v == 2) {
			vmap_buf_str(b, d->choices);
			break;
		}
		/* fall through */
	case T_UINT: vmap_buf_u64(b, v); break;
	case T_ENUM: {
		const char *c = d->choices;
		for (uint64_t i = 0; i < v && *c; c++)
			if (*c == '|')
				i++;
		while (*c && *c != '|')
			vmap_buf_char(b, *c++);
		break;
	}
	case T_STR: vmap_buf_str(b, str && str[0] ? str : "(unset)"); break;
	}
}

/* Levenshtein distance, bounded to short names (all option names are < 32). */
static unsigned edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
	unsigned row[40];
	if (na > 39 || nb > 39)
		return 99;
	for (size_t j = 0; j <= nb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= na; i++) {
		unsigned diag = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= nb; j++) {
			unsigned up = row[j];
			unsigned cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
			unsigned best = diag + cost;
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

static const char prefix[] VMAP_START_DATA = "VMAPALLOC_";
#define PREFIX_LEN (sizeof prefix - 1)

static void report_unknown(const char *name, size_t n, const char *value)
{
	unsigned best = 99;
	int best_i = -1;
	for (int i = 0; i < VMAP_OPT_COUNT; i++) {
		const char *on = vmap_options_table[i].name;
		unsigned dist = edit_distance(name, n, on, str_len(on));
		if (dist < best) {
			best = dist;
			best_i = i;
		}
	}
	VMAP_BUF(b, 2, 512);
	vmap_buf_str(&b, "vmapalloc: unknown option ");
	vmap_buf_str(&b, prefix);
	/* Name and value cut to 64 bytes like report_bad's value: one line of
	 * bounded length whatever the environment holds. */
	vmap_buf_mem(&b, name, n > 64 ? 64 : n);
	if (n > 64)
		vmap_buf_str(&b, "...");
	vmap_buf_char(&b, '=');
	size_t vn = str_len(value);
	vmap_buf_mem(&b, value, vn > 64 ? 64 : vn);
	if (vn > 64)
		vmap_buf_str(&b, "...");
	if (best_i >= 0 && best <= (n / 3 > 2 ? n / 3 : 2)) {
		vmap_buf_str(&b, " ignored; did you mean ");
		vmap_buf_str(&b, prefix);
		vmap_buf_str(&b, vmap_options_table[best_i].name);
		vmap_buf_str(&b, "?");
	} else {
		vmap_buf_str(&b, " ignored (VMAPALLOC_HELP=1 lists the options)");
	}
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
}

static void report_bad(const struct vmap_option_desc *d, const char *value)
{
	VMAP_BUF(b, 2, 512);
	size_t vn = str_len(value);
	vmap_buf_str(&b, "vmapalloc: ");
	vmap_buf_str(&b, prefix);
	vmap_buf_str(&b, d->name);
	vmap_buf_str(&b, "=\"");
	vmap_buf_mem(&b, value, vn > 64 ? 64 : vn);
	if (vn > 64)
		vmap_buf_str(&b, "...");
	vmap_buf_str(&b, "\" is not accepted: expected ");
	describe_accepted(&b, d);
	vmap_buf_str(&b, "; using the default ");
	print_value(&b, d, d->def, "");
	vmap_buf_char(&b, '\n');
	vmap_buf_flush(&b);
}

VMAP_START_TEXT bool vmap_options_in_env(char *const *envp)
{
	for (char *const *e = envp; *e; e++)
		if ((*e)[0] == 'V' && str_eq_n(*e, prefix, PREFIX_LEN))
			return true;
	return false;
}

VMAP_START_TEXT int vmap_options_parse(char *const *envp, bool secure)
{
	vmap_options_defaults();
	if (secure || !envp)
		return 0;
	int problems = 0;
	for (char *const *e = envp; *e; e++) {
		const char *s = *e;
		if (!str_eq_n(s, prefix, PREFIX_LEN))
			continue;
		const char *name = s + PREFIX_LEN;
		size_t n = 0;
		while (name[n] && name[n] != '=')
			n++;
		if (name[n] != '=')
			continue;
		const char *value = name + n + 1;
		int found = -1;
		for (int i = 0; i < VMAP_OPT_COUNT; i++) {
			const char *on = vmap_options_table[i].name;
			if (str_len(on) == n && str_eq_n(on, name, n)) {
				found = i;
				break;
			}
		}
		if (found < 0) {
			report_unknown(name, n, value);
			problems++;
			continue;
		}
		const struct vmap_option_desc *d = &vmap_options_table[found];
		uint64_t v;
		if (vmap_option_parse_value((enum vmap_option_id)found, value, &v) != 0) {
			report_bad(d, value);
			problems++;
			continue;
		}
		if (d->type == T_STR) {
			size_t vn = str_len(value);
			for (size_t i = 0; i <= vn; i++)
				vmap_opt_str_storage[found][i] = value[i];
			*(char **)((char *)&vmap_opt + d->offset) = vmap_opt_str_storage[found];
		} else {
			*opt_slot((enum vmap_option_id)found) = v;
		}
	}
	return problems;
}

void vmap_options_print(int fd, bool effective)
{
	VMAP_BUF(b, fd, 2048);
	vmap_buf_str(&b, effective ? "vmapalloc: effective settings\n"
				   : "vmapalloc options (environment variables):\n");
	for (int i = 0; i < VMAP_OPT_COUNT; i++) {
		const struct vmap_option_desc *d = &vmap_options_table[i];
		vmap_buf_str(&b, "  ");
		vmap_buf_str(&b, prefix);
		vmap_buf_str(&b, d->name);
		vmap_buf_char(&b, '=');
		if (effective) {
			const char *str = d->type == T_STR ? *(char **)((char *)&vmap_opt + d->offset) : "";
			print_value(&b, d, d->type == T_STR ? 0 : *opt_slot((enum vmap_option_id)i), str);
			vmap_buf_char(&b, '\n');
			continue;
		}
		print_value(&b, d, d->def, "");
		vmap_buf_str(&b, "\n      ");
		vmap_buf_str(&b, (const char *)&option_docs + d->doc);
		vmap_buf_str(&b, "\n      accepts ");
		describe_accepted(&b, d);
		vmap_buf_char(&b, '\n');
	}
	vmap_buf_flush(&b);
}
