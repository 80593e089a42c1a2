/*
 * The eBPF source (source.h, mode SOURCE_PID): the tracer (tracer.h)
 * attached to a running process, its consumer thread producing into the
 * event ring, drained by the session on the loop; frames symbolized lazily
 * through the process's symbol cache (symbols.h).
 *
 * Threads: the ops run on the loop; the tracer's consumer thread runs the
 * producer callbacks below (the *_cb functions up to the loop side).
 */
#include "bpf-source.h"
#include "evring.h"
#include "modq.h"
#include "procmaps.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "source.h"
#include "stack-intern.h"
#include "sym-snap.h"
#include "symbols.h"
#include "tracer.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Records in flight between the consumer thread and the loop. */
#define BPF_RING_EVENTS (1u << 16)
/* The kernel's ring buffer: allocated whole when the program loads and
 * mapped into the daemon, so charged to the session's budget as a source
 * buffer for the session's life. */
#define BPF_KERNEL_RING (16u << 20)

/* Module events wait in a queue (modq.h) for the symbol cache: one that
 * does not fit is dropped and counted (symbols.queue_drops in status); the
 * engine still has it. A dropped load is found by the cache's own read of
 * /proc/PID/maps at the first frame in it, while the process lives (its
 * table is then not loaded early); a dropped unload leaves the module's
 * range resolving to it until a load over that range replaces it. A load
 * that waits while a worker holds the symbolizer has its table loaded when
 * the worker lets go: if the process exited meanwhile, its frames stay
 * "module!+0xOFF". */

struct bpf_source {
    struct source base;
    struct evring *ring;
    struct bpf_tracer *tracer;
    struct sym_cache *syms;   /* under the session's symbolizer lock */
    struct mem_acct sym_acct; /* the symbol cache's (under the same lock) */
    struct sym_snap snap;     /* their counters, for stats and status */
    int snap_ready;
    struct mem_acct acct;     /* the loop's: kernel ring, module queue */
    struct modq q;
    struct source_sink outer; /* the session's sink; base.sink wraps it */
    uint64_t pid;
    int started, stopped, ended;
    /* Events put into the event ring (producer) and handed to the session
     * (loop): at a stop the session takes no more, and what was put but not
     * handed over is counted as lost rather than vanishing. */
    atomic_uint_fast64_t put;
    uint64_t delivered;
    char reason[160];
    uv_mutex_t mu; /* reason: written by the consumer, read by the loop */

    /* Synthetic input (bpf-source.h, tests only): no tracer; a thread of
     * ours runs the consumer over the generator's records. */
    struct bpf_synth synth;
    struct bpf_consumer cons;
    uint32_t stack_depth;
    uv_thread_t synth_thread;
    int synth_running;
    struct source_stats synth_st; /* under mu */
};

/* Producer side: the tracer's sink, on its consumer thread. */

static int event_cb(void *arg, const struct ht_event *ev)
{
    struct bpf_source *s = arg;
    if (evring_put(s->ring, ev) != 0)
        return 1;
    atomic_fetch_add_explicit(&s->put, 1, memory_order_relaxed);
    return 0;
}

static uint32_t stack_cb(void *arg, const uint64_t *frames, unsigned n)
{
    struct bpf_source *s = arg;
    return stack_intern_get(evring_si(s->ring), frames, n);
}

static uint32_t str_cb(void *arg, const char *str, unsigned len)
{
    struct bpf_source *s = arg;
    return stack_intern_str(evring_si(s->ring), str, len);
}

static void idle_cb(void *arg)
{
    struct bpf_source *s = arg;
    evring_publish(s->ring);
}

static void done_cb(void *arg, const char *reason)
{
    struct bpf_source *s = arg;
    uv_mutex_lock(&s->mu);
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    uv_mutex_unlock(&s->mu);
    evring_done(s->ring);
}

/* Loop side. */

static void ring_ready(void *data)
{
    struct bpf_source *s = data;
    if (s->outer.ready)
        s->outer.ready(s->outer.arg);
}

/* A module into the symbol cache, its table loaded now: symbols are lazy,
 * but once the process is gone its files can no longer be opened through
 * /proc/PID (the table stays cached by build id). Under the symbolizer lock. */
