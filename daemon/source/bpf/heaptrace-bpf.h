/*
 * Records the eBPF program (heaptrace.bpf.c) writes into its ring buffer and
 * the user side (consume.c) reads: fixed-size fields only, shared by both
 * sides (the triad of bcc's memleak). Every record starts with struct
 * hb_rec; what follows depends on the stack mode: hb_rec.nframes u64 return
 * addresses (frame pointers), or struct hb_regs and hb_rec.stack_len bytes
 * of the user stack copied from regs.sp (dwarf).
 */
#ifndef HEAPTRACE_BPF_H
#define HEAPTRACE_BPF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Allocator functions, by how their arguments and result are read: the
 * uprobe's cookie, so one program serves every attach point. */
enum hb_fn {
    HB_FN_NONE = 0,
    HB_FN_MALLOC,         /* (size) -> p: malloc, valloc, operator new (all variants) */
    HB_FN_CALLOC,         /* (n, size) -> p */
    HB_FN_REALLOC,        /* (p, size) -> p */
    HB_FN_REALLOCARRAY,   /* (p, n, size) -> p */
    HB_FN_MEMALIGN,       /* (align, size) -> p: memalign, aligned_alloc */
    HB_FN_POSIX_MEMALIGN, /* (&p, align, size) -> 0 */
    HB_FN_PVALLOC,        /* (size) -> p, size rounded up to a page */
    HB_FN_FREE,           /* (p): entry only, free and operator delete */
    HB_FN_HINT,           /* entry only: a function that calls malloc (libstdc++'s operator
                             new, strdup): where the frame-pointer stack starts */
    HB_FN_COUNT
};

/* Record kinds. */
enum hb_kind {
    HB_REC_ALLOC = 1, /* fn says which; args as entered, ret the result */
    HB_REC_FREE,      /* args[0] = p */
    HB_REC_MMAP,      /* args: addr, len, prot, flags, fd; ret = address or -errno */
    HB_REC_MUNMAP,    /* args: addr, len; ret */
    HB_REC_MREMAP,    /* args: old, old_len, new_len, flags, new; ret = address or -errno */
    HB_REC_MPROTECT,  /* args: addr, len, prot; ret */
    HB_REC_BRK,       /* args: brk; ret = new break */
    HB_REC_EXEC,      /* the target executed a new program: its heap and mappings are gone */
};

/* hb_rec.flags */
#define HB_F_IN_ALLOC 0x1  /* made inside an allocator call of the same thread */
#define HB_F_DWARF 0x2     /* an hb_regs + stack copy follows, not frames */
#define HB_F_TRUNCATED 0x4 /* the stack filled the buffer: cut at the limit */

/* Frames kept by the frame-pointer walk (perf's kernel.perf_event_max_stack default). */
#define HB_MAX_FRAMES 127
/* Bytes of user stack copied in dwarf mode (retrying smaller near the stack top). */
#define HB_STACK_COPY 8192

struct hb_rec {
    __u64 t; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
    __u64 args[5];
    __u64 ret;
    __u32 tid;
    __u16 kind; /* enum hb_kind */
    __u8 fn;    /* enum hb_fn for HB_REC_ALLOC / HB_REC_FREE */
    __u8 flags;
    __u16 nframes;   /* u64 frames following */
    __u16 stack_len; /* dwarf: bytes of stack following struct hb_regs */
    __u32 pad;
};

/* x86-64 registers for the DWARF unwinder, in DWARF register order
 * (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip; System V psABI x86-64,
 * figure 3.36). */
#define HB_NREGS 17
struct hb_regs {
    __u64 r[HB_NREGS];
};

/* Largest record: header + regs + stack copy. */
#define HB_REC_MAX (sizeof(struct hb_rec) + sizeof(struct hb_regs) + HB_STACK_COPY)

/* Stack modes (the program's rodata). AUTO is the loader's only: it
 * becomes FP or DWARF before the program loads (fpcheck.h). */
enum hb_stacks { HB_STACKS_NONE = 0, HB_STACKS_FP, HB_STACKS_DWARF, HB_STACKS_AUTO };

/* The program's per-CPU counters (map "drops"). */
enum hb_counter {
    HB_CNT_RING = 0,     /* records the ring had no room for: lost */
    HB_CNT_NO_ENTRY,     /* allocator returns without their entry (called before the attach) */
    HB_CNT_THREAD_FULL,  /* allocator entries with no room for the thread's state: lost */
    HB_CNT_SYSCALL_FULL, /* mapping syscalls with no room for their state: lost */
    HB_CNT_HINT_FULL,    /* hint entries with no room: the stack starts inside strdup/new */
    HB_CNT_COUNT
};

#endif
