/* The benchmarks' synthetic workload: a long-lived set, then churn shaped like a real service. */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>

struct stack_intern;

#define WORKLOAD_PENDING 4096 /* short-lived allocations in flight at any time */

struct workload {
    uint64_t rng;
    uint64_t t, next_addr;
    uint64_t nlive, nstacks, preloaded;
    uint32_t *stacks;
    uint64_t pending[WORKLOAD_PENDING], head, tail;
    uint64_t *reuse, nreuse;
    int fresh;
};

/* Interns nstacks stacks of 8 address frames (distinct allocation sites) in
 * si. fresh: every block at a new address instead of reusing freed ones.
 * 0, or -1 when out of memory. */
int workload_init(struct workload *w, struct stack_intern *si, uint64_t nlive, uint64_t nstacks,
                  int fresh);
void workload_close(struct workload *w);
/* The long-lived set: up to cap allocations, never freed; 0 once all nlive are out. */
size_t workload_preload(struct workload *w, struct ht_event *evs, size_t cap);
/* Churn: at most min(cap - 2, left) events (a free may bring its replacing alloc). */
size_t workload_churn(struct workload *w, struct ht_event *evs, size_t cap, uint64_t left);

#endif
