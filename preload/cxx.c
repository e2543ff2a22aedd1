/*
 * cxx.c — C++'s operator new and delete (plain and array, and the sized
 * deletes), with malloc's and free's fast paths inline.
 *
 * Without them, every `new char[n]` went through libstdc++'s operator new[]
 * -> operator new -> malloc, and every delete[] through two more calls before
 * free: about 22 instructions an allocation and free on top of vmapalloc's own
 * (callgrind, mimalloc-bench's larson: 131 -> 113 a pair; mimalloc, jemalloc
 * and tcmalloc export these operators too).  The nothrow and aligned forms stay
 * libstdc++'s: they call the plain operator (ours) or aligned_alloc and free.
 * With VMAPALLOC_PROFILE=1 an allocation site is the caller of operator new
 * (libunwind walks through these frames); in a build without libunwind the
 * walk by frame pointers stops inside vmapalloc, and the exits below are
 * calls, not jumps, so new's sites may go unnamed there.
 *
 * operator new keeps the language's contract, which malloc has not: never
 * NULL.  When the allocation fails it calls the program's new-handler and
 * retries, as long as there is one, and then throws std::bad_alloc -- both
 * through libstdc++'s own functions, referenced weakly: a process without
 * libstdc++ has no caller of these operators either.  (The frames of this
 * file carry unwind tables, the default on x86-64, so the exception passes
 * through them to the program's handler.)
 */
#include <stddef.h>

#include "alloc.h"
#include "fast.h"
#include "fmt.h"
#include "os.h"

#define EXPORT __attribute__((visibility("default")))

typedef void (*new_handler_fn)(void);
/* std::get_new_handler() and std::__throw_bad_alloc(), libstdc++'s. */
extern new_handler_fn _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* The allocation failed: the new-handler loop, then bad_alloc. */
__attribute__((noinline, cold)) static void *new_failed(size_t size)
{
	for (;;) {
		new_handler_fn handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
		if (!handler) {
			if (_ZSt17__throw_bad_allocv)
				_ZSt17__throw_bad_allocv();
			VMAP_BUF(b, 2, 128);
			vmap_buf_str(&b, "vmapalloc: operator new: out of memory, and no libstdc++ to throw\n");
			vmap_buf_flush(&b);
			vmap_os_abort();
		}
		handler();
		void *p = vmap_malloc(size);
		if (p)
			return p;
	}
}

/* malloc's exits that may fail, then the new-handler loop.  Size 0 is one
 * byte, as in libstdc++ (it takes the slow exit: never a slab size). */
__attribute__((noinline)) static void *new_slow(size_t size)
{
	size += size == 0;
	void *p = vmap_malloc_slow(size);
	return __builtin_expect(p != NULL, 1) ? p : new_failed(size);
}

__attribute__((noinline)) static void *new_refill(size_t size)
{
	void *p = vmap_malloc_refill(size);
	return __builtin_expect(p != NULL, 1) ? p : new_failed(size);
}

__attribute__((noinline)) static void *new_fast_refill(struct vmap_heap *h, size_t size)
{
	void *p = vmap_malloc_fast_refill(h, size);
	return __builtin_expect(p != NULL, 1) ? p : new_failed(size);
}

/* operator new(size_t) and operator new[](size_t). */
__attribute__((always_inline)) static inline void *cxx_new(size_t size)
{
	return vmap_fast_malloc_via(size, new_slow, new_refill, new_fast_refill);
}

#define ALIAS(name) __attribute__((alias(#name), visibility("default")))

EXPORT void *_Znwm(size_t size) { return cxx_new(size); }
void *_Znam(size_t size) ALIAS(_Znwm);

/* operator delete and delete[], unsized and sized (the size is not checked:
 * the slab knows it). */
EXPORT void _ZdlPv(void *p) { vmap_fast_free(p); }
void _ZdaPv(void *p) ALIAS(_ZdlPv);
EXPORT void _ZdlPvm(void *p, size_t size)
{
	(void)size;
	vmap_fast_free(p);
}
void _ZdaPvm(void *p, size_t size) ALIAS(_ZdlPvm);
