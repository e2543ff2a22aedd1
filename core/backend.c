/*
 * backend.c — finds glibc's allocator functions without dlsym.
 *
 * Owns: vmap_libc and the place of libc.so.6's tables (libc_where).
 *
 * How: dl_iterate_phdr (no allocation; the loader's write lock is recursive)
 * finds libc.so.6; its PT_DYNAMIC gives the symbol, string, GNU hash and
 * version tables; each name is looked up with the GNU hash and the default
 * (non-hidden) version is taken.  This reaches glibc's definitions even though
 * this library exports the same names (__libc_malloc, malloc_usable_size...).
 *
 * Lazily: the walk at init only notes where libc.so.6's PT_DYNAMIC is (and
 * what it passed on the way); each vmap_libc function starts as a resolver
 * that looks its glibc function up on its first call, stores it in its slot
 * and calls it.  A process that never calls, say, glibc's malloc_trim makes
 * no look-up for it, and /bin/true, which allocates nothing, makes none
 * (nine look-ups at every start otherwise).  The callers'
 * fast paths are unchanged: they call through the slot as before.  Racing
 * first calls store the same value; a look-up reads only libc's tables, so
 * it takes no lock, makes no system call and may run in any context.
 *
 * The same lookup serves profile.c for libunwind, which it dlopen()s (from
 * the library's constructor, never inside malloc) only when it profiles, and
 * preload/dlfcn.c for glibc's dlopen/dlmopen, asked for by version
 * (GLIBC_2.34: the version under which glibc moved them into libc.so.6) so
 * that a libc.so.6 without them is told apart from one that has them.
 *
 * Called by: alloc.c (init), profile.c (vmap_elf_symbol), preload/dlfcn.c
 * (vmap_elf_symbol_version).
 */
#include "backend.h"

#include <elf.h>
#include <gnu/lib-names.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"
#include "os.h"
#include "section.h"

struct elf_tables {
	const char *want; /* the object's file name */
	struct vmap_load *load; /* vmap_backend_init's walk only: what it passes on the way */
	unsigned index;         /* objects visited so far */
	uintptr_t base;
	const ElfW(Sym) *symtab;
	const char *strtab;
	const uint32_t *gnu_hash;
	const ElfW(Half) *versym;
	const ElfW(Verdef) *verdef;
	const ElfW(Dyn) *dyn; /* vmap_backend_init's walk: libc's, read later */
};

VMAP_START_TEXT static bool str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* The last path component of name: found from the end (glibc's strlen
 * runs through the directories 16 bytes at a time), as the walk at start
 * does for every object before libc: a third fewer instructions in the
 * walk's callbacks. */
VMAP_START_TEXT static const char *base_name(const char *name)
{
	const char *p = name + __builtin_strlen(name);
	while (p > name && p[-1] != '/')
		p--;
	return p;
}

VMAP_START_TEXT static bool starts_with(const char *s, const char *prefix)
{
	while (*prefix && *s == *prefix)
		s++, prefix++;
	return !*prefix;
}

/* [lo, hi) of the object's PT_LOAD segments. */
VMAP_START_TEXT static void image_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t l = UINTPTR_MAX, h = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < l)
			l = a;
		if (a + ph->p_memsz > h)
			h = a + ph->p_memsz;
	}
	*lo = h ? l : 0;
	*hi = h;
}

/* This object's ELF header (the linker defines the symbol); its program
 * headers follow it in the first page, where dl_iterate_phdr points. */
extern const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

/*
 * vmap_backend_init's walk runs in load order, which is the order of the
 * global scope that the program's references to malloc are bound in, and
 * stops at libc.so.6.  Before it come the program, the vDSO, the
 * LD_PRELOAD objects (valgrind's among them, when it runs a tool) and the
 * libraries linked before libc: a few compares per object, no system call.
 *  - this object not met before libc: libc's malloc is the one bound
 *    (dlopen, or linked after libc): vmapalloc does not interpose;
 *  - a vgpreload_<tool> object other than vgpreload_core: valgrind runs a
 *    tool that replaces malloc (memcheck, helgrind, drd, massif, dhat), and
 *    it redirects every malloc it finds, ours included;
 *  - libasan: an ASan-built program (its runtime after us: ASan lets it run
 *    only with verify_asan_link_order=0, and then its heap checks are off).
 */
/* The names the walk at start compares with (section.h VMAP_START_DATA). */
static const char vgpreload[] VMAP_START_DATA = "vgpreload_";
static const char vgpreload_core[] VMAP_START_DATA = "vgpreload_core";
static const char libasan[] VMAP_START_DATA = "libasan.so";
static const char libc_so[] VMAP_START_DATA = LIBC_SO;

