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

enum vmap_backend {
	VMAP_BACKEND_LIBC = 0,
	VMAP_BACKEND_BUILTIN = 1,
	VMAP_BACKEND_AUTO = 2,
	VMAP_BACKEND_MIMALLOC = 3,
};

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

/*
 * The mimalloc backend (backend_mimalloc.c): mimalloc's functions, found in
 * libmimalloc.so.2 once vmap_mimalloc_load() has loaded it (from the
 * library's constructor, and only with VMAPALLOC_BACKEND=mimalloc);
 * vmap_mi_on is set, with a release store, after every slot.  Until then,
 * and in every process that did not ask for it, it is false and the slots
 * are NULL.  The flag lives with the hot variables (section.h): every free
 * of a glibc block reads it.
 */
struct vmap_mi {
	void *(*malloc)(size_t n);
	void *(*calloc)(size_t n, size_t size);
	void *(*realloc)(void *p, size_t n);
	void *(*malloc_aligned)(size_t n, size_t align);
	size_t (*usable_size)(const void *p);
	void (*free)(void *p);
	bool (*owns)(const void *p); /* mi_is_in_heap_region: p in one of its segments */
	void (*collect)(bool force);
	void (*process_info)(size_t *elapsed_ms, size_t *user_ms, size_t *system_ms,
			     size_t *rss, size_t *peak_rss, size_t *commit, size_t *peak_commit,
			     size_t *faults);
};

extern struct vmap_mi vmap_mi;
extern bool vmap_mi_on;
/* The address range vmapalloc reserved for mimalloc's segments
 * (backend_mimalloc.c): [vmap_mi_lo, vmap_mi_lo + vmap_mi_len), written
 * before vmap_mi_on, and then only grown (vmap_mimalloc_grow); 0 and 0
 * when there is none.  Every block in it is mimalloc's, so its frees need no
 * look-up in mimalloc's segment map. */
extern uintptr_t vmap_mi_lo;
extern size_t vmap_mi_len;
/* The range but its last segment: a block from past it says that the range
 * is filling up (direct.c). */
extern size_t vmap_mi_room;

/* Whether this build has the mimalloc backend (meson feature `mimalloc`). */
bool vmap_mimalloc_built(void);
/* Loads libmimalloc.so.2 and fills vmap_mi; 0, or -1 after printing one line
 * saying why not.  dlopen allocates: never from inside malloc. */
int vmap_mimalloc_load(void);
/* Grows the range for mimalloc's segments in place, or reserves its first
 * segment, if it can: once mimalloc's blocks fill its last segment, or
 * (refused) at once.  A raw mmap and mimalloc's arena set-up, no malloc.
 * One thread at a time; the others return at once.  Whether it grew. */
bool vmap_mimalloc_grow(bool refused);
/* mimalloc refused a block of size bytes aligned to align: whether the
 * range grew for it, so that asking again may succeed. */
bool vmap_mimalloc_refused(size_t size, size_t align);
/* A call of mimalloc's for a block of size bytes (call: evaluated again),
 * asked again once if mimalloc refused and its range grew. */
#define VMAP_MI_CALL(call, size, align)                                                    \
	({                                                                                 \
		void *mi_p_ = (call);                                                      \
		mi_p_ || !vmap_mimalloc_refused(size, align) ? mi_p_ : (call);             \
	})
/* mimalloc's block of size bytes aligned to align, or NULL.  mimalloc 2.0.9
 * returns some blocks misaligned for alignments of 256 to 1024
 * (aligned_alloc(256, 256)): those go back, and NULL lets glibc serve. */
static inline void *vmap_mi_memalign(size_t size, size_t align)
{
	void *p = VMAP_MI_CALL(vmap_mi.malloc_aligned(size, align), size, align);
	if (p && ((uintptr_t)p & (align - 1))) {
		vmap_mi.free(p);
		p = NULL;
	}
	return p;
}
/* mimalloc's committed memory now and at its peak (its own statistics, read
 * without allocating); 0 and 0 when it is not loaded. */
void vmap_mimalloc_held(uint64_t *now, uint64_t *peak);

/* The size to ask mimalloc for: it aligns blocks of up to 8 bytes to 8 only,
 * and malloc's contract, glibc's, is 16 (alignof(max_align_t)) for every
 * size. */
static inline size_t vmap_mi_size(size_t n)
{
	return n < 16 ? 16 : n;
}

/* Whether p is in the range reserved for mimalloc's segments. */
static inline bool vmap_mi_in_range(const void *p)
{
	return (uintptr_t)p - vmap_mi_lo < vmap_mi_len;
}

/* Whether p is in the range, before its last segment. */
static inline bool vmap_mi_in_room(const void *p)
{
	return (uintptr_t)p - vmap_mi_lo < vmap_mi_room;
}

/* Whether p is a block of mimalloc's: decided by its address (the range
 * reserved for its segments, else the segment map it keeps, for an arena it
 * reserved itself: MIMALLOC_RESERVE_OS_MEMORY), whatever the backend in
 * use. */
static inline bool vmap_mi_owns(const void *p)
{
	return __builtin_expect(__atomic_load_n(&vmap_mi_on, __ATOMIC_ACQUIRE), 0) &&
	       (vmap_mi_in_range(p) || vmap_mi.owns(p));
}

#endif
