/*
 * debug.h — assertions of the core's invariants.
 *
 * VMAP_ASSERT(cond) is checked in debug builds (VMAP_DEBUG: the unit tests'
 * core, `-Ddebug_checks=true`), where a false condition stops the program
 * with one line naming the condition, the file and the line.  In release
 * builds it compiles to nothing (the condition is not evaluated), so it may
 * sit on hot paths.
 */
#ifndef VMAP_DEBUG_H
#define VMAP_DEBUG_H

#ifdef VMAP_DEBUG
_Noreturn void vmap_assert_fail(const char *cond, const char *file, int line);
#define VMAP_ASSERT(cond) \
	(__builtin_expect(!!(cond), 1) ? (void)0 : vmap_assert_fail(#cond, __FILE__, __LINE__))
#else
#define VMAP_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif
