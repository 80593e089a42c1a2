/*
 * The fast unwinder (cached CFI rules) against libdwfl, frame by frame, on
 * stack copies of this process taken from code without frame pointers
 * through libc, libxml2, signal frames, threads and stacks deeper than the copy.
 */
#define _GNU_SOURCE
#include "heaptrace-bpf.h"
#include "ht-test.h"
#include "unwind-samples.h"
#include "unwind-rules.h"
#include "unwind.h"

#include <unistd.h>

#define NSAMPLES 4000

struct result {
    unsigned n;
    int cut;
    uint64_t f[HB_MAX_FRAMES];
};

static void run(struct unwinder *u, const struct unwind_sample *s, struct result *r, unsigned max)
{
    r->n = unwinder_run(u, s->tid, &s->regs, s->stack, s->len, r->f, max);
    r->cut = unwinder_cut(u);
}

static int same(const struct result *a, const struct result *b)
{
    return a->n == b->n && a->cut == b->cut && memcmp(a->f, b->f, a->n * sizeof(a->f[0])) == 0;
}

static void report_diff(const struct unwind_sample *s, const struct result *a,
                        const struct result *b)
{
    fprintf(stderr, "differ at pc %#" PRIx64 " len %zu: fast %u frames cut %d, libdwfl %u cut %d\n",
            (uint64_t)s->regs.r[16], s->len, a->n, a->cut, b->n, b->cut);
    for (unsigned i = 0; i < a->n || i < b->n; i++)
        fprintf(stderr, "  %2u %#18" PRIx64 " %#18" PRIx64 "\n", i, i < a->n ? a->f[i] : 0,
                i < b->n ? b->f[i] : 0);
}

/* Every sample, at full depth and cut to a few frames, gives the same frames
 * (and end-of-copy verdict) both ways; nearly all of them by the fast path. */
static void test_same_as_libdwfl(void)
{
    struct unwind_sample *s = malloc(NSAMPLES * sizeof(*s));
    CHECK(s != NULL);
    unsigned n = unwind_samples_take(s, NSAMPLES);
    struct unwinder *fast, *ref;
    CHECK_EQ(unwinder_new(&fast, (uint64_t)getpid()), 0);
    CHECK_EQ(unwinder_new(&ref, (uint64_t)getpid()), 0);
    unwinder_set_fast(ref, 0);
    unsigned differ = 0, cut = 0, frames = 0;
    struct result a, b;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned max = HB_MAX_FRAMES; max; max = max == HB_MAX_FRAMES ? 3 : 0) {
            run(fast, &s[i], &a, max);
            run(ref, &s[i], &b, max);
            if (!same(&a, &b) && differ++ < 5)
                report_diff(&s[i], &a, &b);
        }
        run(fast, &s[i], &a, HB_MAX_FRAMES);
        cut += a.cut;
        frames += a.n;
    }
    struct unwinder_stats st;
    unwinder_stats(fast, &st);
    printf("samples %u frames %u cut %u fast %" PRIu64 " fallbacks %" PRIu64 " rules %" PRIu64
           " hits %" PRIu64 " misses %" PRIu64 " evicted %" PRIu64 " differ %u\n",
           n, frames, cut, st.fast, st.fallbacks, st.rules, st.rule_hits, st.rule_misses,
           st.rules_evicted, differ);
    unwinder_free(fast);
    unwinder_free(ref);
    free(s);
    CHECK(n >= 3000);
    CHECK_EQ(differ, 0);
    /* Real stacks: a few dozen frames each, some cut at the copy's end. */
    CHECK(frames >= n * 8);
    CHECK(cut > 0);
    /* Only the signal-frame samples (one a round) and what they share need
     * libdwfl (none under ThreadSanitizer: unwind-samples.c). */
#ifndef HT_NO_SIGNAL_SAMPLES
    CHECK(st.fallbacks > 0);
#endif
    CHECK(st.fast >= 9 * (st.fast + st.fallbacks) / 10);
}

static char *debuginfo_path;

static const Dwfl_Callbacks self_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

/* The executable mapping of libc in this process. */
static int libc_text(uint64_t *lo, uint64_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, " r-xp ") && strstr(line, "/libc.so.6") &&
                sscanf(line, "%" SCNx64 "-%" SCNx64, lo, hi) == 2;
    if (f)
        fclose(f);
    return found;
}

/* More code addresses than the cache has slots: it stays at its cap, every
 * rule replaced is counted, and a rule looked up again after its slot was
 * taken is the same as a fresh cache's. */
static void test_rules_cap(void)
{
    uint64_t lo, hi;
    CHECK(libc_text(&lo, &hi));
    Dwfl *dwfl = dwfl_begin(&self_callbacks);
    CHECK(dwfl != NULL);
    dwfl_report_begin(dwfl);
    CHECK_EQ(dwfl_linux_proc_report(dwfl, getpid()), 0);
    dwfl_report_end(dwfl, NULL, NULL);
    struct unwind_rules full, fresh;
    unwind_rules_init(&full);
    unwind_rules_init(&fresh);
    uint64_t step = 8, n = 0, simple = 0;
    for (uint64_t pc = lo; pc < hi; pc += step, n++) {
        const struct unwind_rule *r = unwind_rules_get(&full, dwfl, pc);
        CHECK(r != NULL);
        simple += r->kind == RULE_SIMPLE;
    }
    printf("libc text %" PRIu64 " KiB: %" PRIu64 " addresses, %" PRIu64
           " simple rules; cache %" PRIu64 " rules, %" PRIu64 " evicted\n",
           (hi - lo) >> 10, n, simple, full.st.entries, full.st.evicted);
    CHECK(n > 2 * UNWIND_RULES_SLOTS);
    CHECK(simple > n / 2);
    CHECK(full.st.entries <= UNWIND_RULES_SLOTS);
    CHECK_EQ(full.st.misses, n);
    CHECK_EQ(full.st.evicted, n - full.st.entries);
    /* The first addresses were evicted long ago: read again, as a fresh cache reads them. */
    for (uint64_t pc = lo; pc < lo + 4096 * step; pc += step) {
        struct unwind_rule a = *unwind_rules_get(&full, dwfl, pc);
        struct unwind_rule b = *unwind_rules_get(&fresh, dwfl, pc);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        /* and then a hit */
        uint64_t hits = full.st.hits;
        unwind_rules_get(&full, dwfl, pc);
        CHECK_EQ(full.st.hits, hits + 1);
    }
    unwind_rules_close(&full);
    unwind_rules_close(&fresh);
    dwfl_end(dwfl);
}

HT_TEST_MAIN(T(same_as_libdwfl), T(rules_cap))