VMAP_START_TEXT static void note_order(struct elf_tables *t, const struct dl_phdr_info *info, const char *base)
{
	struct vmap_load *l = t->load;
	if (t->index++ == 0)
		image_range(info, &l->exe_lo, &l->exe_hi); /* the program comes first */
	if ((const char *)info->dlpi_phdr == (const char *)&__ehdr_start + __ehdr_start.e_phoff) {
		l->self_index = t->index;
		return;
	}
	if (base[0] == 'v' && starts_with(base, vgpreload) && !starts_with(base, vgpreload_core))
		l->valgrind = base;
	else if (base[0] == 'l' && starts_with(base, libasan) && l->self_index > 1)
		l->asan = base;
}

/* The tables of the object loaded at base whose dynamic section is d. */
static void read_dynamic(struct elf_tables *t, uintptr_t base, const ElfW(Dyn) *d)
{
	for (; d->d_tag != DT_NULL; d++) {
		uintptr_t v = d->d_un.d_ptr;
		/* ld.so relocates these in place on most targets; not on all. */
		if (v < base)
			v += base;
		switch (d->d_tag) {
		case DT_SYMTAB: t->symtab = (const void *)v; break;
		case DT_STRTAB: t->strtab = (const void *)v; break;
		case DT_GNU_HASH: t->gnu_hash = (const void *)v; break;
		case DT_VERSYM: t->versym = (const void *)v; break;
		case DT_VERDEF: t->verdef = (const void *)v; break;
		}
	}
	t->base = base;
}

VMAP_START_TEXT static const ElfW(Dyn) *dynamic_of(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	return NULL;
}

/*
 * Where libc.so.6 is: noted by the first walk that meets it, read by every
 * later look-up in it (libc.so.6 is never unloaded), so that neither the lazy
 * resolvers nor vmap_elf_symbol(LIBC_SO) walk again.  Its tables are read
 * from its dynamic section on the first look-up, not by the walk at init.
 * The walk's vmap_load is kept with it: vmap_backend_init runs it once even
 * when called twice (the constructor, then the first call).  Published with
 * a release store of `state` after the fields; racing walkers find the same.
 */
static struct {
	int state; /* 0 not walked yet, 1 being written, 2 ready */
	uintptr_t base;
	const ElfW(Dyn) *dyn;
	struct vmap_load load;
} libc_where VMAP_HOT;

