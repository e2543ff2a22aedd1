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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct vmap_libc {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*memalign)(size_t, size_t);
	size_t (*usable_size)(void *);
	int (*trim)(size_t);
	struct mallinfo2 (*mallinfo2)(void);
	int (*mallopt)(int, int);
};

extern struct vmap_libc vmap_libc;

enum vmap_backend { VMAP_BACKEND_LIBC = 0, VMAP_BACKEND_BUILTIN = 1, VMAP_BACKEND_AUTO = 2 };

/* What the walk that finds libc.so.6 saw on the way (backend.c note_order). */
struct vmap_load {
	unsigned self_index;   /* this object's place in load order (1 = the program), 0: after libc */
	const char *valgrind;  /* a valgrind tool's preload that replaces malloc, or NULL */
	const char *asan;      /* libasan, loaded after this (preloaded) object, or NULL */
	uintptr_t exe_lo, exe_hi;   /* the program's image (its PT_LOAD segments) */
};

/* Resolves glibc's functions and fills *load; 0, or -1 after printing why. */
int vmap_backend_init(struct vmap_load *load);

/* The default-version definition of `name` in the loaded object whose file
 * name is `object` (its last path component, e.g. "libunwind.so.8"), found
 * with its GNU hash table as for glibc; NULL if either is not there.  For
 * profile.c, which loads libunwind only when it profiles. */
void *vmap_elf_symbol(const char *object, const char *name);
/* The same, for the definition of exactly that version ("GLIBC_2.34"). */
void *vmap_elf_symbol_version(const char *object, const char *name, const char *version);

#endif
