/* --exe: the later processes of the image, each a session of its own fed by the
 * --exe session's routing. */
#include "etw-int.h"
#include "ht-error.h"

#include <stdio.h>
#include <string.h>

uv_mutex_t etw_kids_mu;
static uv_once_t kids_once = UV_ONCE_INIT;
static void kids_init(void)
{
    uv_mutex_init(&etw_kids_mu);
}

void etw_kids_setup(void)
{
    uv_once(&kids_once, kids_init);
}

/* A record for a child (its inflight held). */
void etw_kid_take(struct etw_source *k, int session, const struct etw_record *r,
                  const struct etw_decoded *d)
{
    atomic_fetch_add_explicit(&k->sub.records, 1, memory_order_relaxed);
    uv_mutex_lock(&k->pmu);
    if (k->own_done)
        k->after_end++;
    else
        etw_take_record(k, session, r, d);
    uv_mutex_unlock(&k->pmu);
    atomic_fetch_sub(&k->sub.inflight, 1);
}

/* --exe: a record of another process than the one followed goes to its
 * session; the first one of a process asks the loop for that session. */
void etw_to_kid(struct etw_source *s, uint32_t pid, int session, const struct etw_record *r,
                const struct etw_decoded *d)
{
    struct etw_source *k = NULL;
    int wake = 0;
    uv_mutex_lock(&etw_kids_mu);
    struct kid *e = NULL, *free_slot = NULL;
    for (unsigned i = 0; i < s->nkids && !e; i++) {
        if (s->kids[i].pid == pid)
            e = &s->kids[i];
        else if (!free_slot && s->kids[i].state == KID_ENDED)
            free_slot = &s->kids[i];
    }
    if (e && e->state == KID_ENDED)
        free_slot = e; /* its session ended: the pid is a new process's now */
    if (!e || e->state == KID_ENDED) {
        if (!free_slot && s->nkids < KIDS_MAX)
            free_slot = &s->kids[s->nkids++];
        if (free_slot && s->nspawn_q < KIDS_MAX) {
            free_slot->pid = pid;
            free_slot->src = NULL;
            free_slot->state = KID_PENDING;
            s->spawn_q[s->nspawn_q++] = pid;
            s->before_session++;
            wake = 1;
        } else {
            s->kids_overflow++;
        }
    } else if (e->state == KID_LIVE && e->src) {
        k = e->src;
        atomic_fetch_add(&k->sub.inflight, 1);
    } else if (e->state == KID_PENDING) {
        s->before_session++;
    } else {
        s->refused_records++; /* refused, or stopped by the user */
    }
    uv_mutex_unlock(&etw_kids_mu);
    if (k)
        etw_kid_take(k, session, r, d);
    if (wake)
        uv_async_send(s->wake);
}

void etw_wake_cb(uv_async_t *a)
{
    struct etw_source *s = a->data;
    /* --exe: sessions for the new processes of the image. */
    uint32_t q[KIDS_MAX];
    unsigned nq;
    uv_mutex_lock(&etw_kids_mu);
    nq = s->nspawn_q;
    memcpy(q, s->spawn_q, nq * sizeof(q[0]));
    s->nspawn_q = 0;
    uv_mutex_unlock(&etw_kids_mu);
    for (unsigned i = 0; i < nq; i++) {
        char err[200] = "";
        int rc = s->left || !s->outer.spawn ? HT_ESTATE
                                            : s->outer.spawn(s->outer.arg, q[i], err, sizeof(err));
        if (rc == 0)
            continue; /* the child registered itself (kid_register) */
        uv_mutex_lock(&etw_kids_mu);
        for (unsigned k = 0; k < s->nkids; k++)
            if (s->kids[k].pid == q[i] && s->kids[k].state == KID_PENDING)
                s->kids[k].state = KID_REFUSED;
        s->spawn_failed++;
        uv_mutex_unlock(&etw_kids_mu);
    }
    if (!s->ended && s->outer.ready)
        s->outer.ready(s->outer.arg); /* the drain sees hub_gone */
}

/* A child of an --exe session: its records come from the parent's routing,
 * from the moment it is registered there (the ones before are counted by
 * the parent as before_session). */
int etw_child_start(struct etw_source *s, char *err, size_t errsz)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    s->start_qpc = (uint64_t)t.QuadPart;
    if (etw_corr_make(s, ETW_HUB_HEAP) != 0) {
        snprintf(err, errsz, "out of memory for the stack correlator");
        return UV_ENOMEM;
    }
    etw_announce_process(s);
    int found = 0;
    uv_mutex_lock(&etw_kids_mu);
    struct etw_source *p = s->child_of;
    for (unsigned i = 0; !p->left && i < p->nkids; i++) {
        if (p->kids[i].pid == (uint32_t)s->pid && p->kids[i].state == KID_PENDING) {
            p->kids[i].src = s;
            p->kids[i].state = KID_LIVE;
            s->parent = p;
            found = 1;
            break;
        }
    }
    uv_mutex_unlock(&etw_kids_mu);
    if (!found) {
        snprintf(err, errsz, "the --exe session of process %llu is over",
                 (unsigned long long)s->pid);
        return HT_ESTATE;
    }
    s->started = 1;
    if (uv_thread_create(&s->sampler, etw_sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
    return 0;
}