VMAP_START_TEXT static int find_object(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	struct elf_tables *t = data;
	const char *base = info->dlpi_name ? base_name(info->dlpi_name) : "";
	if (t->load)
		note_order(t, info, base);
	if (!str_eq(base, t->want))
		return 0;
	const ElfW(Dyn) *d = dynamic_of(info);
	if (!d)
		return 0;
	if (t->load) { /* vmap_backend_init: where, not yet what */
		t->base = info->dlpi_addr;
		t->dyn = d;
		return 1;
	}
	read_dynamic(t, info->dlpi_addr, d);
	return 1;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

/* Is version index ndx (hidden bit cleared) the version named `want`? */
static bool version_is(const struct elf_tables *t, ElfW(Half) ndx, const char *want)
{
	const ElfW(Verdef) *d = t->verdef;
	while (d) {
		if (d->vd_ndx == ndx) {
			const ElfW(Verdaux) *a = (const void *)((const char *)d + d->vd_aux);
			return str_eq(want, t->strtab + a->vda_name);
		}
		if (!d->vd_next)
			break;
		d = (const void *)((const char *)d + d->vd_next);
	}
	return false;
}

/* The definition of `name`: of version `version` (hidden or default), or the
 * default (non-hidden) one when version is NULL. */
static void *lookup_version(const struct elf_tables *t, const char *name, const char *version)
{
	const uint32_t *ht = t->gnu_hash;
	uint32_t nbuckets = ht[0], symoffset = ht[1], bloom_size = ht[2];
	const ElfW(Addr) *bloom = (const void *)&ht[4];
	const uint32_t *buckets = (const void *)&bloom[bloom_size];
	const uint32_t *chain = &buckets[nbuckets];
	uint32_t h = gnu_hash(name);
	uint32_t idx = buckets[h % nbuckets];
	if (idx < symoffset)
		return NULL;
	for (;; idx++) {
		uint32_t h2 = chain[idx - symoffset];
		const ElfW(Sym) *sym = &t->symtab[idx];
		if ((h | 1) == (h2 | 1) && sym->st_shndx != SHN_UNDEF &&
		    str_eq(name, t->strtab + sym->st_name) &&
		    (version ? t->versym && t->verdef &&
				       version_is(t, t->versym[idx] & 0x7fff, version)
			     : !t->versym || !(t->versym[idx] & 0x8000)))
			return (void *)(t->base + sym->st_value);
		if (h2 & 1)
			return NULL;
	}
}

static void *lookup(const struct elf_tables *t, const char *name)
{
	return lookup_version(t, name, NULL);
}

static bool tables_ok(const struct elf_tables *t)
{
	return t->symtab && t->strtab && t->gnu_hash;
}

/* The walk itself: *load, and where libc.so.6 is (base, dyn); published in
 * libc_where by the first walker to finish (a signal handler that walks while
 * the walk it interrupted publishes uses its own result: nobody waits). */
VMAP_START_TEXT static void walk(struct vmap_load *load, uintptr_t *base, const ElfW(Dyn) **dyn)
{
	if (__atomic_load_n(&libc_where.state, __ATOMIC_ACQUIRE) == 2) {
		*load = libc_where.load;
		*base = libc_where.base;
		*dyn = libc_where.dyn;
		return;
	}
	struct elf_tables t = {.want = libc_so, .load = load};
	*load = (struct vmap_load){0};
	load->libc_found = dl_iterate_phdr(find_object, &t) != 0;
	*base = t.base;
	*dyn = t.dyn;
	int expected = 0;
	if (__atomic_compare_exchange_n(&libc_where.state, &expected, 1, false, __ATOMIC_ACQUIRE,
					__ATOMIC_RELAXED)) {
		libc_where.base = t.base;
		libc_where.dyn = t.dyn;
		libc_where.load = *load;
		__atomic_store_n(&libc_where.state, 2, __ATOMIC_RELEASE);
	}
}

/* libc.so.6's tables (walking first if no walk has been made yet). */
static bool libc_tables(struct elf_tables *t)
{
	struct vmap_load load;
	uintptr_t base;
	const ElfW(Dyn) *dyn;
	walk(&load, &base, &dyn);
	*t = (struct elf_tables){0};
	if (!load.libc_found)
		return false;
	read_dynamic(t, base, dyn);
	return tables_ok(t);
}

static bool find(const char *object, struct elf_tables *t)
{
	if (object[0] == 'l' && str_eq(object, libc_so))
		return libc_tables(t);
	*t = (struct elf_tables){.want = object};
	return dl_iterate_phdr(find_object, t) && tables_ok(t);
}

void *vmap_elf_symbol(const char *object, const char *name)
{
	struct elf_tables t;
	return find(object, &t) ? lookup(&t, name) : NULL;
}

void *vmap_elf_symbol_version(const char *object, const char *name, const char *version)
{
	struct elf_tables t;
	return find(object, &t) ? lookup_version(&t, name, version) : NULL;
}

VMAP_START_TEXT void vmap_backend_walk(struct vmap_load *load)
{
	uintptr_t base;
	const ElfW(Dyn) *dyn;
	walk(load, &base, &dyn);
}

int vmap_backend_init(struct vmap_load *load)
{
	vmap_backend_walk(load);
	struct elf_tables t;
	if (!load->libc_found || !libc_tables(&t)) {
		vmap_say("cannot find glibc's libc.so.6 and its symbol tables; ",
			 "vmapalloc needs a dynamically linked glibc program", NULL);
		return -1;
	}
	return 0;
}

/* ---- vmap_libc: each slot resolves itself on its first call --------------- */

__attribute__((noinline, cold)) static void *resolve(void **slot, const char *name)
{
	struct elf_tables t;
	void *f = libc_tables(&t) ? lookup(&t, name) : NULL;
	if (!f) {
		vmap_say("glibc does not export ", name, "; cannot run");
		vmap_os_exit(127);
	}
	__atomic_store_n(slot, f, __ATOMIC_RELAXED); /* racers store the same */
	return f;
}

/* The names beside the code that reads them (section.h VMAP_START_DATA): a
 * process that allocates resolves malloc, free and realloc at its start. */
#define RESOLVER(field, name, ret, params, args)                                             \
	static ret resolve_##field params                                                    \
	{                                                                                    \
		static const char fn_name[] VMAP_START_DATA = name;                          \
		__typeof__(vmap_libc.field) f =                                              \
			(__typeof__(f))resolve((void **)&vmap_libc.field, fn_name);         \
		return f args;                                                               \
	}
VMAP_LIBC_FUNCTIONS(RESOLVER)
#undef RESOLVER

struct vmap_libc vmap_libc VMAP_HOT = {
#define SLOT(field, name, ret, params, args) .field = resolve_##field,
	VMAP_LIBC_FUNCTIONS(SLOT)
#undef SLOT
};
