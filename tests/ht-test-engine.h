/* Helpers for tests that drive the engine by hand: events, reallocs, windowed queries. */
#ifndef HT_TEST_ENGINE_H
#define HT_TEST_ENGINE_H

#include "engine.h"
#include "query.h"

static inline void hte_event(struct engine *e, int kind, uint64_t t, uint64_t heap, uint64_t addr,
                             uint64_t size, uint32_t stack)
{
    struct ht_event ev = {
        .kind = (uint8_t)kind, .t = t, .heap = heap, .addr = addr, .size = size, .stack = stack};
    engine_apply(e, &ev);
}

/* A realloc of old to addr (in place when they are equal) on heap 1. */
static inline void hte_realloc(struct engine *e, uint64_t t, uint64_t old, uint64_t addr,
                               uint64_t size, uint32_t stack)
{
    struct ht_event ev = {.kind = HT_EV_REALLOC,
                          .t = t,
                          .heap = 1,
                          .addr = addr,
                          .old_addr = old,
                          .size = size,
                          .stack = stack};
    engine_apply(e, &ev);
}

/* Two stacks sharing their outer frame: 0x111 <- 0x999 and 0x222 <- 0x999. */
static inline void hte_two_stacks(struct engine *e, uint32_t *s1, uint32_t *s2)
{
    uint64_t f1[] = {0x111, 0x999}, f2[] = {0x222, 0x999};
    *s1 = stack_intern_get(&e->si, f1, 2);
    *s2 = stack_intern_get(&e->si, f2, 2);
}

/* A query over [t1, t2] with the given types and grouping, defaults otherwise. */
static inline void hte_query(struct query *q, int domain, uint64_t t1, uint64_t t2, unsigned types,
                             int by)
{
    query_init(q);
    q->domain = domain;
    q->t1 = t1;
    q->t2 = t2;
    q->types = types;
    q->by = by;
}

#endif
