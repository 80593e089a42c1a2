/* An ETW source's counters for stats and status: its own, its correlators', the machine's
 * sessions'. */
#include "etw-int.h"
#include "sym-snap.h"

#include <cjson/cJSON.h>
#include <string.h>

void etw_stats(struct source *base, struct source_stats *st)
{
    struct etw_source *s = (struct etw_source *)base;
    memset(st, 0, sizeof(*st));
    if (s->ring)
        evring_producer_stats(s->ring, st);
    uv_mutex_lock(&s->stmu);
    st->events = s->cst[0].events_in + s->cst[1].events_in;
    uv_mutex_unlock(&s->stmu);
    st->lost = atomic_load(&s->sub.lost_records);
    uint64_t put = atomic_load_explicit(&s->put, memory_order_relaxed);
    if (s->stopped && put > s->delivered)
        st->lost += put - s->delivered;
    /* The correlators charge under pmu, which is never held while waiting
     * (the rings are nowait): a short wait at most. */
    uv_mutex_lock(&s->pmu);
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] += s->acct.bytes[k];
        st->over_budget[k] += s->acct.over_budget[k];
        st->no_memory[k] += s->acct.no_memory[k];
    }
    uv_mutex_unlock(&s->pmu);
    /* The symbol cache's as of its last use: never waits for the symbolizer lock. */
    if (s->snap_ready)
        sym_snap_add(&s->snap, st, MEM_symbols);
}

/* --exe: its later processes and what could not be routed to them. */
static void status_kids(cJSON *o, const struct etw_source *s, const struct etw_corr_stats *cst)
{
    if (s->exe_mode) {
        cJSON_AddStringToObject(o, "image", s->image);
        cJSON_AddNumberToObject(o, "followed_pid", (double)cst[0].followed_pid);
        uv_mutex_lock(&etw_kids_mu);
        cJSON *kp = cJSON_AddArrayToObject(o, "later_processes");
        for (unsigned i = 0; kp && i < s->nkids; i++) {
            cJSON *k = cJSON_CreateObject();
            cJSON_AddNumberToObject(k, "pid", s->kids[i].pid);
            static const char *st[] = {"", "pending", "traced", "ended", "refused", "stopped"};
            int ks = s->kids[i].state;
            cJSON_AddStringToObject(k, "session", st[ks >= 0 && ks <= KID_STOPPED ? ks : 0]);
            cJSON_AddItemToArray(kp, k);
        }
        cJSON_AddNumberToObject(o, "records_before_session", (double)s->before_session);
        cJSON_AddNumberToObject(o, "processes_past_cap", (double)s->kids_overflow);
        cJSON_AddNumberToObject(o, "sessions_refused", (double)s->spawn_failed);
        cJSON_AddNumberToObject(o, "records_not_traced", (double)s->refused_records);
        uv_mutex_unlock(&etw_kids_mu);
    } else if (s->child_of) {
        cJSON_AddStringToObject(o, "image", s->image);
    }
}

/* The ETW sessions' own counters (loop: one ControlTraceW each). */
static void status_logger_counters(cJSON *m, const struct etw_hub_stats *hs)
{
    struct {
        const char *key, *name;
        const struct etw_guid *guid;
        int running;
    } q[2] = {
        {"heap_logger", HEAP_SESSION, &etw_guid_heap, hs->heap_running},
        {"virtual_alloc_session", KERNEL_SESSION, &etw_kernel_logger_guid, hs->kernel_running}};
    for (int i = 0; i < 2; i++) {
        struct etw_logger_counters c;
        if (!q[i].running || etw_logger_query(q[i].name, q[i].guid, &c) != 0)
            continue;
        cJSON *e = cJSON_AddObjectToObject(m, q[i].key);
        if (!e)
            continue;
        cJSON_AddNumberToObject(e, "events_lost", (double)c.events_lost);
        cJSON_AddNumberToObject(e, "realtime_buffers_lost", (double)c.realtime_buffers_lost);
        cJSON_AddNumberToObject(e, "log_buffers_lost", (double)c.log_buffers_lost);
        cJSON_AddNumberToObject(e, "buffers_written", (double)c.buffers_written);
        cJSON_AddNumberToObject(e, "buffers", (double)c.buffers);
    }
}

