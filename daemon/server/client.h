/* A connection on the control endpoint: its input modes, output queue and
 * subscription (server.c, reply.c, subscribe.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef CLIENT_H
#define CLIENT_H

#include "ht-proto.h"
#include "session.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct cmd_ctx;
struct qjob;
struct server;

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
    /* Loop time (ms) it last moved: bytes read from it, or a write of ours
     * that went out; and libuv's write queue then (a long frame drains in
     * pieces). A client with output waiting that did not move for the idle
     * timeout is stalled (server.c). */
    uint64_t last_progress;
    size_t last_wq;
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
    uint64_t oq_held;  /* bytes the queued streams hold (reply_src.held) */
    uint32_t npending; /* places in the queue waiting for an answer (client_reserve) */
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
    struct session_sub sub;               /* in the session's subscriber list (record or top) */
    /* record: events of the gap not yet reported in the stream, and of all gaps. */
    uint64_t rec_lost, rec_lost_total;
    int rec_raw;        /* record --raw: the source's raw record lines, not .htev */
    uint64_t rec_lines; /* record --raw: lines sent */
    /* Queries of this client not answered yet (query-job.h), and top's refresh among them. */
    struct qjob *jobs;
    struct qjob *top_job;
};

/* A client on the server's list with its handles initialised (not yet
 * connected), or NULL when out of memory; client_start starts reading it once
 * its pipe is connected. */
struct client *client_new(struct server *srv);
void client_start(struct client *c);
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
    /* For the debug log: the loop's longest hold for one frame, wall time
     * and the loop thread's CPU time (the one a loaded host does not swell). */
    uint64_t frames, bytes, slowest_ns, slowest_cpu_ns;
    uint64_t held; /* bytes the source holds (a query's rows): queued output until freed */
};
/* How a stream turns one row (or sample) into its item: 1 added to out, 0
 * skipped, or an error. NULL means the row's JSON itself. */
typedef int (*reply_fmt_fn)(const void *arg, const struct cJSON *row, uint32_t rank,
                            struct ht_sbuf *out);
/* Append row as the item fmt makes of it (see reply_fmt_fn). */
int reply_item_add(const struct cJSON *row, reply_fmt_fn fmt, const void *arg, uint32_t rank,
                   struct ht_sbuf *out);
/* Cut data's array arr (in data, or in its member outer) for r, the reply
 * to request id; data is freed. 0, or HT_ENOMEM with r freed. */
int reply_src_ready(struct reply_src *r, int64_t id, struct cJSON *data, struct cJSON *arr,
                    struct cJSON *outer);
/* Cut data's array arr (in data, or in its member outer) for r and queue r
 * to the client; data is freed. Returns 0 (an error was answered). */
int reply_start(struct cmd_ctx *ctx, struct reply_src *r, struct cJSON *data, struct cJSON *arr,
                struct cJSON *outer);
/* Reply data (taken over) as a stream whose biggest array is cut into
 * frames, as cmd_reply sends it; NULL when out of memory. */
struct reply_src *reply_json_src(int64_t id, struct cJSON *data);
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
/* A place in the client's reply order for an answer that comes later (a
 * query on a worker): replies after it wait, and so do the client's next
 * requests. NULL when out of memory or closing. */
struct out_item *client_reserve(struct client *c);
/* Put the answer (a line or a stream, taken over) in its place. */
void client_fill(struct client *c, struct out_item *slot, char *line, struct reply_src *r);
/* Send a last line, then close once everything queued is written. */
void client_send_then_close(struct client *c, char *line);

/* Subscribe c to s (record: events = 1; top: 0), and end its subscription
 * (subscribe.c). The session tells it when it ends. */
void client_subscribe(struct client *c, struct session *s, int events);
/* record --raw (session_subscribe_raw): 0, or its error with err. A
 * recorder that joins a tap already on gets the stream's header line in
 * header (*hn bytes), to send after its acknowledgement (counted in
 * rec_lines by the caller). */
int client_subscribe_raw(struct client *c, struct session *s, char *header, size_t hcap, size_t *hn,
                         char *err, size_t errsz);
void client_unsubscribe(struct client *c);
static inline struct client *client_of_sub(struct session_sub *sub)
{
    return (struct client *)((char *)sub - offsetof(struct client, sub));
}

#endif
