/*
 * Where to place a uprobe in a function: the first instruction the kernel
 * emulates rather than single-steps (x86-64). A single-stepped probe costs
 * ~18 us a hit on these hosts against ~5 us emulated (linux-backend.md
 * sections 0 and 2): glibc's free starts with `test %rdi,%rdi`, a
 * single-stepped instruction, and free+3 is a `je`.
 */
#ifndef HT_BPF_PROLOGUE_H
#define HT_BPF_PROLOGUE_H

#include <stddef.h>
#include <stdint.h>

/* Decoding stops this many bytes into the function. */
#define PROLOGUE_SCAN 32

/* Offset into the function's first n bytes at which a probe sees the
 * arguments and the return address as at the call (no stack or argument
 * register changed before it, no branch) and the kernel emulates the
 * instruction there; 0 when the code has no known shape (probe the entry). */
unsigned prologue_probe_offset(const uint8_t *code, size_t n);

/* 1 when the kernel emulates the instruction at code (push, nop, jmp, jcc,
 * call: arch/x86/kernel/uprobes.c), and its length in *len. */
int prologue_emulated(const uint8_t *code, size_t n, unsigned *len);

#endif
