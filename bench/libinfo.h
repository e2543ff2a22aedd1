/*
 * libinfo.h — what the benchmarks that run under LD_PRELOAD (large, small,
 * mmap) report about the process: the peak RSS, and the object a symbol
 * resolved to (so a preload that did not take effect shows).
 */
#ifndef BENCH_LIBINFO_H
#define BENCH_LIBINFO_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The file name of the object that sym (malloc, mmap) resolved to; "?". */
static const char *lib_of(const char *sym)
{
	Dl_info info;
	void *p = dlsym(RTLD_DEFAULT, sym);
	if (!p || !dladdr(p, &info) || !info.dli_fname || !*info.dli_fname)
		return "?";
	const char *slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

/*
 * The peak RSS of this process image, from VmHWM.  ru_maxrss is printed too,
 * but Linux carries it over from the parent across fork and exec, so a child
 * of a large process (python running scripts/bench) reports at least the
 * parent's RSS there; VmHWM belongs to the address space, new at exec.
 */
static long vm_hwm_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

#endif /* BENCH_LIBINFO_H */
