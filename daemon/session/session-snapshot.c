/* Snapshots of a session: taken by a trigger, their stacks queried by the
 * server (session_hooks), kept in a ring charged to the session's budget
 * (session-snapshot.h). */
#include "session-snapshot.h"

#include "session-int.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"
#include "mem-acct.h"
#include "config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* Bytes a cJSON tree holds, estimated from its nodes and strings (the
 * allocator's own overhead is not counted). */
static uint64_t json_bytes(const cJSON *j)
{
    uint64_t n = 0;
    for (; j; j = j->next) {
        n += sizeof(cJSON);
        if (j->string)
            n += strlen(j->string) + 1;
        if (j->valuestring)
            n += strlen(j->valuestring) + 1;
        n += json_bytes(j->child);
    }
    return n;
}

/* A snapshot counts in the session's budget; one that does not fit is not kept. */
static void snapshot_charge(struct session *s, struct snapshot *sn)
{
    sn->bytes = json_bytes(sn->data);
    if (mem_acct_charge(&s->eng.acct, MEM_snapshots, sn->bytes) == 0)
        return;
    log_warn("session %u: snapshot %u (%llu bytes) not kept: over the memory budget", s->id,
             sn->seq, (unsigned long long)sn->bytes);
    cJSON_Delete(sn->data);
    sn->data = NULL;
    sn->bytes = 0;
    s->snaps_over_budget++;
}

/* A snapshot's stacks and commits come from one job (one view): urgent, so
 * it goes ahead of waiting queries, and its view opens at once unless a
 * query of the session is running (then when it returns; "stacks_t" says
 * the time the stacks are of). The server makes the job (hooks). */
void session_snapshot_done(struct session *s, uint32_t seq, uint64_t view_now, cJSON *st, cJSON *cm,
                           int rc)
{
    s->snap_pending--;
    if (s->dropped) {
        cJSON_Delete(st);
        cJSON_Delete(cm);
        return;
    }
    uint32_t cap = s->set->cfg->max_snapshots;
    struct snapshot *sn = &s->snaps[(seq + cap - 1) % cap];
    if (sn->seq == seq && sn->data && rc == 0) { /* not overwritten meanwhile */
        cJSON_AddNumberToObject(sn->data, "stacks_t", (double)view_now);
        if (st)
            cJSON_AddItemToObject(sn->data, "stacks", st);
        if (cm)
            cJSON_AddItemToObject(sn->data, "commits", cm);
        snapshot_charge(s, sn);
    } else {
        cJSON_Delete(st);
        cJSON_Delete(cm);
        if (rc != 0)
            log_warn("session %u: snapshot %u has no stacks: %s", s->id, seq, uv_strerror(rc));
    }
    /* A load answers once its snapshots are complete (cmd-load.c). */
    if (s->snap_pending == 0 && s->src_over && s->on_source_end)
        s->on_source_end(s);
}

const struct snapshot *session_snapshot_slot(const struct session *s, uint32_t seq)
{
    uint32_t cap = s->set->cfg->max_snapshots;
    return &s->snaps[(seq + cap - 1) % cap];
}

int session_snapshot_wanted(const struct session *s, uint32_t seq)
{
    if (s->dropped)
        return 0;
    uint32_t cap = s->set->cfg->max_snapshots;
    const struct snapshot *sn = &s->snaps[(seq + cap - 1) % cap];
    return sn->seq == seq && sn->data;
}

static void snapshot_query(struct session *s, struct snapshot *sn)
{
    s->snap_pending++;
    int rc = s->set->hooks->snapshot_query(s, sn->seq, s->set->cfg->snapshot_top);
    if (rc == 0)
        return;
    s->snap_pending--;
    if (rc == HT_ENOMEM)
        log_warn("session %u: snapshot %u has no stacks: out of memory", s->id, sn->seq);
}

void session_take_snapshot(struct session *s, const char *reason, uint64_t step_first,
                           uint64_t step_last)
{
    uint32_t cap = s->set->cfg->max_snapshots;
    struct snapshot *sn = &s->snaps[s->snap_seq % cap];
    if (sn->data) {
        cJSON_Delete(sn->data);
        mem_acct_discharge(&s->eng.acct, MEM_snapshots, sn->bytes);
        sn->bytes = 0;
        s->snaps_dropped++;
    } else {
        s->nsnaps++;
    }
    sn->seq = ++s->snap_seq;
    sn->t = s->eng.now;
    snprintf(sn->reason, sizeof(sn->reason), "%s", reason);
    sn->data = cJSON_CreateObject();
    cJSON_AddNumberToObject(sn->data, "seq", sn->seq);
    cJSON_AddNumberToObject(sn->data, "t", (double)sn->t);
    cJSON_AddStringToObject(sn->data, "reason", reason);
    cJSON_AddNumberToObject(sn->data, "step_first", (double)step_first);
    cJSON_AddNumberToObject(sn->data, "step_last", (double)step_last);
    cJSON_AddNumberToObject(sn->data, "private_bytes", (double)s->eng.private_bytes);
    cJSON_AddNumberToObject(sn->data, "outstanding", (double)s->eng.heap_bytes);
    cJSON_AddNumberToObject(sn->data, "committed", (double)s->eng.commits.bytes);
    snapshot_query(s, sn);
    log_info("session %u: snapshot %u (%s)", s->id, sn->seq, reason);
}
