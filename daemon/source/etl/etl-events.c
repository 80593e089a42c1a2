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
    struct etl_keys *keys; /* stack keys, read in the same pass (etl-keys.h) */
    /* Events whose stack is a key reference still waiting for its definition, and the
     * events behind them (they leave in order): at most qcap, the oldest given up first. */
    struct waiting *q;
    uint32_t qcap, qhead, qlen;
    struct memo *memo; /* MEMO_SLOTS: inline stacks seen lately, by a cheap hash */
    struct etl_events_stats st;
};

/* A heap trace logs the same few thousand stacks inline again and again: a direct-mapped
 * memo of their ids, by a hash of three of their frames (checked against the interned
 * frames), spares the interner's full hash of every one (a fifth of load's time, perf). */
#define MEMO_SLOTS 4096
struct memo {
    uint64_t h;
    uint32_t stack;
};

struct waiting {
    struct ht_event ev;
    uint64_t ref; /* its key reference (etl_keys_take), 0 = ready */
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

/* A key reference goes through the correlator as a stack of two frames that no stack can
 * hold: non-canonical x64 addresses (bits 63-47 not all equal, Intel SDM vol. 1, 3.3.7.1),
 * below the kernel half so that the correlator keeps them as user frames. The second holds
 * the reference's id. */
#define KEY_MARK0 0xFFFF7E7E7E7E7E7Eull
#define KEY_MARK1 0xFFFF000000000000ull
#define KEY_ID_MASK 0x00007FFFFFFFFFFFull

static uint64_t marked_ref(const uint64_t *frames, unsigned depth)
{
    if (depth != 2 || frames[0] != KEY_MARK0 || (frames[1] & ~KEY_ID_MASK) != KEY_MARK1)
        return 0;
    return frames[1] & KEY_ID_MASK;
}

static void pass(struct etl_events *x, const struct waiting *w)
{
    x->fn(x->arg, &w->ev);
}

/* The waiting events leave from the oldest while their stacks are known; force: the oldest
 * leaves whatever (the queue is full), its reference given up and counted. */
static void release(struct etl_events *x, int force)
{
    while (x->qlen) {
        struct waiting *w = &x->q[x->qhead];
        if (w->ref) {
            uint32_t stack = 0;
            uint8_t flags = 0;
            int rc = etl_keys_take(x->keys, w->ref, &stack, &flags);
            if (rc == ETL_KEY_WAIT && !force)
                return;
            if (rc == ETL_KEY_WAIT) {
                etl_keys_drop(x->keys, w->ref);
                flags = HT_EVF_STACK_DROPPED; /* the wait's cap took it */
            }
            if (rc == ETL_KEY_READY)
                w->ev.stack = stack;
            w->ev.flags |= flags; /* gone: whether a cap dropped its stack */
        }
        force = 0;
        pass(x, w);
        x->qhead = (x->qhead + 1) % x->qcap;
        x->qlen--;
    }
}

static void out(struct etl_events *x, const struct ht_event *ev, uint64_t ref)
{
    struct waiting w = {*ev, ref};
    if (x->qlen == 0 && ref == 0) {
        pass(x, &w);
        return;
    }
    if (!x->q) {
        x->q = malloc((size_t)x->qcap * sizeof(*x->q));
        if (!x->q) {
            etl_keys_drop(x->keys, ref); /* no room to wait: without its stack */
            w.ev.flags |= ref ? HT_EVF_STACK_DROPPED : 0;
            x->fn(x->arg, &w.ev);
            return;
        }
    }
    if (x->qlen == x->qcap)
        release(x, 1);
    x->q[(x->qhead + x->qlen++) % x->qcap] = w;
    if (x->qlen > x->st.waiting_max)
        x->st.waiting_max = x->qlen;
    release(x, 0);
}

static uint32_t intern(struct etl_events *x, const uint64_t *frames, unsigned depth)
{
    /* Three frames pick the slot; the whole stack is compared below. */
    uint64_t h = depth ^ frames[0] ^ (frames[depth / 2] << 21 | frames[depth / 2] >> 43) ^
                 (frames[depth - 1] << 42 | frames[depth - 1] >> 22);
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ull;
    struct memo *m = x->memo ? &x->memo[(h >> 40) & (MEMO_SLOTS - 1)] : NULL;
    if (m && m->stack && m->h == h) {
        unsigned n;
        const uint64_t *f = stack_intern_frames(x->si, m->stack, &n);
        if (n == depth && !memcmp(f, frames, depth * sizeof(*f)))
            return m->stack;
    }
    uint32_t id = stack_intern_get(x->si, frames, depth);
    if (m && id && depth <= HT_STACK_MAX_DEPTH) {
        m->h = h;
        m->stack = id;
    }
    return id;
}

static void emit(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct etl_events *x = arg;
    struct ht_event e = *ev;
    uint64_t ref = marked_ref(frames, depth);
    if (ref) {
        uint32_t stack = 0;
        uint8_t flags = 0;
        int rc = etl_keys_take(x->keys, ref, &stack, &flags);
        if (rc != ETL_KEY_WAIT)
            ref = 0; /* known now, or gone (counted by the keys): no wait */
        if (rc == ETL_KEY_READY)
            e.stack = stack;
        e.flags |= flags; /* gone: whether a cap dropped its stack */
    } else if (depth) {
        e.stack = intern(x, frames, depth);
        if (!e.stack)
            e.flags |= HT_EVF_STACK_DROPPED;
    }
    out(x, &e, ref);
}

static uint32_t def_stack(void *arg, const uint8_t *p, uint32_t n, unsigned ptr_size,
                          uint8_t *flags);

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
    x->memo = calloc(MEMO_SLOTS, sizeof(*x->memo)); /* none: every stack interned in full */
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
    if (rc == 0 && (rc = etl_events_limits(x, NULL)) != 0)
        etw_corr_free(x->corr);
    if (rc != 0) {
        free(x);
        return rc;
    }
    *out = x;
    return 0;
}

