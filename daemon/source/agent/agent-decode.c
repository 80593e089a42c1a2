/* The reader of an agent's shared memory (agent-decode.h): hostile input. */
#include "agent-decode.h"

#include "stack-intern.h"

#include <math.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* Addresses and sizes a user process can have (x86-64 and aarch64 with
 * 5-level paging top out at 2^57). */
#define ADDR_MAX (1ull << 57)

#if defined(__x86_64__)
static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A (TSC, CLOCK_MONOTONIC) pair: the clock read between two TSC reads, the TSC taken
 * at their middle, the tightest of a few tries (a preemption between the two reads of
 * a pair bent the line: a record of a loaded machine came out of order, clamped). */
static void tsc_pair(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t t1 = __rdtsc(), n = mono_now(), t2 = __rdtsc();
        if (t2 >= t1 && t2 - t1 < best) {
            best = t2 - t1;
            *tsc = t1 + (t2 - t1) / 2;
            *ns = n;
        }
    }
    if (best == UINT64_MAX) { /* the TSC never went forward: the plain reads */
        *ns = mono_now();
        *tsc = __rdtsc();
    }
}
#endif

static struct hta_header *hdr(const struct agent_dec *d)
{
    return d->base;
}

static struct hta_rec *rec_at(const struct agent_dec *d, uint64_t pos)
{
    return (struct hta_rec *)((char *)d->base + HTA_RECS_OFFSET) + (pos & (HTA_RECORDS - 1));
}

void agent_dec_init(struct agent_dec *d, void *base, uint32_t *ids, struct stack_intern *si,
                    uint64_t t0, uint32_t depth)
{
    memset(d, 0, sizeof(*d));
    d->base = base;
    d->ids = ids;
    d->si = si;
    d->t0 = t0;
    d->depth = depth && depth < HTA_DEPTH ? depth : HTA_DEPTH;
    struct hta_header h;
    memcpy(&h, base, sizeof(h));
#if defined(__x86_64__)
    /* The agent is in this machine: its TSC is ours (agent-ring.h). */
    if (h.clock == HTA_CLOCK_TSC) {
        d->tsc = 1;
        tsc_pair(&d->tsc_a, &d->ns_a);
    }
#endif
}

int agent_dec_header_ok(const void *base)
{
    struct hta_header h;
    memcpy(&h, base, sizeof(h));
    return h.magic == HTA_MAGIC && h.version == HTA_VERSION && h.records == HTA_RECORDS &&
           h.stacks == HTA_STACKS && h.depth == HTA_DEPTH;
}

int agent_dec_ready(const struct agent_dec *d)
{
    return __atomic_load_n(&rec_at(d, d->tail)->seq, __ATOMIC_ACQUIRE) == d->tail + 1;
}

uint64_t agent_dec_pending(const struct agent_dec *d)
{
    uint64_t head = __atomic_load_n(&hdr(d)->head, __ATOMIC_RELAXED);
    if (head <= d->tail)
        return 0;
    return head - d->tail > HTA_RECORDS ? HTA_RECORDS : head - d->tail;
}

/* The tail is published to the agent once per batch (tail_publish): a
 * store per record would bounce its cache line between the daemon and
 * every producer. */
static void tail_advance(struct agent_dec *d)
{
    d->tail++;
}

static void tail_publish(struct agent_dec *d)
{
    __atomic_store_n(&hdr(d)->tail, d->tail, __ATOMIC_RELEASE);
}

void agent_dec_skip(struct agent_dec *d)
{
    d->st.stuck++;
    tail_advance(d);
    tail_publish(d);
}

void agent_dec_stop(struct agent_dec *d)
{
    __atomic_store_n(&hdr(d)->stop, 1, __ATOMIC_RELAXED);
}

uint64_t agent_dec_overhead_ppm(const struct agent_dec *d)
{
    uint64_t v = __atomic_load_n(&hdr(d)->gov_ppm, __ATOMIC_RELAXED);
    return v > 100000000 ? 100000000 : v; /* the target's word: at most 100x */
}

uint64_t agent_dec_counter(const struct agent_dec *d, enum hta_counter c)
{
    return __atomic_load_n(&hdr(d)->counters[c], __ATOMIC_RELAXED);
}

/* The engine's id for a table id, interned at its first use: copied out,
 * then checked (complete, a depth in bounds). 0 with *bad set when the
 * entry is not one. */
