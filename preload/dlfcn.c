/*
 * dlfcn.c — dlopen() and dlmopen() with RTLD_DEEPBIND cleared
 * (tests/reliability/REQUIREMENTS.md #5).
 *
 * Why: a library opened with RTLD_DEEPBIND looks its symbols up in its own
 * dependencies before the global scope; libc.so.6 is one of them, so its
 * malloc, free and realloc are glibc's although vmapalloc is preloaded.  When
 * it frees or reallocs a block vmapalloc handed to the program (a strdup
 * passed in, a buffer it takes ownership of), glibc aborts ("free(): invalid
 * pointer").  glibc 2.34 removed the hooks (__free_hook...) through which
 * other allocators caught those calls.  With the flag cleared the library
 * binds like any other: to vmapalloc.  One line on stderr says so, once per
 * process.
 *
 * The price: a library that needs DEEPBIND's isolation (a plugin carrying
 * its own copy or version of a library whose symbols the program or an
 * earlier library also defines) now binds those symbols to the global
 * definitions, as with a plain dlopen; that is the line's reason to exist.
 * Such a program is better run without vmapalloc.
 *
 * dlmopen: only into the base namespace (LM_ID_BASE).  A library loaded into
 * another namespace has that namespace's own libc and malloc whatever the
 * flag, and vmapalloc is not there to bind to.
 *
 * The caller: glibc's dlopen and dlmopen take their caller from their return
 * address; it picks the namespace of a plain dlopen and whose DT_RUNPATH a
 * bare file name is searched in.  So glibc's function is reached by a tail
 * call (a jump: the calls below are in tail position and the build optimises,
 * -O2; an -O0 build would make libvmapalloc.so the caller).  rel-deepbind
 * opens its library by a bare name that only the program's RUNPATH finds.
 *
 * When vmapalloc is off (core/alloc.c go_inert: dlopened, or under a valgrind
 * tool that replaces malloc everywhere), the flag is left as it is: every
 * library's malloc is then glibc's (or valgrind's) anyway.
 *
 * glibc's functions are found in libc.so.6's own symbol table, by version
 * GLIBC_2.34 (where glibc 2.34 moved them from libdl), else libdl.so.2's
 * default version (older glibc); never with dlsym (core/backend.c).
 */
#include <dlfcn.h>
#include <stddef.h>

#include "alloc.h"
#include "backend.h"
#include "fmt.h"

#define EXPORT __attribute__((visibility("default")))

typedef void *dlopen_fn(const char *, int);
typedef void *dlmopen_fn(Lmid_t, const char *, int);

static dlopen_fn *real_dlopen;
static dlmopen_fn *real_dlmopen;
static int deepbind_said;

/* Racing threads store the same values: no lock needed. */
__attribute__((noinline, cold)) static void resolve(void)
{
	void *o = vmap_elf_symbol_version("libc.so.6", "dlopen", "GLIBC_2.34");
	void *m = vmap_elf_symbol_version("libc.so.6", "dlmopen", "GLIBC_2.34");
	if (!o)
		o = vmap_elf_symbol("libdl.so.2", "dlopen");
	if (!m)
		m = vmap_elf_symbol("libdl.so.2", "dlmopen");
	if (!o || !m)
		vmap_say("cannot find glibc's dlopen/dlmopen (libc.so.6 GLIBC_2.34, libdl.so.2); ",
			 "dlopen() fails", NULL);
	__atomic_store_n(&real_dlmopen, (dlmopen_fn *)m, __ATOMIC_RELEASE);
	__atomic_store_n(&real_dlopen, (dlopen_fn *)o, __ATOMIC_RELEASE);
}

__attribute__((noinline, cold)) static int clear_deepbind(const char *call, const char *file,
							   int flags)
{
	if (!__atomic_exchange_n(&deepbind_said, 1, __ATOMIC_RELAXED)) {
		VMAP_BUF(out, 2, 512);
		vmap_buf_str(&out, "vmapalloc: ");
		vmap_buf_str(&out, call);
		vmap_buf_str(&out, file ? file : "NULL");
		vmap_buf_str(&out, ", RTLD_DEEPBIND): flag cleared, so that the library's malloc and "
				   "free are vmapalloc's (its symbols now bind like a plain dlopen's; "
				   "said once)\n");
		vmap_buf_flush(&out);
	}
	return flags & ~RTLD_DEEPBIND;
}

EXPORT void *dlopen(const char *file, int flags)
{
	if (__builtin_expect(flags & RTLD_DEEPBIND, 0) && !vmap_is_inert())
		flags = clear_deepbind("dlopen(", file, flags);
	dlopen_fn *f = __atomic_load_n(&real_dlopen, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!f, 0)) {
		resolve();
		if (!(f = real_dlopen))
			return NULL;
	}
	return f(file, flags); /* a tail call: glibc sees our caller as its caller */
}

EXPORT void *dlmopen(Lmid_t lmid, const char *file, int flags)
{
	if (__builtin_expect((flags & RTLD_DEEPBIND) && lmid == LM_ID_BASE, 0) && !vmap_is_inert())
		flags = clear_deepbind("dlmopen(LM_ID_BASE, ", file, flags);
	dlmopen_fn *f = __atomic_load_n(&real_dlmopen, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!f, 0)) {
		resolve();
		if (!(f = real_dlmopen))
			return NULL;
	}
	return f(lmid, file, flags); /* a tail call, as above */
}
