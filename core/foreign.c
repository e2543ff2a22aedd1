/*
 * foreign.c — pointers vmapalloc did not allocate, and blocks it allocates
 * outside its allocators: the foreign-pointer test (stack, image, misaligned),
 * the drain of frees parked by re-entered calls, and the escape blocks that
 * serve large requests made while re-entered.
 */
#include "alloc_impl.h"

#include <sys/auxv.h>
#include <sys/mman.h>

#include "counter.h"
#include "fmt.h"
#include "mmap.h"
#include "os.h"
#include "profile.h"
#include "range.h"
#include "slab.h"
#include "stats.h"

/* ---- foreign pointers: neither ours nor glibc's ---------------------------- */

/*
 * A pointer outside every arena region goes to glibc, which aborts, with its
 * own message, on one it does not know.  Before that, a few compares catch
 * pointers that cannot be glibc's blocks; such a pointer is left alone (free
 * does nothing, realloc fails, malloc_usable_size says 0), counted (foreign_pointers) and said once.  Every test must be certain:
 * a glibc block taken for foreign would leak and its realloc fail.
 *  - misaligned: glibc blocks are 16-aligned (memalign ones more);
 *  - inside the program's loaded image (static data, code): glibc's heap
 *    starts after the program's .bss, its other memory is mmapped outside
 *    every image;
 *  - on this thread's stack, above the current frame: [sp, top) with top
 *    the main thread's stack top (AT_EXECFN, a string the kernel puts at
 *    the very top) or the thread pointer, glibc's descriptor of a thread it
 *    created, which sits at the top of the thread's stack block.  The window
 *    is bounded (8 MiB below the main stack's top, where the kernel maps
 *    nothing but the stack: mmap_base is at least 128 MiB lower; 8 KiB below
 *    a thread's descriptor, within the 16 KiB PTHREAD_STACK_MIN every thread
 *    stack has), so that a frame on another stack (sigaltstack, a coroutine
 *    stack that may itself be a glibc block) fails the test instead of
 *    stretching the window over the heap.  The main thread's descriptor is
 *    not a stack top (ld.so allocates it): its window is skipped.  Deeper
 *    frames go to glibc as before.
 * glibc's free is the common free under BACKEND=auto, so the inline part is
 * a filter: the alignment, the image and "less than 8 MiB above sp" (true of
 * every stack address the windows accept); the exact windows are looked at
 * out of line, only for pointers just above the stack pointer: a few
 * compares a glibc free, no call, no system call.  The bounds come from
 * vmap_backend_init's walk and the aux vector: no system call at init either.
 */
uintptr_t vmap_exe_lo VMAP_HOT, vmap_exe_len VMAP_HOT;
static uintptr_t vmap_main_top VMAP_HOT, vmap_main_tp VMAP_HOT; /* written at init */

static inline uintptr_t thread_pointer(void)
{
	uintptr_t tp;
#if defined(__x86_64__)
	__asm__("mov %%fs:0, %0" : "=r"(tp)); /* the TCB's pointer to itself */
#elif defined(__aarch64__)
	__asm__("mrs %0, tpidr_el0" : "=r"(tp));
#else
	tp = 0; /* no thread window */
#endif
	return tp;
}

void vmap_foreign_init(const struct vmap_load *load)
{
	vmap_exe_lo = load->exe_lo;
	vmap_exe_len = load->exe_hi - load->exe_lo;
	vmap_main_top = getauxval(AT_EXECFN); /* 0 (no window) if the kernel gave none */
	/* Init runs on the main thread (from the first call or our constructor);
	 * if not (a dlopen from another thread), that thread's window is lost. */
	vmap_main_tp = thread_pointer();
}

/* Which kind of foreign pointer a is, sp the caller's stack pointer. */
__attribute__((noinline, cold)) int vmap_foreign_kind_slow(uintptr_t a, uintptr_t sp)
{
	if (a & (SMALL_ALIGN - 1))
		return FOREIGN_MISALIGNED;
	if (a - vmap_exe_lo < vmap_exe_len)
		return FOREIGN_EXE;
	uintptr_t tp = thread_pointer();
	uintptr_t main_d = vmap_main_top - sp, thread_d = tp - sp;
	if (main_d <= MAIN_STACK_WINDOW && a - sp < main_d)
		return FOREIGN_STACK;
	if (thread_d <= THREAD_STACK_WINDOW && a - sp < thread_d && tp != vmap_main_tp)
		return FOREIGN_STACK;
	return NOT_FOREIGN; /* just above the stack pointer, but not on this stack */
}

