/* The portable ETW decoder (etw-decode.h) and stack correlator (etw-stacks.h):
 * payloads built from the documented layouts (docs/windows.md#etw-facts-the-code-relies-on),
 * the decoded values of real kernel events published with TracingTools/libtrace's
 * decoder tests (restated as values, nothing copied), and a randomized
 * comparison of the correlator against an independent model. */
#include "engine.h"
#include "etw-decode.h"
#include "etw-hub.h"
#include "etw-props.h"
#include "etw-raw.h"
#include "etw-stacks.h"
#include "etw-synth.h"
#include "ht-test-engine.h"
#include "ht-error.h"
#include "ht-test.h"
#include "ht-text.h"
#include "query.h"
#include "replay.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>


static struct etw_record rec(const struct etw_guid *g, uint8_t op, uint16_t flags, uint32_t pid,
                             uint32_t tid, uint32_t cpu, uint64_t ts, const struct pl *p)
{
    struct etw_record r = {.provider = *g, .opcode = op, .flags = flags, .pid = pid, .tid = tid,
                           .cpu = cpu, .ts = ts, .payload = p->b, .len = p->n};
    return r;
}

static void test_guids(void)
{
    struct etw_guid g;
    char buf[40];
    CHECK(etw_guid_parse("222962ab-6180-4b88-a825-346b75f2a24a", 36, &g) == 0);
    CHECK(etw_guid_eq(&g, &etw_guid_heap));
    CHECK(etw_guid_parse("{3D6FA8D3-FE05-11D0-9DDA-00C04FD7BA7C}", 38, &g) == 0);
    CHECK(etw_guid_eq(&g, &etw_guid_pagefault));
    etw_guid_format(&etw_guid_stackwalk, buf);
    CHECK_STR(buf, "def2fe46-7bd6-4b80-bd94-f57fe20d0ce3");
    CHECK(etw_guid_parse("def2fe46-7bd6-4b80-bd94-f57fe20d0ce", 35, &g) != 0);
    CHECK(etw_guid_parse("def2fe46x7bd6-4b80-bd94-f57fe20d0ce3", 36, &g) != 0);
    CHECK(etw_guid_parse("def2fe46-7bd6-4b80-bd94-f57fe20d0cg3", 36, &g) != 0);
    /* A GUID struct as it lies in memory: Data1..3 little-endian. */
    const uint8_t raw[16] = {0xab, 0x62, 0x29, 0x22, 0x80, 0x61, 0x88, 0x4b,
                             0xa8, 0x25, 0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a};
    etw_guid_from_struct(raw, &g);
    CHECK(etw_guid_eq(&g, &etw_guid_heap));
}

/* Every heap opcode we use, in both pointer sizes, at its exact length. */
static void test_heap_layouts(void)
{
    for (int wide = 0; wide < 2; wide++) {
        unsigned P = wide ? 8 : 4;
        uint16_t fl = wide ? F64 : F32;
        uint64_t heap = wide ? 0x000001d2a5b40000ull : 0x00a40000u;
        uint64_t a1 = wide ? 0x000001d2a5b4c0d0ull : 0x00a4c0d0u;
        uint64_t a2 = wide ? 0x000001d2a5b51230ull : 0x00a51230u;
        struct etw_decode_stats st = {0};
        struct etw_decoded d;
        struct pl p = {0};
        put(&p, heap, P), put(&p, 100, P), put(&p, a1, P), put(&p, 2 /* LFH */, 4);
        CHECK_EQ(p.n, wide ? 28 : 16);
        struct etw_record r = rec(&etw_guid_heap, 33, fl, 10, 11, 0, 5, &p);
        CHECK(etw_decode(&r, &d, &st) == 1);
        CHECK(d.kind == ETW_HEAP_ALLOC && d.heap == heap && d.size == 100 && d.addr == a1);
        CHECK_EQ(d.ptr_size, P);
        p.n = 0;
        put(&p, heap, P), put(&p, a2, P), put(&p, a1, P), put(&p, 300, P), put(&p, 100, P),
            put(&p, 3, 4);
        CHECK_EQ(p.n, wide ? 44 : 24);
        r = rec(&etw_guid_heap, 34, fl, 10, 11, 0, 6, &p);
        CHECK(etw_decode(&r, &d, &st) == 1);
        CHECK(d.kind == ETW_HEAP_REALLOC && d.heap == heap && d.addr == a2 && d.old_addr == a1);
        CHECK(d.size == 300 && d.old_size == 100);
        p.n = 0;
        put(&p, heap, P), put(&p, a2, P), put(&p, 3, 4);
        CHECK_EQ(p.n, wide ? 20 : 12);
        r = rec(&etw_guid_heap, 36, fl, 10, 11, 0, 7, &p);
        CHECK(etw_decode(&r, &d, &st) == 1);
        CHECK(d.kind == ETW_HEAP_FREE && d.heap == heap && d.addr == a2);
        p.n = 0;
        put(&p, heap, P), put(&p, 0x2 /* HEAP_GROWABLE */, 4);
        r = rec(&etw_guid_heap, 32, fl, 10, 11, 0, 8, &p);
        CHECK(etw_decode(&r, &d, &st) == 1);
        CHECK(d.kind == ETW_HEAP_CREATE && d.heap == heap && d.vflags == 2);
        p.n = 0;
        put(&p, heap, P);
        r = rec(&etw_guid_heap, 35, fl, 10, 11, 0, 9, &p);
        CHECK(etw_decode(&r, &d, &st) == 1);
        CHECK(d.kind == ETW_HEAP_DESTROY && d.heap == heap);
        CHECK_EQ(st.decoded, 5);
        CHECK_EQ(st.malformed + st.longer_payloads + st.ignored_opcode + st.unknown_provider, 0);
        /* Lock (43) and Expand (37) are known opcodes we do not use. */
        r = rec(&etw_guid_heap, 43, fl, 10, 11, 0, 9, &p);
        CHECK(etw_decode(&r, &d, &st) == 0);
        CHECK_EQ(st.ignored_opcode, 1);
    }
}

/* A newer version's longer payload decodes (length >=); one byte short of
 * any layout is malformed, for every opcode and both pointer sizes. */
static void test_longer_and_short(void)
{
    static const struct {
        const struct etw_guid *g;
        uint8_t op;
        unsigned ptrs, ulongs;
    } lay[] = {{&etw_guid_heap, 32, 1, 1}, {&etw_guid_heap, 33, 3, 1}, {&etw_guid_heap, 34, 5, 1},
               {&etw_guid_heap, 35, 1, 0}, {&etw_guid_heap, 36, 2, 1},
               {&etw_guid_pagefault, 98, 2, 2}, {&etw_guid_pagefault, 99, 2, 2}};
    for (int wide = 0; wide < 2; wide++) {
        unsigned P = wide ? 8 : 4;
        for (size_t i = 0; i < sizeof(lay) / sizeof(lay[0]); i++) {
            struct etw_decode_stats st = {0};
            struct etw_decoded d;
            struct pl p = {0};
            uint32_t need = lay[i].ptrs * P + lay[i].ulongs * 4;
            for (uint32_t k = 0; k < need + 24; k++)
                put(&p, 0x11 + k, 1);
            struct etw_record r = rec(lay[i].g, lay[i].op, wide ? F64 : F32, 1, 1, 0, 1, &p);
            r.len = need + 24;
            CHECK(etw_decode(&r, &d, &st) == 1);
            CHECK_EQ(st.longer_payloads, 1);
            r.len = need;
            CHECK(etw_decode(&r, &d, &st) == 1);
            CHECK_EQ(st.longer_payloads, 1);
            r.len = need - 1;
            CHECK(etw_decode(&r, &d, &st) == -1);
            r.len = 0;
            CHECK(etw_decode(&r, &d, &st) == -1);
            CHECK_EQ(st.malformed, 2);
        }
    }
    /* StackWalk: 16 bytes of header, then whole frames only. */
    struct etw_decode_stats st = {0};
    struct etw_decoded d;
    struct pl p = {0};
    put(&p, 1000, 8), put(&p, 5, 4), put(&p, 6, 4), put(&p, 0x401000, 8), put(&p, 0x402000, 8);
    struct etw_record r = rec(&etw_guid_stackwalk, 32, F64, -1, -1, 0, 1001, &p);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK_EQ(d.nframes, 2);
    r.len = 31;
    CHECK(etw_decode(&r, &d, &st) == -1);
    r.len = 15;
    CHECK(etw_decode(&r, &d, &st) == -1);
    r.len = 16;
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK_EQ(d.nframes, 0);
    /* Unknown providers and stack-caching opcodes are counted, not decoded. */
    struct etw_guid other;
    CHECK(etw_guid_parse("9e814aad-3204-11d2-9a82-006008a86939", 36, &other) == 0);
    r = rec(&other, 10, F64, 1, 1, 0, 1, &p);
    CHECK(etw_decode(&r, &d, &st) == 0);
    r = rec(&etw_guid_stackwalk, 37, F64, 1, 1, 0, 1, &p);
    CHECK(etw_decode(&r, &d, &st) == 0);
    CHECK_EQ(st.unknown_provider, 1);
    CHECK_EQ(st.ignored_opcode, 1);
    CHECK_EQ(st.malformed, 2);
}

/* Real VirtualAlloc/VirtualFree/StackWalk values: the decoded values of real kernel
 * events in TracingTools/libtrace's ETW payload decoder tests (PageFaultVirtualAllocV2,
 * PageFaultVirtualFreeV2, PageFaultVirtualFree32bitsV2, StackWalkStackV2). */
static void test_real_vectors(void)
{
    struct etw_decode_stats st = {0};
    struct etw_decoded d;
    struct pl p = {0};
    put(&p, 0x3B4000, 8), put(&p, 0x6000, 8), put(&p, 0x1804, 4), put(&p, 0x1000, 4);
    struct etw_record r = rec(&etw_guid_pagefault, 98, F64, -1, -1, 0, 1, &p);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.kind == ETW_VIRTUAL_ALLOC && d.addr == 0x3B4000 && d.size == 0x6000);
    CHECK(d.owner_pid == 0x1804 && d.vflags == ETW_MEM_COMMIT);
    p.n = 0;
    put(&p, 0x3B4000, 8), put(&p, 0xF000, 8), put(&p, 0x1804, 4), put(&p, 0x4000, 4);
    r = rec(&etw_guid_pagefault, 99, F64, -1, -1, 0, 2, &p);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.kind == ETW_VIRTUAL_FREE && d.size == 0xF000 && d.vflags == ETW_MEM_DECOMMIT);
    p.n = 0;
    put(&p, 0x01420000, 4), put(&p, 0x40000, 4), put(&p, 0xDD8, 4), put(&p, 0x8000, 4);
    r = rec(&etw_guid_pagefault, 99, F32, -1, -1, 0, 3, &p);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.addr == 0x01420000 && d.size == 0x40000 && d.owner_pid == 0xDD8);
    CHECK(d.vflags == ETW_MEM_RELEASE);
    p.n = 0;
    put(&p, 1198356524732ull, 8), put(&p, 7828, 4), put(&p, 1404, 4);
    put(&p, 0xFFFFF801ED5D372Bull, 8);
    for (int i = 1; i < 23; i++)
        put(&p, 0x7FF6A0001000ull + 16 * (uint64_t)i, 8);
    r = rec(&etw_guid_stackwalk, 32, F64, -1, -1, 0, 4, &p);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.kind == ETW_STACK && d.stack_ts == 1198356524732ull);
    CHECK(d.owner_pid == 7828 && d.stack_tid == 1404 && d.nframes == 23);
    CHECK_EQ(etw_ptr_at(d.frames, 8), 0xFFFFF801ED5D372Bull);
    CHECK_EQ(st.malformed, 0);
}