static void module_learn(struct bpf_source *s, uint64_t start, uint64_t end, uint64_t bias,
                         const char *path, const char *build_id)
{
    char buf[256];
    if (sym_cache_add_module(s->syms, start, end, bias, path, build_id) == 0)
        sym_cache_resolve(s->syms, start, 0, buf, sizeof(buf));
}

/* Under the symbolizer lock: the queued module events into the symbol
 * cache, in order, and its counters into the snapshot. */
static void bpf_src_sym_sync(struct source *base)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (!s->syms)
        return;
    if (modq_apply(&s->q, s->syms, 1)) /* tables read now, as module_learn does */
        sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
}

/* Module events are queued for the symbol cache before the session sees
 * them (applied by sym_sync, or by the next symbolize at the latest), so
 * frames still resolve after the process is gone. */
static int events_cb(void *arg, struct ht_event *evs, size_t n)
{
    struct bpf_source *s = arg;
    for (size_t i = 0; s->syms && i < n; i++) {
        const struct ht_event *ev = &evs[i];
        if (ev->kind == HT_EV_MODULE_LOAD) {
            const char *path = stack_intern_strget(s->outer.si, (uint32_t)ev->heap);
            const char *bid =
                ev->old_size ? stack_intern_strget(s->outer.si, (uint32_t)ev->old_size) : "";
            modq_push(&s->q, 1, ev->addr, ev->addr + ev->size, ev->old_addr, path ? path : "",
                      bid ? bid : "");
        } else if (ev->kind == HT_EV_MODULE_UNLOAD) {
            modq_push(&s->q, 0, ev->addr, 0, 0, "", "");
        }
    }
    int rc = s->outer.events(s->outer.arg, evs, n);
    if (rc == 0)
        s->delivered += n; /* else the session stopped: this batch counts as cut */
    return rc;
}

static void process_fwd(void *arg, const struct source_process *p)
{
    struct bpf_source *s = arg;
    if (s->outer.process)
        s->outer.process(s->outer.arg, p);
}

static int bpf_src_available(char *err, size_t errsz)
{
    return bpf_tracer_available(err, errsz);
}

static enum hb_stacks stacks_of(enum source_stacks st)
{
    switch (st) {
    case SOURCE_STACKS_DWARF:
        return HB_STACKS_DWARF;
    case SOURCE_STACKS_NONE:
        return HB_STACKS_NONE;
    case SOURCE_STACKS_FP:
        return HB_STACKS_FP;
    default: /* frame pointers where every module keeps them, else DWARF (attach.c) */
        return HB_STACKS_AUTO;
    }
}

static void bpf_src_close(struct source *base);

/* The event ring (to the loop) and the module queue (to the symbolizer)
 * of a session, within its budget. */
static int queues_make(struct bpf_source *s, uv_loop_t *loop, const struct source_params *p,
                       uint32_t ring, char *err, size_t errsz)
{
    /* The event ring holds about as many records as the kernel ring (one
     * per 256 bytes of it, 1024 at least): a small kernel ring (bpf_ring_bytes)
     * is not hidden behind a large buffer of ours. */
    uint64_t rb = ring;
    uint32_t nev = BPF_RING_EVENTS;
    while (nev > 1024 && (uint64_t)nev * 256 > rb)
        nev >>= 1;
    struct evring_limits lim = {nev, p->max_stacks, p->max_strings, p->max_name_len, p->budget};
    int rc = evring_new(&s->ring, loop, &lim, ring_ready, s);
    if (rc) {
        snprintf(err, errsz, "cannot set up the event ring: %s", uv_strerror(rc));
        return rc;
    }
    if ((rc = modq_init(&s->q, &s->acct)) != 0) {
        if (rc == HT_EFULL)
            snprintf(err, errsz,
                     "the memory budget cannot hold the module queue of a live trace (%u KiB; "
                     "session_memory_budget, daemon_memory_budget)",
                     (unsigned)((MODQ_ENTRIES * sizeof(*s->q.e) + MODQ_TEXT) >> 10));
        else
            snprintf(err, errsz, "out of memory for the module queue");
        return rc;
    }
    return 0;
}

