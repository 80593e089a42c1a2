/* heaptraced's server: the loop, clients on the control endpoint, sessions, command context. */
#ifndef SERVER_H
#define SERVER_H

#include "config.h"
#include "engine.h"
#include "ht-commands.h"
#include "query.h"
#include "ht-proto.h"
#include "source.h"

#include <stdint.h>
#include <uv.h>

struct cJSON;
struct session;
struct server;
struct cmd_ctx;
struct tl_span;

/* Where a client's bytes go once a request switched it out of line mode. */
enum client_mode {
    CLIENT_LINES,    /* one JSON request per line */
    CLIENT_STREAM,   /* load: "<len>\n<bytes>" chunks until a 0 chunk */
    CLIENT_DRAINING, /* load: end chunk read, the session still applies the stream */
    CLIENT_SKIP,     /* dropping an over-long line until its newline */
};

struct client {
    uv_pipe_t pipe;
    uv_timer_t timer; /* top subscription */
    struct server *srv;
    struct client *next, *prev;
    uint64_t id;
    uint32_t uid;          /* the peer's, from admission */
    uint64_t last_request; /* loop time (ms) of its last complete request, or of the accept */
    int closing;
    int close_when_flushed;
    int pending_closes;
    enum client_mode mode;
    char *in; /* unparsed input, at most HT_REQUEST_MAX (+ a stream chunk header) */
    size_t in_len;
    uint64_t out_pending; /* bytes handed to libuv and not yet read by the client */
    /* Replies waiting for the client to read what came before (reply.c):
     * lines and reply streams, in request order. */
    struct out_item *oq_head, *oq_tail;
    uint64_t oq_bytes; /* bytes of the queued lines */
    char *held;        /* requests read while output was backed up, run once it drained */
    size_t held_len;
    int eof; /* the client shut its writing side: answer what it sent, then close */
    /* Stream (load) state. */
    struct session *loading;
    int64_t load_req_id;
    uint64_t chunk_left; /* bytes left of the current chunk */
    int paused;          /* reading stopped: the feed is full, or draining */
    char *after;         /* bytes after the end chunk, read once the load is done */
    size_t after_len;
    /* Subscriptions. */
    struct session *recording; /* record: events go to this client */
    int64_t sub_req_id;
    struct session *topping; /* top: a frame per interval */
    uint32_t top_rows;
    uint64_t top_left; /* frames still to send, 0 = unlimited */
    uint64_t top_seq;
    uint64_t top_unread, top_progress_ms; /* unread at the last refresh, when it last fell */
    struct client *sub_next;              /* in the session's subscriber list */
    /* record: events of the gap not yet reported in the stream, and of all gaps. */
    uint64_t rec_lost, rec_lost_total;
};

enum session_state { SESSION_LOADING, SESSION_RUNNING, SESSION_STOPPED, SESSION_ENDED };

enum trigger_metric { TRIG_PRIVATE_BYTES, TRIG_OUTSTANDING, TRIG_COMMITTED, TRIG_DURATION };

struct trigger {
    char text[64];
    int snapshot; /* 0: stop-when, 1: snapshot-when */
    int metric;
    uint64_t threshold;
    uint64_t every; /* snapshot-when: fire again each time the value grows by this */
    uint64_t next;  /* value at which it fires next; UINT64_MAX = done */
    uint32_t fired;
    uint64_t first_t, last_t; /* session times of the first and last firing */
};

#define SESSION_MAX_TRIGGERS 16
#define SESSION_BATCH 256

struct snapshot {
    uint32_t seq;
    uint64_t t;
    char reason[96];
    struct cJSON *data; /* stacks + commits + counters at that time */
    uint64_t bytes;     /* its estimated size, charged to the session's budget */
};