static uint32_t stack_of(struct agent_dec *d, uint32_t id, int *flags)
{
    if (id == 0)
        return 0;
    if (id > HTA_STACKS) {
        d->st.bad_stacks++;
        return 0;
    }
    uint32_t known = d->ids[id];
    if (known == UINT32_MAX) {
        d->st.bad_stacks++;
        return 0;
    }
    if (known)
        return known;
    const struct hta_stack *e =
        (const struct hta_stack *)((const char *)d->base + HTA_STACKS_OFFSET) + (id - 1);
    uint64_t frames[HTA_DEPTH];
    uint32_t state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    uint32_t depth = __atomic_load_n(&e->depth, __ATOMIC_RELAXED);
    if (state != 1 || depth == 0 || depth > HTA_DEPTH) {
        d->ids[id] = UINT32_MAX;
        d->st.bad_stacks++;
        return 0;
    }
    memcpy(frames, e->frames, depth * sizeof(frames[0]));
    unsigned keep = depth > d->depth ? d->depth : depth;
    uint32_t sid = stack_intern_get(d->si, frames, keep);
    if (!sid) {
        d->st.stack_drops++; /* not cached: a later use may find room */
        *flags |= HT_EVF_STACK_DROPPED;
        return 0;
    }
    d->ids[id] = sid;
    return sid;
}

/* A TSC stamp in CLOCK_MONOTONIC ns: on the line through the pairs a and
 * b (tsc_line), the slope in 32.32 fixed point made when the line moves (a
 * division per record was 7% of the daemon's time under redis). The TSC
 * is constant (agent-ring.h): the error is the pairs' own, a few ns, and
 * shrinks as the span grows. Any stamp converts (it is the target's word):
 * time_of clamps what is out of order. */
static uint64_t tsc_ns(const struct agent_dec *d, uint64_t t)
{
    if (!d->tsc_mult)
        return d->ns_b;
    if (t < d->tsc_a)
        return d->ns_a;
    unsigned __int128 p = (unsigned __int128)(t - d->tsc_a) * d->tsc_mult;
    if ((uint64_t)(p >> 96))
        return UINT64_MAX;
    uint64_t add = (uint64_t)(p >> 32);
    return add > UINT64_MAX - d->ns_a ? UINT64_MAX : d->ns_a + add;
}

#if defined(__x86_64__)
/* At a take: a pair (TSC, CLOCK_MONOTONIC) read here, together (the
 * caller's now is older than records stamped since: paired with a fresh
 * TSC it bent the line at each take, and records of consecutive takes
 * came out of order). The line through a and b moves only when the span
 * has doubled, so consecutive takes convert on one line. Returns the
 * fresher now (no record is stamped after it). */
static uint64_t tsc_line(struct agent_dec *d, uint64_t now)
{
    uint64_t ns, tsc;
    tsc_pair(&tsc, &ns);
    if (tsc > d->tsc_a && ns > d->ns_a &&
        (!d->tsc_mult || tsc - d->tsc_a >= 2 * (d->tsc_b - d->tsc_a))) {
        d->tsc_b = tsc;
        d->ns_b = ns;
        unsigned __int128 m =
            ((unsigned __int128)(d->ns_b - d->ns_a) << 32) / (d->tsc_b - d->tsc_a);
        /* Bounded so any 64-bit stamp's product fits 128 bits: below 256
         * ns a tick (any TSC runs faster than 4 MHz). */
        d->tsc_mult = m < (1ull << 40) ? (uint64_t)m : 0;
    }
    return ns > now ? ns : now;
}
#endif

/* Session time of a record stamped t (CLOCK_MONOTONIC ns): in order,
 * never after now. */
static uint64_t time_of(struct agent_dec *d, uint64_t t, uint64_t now)
{
    uint64_t rel = t > d->t0 ? t - d->t0 : 0;
    uint64_t cap = now > d->t0 ? now - d->t0 : 0;
    if (rel < d->last_t || rel > cap) {
        d->st.clamped_time++;
        rel = rel < d->last_t ? d->last_t : cap;
    }
    d->last_t = rel;
    return rel;
}

double agent_dec_weight(uint64_t size, uint64_t rate)
{
    /* -expm1(-x) = 1 - exp(-x) without the cancellation of a small x. */
    return 1.0 / -expm1(-(double)size / (double)rate);
}

uint32_t agent_dec_mult(uint64_t size, uint64_t rate, uint64_t u)
{
    if (!rate)
        return 0;
    double w = agent_dec_weight(size, rate);
    double base = floor(w);
    double frac = w - base;
    /* u's top 53 bits as a uniform in [0, 1). */
    double x = (double)(u >> 11) * 0x1p-53;
    double m = base + (x < frac ? 1.0 : 0.0);
    return m >= 4294967295.0 ? UINT32_MAX : (uint32_t)m;
}

