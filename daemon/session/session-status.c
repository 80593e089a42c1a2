/* What a session shows of itself: its status, its input's figures, its
 * process line (session.h). */
#include "session.h"
#include "session-int.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include "config.h"
#include "mem-acct.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

size_t session_process_line(struct session *s, uint64_t t, char *buf, size_t cap)
{
    /* The name lives in the session, not in the fixed-size event. */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "t", (double)t);
    cJSON_AddStringToObject(o, "ev", "process");
    cJSON_AddNumberToObject(o, "pid", (double)s->eng.pid);
    cJSON_AddStringToObject(o, "name", s->process_name);
    if (s->stream_wall[0])
        cJSON_AddStringToObject(o, "wall", s->stream_wall);
    int ok = cJSON_PrintPreallocated(o, buf, (int)cap - 1, 0);
    cJSON_Delete(o);
    if (!ok)
        return 0;
    size_t n = strlen(buf);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    return n + 1;
}

cJSON *session_ingest_json(struct session *s)
{
    session_stats_refresh(s);
    const struct source_stats *in = &s->ingest;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bytes", (double)in->bytes);
    cJSON_AddNumberToObject(o, "lines", (double)in->lines);
    cJSON_AddNumberToObject(o, "events", (double)in->events);
    cJSON_AddNumberToObject(o, "malformed", (double)in->malformed);
    cJSON_AddNumberToObject(o, "lost", (double)in->lost); /* what the source knows it lost */
    if (s->input_dropped)
        cJSON_AddNumberToObject(o, "dropped_bytes", (double)s->input_dropped);
    cJSON *errs = cJSON_AddArrayToObject(o, "errors");
    for (uint32_t i = 0; i < in->nerrors; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "line", (double)in->errors[i].line);
        cJSON_AddStringToObject(e, "msg", in->errors[i].msg);
        cJSON_AddItemToArray(errs, e);
    }
    return o;
}


uint32_t session_id(const struct session *s)
{
    return s->id;
}

struct session *session_next(const struct session *s)
{
    return s->next;
}

const char *session_name(const struct session *s)
{
    return s->name;
}

enum session_state session_state(const struct session *s)
{
    return s->state;
}

struct skip_cache *session_default_skip(struct session *s)
{
    return &s->default_skip;
}

struct engine *session_engine(struct session *s)
{
    return &s->eng;
}

const char *session_source_name(const struct session *s)
{
    return s->source;
}

const char *session_process_name(const struct session *s)
{
    return s->process_name;
}

int64_t session_wall_start(const struct session *s)
{
    return s->wall_start;
}

int session_dropped(const struct session *s)
{
    return s->dropped;
}

cJSON *session_source_status(struct session *s)
{
    return s->src && s->src->ops->status_json ? s->src->ops->status_json(s->src) : NULL;
}

void session_set_owner(struct session *s, uint32_t uid)
{
    s->owner = uid;
}

size_t session_input_space(const struct session *s)
{
    return s->src->ops->space(s->src);
}

void session_input_write(struct session *s, const char *buf, size_t n)
{
    s->input_dropped += n - s->src->ops->write(s->src, buf, n);
}

void session_input_close(struct session *s)
{
    s->src->ops->close_input(s->src);
}

void session_set_state(struct session *s, enum session_state st)
{
    s->state = st;
}

const char *session_stop_reason(const struct session *s)
{
    return s->stop_reason;
}

void session_set_end_reason(struct session *s, const char *why)
{
    snprintf(s->end_reason, sizeof(s->end_reason), "%s", why);
}

const struct ht_config *session_config(const struct session *s)
{
    return s->set->cfg;
}

const struct source_stats *session_ingest(const struct session *s)
{
    return &s->ingest;
}

const struct source_params *session_live_params(const struct session *s)
{
    return &s->live_params;
}

uint32_t session_snapshots_pending(const struct session *s)
{
    return s->snap_pending;
}

uint32_t session_queries_waiting(const struct session *s)
{
    return s->q_waiting;
}

void *session_loader(const struct session *s)
{
    return s->loader;
}