int etl_events_limits(struct etl_events *x, const struct etl_keys_limits *lim)
{
    struct etl_keys *k = etl_keys_new(lim, def_stack, x);
    if (!k)
        return UV_ENOMEM;
    etl_keys_free(x->keys);
    free(x->q);
    x->q = NULL;
    x->qhead = x->qlen = 0;
    x->keys = k;
    /* As many events as references may wait (allocated when one first waits). */
    x->qcap = lim && lim->max_waiting ? lim->max_waiting : ETL_KEYS_WAITING;
    return 0;
}

void etl_events_free(struct etl_events *x)
{
    if (!x)
        return;
    etl_keys_free(x->keys);
    free(x->q);
    free(x->memo);
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

static uint64_t rd_ptr(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A definition's frames as the correlator keeps an inline stack's (etw-stacks.c
 * user_frames): kernel frames (the upper canonical half) dropped, at most ETW_MAX_FRAMES
 * user frames (more: truncated), interned once for all its references. */
static uint32_t def_stack(void *arg, const uint8_t *p, uint32_t n, unsigned ptr_size,
                          uint8_t *flags)
{
    struct etl_events *x = arg;
    uint64_t f[ETW_MAX_FRAMES];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t a = rd_ptr(p + (size_t)i * ptr_size, ptr_size);
        if (a >= 0xFFFF800000000000ull)
            continue;
        if (k == ETW_MAX_FRAMES) {
            *flags |= HT_EVF_TRUNCATED;
            break;
        }
        f[k++] = a;
    }
    uint32_t id = k ? stack_intern_get(x->si, f, k) : 0;
    if (k && !id)
        *flags |= HT_EVF_STACK_DROPPED;
    return id;
}

/* A key reference (EventTimeStamp u64, StackProcess u32, StackThread u32, StackKey P:
 * PerfView's StackWalkRefTraceData) goes to the correlator as the inline stack (0x1820: the
 * same three fields, then the frames) that Windows would have logged without the cache:
 * a user key's frames are the marker of its reference (its event takes the stack when the
 * definition comes, maybe later); a kernel key's frames, all kernel ones (which the
 * correlator drops), are none: a kernel fragment. References of the traced process are
 * followed (resolved or counted unresolved); others are the correlator's to skip. */
static void key_ref(struct etl_events *x, const struct etl_record *r)
{
    unsigned p = r->ptr_size ? r->ptr_size : 8;
    if (r->len < 16 + p) {
        x->st.malformed++;
        return;
    }
    x->st.key_refs++;
    uint32_t owner = (uint32_t)rd_ptr(r->payload + 8, 4);
    uint32_t traced = x->pid ? x->pid : etw_corr_stats(x->corr)->followed_pid;
    uint64_t ref = 0;
    if (!traced || owner == traced)
        ref = etl_keys_ref(x->keys, rd_ptr(r->payload + 16, p));
    uint8_t pl[32];
    uint64_t mark[2] = {KEY_MARK0, KEY_MARK1 | (ref & KEY_ID_MASK)};
    uint32_t n = r->hook == HOOK_KEY_USER && ref ? 2 : 0;
    memcpy(pl, r->payload, 16);
    for (uint32_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            pl[16 + 8 * i + b] = (uint8_t)(mark[i] >> (8 * b));
    struct etw_record e = {.provider = etw_guid_stackwalk,
                           .opcode = 32,
                           .version = 2,
                           .flags = ETW_HDR_FLAG_64_BIT_HEADER,
                           .pid = r->pid,
                           .tid = r->tid,
                           .cpu = r->cpu,
                           .ts = r->ts,
                           .payload = pl,
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
    /* Key definitions are the kernel's stack cache, whoever's time they come at: one after
     * the window (a Rundown at the trace's end) still defines the keys of the window's. */
    etl_keys_define(x->keys, r);
    /* to UINT64_MAX: no end (a record may say that time too). */
    if (r->ts < x->from || (x->to != UINT64_MAX && r->ts >= x->to)) {
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
    /* Nothing comes after: each waiting reference takes its key's last definition, or
     * none, and every waiting event leaves. */
    etl_keys_finish(x->keys);
    release(x, 0);
}

void etl_events_stats(const struct etl_events *x, struct etl_events_stats *out)
{
    *out = x->st;
    out->corr = *etw_corr_stats(x->corr);
    struct etl_keys_stats ks;
    etl_keys_stats(x->keys, &ks);
    out->key_unresolved = ks.unresolved;
    out->key_defs_dropped = ks.defs_dropped;
    out->key_waited = ks.waited;
    out->key_dropped = ks.dropped;
    out->key_evicted = ks.evicted;
    out->key_waiting_max = ks.max_waiting;
}

int etl_events_run(struct etl_events *x, struct etl_reader *rd)
{
    int rc = etl_reader_run(rd, etl_events_record, x);
    if (rc != 0)
        return rc;
    etl_events_finish(x);
    return 0;
}
