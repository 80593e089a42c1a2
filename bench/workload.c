/* The benchmarks' synthetic workload (workload.h). */
#include "workload.h"

#include "bench-util.h"
#include "stack-intern.h"

#include <stdlib.h>
#include <string.h>

static uint64_t xrand(struct workload *w)
{
    return xrand_next(&w->rng);
}

int workload_init(struct workload *w, struct stack_intern *si, uint64_t nlive, uint64_t nstacks,
                  int fresh)
{
    memset(w, 0, sizeof(*w));
    w->rng = 88172645463325252ULL;
    w->t = 1;
    w->dt = 1;
    w->next_addr = 0x100000000ULL;
    w->nlive = nlive;
    w->nstacks = nstacks;
    w->fresh = fresh;
    w->stacks = malloc(nstacks * sizeof(uint32_t));
    w->reuse = malloc(WORKLOAD_PENDING * 2 * sizeof(uint64_t));
    if (!w->stacks || !w->reuse) {
        workload_close(w);
        return -1;
    }
    for (uint64_t s = 0; s < nstacks; s++) {
        uint64_t fr[8];
        for (int k = 0; k < 8; k++)
            fr[k] = 0x400000 + (xrand(w) % 5000) * 16;
        fr[0] = 0x7f0000000000ULL + s * 32; /* distinct allocation sites */
        w->stacks[s] = stack_intern_get(si, fr, 8);
    }
    return 0;
}

void workload_set_rate(struct workload *w, uint64_t rate)
{
    w->dt = rate == 0 || rate >= 1000000000ULL ? 1 : 1000000000ULL / rate;
}

void workload_close(struct workload *w)
{
    free(w->stacks);
    free(w->reuse);
    w->stacks = NULL;
    w->reuse = NULL;
}

size_t workload_preload(struct workload *w, struct ht_event *evs, size_t cap)
{
    size_t n = 0;
    for (; n < cap && w->preloaded < w->nlive; n++, w->preloaded++) {
        struct ht_event *ev = &evs[n];
        memset(ev, 0, sizeof(*ev));
        ev->kind = HT_EV_ALLOC;
        /* The last one after the quiet spell: a session that has applied
         * the set is already at the churn's start (workload.h). */
        if (w->preloaded + 1 == w->nlive && w->t + w->dt < WORKLOAD_CHURN_START_NS)
            w->t = WORKLOAD_CHURN_START_NS - w->dt;
        ev->t = w->t;
        w->t += w->dt;
        ev->addr = w->next_addr;
        w->next_addr += 48;
        ev->size = 16 + xrand(w) % 512;
        ev->stack = w->stacks[xrand(w) % w->nstacks];
    }
    return n;
}

/* Short-lived blocks allocated and freed FIFO (most real allocations die
 * young), a realloc now and then, and 1 in 16 frees hitting a random
 * long-lived block that is then replaced. Allocators hand out recently freed
 * addresses first (glibc tcache, Windows LFH): new blocks reuse a LIFO stack
 * of freed short-lived addresses, unless fresh. */
size_t workload_churn(struct workload *w, struct ht_event *evs, size_t cap, uint64_t left)
{
    size_t n = 0;
    if (w->t < WORKLOAD_CHURN_START_NS)
        w->t = WORKLOAD_CHURN_START_NS;
    while (n + 2 < cap && n < left) {
        struct ht_event *ev = &evs[n];
        memset(ev, 0, sizeof(*ev));
        ev->t = w->t;
        w->t += w->dt;
        uint64_t r = xrand(w);
        if (w->head - w->tail < WORKLOAD_PENDING && (r & 1)) {
            ev->kind = HT_EV_ALLOC;
            if (!w->fresh && w->nreuse > 0) {
                ev->addr = w->reuse[--w->nreuse];
            } else {
                ev->addr = w->next_addr;
                w->next_addr += 48;
            }
            ev->size = 16 + (r >> 8) % 256;
            ev->stack = w->stacks[(r >> 20) % w->nstacks];
            w->pending[w->head++ % WORKLOAD_PENDING] = ev->addr;
        } else if (w->head > w->tail && (r & 6)) {
            ev->kind = HT_EV_FREE;
            ev->addr = w->pending[w->tail++ % WORKLOAD_PENDING];
            if (w->nreuse < WORKLOAD_PENDING * 2)
                w->reuse[w->nreuse++] = ev->addr;
        } else if (w->head > w->tail && (r & 8)) {
            ev->kind = HT_EV_REALLOC;
            ev->addr = ev->old_addr =
                w->pending[(w->tail + (r >> 12) % (w->head - w->tail)) % WORKLOAD_PENDING];
            ev->size = 16 + (r >> 24) % 300;
        } else {
            uint64_t victim = 0x100000000ULL + (xrand(w) % (w->nlive ? w->nlive : 1)) * 48;
            ev->kind = HT_EV_FREE;
            ev->addr = victim;
            struct ht_event *re = &evs[++n];
            memset(re, 0, sizeof(*re));
            re->kind = HT_EV_ALLOC;
            re->t = w->t;
            w->t += w->dt;
            re->addr = victim;
            re->size = 64;
            re->stack = w->stacks[(r >> 20) % w->nstacks];
        }
        n++;
    }
    return n;
}