void session_set_loader(struct session *s, void *loader)
{
    s->loader = loader;
}

void session_set_input_hooks(struct session *s, void (*drained)(struct session *s),
                             void (*source_end)(struct session *s),
                             void (*dropped)(struct session *s))
{
    s->on_drained = drained;
    s->on_source_end = source_end;
    s->on_dropped = dropped;
}

uint64_t session_recorded_events(const struct session *s)
{
    return s->recorded_events;
}

void session_recorder_lost(struct session *s, uint64_t n)
{
    s->recorder_lost += n;
}

void session_recorder_drops(struct session *s, uint64_t n)
{
    s->recorder_drops += n;
}

/* status. */

static void ring_json(cJSON *parent, const char *key, const struct chunk_ring *r)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    cJSON_AddNumberToObject(o, "len", (double)chunk_ring_len(r));
    cJSON_AddNumberToObject(o, "cap", (double)r->cap);
    cJSON_AddNumberToObject(o, "pushed", (double)r->pushed);
    cJSON_AddBoolToObject(o, "evicted", r->evicted);
    if (r->evicted)
        cJSON_AddNumberToObject(o, "horizon", (double)r->horizon);
}

/* One number per structure, the engine's and (while it is open) the source's. */
static cJSON *by_kind_json(const uint64_t *eng, const uint64_t *dec)
{
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < MEM_KINDS; k++)
        cJSON_AddNumberToObject(o, mem_kind_names[k], (double)(eng[k] + (dec ? dec[k] : 0)));
    return o;
}

/* The session's byte budget, what it holds by structure, and what did not fit. */
static void memory_json(cJSON *m, struct session *s, const struct session_status_ctx *x)
{
    const struct source_stats *in = &s->ingest; /* refreshed by session_ingest_json */
    cJSON_AddNumberToObject(m, "budget", (double)s->mem.limit);
    cJSON_AddNumberToObject(m, "used", (double)mem_budget_used(&s->mem));
    cJSON_AddItemToObject(m, "by_structure",
                          by_kind_json(s->eng.acct.bytes, s->src ? in->mem : NULL));
    cJSON_AddItemToObject(m, "over_budget", by_kind_json(s->eng.acct.over_budget, in->over_budget));
    cJSON_AddItemToObject(m, "no_memory", by_kind_json(s->eng.acct.no_memory, in->no_memory));
    uint64_t rec = 0;
    for (struct session_sub *sub = s->subs; sub; sub = sub->next)
        rec += x->sub_queued(sub, s);
    cJSON_AddNumberToObject(m, "recorders_queued", (double)rec);
    /* Calls of the allocator that failed: after each, growth backs off (mem-acct.h). */
    cJSON_AddNumberToObject(m, "alloc_failures",
                            (double)(s->eng.acct.alloc_failures + in->alloc_failures));
    const struct mem_budget *d = x->daemon_mem;
    cJSON *o = cJSON_AddObjectToObject(m, "daemon");
    cJSON_AddNumberToObject(o, "budget", (double)d->limit);
    cJSON_AddNumberToObject(o, "used", (double)(mem_budget_used(d) + x->out_queued));
}

/* Queries of the session (qjob.h): how many ran, wait, run now, were
 * refused for a full queue or failed, and the longest each took of the loop
 * (view open + close + answer) and of a worker. */
static void queries_json(cJSON *o, const struct session *s)
{
    cJSON_AddNumberToObject(o, "run", (double)s->qs.run);
    cJSON_AddNumberToObject(o, "waiting", s->q_waiting);
    cJSON_AddNumberToObject(o, "in_flight", s->q_running ? 1 : 0);
    cJSON_AddNumberToObject(o, "rejected_busy", (double)s->qs.rejected);
    cJSON_AddNumberToObject(o, "failed", (double)s->qs.failed);
    cJSON_AddNumberToObject(o, "longest_loop_hold_ms", (double)s->qs.hold_max_ns / 1e6);
    cJSON_AddNumberToObject(o, "longest_worker_ms", (double)s->qs.worker_max_ns / 1e6);
    cJSON_AddNumberToObject(o, "worker_ms", (double)s->qs.worker_total_ns / 1e6);
    /* Drains put off while a query held the symbolizer a recorder needed. */
    cJSON_AddNumberToObject(o, "drains_put_off", (double)s->drains_put_off);
}

