/*
 * The replay source: a recorded stream decoded on a thread, events to the
 * loop over the event ring (replay-source.h).
 *
 * Threads: the ops run on the loop; the decoder thread runs decoder_main and
 * everything it calls (the parsers, the ring's producer side). The input
 * bytes go loop -> decoder through an SPSC byte ring of their own.
 */
#include "replay-source.h"

#include "etw-raw.h"
#include "evring.h"
#include "rawtap.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "replay.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define SLICE (64 * 1024) /* input bytes decoded between two publications */

struct replay_source {
    struct source base;
    struct evring *ring;
    uv_thread_t thread;
    int thread_started;
    uv_mutex_t mu;
    uv_cond_t cv;

    /* Input bytes, loop -> decoder. Counters only grow; index = counter & mask. */
    char *in;
    size_t in_cap;
    _Atomic size_t in_head; /* written by the loop */
    _Atomic size_t in_tail; /* written by the decoder */
    _Atomic int in_closed;
    size_t in_head_mine;  /* loop's copy of in_head */
    _Atomic int sleeping; /* the decoder waits on cv for input */
    _Atomic int quit;
    struct mem_acct acct; /* the input ring: charged at open, on the loop */

    /* Decoder-only. */
    struct replay rp;
    uint32_t stats_errors;

    struct source_stats st; /* the decoder's counters, under mu */
    int etw;                /* a raw ETW stream: etw_st holds its counters (under mu) */
    struct etw_raw_stats etw_st;
    int ended;              /* loop: sink->ended was called */
    struct rawtap *tap;     /* record --raw of a raw ETW stream */
};

/* Wake the decoder if it sleeps (the pairing is the event ring's, evring.c). */
static void wake(struct replay_source *s)
{
    if (atomic_load(&s->sleeping)) {
        uv_mutex_lock(&s->mu);
        uv_cond_signal(&s->cv);
        uv_mutex_unlock(&s->mu);
    }
}

/* Decoder side. */

static void decoded_cb(void *arg, const struct ht_event *ev)
{
    struct replay_source *s = arg;
    if (ev->kind == HT_EV_PROCESS) {
        const struct htev_parser *p = &s->rp.parser;
        if (evring_process(s->ring, ev->size, p->name, p->wall) != 0)
            return;
    }
    evring_put(s->ring, ev);
}

static void stats_publish(struct replay_source *s)
{
    const struct replay *r = &s->rp;
    uv_mutex_lock(&s->mu);
    s->st.bytes = r->bytes;
    s->st.lines = r->line_no;
    s->st.events = r->events;
    s->st.malformed = r->malformed;
    if (r->nerrors != s->stats_errors) {
        for (uint32_t i = 0; i < r->nerrors && i < SOURCE_ERRORS_KEPT; i++) {
            s->st.errors[i].line = r->errors[i].line;
            memcpy(s->st.errors[i].msg, r->errors[i].msg, sizeof(s->st.errors[i].msg));
        }
        s->st.nerrors = r->nerrors;
        s->stats_errors = r->nerrors;
    }
    if (r->etw) {
        s->etw = 1;
        etw_raw_stats(r->etw, &s->etw_st);
    }
    uv_mutex_unlock(&s->mu);
}

static int in_ready(struct replay_source *s)
{
    return atomic_load(&s->in_head) != atomic_load(&s->in_tail) || atomic_load(&s->in_closed);
}

static void wait_input(struct replay_source *s)
{
    uv_mutex_lock(&s->mu);
    atomic_store(&s->sleeping, 1);
    while (!in_ready(s) && !atomic_load(&s->quit))
        uv_cond_wait(&s->cv, &s->mu);
    atomic_store(&s->sleeping, 0);
    uv_mutex_unlock(&s->mu);
}

static void decoder_main(void *arg)
{
    struct replay_source *s = arg;
    size_t tail = 0;
    while (!atomic_load(&s->quit)) {
        size_t head = atomic_load_explicit(&s->in_head, memory_order_acquire);
        if (head == tail) {
            /* Closed is set after the last write: read head again after it. */
            if (atomic_load(&s->in_closed) && atomic_load(&s->in_head) == tail) {
                replay_finish(&s->rp);
                stats_publish(s);
                evring_done(s->ring);
                return;
            }
            evring_publish(s->ring);
            wait_input(s);
            continue;
        }
        size_t off = tail & (s->in_cap - 1), n = head - tail;
        if (n > s->in_cap - off)
            n = s->in_cap - off;
        if (n > SLICE)
            n = SLICE;
        replay_feed(&s->rp, s->in + off, n);
        tail += n;
        atomic_store(&s->in_tail, tail);
        stats_publish(s);
        evring_publish(s->ring); /* also tells the loop there is input space again */
    }
}

