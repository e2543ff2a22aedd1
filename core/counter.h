/*
 * counter.h — the statistics counters: one atomic word each while the process
 * has one thread, per-CPU slots once it has two.
 *
 * Add:  atomic mode  -> one relaxed atomic add on the base.
 *       per-CPU mode -> where glibc registered rseq (x86-64): one plain add on
 *                       the slot of the CPU the thread runs on, in a
 *                       restartable sequence (the kernel restarts it if the
 *                       thread is preempted, migrated or signalled before the
 *                       add, which commits it), so no lock prefix; elsewhere
 *                       one relaxed atomic add on the slot of the CPU hint.
 *                       Slots have a cache line per CPU; when |slot| reaches
 *                       the batch, it is folded into the base atomically.
 * The base is updated atomically in both modes, so no update is lost at the
 * switch.  Reads: approximate = base; exact = base + every slot.
 * The switch happens once, for all counters together, and never back.
 */
#ifndef VMAP_COUNTER_H
#define VMAP_COUNTER_H

#include <stdbool.h>
#include <stdint.h>

enum vmap_stat {
#define X(name, kind, doc) VMAP_STAT_##name,
#include "stats.def"
#undef X
	VMAP_STAT_COUNT
};

/* Slot block per CPU: every counter of one CPU, padded to cache lines. */
#define VMAP_STAT_STRIDE (((VMAP_STAT_COUNT * 8) + 63) / 64 * 8)

extern int64_t vmap_counter_base[VMAP_STAT_COUNT];
extern int64_t *vmap_counter_slots; /* NULL in atomic mode */
extern unsigned vmap_counter_nslots;
extern int64_t vmap_counter_batch;
/* The batch of the cached bytes, which the purge reads approximately against
 * its limit (vmap_counter_set_batch). */
extern int64_t vmap_counter_batch_cached;
extern bool vmap_counter_rseq; /* per-CPU adds through rseq (set at the switch) */

void vmap_counter_fold(int64_t *slot, enum vmap_stat s);
void vmap_counter_rseq_fold(int64_t *slot, enum vmap_stat s);

#if defined(__x86_64__) && __has_include(<sys/rseq.h>)
#define VMAP_HAVE_RSEQ 1
#include <sys/rseq.h>

#include "os.h"

static inline struct rseq *vmap_rseq_area(void)
{
	char *tp;
	__asm__("mov %%fs:0, %0" : "=r"(tp));
	/* Set before vmap_counter_rseq (vmap_os_rseq_size in the switch). */
	return (struct rseq *)(tp + __atomic_load_n(&vmap_rseq_offset, __ATOMIC_RELAXED));
}

/*
 * Adds d to slots[cpu * STRIDE + s] for the CPU the thread runs on, as a
 * restartable sequence: the CPU number is checked inside the sequence and the
 * single add instruction commits it; preemption, migration or a signal before
 * it makes the kernel jump to the abort handler (after RSEQ_SIG, the signature
 * glibc registered), which starts over.  Returns the slot, or NULL when the
 * CPU number has no slot (the caller adds to the base instead).
 */
static inline int64_t *vmap_rseq_slot_add_on(int64_t *slots, enum vmap_stat s, int64_t d,
					     uint32_t only_cpu)
{
	struct rseq *rs = vmap_rseq_area();
	for (;;) {
		uint32_t cpu = __atomic_load_n(&rs->cpu_id_start, __ATOMIC_RELAXED);
		if (__builtin_expect(cpu >= vmap_counter_nslots, 0) ||
		    (only_cpu != UINT32_MAX && cpu != only_cpu))
			return NULL;
		int64_t *slot = &slots[cpu * VMAP_STAT_STRIDE + s];
		__asm__ __volatile__ goto(
			".pushsection __rseq_cs, \"aw\"\n\t"
			".balign 32\n\t"
			"3:\n\t"
			".long 0x0, 0x0\n\t"
			".quad 1f, (2f - 1f), 4f\n\t"
			".popsection\n\t"
			"leaq 3b(%%rip), %%rax\n\t"
			"movq %%rax, %[cs]\n\t"
			"1:\n\t"
			"cmpl %[cpu], %[cpu_id]\n\t"
			"jnz %l[abort]\n\t"
			"addq %[d], (%[slot])\n\t"
			"2:\n\t"
			".pushsection __rseq_failure, \"ax\"\n\t"
			".byte 0x0f, 0xb9, 0x3d\n\t"
			".long 0x53053053\n\t"
			"4:\n\t"
			"jmp %l[abort]\n\t"
			".popsection\n\t"
			:
			: [cpu] "r"(cpu), [cpu_id] "m"(rs->cpu_id), [cs] "m"(rs->rseq_cs),
			  [slot] "r"(slot), [d] "er"(d)
			: "memory", "cc", "rax"
			: abort);
		return slot;
	abort:;
	}
}

static inline int64_t *vmap_rseq_slot_add(int64_t *slots, enum vmap_stat s, int64_t d)
{
	return vmap_rseq_slot_add_on(slots, s, d, UINT32_MAX);
}
#endif

/* s is a constant at every call: the choice folds away. */
static inline int64_t vmap_counter_batch_of(enum vmap_stat s)
{
	return s == VMAP_STAT_cached_bytes ? vmap_counter_batch_cached : vmap_counter_batch;
}

