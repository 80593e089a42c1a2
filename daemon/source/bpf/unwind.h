/*
 * DWARF unwinding of the stack copies --stacks dwarf takes (docs/linux.md#stacks):
 * elfutils' libdwfl over the target's modules, with a memory callback serving the
 * copied top of the stack. ~5 us a stack. Most frames are unwound faster from
 * rules cached per code address (unwind-rules.h);
 * a stack with a frame of another shape is unwound by libdwfl (counted).
 * Threads: one owner (the consumer thread).
 */
#ifndef HT_BPF_UNWIND_H
#define HT_BPF_UNWIND_H

#include "heaptrace-bpf.h"

#include <stddef.h>
#include <stdint.h>

struct unwinder;

/* An unwinder for pid's modules as mapped now. 0, or a UV_E* error. */
int unwinder_new(struct unwinder **out, uint64_t pid);
void unwinder_free(struct unwinder *u);
/* The modules changed (dlopen): read them again on the next unwind. */
void unwinder_refresh(struct unwinder *u);
/* Frames (innermost first: regs' ip, then return addresses) of thread tid
 * from regs and len bytes of stack copied at regs->r[7]. The count, at most max. */
unsigned unwinder_run(struct unwinder *u, uint32_t tid, const struct hb_regs *regs,
                      const uint8_t *stack, size_t len, uint64_t *frames, unsigned max);
/* Did the last unwinder_run stop for want of stack past a full copy
 * (HB_STACK_COPY bytes): a stack deeper than the copy, cut? */
int unwinder_cut(const struct unwinder *u);

/* Off: every stack through libdwfl (the reference the fast path is tested against). */
void unwinder_set_fast(struct unwinder *u, int on);

struct unwinder_stats {
    uint64_t fast;      /* stacks unwound from cached rules */
    uint64_t fallbacks; /* stacks with a frame the rules do not cover: libdwfl did them */
    uint64_t rule_hits, rule_misses;
    uint64_t rules_evicted; /* rules replaced in the full cache (read again when needed) */
    uint64_t rules;         /* rules cached */
};
/* All zero for NULL. */
void unwinder_stats(const struct unwinder *u, struct unwinder_stats *st);

#endif