static int bpf_src_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                        const struct source_sink *sink, char *err, size_t errsz)
{
    *out = NULL;
    if (p->mode != SOURCE_PID) {
        snprintf(err, errsz, "the eBPF source attaches to a running process (start --pid)");
        return HT_ENOTSUP;
    }
    struct bpf_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_bpf_ops;
    s->outer = *sink;
    s->base.sink = *sink;
    s->base.sink.arg = s;
    s->base.sink.events = events_cb;
    s->base.sink.process = process_fwd;
    s->pid = p->pid;
    uv_mutex_init(&s->mu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    if (sym_snap_init(&s->snap) != 0) {
        snprintf(err, errsz, "out of memory");
        uv_mutex_destroy(&s->mu);
        ht_free(s);
        return UV_ENOMEM;
    }
    s->snap_ready = 1;
    /* bpf_ring_bytes (validated by the config: a power of two, at most 1 GiB). */
    uint32_t ring = p->ring_bytes ? (uint32_t)p->ring_bytes : BPF_KERNEL_RING;
    int rc = mem_acct_charge(&s->acct, MEM_source_buffers, ring);
    if (rc) {
        snprintf(err, errsz,
                 "the memory budget cannot hold the %u KiB kernel ring of a live trace "
                 "(session_memory_budget, daemon_memory_budget, bpf_ring_bytes)",
                 ring >> 10);
        goto fail;
    }
    struct bpf_tracer_params tp = {
        .pid = p->pid,
        .ring_bytes = ring,
        .stacks = stacks_of(p->stacks),
        .stack_depth = p->stack_depth,
        .sample_ns = p->sample_ns,
        .no_heap = p->no_heap,
        .no_virtual = p->no_virtual,
    };
    rc = bpf_tracer_new(&s->tracer, &tp, err, errsz);
    if (rc)
        goto fail;
    if ((rc = queues_make(s, loop, p, ring, err, errsz)) != 0)
        goto fail;
    /* Without a symbol cache frames stay addresses: not a reason to refuse. */
    if (sym_cache_new(&s->syms, p->pid, &s->sym_acct, MEM_symbols) != 0)
        s->syms = NULL;
    *out = &s->base;
    return 0;
fail:
    bpf_src_close(&s->base);
    return rc;
}

/* The process is known before start's reply: the session shows its pid
 * and name at once (nothing was drained yet, so the order holds). */
static void process_report(struct bpf_source *s, const char *name)
{
    struct source_process sp = {.pid = s->pid, .name = name, .wall = ""};
    if (s->outer.process)
        s->outer.process(s->outer.arg, &sp);
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = s->pid};
    s->outer.events(s->outer.arg, &ev, 1);
}

static int bpf_src_start(struct source *base, char *err, size_t errsz)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->started)
        return 0;
    int rc = bpf_tracer_attach(s->tracer, err, errsz);
    if (rc)
        return rc;
    struct bpf_tracer_sink k = {
        .emit = {.arg = s, .event = event_cb, .stack = stack_cb},
        .str = str_cb,
        .process = NULL, /* reported by bpf_src_start, before it returns */
        .idle = idle_cb,
        .done = done_cb,
    };
    process_report(s, bpf_tracer_name(s->tracer));
    /* The symbol tables of the modules mapped now, while the process is
     * there to open them (it may exit before a reply needs a frame). */
    size_t nm;
    const struct procmaps_module *ms = bpf_tracer_modules(s->tracer, &nm);
    for (size_t i = 0; s->syms && i < nm; i++)
        module_learn(s, ms[i].start, ms[i].end, ms[i].bias, ms[i].path, ms[i].build_id);
    sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
    rc = bpf_tracer_run(s->tracer, &k, err, errsz);
    if (rc) {
        bpf_tracer_detach(s->tracer);
        return rc;
    }
    s->started = 1;
    return 0;
}

static void bpf_src_stop(struct source *base);