/* Adds d to counter s; cpu is the caller's CPU hint (any value is correct). */
static inline void vmap_stat_add_cpu(unsigned cpu, enum vmap_stat s, int64_t d)
{
	int64_t *slots = __atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE);
	if (!slots) {
		__atomic_add_fetch(&vmap_counter_base[s], d, __ATOMIC_RELAXED);
		return;
	}
	int64_t batch = vmap_counter_batch_of(s);
#ifdef VMAP_HAVE_RSEQ
	if (vmap_counter_rseq) {
		int64_t *slot = vmap_rseq_slot_add(slots, s, d);
		if (!slot) {
			__atomic_add_fetch(&vmap_counter_base[s], d, __ATOMIC_RELAXED);
			return;
		}
		int64_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
		if (__builtin_expect(v >= batch || v <= -batch, 0))
			vmap_counter_rseq_fold(slot, s);
		return;
	}
#endif
	int64_t *slot = &slots[(cpu % vmap_counter_nslots) * VMAP_STAT_STRIDE + s];
	int64_t v = __atomic_add_fetch(slot, d, __ATOMIC_RELAXED);
	if (__builtin_expect(v >= batch || v <= -batch, 0))
		vmap_counter_fold(slot, s);
}

/*
 * Figures on the hottest paths that nothing decides on while the program runs
 * (calls per entry point, large allocation and free counts, blocks in use,
 * bytes allocated, pool hits) are first kept in plain per-thread deltas and
 * folded into the counters every VMAP_LOCAL_BATCH events (an event: one
 * figure's add, or one call's adds together), at thread exit and
 * before any read by this thread: a plain add instead of an atomic
 * read-modify-write (bench fix_size_1 on the range path: 10 atomic adds per
 * malloc/free pair became 4).  Other threads' unfolded deltas (fewer than
 * VMAP_LOCAL_BATCH events each) are the only inexactness of these figures.
 * Byte gauges the purge and the peak read (bytes in use, cached bytes) stay
 * on vmap_stat_add_cpu.
 */
#define VMAP_LOCAL_BATCH 128
/* The calls the direct backends served (direct.c), one add each: a kind
 * stands for three statistics (the call, small_allocs or small_frees, and
 * the serving allocator's share), which the fold adds it to. */
enum vmap_direct_kind {
	VMAP_DIRECT_GLIBC_MALLOC,
	VMAP_DIRECT_GLIBC_FREE,
	VMAP_DIRECT_MI_MALLOC,
	VMAP_DIRECT_MI_FREE,
	VMAP_DIRECT_KINDS
};
struct vmap_local_counts {
	int32_t budget; /* events until the next fold, less one (a fold at -1: one
			 * instruction fewer); 0 in a new thread */
	bool exited;    /* after thread exit: fold on every event */
	uint64_t dirty; /* bit s: n[s] may be non-zero (the fold visits only those) */
	int64_t direct[VMAP_DIRECT_KINDS]; /* visited once a direct path was on */
	int64_t n[VMAP_STAT_COUNT];
};
_Static_assert(VMAP_STAT_COUNT <= 64, "one dirty bit per statistic");
extern __thread struct vmap_local_counts vmap_local;
void vmap_counter_flush_local(void);
/* Set (for good) before a direct path first serves: the folds visit the
 * direct counts from then on. */
extern bool vmap_counter_direct_used;
/* This thread's direct counts not yet folded into statistic s (a signal
 * handler's peek, which must not fold). */
int64_t vmap_counter_direct_pending(enum vmap_stat s);
/* The thread's exit: folds, and every later event (glibc frees after the key
 * destructors) folds at once. */
void vmap_counter_thread_exit(void);

/* A delta without an event of its own: a call that adds several figures
 * adds them quietly, then counts one event (vmap_stat_local_event), so that
 * it pays the event's decrement and test, and its share of the folds, once
 * (the dirty bits of adjacent adds merge into one or). */
static inline void vmap_stat_add_quiet(enum vmap_stat s, int64_t d)
{
	vmap_local.n[s] += d;
	vmap_local.dirty |= 1ull << s;
}

static inline void vmap_stat_local_event(void)
{
	if (__builtin_expect(--vmap_local.budget < 0, 0))
		vmap_counter_flush_local();
}

static inline void vmap_stat_add_local(enum vmap_stat s, int64_t d)
{
	vmap_stat_add_quiet(s, d);
	vmap_stat_local_event();
}

static inline void vmap_stat_inc_local(enum vmap_stat s)
{
	vmap_stat_add_local(s, 1);
}

int64_t vmap_stat_read(enum vmap_stat s);        /* exact */
int64_t vmap_stat_read_approx(enum vmap_stat s); /* base only */

/* Peak of large_bytes_in_use, maintained at folds and on atomic-mode adds. */
extern int64_t vmap_stat_peak_large_bytes;
void vmap_stat_note_peak(int64_t v);
void vmap_stat_reset_peak(void);

/* Mode control.  mode: 0 auto, 1 atomic forever, 2 per-CPU from the start. */
/* Sizes the slots and the batch for ncpu CPUs; without it they are sized from
 * vmap_os_ncpu() on first need (the switch, vmap_counter_set_batch). */
void vmap_counter_init(unsigned ncpu);
/* The fold batches: of every counter from bytes, of the cached bytes from the
 * purge's pressure limit (large.c, once at init). */
void vmap_counter_set_batch(uint64_t bytes, uint64_t limit);
/* Switches to per-CPU mode (idempotent); false if slots could not be had. */
bool vmap_counter_go_percpu(void);
bool vmap_counter_is_percpu(void);
uint64_t vmap_counter_switch_ns(void);

#endif
