/* The producer side of an ETW source: records from the consumer threads, through the
 * correlators, into the session's event ring. */
#include "etw-int.h"
#include "etw-raw.h"
#include "rawtap.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>

/* ---- producer side (consumer threads under the hub's mutex) ---- */

void etw_emit_cb(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct etw_source *s = arg;
    struct ht_event e = *ev;
    if (depth) {
        e.stack = stack_intern_get(evring_si(s->ring), frames, depth);
        if (!e.stack)
            e.flags |= HT_EVF_STACK_DROPPED;
    }
    if (evring_put(s->ring, &e) == 0)
        atomic_fetch_add_explicit(&s->put, 1, memory_order_relaxed);
}

/* Module paths into the ring's interner, as DOS paths. */
static uint32_t path_cb(void *arg, const char *path)
{
    struct etw_source *s = arg;
    char dos[1024];
    etw_dos_path(&etw_drive_map, path, dos, sizeof(dos));
    return stack_intern_str(evring_si(s->ring), dos, (unsigned)strlen(dos));
}

/* The traced process named by the kernel session's Process rundown, or
 * --exe's first process to log: to the loop in event order (under pmu). */
static void process_cb(void *arg, uint32_t pid, const char *name)
{
    struct etw_source *s = arg;
    if (s->exe_mode) {
        if (s->followed && s->followed != pid)
            return;
        s->followed = pid;
        name = s->image;
        /* The system logger's correlator has no heap event to follow by:
         * told here (under pmu, as every correlator call is). */
        for (int i = 0; i < 2; i++)
            if (s->corr[i])
                etw_corr_follow(s->corr[i], pid);
    } else if (!name[0]) {
        return;
    }
    uv_mutex_lock(&s->stmu);
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->followed_pub = s->followed;
    uv_mutex_unlock(&s->stmu);
    evring_process(s->ring, pid, name, "");
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = pid};
    etw_emit_cb(s, &ev, NULL, 0);
}

/* A record into this source (under its pmu): record --raw sees it as it
 * came; a Lost_Event is a lost event in line; an event goes through the
 * correlator into the ring. */
void etw_take_record(struct etw_source *s, int session, const struct etw_record *r,
                     const struct etw_decoded *d)
{
    if (rawtap_on(s->tap)) {
        static _Thread_local char line[ETW_RAW_LINE_MAX];
        size_t n = etw_raw_format(r, line, sizeof(line));
        if (n)
            rawtap_put(s->tap, line, n);
    }
    struct etw_corr *c = s->corr[session];
    if (c) {
        if (etw_guid_eq(&r->provider, &etw_guid_lost))
            etw_corr_lost(c, 1);
        else if (d)
            etw_corr_add(c, r, d);
        const struct etw_corr_stats *cs = etw_corr_stats(c);
        uv_mutex_lock(&s->stmu);
        s->cst[session] = *cs;
        uv_mutex_unlock(&s->stmu);
    }
}

/* A record of this session, from a consumer thread (etw-hub.h deliver). */
void etw_deliver_cb(void *arg, int session, const struct etw_record *r, const struct etw_decoded *d)
{
    struct etw_source *s = arg;
    uv_mutex_lock(&s->pmu);
    if (s->exe_mode && s->followed) {
        uint32_t pid = r->pid;
        if (d && (d->kind == ETW_STACK || d->kind >= ETW_VIRTUAL_ALLOC))
            pid = d->owner_pid;
        if (etw_guid_eq(&r->provider, &etw_guid_lost)) {
            /* Every process of the image may have lost some. */
            uv_mutex_lock(&etw_kids_mu);
            struct etw_source *ks[KIDS_MAX];
            unsigned nk = 0;
            for (unsigned i = 0; i < s->nkids; i++)
                if (s->kids[i].state == KID_LIVE && s->kids[i].src) {
                    ks[nk] = s->kids[i].src;
                    atomic_fetch_add(&ks[nk++]->sub.inflight, 1);
                }
            uv_mutex_unlock(&etw_kids_mu);
            for (unsigned i = 0; i < nk; i++)
                etw_kid_take(ks[i], session, r, d);
        } else if (pid != s->followed && pid != 0 && pid != 0xFFFFFFFFu) {
            uv_mutex_unlock(&s->pmu);
            etw_to_kid(s, pid, session, r, d);
            return;
        }
    }
    if (s->own_done)
        s->after_end++;
    else
        etw_take_record(s, session, r, d);
    uv_mutex_unlock(&s->pmu);
}

/* A session this one takes ended (under the hub's mutex: no waiting): it
 * leaves the hub on the loop. */
void etw_session_ended_cb(void *arg, int session, const char *why)
{
    struct etw_source *s = arg;
    (void)session;
    uv_mutex_lock(&s->stmu);
    if (!s->reason[0])
        snprintf(s->reason, sizeof(s->reason), "%s", why);
    uv_mutex_unlock(&s->stmu);
    if (atomic_fetch_sub(&s->sessions_left, 1) <= 1) {
        atomic_store(&s->hub_gone, 1);
        uv_async_send(s->wake);
    }
}

int etw_corr_make(struct etw_source *s, int which)
{
    struct etw_corr_config cfg = {.acct = &s->acct,
                                  .pid = s->exe_mode ? 0 : (uint32_t)s->pid,
                                  .qpc_freq = etw_qpc_freq,
                                  .start_qpc = s->start_qpc,
                                  .stack_kinds = s->stacks ? 0 : 1u << 31 /* none waits */,
                                  .follow_first = s->exe_mode,
                                  .path = path_cb,
                                  .process = process_cb};
    return etw_corr_new(&s->corr[which], &cfg, etw_emit_cb, s);
}