static int bpf_src_drain(struct source *base, size_t budget)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->ended || !s->ring)
        return 0;
    int rc = evring_drain(s->ring, &s->base.sink, budget);
    if (rc < 0)
        return -1;
    if (rc == 0 && evring_finished(s->ring)) {
        char reason[160];
        s->ended = 1;
        uv_mutex_lock(&s->mu);
        snprintf(reason, sizeof(reason), "%s", s->reason[0] ? s->reason : "tracing stopped");
        uv_mutex_unlock(&s->mu);
        /* The consumer is done (a finish, or the target exited): it gave
         * the kernel's programs and ring back before it said so. */
        bpf_src_stop(base);
        if (s->outer.ended)
            s->outer.ended(s->outer.arg, reason);
        return 0;
    }
    return rc;
}

/* A stop that keeps what was taken: the links go now, the consumer
 * converts what the kernel ring holds, and the session drains all of it
 * before the source ends (bpf_src_drain calls ended). */
static int bpf_src_finish(struct source *base)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->stopped || !s->tracer || !s->started)
        return -1;
    bpf_tracer_finish(s->tracer);
    return 0;
}

/* The programs cut first, then the consumer let go of: a put waiting for
 * room returns when the ring quits. The links go on the consumer's thread. */
static void bpf_src_stop(struct source *base)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->stopped || !s->tracer)
        return;
    s->stopped = 1;
    bpf_tracer_detach(s->tracer);
    if (s->ring)
        evring_quit(s->ring);
    bpf_tracer_stop(s->tracer);
}

static void bpf_src_close(struct source *base)
{
    if (!base)
        return;
    struct bpf_source *s = (struct bpf_source *)base;
    bpf_src_stop(base);
    /* Not waited for: a consumer still giving the kernel's side back (a
     * drop right after a stop) held the loop 0.5-0.9 s. */
    bpf_tracer_abandon(s->tracer);
    if (s->ring)
        evring_free(s->ring);
    if (s->syms)
        sym_cache_free(s->syms);
    mem_acct_close(&s->sym_acct);
    modq_free(&s->q, &s->acct);
    if (s->snap_ready)
        sym_snap_destroy(&s->snap);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->mu);
    ht_free(s);
}

/* Events the producer put that the session never took: only known once
 * the source stopped (while it runs they are in flight). */
static uint64_t cut_at_stop(struct bpf_source *s)
{
    if (!s->stopped)
        return 0;
    uint64_t put = atomic_load_explicit(&s->put, memory_order_relaxed);
    return put > s->delivered ? put - s->delivered : 0;
}

static void bpf_src_stats(struct source *base, struct source_stats *st)
{
    struct bpf_source *s = (struct bpf_source *)base;
    struct bpf_tracer_stats ts;
    memset(st, 0, sizeof(*st));
    if (s->ring)
        evring_producer_stats(s->ring, st);
    if (!s->tracer)
        return;
    bpf_tracer_stats(s->tracer, &ts);
    st->events = ts.events;
    st->malformed = ts.malformed;
    /* The drops went to the engine as lost events already (the session adds
     * st->lost to them): only what never became an event is lost here. */
    st->lost = ts.undelivered + cut_at_stop(s);
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] += s->acct.bytes[k];
        st->over_budget[k] += s->acct.over_budget[k];
        st->no_memory[k] += s->acct.no_memory[k];
    }
    sym_snap_add(&s->snap, st, MEM_symbols);
}

