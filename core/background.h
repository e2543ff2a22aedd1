/*
 * background.h — the purger thread of VMAPALLOC_BACKGROUND=1 (background.c).
 */
#ifndef VMAP_BACKGROUND_H
#define VMAP_BACKGROUND_H

#include <stdbool.h>
#include <stdint.h>

/* After a large free, with no lock held: starts the thread if the option
 * asks for one and this process has none yet. */
void vmap_background_kick(void);
/* At exit: no pass runs after this returns. */
void vmap_background_stop(void);
/* In a forked child: no thread until the child caches a large block. */
void vmap_background_fork_child(void);
/* Whether the thread runs, and its passes so far (the report). */
bool vmap_background_running(uint64_t *passes);

#endif
