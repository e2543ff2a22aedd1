/*
 * alloc_impl.h — what the facade's files share (alloc.c, init.c, fork.c,
 * escape.c): the mode state init sets, the entry test every call makes, and
 * the inline filter for escape blocks.  Everything
 * here that the malloc and free paths run is static inline: there is no LTO,
 * and a call across files would cost every call.
 */
#ifndef VMAP_ALLOC_IMPL_H
#define VMAP_ALLOC_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "backend.h"
#include "counter.h"
#include "section.h"

#define SMALL_ALIGN 16 /* alignof(max_align_t) */

/* ---- mode state (init.c) -------------------------------------------------- */

/* Sizes 1..vmap_slab_limit go to the builtin backend's slabs (0 = none: the
 * test `size - 1 < limit` then fails for every size; malloc(0) takes the
 * general path). */
extern size_t vmap_slab_limit VMAP_HIDDEN;
/* BACKEND=auto: how many small requests a thread counts before it adds them
 * to the process's count toward the switch to the slabs (init.c
 * vmap_auto_add); 0 = no switch to come (see alloc.c auto_count). */
extern uint32_t vmap_auto_step VMAP_HIDDEN;
/* init.c: the environment the process started with, from /proc/self/environ
 * (a NULL-terminated array in a mapping that is kept; NULL if unreadable),
 * for an init that finds environ not set yet, or cleared. */
char **vmap_env_from_proc(void) VMAP_HIDDEN;
/* init.c: whether large frees call the purger thread's and the timeline's
 * hooks (alloc.c). */
extern bool vmap_large_free_hooks VMAP_HIDDEN;
/* BACKEND=libc, or mimalloc once loaded: every request of 1..vmap_direct_limit
 * bytes goes straight to the one allocator vmap_direct_to names, ahead of the
 * general path's tests, and a free that is not the arena's asks it first
 * (mimalloc by its range, else its segment map; glibc unless the block is an escape block).
 * 0 / VMAP_DIRECT_NONE = none (auto, builtin, or while the profile is on).
 * vmap_direct_to is written first, and cleared after the limit. */
extern size_t vmap_direct_limit VMAP_HIDDEN;
enum { VMAP_DIRECT_NONE, VMAP_DIRECT_GLIBC, VMAP_DIRECT_MI };
extern uint8_t vmap_direct_to VMAP_HIDDEN;

/* The general paths of malloc and free (alloc.c), behind direct.c's, and the
 * fold of this thread's counts every VMAP_LOCAL_BATCH calls (alloc.c). */
void *vmap_malloc_general(size_t size) VMAP_HIDDEN;
void vmap_free_general(void *p) VMAP_HIDDEN;
void vmap_fold_and_tick(void) VMAP_HIDDEN;

/* One figure of one event: a call counted, the fold's countdown stepped. */
static inline void count(enum vmap_stat s)
{
	vmap_local.n[s]++;
	vmap_local.dirty |= 1ull << s;
	if (__builtin_expect(--vmap_local.budget < 0, 0))
		vmap_fold_and_tick();
}

/* Three figures of one event (a call, small, which allocator): one fold
 * countdown. */
static inline void count3(enum vmap_stat a, enum vmap_stat b, enum vmap_stat c)
{
	vmap_local.n[a]++;
	vmap_local.n[b]++;
	vmap_local.n[c]++;
	vmap_local.dirty |= (1ull << a) | (1ull << b) | (1ull << c);
	if (__builtin_expect(--vmap_local.budget < 0, 0))
		vmap_fold_and_tick();
}

/* Set once init is done (by the initialising thread at its end, by any other
 * thread on its first call after it; a forked child inherits it). */
extern __thread bool vmap_tls_seen VMAP_HIDDEN;

/* Init, or a thread's first call: out of line, once a thread. */
void vmap_enter_slow(void) VMAP_HIDDEN;
/* BACKEND=auto: a thread's batch of vmap_auto_step small requests added to
 * the process's count; the switch to the slabs once that reaches AUTO_AFTER. */
void vmap_auto_add(void) VMAP_HIDDEN;
/* This thread's small requests not yet added (alloc.c auto_count). */
extern __thread uint32_t vmap_tls_small_count VMAP_HIDDEN;
/* BACKEND=auto after the switch: glibc's heap trimmed as it empties (at the
 * folds, rate-limited), by the bytes of its blocks the program frees, which
 * vmap_auto_note_free counts once vmap_auto_switched is set. */
extern bool vmap_auto_switched VMAP_HIDDEN;
void vmap_auto_note_free(void *p) VMAP_HIDDEN;
void vmap_auto_trim_tick(uint64_t now) VMAP_HIDDEN;
/* Whether the running glibc is at least major.minor (looked up: rare). */
bool vmap_glibc_at_least(unsigned major, unsigned minor) VMAP_HIDDEN;

/* One test on every call. */
static inline void enter(void)
{
	if (__builtin_expect(!vmap_tls_seen, 0))
		vmap_enter_slow();
}

/* ---- fork handlers (fork.c) ----------------------------------------------- */

void vmap_fork_register(void) VMAP_HIDDEN;
void vmap_fork_prepare(void) VMAP_HIDDEN;
void vmap_fork_parent(void) VMAP_HIDDEN;
void vmap_fork_child(void) VMAP_HIDDEN;

/* ---- parked frees and escape blocks (escape.c) ---------------------------- */

/* One parked free (len 0) or munmap, done at depth 0 (thread.c). */
void vmap_drain_one(uintptr_t a, size_t len) VMAP_HIDDEN;

/* Escape blocks: live at once, across threads.  A handler holds one for the
 * length of the handler, typically; when the table is full, NULL. */
struct escape {
	uintptr_t a;
	size_t len;
};
/* Claimed slots: while 0, which is always but for a handler's blocks, free()
 * of a pointer outside the arena pays one load for the table. */
extern unsigned vmap_escape_live VMAP_HIDDEN;

void *vmap_escape_alloc(size_t size, size_t align) VMAP_HIDDEN;
struct escape *vmap_escape_find(const void *p) VMAP_HIDDEN;
/* Frees p if it is an escape block; whether it was. */
bool vmap_free_escape(void *p) VMAP_HIDDEN;

/* The escape block p, or NULL (p is glibc's): one load while there are none. */
static inline struct escape *escape_of(const void *p)
{
	if (__builtin_expect(__atomic_load_n(&vmap_escape_live, __ATOMIC_RELAXED) == 0, 1))
		return NULL;
	return vmap_escape_find(p);
}

#endif
