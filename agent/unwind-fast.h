/*
 * The agent's cached-rule unwinder: the CFI rule of each return address
 * (ht-cfi-rule.h), learned once from its module's .eh_frame with libdw and
 * kept in a per-process table that the fast path reads without a lock, an
 * allocation or a syscall. A frame whose rule is not of the simple shape
 * (a signal frame, a DWARF expression, no module or no CFI), or a read that
 * would leave the thread's stack, makes the whole stack the caller's
 * business (libunwind): the frames given are those libunwind would give.
 *
 * x86-64 only (elsewhere fu_walk always answers -1).
 *
 * The user provides fu_untraced (its reentrancy guard): the slow path
 * (learning a rule) and dlclose allocate and free through the program's
 * allocator, calls that must not be recorded.
 */
#ifndef AGENT_UNWIND_FAST_H
#define AGENT_UNWIND_FAST_H

#include <stdint.h>

struct fu_stats {
    uint64_t learned;     /* rules read from CFI (the slow path) */
    uint64_t evicted;     /* rules overwritten in the full table (learned again when needed) */
    uint64_t no_module;   /* lookups of an address in no loaded module (not cached) */
    uint64_t invalidated; /* dlclose calls: every rule and module forgotten */
};

/* What a walk read: the stack slots (as offsets from its starting sp) and
 * their values, and whether a rule used the starting rbp. The walk is a
 * function of its start (pc, sp, rbp if used) and of these slots: the same
 * start and slot values give the same frames (a stack cache's check). */
#define FU_TRACE_MAX 48u
struct fu_trace {
    unsigned n;   /* slots read; FU_TRACE_MAX + 1: more than kept */
    int rbp_used; /* a CFA came from the starting rbp */
    uint32_t off[FU_TRACE_MAX];
    uint64_t val[FU_TRACE_MAX];
};

/* The frames from a return address pc into a caller whose stack pointer is
 * sp (after the return) and whose rbp is rbp, reading only [sp, hi):
 * pc first, at most max; -1 when a frame needs libunwind. tr (or NULL):
 * what it read. */
int fu_walk(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uintptr_t hi, uint64_t *out, unsigned max,
            struct fu_trace *tr);

/* The stack by libunwind, for what fu_walk leaves (frames from the
 * caller's own, as unw_backtrace gives them): unw_backtrace until a module
 * was unloaded, then libunwind's step by step walk (its trace cache keeps
 * the frame shapes of an unloaded module's addresses, flush or not). */
int fu_backtrace(uint64_t *out, int max);

/* Forget every rule and module (a module was unloaded: another may be
 * loaded at its address). */
void fu_invalidate(void);

/* How many times the rules were forgotten: a cache of stacks or of
 * libunwind's state is stale once it changed. */
uint64_t fu_generation(void);

/* Once, before the first fu_walk: the fork handlers of the table's lock. */
int fu_init(void);

void fu_stats(struct fu_stats *out);

/* The user's reentrancy guard: +1 before the unwinder's own allocator
 * calls, -1 after. */
void fu_untraced(int delta);

/* The user's count of a cap met (under the table's lock). */
enum fu_event { FU_RULE_EVICTED, FU_MODULES_FULL };
void fu_note(enum fu_event e);

#endif