struct session {
    struct server *srv;
    struct session *next;
    uint32_t id;
    char name[64];
    enum session_state state;
    char stop_reason[128];
    const char *source; /* the source's name ("replay", "bpf") */
    int64_t wall_start; /* unix seconds when the session started */
    char process_name[256];
    char stream_wall[64];
    struct engine eng;
    struct skip_cache default_skip; /* default cull list, per stack (query.h) */
    uint32_t warmed;                /* stacks below this id are in default_skip */
    /* The session's source (source.h): drained on the loop by drain_idle, a
     * budget per iteration. Once it is over (ended, or the session stopped)
     * a source without a symbolizer is closed and src is NULL; one with a
     * symbolizer stays for the replies' frames until the session is dropped. */
    struct source *src;
    int src_over;               /* the source ended or was stopped, and that was handled */
    uv_idle_t *drain_idle;      /* runs while the source has records to drain */
    struct source_stats ingest; /* what the input held (refreshed from the source) */
    uint64_t input_dropped;     /* stream bytes that found no room (never expected) */
    char end_reason[128];       /* why the input ended, while the source still drains */
    /* Set by the command that owns the session's input (load): called after
     * each drain, and once when the source is over. */
    void (*on_drained)(struct session *s);
    void (*on_source_end)(struct session *s);
    struct trigger triggers[SESSION_MAX_TRIGGERS];
    unsigned ntriggers;
    struct snapshot *snaps; /* ring of cfg.max_snapshots */
    uint32_t nsnaps, snap_seq;
    uint64_t snaps_dropped;
    uint64_t snaps_over_budget; /* snapshots not kept: the byte budget was reached */
    struct mem_budget mem;      /* this session's bytes, under the daemon's budget */
    struct client *loader;
    struct client *subs; /* record and top clients */
    uint32_t nrecorders; /* subscribers that take the event stream */
    uint64_t recorded_events, recorder_drops;
    /* Events left out of recordings that fell behind, reported as "lost" gaps. */
    uint64_t recorder_lost;
};

struct server {
    uv_loop_t *loop;
    struct ht_config *cfg;
    uv_pipe_t listener;
    uv_signal_t sigint, sigterm, sigpipe;
    uv_timer_t tick;
    uv_timer_t idle; /* closes clients idle past cfg->client_idle_ns */
    int listening;
    int stopping;
    struct client *clients;
    uint32_t nclients;
    uint64_t next_client_id;
    struct session *sessions;
    uint32_t nsessions, next_session_id;
    uint64_t clients_refused, clients_dropped_slow, requests, request_errors;
    /* Connection limits (each refusal under its own name; clients_refused is EPERM). */
    uint64_t clients_refused_full, clients_refused_uid, clients_refused_nofd, accept_errors,
        clients_idle_closed;
    uint64_t out_queued;                   /* every client's unread output bytes */
    uint64_t clients_dropped_output_total; /* dropped at cfg->output_cap_total */
    uint64_t top_frames_skipped; /* top refreshes not sent: the client had not read the last */
    struct mem_budget mem; /* daemon-wide budget: sessions charge it, queued output counts in it */
};

/* The server's state and handles on loop, not listening and with no timer or
 * signal started (server_stop closes them). */
void server_init(struct server *srv, uv_loop_t *loop, struct ht_config *cfg);
/* server_init, then listen on cfg->endpoint and start the timers and signal
 * handlers. 0 or an error (already running, bad path); on error the handles
 * are closed and the loop ends by itself. */
int server_start(struct server *srv, uv_loop_t *loop, struct ht_config *cfg);
/* A client on the server's list with its handles initialised (not yet
 * connected), or NULL when out of memory; client_start starts reading it once
 * its pipe is connected. */
struct client *client_new(struct server *srv);
void client_start(struct client *c);
/* Close every session, client and handle; the loop then ends by itself. */
void server_stop(struct server *srv);

/* Queue a line (taken over, freed when written) to a client, after the
 * replies already queued. Closes the client instead when its unread output
 * would pass client_output_cap, or when the daemon's would pass
 * output_cap_total while this client holds more than CLIENT_OUT_LOW. 0 or an
 * error. */