/* --- the correlator ---------------------------------------------------- */

#define MAXOUT 20000
struct out {
    struct ht_event ev[MAXOUT];
    uint64_t top[MAXOUT]; /* innermost frame, 0 = no stack */
    unsigned depth[MAXOUT];
    unsigned n;
};

static void emit_fn(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct out *o = arg;
    if (o->n < MAXOUT) {
        o->ev[o->n] = *ev;
        o->top[o->n] = depth ? frames[0] : 0;
        o->depth[o->n] = depth;
    }
    o->n++;
}

/* Feed one record through decode and correlator. */
static void feed(struct etw_corr *c, const struct etw_record *r)
{
    static struct etw_decode_stats st;
    struct etw_decoded d;
    if (etw_decode(r, &d, &st) == 1)
        etw_corr_add(c, r, &d);
}

static void heap_alloc(struct etw_corr *c, uint32_t pid, uint32_t tid, uint32_t cpu, uint64_t ts,
                       uint64_t addr, uint64_t size, uint16_t fl)
{
    unsigned P = etw_ptr_size(fl);
    struct pl p = {0};
    put(&p, 0x10000, P), put(&p, size, P), put(&p, addr, P), put(&p, 3, 4);
    struct etw_record r = rec(&etw_guid_heap, 33, fl, pid, tid, cpu, ts, &p);
    feed(c, &r);
}

static void heap_free(struct etw_corr *c, uint32_t pid, uint32_t tid, uint64_t ts, uint64_t addr)
{
    struct pl p = {0};
    put(&p, 0x10000, 8), put(&p, addr, 8), put(&p, 3, 4);
    struct etw_record r = rec(&etw_guid_heap, 36, F64, pid, tid, 0, ts, &p);
    feed(c, &r);
}

static void heap_realloc(struct etw_corr *c, uint32_t pid, uint32_t tid, uint64_t ts,
                         uint64_t naddr, uint64_t oaddr, uint64_t nsize, uint64_t osize)
{
    struct pl p = {0};
    put(&p, 0x10000, 8), put(&p, naddr, 8), put(&p, oaddr, 8), put(&p, nsize, 8),
        put(&p, osize, 8), put(&p, 3, 4);
    struct etw_record r = rec(&etw_guid_heap, 34, F64, pid, tid, 0, ts, &p);
    feed(c, &r);
}

static void virt_op(struct etw_corr *c, uint32_t owner, uint32_t cpu, uint64_t ts, uint64_t addr,
                   uint64_t size, uint32_t flags, uint8_t op)
{
    struct pl p = {0};
    put(&p, addr, 8), put(&p, size, 8), put(&p, owner, 4), put(&p, flags, 4);
    struct etw_record r = rec(&etw_guid_pagefault, op, F64, -1, -1, cpu, ts, &p);
    feed(c, &r);
}

/* A stack: nk kernel frames then nu user frames starting at top. */
static void stack(struct etw_corr *c, uint32_t pid, uint32_t tid, uint32_t cpu, uint64_t ts,
                  unsigned nk, uint64_t top, unsigned nu)
{
    struct pl p = {0};
    put(&p, ts, 8), put(&p, pid, 4), put(&p, tid, 4);
    for (unsigned i = 0; i < nk; i++)
        put(&p, 0xFFFFF80100000000ull + i, 8);
    for (unsigned i = 0; i < nu; i++)
        put(&p, top + 16 * i, 8);
    struct etw_record r = rec(&etw_guid_stackwalk, 32, F64, -1, -1, cpu, ts + 1, &p);
    feed(c, &r);
}

static struct etw_corr *corr(uint32_t pid, struct out *o)
{
    struct etw_corr_config cfg = {.pid = pid, .qpc_freq = 10000000, .start_qpc = 1000};
    struct etw_corr *c;
    memset(o, 0, sizeof(*o));
    if (etw_corr_new(&c, &cfg, emit_fn, o) != 0)
        return NULL;
    return c;
}

/* Stacks after and before their events, kernel+user fragments, a
 * VirtualAlloc matched by processor, order kept behind a waiting event. */
static void test_correlate(void)
{
    static struct out o;
    struct etw_corr *c = corr(7, &o);
    CHECK(c);
    heap_alloc(c, 7, 70, 0, 2000, 0xA000, 16, F64);
    heap_free(c, 7, 71, 2001, 0xB000);      /* no stack kind: waits behind the alloc */
    CHECK_EQ(o.n, 0);
    stack(c, 7, 70, 0, 2000, 5, 0x401000, 3); /* its stack, after it */
    CHECK_EQ(o.n, 2);
    CHECK(o.ev[0].kind == HT_EV_ALLOC && o.top[0] == 0x401000 && o.depth[0] == 3);
    CHECK(o.ev[1].kind == HT_EV_FREE && o.depth[1] == 0);
    CHECK_EQ(o.ev[0].t, 100000); /* 1000 ticks at 10 MHz */
    /* The stack first. */
    stack(c, 7, 72, 1, 3000, 0, 0x402000, 4);
    heap_alloc(c, 7, 72, 1, 3000, 0xC000, 32, F64);
    CHECK_EQ(o.n, 3);
    CHECK(o.top[2] == 0x402000 && o.depth[2] == 4);
    /* Kernel fragment, then the user fragment with the same timestamp. */
    heap_alloc(c, 7, 73, 0, 4000, 0xD000, 48, F64);
    stack(c, 7, 73, 0, 4000, 6, 0, 0);
    CHECK_EQ(o.n, 3);
    stack(c, 7, 73, 0, 4000, 0, 0x403000, 2);
    CHECK_EQ(o.n, 4);
    CHECK(o.top[3] == 0x403000 && o.depth[3] == 2);
    /* VirtualAlloc has no thread: matched on timestamp and processor, and it
     * takes the stack's thread. Another processor's stack does not match. */
    virt_op(c, 7, 3, 5000, 0x200000, 0x3000, ETW_MEM_COMMIT | ETW_MEM_RESERVE, 98);
    stack(c, 7, 74, 2, 5000, 0, 0x404000, 2);
    CHECK_EQ(o.n, 4);
    stack(c, 7, 75, 3, 5000, 0, 0x405000, 2);
    CHECK_EQ(o.n, 5);
    CHECK(o.ev[4].kind == HT_EV_COMMIT && o.ev[4].addr == 0x200000 && o.ev[4].size == 0x3000);
    CHECK(o.top[4] == 0x405000 && o.ev[4].tid == 75);
    /* Other processes are skipped, events and stacks alike. */
    heap_alloc(c, 8, 80, 0, 6000, 0xE000, 8, F64);
    stack(c, 8, 80, 0, 6000, 0, 0x406000, 2);
    virt_op(c, 8, 0, 6001, 0x300000, 0x1000, ETW_MEM_COMMIT, 98);
    CHECK_EQ(o.n, 5);
    /* A reservation is not a commit; decommit and release are told apart. */
    virt_op(c, 7, 0, 7000, 0x400000, 0x10000, ETW_MEM_RESERVE, 98);
    virt_op(c, 7, 0, 7001, 0x200000, 0x1000, ETW_MEM_DECOMMIT, 99);
    virt_op(c, 7, 0, 7002, 0x200000, 0x3000, ETW_MEM_RELEASE, 99);
    CHECK_EQ(o.n, 7);
    CHECK(o.ev[5].kind == HT_EV_DECOMMIT && o.ev[6].kind == HT_EV_RELEASE);
    etw_corr_flush(c);
    const struct etw_corr_stats *s = etw_corr_stats(c);
    CHECK_EQ(s->stacks_matched, 5); /* the user fragment merged into its event counts once more */
    CHECK_EQ(s->stacks_merged, 1);
    CHECK_EQ(s->stacks_early, 1);
    CHECK_EQ(s->stacks_unmatched, 1); /* processor 2's */
    CHECK_EQ(s->other_process, 3);
    CHECK_EQ(s->reserve_only, 1);
    CHECK_EQ(s->events_no_stack, 0);
    CHECK_EQ(s->kernel_frames, 11);
    etw_corr_free(c);
}

/* An event whose stack never comes leaves after ttl of stream time, or when
 * max_pending events wait; the order is kept either way. */
static void test_ttl_and_overflow(void)
{
    static struct out o;
    struct etw_corr *c = corr(0, &o);
    CHECK(c);
    heap_alloc(c, 7, 70, 0, 2000, 0xA000, 16, F64); /* no stack will come */
    heap_free(c, 7, 70, 2001, 0xA000);
    heap_alloc(c, 7, 71, 0, 2002, 0xB000, 16, F64);
    CHECK_EQ(o.n, 0);
    heap_free(c, 7, 70, 2000 + 999999, 0x1); /* 99.9999 ms later: not yet */
    CHECK_EQ(o.n, 0);
    heap_free(c, 7, 70, 2000 + 1000002, 0x2); /* past 100 ms: the first leaves, then the free */
    CHECK_EQ(o.n, 2);
    CHECK(o.ev[0].kind == HT_EV_ALLOC && o.depth[0] == 0 && o.ev[1].kind == HT_EV_FREE);
    etw_corr_free(c);

    struct etw_corr_config cfg = {.qpc_freq = 10000000, .max_pending = 16};
    memset(&o, 0, sizeof(o));
    CHECK(etw_corr_new(&c, &cfg, emit_fn, &o) == 0);
    for (unsigned i = 0; i < 40; i++)
        heap_alloc(c, 7, 70, 0, 100 + i, 0x1000 * (i + 1), 8, F64);
    CHECK_EQ(o.n, 40 - 16);
    for (unsigned i = 0; i < o.n; i++)
        CHECK_EQ(o.ev[i].addr, 0x1000 * (i + 1));
    CHECK_EQ(etw_corr_stats(c)->pending_overflow, 24);
    etw_corr_flush(c);
    CHECK_EQ(o.n, 40);
    CHECK_EQ(etw_corr_stats(c)->events_no_stack, 40);
    etw_corr_free(c);
}