static struct cJSON *bpf_src_status_json(struct source *base)
{
    struct bpf_source *s = (struct bpf_source *)base;
    cJSON *o = s->tracer ? bpf_tracer_status_json(s->tracer) : NULL;
    if (!o)
        return NULL;
    struct bpf_tracer_stats ts;
    bpf_tracer_stats(s->tracer, &ts);
    cJSON_AddNumberToObject(o, "records", (double)ts.records);
    cJSON_AddNumberToObject(o, "lost", (double)ts.lost);
    cJSON_AddNumberToObject(o, "undelivered", (double)ts.undelivered);
    cJSON_AddNumberToObject(o, "returns_without_entry", (double)ts.returns_without_entry);
    /* lost, by cause (each a lost event already). */
    cJSON_AddNumberToObject(o, "ring_full", (double)ts.ring_full);
    cJSON_AddNumberToObject(o, "thread_map_full", (double)ts.thread_map_full);
    cJSON_AddNumberToObject(o, "syscall_map_full", (double)ts.syscall_map_full);
    cJSON_AddNumberToObject(o, "hint_map_full", (double)ts.hint_map_full);
    cJSON_AddNumberToObject(o, "thread_map_entries", ts.thread_map_entries);
    cJSON_AddNumberToObject(o, "cut_at_stop", (double)cut_at_stop(s));
    cJSON_AddNumberToObject(o, "malformed", (double)ts.malformed);
    cJSON_AddNumberToObject(o, "regions", (double)ts.regions);
    cJSON_AddNumberToObject(o, "region_drops", (double)ts.region_drops);
    cJSON_AddNumberToObject(o, "unwind_failures", (double)ts.unwind_failures);
    cJSON_AddNumberToObject(o, "stacks_outside_exec", (double)ts.stacks_outside_exec);
    cJSON_AddNumberToObject(o, "stacks_copy_short", (double)ts.stacks_copy_short);
    cJSON_AddNumberToObject(o, "unwind_fast", (double)ts.unwind_fast);
    cJSON_AddNumberToObject(o, "unwind_fallbacks", (double)ts.unwind_fallbacks);
    cJSON_AddNumberToObject(o, "unwind_rules", (double)ts.unwind_rules);
    cJSON_AddNumberToObject(o, "unwind_rules_evicted", (double)ts.unwind_rules_evicted);
    cJSON_AddNumberToObject(o, "exec_mappings_dropped", (double)ts.exec_overflows);
    if (s->syms) {
        struct sym_stats ss;
        uint64_t b, ob, nm;
        sym_snap_read(&s->snap, &ss, &b, &ob, &nm);
        struct modq_stats qs;
        modq_stats(&s->q, &qs);
        cJSON *sy = cJSON_AddObjectToObject(o, "symbols");
        if (sy) {
            cJSON_AddNumberToObject(sy, "modules", (double)ss.modules);
            cJSON_AddNumberToObject(sy, "symbols", (double)ss.symbols);
            cJSON_AddNumberToObject(sy, "lookups", (double)ss.lookups);
            cJSON_AddNumberToObject(sy, "misses", (double)ss.misses);
            /* Frames in a module without a symbol there, and what would name them. */
            cJSON_AddNumberToObject(sy, "unsymbolized", (double)ss.unsymbolized);
            if (ss.hint[0])
                cJSON_AddStringToObject(sy, "unsymbolized_hint", ss.hint);
            /* Module events the drains queued for the cache (modq.h). */
            cJSON_AddNumberToObject(sy, "queued", (double)qs.queued);
            cJSON_AddNumberToObject(sy, "queue_waiting", (double)qs.waiting);
            cJSON_AddNumberToObject(sy, "queue_max_waiting", (double)qs.max_waiting);
            cJSON_AddNumberToObject(sy, "queue_drops", (double)qs.drops);
        }
    }
    return o;
}

/* Frames are return addresses (taken at the allocator's return, or by the
 * unwinder): looked up as addr - 1. The queued module events first. */
static const char *bpf_src_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (!s->syms)
        return NULL;
    bpf_src_sym_sync(base);
    const char *r = sym_cache_resolve(s->syms, addr, 1, buf, bufsz);
    sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
    return r;
}

const struct source_ops source_bpf_ops = {
    .name = "bpf",
    .modes = SOURCE_PID,
    .summary = "eBPF uprobes on the allocator and mmap-family tracepoints of a running process "
               "(Linux, root)",
    .available = bpf_src_available,
    .open = bpf_src_open,
    .start = bpf_src_start,
    .drain = bpf_src_drain,
    .stop = bpf_src_stop,
    .finish = bpf_src_finish,
    .close = bpf_src_close,
    .stats = bpf_src_stats,
    .status_json = bpf_src_status_json,
    .space = NULL,
    .write = NULL,
    .close_input = NULL,
    .symbolize = bpf_src_symbolize,
    .sym_sync = bpf_src_sym_sync,
};

/* Synthetic input (bpf-source.h): tests only, outside the ops table above. */

