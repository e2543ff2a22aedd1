/*
 * fake_os.h — link-time fakes of the OS seam for fault-injection tests.
 *
 * Test executables linked with -Wl,--wrap=vmap_os_<fn> (see meson.build) send
 * every call the core makes to <fn> through __wrap_vmap_os_<fn> in fake_os.c.
 * By default a wrapper counts the call and forwards it to the real function
 * (__real_vmap_os_<fn>).  A test can instead:
 *   - fail the Nth call from now with a given errno, positive (fake_fail_nth), the next
 *     N calls (fake_fail_next), or every call (fake_fail_always), until
 *     fake_fail_clear() or fake_reset();
 *   - read how many calls were made (fake_calls) and, for madvise and
 *     madvise_batch, which ranges were advised (fake_advised);
 *   - make madvise_batch return -EINVAL like a kernel without
 *     process_madvise(PIDFD_SELF) (fake_batch_mode(FAKE_BATCH_EINVAL)), or
 *     emulate it with one real madvise per iovec (FAKE_BATCH_EMULATE), so that
 *     the batch path is exercised whatever the kernel.
 *
 * Only calls that cross object files are wrapped: vmap_os_reserve's own call
 * to mmap (both in os_linux.c) is not seen, which is why reserve itself is
 * wrapped too.
 */
#ifndef VMAP_FAKE_OS_H
#define VMAP_FAKE_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fake_fn {
	FAKE_MMAP,
	FAKE_MUNMAP,
	FAKE_MADVISE,
	FAKE_MADVISE_BATCH,
	FAKE_MREMAP,
	FAKE_RESERVE,
	FAKE_MAP_FRESH,
	FAKE_MAP_HOLE,
	FAKE_NFN
};

enum fake_batch { FAKE_BATCH_REAL, FAKE_BATCH_EINVAL, FAKE_BATCH_EMULATE };

struct fake_range {
	uintptr_t addr;
	size_t len;
	int advice;
	bool batch; /* advised through madvise_batch */
};

/* Forget every fault, count and record; batch mode back to REAL. */
void fake_reset(void);
/* The nth call of fn from now (1 = the next one) returns -err. */
void fake_fail_nth(enum fake_fn fn, unsigned nth, int err);
/* The next n calls of fn return -err. */
void fake_fail_next(enum fake_fn fn, unsigned n, int err);
/* Every call of fn from now returns -err. */
void fake_fail_always(enum fake_fn fn, int err);
/* Stop failing fn (counts and records are kept). */
void fake_fail_clear(enum fake_fn fn);
/* Calls of fn since the last reset, failed ones included. */
unsigned fake_calls(enum fake_fn fn);
/* Calls of fn that were made to fail. */
unsigned fake_failures(enum fake_fn fn);
/* madvise calls with this advice since the last reset. */
unsigned fake_madvise_calls(int advice);
void fake_batch_mode(enum fake_batch mode);
/* Copies the recorded ranges with this advice (both paths) to out[];
 * returns how many there are (possibly more than max). */
unsigned fake_advised(int advice, struct fake_range *out, unsigned max);
/* A failing mremap fails part way, as Linux 6.17+ can for a source of
 * several VMAs near vm.max_map_count: it first really moves the source's
 * first `moved` bytes (same flags) and unmaps the next `hole` bytes of the
 * destination.  0, 0: fail before doing anything (the default). */
void fake_mremap_partial(size_t moved, size_t hole);
/* Sizes asked of vmap_os_reserve, in call order. */
unsigned fake_reserve_sizes(size_t *out, unsigned max);
/* Hooks for races made to order (NULL: none; kept by fake_reset): fn runs
 * at the start of every madvise; before_wait before every timed futex wait
 * (a lock's sleep), after_wake after every futex wake (a contended lock's
 * unlock), each given the futex word.  In whichever thread makes the call:
 * a hook that takes the core's locks takes them in that thread. */
void fake_madvise_hook(void (*fn)(void *addr, size_t len, int advice));
void fake_futex_hooks(void (*before_wait)(volatile uint32_t *word),
		      void (*after_wake)(volatile uint32_t *word));
/* The time the core's clock reads from now on (vmap_os_now_ns); 0: the real
 * clock again.  For policies with time windows, on machines of any speed. */
void fake_clock_set(uint64_t ns);

#endif
