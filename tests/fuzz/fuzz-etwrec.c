/* Fuzz target: ETW records from bytes through the decoder (etw-decode.h) and
 * the stack correlator (etw-stacks.h) into a small engine. Each record is
 * [provider 1][opcode 1][flags 1][pid 1][tid 1][cpu 1][ts delta 2][len 1]
 * [payload len]: small ranges so that timestamps, threads and processors
 * collide and stacks find (or miss) their events. A provider byte with its
 * top bit set picks the Process or Image provider instead (module events
 * with their names interned, the process's name and end), and the first
 * byte's bit 5 follows the first process (start --exe). */
#include "engine.h"
#include "etw-decode.h"
#include "etw-stacks.h"
#include "query.h"
#include "stack-intern.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static void emit(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct engine *e = arg;
    struct ht_event x = *ev;
    if (depth)
        x.stack = stack_intern_get(&e->si, frames, depth);
    engine_apply(e, &x);
}

static uint32_t path_cb(void *arg, const char *path)
{
    struct engine *e = arg;
    return stack_intern_str(&e->si, path, (unsigned)strlen(path));
}

static void process_cb(void *arg, uint32_t pid, const char *name)
{
    (void)arg;
    (void)pid;
    /* Every byte is read: a name past its terminator shows under ASan. */
    volatile size_t n = strlen(name);
    (void)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = 64;
    lim.commit_cap = 16;
    lim.life_ring = 32;
    lim.commit_ring = 8;
    lim.timeline_ring = 8;
    lim.timeline_ns = 1000;
    lim.max_stacks = 64;
    lim.max_strings = 64;
    struct engine e;
    if (size < 1 || engine_init(&e, &lim) != 0)
        return 0;
    /* The first byte chooses the configuration: pid filter, small queues. */
    struct etw_corr_config cfg = {.acct = &e.acct,
                                  .pid = data[0] & 1 ? 3 : 0,
                                  .qpc_freq = data[0] & 2 ? 1000 : 10000000,
                                  .start_qpc = 100,
                                  .max_pending = data[0] & 4 ? 4 : 0,
                                  .max_held = data[0] & 8 ? 2 : 0,
                                  .ttl_ns = data[0] & 16 ? 5000 : 0,
                                  .follow_first = !(data[0] & 1) && (data[0] & 32),
                                  .path = path_cb,
                                  .process = process_cb};
    struct etw_corr *c;
    if (etw_corr_new(&c, &cfg, emit, &e) != 0) {
        engine_close(&e);
        return 0;
    }
    const struct etw_guid *provs[] = {&etw_guid_heap, &etw_guid_pagefault, &etw_guid_stackwalk};
    static const struct etw_guid other = {{1, 2, 3}};
    struct etw_decode_stats st = {0};
    uint64_t ts = 90;
    size_t i = 1;
    while (i + 9 <= size) {
        const uint8_t *h = data + i;
        struct etw_record r = {0};
        if (h[0] & 0x80)
            r.provider = h[0] & 1 ? etw_guid_image : etw_guid_process;
        else
            r.provider = h[0] % 4 < 3 ? *provs[h[0] % 4] : other;
        r.opcode = h[1];
        r.flags = (uint16_t)(h[2] << 4);
        r.pid = h[3] % 5;
        r.tid = h[4] == 0xff ? 0xFFFFFFFFu : h[4] % 4;
        r.cpu = h[5] % 2;
        ts += (uint64_t)(h[6] | h[7] << 8) % 64;
        r.ts = ts;
        r.len = h[8];
        i += 9;
        if (r.len > size - i)
            r.len = (uint32_t)(size - i);
        r.payload = data + i;
        i += r.len;
        struct etw_decoded d;
        if (etw_decode(&r, &d, &st) == 1)
            etw_corr_add(c, &r, &d);
    }
    etw_corr_flush(c);
    etw_corr_free(c);
    struct query q;
    query_init(&q);
    q.t1 = e.now / 2;
    struct query_result res;
    if (engine_query(&e, &q, &res) == 0)
        query_result_free(&res);
    engine_close(&e);
    return 0;
}
