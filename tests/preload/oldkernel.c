/*
 * oldkernel.c — run a command as if on an older kernel.
 *
 *   oldkernel COMMAND [ARGS...]
 *   oldkernel --check        checks that each call below is refused
 *
 * Installs a seccomp filter (inherited by every child) that refuses the
 * newer memory calls vmapalloc uses when it can, as the kernels before them
 * do, then executes COMMAND:
 *   - madvise(MADV_GUARD_INSTALL / MADV_GUARD_REMOVE)  EINVAL  (before 6.13)
 *   - madvise(MADV_POPULATE_WRITE)                      EINVAL  (before 5.14)
 *   - process_madvise                                   ENOSYS  (before 5.10)
 *   - mremap(MREMAP_DONTUNMAP)                          EINVAL  (before 5.7)
 * so that the fallbacks (PROT_NONE for unmapped served pages, one madvise per
 * run, copies instead of page moves) run under the same tests as the fast
 * paths.  The program and the kernel reference of a differential test run
 * under the same filter, so both see the same "kernel".  x86_64 only (other
 * architectures run the command unfiltered, with a line on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif

#define ARG_LO(n) (offsetof(struct seccomp_data, args) + (n) * sizeof(__u64))
#define REFUSE(err) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static int check(void)
{
	char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 99;
	int bad = 0;
	static const int refused[] = {102, 103, 23};
	for (unsigned i = 0; i < sizeof refused / sizeof refused[0]; i++)
		if (madvise(p, 4096, refused[i]) == 0 || errno != EINVAL) {
			fprintf(stderr, "oldkernel: madvise(%d) not refused\n", refused[i]);
			bad = 1;
		}
	if (madvise(p, 4096, MADV_DONTNEED) != 0) {
		fprintf(stderr, "oldkernel: MADV_DONTNEED refused\n");
		bad = 1;
	}
	if (mremap(p, 4096, 4096, MREMAP_MAYMOVE | 4 /* DONTUNMAP */) != MAP_FAILED || errno != EINVAL) {
		fprintf(stderr, "oldkernel: MREMAP_DONTUNMAP not refused\n");
		bad = 1;
	}
	if (syscall(SYS_process_madvise, -10000, NULL, 0, MADV_DONTNEED, 0) != -1 || errno != ENOSYS) {
		fprintf(stderr, "oldkernel: process_madvise not refused\n");
		bad = 1;
	}
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: oldkernel COMMAND [ARGS...]\n");
		return 2;
	}
#if defined(__x86_64__)
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		ALLOW,
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 0, 1),
		REFUSE(ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 6),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),        /* advice */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 102, 3, 0),       /* MADV_GUARD_INSTALL */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 103, 2, 0),       /* MADV_GUARD_REMOVE */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 23, 1, 0),        /* MADV_POPULATE_WRITE */
		ALLOW,
		REFUSE(EINVAL),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mremap, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(3)),        /* flags */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 4, 0, 1),        /* MREMAP_DONTUNMAP */
		REFUSE(EINVAL),
		ALLOW,
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		perror("oldkernel: seccomp");
		return 99;
	}
#else
	fprintf(stderr, "oldkernel: no filter for this architecture; running unfiltered\n");
#endif
	if (argc == 2 && argv[1][0] == '-' && argv[1][1] == '-' && argv[1][2] == 'c')
		return check();
	execvp(argv[1], argv + 1);
	perror("oldkernel: exec");
	return 99;
}