/* ReAlloc: in place is a realloc event; a moving one is left to its Alloc
 * and Free (never counted twice) and checked against them. */
static void test_realloc(void)
{
    static struct out o;
    struct etw_corr *c = corr(7, &o);
    CHECK(c);
    heap_realloc(c, 7, 70, 2000, 0xA000, 0xA000, 64, 32);
    stack(c, 7, 70, 0, 2000, 0, 0x401000, 1);
    CHECK_EQ(o.n, 1);
    CHECK(o.ev[0].kind == HT_EV_REALLOC && o.ev[0].addr == 0xA000 && o.ev[0].size == 64);
    CHECK(o.ev[0].old_size == 32 && o.top[0] == 0x401000);
    /* Moving: Alloc of the new address, ReAlloc, Free of the old. */
    heap_alloc(c, 7, 70, 0, 3000, 0xB000, 128, F64);
    stack(c, 7, 70, 0, 3000, 0, 0x402000, 1);
    heap_realloc(c, 7, 70, 3001, 0xB000, 0xA000, 128, 64);
    heap_free(c, 7, 70, 3002, 0xA000);
    /* The other order: ReAlloc first, then its Alloc. */
    heap_realloc(c, 7, 71, 4000, 0xC000, 0xB000, 256, 128);
    heap_alloc(c, 7, 71, 0, 4001, 0xC000, 256, F64);
    stack(c, 7, 71, 0, 4001, 0, 0x403000, 1);
    heap_free(c, 7, 71, 4002, 0xB000);
    /* A moving ReAlloc whose Alloc never shows: the self-check counts it. */
    heap_realloc(c, 7, 72, 5000, 0xD000, 0xC000, 512, 256);
    heap_alloc(c, 7, 72, 0, 5001, 0xE000, 8, F64);
    stack(c, 7, 72, 0, 5001, 0, 0x404000, 1);
    etw_corr_flush(c);
    const struct etw_corr_stats *s = etw_corr_stats(c);
    CHECK_EQ(s->realloc_in_place, 1);
    CHECK_EQ(s->realloc_moved, 3);
    CHECK_EQ(s->realloc_moved_unpaired, 1);
    CHECK_EQ(o.n, 1 + 2 + 2 + 1);
    for (unsigned i = 1; i < o.n; i++)
        CHECK(o.ev[i].kind != HT_EV_REALLOC);
    etw_corr_free(c);
}

/* WOW64: a 32-bit process logs 4-byte heap events; its stacks are 8-byte
 * kernel events with 32-bit user addresses. */
static void test_wow64(void)
{
    static struct out o;
    struct etw_corr *c = corr(9, &o);
    CHECK(c);
    heap_alloc(c, 9, 90, 0, 2000, 0x00A4C0D0, 24, F32);
    stack(c, 9, 90, 0, 2000, 4, 0x00401000, 5);
    CHECK_EQ(o.n, 1);
    CHECK(o.ev[0].addr == 0x00A4C0D0 && o.ev[0].size == 24 && o.top[0] == 0x00401000);
    CHECK_EQ(o.depth[0], 5);
    etw_corr_free(c);
}

/* Found by the adversary: a timestamp far past start_qpc made more
 * nanoseconds than 64 bits hold, and the time wrapped to the start of the
 * trace (2^63 ticks at 1 Hz: exactly 0 ns). It saturates at the end of time
 * instead (the engine counts such an event malformed), and an event there
 * still waits its ttl for its stack (ev.t + ttl must not wrap either). */
static void test_time_wrap(void)
{
    static struct out o;
    struct etw_corr_config cfg = {.pid = 7, .qpc_freq = 1, .start_qpc = 0};
    struct etw_corr *c;
    memset(&o, 0, sizeof(o));
    CHECK(etw_corr_new(&c, &cfg, emit_fn, &o) == 0);
    CHECK_EQ(etw_corr_ns(c, 1ull << 63), UINT64_MAX);
    CHECK_EQ(etw_corr_ns(c, UINT64_MAX), UINT64_MAX);
    CHECK_EQ(etw_corr_ns(c, 18446744073ull), 18446744073000000000ull); /* the last that fits */
    CHECK_EQ(etw_corr_ns(c, 18446744074ull), UINT64_MAX);
    heap_alloc(c, 7, 70, 0, 1ull << 63, 0xA000, 16, F64);
    CHECK_EQ(o.n, 0); /* waits for its stack */
    stack(c, 7, 70, 0, 1ull << 63, 0, 0x401000, 3);
    CHECK_EQ(o.n, 1);
    CHECK_EQ(o.ev[0].t, UINT64_MAX);
    CHECK_EQ(o.depth[0], 3);
    /* A stack held at the end of time also waits for its event. */
    stack(c, 7, 71, 0, (1ull << 63) + 5, 0, 0x402000, 2);
    heap_alloc(c, 7, 71, 0, (1ull << 63) + 5, 0xB000, 16, F64);
    CHECK_EQ(o.n, 2);
    CHECK_EQ(o.depth[1], 2);
    etw_corr_flush(c);
    const struct etw_corr_stats *s = etw_corr_stats(c);
    CHECK_EQ(s->stacks_in, s->stacks_matched + s->stacks_unmatched);
    CHECK_EQ(s->stacks_unmatched, 0);
    etw_corr_free(c);
}

/* Randomized: threads make events (some kinds with stacks, some without),
 * stacks come after (mostly), before (sometimes) or never, and stacks of
 * other processes and stray stacks are mixed in. A model that knows which
 * stack each event was given says what must come out: every event of the
 * process exactly once, in arrival order, with its own stack. */
static void test_random_model(void)
{
    static struct out o;
    enum { N = 6000 };
    static uint64_t want_top[N], want_addr[N];
    static unsigned want_depth[N];
    for (unsigned seed = 1; seed <= 6; seed++) {
        srand(seed);
        struct etw_corr *c = corr(7, &o);
        CHECK(c);
        unsigned nwant = 0, nnever = 0;
        uint64_t ts = 5000;
        struct {
            uint64_t ts;
            uint32_t tid;
            uint64_t top;
            int pending;
        } late[8] = {{0}};
        for (unsigned i = 0; i < N; i++) {
            ts += 1 + (uint64_t)(rand() % 50);
            uint32_t tid = 100 + (uint32_t)(rand() % 6);
            int r = rand() % 100;
            /* A late stack of an earlier event on another thread comes now. */
            for (int k = 0; k < 8; k++)
                if (late[k].pending && rand() % 3 == 0) {
                    stack(c, 7, late[k].tid, 0, late[k].ts, 3, late[k].top, 2);
                    late[k].pending = 0;
                }
            if (r < 10) { /* another process, with its stack */
                heap_alloc(c, 8, tid, 0, ts, 0x900000 + i, 8, F64);
                stack(c, 8, tid, 0, ts, 2, 0x990000, 2);
                continue;
            }
            uint64_t addr = 0x100000 + 16 * (uint64_t)i;
            if (r < 35) { /* a free: no stack kind */
                heap_free(c, 7, tid, ts, addr);
                want_addr[nwant] = addr, want_top[nwant] = 0, want_depth[nwant] = 0, nwant++;
                continue;
            }
            uint64_t top = 0x400000 + 64 * (uint64_t)i;
            unsigned depth = 1 + (unsigned)(rand() % 9);
            int how = rand() % 100;
            if (how < 10) { /* stack first */
                stack(c, 7, tid, 0, ts, 2, top, depth);
                heap_alloc(c, 7, tid, 0, ts, addr, 8, F64);
            } else if (how < 80) { /* stack right after */
                heap_alloc(c, 7, tid, 0, ts, addr, 8, F64);
                stack(c, 7, tid, 0, ts, 4, top, depth);
            } else if (how < 90) { /* stack later, after other threads' events */
                heap_alloc(c, 7, tid, 0, ts, addr, 8, F64);
                int k = 0;
                while (k < 8 && late[k].pending)
                    k++;
                if (k == 8) { /* no slot: it comes now */
                    stack(c, 7, tid, 0, ts, 3, top, 2);
                } else {
                    late[k].ts = ts, late[k].tid = tid, late[k].top = top, late[k].pending = 1;
                }
                depth = 2;
            } else { /* never */
                heap_alloc(c, 7, tid, 0, ts, addr, 8, F64);
                top = 0, depth = 0;
                nnever++;
            }
            if (rand() % 50 == 0) /* a stray stack no event has */
                stack(c, 7, tid, 0, ts - 1, 0, 0xBAD000, 1);
            want_addr[nwant] = addr, want_top[nwant] = top, want_depth[nwant] = depth, nwant++;
        }
        for (int k = 0; k < 8; k++)
            if (late[k].pending)
                stack(c, 7, late[k].tid, 0, late[k].ts, 3, late[k].top, 2);
        etw_corr_flush(c);
        CHECK_EQ(o.n, nwant);
        for (unsigned i = 0; i < nwant; i++) {
            if (o.ev[i].addr != want_addr[i] || o.top[i] != want_top[i] ||
                o.depth[i] != want_depth[i]) {
                fprintf(stderr, "seed %u event %u: addr %#llx top %#llx depth %u, want %#llx %#llx %u\n",
                        seed, i, (unsigned long long)o.ev[i].addr, (unsigned long long)o.top[i],
                        o.depth[i], (unsigned long long)want_addr[i],
                        (unsigned long long)want_top[i], want_depth[i]);
                CHECK(0);
            }
            if (i > 0)
                CHECK(o.ev[i].t >= o.ev[i - 1].t);
        }
        const struct etw_corr_stats *s = etw_corr_stats(c);
        CHECK_EQ(s->stacks_unmatched + s->stacks_matched, s->stacks_in);
        CHECK(s->stacks_unmatched > 0);
        /* Those without a stack waited ttl or max_pending events (at ~25 ticks an
         * event, 100 ms is 40,000 events: max_pending comes first). */
        CHECK_EQ(s->events_no_stack, nnever);
        CHECK(s->pending_overflow > 0 && s->pending_overflow <= nnever);
        etw_corr_free(c);
    }
}

/* --- raw streams: seed 000's MemoryTestApp through the whole pipeline ---- */

static struct engine EA, EB;

static int load_into(struct engine *e, const char *buf, size_t n, struct replay *r)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(e, &lim);
    replay_init(r, &e->si, (replay_event_fn)engine_apply, e);
    for (size_t off = 0; off < n; off += 3001) /* pieces that cut lines */
        replay_feed(r, buf + off, n - off < 3001 ? n - off : 3001);
    replay_finish(r);
    return (int)r->malformed;
}

static int row_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(uint64_t) * 8);
}

