/* .etl records into heaptrace events: each record as the ETW consumer delivers it
 * (EVENT_RECORD's provider, opcode, flags, ids and UserData), then the decoder and the stack
 * correlator that the live source and raw streams use. */
#include "etl-events.h"
#include "etl-keys.h"

#include "ht-error.h"
#include <uv.h>
#include "stack-intern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct etl_events {
    struct stack_intern *si;
    struct etw_corr *corr;
    etl_event_fn fn;
    void *arg;
    uint32_t pid;          /* the traced process when the caller named it */
    int announced;         /* its process event sent */
    uint32_t events_lost;  /* the header's EventsLost */
    uint64_t from, to;     /* etl_events_window */
    struct etl_keys *keys; /* stack-key definitions (etl_events_run's first pass) */
    uint8_t *scratch;      /* a resolved key reference as an inline stack payload */
    struct etl_events_stats st;
};

/* Kernel records carry a HookId, Group << 8 | Type; the consumer names them by the classic
 * provider of the group and the Type as opcode (ntwmi.h EVENT_TRACE_GROUP_*). Image Load
 * (0x030A) is in the Process group; the decoder takes it there as opcode 10. */
static const struct etw_guid *group_provider(unsigned group)
{
    switch (group) {
    case 0x02:
        return &etw_guid_pagefault;
    case 0x03:
        return &etw_guid_process;
    case 0x10:
        return &etw_guid_heap;
    case 0x14:
        return &etw_guid_image;
    case 0x18:
        return &etw_guid_stackwalk;
    default:
        return NULL;
    }
}

int etl_to_etw(const struct etl_record *r, struct etw_record *out)
{
    memset(out, 0, sizeof(*out));
    if (r->has_guid) {
        etw_guid_from_struct(r->guid, &out->provider);
    } else {
        const struct etw_guid *g = group_provider(r->hook >> 8);
        if (!g)
            return 0;
        out->provider = *g;
    }
    out->opcode = r->opcode;
    out->version = (uint8_t)r->version;
    /* The consumer sets these from the header type (32/64 variants). */
    out->flags = r->ptr_size == 4 ? ETW_HDR_FLAG_32_BIT_HEADER : ETW_HDR_FLAG_64_BIT_HEADER;
    out->pid = r->pid;
    out->tid = r->tid;
    out->cpu = r->cpu;
    out->ts = r->ts;
    out->payload = r->payload;
    out->len = r->len;
    return 1;
}

static void emit(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct etl_events *x = arg;
    struct ht_event e = *ev;
    if (depth) {
        e.stack = stack_intern_get(x->si, frames, depth);
        if (!e.stack)
            e.flags |= HT_EVF_STACK_DROPPED;
    }
    x->fn(x->arg, &e);
}

static uint32_t path_cb(void *arg, const char *path)
{
    struct etl_events *x = arg;
    return stack_intern_str(x->si, path, (unsigned)strlen(path));
}

/* The traced process: its Start or rundown (with its image name), or the first process
 * whose heap event came when none was named (no name yet): announced once, then again when
 * its name comes. */
static void process_cb(void *arg, uint32_t pid, const char *name)
{
    struct etl_events *x = arg;
    if (x->st.name[0] || (!name[0] && x->announced))
        return;
    snprintf(x->st.name, sizeof(x->st.name), "%s", name);
    x->announced = 1;
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = pid};
    x->fn(x->arg, &ev);
}

int etl_events_new(struct etl_events **out, struct stack_intern *si, const struct etl_header *h,
                   uint32_t pid, etl_event_fn fn, void *arg)
{
    struct etl_events *x = calloc(1, sizeof(*x));
    if (!x)
        return UV_ENOMEM;
    x->si = si;
    x->fn = fn;
    x->arg = arg;
    x->pid = pid;
    x->to = UINT64_MAX;
    x->events_lost = h->events_lost;
    /* ClockType 2 (system time) counts 100 ns; PerfFreq is the QPC rate otherwise. The
     * header record's own time is the clock at the session's start. */
    struct etw_corr_config cfg = {.acct = si->acct,
                                  .pid = pid,
                                  .qpc_freq = h->perf_freq ? h->perf_freq : 10000000,
                                  .start_qpc = h->ts0,
                                  .follow_first = pid == 0,
                                  .path = path_cb,
                                  .process = process_cb};
    int rc = etw_corr_new(&x->corr, &cfg, emit, x);
    if (rc != 0) {
        free(x);
        return rc;
    }
    *out = x;
    return 0;
}

void etl_events_free(struct etl_events *x)
{
    if (!x)
        return;
    etl_keys_free(x->keys);
    free(x->scratch);
    etw_corr_free(x->corr);
    free(x);
}

