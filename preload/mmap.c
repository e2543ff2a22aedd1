/*
 * mmap.c — the exported mmap family of libvmapalloc.so.  Each call enters
 * the core (core/mmap.h) and turns its -errno into errno and the libc return
 * convention (MAP_FAILED or -1).  mmap64 is the same function on LP64.
 * mmap, munmap and mremap may take shard locks: they are range sections
 * (alloc.h), and a call that re-enters one takes the lock-free variant.
 */
/* Meson builds with _FILE_OFFSET_BITS=64, under which glibc's headers rename
 * mmap to mmap64: both names are defined here, so the header must not. */
#undef _FILE_OFFSET_BITS
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "alloc.h"
#include "mmap.h"
#include "os.h"
#include "timeline.h"

#define EXPORT __attribute__((visibility("default")))

static void *ptr_result(void *p)
{
	if (vmap_os_is_err(p)) {
		errno = vmap_os_err(p);
		return MAP_FAILED;
	}
	return p;
}

static int int_result(int rc)
{
	if (rc < 0) {
		errno = -rc;
		return -1;
	}
	return rc;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	vmap_init();
	if (vmap_reentered())
		return ptr_result(vmap_mmap_reentered(addr, len, prot, flags, fd, off));
	vmap_depth_enter();
	void *p = vmap_mmap(addr, len, prot, flags, fd, off);
	vmap_timeline_poll();
	vmap_depth_leave();
	return ptr_result(p);
}

/* An alias, as in glibc: a call to the exported mmap from here would go
 * through the GOT, one more symbol look-up in every process. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmissing-attributes"
EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));
#pragma GCC diagnostic pop

EXPORT int munmap(void *addr, size_t len)
{
	vmap_init();
	if (vmap_reentered())
		return int_result(vmap_munmap_reentered(addr, len));
	vmap_depth_enter();
	int rc = vmap_munmap(addr, len);
	vmap_timeline_poll();
	vmap_depth_leave();
	return int_result(rc);
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	/* The kernel reads new_address with MREMAP_DONTUNMAP too (a hint,
	 * checked like a fixed address: EINVAL when unaligned, too high or
	 * overlapping the old range). */
	void *new_addr = NULL;
	if (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {
		va_list ap;
		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	vmap_init();
	if (vmap_reentered())
		return ptr_result(vmap_mremap_reentered(old, old_len, new_len, flags, new_addr));
	vmap_depth_enter();
	void *p = vmap_mremap(old, old_len, new_len, flags, new_addr);
	vmap_depth_leave();
	return ptr_result(p);
}

EXPORT int mprotect(void *addr, size_t len, int prot)
{
	vmap_init();
	return int_result(vmap_mprotect(addr, len, prot));
}

EXPORT int madvise(void *addr, size_t len, int advice)
{
	vmap_init();
	return int_result(vmap_madvise(addr, len, advice));
}

EXPORT int mincore(void *addr, size_t len, unsigned char *vec)
{
	vmap_init();
	return int_result(vmap_mincore(addr, len, vec));
}

EXPORT int mlock(const void *addr, size_t len)
{
	vmap_init();
	return int_result(vmap_mlock(addr, len, 0, false));
}

EXPORT int mlock2(const void *addr, size_t len, unsigned int flags)
{
	vmap_init();
	return int_result(vmap_mlock(addr, len, flags, true));
}

EXPORT int munlock(const void *addr, size_t len)
{
	vmap_init();
	return int_result(vmap_munlock(addr, len));
}

/* mseal(2): glibc 2.43's wrapper, and the system call made through
 * syscall(SYS_mseal, ...) by programs built against older glibc (462 on
 * every architecture).  Sealing pages vmapalloc serves must be known to it
 * (core/mmap.c vmap_mseal). */
EXPORT int mseal(void *addr, size_t len, unsigned long flags)
{
	vmap_init();
	return int_result(vmap_mseal(addr, len, flags));
}

/*
 * syscall(): every number but mseal's (and vfork's, made a fork) goes
 * straight to the kernel, as in glibc (six arguments read, whatever the call
 * takes; -1 and errno for -4095..-1).  A fork-like clone through it returns in both processes as
 * through glibc's; a CLONE_VM child on a new stack cannot return through
 * either.
 */
#define NR_MSEAL 462

EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
	long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	long r;
	if (nr == NR_MSEAL) {
		vmap_init();
		r = vmap_mseal((void *)a, (size_t)b, (unsigned long)c);
	} else if (nr == SYS_vfork) {
		/* The child would return through these C frames on the parent's
		 * stack (glibc's syscall() is leaf assembly, where it happens to
		 * survive): a fork instead, as POSIX lets vfork be. */
		r = vmap_os_syscall6(SYS_clone, SIGCHLD, 0, 0, 0, 0, 0);
	} else {
		r = vmap_os_syscall6(nr, a, b, c, d, e, f);
	}
	if ((unsigned long)r >= (unsigned long)-4095) {
		errno = (int)-r;
		return -1;
	}
	return r;
}