int client_send(struct client *c, char *line);
/* Bytes sent to the client that it has not read yet (queued or in libuv). */
uint64_t client_unread(const struct client *c);
/* A reply stream's next frame is made only while the client has less than
 * this unread: a reader gets every frame, a client that stops reading holds
 * at most this much plus one frame. */
#define CLIENT_OUT_LOW (512 * 1024)

/* A reply produced one frame at a time (reply.c): its next frame is made when
 * the client has read the previous ones, so no request holds the loop for
 * longer than one frame takes. */
struct reply_src {
    struct ht_framer fr;
    /* Append the next item's JSON text to out (empty): 1 added, 0 no more
     * items, or an error (the reply then ends with an error envelope, err). */
    int (*item)(struct reply_src *r, struct ht_sbuf *out, char *err, size_t errsz);
    void (*free)(struct reply_src *r); /* frees r itself */
    struct ht_sbuf ahead;              /* the next item, made early: it says if more come */
    int done;
    const char *lead; /* JSON text of an item sent before the others (a CSV header), or NULL */
    uint64_t frames, bytes, slowest_ns; /* for the debug log: the loop's longest hold */
    uint64_t held; /* bytes the source holds (a query's rows): queued output until freed */
};
/* How a stream turns one row (or sample) into its item: 1 added to out, 0
 * skipped, or an error. NULL means the row's JSON itself. */
typedef int (*reply_fmt_fn)(const void *arg, const struct cJSON *row, uint32_t rank,
                            struct ht_sbuf *out);
/* Append row as the item fmt makes of it (see reply_fmt_fn). */
int reply_item_add(const struct cJSON *row, reply_fmt_fn fmt, const void *arg, uint32_t rank,
                   struct ht_sbuf *out);
/* Cut data's array arr (in data, or in its member outer) for r and queue r
 * to the client; data is freed. Returns 0 (an error was answered). */
int reply_start(struct cmd_ctx *ctx, struct reply_src *r, struct cJSON *data, struct cJSON *arr,
                struct cJSON *outer);
/* Queue a reply stream (taken over) after the client's other replies. */
void client_send_src(struct client *c, struct reply_src *r);
/* The next frame of r (*last = 1 when it is the last one, or an error
 * envelope ended it); NULL when out of memory. */
char *reply_src_next(struct reply_src *r, int *last);
void reply_src_free(struct reply_src *r);
/* The session a streamed reply reads from, or NULL with the message for a
 * session dropped while its reply was sent. */
struct session *reply_session(struct server *srv, uint32_t id, char *err, size_t errsz);
void client_close(struct client *c);
/* Stop / restart reading a client (a load stream waits for its feed). */
void client_pause(struct client *c);
void client_resume(struct client *c);
/* The most one read hands over: a paused loader resumes when its feed has this much room. */
#define CLIENT_READ_MAX 65536
/* Bytes read from a client: requests, or a load stream. */
void client_feed(struct client *c, const char *buf, size_t n);
/* Send a last line, then close once everything queued is written. */
void client_send_then_close(struct client *c, char *line);

/* Sessions (session.c). */
/* Whether a session named name (NULL or "": a generated one) may be created:
 * 0, HT_EFULL (every slot taken; err lists the sessions and how to free
 * one), HT_EBADARG (bad name) or HT_EEXIST. */
int session_admit(struct server *srv, const char *name, char *err, size_t errsz);
struct session *session_new(struct server *srv, const char *name, const char *source, char *err,
                            size_t errsz);
void session_drop(struct session *s);
void session_stop(struct session *s, const char *reason);
struct session *session_find(struct server *srv, const struct cJSON *ref);
/* Apply a source's events (source_sink.events); nonzero once the session stopped. */
int session_apply(void *arg, struct ht_event *evs, size_t n);
/* Open and start the session's source ops with p (its budget and limits are
 * filled in here): 0, or an error with a message in err and no source left. */
int session_source_begin(struct session *s, const struct source_ops *ops, struct source_params *p,
                         char *err, size_t errsz);
