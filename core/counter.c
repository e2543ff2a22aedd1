/*
 * counter.c — the lazily upgraded atomic -> per-CPU statistics counters.
 *
 * Owns: vmap_counter_base[] (always updated atomically), the slot block
 * (mapped with a raw mmap, never malloc), the mode, the peak.
 *
 * Invariants:
 *  - base + sum(slots) is the exact value at every instant an update is not
 *    in flight; a fold moves a value from a slot to the base with an atomic
 *    exchange followed by an atomic add, so nothing is lost or counted twice.
 *  - vmap_counter_slots goes from NULL to a block once (CAS) and never back;
 *    the block is never unmapped (readers may still hold it).
 *
 * Batch: max(32, 2 x ncpu) pages' worth of bytes, the kernel's
 * percpu_counter_batch scaled to bytes: the approximate
 * read is off by at most batch x ncpu, far below the purge threshold.
 *
 * Called by: every module that counts; alloc.c switches the mode when it sees
 * the second thread.
 */
#include "counter.h"

#include <sys/mman.h>

#include "os.h"
#include "section.h"

int64_t vmap_counter_base[VMAP_STAT_COUNT] VMAP_HOT;
int64_t *vmap_counter_slots VMAP_HOT;
unsigned vmap_counter_nslots = 1;
int64_t vmap_counter_batch = 32 * 4096;
int64_t vmap_counter_batch_cached = 32 * 4096;
bool vmap_counter_rseq;
int64_t vmap_stat_peak_large_bytes;
static uint64_t vmap_counter_switched_at;

/* 0: not sized yet, 1: being sized, 2: sized (vmap_counter_init ran). */
static int vmap_counter_sized VMAP_HOT;

void vmap_counter_init(unsigned ncpu)
{
	unsigned n = ncpu ? ncpu : 1;
	if (n > 256)
		n = 256;
	vmap_counter_nslots = n;
	int64_t pages = 2 * (int64_t)n > 32 ? 2 * (int64_t)n : 32;
	vmap_counter_batch = vmap_counter_batch_cached = pages * 4096;
	__atomic_store_n(&vmap_counter_sized, 2, __ATOMIC_RELEASE);
}

/* Sized from the CPU count on first need -- the switch or the batch set by the
 * arena's set-up -- not at init: atomic mode uses neither the slot count nor
 * the batch, and sched_getaffinity is one system call fewer in every process
 * that stays single-threaded and small.  Once, by one thread. */
