/* The machine's shared ETW sessions (etw-hub.h). */
#include "etw-hub.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <stdio.h>
#include <string.h>

struct etw_hub {
    struct etw_hub_backend be;
    uv_mutex_t mu;
    /* Read by the consumers under mu; changed on the loop under mu. */
    struct etw_hub_sub *subs[ETW_HUB_MAX_SUBS];
    unsigned nsubs;
    int exe; /* the subscriber is --exe */
    uint64_t records, unrouted;
    struct etw_decode_stats dec;
    /* Loop only (attach/detach). */
    uint32_t heap_pids[ETW_HUB_MAX_SUBS];
    unsigned nheap_pids;
    int heap_running, kernel_running;
    uint64_t heap_starts, heap_restarts, kernel_starts;
};

int etw_hub_new(struct etw_hub **out, const struct etw_hub_backend *be)
{
    *out = NULL;
    struct etw_hub *h = ht_calloc(1, sizeof(*h));
    if (!h)
        return UV_ENOMEM;
    if (uv_mutex_init(&h->mu) != 0) {
        ht_free(h);
        return UV_ENOMEM;
    }
    h->be = *be;
    *out = h;
    return 0;
}

static void stop_all(struct etw_hub *h)
{
    if (h->heap_running)
        h->be.heap_stop(h->be.arg);
    if (h->kernel_running)
        h->be.kernel_stop(h->be.arg);
    h->heap_running = h->kernel_running = 0;
    h->nheap_pids = 0;
}

void etw_hub_free(struct etw_hub *h)
{
    if (!h)
        return;
    stop_all(h);
    uv_mutex_destroy(&h->mu);
    ht_free(h);
}

void etw_hub_quiesce(struct etw_hub_sub *sub)
{
    while (atomic_load(&sub->inflight) > 0)
        uv_sleep(1);
}

unsigned etw_hub_count(struct etw_hub *h)
{
    return h->nsubs; /* loop: only the loop changes it */
}

static int heap_has(const struct etw_hub *h, uint32_t pid)
{
    for (unsigned i = 0; i < h->nheap_pids; i++)
        if (h->heap_pids[i] == pid)
            return 1;
    return 0;
}

static void table_remove(struct etw_hub *h, struct etw_hub_sub *sub)
{
    uv_mutex_lock(&h->mu);
    for (unsigned i = 0; i < h->nsubs; i++) {
        if (h->subs[i] == sub) {
            h->subs[i] = h->subs[--h->nsubs];
            break;
        }
    }
    if (h->nsubs == 0)
        h->exe = 0;
    sub->attached = 0;
    uv_mutex_unlock(&h->mu);
}

/* Every heap subscriber but except is told its session is gone (a failed
 * restart left no heap logger). */
static void heap_gone(struct etw_hub *h, const struct etw_hub_sub *except, const char *why)
{
    uv_mutex_lock(&h->mu);
    for (unsigned i = 0; i < h->nsubs; i++)
        if (h->subs[i] != except && h->subs[i]->heap && h->subs[i]->session_ended)
            h->subs[i]->session_ended(h->subs[i]->arg, ETW_HUB_HEAP, why);
    uv_mutex_unlock(&h->mu);
}

/* The heap logger was restarted for sub: every other heap subscriber lost
 * its events between the stop and the start. */
static void restarted_others(struct etw_hub *h, const struct etw_hub_sub *sub, int *restarted)
{
    h->heap_restarts++;
    *restarted = 1;
    uv_mutex_lock(&h->mu);
    for (unsigned i = 0; i < h->nsubs; i++)
        if (h->subs[i] != sub && h->subs[i]->heap)
            atomic_fetch_add(&h->subs[i]->restarts, 1);
    uv_mutex_unlock(&h->mu);
}