/* 1 while the source takes input (a stream being loaded). */
int session_taking_input(const struct session *s);
/* Refresh s->ingest from the source (no-op once it is closed). */
void session_stats_refresh(struct session *s);
/* Compute the default cull of stacks interned since the last call, off the query path. */
void session_warm(struct session *s);
/* The source's process name and wall time (source_sink.process). */
void session_process(void *arg, const struct source_process *p);
/* The .htev "process" line of the session (with its name) into buf; 0 if too small. */
size_t session_process_line(struct session *s, uint64_t t, char *buf, size_t cap);
void session_unsubscribe(struct session *s, struct client *c);
/* cond is "metric>value"; every (NULL, a string or a number) is checked in
 * the metric's unit. 0, or HT_EBADARG/HT_EFULL with a message in err. */
int session_add_trigger(struct session *s, const char *cond, int snapshot,
                        const struct cJSON *every, char *err, size_t errsz);
/* Every stop_when / snapshot_when of a request's args (with its every). */
int session_add_triggers(struct session *s, const struct cJSON *args, char *err, size_t errsz);
/* A snapshot trigger's next threshold after the value reached v: the first
 * step of every past v, computed in one division; UINT64_MAX (done) when
 * every is 0 or the step passes 64 bits. */
uint64_t trigger_next_after(uint64_t next, uint64_t every, uint64_t v);
void session_check_triggers(struct session *s);
/* The whole-session top stacks (default cull, sorted by outstanding) as reply
 * data, or NULL when out of memory. */
struct cJSON *session_top_json(struct session *s, int domain, uint32_t top);
/* Bytes, lines, events and the first malformed lines of the session's input. */
struct cJSON *session_ingest_json(struct session *s);
const char *session_state_name(enum session_state st);

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
void dispatch_request(struct client *c, const char *line, size_t len);
/* Nonzero if every command of the table has a handler. */
int dispatch_complete(void);

/* Handlers, one file each (cmd-*.c). */
int cmd_ping(struct cmd_ctx *ctx);
int cmd_version(struct cmd_ctx *ctx);
int cmd_start(struct cmd_ctx *ctx);
int cmd_run(struct cmd_ctx *ctx);
int cmd_load(struct cmd_ctx *ctx);
int cmd_record(struct cmd_ctx *ctx);
int cmd_ls(struct cmd_ctx *ctx);
int cmd_status(struct cmd_ctx *ctx);
int cmd_mark(struct cmd_ctx *ctx);
int cmd_stacks(struct cmd_ctx *ctx);
int cmd_commits(struct cmd_ctx *ctx);
int cmd_timeline(struct cmd_ctx *ctx);
int cmd_top(struct cmd_ctx *ctx);
int cmd_export(struct cmd_ctx *ctx);
int cmd_stop(struct cmd_ctx *ctx);
int cmd_drop(struct cmd_ctx *ctx);
int cmd_shutdown(struct cmd_ctx *ctx);

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
/* The length in a chunk header of n bytes (its newline excluded): decimal
 * digits only, no sign, space or leading zero, at most 4 MiB; a trailing CR
 * is allowed. 0, or HT_EBADARG. */
int chunk_length(const char *h, size_t n, uint64_t *len);
void load_stream_end(struct client *c, const char *why);
/* 1 when the loader's feed has less room than one read: stop reading it. */
int load_stream_full(const struct client *c);

/* Platform: endpoint preparation and peer admission (endpoint-*.c). */
int endpoint_prepare(const char *path, char *err, size_t errsz);
/* Bind the listener with the socket created 0660 (group heaptrace when root), no chmod by path. */
int endpoint_bind(uv_pipe_t *pipe, const char *path);
void endpoint_cleanup(const char *path);
/* 0 if the peer may talk to us (*uid = its uid); else HT_EPERM with who it was in err. */
int endpoint_admit(uv_pipe_t *pipe, uint32_t *uid, char *err, size_t errsz);
/* 0 while the process can still open a descriptor, else UV_EMFILE or UV_ENFILE. */
int endpoint_fd_headroom(uv_pipe_t *pipe);

#endif