/* The session's process: pid, name, when it was recorded, its exit. */
static void status_process(cJSON *d, const struct session *s)
{
    const struct engine *e = &s->eng;
    cJSON *p = cJSON_AddObjectToObject(d, "process");
    cJSON_AddNumberToObject(p, "pid", (double)e->pid);
    cJSON_AddStringToObject(p, "name", s->process_name);
    if (s->stream_wall[0])
        cJSON_AddStringToObject(p, "recorded_at", s->stream_wall);
    cJSON_AddBoolToObject(p, "exited", e->exited);
    if (e->exited)
        cJSON_AddNumberToObject(p, "exit_code", (double)e->exit_code);
    cJSON *mods = cJSON_AddObjectToObject(d, "modules");
    cJSON_AddNumberToObject(mods, "count", e->modules.n);
    cJSON_AddNumberToObject(mods, "loads", (double)e->modules.loads);
    cJSON_AddNumberToObject(mods, "unloads", (double)e->modules.unloads);
    cJSON_AddNumberToObject(mods, "dropped", (double)e->modules.drops);
    cJSON_AddNumberToObject(mods, "unknown_unloads", (double)e->modules.unknown_unloads);
    /* Module ranges not kept for naming a replay's frames (modnames.h: the
     * cap, a zero or wrapping range, memory); loop-owned like the table. */
    cJSON_AddNumberToObject(mods, "names_dropped", (double)s->modnames.drops);
}

/* The heap: what is outstanding, its peak, each heap of the process. */
static void status_heap(cJSON *d, const struct engine *e)
{
    cJSON *h = cJSON_AddObjectToObject(d, "heap");
    cJSON_AddNumberToObject(h, "outstanding", (double)e->heap_bytes);
    cJSON_AddNumberToObject(h, "outstanding_count", (double)e->heap_count);
    cJSON_AddNumberToObject(h, "peak", (double)e->peak_heap_bytes);
    cJSON_AddNumberToObject(h, "table_cap", e->table.cap);
    cJSON *heaps = cJSON_AddArrayToObject(h, "heaps");
    for (uint32_t i = 0; i < e->nheaps; i++) {
        cJSON *o = cJSON_CreateObject();
        char buf[24];
        snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)e->heaps[i].handle);
        cJSON_AddStringToObject(o, "handle", buf);
        cJSON_AddNumberToObject(o, "outstanding", (double)e->heaps[i].out_bytes);
        cJSON_AddNumberToObject(o, "outstanding_count", (double)e->heaps[i].out_count);
        cJSON_AddNumberToObject(o, "destroys", (double)e->heaps[i].destroys);
        cJSON_AddItemToArray(heaps, o);
    }
}

static void status_triggers(cJSON *d, const struct session *s)
{
    cJSON *tr = cJSON_AddArrayToObject(d, "triggers");
    for (unsigned i = 0; i < s->ntriggers; i++) {
        const struct trigger *t = &s->triggers[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "when", t->text);
        cJSON_AddStringToObject(o, "action", t->snapshot ? "snapshot" : "stop");
        if (t->every)
            cJSON_AddNumberToObject(o, "every", (double)t->every);
        cJSON_AddNumberToObject(o, "fired", t->fired);
        if (t->snapshot && t->every)
            cJSON_AddNumberToObject(o, "steps", (double)t->steps);
        if (t->fired) {
            cJSON_AddNumberToObject(o, "first_fired_at", (double)t->first_t);
            cJSON_AddNumberToObject(o, "last_fired_at", (double)t->last_t);
        }
        cJSON_AddItemToArray(tr, o);
    }
}

