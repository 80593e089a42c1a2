/* Query jobs of requests: their queries parsed from the request's
 * arguments, their answers put in the client's replies in order, and the
 * whole-session top jobs (top, snapshots) (query-job.h). */
#include "query-job.h"
#include "query-render.h"

#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

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
    int rc = qargs_parse(qa, j->s, session_config(j->s), args, domain, err, errsz);
    if (rc != 0) {
        ht_free(qa);
        return rc;
    }
    j->q[j->nq] = &qa->q;
    j->rows_json = query_rows_json;
    j->qa[j->nq++] = qa;
    return 0;
}

/* qjob_free of a job whose client is still there (j->detach): never leave
 * the client waiting for an answer that will not come, and take the job off
 * its list. */
static void client_unlink_job(struct qjob *j)
{
    if (j->c && j->slot)
        qjob_answer_error(j, HT_EINTERNAL, "internal: the query ended without an answer");
    struct client *c = j->c;
    if (!c)
        return;
    for (struct qjob **p = &c->jobs; *p; p = &(*p)->cnext)
        if (*p == j) {
            *p = j->cnext;
            break;
        }
    if (c->top_job == j)
        c->top_job = NULL;
    j->c = NULL;
}

void qjob_attach(struct qjob *j, struct client *c)
{
    j->c = c;
    j->detach = client_unlink_job;
    j->cnext = c->jobs;
    c->jobs = j;
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

void qjob_answer_failed(struct qjob *j)
{
    int rc = j->rc == UV_ENOMEM ? HT_ENOMEM : j->rc ? j->rc : HT_EINTERNAL;
    qjob_answer_error(j, rc, qjob_failure_text(j->rc));
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
    qjob_attach(j, c);
    struct session *s = j->s;
    int rc = session_query_submit(j);
    if (rc == HT_EFULL) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "session %u is busy: %u queries wait behind a running one (max_queued_queries); "
                 "try again",
                 session_id(s), session_queries_waiting(s));
        qjob_answer_error(j, HT_EFULL, msg);
        qjob_free(j);
    } else if (rc != 0) {
        qjob_answer_error(j, rc, qjob_failure_text(rc));
        qjob_free(j);
    }
    return 0;
}

/* The query of a whole-session top of domain added to j: 0 or an error. */
static int top_query_add(struct qjob *j, int domain, uint32_t top)
{
    char err[128];
    if (!j->args) {
        j->args = cJSON_CreateObject();
        if (!j->args || !cJSON_AddNumberToObject(j->args, "top", top))
            return HT_ENOMEM;
    }
    return qjob_add_query(j, j->args, domain, err, sizeof(err));
}

struct qjob *session_top_job(struct session *s, int domain, uint32_t top, const char *what)
{
    struct qjob *j = qjob_new(s, what);
    if (j && top_query_add(j, domain, top) != 0) {
        qjob_free(j);
        return NULL;
    }
    return j;
}

cJSON *session_top_result(struct qjob *j, unsigned i)
{
    if (j->render == QJOB_ROWS_LOOP)
        return query_result_json(j->s, &j->qa[i]->q, &j->res[i]);
    struct query_result head = j->res[i];
    head.nrows = 0; /* the rows were made on the worker */
    cJSON *d = query_result_json(j->s, &j->qa[i]->q, &head);
    if (d && qjob_rows_into(j, i, d) != 0) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

/* A snapshot's stacks and commits: one job (one view), urgent (session.c
 * session_snapshot_done says the rest). */
static void snapshot_done(struct qjob *j)
{
    uint32_t seq = (uint32_t)(uintptr_t)j->arg;
    cJSON *st = NULL, *cm = NULL;
    if (j->rc == 0 && session_snapshot_wanted(j->s, seq)) {
        st = session_top_result(j, 0);
        cm = session_top_result(j, 1);
    }
    session_snapshot_done(j->s, seq, j->view_now, st, cm, j->rc);
}

static int snapshot_query(struct session *s, uint32_t seq, uint32_t top)
{
    struct qjob *j = session_top_job(s, HT_DOM_HEAP, top, "snapshot");
    if (j && top_query_add(j, HT_DOM_COMMIT, top) != 0) {
        qjob_free(j);
        j = NULL;
    }
    if (!j)
        return HT_ENOMEM;
    j->urgent = 1;
    j->render = QJOB_ROWS_TREE;
    j->arg = (void *)(uintptr_t)seq;
    j->done = snapshot_done;
    int rc = session_query_submit(j);
    if (rc != 0)
        qjob_free(j);
    return rc;
}

const struct session_hooks qjob_session_hooks = {snapshot_query};