void etl_events_window(struct etl_events *x, uint64_t from, uint64_t to)
{
    x->from = from;
    x->to = to;
}

#define HOOK_KEY_KERNEL 0x1825 /* ntwmi.h PERFINFO_LOG_TYPE_STACKTRACE_KEY_KERNEL */
#define HOOK_KEY_USER 0x1826
#define KEY_FRAMES_MAX 1024 /* more than the correlator keeps (ETW_MAX_FRAMES) */

static uint64_t rd_ptr(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A key reference (EventTimeStamp u64, StackProcess u32, StackThread u32, StackKey P:
 * PerfView's StackWalkRefTraceData) resolved to its definition's frames goes to the
 * correlator as the inline stack (0x1820: the same three fields, then the frames) that
 * Windows would have logged without the cache. */
static void key_ref(struct etl_events *x, const struct etl_record *r)
{
    unsigned p = r->ptr_size ? r->ptr_size : 8;
    if (r->len < 16 + p) {
        x->st.malformed++;
        return;
    }
    x->st.key_refs++;
    uint32_t n = 0;
    const uint64_t *f =
        x->keys ? etl_keys_find(x->keys, rd_ptr(r->payload + 16, p), r->ts, &n) : NULL;
    if (!f) {
        x->st.key_unresolved++;
        return;
    }
    if (n > KEY_FRAMES_MAX)
        n = KEY_FRAMES_MAX;
    memcpy(x->scratch, r->payload, 16);
    for (uint32_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            x->scratch[16 + 8 * i + b] = (uint8_t)(f[i] >> (8 * b));
    struct etw_record e = {.provider = etw_guid_stackwalk,
                           .opcode = 32,
                           .version = 2,
                           .flags = ETW_HDR_FLAG_64_BIT_HEADER,
                           .pid = r->pid,
                           .tid = r->tid,
                           .cpu = r->cpu,
                           .ts = r->ts,
                           .payload = x->scratch,
                           .len = 16 + 8 * n};
    struct etw_decoded d;
    if (etw_decode(&e, &d, &x->st.dec) == 1)
        etw_corr_add(x->corr, &e, &d);
}

void etl_events_record(void *arg, const struct etl_record *r)
{
    struct etl_events *x = arg;
    struct etw_record e;
    struct etw_decoded d;
    if (x->pid && !x->announced) {
        /* A named process is known before its first event, as a raw stream's header
         * announces its process (replay.c): the same stream either way. */
        struct ht_event ev = {.kind = HT_EV_PROCESS, .size = x->pid};
        x->announced = 1;
        x->fn(x->arg, &ev);
    }
    if (r->ts < x->from || r->ts >= x->to) {
        x->st.outside_window++;
        return;
    }
    if (!r->has_guid && (r->hook == HOOK_KEY_KERNEL || r->hook == HOOK_KEY_USER)) {
        key_ref(x, r);
        return;
    }
    if (!etl_to_etw(r, &e)) {
        x->st.dec.unknown_provider++;
        return;
    }
    int dr = etw_decode(&e, &d, &x->st.dec);
    if (dr < 0)
        x->st.malformed++;
    else if (dr == 1)
        etw_corr_add(x->corr, &e, &d);
}

/* The header's EventsLost is the session's total, known when it stopped: a lost event at
 * the end of the stream (as a raw stream's {"etw_raw_lost":N} line), so that every reply's
 * data quality shows it. */
void etl_events_finish(struct etl_events *x)
{
    if (x->events_lost)
        etw_corr_lost(x->corr, x->events_lost);
    etw_corr_flush(x->corr);
}

void etl_events_stats(const struct etl_events *x, struct etl_events_stats *out)
{
    *out = x->st;
    out->corr = *etw_corr_stats(x->corr);
}

int etl_events_run(struct etl_events *x, struct etl_reader *rd)
{
    x->keys = etl_keys_new(0);
    x->scratch = malloc(16 + 8 * KEY_FRAMES_MAX);
    if (!x->keys || !x->scratch)
        return UV_ENOMEM;
    int rc = etl_reader_run(rd, etl_keys_collect, x->keys);
    if (rc != 0)
        return rc;
    etl_keys_seal(x->keys);
    etl_reader_rewind(rd);
    if ((rc = etl_reader_run(rd, etl_events_record, x)) != 0)
        return rc;
    etl_events_finish(x);
    struct etl_keys_stats ks;
    etl_keys_stats(x->keys, &ks);
    x->st.key_defs_dropped = ks.defs_dropped;
    return 0;
}
