/*
 * profile_stack.c — the profiler's stacks: capturing a backtrace (libunwind,
 * or a checked frame-pointer walk), the per-thread stack cache that spares
 * most unwinds, and naming frames at report time (the objects' symbol
 * tables; object+offset only inside a signal handler).
 */
#include "profile_impl.h"

#ifdef VMAP_HAVE_LIBUNWIND
int (*unw_backtrace_fn)(void **, int);
#endif
struct prof_fns prof_fn;
uintptr_t self_lo, self_hi;
char program[256];
int self_known;

void vmap_prof_fn_resolve(void)
{
#define LIBC_FN(field, name) \
	prof_fn.field = (__typeof__(prof_fn.field))vmap_elf_symbol(LIBC_SO, name)
	LIBC_FN(getattr_np, "pthread_getattr_np");
	LIBC_FN(self, "pthread_self");
	LIBC_FN(attr_getstack, "pthread_attr_getstack");
	LIBC_FN(attr_destroy, "pthread_attr_destroy");
	LIBC_FN(dladdr1, "dladdr1");
	LIBC_FN(dlopen, "dlopen");
#undef LIBC_FN
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	prof_fn.find_object =
		(__typeof__(prof_fn.find_object))vmap_elf_symbol(LIBC_SO, "_dl_find_object");
#endif
}

/* ---- backtraces -------------------------------------------------------- */

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	uintptr_t me = (uintptr_t)&vmap_prof_capture, lo = UINTPTR_MAX, hi = 0;
	bool mine = false;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr, z = a + ph->p_memsz;
		if (a < lo)
			lo = a;
		if (z > hi)
			hi = z;
		if (me >= a && me < z)
			mine = true;
	}
	if (!mine)
		return 0;
	/* Linked into the main program (unit tests): its frames are the
	 * program's, keep them all. */
	if (info->dlpi_name && info->dlpi_name[0]) {
		self_lo = lo;
		self_hi = hi;
	}
	return 1;
}

#ifndef VMAP_HAVE_LIBUNWIND
/* Reads two words at a, or fails if they are not mapped (no fault). */
static bool safe_read2(const uintptr_t *a, uintptr_t out[2])
{
	return vmap_os_read_self(out, a, 2 * sizeof(uintptr_t)) == (long)(2 * sizeof(uintptr_t));
}

/* Frame-pointer walk: [fp] = caller's fp, [fp + 8] = return address.  Stops
 * at the first record that is not above the previous one on this stack. */
static int fp_walk(void **out, int max)
{
	uintptr_t *fp = __builtin_frame_address(0);
	uintptr_t sp = (uintptr_t)&fp;
	int n = 0;
	while (n < max) {
		uintptr_t rec[2];
		if (((uintptr_t)fp & 7) || (uintptr_t)fp < sp || (uintptr_t)fp - sp > (64u << 20) ||
		    !safe_read2(fp, rec) || rec[1] < 4096)
			break;
		out[n++] = (void *)rec[1];
		if (rec[0] <= (uintptr_t)fp)
			break;
		fp = (uintptr_t *)rec[0];
	}
	return n;
}
#endif

/* The stack from the program's call site outward; ra is that call site when
 * the entry point knew it (see vmap_profile_record). */
__attribute__((noinline)) unsigned vmap_prof_capture(uintptr_t *out, uintptr_t ra)
{
	void *raw[CAPTURE];
	if (!__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) {
		dl_iterate_phdr(find_self, NULL);
		__atomic_store_n(&self_known, 1, __ATOMIC_RELEASE);
	}
#ifdef VMAP_HAVE_LIBUNWIND
	int n = unw_backtrace_fn(raw, CAPTURE);
#else
	int n = fp_walk(raw, CAPTURE);
#endif
	int i = 0;
	while (i < n && (uintptr_t)raw[i] - self_lo < self_hi - self_lo)
		i++;
	unsigned k = 0;
	for (; i < n && k < DEPTH; i++)
		out[k++] = (uintptr_t)raw[i];
#ifndef VMAP_HAVE_LIBUNWIND
	/* vmapalloc's own frames have no frame pointers unless it was built
	 * with them: then the walk stops inside them, and the call site the
	 * entry point saw is the one frame known. */
	if (!k && ra && ra - self_lo >= self_hi - self_lo)
		out[k++] = ra;
#else
	(void)ra;
#endif
	return k;
}

/* ---- the stack cache --------------------------------------------------- */

/*
 * A loop that allocates at one call site unwinds the same stack again and
 * again, and an unwind costs many times a record.  Each thread remembers a
 * few stacks by (return address into the program, its stack pointer), and
 * where on its stack each return address of the stack was found.  A later
 * allocation with the same key takes the cached site only if every one of
 * those return addresses is still at its place — then the call chain is the
 * same, frame by frame — else it unwinds.  An entry is filled on the second
 * unwind of its key (the first only remembers the key), by scanning the
 * stack upward for the return addresses in order.  Every read stays inside
 * this thread's stack ([cfa, top of the stack) is mapped while the frames
 * below cfa run); stacks that are not the thread's own (coroutines, signal
 * stacks) are never cached.
 */