/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014). */
static uint64_t rng_next(struct agent_dec *d)
{
    uint64_t z = (d->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void agent_dec_seed(struct agent_dec *d, uint64_t seed)
{
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)d;
    }
    d->rng = seed;
}

/* The sampling mean: on allocs only (a sampled one has a size to weigh),
 * on HTA_RATE as the new mean; 0 on everything else. */
static int rate_ok(const struct hta_rec *r)
{
    if (r->kind == HTA_RATE)
        return r->rate <= HTA_RATE_MAX;
    if (r->kind != HTA_ALLOC)
        return r->rate == 0;
    return r->rate == 0 || (r->rate <= HTA_RATE_MAX && r->size > 0);
}

static int rec_ok(const struct hta_rec *r)
{
    if (r->kind < HTA_ALLOC || r->kind > HTA_KIND_MAX)
        return 0;
    if (!rate_ok(r))
        return 0;
    if (r->kind == HTA_RATE)
        return 1;
    if (r->addr == 0 || r->addr >= ADDR_MAX || r->size >= ADDR_MAX)
        return 0;
    if (r->kind == HTA_REALLOC && (r->old_addr == 0 || r->old_addr >= ADDR_MAX))
        return 0;
    if ((r->kind == HTA_COMMIT || r->kind == HTA_RELEASE) && r->size == 0)
        return 0;
    return 1;
}

static const uint8_t kind_map[HTA_KIND_MAX + 1] = {
    [HTA_ALLOC] = HT_EV_ALLOC,   [HTA_FREE] = HT_EV_FREE,       [HTA_REALLOC] = HT_EV_REALLOC,
    [HTA_COMMIT] = HT_EV_COMMIT, [HTA_RELEASE] = HT_EV_RELEASE, [HTA_RATE] = HT_EV_NONE,
};

/* One record into ev: 1, or 0 when it is malformed. */
static int convert(struct agent_dec *d, const struct hta_rec *r, struct ht_event *ev, uint64_t now)
{
    if (!rec_ok(r)) {
        d->st.malformed++;
        return 0;
    }
    if (r->kind == HTA_RATE) {
        /* Each sample carries its own mean: the change is for status. */
        d->st.rate_changes++;
        d->rate = r->rate;
        d->overhead_ppm = r->size;
        d->rate_t = time_of(d, r->t, now);
        return 0;
    }
    int flags = (r->flags & HTA_F_TRUNCATED) ? HT_EVF_TRUNCATED : 0;
    memset(ev, 0, sizeof(*ev));
    ev->t = time_of(d, r->t, now);
    ev->kind = kind_map[r->kind];
    ev->addr = r->addr;
    ev->size = r->kind == HTA_FREE ? 0 : r->size;
    ev->old_addr = r->kind == HTA_REALLOC ? r->old_addr : 0;
    ev->tid = r->tid;
    if (r->kind == HTA_ALLOC && r->rate) {
        ev->mult = agent_dec_mult(r->size, r->rate, rng_next(d));
        d->st.sampled++;
    }
    if (r->kind != HTA_FREE && r->kind != HTA_RELEASE)
        ev->stack = stack_of(d, r->stack, &flags);
    ev->flags = (uint8_t)flags;
    return 1;
}

size_t agent_dec_take(struct agent_dec *d, struct ht_event *out, size_t cap, uint64_t now)
{
    size_t n = 0;
#if defined(__x86_64__)
    if (d->tsc)
        now = tsc_line(d, now);
#endif
    while (n < cap && agent_dec_ready(d)) {
        struct hta_rec r;
        memcpy(&r, rec_at(d, d->tail), sizeof(r));
        /* Still the record we were told of (not rewritten meanwhile)? */
        if (r.seq != d->tail + 1) {
            d->st.malformed++;
            tail_advance(d);
            continue;
        }
        tail_advance(d);
        d->st.records++;
#if defined(__x86_64__)
        /* In ns from here (converted once: the daemon's time per record is
         * what keeps it up with the target). Stamped after now: published
         * since the take began (the target writes on); now read again
         * rather than the record clamped. */
        if (d->tsc) {
            uint64_t stamp = r.t;
            r.t = tsc_ns(d, stamp);
            if (r.t > now) {
                now = tsc_line(d, now);
                r.t = tsc_ns(d, stamp);
            }
        }
#endif
        n += (size_t)convert(d, &r, &out[n], now);
    }
    tail_publish(d);
    return n;
}
