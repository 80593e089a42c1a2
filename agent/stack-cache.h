/*
 * The thread's cache of stacks in front of the cached-rule unwinder: keyed
 * by where the program called the agent (return address, stack pointer,
 * and rbp when the walk used it), an entry keeps the stack's table id and
 * the stack slots the walk read with their values (fu_trace). A hit is
 * checked by reading those slots again: the same start and the same slot
 * values make the same walk (unwind-fast.h), so the same stack, with no
 * rule lookup, no hashing of frames and no table probe. A different call
 * path at the same sp differs in a return address slot: a miss.
 *
 * Per thread (40 KiB mapped at its first walk): no atomics, no lock. A signal handler's calls
 * while the thread is in the agent are not recorded (agent-int.h), so they
 * never touch it.
 */
#ifndef AGENT_STACK_CACHE_H
#define AGENT_STACK_CACHE_H

#include "unwind-fast.h"

#include <stdint.h>

/* Once, before any thread's first sc_ready. */
int sc_init(void);
/* The thread's cache mapped (once; 0: it could not be, the stacks are
 * walked each time). With the user's guard up (fu_untraced). */
int sc_ready(void);
/* tag: what else the entry depends on (the rules' generation, the ring). */
int sc_lookup(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uint64_t tag, uint32_t *id, int *cut);
void sc_store(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uint64_t tag, const struct fu_trace *tr,
              uint32_t id, int cut);

#endif
