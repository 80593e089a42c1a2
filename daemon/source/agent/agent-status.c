/*
 * The agent source's status (source_ops.status_json) and its counters.
 */
#define _GNU_SOURCE
#include "agent-src.h"

const char *asrc_stacks_name(enum source_stacks st)
{
    return st == SOURCE_STACKS_FP ? "fp" : st == SOURCE_STACKS_NONE ? "none" : "dwarf";
}

static void agent_counters_json(struct agent_source *s, cJSON *o)
{
    static const char *const names[HTA_CNT_MAX] = {
        "ring_full",   "stacks_full",   "reentrant",    "unwind_failed", "sample_set_full",
        "unwind_slow", "rules_evicted", "modules_full", "modules_late"};
    cJSON *a = cJSON_AddObjectToObject(o, "agent");
    for (int c = 0; a && s->map && c < HTA_CNT_MAX; c++)
        cJSON_AddNumberToObject(
            a, names[c],
            (double)(s->agent_before[c] + agent_dec_counter(&s->dec, (enum hta_counter)c)));
}

/* Connections refused, by reason. */
static void refused_json(const struct agent_source *s, cJSON *o)
{
    cJSON *r = cJSON_AddObjectToObject(o, "refused");
    if (r) {
        cJSON_AddNumberToObject(r, "peer", (double)s->refused_peer);
        cJSON_AddNumberToObject(r, "token", (double)s->refused_token);
        cJSON_AddNumberToObject(r, "memfd", (double)s->refused_memfd);
        cJSON_AddNumberToObject(r, "extra", (double)s->refused_extra);
        cJSON_AddNumberToObject(r, "slow", (double)s->refused_slow);
        cJSON_AddNumberToObject(r, "spawn", (double)s->refused_spawn);
    }
}

/* The symbolizer's module counts. */
static void symbols_json(const struct agent_source *s, cJSON *o)
{
    /* Modules of programs before an exec the running one mapped over, or
     * dropped for room (their frames unnamed from then on); mappings the
     * symbolizer could not add. */
    cJSON *sy = cJSON_AddObjectToObject(o, "symbols");
    if (sy) {
        cJSON_AddNumberToObject(sy, "kept_replaced",
                                (double)__atomic_load_n(&s->sym_kept_replaced, __ATOMIC_RELAXED));
        cJSON_AddNumberToObject(sy, "kept_dropped",
                                (double)__atomic_load_n(&s->sym_kept_dropped, __ATOMIC_RELAXED));
        cJSON_AddNumberToObject(sy, "modules_not_added",
                                (double)__atomic_load_n(&s->sym_not_added, __ATOMIC_RELAXED));
        /* The process became another's (a setuid exec): not read since. */
        cJSON_AddNumberToObject(sy, "not_owner",
                                (double)__atomic_load_n(&s->sym_not_owner, __ATOMIC_RELAXED));
    }
}

/* start --exe: the image, the execs seen and the exec gate. */
static void image_json(const struct agent_source *s, cJSON *o)
{
    cJSON_AddStringToObject(o, "image", s->image);
    cJSON_AddNumberToObject(o, "execs_seen", (double)s->execs_seen);
    cJSON_AddNumberToObject(o, "exec_events_lost", (double)s->exec_lost);
    /* The gate: the files watched, the processes held there before
     * their first instruction, those it could not hold (another tracer,
     * a failed exec: seen late by the connector, if at all), and the
     * kernel's queue overflows. */
    cJSON *g = cJSON_AddObjectToObject(o, "exec_gate");
    cJSON *m = g ? cJSON_AddArrayToObject(g, "watched") : NULL;
    for (unsigned i = 0; m && i < s->nmarked; i++)
        cJSON_AddItemToArray(m, cJSON_CreateString(s->marked[i]));
    if (g) {
        cJSON_AddNumberToObject(g, "taken", (double)s->gate_taken);
        cJSON_AddNumberToObject(g, "missed", (double)s->gate_missed);
        cJSON_AddNumberToObject(g, "lost", (double)s->gate_lost);
    }
}

/* What `heaptracectl run` needs to exec the program: the reply takes it
 * (cmd-start.c), and only until the agent is in. */
static void launch_json(const struct agent_source *s, cJSON *o)
{
    cJSON *l = cJSON_AddObjectToObject(o, "launch");
    if (l) {
        cJSON_AddStringToObject(l, "agent", s->agent_path);
        cJSON_AddStringToObject(l, "socket", s->sockname);
        cJSON_AddStringToObject(l, "token", s->token);
        cJSON_AddStringToObject(l, "stacks", asrc_stacks_name(s->stacks));
        cJSON_AddNumberToObject(l, "depth", s->depth < HTA_DEPTH ? s->depth : HTA_DEPTH);
        cJSON_AddNumberToObject(l, "pid", (double)s->want_pid);
        cJSON_AddBoolToObject(l, "follow", s->follow);
        if (s->sample_bytes)
            cJSON_AddNumberToObject(l, "sample", (double)s->sample_bytes);
        if (s->sample_seed)
            cJSON_AddNumberToObject(l, "sample_seed", (double)s->sample_seed);
        if (s->max_overhead)
            cJSON_AddNumberToObject(l, "max_overhead", s->max_overhead);
    }
}

struct cJSON *agent_status_json(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "stacks", asrc_stacks_name(s->stacks));
    cJSON_AddBoolToObject(o, "connected", s->connected);
    cJSON_AddNumberToObject(o, "records", (double)s->dec.st.records);
    cJSON_AddNumberToObject(o, "malformed", (double)s->dec.st.malformed);
    cJSON_AddNumberToObject(o, "bad_stacks", (double)s->dec.st.bad_stacks);
    cJSON_AddNumberToObject(o, "stuck", (double)s->dec.st.stuck);
    cJSON_AddNumberToObject(o, "clamped_time", (double)s->dec.st.clamped_time);
    cJSON_AddNumberToObject(o, "cut_at_stop", (double)s->cut);
    cJSON_AddNumberToObject(o, "socket_bytes", (double)s->socket_bytes);
    refused_json(s, o);
    cJSON_AddNumberToObject(o, "symbol_queue_drops", (double)s->q_drops);
    symbols_json(s, o);
    cJSON_AddBoolToObject(o, "follow", s->follow);
    cJSON_AddNumberToObject(o, "spawned", (double)s->spawned);
    /* Programs the process exec'd into and went on being traced in. */
    cJSON_AddNumberToObject(o, "execs", (double)s->execs);
    /* Flushes the agent asked for before exit or exec; late: answered after
     * it stopped waiting (frames of that program may stay unnamed). */
    cJSON_AddNumberToObject(o, "flushes", (double)s->flushes);
    cJSON_AddNumberToObject(o, "flushes_late", (double)s->flushes_late);
    /* Changes of the sampling mean left without their mark rate.N. */
    cJSON_AddNumberToObject(o, "rate_marks_dropped", (double)s->rate_marks_dropped);
    agent_counters_json(s, o);
    /* What `heaptracectl run` needs to exec the program: the reply takes it
     * (cmd-start.c), and only until the agent is in. */
    if (s->attach)
        cJSON_AddNumberToObject(o, "attach_ms", (double)s->attach_ns / 1e6);
    if (s->attach)
        cJSON_AddStringToObject(o, "attached_at", s->entered ? "entry point" : "running");
    if (s->image_mode)
        image_json(s, o);
    if (!s->connected && !s->stopped && !s->eof && !s->attach)
        launch_json(s, o);
    return o;
}
