/* Queries off the loop (query-job.c): a request's query runs on a worker
 * thread over an engine view while the loop goes on draining sources.
 *
 * On the loop: a job is queued on its session (one view per engine: a
 * session's queries run one after the other, at most cfg max_queued_queries
 * waiting), its view opens when its turn comes, a worker runs
 * engine_query_view on it, and back on the loop the view is closed and the
 * job's done callback answers. Different sessions' queries run in parallel
 * on the QWORKER_THREADS workers. Nothing the worker uses is freed under it:
 * a dropped session is kept (off the session list) until its running query
 * returns, a client that goes away only loses its answer. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef QUERY_JOB_H
#define QUERY_JOB_H

#include "query-args.h"

#include <stdint.h>
#include <uv.h>

struct client;
struct cmd_ctx;
struct cJSON;
struct engine_view;
struct out_item;
struct reply_src;
struct server;
struct session;

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
    /* Who gets the answer: NULL once the client went away (then discarded). */
    struct client *c;
    struct out_item *slot; /* the answer's place among the client's replies, or NULL */
    int64_t req_id;
    const char *what; /* for the log: "stacks", "top", ... */
    unsigned nq;
    struct qargs *qa[QJOB_MAXQ];
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
/* Add a query parsed from args (taken over, kept as j->args; one args per
 * job): 0, or an error with a message in err. */
int qjob_add_query(struct qjob *j, struct cJSON *args, int domain, char *err, size_t errsz);
void qjob_free(struct qjob *j);
/* Put query i's rows made on the worker as a tree (QJOB_ROWS_TREE) in
 * place of the "rows" array of d, its reply data made with no rows: 0, or
 * HT_ENOMEM. */
int qjob_rows_into(struct qjob *j, unsigned i, struct cJSON *d);
/* The reply line ht_reply_ok(id, d, more) makes (d taken over), with query
 * i's rows printed on the worker (QJOB_ROWS_TEXT) put in for the empty
 * "rows" array of d; NULL when out of memory. */
char *qjob_reply_line(struct qjob *j, unsigned i, int64_t id, struct cJSON *d, int more);

/* Queue j on its session (taken over, freed after done): 0, or HT_EFULL /
 * HT_ENOSESSION with j freed (counted as rejected). */
int session_query_submit(struct qjob *j);
/* The request's job: its answer keeps its place among the client's replies
 * (later requests of the client wait behind it); an error is answered now.
 * Returns 0. */
int qjob_submit_request(struct cmd_ctx *ctx, struct qjob *j);
/* The answer of a request job: a stream (taken over) or an error. */
void qjob_answer_src(struct qjob *j, struct reply_src *r);
void qjob_answer_error(struct qjob *j, int err, const char *msg);
/* The error answer of a job that has no result (j->rc); nothing when the client is gone. */
void qjob_answer_failed(struct qjob *j);
/* The client goes away: its jobs answer nobody. */
void qjob_client_gone(struct client *c);
/* The session is dropped: its waiting jobs are answered ENOSESSION; 1 when
 * a query still runs (the session is freed once it returns). */
int session_queries_cancel(struct session *s);
/* Shut the workers down (joined; the running jobs finish first). */
void qworker_stop(struct server *srv);

#endif
