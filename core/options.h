/*
 * options.h — the effective settings, read once at init (see options.def).
 */
#ifndef VMAP_OPTIONS_H
#define VMAP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMAP_OPT_TYPE_SIZE uint64_t
#define VMAP_OPT_TYPE_UINT uint64_t
#define VMAP_OPT_TYPE_BOOL uint64_t
#define VMAP_OPT_TYPE_ENUM uint64_t
#define VMAP_OPT_TYPE_STR char *

struct vmap_options {
#define X(NAME, field, type, def, min, max, choices, doc) VMAP_OPT_TYPE_##type field;
#include "options.def"
#undef X
};

enum vmap_option_id {
#define X(NAME, field, type, def, min, max, choices, doc) VMAP_OPT_##NAME,
#include "options.def"
#undef X
	VMAP_OPT_COUNT
};

enum { VMAP_ADVICE_DONTNEED = 0, VMAP_ADVICE_FREE = 1 };
enum { VMAP_FORMAT_TEXT = 0, VMAP_FORMAT_JSON = 1 };
enum { VMAP_COUNTER_AUTO = 0, VMAP_COUNTER_ATOMIC = 1, VMAP_COUNTER_PERCPU = 2 };

extern struct vmap_options vmap_opt;

/*
 * Parses envp (NULL-terminated "NAME=value" strings) into vmap_opt.  Bad
 * values and unknown VMAPALLOC_* names print one line each to fd 2 and keep
 * the default.  With secure set (AT_SECURE), the environment is ignored.
 * Returns the number of problems reported.
 */
int vmap_options_parse(char *const *envp, bool secure);
void vmap_options_defaults(void);

/* Whether envp holds any VMAPALLOC_* entry (a few compares per entry). */
bool vmap_options_in_env(char *const *envp);

/* Writes the option table (HELP) or the effective values (VERBOSE) to fd. */
void vmap_options_print(int fd, bool effective);

/* Parses one value of the given option: 0, or -1 if it is not accepted. */
int vmap_option_parse_value(enum vmap_option_id id, const char *value, uint64_t *out);

#endif
