/* A connection on the control endpoint: its input modes, output queue and
 * subscription (server.c, reply.c, subscribe.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef CLIENT_H
#define CLIENT_H

#include "ht-proto.h"
#include "reply.h"
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
/* The output side's state, for the server's decisions (client.c): what the
 * client has not read, queued reply streams included; whether it is busy
 * (an answer being computed, or that backlog past half its output cap:
 * requests wait); whether it is answered (nothing queued, written or held). */
uint64_t client_backlog(const struct client *c);
int client_busy(const struct client *c);
int client_flushed(const struct client *c);
/* Move queued replies to libuv (one stream frame per call). */
void client_pump(struct client *c);
/* Drop every queued reply (the client closes). */
void client_out_clear(struct client *c);
/* A reply stream's next frame is made only while the client has less than
 * this unread: a reader gets every frame, a client that stops reading holds
 * at most this much plus one frame. */
#define CLIENT_OUT_LOW (512 * 1024)

/* Queue a reply stream (taken over) after the client's other replies. */
void client_send_src(struct client *c, struct reply_src *r);
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
