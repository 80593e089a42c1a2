/*
 * Stack copies taken in this process the way the eBPF program takes them
 * (registers, then up to HB_STACK_COPY bytes from rsp), from code built
 * without frame pointers calling through libc (qsort, twalk), libxml2 (SAX
 * callbacks), deep recursion past the copy, a signal handler and a thread:
 * the input of the unwinder's differential test and of its benchmark.
 */
#ifndef HT_UNWIND_SAMPLES_H
#define HT_UNWIND_SAMPLES_H

#include "heaptrace-bpf.h"

#include <stddef.h>
#include <stdint.h>

struct unwind_sample {
    struct hb_regs regs;
    uint32_t tid;
    size_t len;
    uint8_t stack[HB_STACK_COPY];
};

/* Up to max samples into s (about max; fewer if some source has fewer). The count. */
unsigned unwind_samples_take(struct unwind_sample *s, unsigned max);

#endif
