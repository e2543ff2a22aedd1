/*
 * backend.h — the small backends and the route to glibc.
 *
 * glibc's own allocator is reached through its exported __libc_* functions,
 * looked up in libc.so.6's own dynamic symbol table (not through the global
 * scope, where our own exported __libc_malloc would be found first, and not
 * with dlsym, which can allocate and takes the loader's locks).
 */
#ifndef VMAP_BACKEND_H
#define VMAP_BACKEND_H

#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* glibc's functions that vmapalloc calls: field, glibc's name, and the type.
 * Each is looked up on its first call (backend.c), not at start. */
#define VMAP_LIBC_FUNCTIONS(X)                                                         \
	X(malloc, "__libc_malloc", void *, (size_t n), (n))                            \
	X(free, "__libc_free", void, (void *p), (p))                                   \
	X(calloc, "__libc_calloc", void *, (size_t n, size_t size), (n, size))         \
	X(realloc, "__libc_realloc", void *, (void *p, size_t n), (p, n))              \
	X(memalign, "__libc_memalign", void *, (size_t a, size_t n), (a, n))           \
	X(usable_size, "malloc_usable_size", size_t, (void *p), (p))                   \
	X(trim, "malloc_trim", int, (size_t pad), (pad))                               \
	X(mallinfo2, "mallinfo2", struct mallinfo2, (void), ())                        \
	X(mallopt, "mallopt", int, (int param, int value), (param, value))

struct vmap_libc {
#define VMAP_LIBC_SLOT(field, name, ret, params, args) ret(*field) params;
	VMAP_LIBC_FUNCTIONS(VMAP_LIBC_SLOT)
#undef VMAP_LIBC_SLOT
};

extern struct vmap_libc vmap_libc;

enum vmap_backend { VMAP_BACKEND_LIBC = 0, VMAP_BACKEND_BUILTIN = 1, VMAP_BACKEND_AUTO = 2 };

/* What the walk that finds libc.so.6 saw on the way (backend.c note_order). */
struct vmap_load {
	unsigned self_index;   /* this object's place in load order (1 = the program), 0: after libc */
	const char *valgrind;  /* a valgrind tool's preload that replaces malloc, or NULL */
	const char *asan;      /* libasan, loaded after this (preloaded) object, or NULL */
	uintptr_t exe_lo, exe_hi;   /* the program's image (its PT_LOAD segments) */
	bool libc_found;            /* libc.so.6 met (with a dynamic section) */
};

/* Walks the loaded objects up to libc.so.6 once (later calls copy the first
 * walk's result) and fills *load.  No allocation, no system call. */
void vmap_backend_walk(struct vmap_load *load);
/* The walk, and libc.so.6's tables checked; 0, or -1 after printing why.
 * glibc's functions themselves are looked up on their first call. */
int vmap_backend_init(struct vmap_load *load);

/* The default-version definition of `name` in the loaded object whose file
 * name is `object` (its last path component, e.g. "libunwind.so.8"), found
 * with its GNU hash table as for glibc; NULL if either is not there.  For
 * profile.c, which loads libunwind only when it profiles. */
void *vmap_elf_symbol(const char *object, const char *name);
/* The same, for the definition of exactly that version ("GLIBC_2.34"). */
void *vmap_elf_symbol_version(const char *object, const char *name, const char *version);

#endif