/* The figures of every group of a query, sorted, without stack ids. */
static unsigned figures(struct engine *e, int dom, uint64_t t1, uint64_t t2, uint64_t (*out)[8])
{
    struct query q;
    struct query_result res;
    hte_query(&q, dom, t1, t2, 0xF, HT_BY_STACK);
    q.top = 100000;
    if (engine_query(e, &q, &res) != 0)
        return 0;
    unsigned n = res.nrows;
    for (unsigned i = 0; i < n; i++) {
        memcpy(out[i], res.rows[i].count, 4 * sizeof(uint64_t));
        memcpy(out[i] + 4, res.rows[i].bytes, 4 * sizeof(uint64_t));
    }
    qsort(out, n, sizeof(out[0]), row_cmp);
    query_result_free(&res);
    return n;
}

static void test_memorytestapp_raw(void)
{
    struct text raw = {0};
    uint64_t t_end = 0;
    CHECK(htev_to_raw(HT_TEST_DATA "/memorytestapp.htev", &raw, &t_end) == 0);
    FILE *f = fopen(HT_TEST_DATA "/memorytestapp.htev", "rb");
    CHECK(f);
    static char htev[1 << 20];
    size_t hn = fread(htev, 1, sizeof(htev), f);
    fclose(f);
    struct replay ra, rb;
    CHECK_EQ(load_into(&EA, raw.s, raw.n, &ra), 0);
    CHECK_EQ(load_into(&EB, htev, hn, &rb), 0);
    CHECK_STR(ra.parser.name, "MemoryTestApp.exe");
    CHECK(ra.etw != NULL);
    struct etw_raw_stats st;
    etw_raw_stats(ra.etw, &st);
    CHECK_EQ(st.corr.events_no_stack, 0);
    CHECK_EQ(st.corr.stacks_unmatched, 0);
    CHECK_EQ(st.corr.stacks_matched, 1250 + 12);
    CHECK_EQ(st.corr.other_process, 1250 + 12 + 1); /* + the other process's image */
    CHECK_EQ(st.corr.kernel_frames, 3 * (1250 + 12));
    CHECK_EQ(st.corr.modules_loaded, 2);
    CHECK_EQ(st.corr.process_exits, 1);
    CHECK_EQ(st.dec.malformed + st.dec.unknown_provider, 0);
    static uint64_t fa[4096][8], fb[4096][8];
    const uint64_t win[][2] = {{0, t_end}, {0, t_end / 2}, {t_end / 3, t_end}, {t_end / 4, t_end / 2}};
    for (int dom = HT_DOM_HEAP; dom <= HT_DOM_COMMIT; dom++)
        for (size_t w = 0; w < sizeof(win) / sizeof(win[0]); w++) {
            unsigned na = figures(&EA, dom, win[w][0], win[w][1], fa);
            unsigned nb = figures(&EB, dom, win[w][0], win[w][1], fb);
            CHECK(na > 0);
            CHECK_EQ(na, nb);
            CHECK(memcmp(fa, fb, na * sizeof(fa[0])) == 0);
        }
    /* Seed 000's leak: what test-golden asserts from WPA, through the ETW path. */
    struct query q;
    struct query_result res;
    hte_query(&q, HT_DOM_HEAP, 0, t_end, 1u << HT_AIFO, HT_BY_STACK);
    CHECK(engine_query(&EA, &q, &res) == 0);
    uint64_t aifo_a = res.total.bytes[HT_AIFO];
    query_result_free(&res);
    CHECK(engine_query(&EB, &q, &res) == 0);
    CHECK_EQ(aifo_a, res.total.bytes[HT_AIFO]);
    CHECK(aifo_a > 0);
    query_result_free(&res);
    replay_close(&ra);
    replay_close(&rb);
    engine_close(&EA);
    engine_close(&EB);
    free(raw.s);
}

/* Hostile raw lines: each is counted malformed with a reason; the stream goes on. */
static void test_raw_hostile(void)
{
    static const char *lines[] = {
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33,\"version\":0,"
        "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":2000,\"payload\":\"0011\"}", /* short */
        "{\"provider\":\"not-a-guid\",\"opcode\":33,\"version\":0,\"flags\":64,\"pid\":5,"
        "\"tid\":6,\"cpu\":0,\"ts\":2000,\"payload\":\"\"}",
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":300,\"version\":0,"
        "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":2000,\"payload\":\"\"}",
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33,\"version\":0,"
        "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":-1,\"payload\":\"\"}",
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33,\"version\":0,"
        "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":2000,\"payload\":\"0g\"}",
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33,\"version\":0,"
        "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":2000,\"payload\":\"001\"}",
        "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33}",
        "[1,2,3]",
        "{\"provider\":",
    };
    struct text t = {0};
    add(&t, "{\"etw_raw\":1,\"qpc_freq\":10000000,\"start_qpc\":\"18446744073709551000\"}\n");
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        add(&t, "%s\n", lines[i]);
    /* A good record after them, with a ts above 2^53 given as a string. */
    struct pl p = {0};
    put(&p, 0x10000, 8), put(&p, 32, 8), put(&p, 0xABC0, 8), put(&p, 2, 4);
    char hx[200];
    hex_of(hx, &p);
    add(&t, "{\"provider\":\"222962ab-6180-4b88-a825-346b75f2a24a\",\"opcode\":33,\"version\":0,"
            "\"flags\":64,\"pid\":5,\"tid\":6,\"cpu\":0,\"ts\":\"18446744073709551100\","
            "\"payload\":\"%s\"}\n", hx);
    struct replay r;
    CHECK_EQ(load_into(&EA, t.s, t.n, &r), 9);
    CHECK_EQ(r.events, 1);
    CHECK_EQ(EA.heap_count, 1);
    CHECK(strstr(r.errors[0].msg, "shorter than its layout") != NULL);
    CHECK(strstr(r.errors[1].msg, "provider") != NULL);
    CHECK(strstr(r.errors[2].msg, "opcode") != NULL);
    CHECK(strstr(r.errors[3].msg, "ts") != NULL);
    replay_close(&r);
    engine_close(&EA);
    /* A header that does not parse: every line after it is malformed. */
    t.n = 0;
    add(&t, "{\"etw_raw\":2,\"qpc_freq\":10000000,\"start_qpc\":0}\n%s\n", lines[0]);
    CHECK_EQ(load_into(&EA, t.s, t.n, &r), 2);
    CHECK(strstr(r.errors[0].msg, "version") != NULL);
    replay_close(&r);
    engine_close(&EA);
    t.n = 0;
    add(&t, "{\"etw_raw\":1,\"qpc_freq\":0,\"start_qpc\":0}\n");
    CHECK_EQ(load_into(&EA, t.s, t.n, &r), 1);
    replay_close(&r);
    engine_close(&EA);
    free(t.s);
}

/* etw_raw_format (what record --raw writes) read back by the raw stream
 * parser: every field, a ts above 2^53 as a string, an empty and a 64 KiB
 * payload; a buffer too small gives 0. And the header. */
static void test_raw_format(void)
{
    static uint8_t big[ETW_RAW_PAYLOAD_MAX];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    struct pl p = {0};
    put(&p, 0x10000, 8), put(&p, 32, 8), put(&p, 0xABC0, 8), put(&p, 2, 4);
    struct etw_record rs[3] = {
        rec(&etw_guid_heap, 33, F64, 5, 6, 3, 18446744073709551100ull, &p),
        rec(&etw_guid_stackwalk, 32, F32, 0xFFFFFFFF, 0xFFFFFFFF, 7, 9007199254740992ull, &p),
        rec(&etw_guid_image, 10, F64, 9, 0, 1, 1, &p),
    };
    rs[1].len = 0;
    rs[2].payload = big;
    rs[2].len = sizeof(big);
    rs[0].version = 2;
    static char line[ETW_RAW_LINE_MAX];
    for (int i = 0; i < 3; i++) {
        size_t n = etw_raw_format(&rs[i], line, sizeof(line));
        CHECK(n > 0 && line[n - 1] == '\n');
        cJSON *o = cJSON_ParseWithLength(line, n);
        CHECK(o != NULL);
        char g[40];
        etw_guid_format(&rs[i].provider, g);
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "provider")), g);
        CHECK_EQ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "opcode")), rs[i].opcode);
        CHECK_EQ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "flags")), rs[i].flags);
        CHECK_EQ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")), rs[i].pid);
        CHECK_EQ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "cpu")), rs[i].cpu);
        const char *hx = cJSON_GetStringValue(cJSON_GetObjectItem(o, "payload"));
        CHECK(hx && strlen(hx) == 2 * rs[i].len);
        for (uint32_t k = 0; hx && k < rs[i].len; k++)
            CHECK_EQ((unsigned)(ht_hexval(hx[2 * k]) << 4 | ht_hexval(hx[2 * k + 1])),
                     rs[i].payload[k]);
        cJSON_Delete(o);
        CHECK_EQ(etw_raw_format(&rs[i], line, n - 1), 0);
    }
    size_t n = etw_raw_format(&rs[0], line, sizeof(line));
    CHECK(strstr(line, "\"ts\":\"18446744073709551100\"") != NULL);
    /* Read back through the stream parser: the alloc comes out. */
    struct text t = {0};
    char h[256];
    size_t hn = etw_raw_header(10000000, 18446744073709551000ull, 5, "a\"b.exe", h, sizeof(h));
    CHECK(hn > 0 && h[hn - 1] == '\n');
    add(&t, "%s%.*s", h, (int)n, line);
    struct engine EA;
    struct replay r;
    CHECK_EQ(load_into(&EA, t.s, t.n, &r), 0); /* malformed lines */
    CHECK_EQ(EA.heap_count, 1);
    CHECK_STR(r.parser.name, "a\"b.exe");
    replay_close(&r);
    engine_close(&EA);
    free(t.s);
    CHECK_EQ(etw_raw_header(1, 2, 0, NULL, h, 8), 0);
}


/* A backend that keeps what it was asked, and fails when told to. */
struct fake_be {
    char log[1024];
    int fail_heap; /* the next n heap_start calls fail */
};

static int fb_heap_start(void *arg, const uint32_t *pids, unsigned n, int stacks, char *err,
                         size_t errsz)
{
    struct fake_be *b = arg;
    size_t k = strlen(b->log);
    k += (size_t)snprintf(b->log + k, sizeof(b->log) - k, "heap(");
    for (unsigned i = 0; i < n; i++)
        k += (size_t)snprintf(b->log + k, sizeof(b->log) - k, "%s%u", i ? "," : "", pids[i]);
    snprintf(b->log + k, sizeof(b->log) - k, "%s) ", stacks ? "/s" : "");
    if (b->fail_heap) {
        b->fail_heap--;
        snprintf(err, errsz, "StartTraceW: no");
        return HT_EINTERNAL;
    }
    return 0;
}
static void fb_heap_stop(void *arg)
{
    struct fake_be *b = arg;
    strcat(b->log, "heap-stop ");
}
static int fb_kernel_start(void *arg, int stacks, char *err, size_t errsz)
{
    struct fake_be *b = arg;
    (void)err, (void)errsz;
    strcat(b->log, stacks ? "kernel/s " : "kernel ");
    return 0;
}
static void fb_kernel_stop(void *arg)
{
    struct fake_be *b = arg;
    strcat(b->log, "kernel-stop ");
}

