/* ht-bench-engine: applies a synthetic stream to the engine and prints one JSON line of figures. */
#include "bench-util.h"
#include "engine.h"
#include "query.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH (1u << 18)

/* Time a batch of pre-built events only; building them is not measured. */
static double apply_batch(struct engine *e, const struct ht_event *evs, size_t n)
{
    double t0 = now_s();
    if (getenv("HT_BENCH_UNBATCHED")) {
        for (size_t i = 0; i < n; i++)
            engine_apply(e, &evs[i]);
    } else {
        engine_apply_batch(e, evs, n);
    }
    return now_s() - t0;
}

static struct frame_pat cull_pats[8];
static unsigned ncull_pats;

static double query_ms(struct engine *e, int by, uint64_t t1, int reps)
{
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        struct query q;
        query_init(&q);
        q.by = by;
        q.top = 50;
        q.t1 = t1;
        q.cull = cull_pats;
        q.ncull = ncull_pats;
        struct query_result res;
        double t0 = now_s();
        engine_query(e, &q, &res);
        double ms = (now_s() - t0) * 1000;
        query_result_free(&res);
        if (ms < best)
            best = ms;
    }
    return best;
}

int main(int argc, char **argv)
{
    uint64_t nevents = arg_u64(argc, argv, "--events", 20000000);
    uint64_t nlive = arg_u64(argc, argv, "--live", 1000000);
    uint64_t nstacks = arg_u64(argc, argv, "--stacks", 100000);
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = (uint32_t)(nlive + 2 * WORKLOAD_PENDING + 1024);
    lim.max_stacks = (uint32_t)(nstacks + 16);
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        return 1;

    int fresh = (int)arg_u64(argc, argv, "--fresh", 0);
    struct workload w;
    if (workload_init(&w, &e.si, nlive, nstacks, fresh) != 0)
        return 1;
    struct ht_event *evs = calloc(BATCH, sizeof(*evs));
    /* Prefill: the long-lived allocations (not timed). */
    for (size_t n; (n = workload_preload(&w, evs, BATCH)) > 0;)
        apply_batch(&e, evs, n);
    double secs = 0;
    uint64_t applied = 0;
    /* The timed phase runs in rounds; the machine is noisy, so the median
     * and best round rates are printed with the overall rate. */
#define ROUNDS 9
    double round_rate[ROUNDS];
    int nround = 0;
    uint64_t round_events = nevents / ROUNDS + 1, round_applied = 0;
    double round_secs = 0;
    while (applied < nevents) {
        size_t n = workload_churn(&w, evs, BATCH, nevents - applied);
        double dt = apply_batch(&e, evs, n);
        secs += dt;
        applied += n;
        round_secs += dt;
        round_applied += n;
        if ((round_applied >= round_events || applied >= nevents) && nround < ROUNDS) {
            round_rate[nround++] = round_applied / round_secs;
            round_applied = 0;
            round_secs = 0;
        }
    }
    qsort(round_rate, (size_t)nround, sizeof(double), cmp_double);
    uint64_t live = e.table.count;
    uint64_t mem = alloc_table_memory(&e.table) + agg_table_memory(&e.heap_agg);
    double q_whole = query_ms(&e, HT_BY_STACK, 0, 3);
    /* With culling, as the daemon always does (its default list has ~40
     * patterns): these match nothing, so every frame is tested. */
    static const char *const pats[] = {
        "ntdll.dll!RtlAllocateHeap", "ucrtbase!malloc", "operator new",
        "libc.so.6!malloc",          "kernelbase!",     "msvcrt.dll!",
        "libstdc++.so.6!",           "VirtualAlloc"};
    for (ncull_pats = 0; ncull_pats < 8; ncull_pats++)
        frame_pat_parse(pats[ncull_pats], strlen(pats[ncull_pats]), &cull_pats[ncull_pats]);
    double q_culled = query_ms(&e, HT_BY_STACK, 0, 3);
    ncull_pats = 0;
    double q_window = query_ms(&e, HT_BY_STACK, e.now / 2, 3);
    double q_frame = query_ms(&e, HT_BY_FRAME, e.now / 2, 3);
    printf(
        "{\"fresh_addresses\":%s,\"events\":%llu,\"events_per_s\":%.0f,\"events_per_s_median_"
        "round\":%.0f,\"events_per_s_best_round\":%.0f,\"ns_per_event\":%.1f,\"live_allocs\":%llu,"
        "\"stacks\":%llu,\"bytes_per_live_alloc\":%.1f,\"table_bytes\":%llu,"
        "\"aggregate_bytes\":%llu,\"engine_bytes\":%llu,\"stack_bytes\":%llu,"
        "\"query_ms_top50\":%.2f,\"query_ms_top50_culled\":%.2f,\"query_ms_top50_window\":%.2f,"
        "\"query_ms_top50_by_frame_window\":%.2f,\"window_complete\":%s}\n",
        fresh ? "true" : "false", (unsigned long long)applied, applied / secs,
        round_rate[nround / 2], round_rate[nround - 1], secs * 1e9 / applied,
        (unsigned long long)live, (unsigned long long)(e.si.nstacks - 1), (double)mem / live,
        (unsigned long long)alloc_table_memory(&e.table),
        (unsigned long long)agg_table_memory(&e.heap_agg), (unsigned long long)engine_memory(&e),
        (unsigned long long)stack_intern_memory(&e.si), q_whole, q_culled, q_window, q_frame,
        chunk_ring_complete_from(&e.heap_life, e.now / 2) ? "true" : "false");
    free(evs);
    workload_close(&w);
    engine_close(&e);
    return 0;
}