/* The machine's sessions, shared with this daemon's other sessions. */
static void status_machine(cJSON *o, const struct etw_hub_stats *hs)
{
    cJSON *m = cJSON_AddObjectToObject(o, "machine");
    if (!m)
        return;
    cJSON_AddBoolToObject(m, "heap_logger_running", hs->heap_running);
    cJSON *pl = cJSON_AddArrayToObject(m, "heap_logger_pids");
    for (unsigned i = 0; pl && i < hs->nheap_pids; i++)
        cJSON_AddItemToArray(pl, cJSON_CreateNumber(hs->heap_pids[i]));
    cJSON_AddBoolToObject(m, "virtual_alloc_running", hs->kernel_running);
    cJSON_AddNumberToObject(m, "records", (double)hs->records);
    cJSON_AddNumberToObject(m, "unrouted", (double)hs->unrouted);
    cJSON_AddNumberToObject(m, "heap_restarts", (double)hs->heap_restarts);
    cJSON_AddNumberToObject(m, "decoded", (double)hs->dec.decoded);
    cJSON_AddNumberToObject(m, "malformed", (double)hs->dec.malformed);
    cJSON_AddNumberToObject(m, "unknown_provider", (double)hs->dec.unknown_provider);
    cJSON_AddNumberToObject(m, "ignored_opcode", (double)hs->dec.ignored_opcode);
    cJSON_AddNumberToObject(m, "old_versions", (double)hs->dec.old_versions);
    status_logger_counters(m, hs);
}

/* The correlators' counters, one object per ETW session it takes. */
static void status_corr(cJSON *o, const struct etw_corr_stats *cst)
{
    const char *names[2] = {"heap_session", "virtual_alloc_session"};
    for (int i = 0; i < 2; i++) {
        const struct etw_corr_stats *cs = &cst[i];
        cJSON *c = cJSON_AddObjectToObject(o, names[i]);
        if (!c)
            continue;
        cJSON_AddNumberToObject(c, "events", (double)cs->events_in);
        cJSON_AddNumberToObject(c, "stacks_matched", (double)cs->stacks_matched);
        cJSON_AddNumberToObject(c, "stacks_unmatched", (double)cs->stacks_unmatched);
        cJSON_AddNumberToObject(c, "events_no_stack", (double)cs->events_no_stack);
        cJSON_AddNumberToObject(c, "other_process", (double)cs->other_process);
        cJSON_AddNumberToObject(c, "realloc_moved_unpaired", (double)cs->realloc_moved_unpaired);
        cJSON_AddNumberToObject(c, "modules_loaded", (double)cs->modules_loaded);
        cJSON_AddNumberToObject(c, "modules_unloaded", (double)cs->modules_unloaded);
        cJSON_AddNumberToObject(c, "module_names_dropped", (double)cs->module_names_dropped);
        cJSON_AddNumberToObject(c, "process_exits", (double)cs->process_exits);
        cJSON_AddNumberToObject(c, "process_ends_repeated", (double)cs->process_ends_repeated);
        cJSON_AddNumberToObject(c, "before_follow", (double)cs->before_follow);
    }
}

/* Said in the start reply (cmd-start.c). */
static void status_notes(cJSON *o, const struct etw_source *s)
{
    cJSON *notes = cJSON_AddArrayToObject(o, "notes");
    char note[300];
    if (notes && s->exe_mode) {
        snprintf(note, sizeof(note),
                 "only processes of %s started from now on are traced (running ones are not); "
                 "this session takes the first of them to allocate, each later one gets a "
                 "session of its own named after this one and its pid",
                 s->image);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    }
    if (notes && s->restarted) {
        snprintf(note, sizeof(note),
                 "the heap logger was restarted to add process %llu: the other sessions' heap "
                 "events between its stop and its start are lost (their status counts "
                 "heap_restarts)",
                 (unsigned long long)s->pid);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    }
}

cJSON *etw_status_json(struct source *base)
{
    struct etw_source *s = (struct etw_source *)base;
    struct etw_corr_stats cst[2];
    memset(cst, 0, sizeof(cst));
    struct etw_hub_stats hs;
    memset(&hs, 0, sizeof(hs));
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uv_mutex_lock(&s->stmu);
    memcpy(cst, s->cst, sizeof(cst));
    uv_mutex_unlock(&s->stmu);
    cJSON_AddNumberToObject(o, "records", (double)atomic_load(&s->sub.records));
    cJSON_AddNumberToObject(o, "lost_records", (double)atomic_load(&s->sub.lost_records));
    cJSON_AddNumberToObject(o, "heap_restarts", (double)atomic_load(&s->sub.restarts));
    /* Events dropped because its ring was full (the loop behind): each gap
     * is a lost event in the stream too. */
    cJSON_AddNumberToObject(o, "ring_full_drops", s->ring ? (double)evring_full_drops(s->ring) : 0);
    if (etw_machine_hub)
        etw_hub_stats(etw_machine_hub, &hs);
    cJSON_AddStringToObject(o, "mode", s->exe_mode ? "exe" : s->child_of ? "exe-process" : "pid");
    status_kids(o, s, cst);
    status_machine(o, &hs);
    status_corr(o, cst);
    status_notes(o, s);
    return o;
}