/* Loop side. */

static void ring_ready(void *data)
{
    struct replay_source *s = data;
    if (s->base.sink.ready)
        s->base.sink.ready(s->base.sink.arg);
}

static size_t pow2_at_least(size_t n, size_t min)
{
    size_t p = min;
    while (p < n)
        p *= 2;
    return p;
}

static void replay_src_close(struct source *base);
static void tap_ready(void *arg);

int replay_source_open_sized(struct source **out, uv_loop_t *loop, const struct source_params *p,
                             const struct source_sink *sink, size_t input_bytes,
                             uint32_t ring_events, char *err, size_t errsz)
{
    *out = NULL;
    if (p->mode != SOURCE_STREAM) {
        snprintf(err, errsz, "the replay source reads recorded streams only (heaptracectl load)");
        return HT_ENOTSUP;
    }
    struct replay_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_replay_ops;
    s->base.sink = *sink;
    s->in_cap = pow2_at_least(input_bytes, 1 << 16);
    mem_acct_init(&s->acct, p->budget);
    int rc = UV_ENOMEM;
    s->in = mem_alloc(&s->acct, MEM_decoder_buffers, s->in_cap);
    if (!s->in)
        goto fail_in;
    struct evring_limits lim = {ring_events, p->max_stacks, p->max_strings, p->max_name_len,
                                p->budget};
    if ((rc = evring_new(&s->ring, loop, &lim, ring_ready, s)) != 0)
        goto fail_in;
    if (replay_init(&s->rp, evring_si(s->ring), decoded_cb, s) != 0) {
        rc = UV_ENOMEM;
        goto fail_ring;
    }
    s->rp.cancel = &s->quit; /* a stop does not wait for a slice that decodes to GiBs */
    if ((rc = uv_mutex_init(&s->mu)) != 0)
        goto fail_replay;
    if ((rc = uv_cond_init(&s->cv)) != 0) {
        uv_mutex_destroy(&s->mu);
        goto fail_replay;
    }
    /* record --raw of a raw ETW stream (its buffer only while recorded). */
    if (rawtap_new(&s->tap, loop, RAWTAP_BYTES_DEFAULT, &s->acct, tap_ready, s) == 0)
        s->rp.tap = s->tap;
    *out = &s->base;
    return 0;
fail_replay:
    replay_close(&s->rp);
fail_ring:
    evring_free(s->ring);
fail_in:
    mem_free(&s->acct, MEM_decoder_buffers, s->in, s->in_cap);
    mem_acct_close(&s->acct);
    ht_free(s);
    /* Its rings are charged to the session's budget (under the daemon's). */
    snprintf(err, errsz, "cannot set up the stream decoder: %s%s", uv_strerror(rc),
             rc == UV_ENOMEM ? " (or its buffers do not fit the memory budget)" : "");
    return rc;
}

static int replay_src_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                           const struct source_sink *sink, char *err, size_t errsz)
{
    return replay_source_open_sized(out, loop, p, sink, REPLAY_INPUT_BYTES, REPLAY_RING_EVENTS, err,
                                    errsz);
}

static int replay_src_start(struct source *base, char *err, size_t errsz)
{
    struct replay_source *s = (struct replay_source *)base;
    if (s->thread_started)
        return 0;
    int rc = uv_thread_create(&s->thread, decoder_main, s);
    if (rc != 0) {
        snprintf(err, errsz, "cannot start the decoding thread: %s", uv_strerror(rc));
        return rc;
    }
    s->thread_started = 1;
    return 0;
}

static void tap_ready(void *arg)
{
    struct replay_source *s = arg;
    if (!s->ended && s->base.sink.ready)
        s->base.sink.ready(s->base.sink.arg);
}

static int replay_src_raw_tap(struct source *base, int on, char *err, size_t errsz)
{
    struct replay_source *s = (struct replay_source *)base;
    if (!on) {
        rawtap_off(s->tap, &s->base.sink);
        return 0;
    }
    uv_mutex_lock(&s->mu);
    int etw = s->etw;
    struct etw_raw_stats st = s->etw_st;
    uv_mutex_unlock(&s->mu);
    if (!etw || !s->tap) {
        snprintf(err, errsz, "this stream is not a raw ETW stream (or its header has not come "
                             "yet): it has no raw records to record");
        return HT_ENOTSUP;
    }
    char header[512];
    size_t hn = etw_raw_header(st.qpc_freq, st.start_qpc, st.pid, st.name, header, sizeof(header));
    int rc = rawtap_enable(s->tap, 1, header, hn);
    if (rc)
        snprintf(err, errsz, "no memory for the raw record buffer");
    return rc;
}

