/*
 * Test-only entry point of the eBPF source (bpf-source.c): the source fed
 * by a generator of ring records instead of an attached tracer. Everything
 * after the kernel ring is the production path: each record goes through
 * bpf_consume_record (region table, stacks) on a producer thread of the
 * source, into the event ring, drained by the session through the source's
 * drain. Used by tests/unit/bpf/test-bpf-conformance.c; not registered in
 * sources.def, so no request can reach it.
 *
 * Threads: open and the ops on the loop; next() on the producer thread.
 */
#ifndef HT_BPF_SOURCE_H
#define HT_BPF_SOURCE_H

#include "source.h"

#include <stddef.h>
#include <stdint.h>

/* One item of synthetic input. */
struct bpf_synth_item {
    const void *rec; /* a ring record (heaptrace-bpf.h) of size bytes, valid until the next call */
    size_t size;
    int drops; /* 1: not a record; the kernel's drop total is now drops_total */
    uint64_t drops_total;
    uint64_t now; /* monotonic ns of the drop reading */
};

struct bpf_synth {
    void *arg;
    /* The next item: 1, or 0 at the end of input. */
    int (*next)(void *arg, struct bpf_synth_item *it);
    uint64_t pid;         /* reported as the process (HT_EV_PROCESS), as at attach */
    uint64_t t0;          /* monotonic ns the session's time counts from */
    uint32_t ring_events; /* event ring records in flight (a power of two); 0: the source's */
};

/* Open the eBPF source on synthetic input (p: stack_depth, limits, budget;
 * the mode is not looked at). start reports the process and starts the
 * producer thread; it ends (sink->ended) after the last item was drained. */
int bpf_source_open_synthetic(struct source **out, uv_loop_t *loop, const struct source_params *p,
                              const struct source_sink *sink, const struct bpf_synth *gen,
                              char *err, size_t errsz);

#endif