struct hub_sub_t {
    struct etw_hub_sub sub;
    struct etw_corr *corr[2];
    struct out o;
    unsigned raws, ended;
};
/* What a source does with a record (etw-source-win.c): record --raw sees
 * it as it came; a Lost_Event is a lost event in line; an event goes to the
 * session's correlator. */
static void hs_deliver(void *arg, int session, const struct etw_record *r,
                       const struct etw_decoded *d)
{
    struct hub_sub_t *t = arg;
    t->raws++;
    if (etw_guid_eq(&r->provider, &etw_guid_lost)) {
        if (t->corr[session])
            etw_corr_lost(t->corr[session], 1);
    } else if (d && t->corr[session]) {
        etw_corr_add(t->corr[session], r, d);
    }
}
static void hs_ended(void *arg, int session, const char *why)
{
    (void)session, (void)why;
    ((struct hub_sub_t *)arg)->ended++;
}

static void hub_sub_init(struct hub_sub_t *t, uint32_t pid, int virt)
{
    memset(t, 0, sizeof(*t));
    struct etw_corr_config cfg = {.pid = pid, .qpc_freq = 10000000, .start_qpc = 1000,
                                  .follow_first = pid == 0, .stack_kinds = 1u << 31};
    etw_corr_new(&t->corr[ETW_HUB_HEAP], &cfg, emit_fn, &t->o);
    if (virt)
        etw_corr_new(&t->corr[ETW_HUB_KERNEL], &cfg, emit_fn, &t->o);
    t->sub.pid = pid;
    t->sub.heap = 1;
    t->sub.virt = virt;
    t->sub.stacks = 1;
    t->sub.deliver = hs_deliver;
    t->sub.session_ended = hs_ended;
    t->sub.arg = t;
}

static void hub_sub_free(struct hub_sub_t *t)
{
    etw_corr_free(t->corr[0]);
    etw_corr_free(t->corr[1]);
}

static void hub_heap_alloc(struct etw_hub *h, uint32_t pid, uint64_t ts, uint64_t addr)
{
    struct pl p = {0};
    put(&p, 0x10000, 8), put(&p, 16, 8), put(&p, addr, 8), put(&p, 3, 4);
    struct etw_record r = rec(&etw_guid_heap, 33, F64, pid, 1, 0, ts, &p);
    etw_hub_record(h, ETW_HUB_HEAP, &r);
}

/* The shared sessions: the heap logger's PID list is the union of the
 * targets (restarted, with a gap counted for the others, when one is added;
 * pruned at the next restart), records routed by process, Lost_Event to
 * every subscriber of the session, a failed restart falls back to the old
 * list or tells every subscriber, --exe alone. */
static void test_hub(void)
{
    static struct fake_be be;
    memset(&be, 0, sizeof(be));
    struct etw_hub_backend bk = {&be, fb_heap_start, fb_heap_stop, fb_kernel_start, fb_kernel_stop};
    struct etw_hub *h;
    CHECK(etw_hub_new(&h, &bk) == 0);
    static struct hub_sub_t a, b, c, d, e, x;
    hub_sub_init(&a, 7, 1);
    hub_sub_init(&b, 8, 0);
    char err[256];
    int restarted;
    CHECK_EQ(etw_hub_attach(h, &a.sub, &restarted, err, sizeof(err)), 0);
    CHECK_EQ(restarted, 0);
    CHECK_STR(be.log, "heap(7/s) kernel/s ");
    be.log[0] = 0;
    CHECK_EQ(etw_hub_attach(h, &b.sub, &restarted, err, sizeof(err)), 0);
    CHECK_EQ(restarted, 1);
    CHECK_STR(be.log, "heap-stop heap(7,8/s) ");
    CHECK_EQ(a.sub.restarts, 1);
    CHECK_EQ(b.sub.restarts, 0);
    hub_sub_init(&c, 8, 0);
    CHECK_EQ(etw_hub_attach(h, &c.sub, &restarted, err, sizeof(err)), HT_EEXIST);
    hub_sub_init(&x, 0, 0);
    CHECK_EQ(etw_hub_attach(h, &x.sub, &restarted, err, sizeof(err)), HT_EFULL);
    CHECK(strstr(err, "not both") != NULL);
    CHECK_EQ(etw_hub_count(h), 2);

    /* Routing. */
    hub_heap_alloc(h, 8, 2000, 0xB000);
    hub_heap_alloc(h, 7, 2001, 0xA000);
    hub_heap_alloc(h, 9, 2002, 0xC000); /* nobody's */
    struct pl vp = {0};
    put(&vp, 0x200000, 8), put(&vp, 0x1000, 8), put(&vp, 7, 4), put(&vp, ETW_MEM_COMMIT, 4);
    struct etw_record vr = rec(&etw_guid_pagefault, 98, F64, 0xFFFFFFFF, 0xFFFFFFFF, 0, 2003, &vp);
    etw_hub_record(h, ETW_HUB_KERNEL, &vr);
    struct pl sp = {0};
    put(&sp, 2001, 8), put(&sp, 8, 4), put(&sp, 1, 4), put(&sp, 0x401000, 8);
    struct etw_record sr = rec(&etw_guid_stackwalk, 32, F64, 0xFFFFFFFF, 0xFFFFFFFF, 0, 2004, &sp);
    etw_hub_record(h, ETW_HUB_HEAP, &sr); /* StackProcess 8: b's, though its ts is a's event's */
    struct pl lp = {0};
    struct etw_record lr = rec(&etw_guid_lost, 32, F64, 0, 0, 0, 2005, &lp);
    etw_hub_record(h, ETW_HUB_HEAP, &lr);
    etw_hub_record(h, ETW_HUB_KERNEL, &lr);
    CHECK_EQ(a.o.n, 4); /* alloc, commit, two lost */
    CHECK(a.o.ev[0].kind == HT_EV_ALLOC && a.o.ev[0].addr == 0xA000);
    CHECK(a.o.ev[1].kind == HT_EV_COMMIT && a.o.ev[1].addr == 0x200000);
    CHECK(a.o.ev[2].kind == HT_EV_LOST && a.o.ev[3].kind == HT_EV_LOST);
    CHECK_EQ(b.o.n, 2); /* alloc, the heap session's lost */
    CHECK(b.o.ev[0].kind == HT_EV_ALLOC && b.o.ev[0].addr == 0xB000);
    CHECK(b.o.ev[1].kind == HT_EV_LOST);
    CHECK_EQ(a.raws, 4);
    CHECK_EQ(b.raws, 3);
    CHECK_EQ(a.sub.lost_records, 2);
    CHECK_EQ(b.sub.lost_records, 1);
    struct etw_hub_stats st;
    etw_hub_stats(h, &st);
    CHECK_EQ(st.records, 7);
    CHECK_EQ(st.unrouted, 1);
    CHECK_EQ(st.heap_restarts, 1);
    CHECK_EQ(st.nheap_pids, 2);

    /* Leaving restarts nothing; the next restart drops the pid. */
    be.log[0] = 0;
    etw_hub_detach(h, &b.sub);
    etw_hub_quiesce(&b.sub);
    CHECK_STR(be.log, "");
    hub_heap_alloc(h, 8, 3000, 0xB100);
    CHECK_EQ(b.o.n, 2);
    hub_sub_init(&d, 10, 0);
    d.sub.stacks = 0;
    CHECK_EQ(etw_hub_attach(h, &d.sub, &restarted, err, sizeof(err)), 0);
    CHECK_STR(be.log, "heap-stop heap(7,10/s) ");
    CHECK_EQ(a.sub.restarts, 2);

    /* A restart that fails: back to the old list, the newcomer refused. */
    be.log[0] = 0;
    be.fail_heap = 1;
    hub_sub_init(&e, 11, 0);
    CHECK_EQ(etw_hub_attach(h, &e.sub, &restarted, err, sizeof(err)), HT_EINTERNAL);
    CHECK_STR(be.log, "heap-stop heap(7,10,11/s) heap(7,10/s) ");
    CHECK_EQ(restarted, 1);
    CHECK_EQ(etw_hub_count(h), 2);
    CHECK_EQ(a.sub.restarts, 3);
    CHECK_EQ(e.sub.attached, 0);
    /* ... and when the old list fails too, every heap subscriber is told. */
    be.log[0] = 0;
    be.fail_heap = 2;
    CHECK_EQ(etw_hub_attach(h, &e.sub, &restarted, err, sizeof(err)), HT_EINTERNAL);
    CHECK_EQ(a.ended, 1);
    CHECK_EQ(d.ended, 1);
    CHECK_EQ(e.ended, 0);
    etw_hub_stats(h, &st);
    CHECK_EQ(st.heap_running, 0);
    /* The next attach starts it afresh (no stop: nothing runs). */
    be.log[0] = 0;
    CHECK_EQ(etw_hub_attach(h, &e.sub, &restarted, err, sizeof(err)), 0);
    CHECK_EQ(restarted, 0);
    CHECK_STR(be.log, "heap(7,10,11/s) ");

    /* The last one out stops everything. */
    be.log[0] = 0;
    etw_hub_detach(h, &a.sub);
    etw_hub_detach(h, &d.sub);
    CHECK_STR(be.log, "");
    etw_hub_detach(h, &e.sub);
    CHECK_STR(be.log, "heap-stop kernel-stop ");

    /* --exe: PID 0, every process's heap records, alone. */
    be.log[0] = 0;
    CHECK_EQ(etw_hub_attach(h, &x.sub, &restarted, err, sizeof(err)), 0);
    CHECK_STR(be.log, "heap(0/s) ");
    hub_heap_alloc(h, 31, 4000, 0xA000);
    hub_heap_alloc(h, 32, 4001, 0xA000); /* another process of the image: followed is 31 */
    CHECK_EQ(x.o.n, 1);
    CHECK_EQ(etw_corr_stats(x.corr[0])->followed_pid, 31);
    hub_sub_free(&c); /* refused above, never attached: its correlator goes before the next */
    hub_sub_init(&c, 8, 0);
    CHECK_EQ(etw_hub_attach(h, &c.sub, &restarted, err, sizeof(err)), HT_EFULL);
    etw_hub_session_ended(h, ETW_HUB_HEAP, "ProcessTrace ended with error 5");
    CHECK_EQ(x.ended, 1);
    etw_hub_free(h); /* stops what runs */
    CHECK(strstr(be.log, "heap-stop") != NULL);
    struct hub_sub_t *all[] = {&a, &b, &c, &d, &e, &x};
    for (int i = 0; i < 6; i++)
        hub_sub_free(all[i]);
}