static size_t replay_src_raw_join(struct source *base, char *buf, size_t cap)
{
    struct replay_source *s = (struct replay_source *)base;
    if (!rawtap_on(s->tap))
        return 0;
    rawtap_flush(s->tap, &s->base.sink); /* the lines from before the newcomer go to the others only */
    return rawtap_header(s->tap, buf, cap);
}

static int replay_src_drain(struct source *base, size_t budget)
{
    struct replay_source *s = (struct replay_source *)base;
    if (s->ended)
        return 0;
    int rc = evring_drain(s->ring, &s->base.sink, budget);
    if (rc < 0)
        return -1;
    rawtap_flush(s->tap, &s->base.sink);
    if (rc == 0 && evring_finished(s->ring)) {
        rawtap_flush(s->tap, &s->base.sink); /* the decoder is done: the last lines are in */
        s->ended = 1;
        if (s->base.sink.ended)
            s->base.sink.ended(s->base.sink.arg, "end of stream");
        return 0;
    }
    return rc;
}

/* The decoder stops where it is (what it holds is dropped) and is joined. */
static void replay_src_stop(struct source *base)
{
    struct replay_source *s = (struct replay_source *)base;
    atomic_store(&s->quit, 1);
    evring_quit(s->ring);
    uv_mutex_lock(&s->mu);
    uv_cond_signal(&s->cv);
    uv_mutex_unlock(&s->mu);
    if (s->thread_started) {
        uv_thread_join(&s->thread);
        s->thread_started = 0;
    }
}

static void replay_src_close(struct source *base)
{
    if (!base)
        return;
    struct replay_source *s = (struct replay_source *)base;
    replay_src_stop(base);
    replay_close(&s->rp); /* before the ring: its buffers are charged to the ring's interner */
    rawtap_free(s->tap);
    evring_free(s->ring);
    uv_cond_destroy(&s->cv);
    uv_mutex_destroy(&s->mu);
    mem_free(&s->acct, MEM_decoder_buffers, s->in, s->in_cap);
    mem_acct_close(&s->acct);
    ht_free(s);
}

static void replay_src_stats(struct source *base, struct source_stats *st)
{
    struct replay_source *s = (struct replay_source *)base;
    uv_mutex_lock(&s->mu);
    *st = s->st;
    uv_mutex_unlock(&s->mu);
    for (int k = 0; k < MEM_KINDS; k++)
        st->mem[k] += s->acct.bytes[k];
    evring_producer_stats(s->ring, st);
}

/* A raw ETW stream's decoder and correlator counters (etw-raw.h), else NULL. */
static cJSON *replay_src_status_json(struct source *base)
{
    struct replay_source *s = (struct replay_source *)base;
    struct etw_raw_stats st;
    uv_mutex_lock(&s->mu);
    int etw = s->etw;
    st = s->etw_st;
    uv_mutex_unlock(&s->mu);
    if (!etw)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *e = etw_raw_stats_json(&st);
    if (!o || !e) {
        cJSON_Delete(o);
        cJSON_Delete(e);
        return NULL;
    }
    cJSON_AddStringToObject(o, "format", "etw_raw");
    cJSON_AddItemToObject(o, "etw", e);
    return o;
}

static size_t replay_src_space(struct source *base)
{
    struct replay_source *s = (struct replay_source *)base;
    return s->in_cap - (s->in_head_mine - atomic_load_explicit(&s->in_tail, memory_order_acquire));
}

static size_t replay_src_write(struct source *base, const char *buf, size_t n)
{
    struct replay_source *s = (struct replay_source *)base;
    size_t space = replay_src_space(base);
    if (n > space)
        n = space;
    size_t off = s->in_head_mine & (s->in_cap - 1), first = s->in_cap - off;
    if (first > n)
        first = n;
    memcpy(s->in + off, buf, first);
    memcpy(s->in, buf + first, n - first);
    s->in_head_mine += n;
    atomic_store(&s->in_head, s->in_head_mine);
    wake(s);
    return n;
}

static void replay_src_close_input(struct source *base)
{
    struct replay_source *s = (struct replay_source *)base;
    atomic_store(&s->in_closed, 1);
    wake(s);
}

const struct source_ops source_replay_ops = {
    .name = "replay",
    .modes = SOURCE_STREAM,
    .summary = "recorded streams (.htev text or its binary twin, either in zstd frames) sent by "
               "heaptracectl load",
    .available = NULL,
    .open = replay_src_open,
    .start = replay_src_start,
    .drain = replay_src_drain,
    .stop = replay_src_stop,
    .close = replay_src_close,
    .stats = replay_src_stats,
    .status_json = replay_src_status_json,
    .space = replay_src_space,
    .write = replay_src_write,
    .close_input = replay_src_close_input,
    .symbolize = NULL,
    .raw_tap = replay_src_raw_tap,
    .raw_join = replay_src_raw_join,
};
