/* Queries off the loop: per-session job queues, the worker threads, and the
 * way back to the loop (query-job.h). */
#include "query-job.h"

#include "commands.h"
#include "engine-view.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The workers: one lock for both lists; the loop hears of finished jobs
 * through an async handle. Plain uv threads, mutex, cond and async: the
 * same on Windows. */
struct qworker {
    struct server *srv;
    uv_thread_t threads[QWORKER_THREADS];
    int nthreads;
    uv_mutex_t mu;
    uv_cond_t cv;
    struct qjob *todo_head, *todo_tail; /* views open, waiting for a worker */
    struct qjob *done_head, *done_tail; /* answered, waiting for the loop */
    int quit;
    uv_async_t async;
#ifdef HEAPTRACE_TEST_KNOBS
    uint64_t test_delay_ms; /* HEAPTRACED_TEST_QUERY_DELAY_MS: each job takes this long at least */
#endif
};

static void session_query_next(struct session *s);

struct qjob *qjob_new(struct session *s, const char *what)
{
    struct qjob *j = ht_calloc(1, sizeof(*j));
    if (j) {
        j->s = s;
        j->what = what;
    }
    return j;
}

int qjob_add_query(struct qjob *j, cJSON *args, int domain, char *err, size_t errsz)
{
    if (j->args && j->args != args) {
        cJSON_Delete(args);
        snprintf(err, errsz, "internal: one argument object per job");
        return HT_EINTERNAL;
    }
    j->args = args;
    struct qargs *qa = j->nq < QJOB_MAXQ ? ht_malloc(sizeof(*qa)) : NULL;
    if (!qa || !args) {
        ht_free(qa);
        snprintf(err, errsz, "out of memory");
        return HT_ENOMEM;
    }
    int rc = qargs_parse(qa, j->s, j->s->srv->cfg, args, domain, err, errsz);
    if (rc != 0) {
        ht_free(qa);
        return rc;
    }
    j->qa[j->nq++] = qa;
    return 0;
}

static void client_unlink_job(struct qjob *j)
{
    if (!j->c)
        return;
    for (struct qjob **p = &j->c->jobs; *p; p = &(*p)->cnext)
        if (*p == j) {
            *p = j->cnext;
            break;
        }
    if (j->c->top_job == j)
        j->c->top_job = NULL;
    j->c = NULL;
}

void qjob_free(struct qjob *j)
{
    if (!j)
        return;
    /* Never leave a client waiting for an answer that will not come. */
    if (j->c && j->slot)
        qjob_answer_error(j, HT_EINTERNAL, "internal: the query ended without an answer");
    client_unlink_job(j);
    for (unsigned i = 0; i < j->nq; i++) {
        query_result_free(&j->res[i]);
        ht_free(j->qa[i]);
        cJSON_Delete(j->rows[i]);
        ht_free(j->rows_text[i]);
    }
    cJSON_Delete(j->args);
    if (j->release)
        j->release(j->arg);
    ht_free(j);
}

int qjob_rows_into(struct qjob *j, unsigned i, cJSON *d)
{
    cJSON *rows = j->rows[i];
    if (!rows)
        return 0; /* made on the loop, with d, or printed (qjob_reply_line) */
    j->rows[i] = NULL;
    if (!cJSON_ReplaceItemInObjectCaseSensitive(d, "rows", rows)) {
        cJSON_Delete(rows);
        return HT_ENOMEM;
    }
    return 0;
}

char *qjob_reply_line(struct qjob *j, unsigned i, int64_t id, cJSON *d, int more)
{
    char *line = ht_reply_ok(id, d, more);
    char *buf = j->rows_text[i];
    if (!line || !buf)
        return line;
    /* Keys are printed unescaped and every quote inside a string is
     * escaped, so the first "rows":[] is the member itself. */
    static const char key[] = "\"rows\":";
    char *p = strstr(line, "\"rows\":[]");
    if (!p) {
        ht_free(line);
        return NULL;
    }
    size_t pre = (size_t)(p - line) + sizeof(key) - 1, n = j->rows_len[i];
    const char *tail = p + sizeof(key) - 1 + 2;
    size_t post = strlen(tail) + 1; /* with its NUL */
    char *out;
    if (pre <= QJOB_ROWS_ROOM && post <= QJOB_ROWS_ROOM) {
        /* In the worker's buffer: the rows move down to after the prefix
         * (a memmove over pages already touched; a new 11 MiB buffer cost
         * the loop its page faults). */
        out = buf;
        j->rows_text[i] = NULL;
        memmove(out + pre, out + QJOB_ROWS_ROOM, n);
    } else {
        out = ht_malloc(pre + n + post);
        if (out)
            memcpy(out + pre, buf + QJOB_ROWS_ROOM, n);
    }
    if (out) {
        memcpy(out, line, pre);
        memcpy(out + pre + n, tail, post);
    }
    ht_free(line);
    return out;
}

/* Answers of request jobs. */

