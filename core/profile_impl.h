/*
 * profile_impl.h — what the profiler's files share and no one else: the
 * site records, the live table's stripes, the libc functions looked up at
 * start, and the functions one file calls in another.
 *
 *   profile_report.c   the report: top sites, text and JSON
 *        |
 *   profile.c          set-up, sampling, the site table, recording
 *        |         \
 *   profile_live.c   profile_stack.c    live pointers | stacks and symbols
 */
#ifndef VMAP_PROFILE_IMPL_H
#define VMAP_PROFILE_IMPL_H

#include "profile.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "counter.h"
#include "lock.h"
#include "options.h"
#include "os.h"
#include "section.h"

#include "backend.h"
#include <gnu/lib-names.h>

/*
 * The libc functions only a profiling process calls are looked up
 * when profiling starts (vmap_profile_init, at init, outside any signal
 * handler) with backend.c's GNU-hash lookup, not imported: each import would
 * cost every process, profiled or not, a symbol look-up at load.
 * One missing (another libc) leaves that piece out, as a failing call would.
 */
struct prof_fns {
	int (*getattr_np)(pthread_t, pthread_attr_t *);
	pthread_t (*self)(void);
	int (*attr_getstack)(const pthread_attr_t *, void **, size_t *);
	int (*attr_destroy)(pthread_attr_t *);
	int (*dladdr1)(const void *, Dl_info *, void **, int);
	void *(*dlopen)(const char *, int);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
	int (*find_object)(void *, struct dl_find_object *);
#endif
};
extern struct prof_fns prof_fn;


#ifdef VMAP_HAVE_LIBUNWIND
/*
 * libunwind is not a dependency of libvmapalloc.so (DT_NEEDED would load it,
 * into every process, profiled or not): vmap_profile_start() dlopen()s
 * it when VMAPALLOC_PROFILE=1, from the library's constructor, and finds
 * unw_backtrace with backend.c's GNU-hash lookup (no dlsym).  RTLD_LOCAL: its
 * own `backtrace` stays out of the program's global scope.
 */
#define UNWIND_SONAME "libunwind.so.8"
extern int (*unw_backtrace_fn)(void **, int);
#endif

#define DEPTH 24       /* frames kept per site: shorter stacks unwind faster */
#define CAPTURE 40     /* frames captured: our own leading frames are dropped */
#define SITE_MAX 16384 /* records; 256 B each, touched only as they are used */
#define SITE_INDEX (2 * SITE_MAX)
#define STRIPES 64
#define STRIPE_MIN 256 /* entries of a stripe's first array (8 KiB) */
#define COUNT_ONE 256  /* fixed point of the weighted counts */
#define FRAMES_SHOWN 8 /* frames printed per site in the text report */

struct vmap_site {
	uint64_t hash;
	uint32_t nframes;
	uint32_t kind;
	int64_t bytes;      /* allocated, weighted, in total */
	int64_t count;      /* allocations, weighted, x COUNT_ONE */
	int64_t live_bytes; /* allocated and not freed */
	int64_t live_count; /* x COUNT_ONE */
	int64_t live_peak;  /* highest live_bytes seen */
	int64_t samples;    /* records taken (unweighted) */
	uintptr_t frames[DEPTH];
};

struct live_entry {
	uintptr_t key; /* 0 empty, 1 tombstone */
	uint32_t site;
	uint32_t unused;
	int64_t bytes;
	int64_t count;
};
#define KEY_EMPTY 0
#define KEY_TOMB 1

struct stripe {
	struct vmap_lock lock;
	uint32_t cap, used, tombs; /* used counts live entries */
	struct live_entry *e;
} __attribute__((aligned(64)));


extern struct vmap_site *sites;
extern uint32_t *site_index;
extern uint32_t nsites; /* records 1..nsites are published */
extern struct vmap_lock site_lock;
extern struct stripe stripes[STRIPES];
extern const unsigned nstripes;
extern uint64_t mean_bytes;
extern uint64_t large_mean; /* 0: every large block */
extern uint64_t profile_mapped; /* bytes of our tables, for the report */
extern uintptr_t self_lo, self_hi; /* libvmapalloc.so's own code: frames to drop */
extern char program[256];          /* argv[0] at init */
extern int self_known;

/* The sizes of the blocks recorded, by kind and power of two (weighted like
 * the sites): the report's size histogram. */
#define HIST_BUCKETS 41 /* up to 1 TiB; larger ones in the last */
struct prof_hist {
	int64_t bytes, count; /* count x COUNT_ONE */
};
extern struct prof_hist vmap_prof_hist[3][HIST_BUCKETS];

#define BATCH 64

struct batch {
	uint32_t site1; /* site + 1; 0: empty */
	uint32_t n;
	int64_t bytes, count, live_bytes, live_count, live_max, samples;
};

#define SYM_OBJS 24

struct sym_obj {
	const struct link_map *lm;
	const char *base;        /* basename for display */
	void *map;               /* the object's file, mapped read-only */
	size_t maplen;
	const ElfW(Sym) *syms;   /* its .symtab, if it has one */
	size_t nsyms;
	const char *strs;
	size_t strsz;
};

struct symbolizer {
	struct sym_obj obj[SYM_OBJS];
	unsigned n;
	bool in_signal; /* names nothing: object+offset only */
};

struct frame_name {
	const char *func; /* NULL when unknown */
	uint64_t off;     /* from func, or from the object's load address */
	const char *object;
	uintptr_t rel;    /* address - load bias (what addr2line -e object wants) */
	const char *path; /* the object's file, for addr2line; NULL when unknown */
};

bool vmap_prof_sampled(struct vmap_profile_tls *t, int64_t *countdown, uint8_t *drawn, uint64_t mean,
		    size_t size, int64_t *bytes, int64_t *count);
void vmap_prof_pte_forget(struct vmap_pte *e);
void vmap_prof_site_delta(uint32_t id, int64_t bytes, int64_t count, int64_t live_bytes,
		       int64_t live_count, int samples);
void vmap_prof_batch_flush(struct batch *bt);
extern __thread struct batch vmap_profile_batch;
void *vmap_prof_map_zeroed(size_t len);
void vmap_prof_locate_in_signal(struct symbolizer *z, uintptr_t addr, struct frame_name *out);
void vmap_prof_symbolize(struct symbolizer *z, uintptr_t addr, struct frame_name *out);
void vmap_prof_symbolizer_done(struct symbolizer *z);
void vmap_prof_scache_note(uintptr_t ra, uintptr_t cfa, uint32_t id, const uintptr_t *frames,
			unsigned n);
bool vmap_prof_scache_hit(uintptr_t ra, uintptr_t cfa, int kind, uint32_t *id);
__attribute__((noinline)) unsigned vmap_prof_capture(uintptr_t *out, uintptr_t ra);
bool vmap_prof_live_insert(uintptr_t p, uint32_t site, int64_t bytes, int64_t count);


void vmap_prof_fn_resolve(void);
uint32_t vmap_prof_site_get(const uintptr_t *f, unsigned n, int kind);

static inline void pte_note(struct vmap_pte *e, uint32_t id, int64_t bytes, int64_t count)
{
	e->prof_bytes = (uint64_t)bytes;
	e->prof_count = (uintptr_t)count;
	__atomic_store_n(&e->prof_site, (uintptr_t)(VMAP_PTE_SITE | id), __ATOMIC_RELAXED);
}

#endif