/* The raw stream's fast path (lines exactly as etw_raw_format writes them)
 * against cJSON on every line: random records of every provider (heap,
 * VirtualAlloc, StackWalk, Process, Image, unknown), every field at random
 * up to its bound, ts above 2^53, payloads empty to 600 bytes; then the same
 * lines with a byte changed at random (which the fast path must either read
 * exactly as cJSON does or leave to it). Same return codes, same events,
 * same counters. */
struct fp_out {
    struct ht_event ev[4096];
    unsigned n;
};
static void fp_event(void *arg, const struct ht_event *ev)
{
    struct fp_out *o = arg;
    if (o->n < 4096)
        o->ev[o->n] = *ev;
    o->n++;
}

static void test_raw_fast_path(void)
{
    static char line[ETW_RAW_LINE_MAX];
    static uint8_t pl[600];
    const struct etw_guid *provs[] = {&etw_guid_heap,    &etw_guid_pagefault, &etw_guid_stackwalk,
                                      &etw_guid_process, &etw_guid_image,     &etw_guid_lost};
    const char *hdr = "{\"etw_raw\":1,\"qpc_freq\":10000000,\"start_qpc\":1000,"
                      "\"process\":{\"pid\":7,\"name\":\"a.exe\"}}";
    for (int mutate = 0; mutate < 2; mutate++) {
        struct stack_intern sa, sb;
        stack_intern_init(&sa, 1u << 16, 1u << 16);
        stack_intern_init(&sb, 1u << 16, 1u << 16);
        static struct fp_out oa, ob;
        memset(&oa, 0, sizeof(oa));
        memset(&ob, 0, sizeof(ob));
        struct etw_raw *fa, *fb;
        char err[160], erra[160], errb[160];
        CHECK_EQ(etw_raw_new(&fa, &sa, hdr, strlen(hdr), fp_event, &oa, err, sizeof(err)), 0);
        CHECK_EQ(etw_raw_new(&fb, &sb, hdr, strlen(hdr), fp_event, &ob, err, sizeof(err)), 0);
        etw_raw_slow_only(fb, 1);
        uint64_t seed = 12345 + (uint64_t)mutate;
        unsigned differ = 0, bad = 0;
        for (int i = 0; i < 20000; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t x = seed >> 11;
            struct etw_guid other = {{(uint8_t)x, 2, 3}};
            struct etw_record r = {
                .provider = x % 7 < 6 ? *provs[x % 7] : other,
                .opcode = (uint8_t)(x % 3 == 0 ? (x >> 8) : (uint8_t[]){33, 34, 36, 32, 98, 99, 10, 1, 2, 3}[(x >> 8) % 10]),
                .version = (uint8_t)((x >> 16) % 5),
                .flags = (uint16_t)((x >> 20) & 1 ? ETW_HDR_FLAG_64_BIT_HEADER : ETW_HDR_FLAG_32_BIT_HEADER),
                .pid = (x >> 21) % 4 == 0 ? 0xFFFFFFFFu : (uint32_t)(7 + (x >> 23) % 2),
                .tid = (uint32_t)((x >> 25) % 3),
                .cpu = (uint32_t)((x >> 27) % 2),
                .ts = (x >> 29) % 50 == 0 ? 9007199254740993ull + (x >> 29) : 1000 + (uint64_t)i * 7,
                .payload = pl,
                .len = (uint32_t)((x >> 35) % 9 == 0 ? 0 : (x >> 35) % 600)};
            for (uint32_t k = 0; k < r.len; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                pl[k] = (uint8_t)(k < 16 ? (seed >> 33) & 0x0F : seed >> 40);
            }
            size_t n = etw_raw_format(&r, line, sizeof(line));
            CHECK(n > 0);
            n--; /* the line without its '\n' */
            if (mutate) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                line[(seed >> 20) % n] = "0a:\",} 9-\"F"[(seed >> 40) % 11];
            }
            erra[0] = errb[0] = 0;
            int ra = etw_raw_line(fa, line, n, erra, sizeof(erra));
            int rb = etw_raw_line(fb, line, n, errb, sizeof(errb));
            differ += ra != rb || strcmp(erra, errb) != 0;
            bad += ra < 0;
        }
        etw_raw_finish(fa);
        etw_raw_finish(fb);
        CHECK_EQ(differ, 0);
        if (mutate)
            CHECK(bad > 1000); /* the mutations did break lines */
        else
            CHECK(bad < 20000);
        CHECK_EQ(oa.n, ob.n);
        fprintf(stderr, "%s: %u events, %u malformed of 20000 lines\n", mutate ? "mutated" : "formatted", oa.n, bad);
        CHECK(oa.n > 20);
        unsigned same = 0;
        for (unsigned k = 0; k < oa.n && k < 4096; k++) {
            struct ht_event a = oa.ev[k], b = ob.ev[k];
            unsigned da = 0, db = 0;
            const uint64_t *fa_ = stack_intern_frames(&sa, a.stack, &da);
            const uint64_t *fb_ = stack_intern_frames(&sb, b.stack, &db);
            a.stack = b.stack = 0;
            same += memcmp(&a, &b, sizeof(a)) == 0 && da == db &&
                    (da == 0 || memcmp(fa_, fb_, da * sizeof(uint64_t)) == 0);
        }
        CHECK_EQ(same, oa.n < 4096 ? oa.n : 4096);
        struct etw_raw_stats st_a, st_b;
        etw_raw_stats(fa, &st_a);
        etw_raw_stats(fb, &st_b);
        CHECK(memcmp(&st_a.dec, &st_b.dec, sizeof(st_a.dec)) == 0);
        CHECK(memcmp(&st_a.corr, &st_b.corr, sizeof(st_a.corr)) == 0);
        etw_raw_free(fa);
        etw_raw_free(fb);
        stack_intern_close(&sa);
        stack_intern_close(&sb);
    }
}

/* The heap logger's properties: the worked example of
 * docs/windows.md#the-heap-logger-session, DWORD
 * for DWORD (name "heaptraced-heap", PID 1234, Alloc, ReAlloc and Free). */
static void test_heap_props(void)
{
    static uint8_t b[4096];
    char err[128];
    const uint32_t pid = 1234;
    const uint16_t hooks[] = {ETW_HOOK_HEAP_ALLOC, ETW_HOOK_HEAP_REALLOC, ETW_HOOK_HEAP_FREE};
    struct etw_session_spec s = {.guid = &etw_guid_heap, .name = "heaptraced-heap",
                                 .log_file_mode = ETW_REAL_TIME_MODE, .buffer_kb = 1024,
                                 .min_buffers = 256, .max_buffers = 330, .flush_timer_s = 1,
                                 .pids = &pid, .npids = 1, .hooks = hooks, .nhooks = 3};
    size_t n = etw_props_build(b, sizeof(b), &s, 0, err, sizeof(err));
    CHECK_EQ(n, 180);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_BUFFER_SIZE), 180);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_ENABLE_FLAGS), 0x80FF0098u);
    static const uint32_t want[] = {0x00020007, 0x00020002, 0x000004D2, 0x00030004,
                                    0x00001021, 0x00001022, 0x00001024};
    for (unsigned i = 0; i < 7; i++)
        CHECK_EQ(etw_props_u32(b, 152 + 4 * i), want[i]);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_LOGGER_NAME), 120);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_LOG_FILE_NAME), 0);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_WNODE_FLAGS), ETW_WNODE_FLAG_TRACED_GUID);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_CLIENT_CONTEXT), 1);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_BUFFER_KB), 1024);
    CHECK(b[120] == 'h' && b[121] == 0 && b[148] == 'p' && b[150] == 0 && b[151] == 0);
    /* Wnode.Guid as the GUID struct lies in memory (Data1 little-endian). */
    static const uint8_t g[16] = {0xab, 0x62, 0x29, 0x22, 0x80, 0x61, 0x88, 0x4b,
                                  0xa8, 0x25, 0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a};
    CHECK(memcmp(b + ETW_PROPS_OFF_GUID, g, 16) == 0);
    /* Exe mode: PID 0 and no hook list; a name that ends off 8 is aligned. */
    const uint32_t zero = 0;
    s.name = "ht-heap";
    s.pids = &zero;
    s.nhooks = 0;
    n = etw_props_build(b, sizeof(b), &s, 64, err, sizeof(err));
    CHECK_EQ(n, 136 + 12 + 64);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_ENABLE_FLAGS), 0x80FF0088u);
    CHECK_EQ(etw_props_u32(b, 136), 0x00010003);
    CHECK_EQ(etw_props_u32(b, 140), 0x00020002);
    CHECK_EQ(etw_props_u32(b, 144), 0);
    /* The system logger: flags, no block. */
    struct etw_session_spec k = {.guid = &etw_guid_heap, .name = "heaptraced-kernel",
                                 .log_file_mode = ETW_REAL_TIME_MODE | ETW_SYSTEM_LOGGER_MODE,
                                 .enable_flags = ETW_FLAG_PROCESS | ETW_FLAG_THREAD |
                                                 ETW_FLAG_IMAGE_LOAD | ETW_FLAG_VIRTUAL_ALLOC};
    n = etw_props_build(b, sizeof(b), &k, 0, err, sizeof(err));
    CHECK_EQ(n, 120 + 36);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_ENABLE_FLAGS), 0x4007);
    CHECK_EQ(etw_props_u32(b, ETW_PROPS_OFF_LOG_FILE_MODE), 0x02000100u);
    /* Bad specs and small buffers. */
    k.name = "";
    CHECK_EQ(etw_props_build(b, sizeof(b), &k, 0, err, sizeof(err)), 0);
    k.name = "bad\nname";
    CHECK_EQ(etw_props_build(b, sizeof(b), &k, 0, err, sizeof(err)), 0);
    k.name = "ok";
    CHECK_EQ(etw_props_build(b, 125, &k, 0, err, sizeof(err)), 0);
    s.npids = ETW_EXT_MAX_PIDS + 1;
    CHECK_EQ(etw_props_build(b, sizeof(b), &s, 0, err, sizeof(err)), 0);
}

#include <uv.h>
/* Found by the adversary: ETW delivers each processor's buffers whole, so
 * one processor's events can come after another's newer ones (up to the
 * session's FlushTimer, 1 s, docs/windows.md#real-time-consumption), each followed by its
 * stack. The ttl was measured from the event's own timestamp: a late event
 * left at once, without the stack right behind it (of 1,000,000 events with
 * timestamps going back and forth, 454,545 lost their stacks through load).
 * The ttl now runs from when it arrived, in stream time. */
