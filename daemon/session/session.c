/* Sessions: an engine fed by a source, with triggers, snapshots and subscribers. */
#include "session.h"
#include "session-int.h"

#include "config.h"
#include "engine-view.h"
#include "mem-acct.h"
#include "qjob.h"
#include "qworker.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-text.h"
#include "ht-units.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

void session_set_init(struct session_set *set, uv_loop_t *loop, const struct ht_config *cfg,
                      struct mem_budget *mem, const struct session_hooks *hooks)
{
    memset(set, 0, sizeof(*set));
    set->loop = loop;
    set->cfg = cfg;
    set->mem = mem;
    set->hooks = hooks;
    set->loop_thread = uv_thread_self();
}

void session_set_close(struct session_set *set)
{
    set->stopping = 1;
    while (set->head)
        session_drop(set->head);
    /* Joined once their running queries return; the sessions kept for them are freed then. */
    if (set->qw) {
        struct qworker *qw = set->qw;
        qworker_stop(qw); /* finishes what no worker took: set->qw is still set meanwhile */
        set->qw = NULL;
    }
}

struct session *session_new(struct session_set *set, const char *name, const char *source,
                            char *err, size_t errsz)
{
    if (session_admit(set, name, err, errsz) != 0)
        return NULL;
    struct session *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    s->snaps = ht_calloc(set->cfg->max_snapshots, sizeof(struct snapshot));
    mem_budget_init(&s->mem, set->mem, set->cfg->session_memory_budget);
    if (!s->snaps || uv_mutex_init_recursive(&s->sym_mu) != 0) {
        ht_free(s->snaps);
        ht_free(s);
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    int eng_rc = engine_init_budget(&s->eng, &set->cfg->limits, &s->mem);
    if (eng_rc == 0 && modnames_init(&s->modnames, &s->eng.acct) != 0) {
        engine_close(&s->eng);
        eng_rc = UV_ENOMEM;
    }
    if (eng_rc != 0) {
        uv_mutex_destroy(&s->sym_mu);
        ht_free(s->snaps);
        ht_free(s);
        snprintf(err, errsz,
                 "cannot create the session: out of memory, or its first tables do not fit the "
                 "memory budget (daemon-wide %llu of %llu bytes in use)",
                 (unsigned long long)mem_budget_used(set->mem),
                 (unsigned long long)set->mem->limit);
        return NULL;
    }
    s->set = set;
    s->id = ++set->next_id;
    if (name && *name)
        snprintf(s->name, sizeof(s->name), "%s", name);
    else
        snprintf(s->name, sizeof(s->name), "s%u", s->id);
    s->source = source;
    s->wall_start = (int64_t)time(NULL);
    s->next = set->head;
    set->head = s;
    set->n++;
    log_info("session %u \"%s\" created (%s)", s->id, s->name, source);
    return s;
}

/* Draining the source: DRAIN_BUDGET records per loop iteration, so queries
 * on other connections are answered between two drains (about 3 ms of
 * engine work). */
#define DRAIN_BUDGET 8192

static int session_active(const struct session *s)
{
    return s->state == SESSION_LOADING || s->state == SESSION_RUNNING;
}

/* Applying events: running, or stopped while the source delivers what it
 * had taken (finishing). */
static int session_draining(const struct session *s)
{
    return session_active(s) || s->finishing;
}

int session_taking_input(const struct session *s)
{
    return s->src && !s->src_over && session_active(s);
}

void session_src_lock(struct session *s)
{
    uv_mutex_lock(&s->sym_mu);
}

void session_src_unlock(struct session *s)
{
    uv_mutex_unlock(&s->sym_mu);
}

void session_stats_refresh(struct session *s)
{
    /* Never waits for the symbolizer lock: a symbolizing source reports its
     * symbol cache's counters as of their last use (source.h stats). */
    if (s->src)
        s->src->ops->stats(s->src, &s->ingest);
}

static void idle_closed_cb(uv_handle_t *h)
{
    ht_free(h);
}

/* The source is over (it ended, or the session stopped): its last counters
 * are kept; one without a symbolizer is closed at once, so its buffers go
 * back to the budget. */
static void source_over(struct session *s)
{
    s->src_over = 1;
    session_subs_end(s, s->stop_reason); /* a finishing stop kept them for the rest */
    session_stats_refresh(s);
    if (!s->src->ops->symbolize) {
        if (s->src->ops->status_json && !s->src_status_last)
            s->src_status_last = s->src->ops->status_json(s->src);
        s->src->ops->close(s->src);
        s->src = NULL;
    }
    log_info("session %u: source %s over (%s): %llu events, %llu malformed lines", s->id, s->source,
             s->stop_reason, (unsigned long long)s->ingest.events,
             (unsigned long long)s->ingest.malformed);
    if (s->on_source_end)
        s->on_source_end(s);
}

static void drain_cb(uv_idle_t *h)
{
    struct session *s = h->data;
    if (!s || !s->src || s->src_over) {
        uv_idle_stop(h);
        return;
    }
    int rc = 0;
    /* Without the symbolizer lock: a query worker may hold it for long (a
     * module's first symbol table load) and the loop must keep taking
     * events and answering. What the drain learnt for the symbolizer
     * (eBPF: modules) waits in the source until the lock is free now, or
     * until the next symbolize, which applies it first (source.h).
     * Except for a recorder, which names the frames of every event it is
     * handed (htev-write.c): with one subscribed the drain holds the lock,
     * and while a worker has it the drain is put off until that query
     * returns (session_sym_released) instead of waiting for it; the events
     * wait in the source meanwhile. */
    int locked = 0;
    if (s->nrecorders && s->src->ops->symbolize && session_draining(s)) {
        if (uv_mutex_trylock(&s->sym_mu) != 0) {
            if (s->q_running) {
                s->drains_put_off++;
                s->drain_put_off = 1;
                uv_idle_stop(h);
                return;
            }
            session_src_lock(s); /* held by no query of ours: never expected */
        }
        locked = 1;
    }
    if (session_draining(s))
        rc = s->src->ops->drain(s->src, DRAIN_BUDGET);
    if (s->src->ops->sym_sync && (locked || uv_mutex_trylock(&s->sym_mu) == 0)) {
        s->src->ops->sym_sync(s->src);
        if (!locked)
            uv_mutex_unlock(&s->sym_mu);
    }
    if (locked)
        session_src_unlock(s);
    session_stats_refresh(s);
    session_warm(s);
    if (!session_draining(s)) {
        uv_idle_stop(h);
        source_over(s);
        return;
    }
    if (rc <= 0)
        uv_idle_stop(h);
    if (s->on_drained)
        s->on_drained(s);
}

/* Sink callbacks (source.h). */
static int sink_mark(void *arg, const char *name, uint64_t t)
{
    struct session *s = arg;
    return engine_mark(&s->eng, name, t);
}

static void sink_ready(void *arg)
{
    struct session *s = arg;
    /* A drain put off for the symbolizer goes on when the query returns. */
    if (!s->dropped && s->drain_idle && !s->src_over && !s->drain_put_off)
        uv_idle_start(s->drain_idle, drain_cb);
}

void session_sym_released(struct session *s)
{
    if (!s->drain_put_off)
        return;
    s->drain_put_off = 0;
    sink_ready(s);
}

static void sink_ended(void *arg, const char *reason)
{
    struct session *s = arg;
    if (s->finishing) {
        s->finishing = 0; /* all it had taken is applied: the drain ends it */
        return;
    }
    if (s->dropped || !session_active(s))
        return;
    /* Stopping tells the subscribers (record, top) the input is over; a
     * source that ran out is "ended" rather than "stopped". */
    session_stop(s, s->end_reason[0] ? s->end_reason : reason);
    s->state = SESSION_ENDED;
}

static void sink_raw(void *arg, const char *buf, size_t n, uint64_t lines, uint64_t lost)
{
    struct session *s = arg;
    for (struct session_sub *sub = s->subs, *next; sub; sub = next) {
        next = sub->next;
        if (sub->ops->raw)
            sub->ops->raw(sub, buf, n, lines, lost);
    }
}

/* A new process of an image traced with start --exe: its own session,
 * "<name>.<pid>", with the parent's parameters and a source of the parent's
 * backend taking its records from the parent's (source.h spawn). */
/* Every slot taken when a process of the parent's image starts: the oldest
 * of the parent's spawned sessions that has ended is dropped for it (its
 * figures gone, counted in the parent's status and logged), so an image
 * run again and again is traced in its latest runs rather than refused
 * from the max_sessions-th on. 1 if one was dropped. */
static int spawned_make_room(struct session *parent)
{
    struct session *old = NULL;
    for (struct session *o = parent->set->head; o; o = o->next)
        if (o->spawned_by == parent->id && o->state == SESSION_ENDED && (!old || o->id < old->id))
            old = o;
    if (!old)
        return 0;
    log_info("session %u \"%s\": ended session %u \"%s\" dropped for a new process of its image",
             parent->id, parent->name, old->id, old->name);
    parent->spawned_dropped++;
    session_drop(old);
    return 1;
}

static int sink_spawn(void *arg, uint64_t pid, char *err, size_t errsz)
{
    struct session *parent = arg;
    /* Its own process may have ended (the session with it): the source
     * still serves the image's later processes until stopped. */
    if (!parent->src || parent->dropped || parent->state == SESSION_STOPPED) {
        snprintf(err, errsz, "session %u is stopped", parent->id);
        return HT_ESTATE;
    }
    char name[64];
    snprintf(name, sizeof(name), "%.40s.%llu", parent->name, (unsigned long long)pid);
    struct session *c = session_new(parent->set, name, parent->source, err, errsz);
    if (!c && spawned_make_room(parent))
        c = session_new(parent->set, name, parent->source, err, errsz);
    if (!c) {
        parent->spawn_failed++;
        return HT_EFULL;
    }
    c->owner = parent->owner;
    c->spawned_by = parent->id;
    struct source_params p = parent->live_params;
    p.mode = SOURCE_PID;
    p.pid = pid;
    p.image = NULL;
    p.argv = NULL;
    p.parent = parent->src;
    c->state = SESSION_RUNNING;
    int rc = session_source_begin(c, parent->src->ops, &p, err, errsz);
    if (rc) {
        log_info("session %u: the session for process %llu failed: %s", parent->id,
                 (unsigned long long)pid, err);
        session_drop(c);
        parent->spawn_failed++;
        return rc;
    }
    parent->spawned++;
    log_info("session %u \"%s\": process %llu of its image traced as session %u \"%s\"",
             parent->id, parent->name, (unsigned long long)pid, c->id, c->name);
    return 0;
}

/* Address frames through the live source's symbolizer (stack-intern.h
 * resolve): from the loop (replies, the skip cache's warming) and from the
 * query workers (cull and require patterns), so under the session's lock.
 * The source stays open while a query runs (session_drop waits for it). */
static const char *session_resolve(void *arg, uint64_t addr, char *buf, size_t bufsz)
{
    struct session *s = arg;
    if (!s->src || !s->src->ops->symbolize)
        return modnames_text(&s->modnames, addr, buf, bufsz);
    session_src_lock(s);
#ifdef HEAPTRACE_TEST_KNOBS
    /* A slow first table load on a worker, for the tests of what the loop
     * does meanwhile (session_set test_sym_delay_ms). */
    const struct session_set *set = s->set;
    if (set->test_sym_delay_ms && !s->test_sym_delayed) {
        uv_thread_t self = uv_thread_self();
        if (!uv_thread_equal(&self, &set->loop_thread)) {
            s->test_sym_delayed = 1;
            uv_sleep((unsigned)set->test_sym_delay_ms);
        }
    }
#endif
    const char *r = s->src->ops->symbolize(s->src, addr, buf, bufsz);
    session_src_unlock(s);
    return r;
}

int session_source_begin(struct session *s, const struct source_ops *ops, struct source_params *p,
                         char *err, size_t errsz)
{
    const struct engine_limits *lim = &s->set->cfg->limits;
    p->max_stacks = lim->max_stacks;
    p->max_strings = lim->max_strings;
    p->max_name_len = lim->max_name_len;
    p->budget = &s->mem;
    struct source_sink sink = {s,          &s->eng.si, session_apply, session_process,
                               sink_ready, sink_ended, sink_raw, sink_spawn, sink_mark};
    s->drain_idle = ht_malloc(sizeof(*s->drain_idle));
    if (!s->drain_idle) {
        snprintf(err, errsz, "out of memory");
        return HT_ENOMEM;
    }
    uv_idle_init(s->set->loop, s->drain_idle);
    s->drain_idle->data = s;
    s->source = ops->name;
    s->live_params = *p;
    s->live_params.image = NULL;
    s->live_params.argv = NULL;
    s->live_params.parent = NULL;
    int rc = ops->open(&s->src, s->set->loop, p, &sink, err, errsz);
    if (rc != 0) {
        s->src = NULL;
        return rc;
    }
    if ((rc = ops->start(s->src, err, errsz)) != 0) {
        ops->close(s->src);
        s->src = NULL;
        return rc;
    }
    s->eng.si.resolve = session_resolve;
    s->eng.si.resolve_arg = s;
    return 0;
}

void session_stop(struct session *s, const char *reason)
{
    if (s->dropped || s->state == SESSION_STOPPED || s->state == SESSION_ENDED)
        return;
    /* The source stops producing (a live one detaches) now; it may be
     * draining right now (a trigger fired), so what follows its end runs
     * from the drain callback, on the next loop iteration. One that can
     * finish delivers every event it had taken first: they are applied
     * (and recorded) before the source is over. */
    if (s->src && !s->src_over) {
        s->finishing = s->src->ops->finish && s->src->ops->finish(s->src) == 0;
        if (!s->finishing) {
            s->src->ops->stop(s->src);
            s->drain_put_off = 0; /* a stopped session drains nothing: no symbolizer needed */
        }
        if (!s->drain_put_off)
            uv_idle_start(s->drain_idle, drain_cb);
    }
    s->state = SESSION_STOPPED;
    snprintf(s->stop_reason, sizeof(s->stop_reason), "%s", reason);
    log_info("session %u stopped: %s%s", s->id, reason,
             s->finishing ? " (applying what the source had taken)" : "");
    if (!s->finishing)
        session_subs_end(s, reason);
}

void session_drop(struct session *s)
{
    struct session_set *set = s->set;
    if (s->dropped)
        return;
    session_subs_end(s, "session dropped");
    if (s->on_dropped)
        s->on_dropped(s);
    for (struct session **p = &set->head; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    set->n--;
    s->dropped = 1;
    /* Waiting queries are answered now (ENOSESSION); snapshots' jobs read the ring: first. */
    int running = session_queries_cancel(s);
    for (uint32_t i = 0; i < set->cfg->max_snapshots; i++)
        cJSON_Delete(s->snaps[i].data);
    ht_free(s->snaps);
    s->snaps = NULL;
    if (s->drain_idle) {
        s->drain_idle->data = NULL;
        uv_close((uv_handle_t *)s->drain_idle, idle_closed_cb);
        s->drain_idle = NULL; /* the source's ready calls find no drain */
    }
    if (running) {
        /* A worker reads the engine through its view and may ask the
         * source for frame names: both stay until its query returns
         * (job_finished then calls session_free_dropped). The source stops
         * producing now. */
        if (s->src && !s->src_over)
            s->src->ops->stop(s->src);
        log_info("session %u dropped (freed once its running query returns)", s->id);
        return;
    }
    session_free_dropped(s);
}

void session_free_dropped(struct session *s)
{
    if (s->src)
        s->src->ops->close(s->src);
    cJSON_Delete(s->src_status_last);
    skip_cache_free(&s->default_skip);
    modnames_close(&s->modnames);
    engine_close(&s->eng);
    uv_mutex_destroy(&s->sym_mu);
    log_info("session %u dropped", s->id);
    ht_free(s);
}

struct session *session_find(struct session_set *set, const cJSON *ref)
{
    for (struct session *s = set->head; s; s = s->next) {
        if (cJSON_IsNumber(ref) && (double)s->id == ref->valuedouble)
            return s;
        if (cJSON_IsString(ref)) {
            char *end;
            unsigned long id = strtoul(ref->valuestring, &end, 10);
            if ((*end == '\0' && end != ref->valuestring && id == s->id) ||
                strcmp(ref->valuestring, s->name) == 0)
                return s;
        }
    }
    return NULL;
}

/* Events from the source, stacks already the engine's: applied in one batch,
 * or one at a time while there are triggers (a spike that passes a threshold
 * between two batch ends must not be missed). Nonzero once the session is
 * stopped: the rest is not applied. */
int session_apply(void *arg, struct ht_event *evs, size_t n)
{
    struct session *s = arg;
    if (!session_draining(s))
        return 1;
    size_t done = n;
    if (s->ntriggers && session_active(s)) {
        for (size_t i = 0; i < n; i++) {
            engine_apply(&s->eng, &evs[i]);
            session_check_triggers(s);
            if (!session_draining(s)) {
                done = i + 1;
                break;
            }
            if (!session_active(s)) { /* stopped, finishing: the rest without triggers */
                engine_apply_batch(&s->eng, evs + i + 1, n - i - 1);
                break;
            }
        }
    } else {
        engine_apply_batch(&s->eng, evs, n);
    }
    if (!s->src || !s->src->ops->symbolize)
        modnames_apply(&s->modnames, &s->eng.si, evs, done);
    /* Top subscribers do not take the events. */
    if (s->nrecorders && done) {
        for (struct session_sub *sub = s->subs, *next; sub; sub = next) {
            next = sub->next;
            if (sub->ops->events)
                sub->ops->events(sub, evs, done);
        }
        s->recorded_events += done;
    }
    return !session_draining(s);
}

void session_warm(struct session *s)
{
    uint32_t n = s->eng.si.nstacks;
    /* The skip cache is the running query's meanwhile (query.h: one thread
     * at a time); warmed when it returns (job_finished). */
    if (s->warmed >= n || s->q_running)
        return;
    /* The same patterns a query with the default list alone uses (set->cull_max). */
    const struct ht_config *cfg = s->set->cfg;
    unsigned np = cfg->ncull < s->set->cull_max ? cfg->ncull : s->set->cull_max;
    if (np)
        skip_cache_warm(&s->eng, &s->default_skip, cfg->cull_pats, np, s->warmed, n);
    s->warmed = n;
}

void session_process(void *arg, const struct source_process *p)
{
    struct session *s = arg;
    snprintf(s->process_name, sizeof(s->process_name), "%s", p->name);
    snprintf(s->stream_wall, sizeof(s->stream_wall), "%s", p->wall);
}

/* Triggers (their conditions are parsed in session-trigger.c). */

static uint64_t metric_value(struct session *s, int metric)
{
    switch (metric) {
    case TRIG_PRIVATE_BYTES:
        return s->eng.private_bytes;
    case TRIG_OUTSTANDING:
        return s->eng.heap_bytes;
    case TRIG_COMMITTED:
        return s->eng.commits.bytes;
    default:
        return s->eng.now;
    }
}

void session_check_triggers(struct session *s)
{
    if (s->state == SESSION_STOPPED || s->state == SESSION_ENDED)
        return;
    for (unsigned i = 0; i < s->ntriggers; i++) {
        struct trigger *t = &s->triggers[i];
        if (t->next == UINT64_MAX)
            continue;
        uint64_t v = metric_value(s, t->metric);
        if (v < t->next)
            continue;
        t->fired++;
        if (!t->first_t)
            t->first_t = s->eng.now;
        t->last_t = s->eng.now;
        char reason[96];
        snprintf(reason, sizeof(reason), "%s-when %s", t->snapshot ? "snapshot" : "stop", t->text);
        if (t->snapshot) {
            /* One snapshot per check however far the value jumped, naming
             * every step it crossed: none is skipped unsaid. */
            uint64_t first = t->steps + 1, next = trigger_next_after(t->next, t->every, v);
            t->steps += trigger_steps(t->next, t->every, v);
            size_t n = strlen(reason);
            if (t->every && t->steps > first)
                snprintf(reason + n, sizeof(reason) - n, " (steps %llu-%llu)",
                         (unsigned long long)first, (unsigned long long)t->steps);
            else if (t->every)
                snprintf(reason + n, sizeof(reason) - n, " (step %llu)", (unsigned long long)first);
            session_take_snapshot(s, reason, first, t->steps);
            t->next = next;
        } else {
            t->next = UINT64_MAX;
            session_stop(s, reason);
            return;
        }
    }
}

/* Session queries: the queue of each session, the workers' way back. */

static void session_query_next(struct session *s);

/* j's done on the loop with the session pinned: an answer written releases
 * the client's held requests, which run from inside done (client_fill ->
 * client_output_moved), and one of them may drop this very session. While
 * q_running is set, session_drop keeps the session (as for a query on a
 * worker); the caller frees it when this returns 1. Without the pin a
 * "stacks" and a "drop" in one write freed the session under job_finished
 * (integration.query_async_drop_held_behind_query, ASan). */
static int job_done_pinned(struct qjob *j)
{
    struct session *s = j->s;
    struct qjob *was = s->q_running;
    s->q_running = j;
    j->done(j);
    s->q_running = was;
    return s->dropped && !was;
}

/* Back on the loop: close the view, answer, start the session's next query. */
static void job_finished(struct qjob *j)
{
    struct session *s = j->s;
    uint64_t t0 = uv_hrtime();
    engine_view_close(&s->eng, j->v);
    j->v = NULL;
    s->q_running = NULL;
    session_sym_released(s); /* the worker let go of the symbolizer */
    s->qs.run++;
    if (j->rc)
        s->qs.failed++;
    s->qs.worker_total_ns += j->worker_ns;
    if (j->worker_ns > s->qs.worker_max_ns)
        s->qs.worker_max_ns = j->worker_ns;
    if (s->dropped && j->rc == 0) {
        for (unsigned i = 0; i < j->nq; i++)
            query_result_free(&j->res[i]);
        j->rc = HT_ENOSESSION;
    }
    job_done_pinned(j); /* a drop meanwhile: s->dropped, freed below */
    uint64_t hold = j->open_ns + (uv_hrtime() - t0);
    if (hold > s->qs.hold_max_ns)
        s->qs.hold_max_ns = hold;
    log_debug("session %u: %s query (%u) answered: waited %.2f ms, worker %.2f ms, loop held "
              "%.3f ms (view open %.3f ms), %s",
              s->id, j->what, j->nq, (double)(j->t_open - j->t_submit) / 1e6,
              (double)j->worker_ns / 1e6, (double)hold / 1e6, (double)j->open_ns / 1e6,
              j->rc ? qjob_failure_text(j->rc) : "ok");
    qjob_free(j);
    if (s->dropped) {
        session_free_dropped(s);
        return;
    }
    session_warm(s); /* stacks interned meanwhile: the skip cache was the worker's */
    session_query_next(s);
}

/* The workers, started with the first query (a server that never queries
 * starts no thread). NULL when they cannot run: the job then runs inline. */
static struct qworker *workers(struct session_set *set)
{
    if (set->qw || set->stopping)
        return set->qw;
    set->qw = qworker_new(set->loop, job_finished);
    return set->qw;
}


/* The session's next waiting job gets the view (at most one open per engine). */
static void session_query_next(struct session *s)
{
    while (!s->q_running && s->q_head && !s->dropped) {
        struct qjob *j = s->q_head;
        s->q_head = j->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->q_waiting--;
        j->next = NULL;
        if (j->for_client && !j->c) { /* its client went away while it waited */
            qjob_free(j);
            continue;
        }
        uint64_t t0 = uv_hrtime();
        j->t_open = t0;
        int rc = 0;
        if (j->nq != 0 && (rc = engine_view_open(&s->eng, &j->v)) != 0) {
            s->qs.failed++;
            j->rc = rc;
        }
        if (j->nq == 0 || rc != 0) { /* no query (answered here, in its turn), or no view */
            int gone = job_done_pinned(j);
            qjob_free(j);
            if (gone) {
                session_free_dropped(s);
                return;
            }
            continue;
        }
        j->view_now = ev_now(j->v);
        if (j->opened)
            j->opened(j);
        j->open_ns = uv_hrtime() - t0;
        s->q_running = j;
        struct qworker *qw = workers(s->set);
        if (!qw) { /* no thread: the query runs here, as it did before workers */
            qworker_run_here(j);
            job_finished(j);
            return; /* job_finished went on with the next one */
        }
        qworker_run(qw, j);
    }
}

int session_query_submit(struct qjob *j)
{
    struct session *s = j->s;
    if (s->dropped || s->set->stopping)
        return HT_ENOSESSION;
    /* Queries waiting behind the running one: past cfg->max_queued_queries
     * one more is refused (requests of one client wait for its previous
     * reply, so these are other clients' and top refreshes). */
    if (!j->urgent && s->q_waiting >= s->set->cfg->max_queued_queries) {
        s->qs.rejected++;
        return HT_EFULL;
    }
    j->t_submit = uv_hrtime();
    j->next = NULL;
    if (j->urgent) { /* after the other urgent ones, ahead of the rest */
        struct qjob **p = &s->q_head;
        while (*p && (*p)->urgent)
            p = &(*p)->next;
        j->next = *p;
        *p = j;
        if (!j->next)
            s->q_tail = j;
    } else {
        if (s->q_tail)
            s->q_tail->next = j;
        else
            s->q_head = j;
        s->q_tail = j;
    }
    s->q_waiting++;
    session_query_next(s);
    return 0;
}

int session_queries_cancel(struct session *s)
{
    while (s->q_head) {
        struct qjob *j = s->q_head;
        s->q_head = j->next;
        s->q_waiting--;
        j->next = NULL;
        j->rc = HT_ENOSESSION;
        j->done(j);
        qjob_free(j);
    }
    s->q_tail = NULL;
    return s->q_running != NULL;
}
