/* Query jobs of requests (query-job.c): a request's query runs on a worker
 * thread over an engine view while the loop goes on draining sources (the
 * session layer queues and runs the jobs: session.h, qjob.h). Here: the
 * queries parsed from a request, the answer put in its place among the
 * client's replies; a client that goes away only loses its answer. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef QUERY_JOB_H
#define QUERY_JOB_H

#include "qjob.h"
#include "query-args.h"
#include "session.h"

#include <stdint.h>
#include <uv.h>

struct client;
struct cmd_ctx;
struct cJSON;
struct reply_src;
struct session;

/* Add a query parsed from args (taken over, kept as j->args; one args per
 * job): 0, or an error with a message in err. */
int qjob_add_query(struct qjob *j, struct cJSON *args, int domain, char *err, size_t errsz);
/* Put query i's rows made on the worker as a tree (QJOB_ROWS_TREE) in
 * place of the "rows" array of d, its reply data made with no rows: 0, or
 * HT_ENOMEM. */
int qjob_rows_into(struct qjob *j, unsigned i, struct cJSON *d);
/* The reply line ht_reply_ok(id, d, more) makes (d taken over), with query
 * i's rows printed on the worker (QJOB_ROWS_TEXT) put in for the empty
 * "rows" array of d; NULL when out of memory. */
char *qjob_reply_line(struct qjob *j, unsigned i, int64_t id, struct cJSON *d, int more);

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
/* j answers client c (it is on the client's list until answered or freed). */
void qjob_attach(struct qjob *j, struct client *c);
/* A job for the whole-session top stacks (default cull, sorted by
 * outstanding) of domain, or NULL when out of memory. */
struct qjob *session_top_job(struct session *s, int domain, uint32_t top, const char *what);
/* Reply data of a top job's query i, or NULL when out of memory. */
struct cJSON *session_top_result(struct qjob *j, unsigned i);
/* What the server registers with the session layer (snapshots' stacks). */
extern const struct session_hooks qjob_session_hooks;

#endif
