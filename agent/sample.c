/*
 * The agent's sampler (run --sample, --max-overhead): which allocations are
 * recorded, and which frees.
 *
 * Allocations: a Poisson process over the bytes allocated, of mean R bytes
 * between samples. Each thread counts down a distance drawn from the
 * exponential distribution of mean R; a block of s bytes is taken when the
 * countdown runs out inside it, which happens with probability
 * p(s) = 1 - exp(-s/R) whatever came before (the exponential distribution is
 * memoryless), so each sample can be weighted 1/p(s) by the daemon and every
 * estimate is unbiased. The same process as tcmalloc's sampler
 * (tcmalloc/sampler.h) and Go's heap profile (runtime/mprof.go,
 * scaleHeapSample). An unsampled block costs a subtraction and a compare.
 *
 * Frees: only those of sampled blocks are recorded, matched exactly by a
 * lock-free open-addressing set of the sampled live addresses, in private
 * memory reserved at start (MAP_NORESERVE: pages come as they are touched).
 * A counting filter in front of it (a counter per address hash bucket) makes
 * the common free, of an unsampled block, one load. A set too full to take
 * an address makes the sample not taken, counted (sample_set_full).
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SET_BITS 22u             /* 4 Mi slots, 32 MiB reserved */
#define SET_PROBES 64u           /* slots an address may be placed past its home */
#define FILTER_BITS 20u          /* 1 Mi counters, 4 MiB reserved */
#define SLOT_GONE ((uintptr_t)1) /* a removed address: lookups go on past it */

AGENT_HIDDEN int agent_sampling;
AGENT_HIDDEN uint64_t agent_rate;
AGENT_HIDDEN __thread int64_t agent_sample_left AGENT_TLS;

static __thread uint64_t rng AGENT_TLS;       /* xorshift64* state, 0: not seeded */
static __thread uint64_t left_rate AGENT_TLS; /* the mean the countdown was drawn with */
static uint64_t seed_base, threads_seeded;
static uintptr_t *set;
static uint32_t *filter;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
 * generators, scrambled", 2016). */
static uint64_t rng_next(void)
{
    uint64_t x = rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void rng_seed(void)
{
    uint64_t s = seed_base;
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
    }
    /* With a seed, the threads in the order they first allocate (not their
     * tids, which differ each run). */
    uint64_t salt = seed_base ? __atomic_add_fetch(&threads_seeded, 1, __ATOMIC_RELAXED)
                              : (uint64_t)syscall(SYS_gettid);
    rng = mix(s ^ mix(salt)) | 1;
}

/* A distance of mean R bytes: -R ln(U), U uniform in (0, 1], rounded up, so
 * that P(D > k) = exp(-k/R) for every whole k: the countdown is memoryless
 * at every byte count and a block of n bytes is taken with probability
 * exactly 1 - exp(-n/R), the first after a sample included. At least 1, so
 * a zero-byte block is never taken. */
static int64_t draw(uint64_t r)
{
    double u = (double)((rng_next() >> 11) + 1) * 0x1p-53;
    double d = ceil(-log(u) * (double)r);
    if (d < 1)
        return 1;
    return d > 0x1p62 ? (int64_t)1 << 62 : (int64_t)d;
}