static void synth_stats_copy(struct bpf_source *s)
{
    uv_mutex_lock(&s->mu);
    s->synth_st.events = s->cons.events;
    s->synth_st.malformed = s->cons.malformed;
    s->synth_st.lost = s->cons.undelivered;
    s->synth_st.lines = s->cons.records; /* records taken */
    uv_mutex_unlock(&s->mu);
}

/* The producer thread: what run.c's consumer does with the kernel ring's
 * records and drop counter, over the generator's items. */
static void synth_thread(void *arg)
{
    struct bpf_source *s = arg;
    struct bpf_emit emit = {.arg = s, .event = event_cb, .stack = stack_cb};
    bpf_consumer_init(&s->cons, &emit, s->synth.t0, s->stack_depth);
    struct bpf_synth_item it;
    int stop = 0;
    unsigned n = 0;
    while (!stop && s->synth.next(s->synth.arg, &it)) {
        if (it.drops)
            stop = bpf_consume_drops(&s->cons, it.drops_total, it.now) != 0;
        else
            stop = bpf_consume_record(&s->cons, it.rec, it.size) != 0;
        if (++n % 256 == 0) {
            synth_stats_copy(s);
            evring_publish(s->ring);
        }
    }
    synth_stats_copy(s);
    bpf_consumer_close(&s->cons);
    done_cb(s, stop ? "tracing stopped" : "end of synthetic input");
}

static int synth_start(struct source *base, char *err, size_t errsz)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->started)
        return 0;
    process_report(s, "synthetic");
    int rc = uv_thread_create(&s->synth_thread, synth_thread, s);
    if (rc) {
        snprintf(err, errsz, "cannot start the producer thread: %s", uv_strerror(rc));
        return rc;
    }
    s->synth_running = 1;
    s->started = 1;
    return 0;
}

static void synth_stop(struct source *base)
{
    struct bpf_source *s = (struct bpf_source *)base;
    if (s->stopped)
        return;
    s->stopped = 1;
    if (s->ring)
        evring_quit(s->ring);
    if (s->synth_running)
        uv_thread_join(&s->synth_thread);
    s->synth_running = 0;
}

static void synth_close(struct source *base)
{
    if (!base)
        return;
    struct bpf_source *s = (struct bpf_source *)base;
    synth_stop(base);
    if (s->ring)
        evring_free(s->ring);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->mu);
    ht_free(s);
}

static void synth_stats(struct source *base, struct source_stats *st)
{
    struct bpf_source *s = (struct bpf_source *)base;
    memset(st, 0, sizeof(*st));
    if (s->ring)
        evring_producer_stats(s->ring, st);
    uv_mutex_lock(&s->mu);
    st->events = s->synth_st.events;
    st->malformed = s->synth_st.malformed;
    st->lost = s->synth_st.lost + cut_at_stop(s);
    st->lines = s->synth_st.lines;
    uv_mutex_unlock(&s->mu);
}

static const struct source_ops bpf_synth_ops = {
    .name = "bpf-synthetic",
    .modes = 0, /* reachable only through bpf_source_open_synthetic */
    .summary = "the eBPF source on synthetic ring records (tests)",
    .start = synth_start,
    .drain = bpf_src_drain,
    .stop = synth_stop,
    .close = synth_close,
    .stats = synth_stats,
};

int bpf_source_open_synthetic(struct source **out, uv_loop_t *loop, const struct source_params *p,
                              const struct source_sink *sink, const struct bpf_synth *gen,
                              char *err, size_t errsz)
{
    *out = NULL;
    struct bpf_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &bpf_synth_ops;
    s->outer = *sink;
    s->base.sink = *sink;
    s->base.sink.arg = s;
    s->base.sink.events = events_cb;
    s->base.sink.process = process_fwd;
    s->synth = *gen;
    s->pid = gen->pid;
    s->stack_depth = p->stack_depth;
    uv_mutex_init(&s->mu);
    mem_acct_init(&s->acct, p->budget);
    struct evring_limits lim = {gen->ring_events ? gen->ring_events : BPF_RING_EVENTS,
                                p->max_stacks, p->max_strings, p->max_name_len, p->budget};
    int rc = evring_new(&s->ring, loop, &lim, ring_ready, s);
    if (rc) {
        snprintf(err, errsz, "cannot set up the event ring: %s", uv_strerror(rc));
        synth_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
