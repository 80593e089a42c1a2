/*
 * Does a module keep frame pointers? Read from its call frame information
 * (.eh_frame, which x86-64 objects carry for unwinding): in code built with
 * frame pointers the canonical frame address past a function's prologue is
 * rbp-based; without them it is rsp-based and rbp may hold anything (data a
 * frame-pointer walk would take for return addresses). Decides what the
 * default stack mode (auto) does for a process.
 */
#ifndef HT_BPF_FPCHECK_H
#define HT_BPF_FPCHECK_H

/* What the functions sampled from the ELF file fd say. */
struct fpcheck {
    unsigned functions; /* defined functions met while sampling (0: a module without code) */
    unsigned sampled;   /* functions whose CFA rule was read */
    unsigned rbp;       /* of them, with an rbp-based CFA in mid-function */
};

/* Sample the functions of the ELF object open on fd. 0, or HT_EBADARG (not
 * ELF, no symbols or no CFI: cannot tell). */
int fpcheck_fd(int fd, struct fpcheck *out);
/* 1 when the sample says the module keeps frame pointers, 0 when it does not
 * or too few functions were read to tell (check functions first: a module
 * without code has no frames to walk). */
int fpcheck_has_fp(const struct fpcheck *f);

#endif