#define SCACHE 4
#define SCAN_MAX ((uintptr_t)1 << 20) /* bytes of stack scanned for a fill */

struct scache_entry {
	uintptr_t ra, cfa;
	uint32_t site1; /* site + 1 */
	uint32_t state; /* 0 empty, 1 key seen once, 2 slots known */
	uintptr_t slot[DEPTH]; /* where frames[i] (i >= 1) lies on the stack */
};

struct scache {
	uintptr_t lo, hi; /* this thread's stack */
	int bounds;       /* 0 unknown, 1 known, -1 unavailable */
	struct scache_entry e[SCACHE];
};
static __thread struct scache vmap_profile_scache;

static inline struct scache_entry *scache_slot(uintptr_t ra, uintptr_t cfa)
{
	return &vmap_profile_scache.e[((ra >> 2) ^ (cfa >> 4)) & (SCACHE - 1)];
}

bool vmap_prof_scache_hit(uintptr_t ra, uintptr_t cfa, int kind, uint32_t *id)
{
	struct scache_entry *e = scache_slot(ra, cfa);
	if (e->state != 2 || e->ra != ra || e->cfa != cfa)
		return false;
	const struct vmap_site *s = &sites[e->site1 - 1];
	if (s->kind != (uint32_t)kind)
		return false;
	for (unsigned i = 1; i < s->nframes; i++)
		if (*(const volatile uintptr_t *)e->slot[i] != s->frames[i])
			return false;
	*id = e->site1 - 1;
	return true;
}

static bool stack_bounds(struct scache *c)
{
	if (!c->bounds) {
		/* May allocate (the cpuset; the main thread reads
		 * /proc/self/maps): unprofiled, this thread is busy. */
		pthread_attr_t attr;
		void *addr;
		size_t size;
		c->bounds = -1;
		if (prof_fn.getattr_np && prof_fn.self && prof_fn.attr_getstack &&
		    prof_fn.attr_destroy && prof_fn.getattr_np(prof_fn.self(), &attr) == 0) {
			if (prof_fn.attr_getstack(&attr, &addr, &size) == 0 && size) {
				c->lo = (uintptr_t)addr;
				c->hi = (uintptr_t)addr + size;
				c->bounds = 1;
			}
			prof_fn.attr_destroy(&attr);
		}
	}
	return c->bounds == 1;
}

void vmap_prof_scache_note(uintptr_t ra, uintptr_t cfa, uint32_t id, const uintptr_t *frames,
			unsigned n)
{
	struct scache *c = &vmap_profile_scache;
	/* The key must be the program's call site, the first frame kept. */
	if (!id || !n || frames[0] != ra || ra - self_lo < self_hi - self_lo || (cfa & 7))
		return;
	struct scache_entry *e = scache_slot(ra, cfa);
	if (e->state == 0 || e->ra != ra || e->cfa != cfa || e->site1 != id + 1) {
		*e = (struct scache_entry){.ra = ra, .cfa = cfa, .site1 = id + 1, .state = 1};
		return;
	}
	if (e->state != 1 || !stack_bounds(c) || cfa <= c->lo || cfa >= c->hi)
		return;
	const uintptr_t *w = (const uintptr_t *)cfa, *end = (const uintptr_t *)c->hi;
	if (c->hi - cfa > SCAN_MAX)
		end = (const uintptr_t *)(cfa + SCAN_MAX);
	for (unsigned i = 1; i < n; i++) {
		while (w < end && *w != frames[i])
			w++;
		if (w == end) {
			e->state = 0; /* not all found: this stack is not cached */
			return;
		}
		e->slot[i] = (uintptr_t)w++;
	}
	e->state = 2;
}

/* ---- symbolization (report time) ---------------------------------------- */


static const char *base_of(const char *path)
{
	const char *b = path;
	for (const char *p = path; *p; p++)
		if (*p == '/')
			b = p + 1;
	return b;
}

/* The program as it was started: argv[0] read at init, before main() could
 * rewrite it (redis-server sets its process title there), so that a
 * symbolic link such as redis-server -> redis-check-rdb keeps its name. */
static const char *exe_name(struct symbolizer *z)
{
	(void)z;
	return program[0] ? base_of(program) : "(program)";
}

/* The program's file, read from /proc/self/exe on first use (a raw
 * readlink: also in a signal handler); "" when unreadable. */
static char exe_path[512];
static const char *exe_file(void)
{
	if (!exe_path[0] && vmap_os_readlink("/proc/self/exe", exe_path, sizeof exe_path) < 0)
		exe_path[0] = '\0';
	return exe_path[0] ? exe_path : NULL;
}

