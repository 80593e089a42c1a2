/* The command handlers (cmd-*.c, one file each) and what they share: the
 * context, reply helpers, dispatch, query rows and the load stream. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef COMMANDS_H
#define COMMANDS_H

#include "client.h"
#include "ht-commands.h"
#include "query.h"
#include "server-state.h"
#include "session.h"

#include <stdint.h>

struct cJSON;
struct qjob;
struct tl_span;

/* The context a command handler gets. */
struct cmd_ctx {
    struct server *srv;
    struct client *c;
    struct ht_request *req;
    const struct ht_cmd_spec *spec;
    struct session *s; /* resolved for HT_CMDF_SESSION commands */
};

typedef int (*cmd_fn)(struct cmd_ctx *ctx);

/* Reply helpers: data is taken over. Return 0 so handlers can 'return cmd_reply(...)'. */
int cmd_reply(struct cmd_ctx *ctx, struct cJSON *data);
int cmd_error(struct cmd_ctx *ctx, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Cut data's array arr (in data, or in its member outer) for r and queue r
 * to the client; data is freed. Returns 0 (an error was answered). */
int reply_start(struct cmd_ctx *ctx, struct reply_src *r, struct cJSON *data, struct cJSON *arr,
                struct cJSON *outer);
void dispatch_request(struct client *c, const char *line, size_t len);
/* Nonzero if every command of the table has a handler (one written as NULL). */
int dispatch_complete(void);

/* Handlers, one file each (cmd-*.c): named by the command table. */
#define HT_CMD(id, name, flags, syn, sum, handler, renderer) int handler(struct cmd_ctx *ctx);
#define HT_ARG(id, name, type, flags, meta, help)
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG

/* The query an export of stacks or commits runs for args (its format and
 * what left out, the top at the maximum, sorted by the types' size):
 * cmd-export.c, also the HTTP listener's profiles. NULL when out of memory. */
struct export_value;
struct cJSON *export_query_args(const struct cJSON *args, const struct export_value *value);

/* start and run: a session on the live source picked for mode (cmd-start.c). */
int cmd_start_live(struct cmd_ctx *ctx, unsigned mode);

/* stacks and commits differ only in the domain (cmd-stacks.c). */
int cmd_query_domain(struct cmd_ctx *ctx, int domain);
/* Send a query's rows a frame at a time (cmd-stacks.c): data is the reply
 * around them (its array arr, in data or in its member outer, is where they
 * go); res is taken over. Returns 0 (an error was answered). */
int rows_reply(struct cmd_ctx *ctx, const struct query *q, struct query_result *res,
               struct cJSON *data, struct cJSON *arr, struct cJSON *outer, reply_fmt_fn fmt,
               const void *fmt_arg, const char *lead);
/* The same as a stream, not sent yet (NULL when out of memory; res is taken either way). */
struct reply_src *rows_src_new(struct server *srv, uint32_t session, const struct query *q,
                               struct query_result *res, reply_fmt_fn fmt, const void *fmt_arg,
                               const char *lead);
/* A job's answer: the rows of its query i, streamed as rows_reply does. */
void rows_job_answer(struct qjob *j, unsigned i, struct cJSON *data, struct cJSON *arr,
                     struct cJSON *outer, reply_fmt_fn fmt, const void *fmt_arg, const char *lead);
/* A query's reply data around its rows: every member, "rows" empty. */
struct cJSON *rows_head(struct session *s, const struct query *q, const struct query_result *res);
/* The same for the timeline's samples in a span (cmd-timeline.c). */
int samples_reply(struct cmd_ctx *ctx, const struct tl_span *sp, struct cJSON *data,
                  struct cJSON *arr, struct cJSON *outer, reply_fmt_fn fmt, const void *fmt_arg,
                  const char *lead);
/* The timeline's samples in [t1, t2], one per step (cmd-timeline.c; export uses it too). */
struct tl_span {
    uint64_t t1, t2, step;
    uint64_t next;   /* the step's next sample time */
    uint64_t last_t; /* time of the last sample sent */
    int started;
};
/* Reply data for args (range, step) with an empty "samples" array, and the
 * span its samples come from. 0 or HT_EBADARG with err. */
int timeline_head(struct session *s, const struct cJSON *args, struct cJSON **out,
                  struct tl_span *sp, char *err, size_t errsz);
/* The span's next sample (NULL at its end): a binary search by time, so a
 * ring that moved on since the last call is followed. */
const struct tl_sample *timeline_next(struct session *s, struct tl_span *sp);
struct cJSON *timeline_sample_json(struct session *s, const struct tl_sample *x);

/* Load streaming (cmd-load.c): bytes of a CLIENT_STREAM client. */
void load_stream_bytes(struct client *c, const char *buf, size_t n);
/* A chunk header's length: ht_chunk_length (ht-chunk.h). */
void load_stream_end(struct client *c, const char *why);
/* 1 when the loader's feed has less room than one read: stop reading it. */
int load_stream_full(const struct client *c);

#endif