/* The snapshots kept, oldest first. */
static void status_snapshots(cJSON *d, const struct session *s)
{
    cJSON *sn = cJSON_AddArrayToObject(d, "snapshots");
    uint32_t cap = s->set->cfg->max_snapshots;
    for (uint32_t k = 0; k < cap; k++) {
        const struct snapshot *x = &s->snaps[(s->snap_seq + k) % cap];
        if (!x->data)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "seq", x->seq);
        cJSON_AddNumberToObject(o, "t", (double)x->t);
        cJSON_AddStringToObject(o, "reason", x->reason);
        cJSON_AddItemToArray(sn, o);
    }
}

cJSON *session_status_json(struct session *s, const struct session_status_ctx *x)
{
    struct engine *e = &s->eng;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "id", s->id);
    cJSON_AddStringToObject(d, "name", s->name);
    cJSON_AddStringToObject(d, "state", session_state_name(s->state));
    if (s->finishing) /* stopped, still applying what the source had taken */
        cJSON_AddTrueToObject(d, "draining");
    if (s->stop_reason[0])
        cJSON_AddStringToObject(d, "stop_reason", s->stop_reason);
    cJSON_AddStringToObject(d, "source", s->source);
    cJSON_AddNumberToObject(d, "wall_start", (double)s->wall_start);
    cJSON_AddNumberToObject(d, "now", (double)e->now);
    status_process(d, s);
    cJSON_AddItemToObject(d, "ingest", session_ingest_json(s));
    /* The source's own view (eBPF: its probes, ring size, drops), while it is kept. */
    cJSON *sj = NULL;
    if (s->src && s->src->ops->status_json) {
        sj = s->src->ops->status_json(s->src); /* never waits for the symbolizer (source.h) */
    } else if (s->src_status_last) {
        sj = cJSON_Duplicate(s->src_status_last, 1);
    }
    /* The launch details (the agent's token) are for run's reply only. */
    cJSON_DeleteItemFromObjectCaseSensitive(sj, "launch");
    if (sj)
        cJSON_AddItemToObject(d, "source_status", sj);
    if (s->spawned || s->spawn_failed) {
        /* start --exe: the sessions made for the image's processes, those
         * that could not be made, and ended ones dropped to make room. */
        cJSON *sp = cJSON_AddObjectToObject(d, "spawned");
        cJSON_AddNumberToObject(sp, "sessions", s->spawned);
        cJSON_AddNumberToObject(sp, "failed", s->spawn_failed);
        cJSON_AddNumberToObject(sp, "ended_dropped", s->spawned_dropped);
    }
    status_heap(d, e);
    cJSON *c = cJSON_AddObjectToObject(d, "commits");
    cJSON_AddNumberToObject(c, "committed", (double)e->commits.bytes);
    cJSON_AddNumberToObject(c, "ranges", e->commits.n);
    cJSON_AddNumberToObject(c, "peak", (double)e->peak_commit_bytes);
    cJSON *pb = cJSON_AddObjectToObject(d, "private_bytes");
    cJSON_AddNumberToObject(pb, "now", (double)e->private_bytes);
    cJSON_AddNumberToObject(pb, "peak", (double)e->peak_private_bytes);
    cJSON *m = cJSON_AddObjectToObject(d, "memory");
    cJSON_AddNumberToObject(m, "engine", (double)engine_memory(e));
    cJSON_AddNumberToObject(m, "stacks", (double)stack_intern_memory(&e->si));
    cJSON_AddNumberToObject(m, "distinct_stacks", e->si.nstacks - 1);
    memory_json(m, s, x);
    cJSON *rings = cJSON_AddObjectToObject(d, "rings");
    ring_json(rings, "heap_lifetimes", &e->heap_life);
    ring_json(rings, "commit_lifetimes", &e->commit_life);
    ring_json(rings, "realloc_events", &e->re_ring);
    cJSON *tl = cJSON_AddObjectToObject(rings, "timeline");
    cJSON_AddNumberToObject(tl, "len", (double)timeline_len(&e->tl));
    cJSON_AddNumberToObject(tl, "cap", (double)e->tl.cap);
    cJSON_AddNumberToObject(tl, "interval_ns", (double)e->lim.timeline_ns);
    cJSON_AddItemToObject(d, "quality", x->quality(s));
    status_triggers(d, s);
    status_snapshots(d, s);
    cJSON_AddNumberToObject(d, "snapshots_dropped", (double)s->snaps_dropped);
    /* Events recorders missed while behind, each reported in its stream as a "lost" gap. */
    cJSON_AddNumberToObject(d, "recorder_lost", (double)s->recorder_lost);
    cJSON *mk = cJSON_AddArrayToObject(d, "marks");
    for (uint32_t i = 0; i < e->nmarks; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", e->marks[i].name);
        cJSON_AddNumberToObject(o, "t", (double)e->marks[i].t);
        cJSON_AddItemToArray(mk, o);
    }
    queries_json(cJSON_AddObjectToObject(d, "queries"), s);
    return d;
}