/* The file of a loaded object: its l_name, or the program's. */
static const char *path_of(const struct link_map *lm)
{
	return lm->l_name && lm->l_name[0] ? lm->l_name : exe_file();
}

static void obj_load_symtab(struct sym_obj *o, const char *path)
{
	int fd = vmap_os_open(path, O_RDONLY, 0);
	if (fd < 0)
		return;
	long size = vmap_os_lseek(fd, 0, SEEK_END);
	if (size < (long)sizeof(ElfW(Ehdr))) {
		vmap_os_close(fd);
		return;
	}
	size_t len = (size_t)size;
	void *m = vmap_os_mmap(NULL, (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1), PROT_READ,
			       MAP_PRIVATE, fd, 0);
	vmap_os_close(fd);
	if (vmap_os_is_err(m))
		return;
	o->map = m;
	o->maplen = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	const unsigned char *f = m;
	const ElfW(Ehdr) *eh = m;
	if (f[0] != 0x7f || f[1] != 'E' || f[2] != 'L' || f[3] != 'F' ||
	    f[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > len ||
	    (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > len - eh->e_shoff)
		return;
	const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_entsize != sizeof(ElfW(Sym)) ||
		    sh[i].sh_link >= eh->e_shnum)
			continue;
		const ElfW(Shdr) *str = &sh[sh[i].sh_link];
		if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
		    str->sh_offset > len || str->sh_size > len - str->sh_offset || !str->sh_size)
			continue;
		o->syms = (const ElfW(Sym) *)(f + sh[i].sh_offset);
		o->nsyms = sh[i].sh_size / sizeof(ElfW(Sym));
		o->strs = (const char *)(f + str->sh_offset);
		o->strsz = str->sh_size;
		return;
	}
}

static struct sym_obj *obj_get(struct symbolizer *z, const struct link_map *lm)
{
	for (unsigned i = 0; i < z->n; i++)
		if (z->obj[i].lm == lm)
			return &z->obj[i];
	if (z->n == SYM_OBJS)
		return NULL;
	struct sym_obj *o = &z->obj[z->n++];
	*o = (struct sym_obj){.lm = lm};
	const char *path = lm->l_name;
	if (!path || !path[0]) { /* the main program */
		o->base = exe_name(z);
		path = "/proc/self/exe";
	} else {
		o->base = base_of(path);
	}
	if (path[0] == '/')
		obj_load_symtab(o, path);
	return o;
}

void vmap_prof_symbolizer_done(struct symbolizer *z)
{
	for (unsigned i = 0; i < z->n; i++)
		if (z->obj[i].map)
			vmap_os_munmap(z->obj[i].map, z->obj[i].maplen);
	z->n = 0;
}

void vmap_prof_symbolize(struct symbolizer *z, uintptr_t addr, struct frame_name *out)
{
	*out = (struct frame_name){NULL, 0, NULL, addr, NULL};
	Dl_info info;
	struct link_map *lm = NULL;
	/* addr is a return address: look up the call instruction before it. */
	if (!prof_fn.dladdr1 ||
	    !prof_fn.dladdr1((void *)(addr - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return;
	out->rel = addr - lm->l_addr;
	out->path = path_of(lm);
	struct sym_obj *o = obj_get(z, lm);
	out->object = o ? o->base : base_of(info.dli_fname ? info.dli_fname : "?");
	uintptr_t rel = addr - 1 - lm->l_addr;
	if (o && o->syms) {
		for (size_t i = 0; i < o->nsyms; i++) {
			const ElfW(Sym) *s = &o->syms[i];
			unsigned type = ELF64_ST_TYPE(s->st_info);
			if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_shndx == SHN_UNDEF ||
			    s->st_name >= o->strsz)
				continue;
			if (rel >= s->st_value && rel - s->st_value < (s->st_size ? s->st_size : 1)) {
				out->func = o->strs + s->st_name;
				out->off = addr - lm->l_addr - s->st_value;
				return;
			}
		}
	}
	if (info.dli_sname && info.dli_saddr) {
		out->func = info.dli_sname;
		out->off = addr - (uintptr_t)info.dli_saddr;
	}
}

/* Async-signal-safe: the object and the offset from its load bias only. */
void vmap_prof_locate_in_signal(struct symbolizer *z, uintptr_t addr, struct frame_name *out)
{
	*out = (struct frame_name){NULL, 0, NULL, addr, NULL};
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	struct dl_find_object fo;
	if (prof_fn.find_object && prof_fn.find_object((void *)(addr - 1), &fo) == 0 &&
	    fo.dlfo_link_map) {
		const struct link_map *lm = fo.dlfo_link_map;
		out->object = lm->l_name && lm->l_name[0] ? base_of(lm->l_name) : exe_name(z);
		out->rel = addr - lm->l_addr;
		out->path = path_of(lm);
	}
#endif
}

