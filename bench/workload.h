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
    uint64_t dt; /* ns between events (the traced program's clock); 1 after init */
    uint64_t nlive, nstacks, preloaded;
    uint32_t *stacks;
    uint64_t pending[WORKLOAD_PENDING], head, tail;
    uint64_t *reuse, nreuse;
    int fresh;
};

/* A busy service's allocation rate as the benchmarks' default event clock:
 * the daemon benchmark's 1M + 4M events then span 10 s, so a "-5s:" or
 * "-1s:" window lies inside the churn instead of covering the session. */
#define WORKLOAD_STREAM_RATE 500000
/* The churn starts this far into the stream at the earliest, the last
 * allocation of the long-lived set just before it (a quiet spell between
 * them): the longest window the benchmarks ask, "-5s:", is then a window
 * (not the whole session) from the churn's first event on. */
#define WORKLOAD_CHURN_START_NS 6000000000ULL

/* Interns nstacks stacks of 8 address frames (distinct allocation sites) in
 * si. fresh: every block at a new address instead of reusing freed ones.
 * 0, or -1 when out of memory. */
int workload_init(struct workload *w, struct stack_intern *si, uint64_t nlive, uint64_t nstacks,
                  int fresh);
/* Space events 1e9 / rate ns apart (at least 1 ns); call before any events. */
void workload_set_rate(struct workload *w, uint64_t rate);
void workload_close(struct workload *w);
/* The long-lived set: up to cap allocations, never freed; 0 once all nlive are out. */
size_t workload_preload(struct workload *w, struct ht_event *evs, size_t cap);
/* Churn: at most min(cap - 2, left) events (a free may bring its replacing alloc). */
size_t workload_churn(struct workload *w, struct ht_event *evs, size_t cap, uint64_t left);

#endif
