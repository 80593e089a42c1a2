/* A client's output: replies queued in order (lines, streams, places of
 * answers still computed), written with a cap on what it leaves unread
 * (client.h). The server is called back to close a client or when output
 * moved on (struct server close_client, output_moved). */
#include "client.h"

#include "server-state.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct write_req {
    uv_write_t req;
    struct client *c;
    char *line;
    size_t len;
};

/* A queued reply: a line, a stream that makes its frames when asked, or
 * (pending) the place of an answer still being computed. */
struct out_item {
    struct out_item *next;
    char *line;
    size_t len;
    struct reply_src *src;
    int pending;
};


/* Bytes queued to all clients also count in the daemon-wide memory budget
 * that sessions grow against (read there from the decoder threads). */
static void out_queued_add(struct server *srv, int64_t delta)
{
    srv->out_queued += (uint64_t)delta;
    atomic_store_explicit(&srv->mem.outside, srv->out_queued, memory_order_relaxed);
}

uint64_t client_unread(const struct client *c)
{
    return c->out_pending + c->oq_bytes;
}

/* Nothing queued, being written or held: the client is answered. */
int client_flushed(const struct client *c)
{
    return !c->oq_head && c->out_pending == 0 && c->held_len == 0;
}

/* What the client has not read: its unread bytes and what its queued
 * reply streams hold (a query's rows) until their last frame. */
uint64_t client_backlog(const struct client *c)
{
    return client_unread(c) + c->oq_held;
}

/* Requests wait while an answer of the client's is still being computed
 * (one query at a time per client), or while its backlog is past half its
 * output cap. Else they are read and answered in order: a client that
 * writes many requests before it reads its replies (20,000 pings, 800 KB,
 * in one write) would block in that write while the daemon waited for it
 * to read, both forever. One that never reads stops being read with a
 * bounded backlog, and is closed once stalled for the idle timeout. */
int client_busy(const struct client *c)
{
    return c->npending || client_backlog(c) >= c->srv->cfg->client_output_cap / 2;
}

static void write_cb(uv_write_t *req, int status);

/* Hand a line to libuv; it counts as unread until its write completes. */
static int write_line(struct client *c, char *line, size_t len)
{
    struct write_req *w = ht_malloc(sizeof(*w));
    if (!w) {
        ht_free(line);
        c->srv->close_client(c);
        return HT_ENOMEM;
    }
    w->c = c;
    w->line = line;
    w->len = len;
    uv_buf_t buf = uv_buf_init(line, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, write_cb);
    if (rc < 0) {
        ht_free(line);
        ht_free(w);
        c->srv->close_client(c);
        return rc;
    }
    c->out_pending += len;
    out_queued_add(c->srv, (int64_t)len);
    return 0;
}

/* Move queued replies to libuv: lines at once (they were counted when
 * queued), a stream's next frame only while the client has read all but
 * CLIENT_OUT_LOW of what it was sent, and one frame per call: each written
 * frame asks for the next, so other clients get the loop in between. */
void client_pump(struct client *c)
{
    int framed = 0;
    while (!c->closing && c->oq_head && !c->oq_head->pending &&
           (c->oq_head->line || (!framed && c->out_pending < CLIENT_OUT_LOW))) {
        struct out_item *it = c->oq_head;
        char *line = it->line;
        size_t len = it->len;
        int last = 1;
        if (!line)
            framed = 1;
        if (line) {
            c->oq_bytes -= it->len;
            out_queued_add(c->srv, -(int64_t)(it->len));
        } else {
            line = reply_src_next(it->src, &len, &last);
        }
        if (last) {
            c->oq_head = it->next;
            if (!c->oq_head)
                c->oq_tail = NULL;
            if (it->src && it->src->frames > 1)
                log_debug("client %llu: reply sent as %llu frames, %llu bytes, slowest frame "
                          "%.2f ms (loop CPU %.2f ms)",
                          (unsigned long long)c->id, (unsigned long long)it->src->frames,
                          (unsigned long long)it->src->bytes, (double)it->src->slowest_ns / 1e6,
                          (double)it->src->slowest_cpu_ns / 1e6);
            if (it->src) {
                out_queued_add(c->srv, -(int64_t)it->src->held);
                c->oq_held -= it->src->held;
                reply_src_free(it->src);
            }
            ht_free(it);
        }
        if (!line) {
            log_warn("client %llu: out of memory making a reply frame: disconnected",
                     (unsigned long long)c->id);
            c->srv->close_client(c);
            return;
        }
        write_line(c, line, len); /* a frame of bytes (reply_bytes_src) is no C string */
    }
}

void client_out_clear(struct client *c)
{
    while (c->oq_head) {
        struct out_item *it = c->oq_head;
        c->oq_head = it->next;
        if (it->line) {
            out_queued_add(c->srv, -(int64_t)(it->len));
            ht_free(it->line);
        }
        if (it->src) {
            out_queued_add(c->srv, -(int64_t)it->src->held);
            reply_src_free(it->src);
        }
        ht_free(it);
    }
    c->oq_tail = NULL;
    c->oq_bytes = 0;
    c->oq_held = 0;
    c->npending = 0;
}

static void out_queue_push(struct client *c, struct out_item *it)
{
    it->next = NULL;
    if (c->oq_tail)
        c->oq_tail->next = it;
    else
        c->oq_head = it;
    c->oq_tail = it;
}

