/*
 * criterion.h — a minimal stand-in for Criterion, for the ThreadSanitizer run
 * of the unit tests (scripts/reliability tsan).
 *
 * Why: Criterion (BoxFort) maps its shared "inheritable arena" with MAP_FIXED
 * at random addresses, which ThreadSanitizer's mmap interceptor refuses
 * ("criterion: Could not initialize inheritable arena: Resource temporarily
 * unavailable"), so a TSan-built Criterion binary cannot start.  The unit test
 * sources are compiled unchanged against this header instead (it comes first
 * on the include path): Test(), TestSuite() and the cr_assert family used in
 * tests/unit/, with Criterion's semantics where the tests rely on them:
 *  - every Test runs in its own forked process (the core's globals start
 *    from zero), with its .init, its .timeout (or the suite's, or 120 s) and
 *    its expected .signal / .exit_code;
 *  - a failed assertion prints "file:line: assertion failed: ..." and ends
 *    the Test (exit 1).
 * The runner (cr_shim_main.c) runs every registered Test, or those whose
 * "suite::name" contains one of its arguments, and exits 1 if any failed —
 * including by a ThreadSanitizer report (TSan's exit code 66 in the child).
 */
#ifndef CR_SHIM_CRITERION_H
#define CR_SHIM_CRITERION_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cr_shim_opts {
	void (*init)(void);
	void (*fini)(void);
	int signal;
	int exit_code;
	double timeout;
	bool disabled;
	const char *description;
};

struct cr_shim_test {
	const char *suite;
	const char *name;
	void (*fn)(void);
	struct cr_shim_opts opts;
};

struct cr_shim_suite {
	const char *name;
	struct cr_shim_opts opts;
};

void cr_shim_register(struct cr_shim_test *t);
void cr_shim_register_suite(struct cr_shim_suite *s);
__attribute__((noreturn, format(printf, 4, 5))) void cr_shim_fail(const char *file, int line,
								   const char *cond, const char *fmt, ...);

#define Test(suite, name, ...)                                                          \
	static void cr_shim_fn_##suite##_##name(void);                                  \
	static struct cr_shim_test cr_shim_t_##suite##_##name = {                       \
		#suite, #name, cr_shim_fn_##suite##_##name, {__VA_ARGS__}};             \
	__attribute__((constructor)) static void cr_shim_reg_##suite##_##name(void)     \
	{                                                                               \
		cr_shim_register(&cr_shim_t_##suite##_##name);                          \
	}                                                                               \
	static void cr_shim_fn_##suite##_##name(void)

#define TestSuite(suite, ...)                                                           \
	static struct cr_shim_suite cr_shim_s_##suite = {#suite, {__VA_ARGS__}};        \
	__attribute__((constructor)) static void cr_shim_sreg_##suite(void)             \
	{                                                                               \
		cr_shim_register_suite(&cr_shim_s_##suite);                             \
	}

/* The message is optional: " " "fmt" args... or just " ". */
#define cr_assert(cond, ...)                                                            \
	do {                                                                            \
		if (!(cond))                                                            \
			cr_shim_fail(__FILE__, __LINE__, #cond, " " __VA_ARGS__);        \
	} while (0)
#define cr_assert_not(cond, ...) cr_assert(!(cond), __VA_ARGS__)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) cr_assert(strcmp((a), (b)) != 0, __VA_ARGS__)
#define cr_assert_str_empty(s, ...) cr_assert((s)[0] == '\0', __VA_ARGS__)
#define cr_assert_str_not_empty(s, ...) cr_assert((s)[0] != '\0', __VA_ARGS__)
#define cr_expect cr_assert
#define cr_expect_eq cr_assert_eq

#endif