AGENT_HIDDEN int agent_sample_init(uint64_t rate, uint64_t seed, int governed)
{
    if (!rate && !governed)
        return 0;
    size_t sb = ((size_t)1 << SET_BITS) * sizeof(*set), fb = ((size_t)1 << FILTER_BITS) * 4;
    void *a = agent_real.mmap(NULL, sb, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *b = agent_real.mmap(NULL, fb, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED)
        return -1;
    set = a;
    filter = b;
    seed_base = seed;
    agent_rate = rate > HTA_RATE_MAX ? HTA_RATE_MAX : rate;
    agent_sampling = 1;
    return 0;
}

AGENT_HIDDEN void agent_sample_rate(uint64_t rate)
{
    __atomic_store_n(&agent_rate, rate > HTA_RATE_MAX ? HTA_RATE_MAX : rate, __ATOMIC_RELAXED);
}

/* The countdown ran out (or the thread's first call): 0 when the block is
 * not taken; else 1 with *r the mean it was taken under. The countdown's
 * own mean is recorded, not the current one: a block's probability is the
 * one of the distance that decided it. */
AGENT_HIDDEN int agent_sample_slow(size_t n, uint64_t *r)
{
    uint64_t now = __atomic_load_n(&agent_rate, __ATOMIC_RELAXED);
    if (!rng)
        rng_seed();
    if (!left_rate) {
        if (!now) {
            *r = 0; /* exact: every block */
            return 1;
        }
        left_rate = now;
        agent_sample_left = draw(now) - (int64_t)n;
        if (agent_sample_left > 0)
            return 0;
    }
    *r = left_rate;
    left_rate = now;
    agent_sample_left = now ? draw(now) : 0;
    return 1;
}

static uint32_t *filter_of(uintptr_t p)
{
    return &filter[mix(p) >> (64 - FILTER_BITS)];
}

/* Remember a sampled block: 0, or -1 when the set has no room near its home. */
AGENT_HIDDEN int agent_sample_keep(uintptr_t p)
{
    uint64_t h = mix(p ^ 0x9e3779b97f4a7c15ull);
    __atomic_fetch_add(filter_of(p), 1, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < SET_PROBES; i++) {
        uintptr_t *slot = &set[(h + i) & ((1u << SET_BITS) - 1)];
        uintptr_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
        while (cur == 0 || cur == SLOT_GONE) {
            if (__atomic_compare_exchange_n(slot, &cur, p, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                return 0;
        }
    }
    __atomic_fetch_sub(filter_of(p), 1, __ATOMIC_RELAXED);
    agent_count(HTA_CNT_SAMPLE_SET_FULL);
    return -1;
}

/* Forget a block: 1 when it was sampled (its free is to be recorded). Called
 * before the real free, so no other thread can be given the address and
 * sample it meanwhile. */
AGENT_HIDDEN int agent_sample_forget(uintptr_t p)
{
    uint32_t *f = filter_of(p);
    if (__atomic_load_n(f, __ATOMIC_RELAXED) == 0)
        return 0;
    uint64_t h = mix(p ^ 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i < SET_PROBES; i++) {
        uintptr_t *slot = &set[(h + i) & ((1u << SET_BITS) - 1)];
        uintptr_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (cur == 0)
            return 0;
        if (cur == p && __atomic_compare_exchange_n(slot, &cur, SLOT_GONE, 0, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED)) {
            __atomic_fetch_sub(f, 1, __ATOMIC_RELAXED);
            return 1;
        }
    }
    return 0;
}

/* Is the block sampled (without forgetting it: a realloc may fail)? */
AGENT_HIDDEN int agent_sample_has(uintptr_t p)
{
    if (__atomic_load_n(filter_of(p), __ATOMIC_RELAXED) == 0)
        return 0;
    uint64_t h = mix(p ^ 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i < SET_PROBES; i++) {
        uintptr_t cur = __atomic_load_n(&set[(h + i) & ((1u << SET_BITS) - 1)], __ATOMIC_ACQUIRE);
        if (cur == 0)
            return 0;
        if (cur == p)
            return 1;
    }
    return 0;
}

/*
 * The governor (run --max-overhead PCT): the agent's own cost, time spent
 * recording (unwinding, interning, the ring), over the process's CPU time.
 * One recording in TIME_EVERY per thread is timed (two vDSO clock reads)
 * and counted TIME_EVERY times: an unbiased estimate at a sixteenth of the
 * clocks' cost. The unsampled fast path (a subtraction) is not timed.
 */
#define TIME_EVERY 16u
#define GOV_START (16u << 10)      /* the first mean when exact costs too much */
#define GOV_MIN_CPU_NS 20000000ull /* CPU time a judgement needs (an idle program keeps its mean)  \
                                    */

static unsigned gov_pct;
static uint64_t spent_ns, gov_last_cpu, gov_last_spent;
static __thread uint32_t time_tick AGENT_TLS;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void record_timed(int kind, uintptr_t p, uint64_t n, uint64_t r)
{
    if (!gov_pct || (++time_tick & (TIME_EVERY - 1))) {
        agent_record(kind, p, 0, n, r);
        return;
    }
    uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
    agent_record(kind, p, 0, n, r);
    uint64_t t1 = clock_ns(CLOCK_MONOTONIC);
    __atomic_fetch_add(&spent_ns, (t1 - t0) * TIME_EVERY, __ATOMIC_RELAXED);
}

/* An allocation the program made: recorded if sampled (all, exact). */
AGENT_HIDDEN void agent_alloc_sampled(uintptr_t p, uint64_t n)
{
    uint64_t r = 0;
    if (!agent_sample_slow(n, &r) || agent_sample_keep(p) != 0)
        return;
    record_timed(HTA_ALLOC, p, n, r);
}

AGENT_HIDDEN void agent_free_record(uintptr_t p)
{
    record_timed(HTA_FREE, p, 0, 0);
}

AGENT_HIDDEN void agent_gov_init(unsigned pct)
{
    gov_pct = pct > 100 ? 100 : pct;
    gov_last_cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

AGENT_HIDDEN int agent_gov_on(void)
{
    return gov_pct != 0;
}

/* The next mean for a measured overhead. Above the budget it is multiplied
 * by the power of two at or above overhead/budget (the cost goes roughly
 * as 1/R once R is well above the block sizes, so one tick gets most of
 * the way instead of one doubling a tick; from exact: GOV_START times half
 * that). Under a quarter of the budget it is halved (which at most doubles
 * the cost: still under half the budget), down to exact. */
static uint64_t gov_next(uint64_t r, uint64_t ppm)
{
    uint64_t budget = (uint64_t)gov_pct * 10000;
    if (ppm > budget) {
        uint64_t f = 2;
        while (f < 1024 && f * budget < ppm)
            f *= 2;
        uint64_t next = r ? r * f : (uint64_t)GOV_START * (f / 2);
        return next > HTA_RATE_MAX ? HTA_RATE_MAX : next;
    }
    if (ppm < budget / 4 && r)
        return r / 2 < GOV_START ? 0 : r / 2;
    return r;
}

/* Every tick of the watch thread: measure, report, and change the mean
 * (a HTA_RATE record says so; each sample carries its own mean anyway). */
AGENT_HIDDEN void agent_gov_tick(struct hta_header *h)
{
    uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    uint64_t spent = __atomic_load_n(&spent_ns, __ATOMIC_RELAXED);
    if (cpu - gov_last_cpu < GOV_MIN_CPU_NS)
        return;
    uint64_t ppm = (spent - gov_last_spent) * 1000000 / (cpu - gov_last_cpu);
    gov_last_cpu = cpu;
    gov_last_spent = spent;
    uint64_t r = __atomic_load_n(&agent_rate, __ATOMIC_RELAXED), next = gov_next(r, ppm);
    __atomic_store_n(&h->gov_ppm, ppm, __ATOMIC_RELAXED);
    if (next != r) {
        agent_sample_rate(next);
        agent_record(HTA_RATE, 0, 0, ppm, next);
    }
    __atomic_store_n(&h->gov_rate, next, __ATOMIC_RELAXED);
}