/* The refusals of etw_hub_attach, before anything changes. */
static int attach_check(const struct etw_hub *h, const struct etw_hub_sub *sub, int exe, char *err,
                        size_t errsz)
{
    if (sub->attached) {
        snprintf(err, errsz, "already attached");
        return HT_ESTATE;
    }
    if (h->nsubs && (exe || h->exe)) {
        snprintf(err, errsz,
                 "%s: the heap logger traces every new process of an image (start --exe) or a list "
                 "of running processes (start --pid), not both at once (Windows allows one heap "
                 "logger): stop the other session first",
                 exe ? "other sessions trace running processes" : "a start --exe session runs");
        return HT_EFULL;
    }
    if (h->nsubs == ETW_HUB_MAX_SUBS) {
        snprintf(err, errsz, "%u ETW sessions run: the most one heap logger is shared by",
                 ETW_HUB_MAX_SUBS);
        return HT_EFULL;
    }
    for (unsigned i = 0; i < h->nsubs; i++) {
        if (h->subs[i]->pid == sub->pid) {
            snprintf(err, errsz, "process %lu is traced by another session already",
                     (unsigned long)sub->pid);
            return HT_EEXIST;
        }
    }
    return 0;
}

/* The heap logger for the union of the targets, sub's added: restarted
 * when it runs (the others' gap said through *restarted and their
 * restarts), put back as it was when the new one cannot start. */
static int heap_add(struct etw_hub *h, struct etw_hub_sub *sub, int *restarted, char *err,
                    size_t errsz)
{
    uint32_t old[ETW_HUB_MAX_SUBS];
    unsigned nold = h->nheap_pids;
    memcpy(old, h->heap_pids, nold * sizeof(old[0]));
    int was_running = h->heap_running;
    if (was_running) {
        h->be.heap_stop(h->be.arg);
        h->heap_running = 0;
    }
    /* The union of the subscribers' targets (those that left are
     * dropped from the list here, at the next restart). */
    h->nheap_pids = 0;
    for (unsigned i = 0; i < h->nsubs; i++)
        if (h->subs[i]->heap)
            h->heap_pids[h->nheap_pids++] = h->subs[i]->pid;
    /* Stacks for everyone when anyone wants them: the hooks are the
     * logger's, not a subscriber's. */
    int stacks = 0;
    for (unsigned i = 0; i < h->nsubs; i++)
        stacks |= h->subs[i]->heap && h->subs[i]->stacks;
    int rc = h->be.heap_start(h->be.arg, h->heap_pids, h->nheap_pids, stacks, err, errsz);
    if (rc == 0) {
        h->heap_running = 1;
        h->heap_starts++;
        if (was_running) {
            restarted_others(h, sub, restarted);
        }
    } else {
        memcpy(h->heap_pids, old, nold * sizeof(old[0]));
        h->nheap_pids = nold;
        if (was_running) {
            char e2[160];
            int stacks_old = 0;
            for (unsigned i = 0; i < h->nsubs; i++)
                stacks_old |= h->subs[i] != sub && h->subs[i]->heap && h->subs[i]->stacks;
            if (h->be.heap_start(h->be.arg, old, nold, stacks_old, e2, sizeof(e2)) == 0) {
                h->heap_running = 1;
                restarted_others(h, sub, restarted);
            } else {
                h->nheap_pids = 0;
                heap_gone(h, sub, "the heap logger could not be restarted");
            }
        }
    }
    return rc;
}

int etw_hub_attach(struct etw_hub *h, struct etw_hub_sub *sub, int *restarted, char *err,
                   size_t errsz)
{
    *restarted = 0;
    int exe = sub->pid == 0;
    int rc = attach_check(h, sub, exe, err, errsz);
    if (rc)
        return rc;
    /* In the table first: the first records of the new target are routed. */
    atomic_store(&sub->records, 0);
    atomic_store(&sub->lost_records, 0);
    atomic_store(&sub->restarts, 0);
    uv_mutex_lock(&h->mu);
    h->subs[h->nsubs++] = sub;
    h->exe = exe;
    sub->attached = 1;
    uv_mutex_unlock(&h->mu);

    rc = 0;
    if (sub->heap && !(h->heap_running && heap_has(h, sub->pid)))
        rc = heap_add(h, sub, restarted, err, errsz);
    if (rc == 0 && sub->virt && !h->kernel_running) {
        rc = h->be.kernel_start(h->be.arg, sub->stacks, err, errsz);
        if (rc == 0) {
            h->kernel_running = 1;
            h->kernel_starts++;
        }
    }
    if (rc != 0) {
        table_remove(h, sub);
        if (h->nsubs == 0)
            stop_all(h);
    }
    return rc;
}

