/*
 * Sampling (run --sample): the agent's sampler (agent/sample.c, built into
 * this test with the agent's recording replaced by a tally) takes a block of
 * s bytes with probability p(s) = 1 - exp(-s/R), and the daemon's weight
 * (agent_dec_mult) is an integer whose mean is 1/p(s): so the estimate of
 * the bytes and the count of any set of blocks is unbiased. Checked against
 * the formula at sizes from 1 byte to several R, and end to end: many blocks
 * sampled and weighted, their estimated total against the true one. The set
 * of sampled addresses: what is kept is found and forgotten exactly once.
 */
#include "agent-decode.h"
#include "agent-int.h"
#include "ht-test.h"
#include "stack-intern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The agent's pieces sample.c calls: the real mmap, a counter, a tally of
 * what would be recorded. */
struct agent_real agent_real;
static uint64_t counted[HTA_CNT_MAX], recorded, recorded_rate;

void agent_count(enum hta_counter c)
{
    counted[c]++;
}

void agent_record(int kind, uintptr_t addr, uintptr_t old, uint64_t size, uint64_t rate)
{
    (void)kind;
    (void)addr;
    (void)old;
    (void)size;
    recorded++;
    recorded_rate = rate;
}

static void *real_mmap(void *a, size_t n, int prot, int flags, int fd, long off)
{
    return mmap(a, n, prot, flags, fd, off);
}

static void setup(uint64_t rate, uint64_t seed)
{
    agent_real.mmap = real_mmap;
    CHECK_EQ(agent_sample_init(rate, seed, 0), 0);
}

/* The fraction of n blocks of size s the sampler takes, against p(s):
 * within 5 standard errors of a binomial proportion. */
static void check_p(uint64_t s, uint64_t rate, unsigned n)
{
    unsigned taken = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t r = 0;
        if (agent_sample_take(s, &r)) {
            CHECK_EQ(r, rate);
            taken++;
        }
    }
    double p = -expm1(-(double)s / (double)rate);
    double se = sqrt(p * (1 - p) / n);
    double got = (double)taken / n;
    if (fabs(got - p) > 5 * se + 1e-9) {
        fprintf(stderr, "s=%llu R=%llu: took %.6f, p(s) = %.6f (se %.6f)\n", (unsigned long long)s,
                (unsigned long long)rate, got, p, se);
        CHECK(0);
    }
}

static void test_probability(void)
{
    setup(65536, 7);
    check_p(1, 65536, 4000000);
    check_p(6, 65536, 4000000);
    check_p(48, 65536, 2000000);
    check_p(3000, 65536, 200000);
    check_p(65536, 65536, 100000);
    check_p(300000, 65536, 100000);
    check_p(0, 65536, 1000); /* never: p(0) = 0 */
}

/* The multiplicity's mean is w = 1/p(s), its values floor(w) and floor(w)+1. */
static void test_mult_unbiased(void)
{
    static const uint64_t sizes[] = {1, 7, 48, 1000, 65535, 65536, 100000, 1u << 22};
    uint64_t u = 0x1234567;
    CHECK_EQ(agent_dec_mult(100, 0, 0), 0); /* exact: 0 meaning 1 */
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint64_t s = sizes[k], rate = 65536;
        double w = agent_dec_weight(s, rate), sum = 0;
        unsigned n = 400000;
        for (unsigned i = 0; i < n; i++) {
            u = u * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t m = agent_dec_mult(s, rate, u);
            CHECK(m == (uint32_t)floor(w) || m == (uint32_t)floor(w) + 1);
            sum += m;
        }
        /* Bernoulli rounding: standard error at most 0.5 / sqrt(n). */
        if (fabs(sum / n - w) > 5 * 0.5 / sqrt(n)) {
            fprintf(stderr, "s=%llu: mean multiplicity %.5f, w %.5f\n", (unsigned long long)s,
                    sum / n, w);
            CHECK(0);
        }
    }
    /* A weight past 2^32 saturates (the daemon refuses such means). */
    CHECK_EQ(agent_dec_mult(1, 1ull << 40, 0), UINT32_MAX);
}

/* Sampler and weights together: blocks of mixed sizes, the sum of s * m over
 * the samples against the true sum (standard error sqrt(R * bytes)). */
static void test_estimate_end_to_end(void)
{
    setup(65536, 11);
    uint64_t truth = 0, est = 0, cnt_truth = 0, cnt_est = 0, u = 99;
    for (unsigned i = 0; i < 3000000; i++) {
        uint64_t s = 8 + (i * 2654435761u) % 4000, r = 0;
        truth += s;
        cnt_truth++;
        if (agent_sample_take(s, &r)) {
            u = u * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t m = agent_dec_mult(s, r, u);
            est += s * m;
            cnt_est += m;
        }
    }
    double se = sqrt(65536.0 * (double)truth);
    fprintf(stderr, "bytes: truth %llu, estimate %llu (%.3f%%, se %.3f%%); count %llu / %llu\n",
            (unsigned long long)truth, (unsigned long long)est,
            100.0 * ((double)est - (double)truth) / (double)truth, 100.0 * se / (double)truth,
            (unsigned long long)cnt_est, (unsigned long long)cnt_truth);
    CHECK(fabs((double)est - (double)truth) < 5 * se);
}