static void counter_size(void)
{
	int expected = 0;
	if (__atomic_load_n(&vmap_counter_sized, __ATOMIC_ACQUIRE) == 2)
		return;
	if (__atomic_compare_exchange_n(&vmap_counter_sized, &expected, 1, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		vmap_counter_init(vmap_os_ncpu());
		return;
	}
	while (__atomic_load_n(&vmap_counter_sized, __ATOMIC_ACQUIRE) != 2)
		vmap_os_yield();
}

void vmap_stat_note_peak(int64_t v)
{
	int64_t old = __atomic_load_n(&vmap_stat_peak_large_bytes, __ATOMIC_RELAXED);
	while (v > old && !__atomic_compare_exchange_n(&vmap_stat_peak_large_bytes, &old, v, true,
						       __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
}

/* bytes / (8 x slots), within [128 KiB, 4 MiB]. */
static int64_t batch_for(uint64_t bytes)
{
	uint64_t b = bytes / (8 * (uint64_t)vmap_counter_nslots);
	if (b < 128 * 1024)
		b = 128 * 1024;
	if (b > 4 * 1024 * 1024)
		b = 4 * 1024 * 1024;
	return (int64_t)b;
}

void vmap_counter_set_batch(uint64_t bytes, uint64_t limit)
{
	/* Byte gauges move by a large block (>= 64 KiB) at a time: with a batch
	 * of 128 KiB nearly every update would fold into the shared base (a
	 * contended atomic instead of a plain add; bench/counter.c).  Folding
	 * every bytes/(8 x slots) keeps an approximate read within 1/8 of
	 * bytes.  The cached bytes fold against the pressure limit itself: the
	 * purge compares their approximate read with it on every free.  Folded
	 * every 4 MiB on a 2-CPU machine, that read was 3-7 MiB short of the
	 * exact figure while the cache stood at the 8 MiB limit
	 * (mimalloc-bench's mstress): the cache reached 12 MiB unpurged. */
	counter_size();
	vmap_counter_batch = batch_for(bytes);
	vmap_counter_batch_cached = batch_for(limit);
}

void vmap_stat_reset_peak(void)
{
	__atomic_store_n(&vmap_stat_peak_large_bytes, vmap_stat_read(VMAP_STAT_large_bytes_in_use),
			 __ATOMIC_RELAXED);
}

/* rseq mode: the slot may be written by a plain add on its CPU at any time,
 * so it is never exchanged: its value is taken off it by a restartable add on
 * that same CPU, and only once that committed, added to the base.  A thread
 * that migrated meanwhile leaves the slot alone (the next add on that CPU
 * folds it).  (Taking it off whatever CPU the thread ran on instead left the
 * negative part unfolded in a slot rarely written, and the base -- the purge's
 * approximate read -- inflated: bench xthread at 2 threads purged on every
 * free.) */
void vmap_counter_rseq_fold(int64_t *slot, enum vmap_stat s)
{
#ifdef VMAP_HAVE_RSEQ
	int64_t *slots = vmap_counter_slots;
	uint32_t cpu = (uint32_t)((slot - slots) / VMAP_STAT_STRIDE);
	int64_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
	if (!vmap_rseq_slot_add_on(slots, s, -v, cpu))
		return;
	int64_t now = __atomic_add_fetch(&vmap_counter_base[s], v, __ATOMIC_RELAXED);
	if (s == VMAP_STAT_large_bytes_in_use)
		vmap_stat_note_peak(now);
#else
	(void)slot;
	(void)s;
#endif
}

void vmap_counter_fold(int64_t *slot, enum vmap_stat s)
{
	int64_t v = __atomic_exchange_n(slot, 0, __ATOMIC_RELAXED);
	int64_t now = __atomic_add_fetch(&vmap_counter_base[s], v, __ATOMIC_RELAXED);
	if (s == VMAP_STAT_large_bytes_in_use)
		vmap_stat_note_peak(now);
}

__thread struct vmap_local_counts vmap_local;

/* The three statistics each direct kind adds to. */
static const uint8_t direct_stats[VMAP_DIRECT_KINDS][3] = {
	[VMAP_DIRECT_GLIBC_MALLOC] = {VMAP_STAT_malloc_calls, VMAP_STAT_small_allocs,
				      VMAP_STAT_small_glibc_allocs},
	[VMAP_DIRECT_GLIBC_FREE] = {VMAP_STAT_free_calls, VMAP_STAT_small_frees,
				    VMAP_STAT_small_glibc_frees},
	[VMAP_DIRECT_MI_MALLOC] = {VMAP_STAT_malloc_calls, VMAP_STAT_small_allocs,
				   VMAP_STAT_small_mimalloc_allocs},
	[VMAP_DIRECT_MI_FREE] = {VMAP_STAT_free_calls, VMAP_STAT_small_frees,
				 VMAP_STAT_small_mimalloc_frees},
};

int64_t vmap_counter_direct_pending(enum vmap_stat s)
{
	int64_t v = 0;
	for (unsigned k = 0; k < VMAP_DIRECT_KINDS; k++)
		for (unsigned j = 0; j < 3; j++)
			if (direct_stats[k][j] == s)
				v += vmap_local.direct[k];
	return v;
}

bool vmap_counter_direct_used;

__attribute__((noinline)) static void flush_direct(void)
{
	for (unsigned k = 0; k < VMAP_DIRECT_KINDS; k++) {
		int64_t d = vmap_local.direct[k];
		if (d) {
			for (unsigned j = 0; j < 3; j++) {
				vmap_local.n[direct_stats[k][j]] += d;
				vmap_local.dirty |= 1ull << direct_stats[k][j];
			}
			vmap_local.direct[k] = 0;
		}
	}
}

void vmap_counter_flush_local(void)
{
	if (__atomic_load_n(&vmap_counter_direct_used, __ATOMIC_RELAXED))
		flush_direct();
	unsigned cpu = vmap_counter_slots ? vmap_os_cpu() : 0;
	for (uint64_t m = vmap_local.dirty; m; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		if (vmap_local.n[i]) {
			vmap_stat_add_cpu(cpu, (enum vmap_stat)i, vmap_local.n[i]);
			vmap_local.n[i] = 0;
		}
	}
	vmap_local.dirty = 0;
	vmap_local.budget = vmap_local.exited ? 0 : VMAP_LOCAL_BATCH;
}

void vmap_counter_thread_exit(void)
{
	vmap_local.exited = true;
	vmap_counter_flush_local();
}

int64_t vmap_stat_read_approx(enum vmap_stat s)
{
	return __atomic_load_n(&vmap_counter_base[s], __ATOMIC_RELAXED);
}

int64_t vmap_stat_read(enum vmap_stat s)
{
	vmap_counter_flush_local();
	int64_t v = __atomic_load_n(&vmap_counter_base[s], __ATOMIC_RELAXED);
	int64_t *slots = __atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE);
	if (slots)
		for (unsigned c = 0; c < vmap_counter_nslots; c++)
			v += __atomic_load_n(&slots[c * VMAP_STAT_STRIDE + s], __ATOMIC_RELAXED);
	return v;
}

bool vmap_counter_go_percpu(void)
{
	if (__atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE))
		return true;
	counter_size();
	size_t len = (size_t)vmap_counter_nslots * VMAP_STAT_STRIDE * sizeof(int64_t);
	len = (len + VMAP_PAGE - 1) & ~(VMAP_PAGE - 1);
	int64_t *block = vmap_os_mmap(NULL, len, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (vmap_os_is_err(block))
		return false; /* stay atomic: correct, only slower under contention */
#ifdef VMAP_HAVE_RSEQ
	/* glibc's rseq registration: 0 when it failed or was turned off
	 * (GLIBC_TUNABLES=glibc.pthread.rseq=0, valgrind).  A CPU number beyond
	 * the slots (which count the CPUs we may run on) adds to the base.
	 * Read here, not at init: glibc has registered the area by now.  Set
	 * before the slots are published. */
	if (vmap_os_rseq_size() >= 20)
		__atomic_store_n(&vmap_counter_rseq, true, __ATOMIC_RELAXED);
#endif
	int64_t *expected = NULL;
	if (!__atomic_compare_exchange_n(&vmap_counter_slots, &expected, block, false,
					 __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
		vmap_os_munmap(block, len); /* another thread won */
		return true;
	}
	vmap_counter_switched_at = vmap_os_now_ns();
	__atomic_add_fetch(&vmap_counter_base[VMAP_STAT_counter_mode_switches], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&vmap_counter_base[VMAP_STAT_mapped_bytes], (int64_t)len, __ATOMIC_RELAXED);
	return true;
}

bool vmap_counter_is_percpu(void)
{
	return __atomic_load_n(&vmap_counter_slots, __ATOMIC_ACQUIRE) != NULL;
}

uint64_t vmap_counter_switch_ns(void)
{
	return vmap_counter_switched_at;
}
