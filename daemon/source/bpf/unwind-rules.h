/*
 * The unwind rule of each code address, read once from the module's CFI
 * (libdw) and kept in a bounded cache, for the fast unwinder (unwind.c): a
 * frame whose rule has the common simple shape (CFA = rsp or rbp + offset,
 * return address and rbp saved at CFA + offset, or rbp unchanged) is
 * unwound with a few reads of the stack copy, without libdwfl.
 * Threads: one owner (the unwinder's).
 */
#ifndef HT_BPF_UNWIND_RULES_H
#define HT_BPF_UNWIND_RULES_H

#include "ht-cfi-rule.h"

#include <elfutils/libdwfl.h>
#include <stdint.h>

struct unwind_rules_stats {
    uint64_t hits, misses;
    uint64_t evicted; /* rules dropped from the cache at its cap (looked up again when needed) */
    uint64_t entries; /* slots in use */
};

struct unwind_rules {
    struct unwind_rule *t;
    struct unwind_rules_stats st;
};

/* Rules kept: 2^15 slots of 32 bytes (1 MiB), allocated at the first
 * lookup, in sets of 4 an address can use (newest first). */
#define UNWIND_RULES_SLOTS (1u << 15)
#define UNWIND_RULES_WAYS 4

void unwind_rules_init(struct unwind_rules *r);
void unwind_rules_close(struct unwind_rules *r);
/* Forget every rule (the modules were read again). */
void unwind_rules_clear(struct unwind_rules *r);
/* The rule at pc in dwfl's modules, valid until the next lookup (a set
 * keeps its newest first); NULL only when out of memory. */
const struct unwind_rule *unwind_rules_get(struct unwind_rules *r, Dwfl *dwfl, uint64_t pc);

#endif