static void test_set(void)
{
    setup(65536, 3);
    for (uintptr_t a = 0x10000; a < 0x10000 + 100000 * 16; a += 16)
        CHECK_EQ(agent_sample_keep(a), 0);
    CHECK(agent_sample_has(0x10000 + 16 * 500));
    CHECK(!agent_sample_has(0x10008));
    CHECK_EQ(agent_sample_forget(0x10000 + 16 * 500), 1);
    CHECK_EQ(agent_sample_forget(0x10000 + 16 * 500), 0); /* once */
    CHECK_EQ(agent_sample_forget(0x7000), 0);             /* never kept */
    for (uintptr_t a = 0x10000; a < 0x10000 + 100000 * 16; a += 16)
        if (a != 0x10000 + 16 * 500)
            CHECK_EQ(agent_sample_forget(a), 1);
    /* Kept again over the removed slots. */
    CHECK_EQ(agent_sample_keep(0x10000), 0);
    CHECK_EQ(agent_sample_forget(0x10000), 1);
    CHECK_EQ(counted[HTA_CNT_SAMPLE_SET_FULL], 0);
}

/* Exact (a governed agent at mean 0): every block is taken, at mean 0. */
static void test_exact_takes_all(void)
{
    agent_real.mmap = real_mmap;
    CHECK_EQ(agent_sample_init(0, 5, 1), 0);
    recorded = 0;
    for (int i = 0; i < 1000; i++)
        agent_alloc((uintptr_t)(0x100000 + 64 * i), 10);
    CHECK_EQ(recorded, 1000);
    CHECK_EQ(recorded_rate, 0);
}

/* The reader takes a record's mean as hostile input: on an alloc (a weight
 * from it), on an HTA_RATE (no event: the session's current mean), and
 * nowhere else; past HTA_RATE_MAX, on a free, or on a zero-byte block, the
 * record is malformed. Two means in one ring: each alloc weighed by its own. */
static void put_rec(void *ring, uint64_t pos, int kind, uint64_t addr, uint64_t size, uint64_t rate)
{
    struct hta_rec *r = (struct hta_rec *)((char *)ring + HTA_RECS_OFFSET) + pos;
    memset(r, 0, sizeof(*r));
    r->t = 2000 + pos;
    r->kind = (uint8_t)kind;
    r->addr = addr;
    r->size = size;
    r->rate = rate;
    r->seq = pos + 1;
    ((struct hta_header *)ring)->head = pos + 1;
}

static void test_decode_rates(void)
{
    void *ring = aligned_alloc(4096, HTA_TOTAL_BYTES);
    uint32_t *ids = calloc(HTA_STACKS + 1, sizeof(*ids));
    struct stack_intern si;
    CHECK(ring && ids && stack_intern_init(&si, 100, 100) == 0);
    memset(ring, 0, HTA_TOTAL_BYTES);
    struct agent_dec d;
    agent_dec_init(&d, ring, ids, &si, 1000, 32);
    agent_dec_seed(&d, 42);
    put_rec(ring, 0, HTA_ALLOC, 0x1000, 48, 65536);            /* weight ~1366 */
    put_rec(ring, 1, HTA_RATE, 0, 12345, 1 << 20);             /* the governor: 1 MiB */
    put_rec(ring, 2, HTA_ALLOC, 0x2000, 48, 1 << 20);          /* weight ~21846 */
    put_rec(ring, 3, HTA_ALLOC, 0x3000, 100, 0);               /* exact */
    put_rec(ring, 4, HTA_FREE, 0x1000, 0, 65536);              /* a mean on a free */
    put_rec(ring, 5, HTA_ALLOC, 0x4000, 48, HTA_RATE_MAX + 1); /* past the maximum */
    put_rec(ring, 6, HTA_ALLOC, 0x5000, 0, 65536);             /* a zero-byte sample */
    put_rec(ring, 7, HTA_RATE, 0, 0, HTA_RATE_MAX * 2);        /* past the maximum */
    struct ht_event ev[16];
    size_t n = agent_dec_take(&d, ev, 16, 1ull << 40);
    CHECK_EQ(n, 3);
    CHECK(ev[0].mult == 1365 || ev[0].mult == 1366);
    CHECK(ev[1].mult == 21845 || ev[1].mult == 21846);
    CHECK_EQ(ev[2].mult, 0);
    CHECK_EQ(d.rate, 1u << 20);
    CHECK_EQ(d.st.rate_changes, 1);
    CHECK_EQ(d.st.sampled, 2);
    CHECK_EQ(d.st.malformed, 4);
    stack_intern_close(&si);
    free(ids);
    free(ring);
}

HT_TEST_MAIN(T(probability), T(mult_unbiased), T(estimate_end_to_end), T(set), T(exact_takes_all),
             T(decode_rates))