/* A sampled session (run --sample, --max-overhead) says so in every reply:
 * its counts and sizes are estimates. Exact sessions' replies are unchanged. */
static void sampled_json(cJSON *o, const struct source_stats *in)
{
    if (!in->sampling)
        return;
    cJSON *sm = cJSON_AddObjectToObject(o, "sampled");
    cJSON_AddNumberToObject(sm, "mean_bytes", (double)in->sample_mean);
    cJSON_AddNumberToObject(sm, "sampled_allocs", (double)in->sampled_allocs);
    if (in->sample_max_overhead) {
        cJSON_AddNumberToObject(sm, "max_overhead_pct", in->sample_max_overhead);
        cJSON_AddNumberToObject(sm, "overhead_pct", (double)in->sample_overhead_ppm / 1e4);
        cJSON_AddNumberToObject(sm, "rate_changes", (double)in->sample_rate_changes);
    }
    cJSON_AddNumberToObject(o, "sample_set_full", (double)in->sample_set_full);
}

cJSON *session_quality_json(struct session *s)
{
    cJSON *o = cJSON_CreateObject();
#define X(name, doc) cJSON_AddNumberToObject(o, #name, (double)s->eng.q.name);
    HT_QUALITY_MAP(X)
#undef X
    /* Lost: "lost" records in the stream, and what the source itself knows it lost. */
    if (s->ingest.lost)
        cJSON_ReplaceItemInObjectCaseSensitive(
            o, "lost", cJSON_CreateNumber((double)(s->eng.q.lost + s->ingest.lost)));
    cJSON_AddNumberToObject(o, "malformed_lines", (double)s->ingest.malformed);
    cJSON_AddNumberToObject(o, "ring_drops",
                            (double)(s->eng.heap_life.dropped + s->eng.commit_life.dropped));
    cJSON_AddNumberToObject(o, "commit_split_drops", (double)s->eng.commits.split_drops);
    /* Both interners count: the engine's and the source's private one. */
    const struct source_stats *in = &s->ingest;
    cJSON_AddNumberToObject(o, "stack_table_drops",
                            (double)(s->eng.si.drops + in->stack_table_drops));
    cJSON_AddNumberToObject(o, "string_drops", (double)(s->eng.si.str_drops + in->string_drops));
    cJSON_AddNumberToObject(o, "long_names", (double)(s->eng.si.long_names + in->long_names));
    cJSON_AddNumberToObject(o, "invalid_utf8_names",
                            (double)(s->eng.si.bad_utf8 + in->bad_utf8_names));
    uint64_t over = mem_acct_refusals(&s->eng.acct, 1), nomem = mem_acct_refusals(&s->eng.acct, 0);
    for (int k = 0; k < MEM_KINDS; k++) {
        over += in->over_budget[k];
        nomem += in->no_memory[k];
    }
    cJSON_AddNumberToObject(o, "budget_drops", (double)over);
    cJSON_AddNumberToObject(o, "no_memory_drops", (double)nomem);
    cJSON_AddNumberToObject(o, "timeline_drops", (double)s->eng.tl.dropped);
    cJSON_AddNumberToObject(o, "snapshots_over_budget", (double)s->snaps_over_budget);
    cJSON_AddNumberToObject(o, "recorder_drops", (double)s->recorder_drops);
    sampled_json(o, in);
    return o;
}
