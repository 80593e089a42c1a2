/*
 * Where to place a uprobe in a function: the first instruction the kernel
 * emulates rather than single-steps (x86-64). A single-stepped probe costs
 * ~18 us a hit on these hosts against ~5 us emulated
 * (docs/linux.md#probe-cost-emulated-or-single-stepped): jemalloc's malloc
 * starts with `cmp $0x1000,%rdi`, a single-stepped instruction, and malloc+7 is
 * a `ja`.
 */
#ifndef HT_BPF_PROLOGUE_H
#define HT_BPF_PROLOGUE_H

#include <stddef.h>
#include <stdint.h>

/* Decoding stops this many bytes into the function (jemalloc's free
 * reaches its first branch at +0x30). */
#define PROLOGUE_SCAN 64

/* Where a function's probe goes. */
struct prologue_site {
    unsigned off;  /* bytes past the entry: 0 when not emulated */
    int emulated;  /* the kernel emulates the instruction at off */
    char why[96];  /* when not emulated: what ended the walk, for status */
};

/* The site in a function's first n bytes: the first instruction the kernel
 * emulates that every call reaches on a straight line from the entry, with
 * rsp, the return address at (%rsp), rbp and the other callee-saved
 * registers, and the first nargs argument registers (rdi rsi rdx rcx r8 r9)
 * as at the call. Otherwise off 0, emulated only if the entry is, and why. */
void prologue_site_find(const uint8_t *code, size_t n, unsigned nargs, struct prologue_site *s);

/* prologue_site_find's offset for a function of six arguments. */
unsigned prologue_probe_offset(const uint8_t *code, size_t n);

/* 1 when the kernel emulates the instruction at code (push, nop, jmp, jcc,
 * call: arch/x86/kernel/uprobes.c), and its length in *len. */
int prologue_emulated(const uint8_t *code, size_t n, unsigned *len);

#endif