static void test_late_buffer(void)
{
    static struct out o;
    struct etw_corr *c = corr(7, &o);
    CHECK(c);
    for (unsigned i = 0; i < 10; i++) { /* processor 0 up to 1 s */
        heap_alloc(c, 7, 70, 0, 1000 + i * 1000000, 0x1000 * (i + 1), 8, F64);
        stack(c, 7, 70, 0, 1000 + i * 1000000, 0, 0x401000, 1);
    }
    CHECK_EQ(o.n, 10);
    /* Processor 1's buffer, 0.5 s older: its events and their stacks. */
    for (unsigned i = 0; i < 5; i++) {
        heap_alloc(c, 7, 71, 1, 5000000 + i, 0x100000 + i, 8, F64);
        stack(c, 7, 71, 1, 5000000 + i, 0, 0x402000, 2);
    }
    CHECK_EQ(o.n, 15);
    for (unsigned i = 10; i < 15; i++) {
        CHECK_EQ(o.top[i], 0x402000);
        CHECK_EQ(o.depth[i], 2);
    }
    /* A late event whose stack never comes still waits a ttl of stream time. */
    heap_alloc(c, 7, 72, 1, 5000100, 0x200000, 8, F64);
    CHECK_EQ(o.n, 15);
    heap_free(c, 7, 70, 1000 + 9 * 1000000 + 999000, 0x1000); /* 99.9 ms later */
    CHECK_EQ(o.n, 15);
    heap_free(c, 7, 70, 1000 + 9 * 1000000 + 1000100, 0x2000); /* past 100 ms */
    CHECK_EQ(o.n, 18);
    CHECK_EQ(o.depth[15], 0);
    /* A stack held on arrival waits a ttl of stream time too. */
    stack(c, 7, 73, 1, 6000000, 0, 0x403000, 3);
    heap_free(c, 7, 70, 1000 + 9 * 1000000 + 1500000, 0x3000); /* 50 ms after it came */
    heap_alloc(c, 7, 73, 1, 6000000, 0x300000, 8, F64);
    CHECK_EQ(o.n, 20);
    CHECK_EQ(o.depth[19], 3);
    etw_corr_flush(c);
    const struct etw_corr_stats *st = etw_corr_stats(c);
    CHECK_EQ(st->stacks_in, 16);
    CHECK_EQ(st->stacks_matched, 16);
    CHECK_EQ(st->stacks_unmatched, 0);
    CHECK_EQ(st->events_no_stack, 1);
    etw_corr_free(c);
}

/* 50,000 stray stacks against 8192 waiting events (4096 heap events on
 * threads 1000.., 4096 VirtualAllocs on processors 0..): all of one
 * timestamp (equal), or each event and stack of its own (the baseline): the
 * seconds they took into *secs; the counters are checked. */
static void stray_storm(int equal, double *secs)
{
    static struct out o;
    struct etw_corr_config cfg = {.pid = 7, .qpc_freq = 10000000, .start_qpc = 0};
    struct etw_corr *c;
    memset(&o, 0, sizeof(o));
    CHECK(etw_corr_new(&c, &cfg, emit_fn, &o) == 0);
    for (unsigned i = 0; i < 4096; i++)
        heap_alloc(c, 7, 1000 + i, 0, equal ? 5000 : 5000 + i, 0x1000 * (i + 1), 8, F64);
    for (unsigned i = 0; i < 4096; i++)
        virt_op(c, 7, i, equal ? 5000 : 9096 + i, 0x10000000 + 0x1000 * (uint64_t)i, 0x1000,
                ETW_MEM_COMMIT, 98);
    uint64_t t0 = uv_hrtime();
    for (unsigned i = 0; i < 50000; i++)
        stack(c, 7, 900000 + i, 5000 + i, equal ? 5000 : 20000 + i, 0, 0x401000, 1);
    *secs = (double)(uv_hrtime() - t0) / 1e9;
    CHECK_EQ(o.n, 4096); /* the allocs left when the VirtualAllocs needed room */
    /* Their own stacks still find them: processor 17's VirtualAlloc. */
    stack(c, 7, 77, 17, equal ? 5000 : 9096 + 17, 0, 0x402000, 2);
    etw_corr_flush(c);
    CHECK_EQ(o.n, 8192);
    CHECK_EQ(o.top[4096 + 17], 0x402000);
    CHECK_EQ(o.ev[4096 + 17].tid, 77);
    const struct etw_corr_stats *st = etw_corr_stats(c);
    CHECK_EQ(st->stacks_in, 50001);
    CHECK_EQ(st->stacks_matched, 1);
    CHECK_EQ(st->stacks_in, st->stacks_matched + st->stacks_unmatched);
    CHECK_EQ(st->pending_overflow, 4096);
    etw_corr_free(c);
}

/* Found by the adversary: events with one timestamp on many threads all
 * hashed to one bucket, and every stack of that timestamp walked the whole
 * chain (max_pending entries): 200,000 stray stacks against 8192 waiting
 * events took 8.96 s, 0.15 s once events are hashed by thread (or processor)
 * too. Timed against the same storm with distinct timestamps (so the check
 * holds in slow sanitizer builds): before the fix it took over 20 times
 * the baseline. */
static void test_equal_ts_storm(void)
{
    double base = 0, equal = 0;
    stray_storm(0, &base);
    stray_storm(1, &equal);
    fprintf(stderr, "50,000 stray stacks against 8192 waiting events: %.3f s, %.3f s with one "
                    "timestamp\n", base, equal);
    CHECK(equal < 4 * base + 0.05);
}


/* A Process event of version ver in pointer size P: pid, parent, exit
 * status, a SID with nsub sub-authorities (or a null one), name; trailing
 * command line. */
static struct pl process_payload(unsigned P, unsigned ver, uint32_t pid, uint32_t exit_status,
                                 int sid, unsigned nsub, const char *name)
{
    struct pl p = {0};
    put(&p, 0x1234, P), put(&p, pid, 4), put(&p, 4, 4), put(&p, 1, 4), put(&p, exit_status, 4);
    if (ver >= 3)
        put(&p, 0x1AD000, P);
    if (ver >= 4)
        put(&p, 0, 4); /* Flags */
    if (sid) {
        put(&p, 0xABCD, P), put(&p, 0, P); /* TOKEN_USER */
        put(&p, 1, 1), put(&p, nsub, 1);
        for (int k = 0; k < 5; k++)
            put(&p, 0, 1);
        put(&p, 5, 1);
        for (unsigned k = 0; k < nsub; k++)
            put(&p, 21 + k, 4);
    } else {
        put(&p, 0, 4);
    }
    for (const char *c = name; *c; c++)
        put(&p, (unsigned char)*c, 1);
    put(&p, 0, 1);
    put(&p, 'x', 2), put(&p, 0, 2); /* CommandLine "x" */
    return p;
}

static struct pl image_payload(unsigned P, uint64_t base, uint64_t size, uint32_t pid,
                               const uint16_t *name, unsigned nname)
{
    struct pl p = {0};
    put(&p, base, P), put(&p, size, P), put(&p, pid, 4), put(&p, 0, 4), put(&p, 0, 4),
        put(&p, 0, 4), put(&p, base, P);
    for (int k = 0; k < 4; k++)
        put(&p, 0, 4);
    for (unsigned k = 0; k < nname; k++)
        put(&p, name[k], 2);
    return p;
}

/* Process and Image events: every version we read, both pointer sizes, null
 * and real SIDs, names to UTF-8 (surrogate pairs, lone surrogates), and
 * payloads cut anywhere: malformed, never read past the end. */
static void test_process_image(void)
{
    for (int wide = 0; wide < 2; wide++) {
        unsigned P = wide ? 8 : 4;
        uint16_t fl = wide ? F64 : F32;
        for (unsigned ver = 2; ver <= 5; ver++) {
            for (int sid = 0; sid < 2; sid++) {
                struct etw_decode_stats st = {0};
                struct etw_decoded d;
                struct pl p = process_payload(P, ver, 4242, 0xC0000005u, sid, 5, "app.exe");
                struct etw_record r = rec(&etw_guid_process, 2, fl, 4242, 0, 0, 1, &p);
                r.version = (uint8_t)ver;
                CHECK_EQ(etw_decode(&r, &d, &st), 1);
                CHECK_EQ(d.kind, ETW_PROCESS_END);
                CHECK_EQ(d.owner_pid, 4242);
                CHECK_EQ(d.old_addr, 4);
                CHECK_EQ(d.vflags, 0xC0000005u);
                char name[64];
                etw_name_utf8(&d, name, sizeof(name));
                CHECK_STR(name, "app.exe");
                /* Cut before the name's terminator: malformed. */
                uint32_t full = p.n;
                for (uint32_t cut = 0; cut < full - 4; cut++) {
                    r.len = cut;
                    CHECK_EQ(etw_decode(&r, &d, &st), -1);
                }
                CHECK_EQ(st.malformed, full - 4);
            }
        }
        /* Version 1 (before Vista): counted, not read. */
        struct etw_decode_stats st = {0};
        struct etw_decoded d;
        struct pl p = process_payload(P, 2, 1, 0, 0, 0, "a");
        struct etw_record r = rec(&etw_guid_process, 1, fl, 1, 0, 0, 1, &p);
        r.version = 1;
        CHECK_EQ(etw_decode(&r, &d, &st), 0);
        CHECK_EQ(st.old_versions, 1);
        /* DCEnd and Terminate are not used. */
        r.version = 4;
        r.opcode = 4;
        CHECK_EQ(etw_decode(&r, &d, &st), 0);
        r.opcode = 11;
        CHECK_EQ(etw_decode(&r, &d, &st), 0);
        CHECK_EQ(st.ignored_opcode, 2);

        /* Image: "C:\\é𝄞" with a lone surrogate after it, then the terminator. */
        const uint16_t nm[] = {'C', ':', '\\', 0xE9, 0xD834, 0xDD1E, 0xDC00, 'x', 0};
        struct pl ip = image_payload(P, 0x7FF600000000ull >> (wide ? 0 : 24), 0x5000, 77, nm, 9);
        struct etw_record ir = rec(&etw_guid_image, 10, fl, 77, 0, 0, 1, &ip);
        ir.version = 3;
        memset(&st, 0, sizeof(st));
        CHECK_EQ(etw_decode(&ir, &d, &st), 1);
        CHECK_EQ(d.kind, ETW_IMAGE_LOAD);
        CHECK_EQ(d.addr, 0x7FF600000000ull >> (wide ? 0 : 24));
        CHECK_EQ(d.size, 0x5000);
        CHECK_EQ(d.owner_pid, 77);
        char name[64];
        etw_name_utf8(&d, name, sizeof(name));
        CHECK_STR(name, "C:\\\xC3\xA9\xF0\x9D\x84\x9E\xEF\xBF\xBDx");
        /* Cut into a character: the whole character is left out. */
        CHECK_EQ(etw_name_utf8(&d, name, 7), 5);
        CHECK_STR(name, "C:\\\xC3\xA9");
        /* The same event as the Process group's opcode 10
         * (docs/windows.md#process-and-image-events-symbols). */
        ir.provider = etw_guid_process;
        CHECK_EQ(etw_decode(&ir, &d, &st), 1);
        CHECK_EQ(d.kind, ETW_IMAGE_LOAD);
        ir.provider = etw_guid_image;
        ir.opcode = 2;
        CHECK_EQ(etw_decode(&ir, &d, &st), 1);
        CHECK_EQ(d.kind, ETW_IMAGE_UNLOAD);
        ir.opcode = 3;
        CHECK_EQ(etw_decode(&ir, &d, &st), 1);
        CHECK_EQ(d.kind, ETW_IMAGE_LOAD);
        ir.opcode = 4;
        CHECK_EQ(etw_decode(&ir, &d, &st), 0);
        /* No terminator: malformed; an odd trailing byte too. */
        ir.opcode = 10;
        for (uint32_t cut = 0; cut < ip.n; cut++) {
            ir.len = cut;
            CHECK_EQ(etw_decode(&ir, &d, &st), -1);
        }
        CHECK_EQ(st.malformed, ip.n);
    }
}