static void write_cb(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct client *c = w->c;
    c->out_pending -= w->len;
    c->last_progress = uv_now(c->srv->loop);
    out_queued_add(c->srv, -(int64_t)(w->len));
    ht_free(w->line);
    ht_free(w);
    if (status < 0) {
        /* The client is gone: nothing more it was sent can arrive. */
        if (status != UV_ECANCELED) {
            log_debug("client %llu: write failed: %s", (unsigned long long)c->id,
                      uv_strerror(status));
            c->srv->close_client(c);
        }
        return;
    }
    if (!c->closing)
        c->srv->output_moved(c);
}

/* Unread output past a cap: the client does not read, drop it rather than grow. */
static int client_over_cap(struct client *c, size_t len)
{
    const struct ht_config *cfg = c->srv->cfg;
    uint64_t unread = client_unread(c);
    if (unread + len > cfg->client_output_cap) {
        log_warn("client %llu: %llu bytes unread, over the %llu byte cap: disconnected",
                 (unsigned long long)c->id, (unsigned long long)unread,
                 (unsigned long long)cfg->client_output_cap);
        c->srv->clients_dropped_slow++;
        return 1;
    }
    /* A reader holds at most CLIENT_OUT_LOW and a frame: it is never the one dropped. */
    if (c->srv->out_queued + len > cfg->output_cap_total && unread > CLIENT_OUT_LOW) {
        log_warn("client %llu: %llu bytes unread while the daemon holds %llu, over "
                 "output_cap_total (%llu): disconnected",
                 (unsigned long long)c->id, (unsigned long long)unread,
                 (unsigned long long)c->srv->out_queued, (unsigned long long)cfg->output_cap_total);
        c->srv->clients_dropped_output_total++;
        return 1;
    }
    return 0;
}

int client_send(struct client *c, char *line)
{
    if (!line)
        return HT_ENOMEM;
    if (c->closing) {
        ht_free(line);
        return UV_EPIPE;
    }
    size_t len = strlen(line);
    if (client_over_cap(c, len)) {
        ht_free(line);
        c->srv->close_client(c);
        return UV_ENOBUFS;
    }
    if (!c->oq_head)
        return write_line(c, line, len);
    struct out_item *it = ht_calloc(1, sizeof(*it));
    if (!it) {
        ht_free(line);
        return HT_ENOMEM;
    }
    it->line = line;
    it->len = len;
    c->oq_bytes += len;
    out_queued_add(c->srv, (int64_t)(len));
    out_queue_push(c, it);
    return 0;
}

/* The stream it (not queued yet) waits behind other replies: its first
 * frame is made now and queued as a line before it, or in its place when
 * that was the last, so what a pipelining client has not read is counted
 * bytes (client_backlog), not streams of unknown size; the other frames of a
 * longer reply are made as the client reads. 0, or an error (c closed, it
 * freed). */
static int queue_first_frame(struct client *c, struct out_item *it)
{
    int last = 1;
    size_t len = 0;
    char *line = reply_src_next(it->src, &len, &last);
    struct out_item *li = !line ? NULL : last ? it : ht_calloc(1, sizeof(*li));
    if (!li) {
        log_warn("client %llu: out of memory making a reply frame: disconnected",
                 (unsigned long long)c->id);
        ht_free(line);
        out_queued_add(c->srv, -(int64_t)it->src->held);
        c->oq_held -= it->src->held;
        reply_src_free(it->src);
        ht_free(it);
        c->srv->close_client(c);
        return HT_ENOMEM;
    }
    if (last) {
        out_queued_add(c->srv, -(int64_t)it->src->held);
        c->oq_held -= it->src->held;
        reply_src_free(it->src);
        it->src = NULL;
    }
    li->line = line;
    li->len = len;
    c->oq_bytes += li->len;
    out_queued_add(c->srv, (int64_t)li->len);
    out_queue_push(c, li);
    if (!last)
        out_queue_push(c, it);
    return 0;
}

void client_send_src(struct client *c, struct reply_src *r)
{
    struct out_item *it = c->closing ? NULL : ht_calloc(1, sizeof(*it));
    if (!it) {
        reply_src_free(r);
        return;
    }
    it->src = r;
    /* What the stream holds until its last frame (10k rows: 1.2 MiB) counts
     * in the daemon's budget like its queued bytes: 200 clients that never
     * read a stacks reply held 250 MB that no budget saw. */
    out_queued_add(c->srv, (int64_t)r->held);
    c->oq_held += r->held;
    if (c->oq_head || c->out_pending >= CLIENT_OUT_LOW) {
        if (queue_first_frame(c, it) != 0)
            return;
    } else {
        out_queue_push(c, it);
    }
    client_pump(c);
}

struct out_item *client_reserve(struct client *c)
{
    struct out_item *it = c->closing ? NULL : ht_calloc(1, sizeof(*it));
    if (!it)
        return NULL;
    it->pending = 1;
    c->npending++;
    out_queue_push(c, it);
    return it;
}

void client_fill(struct client *c, struct out_item *it, char *line, struct reply_src *r)
{
    it->pending = 0;
    c->npending--;
    if (line) {
        it->line = line;
        it->len = strlen(line);
        c->oq_bytes += it->len;
        out_queued_add(c->srv, (int64_t)it->len);
    } else {
        it->src = r;
        out_queued_add(c->srv, (int64_t)r->held);
        c->oq_held += r->held;
    }
    /* Written if it is first in line; held requests may run now. */
    c->srv->output_moved(c);
}

void client_send_then_close(struct client *c, char *line)
{
    c->close_when_flushed = 1;
    if (client_send(c, line) == 0 && client_flushed(c))
        c->srv->close_client(c);
}
