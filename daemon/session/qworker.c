/* The query workers: threads that run query jobs over their open views,
 * and the way back to the loop (qworker.h). */
#include "qworker.h"

#include "engine-view.h"
#include "qjob.h"

#include "ht-alloc.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The workers: one lock for both lists; the loop hears of finished jobs
 * through an async handle. Plain uv threads, mutex, cond and async: the
 * same on Windows. */
struct qworker {
    /* Back on the loop: each finished job (qworker_new). */
    void (*finished)(struct qjob *j);
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

/* The workers. */

static void run_job(struct qworker *qw, struct qjob *j)
{
    uint64_t t0 = uv_hrtime();
    for (unsigned i = 0; i < j->nq && j->rc == 0; i++) {
        int rc = engine_query_view(j->v, j->q[i], &j->res[i]);
        if (rc != 0) {
            memset(&j->res[i], 0, sizeof(j->res[i]));
            j->rc = rc;
        }
    }
    for (unsigned i = 0; i < j->nq && j->rc == 0 && j->render != QJOB_ROWS_LOOP; i++) {
        j->rows[i] = j->rows_json(ev_stacks(j->v), j->q[i], &j->res[i]);
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

static void take_done(struct qworker *qw)
{
    uv_mutex_lock(&qw->mu);
    struct qjob *j = qw->done_head;
    qw->done_head = qw->done_tail = NULL;
    uv_mutex_unlock(&qw->mu);
    while (j) {
        struct qjob *next = j->next;
        qw->finished(j);
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

struct qworker *qworker_new(uv_loop_t *loop, void (*finished)(struct qjob *j))
{
    struct qworker *qw = ht_calloc(1, sizeof(*qw));
    if (!qw)
        return NULL;
    qw->finished = finished;
    if (uv_mutex_init(&qw->mu) != 0) {
        ht_free(qw);
        return NULL;
    }
    if (uv_cond_init(&qw->cv) != 0) {
        uv_mutex_destroy(&qw->mu);
        ht_free(qw);
        return NULL;
    }
    uv_async_init(loop, &qw->async, async_cb);
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
    return qw;
}

void qworker_stop(struct qworker *qw)
{
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
    uv_close((uv_handle_t *)&qw->async, qworker_closed_cb);
}

void qworker_run(struct qworker *qw, struct qjob *j)
{
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

void qworker_run_here(struct qjob *j)
{
    struct qworker inline_qw;
    memset(&inline_qw, 0, sizeof(inline_qw));
    run_job(&inline_qw, j);
}