/* Counts p and says the first one; the caller leaves it alone. */
__attribute__((noinline, cold)) void vmap_foreign(const void *p, int kind, const char *who)
{
	static const char *const what[] = {
		[FOREIGN_MISALIGNED] = "misaligned: no heap block starts there",
		[FOREIGN_EXE] = "inside the program's image: static data or code",
		[FOREIGN_STACK] = "on this thread's stack",
	};
	static bool said;
	vmap_stat_inc_local(VMAP_STAT_foreign_pointers);
	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return;
	VMAP_BUF(b, 2, 256);
	vmap_buf_invalid_pointer(&b, who, p);
	vmap_buf_str(&b, " (");
	vmap_buf_str(&b, what[kind]);
	vmap_buf_str(&b, "): left alone; such pointers are counted (foreign_pointers), "
			 "said once\n");
	vmap_buf_flush(&b);
}

/* ---- re-entry: signal handlers and fork handlers --------------------------- */

/* One parked free (len 0) or munmap, done at depth 0 (thread.c). */
void vmap_drain_one(uintptr_t a, size_t len)
{
	struct vmap_slab *sl = len ? NULL : vmap_slab_at(a);
	if (len) {
		vmap_munmap((void *)a, len);
	} else if (sl) {
		vmap_slab_free(sl, (void *)a, "free");
	} else {
		if (__builtin_expect(vmap_profile_on, 0))
			vmap_profile_free_known((void *)a, true);
		vmap_range_free((void *)a, "free");
	}
}

/* ---- escape blocks (alloc_impl.h) ----------------------------------------- */

#define ESCAPE_SLOTS 64
#define ESCAPE_CLAIMED 1 /* never a block address: those are page-aligned */
static struct escape escapes[ESCAPE_SLOTS];
unsigned vmap_escape_live VMAP_HOT; /* claimed slots */

__attribute__((noinline, cold)) void *vmap_escape_alloc(size_t size, size_t align)
{
	size_t len = (size + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	size_t extra = align > VMAP_PAGE ? align : 0; /* mapped, then trimmed */
	if (len < size || len + extra < len)
		return NULL;
	__atomic_fetch_add(&vmap_escape_live, 1, __ATOMIC_RELAXED);
	struct escape *e = NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS && !e; i++) {
		uintptr_t z = 0;
		if (__atomic_compare_exchange_n(&escapes[i].a, &z, ESCAPE_CLAIMED, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			e = &escapes[i];
	}
	void *m = e ? vmap_os_mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
		    : NULL;
	if (!e || vmap_os_is_err(m)) {
		if (e)
			__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&vmap_escape_live, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	uintptr_t a = (uintptr_t)m;
	if (extra) {
		uintptr_t b = (a + align - 1) & ~(uintptr_t)(align - 1);
		if (b > a)
			vmap_os_munmap(m, b - a);
		if (a + extra > b)
			vmap_os_munmap((void *)(b + len), a + extra - b);
		a = b;
	}
	e->len = len;
	__atomic_store_n(&e->a, a, __ATOMIC_RELEASE);
	return (void *)a;
}

__attribute__((noinline, cold)) struct escape *vmap_escape_find(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	if (!a || (a & (VMAP_PAGE - 1)))
		return NULL;
	for (unsigned i = 0; i < ESCAPE_SLOTS; i++)
		if (__atomic_load_n(&escapes[i].a, __ATOMIC_ACQUIRE) == a)
			return &escapes[i];
	return NULL;
}

static void escape_free(struct escape *e)
{
	/* The slot is emptied before the munmap: once the range is unmapped,
	 * another thread's escape block may get the same address, and a stale
	 * slot holding it would be found (and freed) in its place. */
	void *a = (void *)e->a;
	size_t len = e->len;
	__atomic_store_n(&e->a, 0, __ATOMIC_RELEASE);
	vmap_os_munmap(a, len);
	__atomic_fetch_sub(&vmap_escape_live, 1, __ATOMIC_RELAXED);
}

__attribute__((noinline, cold)) bool vmap_free_escape(void *p)
{
	struct escape *e = vmap_escape_find(p);
	if (e)
		escape_free(e);
	return e != NULL;
}
