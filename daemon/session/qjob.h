/* A query job (session queries): one or two engine queries of a session
 * over one view, run off the loop by the query workers (qworker.h). The
 * session queues them (session.h session_query_submit); whoever made the
 * job hears the answer through its callbacks. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef QJOB_H
#define QJOB_H

#include "query.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct engine_view;
struct qargs;
struct session;
struct stack_intern;

/* Queries of one job, over one view (a snapshot's stacks and commits). */
#define QJOB_MAXQ 2
/* Two: queries of two sessions run at once; one session's run one by one. */
#define QWORKER_THREADS 2
enum { QJOB_ROWS_LOOP, QJOB_ROWS_TREE, QJOB_ROWS_TEXT };
#define QJOB_ROWS_ROOM 16384

struct qjob {
    struct qjob *next;  /* the session's waiting list, then the workers' lists */
    struct qjob *cnext; /* the client's jobs */
    struct session *s;
    int urgent;     /* snapshots: ahead of the waiting queries, never refused */
    int for_client; /* answers a client: dropped unrun once the client is gone */
    /* Who gets the answer, the server's (opaque here): its client, NULL
     * once the client went away (then discarded), and the answer's place
     * among the client's replies, or NULL. */
    void *c;
    void *slot;
    int64_t req_id;
    /* Set with c (server side): called by qjob_free while c is set, to take
     * the job off its client and answer a request that got no answer. */
    void (*detach)(struct qjob *j);
    const char *what; /* for the log: "stacks", "top", ... */
    unsigned nq;
    struct qargs *qa[QJOB_MAXQ]; /* parsed by the adder (server side; freed here) */
    const struct query *q[QJOB_MAXQ]; /* each qa's query */
    /* Rows of a result as JSON, on the worker (QJOB_ROWS_TREE, _TEXT): set
     * by the adder, which knows how a reply shows them. */
    struct cJSON *(*rows_json)(const struct stack_intern *si, const struct query *q,
                               const struct query_result *res);
    struct cJSON *args; /* what qa's patterns point into (owned) */
    struct query_result res[QJOB_MAXQ];
    /* Rows made on the worker, with the view's interner, so that a reply
     * sent whole (a top refresh, a snapshot) does not hold the loop for
     * them: 5 top refreshes of 1000 rows of 48 frames held it ~100 ms.
     * QJOB_ROWS_TREE: rows[i] is each result's rows as a cJSON array,
     * taken by session_top_result; QJOB_ROWS_TEXT: that array printed
     * (rows_len bytes) at QJOB_ROWS_ROOM into rows_text[i], room around it
     * for the reply's other members (qjob_reply_line). */
    int render;
    struct cJSON *rows[QJOB_MAXQ];
    char *rows_text[QJOB_MAXQ];
    size_t rows_len[QJOB_MAXQ];
    int rc; /* 0, or why there is no result (UV_ENOMEM, HT_ENOSESSION, ...) */
    /* Loop thread, both optional but done: the view just opened (figures of
     * the same instant); the view is closed, answer (rc, res). done must
     * not start work on a session being dropped (s->dropped). */
    void (*opened)(struct qjob *j);
    /* Worker thread, optional: after the queries, the view still open
     * (ev_stacks(j->v)), to make an answer off the loop (a pprof body);
     * sets rc on failure. */
    void (*work)(struct qjob *j);
    void (*done)(struct qjob *j);
    void (*release)(void *arg); /* frees arg */
    void *arg;
    /* Worker side. */
    struct engine_view *v;
    uint64_t view_now; /* the engine's time the view shows */
    uint64_t t_submit, t_open, open_ns, worker_ns;
};

/* A job for session s with no query yet (HT_ENOMEM: NULL). */
struct qjob *qjob_new(struct session *s, const char *what);
/* Frees j and what it holds; a job whose client is still set is detached
 * first (detach). */
void qjob_free(struct qjob *j);
/* What a job's failure code rc means, for its answer and the log. */
const char *qjob_failure_text(int rc);

#endif