void qjob_answer_src(struct qjob *j, struct reply_src *r)
{
    struct client *c = j->c;
    struct out_item *slot = j->slot;
    j->slot = NULL;
    if (!c || !slot) {
        reply_src_free(r);
        return;
    }
    client_fill(c, slot, NULL, r);
}

void qjob_answer_error(struct qjob *j, int err, const char *msg)
{
    struct client *c = j->c;
    struct out_item *slot = j->slot;
    j->slot = NULL;
    if (!c)
        return;
    c->srv->request_errors++;
    char *line = ht_reply_err(j->req_id, err, msg);
    if (slot)
        client_fill(c, slot, line, NULL);
    else
        client_send(c, line);
}

void qjob_client_gone(struct client *c)
{
    while (c->jobs) {
        struct qjob *j = c->jobs;
        c->jobs = j->cnext;
        j->c = NULL;
        j->slot = NULL; /* freed with the client's queue */
    }
    c->top_job = NULL;
}

/* The workers. */

static void run_job(struct qworker *qw, struct qjob *j)
{
    uint64_t t0 = uv_hrtime();
    for (unsigned i = 0; i < j->nq && j->rc == 0; i++) {
        int rc = engine_query_view(j->v, &j->qa[i]->q, &j->res[i]);
        if (rc != 0) {
            memset(&j->res[i], 0, sizeof(j->res[i]));
            j->rc = rc;
        }
    }
    for (unsigned i = 0; i < j->nq && j->rc == 0 && j->render != QJOB_ROWS_LOOP; i++) {
        j->rows[i] = query_rows_json(ev_stacks(j->v), &j->qa[i]->q, &j->res[i]);
        if (j->rows[i] && j->render == QJOB_ROWS_TEXT) {
            char *t = cJSON_PrintUnformatted(j->rows[i]);
            size_t n = t ? strlen(t) : 0;
            char *buf = t ? ht_malloc(n + 2 * QJOB_ROWS_ROOM) : NULL;
            if (buf) {
                memcpy(buf + QJOB_ROWS_ROOM, t, n);
                j->rows_text[i] = buf;
                j->rows_len[i] = n;
            } else {
                j->rc = UV_ENOMEM;
            }
            cJSON_free(t);
            cJSON_Delete(j->rows[i]);
            j->rows[i] = NULL;
        } else if (!j->rows[i]) {
            j->rc = UV_ENOMEM;
        }
    }
    if (j->rc == 0 && j->work)
        j->work(j);
#ifdef HEAPTRACE_TEST_KNOBS
    /* A slow query on demand, for the tests of what happens meanwhile; cut
     * short when the daemon stops. */
    if (qw->test_delay_ms) {
        uint64_t end = t0 + qw->test_delay_ms * 1000000ULL, now;
        uv_mutex_lock(&qw->mu);
        while (!qw->quit && (now = uv_hrtime()) < end)
            uv_cond_timedwait(&qw->cv, &qw->mu, end - now);
        uv_mutex_unlock(&qw->mu);
    }
#else
    (void)qw;
#endif
    j->worker_ns = uv_hrtime() - t0;
}

static void worker_main(void *arg)
{
    struct qworker *qw = arg;
    uv_mutex_lock(&qw->mu);
    for (;;) {
        while (!qw->quit && !qw->todo_head)
            uv_cond_wait(&qw->cv, &qw->mu);
        if (qw->quit)
            break;
        struct qjob *j = qw->todo_head;
        qw->todo_head = j->next;
        if (!qw->todo_head)
            qw->todo_tail = NULL;
        uv_mutex_unlock(&qw->mu);
        run_job(qw, j);
        uv_mutex_lock(&qw->mu);
        j->next = NULL;
        if (qw->done_tail)
            qw->done_tail->next = j;
        else
            qw->done_head = j;
        qw->done_tail = j;
        uv_async_send(&qw->async);
    }
    uv_mutex_unlock(&qw->mu);
}

static const char *failure_text(int rc)
{
    switch (rc) {
    case UV_ENOMEM:
    case HT_ENOMEM:
        return "out of memory running the query";
    case HT_ENOSESSION:
        return "the session was dropped before its query ended";
    case UV_ECANCELED:
        return "the daemon is stopping";
    default:
        return "the query failed";
    }
}

void qjob_answer_failed(struct qjob *j)
{
    int rc = j->rc == UV_ENOMEM ? HT_ENOMEM : j->rc ? j->rc : HT_EINTERNAL;
    qjob_answer_error(j, rc, failure_text(j->rc));
}

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
              j->rc ? failure_text(j->rc) : "ok");
    qjob_free(j);
    if (s->dropped) {
        session_free_dropped(s);
        return;
    }
    session_warm(s); /* stacks interned meanwhile: the skip cache was the worker's */
    session_query_next(s);
}

static void take_done(struct qworker *qw)
{
    uv_mutex_lock(&qw->mu);
    struct qjob *j = qw->done_head;
    qw->done_head = qw->done_tail = NULL;
    uv_mutex_unlock(&qw->mu);
    while (j) {
        struct qjob *next = j->next;
        job_finished(j);
        j = next;
    }
}

