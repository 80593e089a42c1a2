/*
 * Cost of unwinding one eBPF dwarf record (registers + 8 KiB stack copy) on
 * the consumer thread: libdwfl alone (the unwinder before the rule cache)
 * against the cached-rule fast path, on stack copies of this process taken
 * through libc, libxml2, signal handlers and threads, built without frame
 * pointers. Prints ns per stack and the rule cache's hit rate.
 *   ht-bench-unwind [samples] [passes]
 */
#define _GNU_SOURCE
#include "unwind-samples.h"
#include "unwind.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns per stack over passes runs through every sample; *frames the frames of one pass. */
static double measure(struct unwinder *u, const struct unwind_sample *s, unsigned n,
                      unsigned passes, uint64_t *frames)
{
    uint64_t f[HB_MAX_FRAMES], t0 = now_ns();
    *frames = 0;
    for (unsigned p = 0; p < passes; p++)
        for (unsigned i = 0; i < n; i++) {
            unsigned k =
                unwinder_run(u, s[i].tid, &s[i].regs, s[i].stack, s[i].len, f, HB_MAX_FRAMES);
            if (p == 0)
                *frames += k;
        }
    return (double)(now_ns() - t0) / ((double)n * passes);
}

int main(int argc, char **argv)
{
    unsigned want = argc > 1 ? (unsigned)atoi(argv[1]) : 4000;
    unsigned passes = argc > 2 ? (unsigned)atoi(argv[2]) : 5;
    struct unwind_sample *s = malloc((size_t)want * sizeof(*s));
    if (!s || want == 0 || passes == 0)
        return 1;
    unsigned n = unwind_samples_take(s, want);
    struct unwinder *slow, *fast;
    if (unwinder_new(&slow, (uint64_t)getpid()) || unwinder_new(&fast, (uint64_t)getpid()))
        return 1;
    unwinder_set_fast(slow, 0);
    uint64_t fr_slow, fr_fast;
    /* A first pass each warms libdwfl's module and CFI state (and the rules). */
    measure(slow, s, n, 1, &fr_slow);
    measure(fast, s, n, 1, &fr_fast);
    struct unwinder_stats cold;
    unwinder_stats(fast, &cold);
    double ns_slow = measure(slow, s, n, passes, &fr_slow);
    double ns_fast = measure(fast, s, n, passes, &fr_fast);
    struct unwinder_stats st;
    unwinder_stats(fast, &st);
    uint64_t look = st.rule_hits + st.rule_misses;
    printf("stacks %u, frames per stack %.1f (libdwfl %.1f), passes %u\n", n, (double)fr_fast / n,
           (double)fr_slow / n, passes);
    printf("libdwfl:     %8.0f ns per stack\n", ns_slow);
    printf("rule cache:  %8.0f ns per stack (%.1fx faster)\n", ns_fast, ns_slow / ns_fast);
    printf("fast stacks %" PRIu64 ", libdwfl fallbacks %" PRIu64 " (%.2f%%)\n", st.fast,
           st.fallbacks, 100.0 * (double)st.fallbacks / (double)(st.fast + st.fallbacks));
    printf("rules %" PRIu64 ", lookups %" PRIu64
           ", hit rate %.4f%% (first pass %.2f%%), evicted %" PRIu64 "\n",
           st.rules, look, 100.0 * (double)st.rule_hits / (double)look,
           100.0 * (double)cold.rule_hits / (double)(cold.rule_hits + cold.rule_misses),
           st.rules_evicted);
    unwinder_free(slow);
    unwinder_free(fast);
    free(s);
    return fr_fast == fr_slow ? 0 : 1;
}