static void test_dos_path(void)
{
    struct etw_dosmap m = {0};
    snprintf(m.v[0].device, sizeof(m.v[0].device), "\\Device\\HarddiskVolume1");
    snprintf(m.v[0].drive, sizeof(m.v[0].drive), "D:");
    snprintf(m.v[1].device, sizeof(m.v[1].device), "\\Device\\HarddiskVolume10");
    snprintf(m.v[1].drive, sizeof(m.v[1].drive), "C:");
    m.n = 2;
    snprintf(m.system_root, sizeof(m.system_root), "C:\\Windows");
    char out[64];
    CHECK_EQ(etw_dos_path(&m, "\\Device\\HarddiskVolume10\\a\\b.dll", out, sizeof(out)), 10);
    CHECK_STR(out, "C:\\a\\b.dll");
    etw_dos_path(&m, "\\device\\harddiskvolume1\\x.exe", out, sizeof(out));
    CHECK_STR(out, "D:\\x.exe");
    etw_dos_path(&m, "\\SystemRoot\\System32\\ntdll.dll", out, sizeof(out));
    CHECK_STR(out, "C:\\Windows\\System32\\ntdll.dll");
    etw_dos_path(&m, "\\Device\\HarddiskVolume2\\y.dll", out, sizeof(out));
    CHECK_STR(out, "\\Device\\HarddiskVolume2\\y.dll"); /* no pair: as it is */
    etw_dos_path(&m, "\\Device\\HarddiskVolume1", out, sizeof(out));
    CHECK_STR(out, "\\Device\\HarddiskVolume1"); /* the device alone is no file */
    CHECK_EQ(etw_dos_path(&m, "\\Device\\HarddiskVolume10\\a\\b.dll", out, 8), -1);
    CHECK_EQ(strlen(out), 7);
    CHECK_EQ(etw_dos_path(NULL, "x", out, sizeof(out)), 1);
}

struct names {
    char path[8][128];
    unsigned n;
    uint32_t pid;
    char pname[64];
    unsigned nproc;
};

static uint32_t names_path(void *arg, const char *path)
{
    struct names *nm = ((struct names **)arg)[1];
    if (nm->n == 8)
        return 0;
    snprintf(nm->path[nm->n], sizeof(nm->path[0]), "%s", path);
    return ++nm->n;
}

static void names_process(void *arg, uint32_t pid, const char *name)
{
    struct names *nm = ((struct names **)arg)[1];
    nm->pid = pid;
    snprintf(nm->pname, sizeof(nm->pname), "%s", name);
    nm->nproc++;
}

static void names_emit(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    emit_fn(((struct out **)arg)[0], ev, frames, depth);
}

/* Image events of the traced process become module events in stream order;
 * another process's do not; its End is the exit with its status; with
 * follow_first the first process to log a heap event is the traced one. */
static void test_modules_and_follow(void)
{
    static struct out o;
    static struct names nm;
    memset(&o, 0, sizeof(o));
    memset(&nm, 0, sizeof(nm));
    void *args[2] = {&o, &nm};
    struct etw_corr_config cfg = {.pid = 7, .qpc_freq = 10000000, .start_qpc = 1000,
                                  .path = names_path, .process = names_process};
    struct etw_corr *c;
    CHECK(etw_corr_new(&c, &cfg, names_emit, args) == 0);
    const uint16_t a[] = {'a', '.', 'd', 'l', 'l', 0}, b[] = {'b', '.', 'd', 'l', 'l', 0};
    struct pl p = process_payload(8, 4, 7, 0, 1, 2, "seven.exe");
    struct etw_record r = rec(&etw_guid_process, 3, F64, 7, 0, 0, 1500, &p);
    r.version = 4;
    feed(c, &r);
    CHECK_EQ(nm.nproc, 1);
    CHECK_STR(nm.pname, "seven.exe");
    heap_alloc(c, 7, 70, 0, 2000, 0xA000, 16, F64); /* waits for its stack */
    struct pl ia = image_payload(8, 0x10000000, 0x1000, 7, a, 6);
    struct pl ib = image_payload(8, 0x20000000, 0x1000, 8, b, 6);
    struct etw_record ra = rec(&etw_guid_image, 10, F64, 7, 0, 0, 2001, &ia);
    struct etw_record rb = rec(&etw_guid_image, 10, F64, 8, 0, 0, 2002, &ib);
    ra.version = rb.version = 3;
    feed(c, &ra);
    feed(c, &rb);
    CHECK_EQ(o.n, 0); /* the load waits behind the alloc: order kept */
    stack(c, 7, 70, 0, 2000, 0, 0x10000100, 2);
    CHECK_EQ(o.n, 2);
    CHECK(o.ev[0].kind == HT_EV_ALLOC);
    CHECK(o.ev[1].kind == HT_EV_MODULE_LOAD && o.ev[1].addr == 0x10000000 &&
          o.ev[1].size == 0x1000 && o.ev[1].old_addr == 0x10000000 && o.ev[1].heap == 1);
    CHECK_EQ(nm.n, 1);
    CHECK_STR(nm.path[0], "a.dll");
    ra.opcode = 2;
    ra.ts = 2100;
    feed(c, &ra);
    CHECK(o.ev[2].kind == HT_EV_MODULE_UNLOAD && o.ev[2].addr == 0x10000000);
    struct pl pe = process_payload(8, 4, 7, 3, 0, 0, "seven.exe");
    r = rec(&etw_guid_process, 2, F64, 7, 0, 0, 2200, &pe);
    r.version = 4;
    feed(c, &r);
    CHECK(o.ev[3].kind == HT_EV_EXIT && o.ev[3].size == 3);
    etw_corr_flush(c);
    const struct etw_corr_stats *st = etw_corr_stats(c);
    CHECK_EQ(st->modules_loaded, 1);
    CHECK_EQ(st->modules_unloaded, 1);
    CHECK_EQ(st->process_exits, 1);
    CHECK_EQ(st->other_process, 1);
    etw_corr_free(c);

    /* Following the first process (start --exe). */
    memset(&o, 0, sizeof(o));
    memset(&nm, 0, sizeof(nm));
    struct etw_corr_config fc = {.qpc_freq = 10000000, .start_qpc = 1000, .follow_first = 1,
                                 .stack_kinds = 1u << 31, .process = names_process};
    CHECK(etw_corr_new(&c, &fc, names_emit, args) == 0);
    heap_alloc(c, 31, 1, 0, 2000, 0xA000, 16, F64);
    heap_alloc(c, 32, 2, 0, 2001, 0xA000, 16, F64); /* the same address in another process */
    heap_free(c, 32, 2, 2002, 0xA000);
    heap_free(c, 31, 1, 2003, 0xA000);
    etw_corr_flush(c);
    CHECK_EQ(o.n, 2);
    CHECK(o.ev[0].kind == HT_EV_ALLOC && o.ev[1].kind == HT_EV_FREE);
    CHECK_EQ(nm.nproc, 1);
    CHECK_EQ(nm.pid, 31);
    st = etw_corr_stats(c);
    CHECK_EQ(st->followed_pid, 31);
    CHECK_EQ(st->other_process, 2);
    etw_corr_free(c);

    /* --exe's system-logger correlator never sees a heap event: before the
     * followed process is known (from the heap correlator, etw_corr_follow)
     * its records name processes that are not yet anyone's, skipped and
     * counted; once told, only the followed process's are kept. */
    memset(&o, 0, sizeof(o));
    memset(&nm, 0, sizeof(nm));
    fc.path = names_path;
    CHECK(etw_corr_new(&c, &fc, names_emit, args) == 0);
    struct pl i50 = image_payload(8, 0x30000000, 0x1000, 50, a, 6);
    struct etw_record r50 = rec(&etw_guid_image, 3, F64, 50, 0, 0, 2000, &i50);
    r50.version = 3;
    feed(c, &r50); /* the rundown of another process at the start */
    etw_corr_flush(c);
    CHECK_EQ(o.n, 0);
    st = etw_corr_stats(c);
    CHECK_EQ(st->before_follow, 1);
    CHECK_EQ(st->modules_loaded, 0);
    etw_corr_follow(c, 31);
    struct pl i31 = image_payload(8, 0x10000000, 0x1000, 31, b, 6);
    struct etw_record r31 = rec(&etw_guid_image, 10, F64, 31, 0, 0, 2100, &i31);
    r31.version = r50.version = 3;
    r50.ts = 2101;
    feed(c, &r31);
    feed(c, &r50);
    etw_corr_flush(c);
    CHECK_EQ(o.n, 1);
    CHECK(o.ev[0].kind == HT_EV_MODULE_LOAD && o.ev[0].addr == 0x10000000);
    st = etw_corr_stats(c);
    CHECK_EQ(st->followed_pid, 31);
    CHECK_EQ(st->other_process, 1);
    CHECK_EQ(st->before_follow, 1);
    etw_corr_free(c);
}

HT_TEST_MAIN(T(guids), T(process_image), T(modules_and_follow), T(dos_path), T(raw_format), T(hub), T(raw_fast_path), T(heap_layouts), T(longer_and_short), T(real_vectors), T(correlate),
             T(ttl_and_overflow), T(realloc), T(wow64), T(random_model),
             T(memorytestapp_raw), T(raw_hostile), T(heap_props), T(time_wrap), T(equal_ts_storm), T(late_buffer))