void etw_hub_detach(struct etw_hub *h, struct etw_hub_sub *sub)
{
    if (!sub->attached)
        return;
    table_remove(h, sub);
    if (h->nsubs == 0)
        stop_all(h);
}

/* The subscriber of pid (under mu): the --exe one takes every process. */
static struct etw_hub_sub *route(struct etw_hub *h, uint32_t pid)
{
    if (h->exe)
        return h->nsubs ? h->subs[0] : NULL;
    for (unsigned i = 0; i < h->nsubs; i++)
        if (h->subs[i]->pid == pid)
            return h->subs[i];
    return NULL;
}

void etw_hub_record(struct etw_hub *h, int session, const struct etw_record *r)
{
    struct etw_hub_sub *to[ETW_HUB_MAX_SUBS];
    unsigned n = 0;
    struct etw_decoded d;
    int rc = 0;
    uv_mutex_lock(&h->mu);
    h->records++;
    if (etw_guid_eq(&r->provider, &etw_guid_lost)) {
        /* Delivered before the events of the buffer that lost some (RT_LostEvent):
         * every subscriber of the session may have lost some. */
        for (unsigned i = 0; i < h->nsubs; i++) {
            struct etw_hub_sub *s = h->subs[i];
            if (session == ETW_HUB_HEAP ? s->heap : s->virt)
                to[n++] = s;
        }
    } else {
        rc = etw_decode(r, &d, &h->dec);
        uint32_t pid = r->pid;
        if (rc == 1 && (d.kind == ETW_STACK || d.kind >= ETW_VIRTUAL_ALLOC))
            pid = d.owner_pid; /* the system logger's events name their process in the payload */
        struct etw_hub_sub *s = route(h, pid);
        if (s)
            to[n++] = s;
        else
            h->unrouted++;
    }
    for (unsigned i = 0; i < n; i++)
        atomic_fetch_add(&to[i]->inflight, 1);
    uv_mutex_unlock(&h->mu);
    int lost = etw_guid_eq(&r->provider, &etw_guid_lost);
    for (unsigned i = 0; i < n; i++) {
        struct etw_hub_sub *s = to[i];
        atomic_fetch_add_explicit(lost ? &s->lost_records : &s->records, 1, memory_order_relaxed);
        s->deliver(s->arg, session, r, rc == 1 ? &d : NULL);
        atomic_fetch_sub(&s->inflight, 1);
    }
}

void etw_hub_session_ended(struct etw_hub *h, int session, const char *why)
{
    uv_mutex_lock(&h->mu);
    for (unsigned i = 0; i < h->nsubs; i++) {
        struct etw_hub_sub *s = h->subs[i];
        if ((session == ETW_HUB_HEAP ? s->heap : s->virt) && s->session_ended)
            s->session_ended(s->arg, session, why);
    }
    uv_mutex_unlock(&h->mu);
}

void etw_hub_stats(struct etw_hub *h, struct etw_hub_stats *st)
{
    memset(st, 0, sizeof(*st));
    uv_mutex_lock(&h->mu);
    st->records = h->records;
    st->unrouted = h->unrouted;
    st->dec = h->dec;
    st->exe_mode = h->exe;
    uv_mutex_unlock(&h->mu);
    /* Loop-only fields: the caller is on the loop. */
    st->heap_starts = h->heap_starts;
    st->heap_restarts = h->heap_restarts;
    st->kernel_starts = h->kernel_starts;
    st->heap_running = h->heap_running;
    st->kernel_running = h->kernel_running;
    st->nheap_pids = h->nheap_pids;
    memcpy(st->heap_pids, h->heap_pids, h->nheap_pids * sizeof(st->heap_pids[0]));
}