static void async_cb(uv_async_t *a)
{
    take_done(a->data);
}

static void qworker_closed_cb(uv_handle_t *h)
{
    struct qworker *qw = h->data;
    uv_cond_destroy(&qw->cv);
    uv_mutex_destroy(&qw->mu);
    ht_free(qw);
}

/* The workers, started with the first query (a server that never queries
 * starts no thread). NULL when they cannot run: the job then runs inline. */
static struct qworker *qworker_get(struct server *srv)
{
    if (srv->qw || srv->stopping)
        return srv->qw;
    struct qworker *qw = ht_calloc(1, sizeof(*qw));
    if (!qw)
        return NULL;
    qw->srv = srv;
    if (uv_mutex_init(&qw->mu) != 0) {
        ht_free(qw);
        return NULL;
    }
    if (uv_cond_init(&qw->cv) != 0) {
        uv_mutex_destroy(&qw->mu);
        ht_free(qw);
        return NULL;
    }
    uv_async_init(srv->loop, &qw->async, async_cb);
    qw->async.data = qw;
#ifdef HEAPTRACE_TEST_KNOBS
    const char *d = getenv("HEAPTRACED_TEST_QUERY_DELAY_MS");
    if (d && *d) {
        qw->test_delay_ms = strtoull(d, NULL, 10);
        log_warn("test knob HEAPTRACED_TEST_QUERY_DELAY_MS: every query takes at least %llu ms",
                 (unsigned long long)qw->test_delay_ms);
    }
#endif
    for (int i = 0; i < QWORKER_THREADS; i++) {
        if (uv_thread_create(&qw->threads[qw->nthreads], worker_main, qw) != 0)
            break;
        qw->nthreads++;
    }
    if (qw->nthreads == 0) {
        log_warn("no query worker thread could start: queries run on the loop");
        uv_close((uv_handle_t *)&qw->async, qworker_closed_cb);
        return NULL;
    }
    srv->qw = qw;
    return qw;
}

void qworker_stop(struct server *srv)
{
    struct qworker *qw = srv->qw;
    if (!qw)
        return;
    uv_mutex_lock(&qw->mu);
    qw->quit = 1;
    uv_cond_broadcast(&qw->cv);
    uv_mutex_unlock(&qw->mu);
    for (int i = 0; i < qw->nthreads; i++)
        uv_thread_join(&qw->threads[i]);
    /* Jobs no worker took: their views are closed like the others'. */
    for (struct qjob *j = qw->todo_head, *next; j; j = next) {
        next = j->next;
        j->rc = UV_ECANCELED;
        j->next = NULL;
        if (qw->done_tail)
            qw->done_tail->next = j;
        else
            qw->done_head = j;
        qw->done_tail = j;
    }
    qw->todo_head = qw->todo_tail = NULL;
    take_done(qw);
    srv->qw = NULL;
    uv_close((uv_handle_t *)&qw->async, qworker_closed_cb);
}

/* Sessions' queues. */

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
        struct qworker *qw = qworker_get(s->srv);
        if (!qw) { /* no thread: the query runs here, as it did before workers */
            struct qworker inline_qw;
            memset(&inline_qw, 0, sizeof(inline_qw));
            run_job(&inline_qw, j);
            job_finished(j);
            return; /* job_finished went on with the next one */
        }
        uv_mutex_lock(&qw->mu);
        if (qw->todo_tail)
            qw->todo_tail->next = j;
        else
            qw->todo_head = j;
        qw->todo_tail = j;
        /* Broadcast: a worker in the test knob's wait shares the cond and
         * could take a signal meant for an idle one. */
        uv_cond_broadcast(&qw->cv);
        uv_mutex_unlock(&qw->mu);
    }
}

int session_query_submit(struct qjob *j)
{
    struct session *s = j->s;
    if (s->dropped || s->srv->stopping)
        return HT_ENOSESSION;
    /* Queries waiting behind the running one: past cfg->max_queued_queries
     * one more is refused (requests of one client wait for its previous
     * reply, so these are other clients' and top refreshes). */
    if (!j->urgent && s->q_waiting >= s->srv->cfg->max_queued_queries) {
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

int qjob_submit_request(struct cmd_ctx *ctx, struct qjob *j)
{
    struct client *c = ctx->c;
    j->for_client = 1;
    j->req_id = ctx->req->id;
    j->slot = client_reserve(c);
    if (!j->slot) {
        qjob_free(j);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    j->c = c;
    j->cnext = c->jobs;
    c->jobs = j;
    struct session *s = j->s;
    int rc = session_query_submit(j);
    if (rc == HT_EFULL) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "session %u is busy: %u queries wait behind a running one (max_queued_queries); "
                 "try again",
                 s->id, s->q_waiting);
        qjob_answer_error(j, HT_EFULL, msg);
        qjob_free(j);
    } else if (rc != 0) {
        qjob_answer_error(j, rc, failure_text(rc));
        qjob_free(j);
    }
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
