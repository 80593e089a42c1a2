/*
 * The daemon's reader of an agent's shared memory (agent/agent-ring.h):
 * records in ring order into engine events, stack table ids into the
 * engine's interner. The memory is the target's: written by whoever runs
 * as the target's user, at any time. So each record and stack entry is
 * copied out before it is looked at, every field is checked, every id
 * bounded; what does not hold is counted as malformed and skipped. Nothing
 * in it can make the reader loop, wait or read outside the mapping.
 *
 * Threads: the loop's (the agent source's drain).
 */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef AGENT_DECODE_H
#define AGENT_DECODE_H

#include "agent-ring.h"
#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>

struct stack_intern;

struct agent_dec_stats {
    uint64_t records;      /* records taken */
    uint64_t malformed;    /* records refused: kind, address, size out of bounds */
    uint64_t bad_stacks;   /* stack ids out of range, or entries not complete or bad */
    uint64_t stack_drops;  /* stacks the engine's interner refused (its caps) */
    uint64_t stuck;        /* records given up on: reserved, never completed */
    uint64_t clamped_time; /* records whose time was out of order or in the future */
    uint64_t sampled;      /* allocs taken under a sampling mean (weighted) */
    uint64_t rate_changes; /* HTA_RATE records: the governor changed the mean */
};

struct agent_dec {
    void *base; /* HTA_TOTAL_BYTES mapped */
    uint64_t tail;
    uint64_t t0;     /* CLOCK_MONOTONIC ns the session counts from */
    uint64_t last_t; /* session ns of the last event handed out */
    uint32_t depth;  /* frames kept (the session's stack depth) */
    /* HTA_CLOCK_TSC: records count TSC ticks, converted on the line through
     * the pair (TSC, CLOCK_MONOTONIC) taken at init (a) and a later one (b),
     * moved at a take when the span has doubled. */
    int tsc;
    uint64_t tsc_a, ns_a, tsc_b, ns_b;
    uint64_t tsc_mult; /* ns per tick, 32.32 fixed point (0: not known yet) */
    uint32_t *ids;   /* table id + 1 -> engine stack id (0: not seen, UINT32_MAX: bad) */
    struct stack_intern *si;
    struct agent_dec_stats st;
    uint64_t rng;          /* the multiplicities' rounding (splitmix64 state) */
    uint64_t rate;         /* the sampling mean as of the last HTA_RATE (or as asked), 0: exact */
    uint64_t overhead_ppm; /* the agent's last measured overhead (HTA_RATE), untrusted */
    uint64_t rate_t;       /* session ns of the last HTA_RATE */
};

/*
 * The blocks a sample of size bytes taken under mean rate stands for: w =
 * 1/p(size) with p(s) = 1 - exp(-s/rate) (agent/sample.c), rounded to an
 * integer at random so its expectation is w (floor(w) + 1 with probability
 * frac(w)): every count and byte figure is an unbiased estimate and stays an
 * integer. u: 64 random bits. rate 0 (exact): 0, meaning 1. rate and size
 * are checked by the caller (1 <= rate <= HTA_RATE_MAX, size > 0).
 */
uint32_t agent_dec_mult(uint64_t size, uint64_t rate, uint64_t u);
/* The expected multiplicity, w = 1/p(size). */
double agent_dec_weight(uint64_t size, uint64_t rate);
/* Seed the rounding (tests: run --sample-seed); 0: from the clock. */
void agent_dec_seed(struct agent_dec *d, uint64_t seed);

/* base: the mapping (HTA_TOTAL_BYTES); ids: HTA_STACKS + 1 entries, zeroed.
 * The header's clock is read here, once. */
void agent_dec_init(struct agent_dec *d, void *base, uint32_t *ids, struct stack_intern *si,
                    uint64_t t0, uint32_t depth);
/* Does the header say this is a ring of ours (magic, version, sizes)? */
int agent_dec_header_ok(const void *base);
/* Up to cap events from complete records in order; now: CLOCK_MONOTONIC ns,
 * just read (no event is stamped later; with a TSC clock, the counter is
 * read next to it). New stacks are interned. Returns the count. */
size_t agent_dec_take(struct agent_dec *d, struct ht_event *out, size_t cap, uint64_t now);
/* Is the next record in order complete? */
int agent_dec_ready(const struct agent_dec *d);
/* Records reserved but not complete (the producer's head, bounded by the
 * ring: the head is the target's word). */
uint64_t agent_dec_pending(const struct agent_dec *d);
/* Give up on the next record (reserved by a thread that never completed
 * it, or the process is gone): counted as stuck. */
void agent_dec_skip(struct agent_dec *d);
/* Ask the agent to write no more. */
void agent_dec_stop(struct agent_dec *d);
/* The governor's last measurement, ppm (untrusted: for reporting only). */
uint64_t agent_dec_overhead_ppm(const struct agent_dec *d);
/* The agent's own counter (untrusted: for reporting only). */
uint64_t agent_dec_counter(const struct agent_dec *d, enum hta_counter c);

#endif
