/* The control endpoint: accept, admit, read lines (or load streams), write with a cap. */
#include "server.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>


struct write_req {
    uv_write_t req;
    struct client *c;
    char *line;
    size_t len;
};

/* A queued reply: a line, or a stream that makes its frames when asked. */
struct out_item {
    struct out_item *next;
    char *line;
    size_t len;
    struct reply_src *src;
};

static void out_queue_clear(struct client *c);

static void client_free_if_closed(struct client *c)
{
    if (--c->pending_closes > 0)
        return;
    ht_free(c->in);
    ht_free(c->after);
    ht_free(c->held);
    ht_free(c);
}

static void client_handle_closed_cb(uv_handle_t *h)
{
    client_free_if_closed(h->data);
}

void client_close(struct client *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    struct server *srv = c->srv;
    if (c->loading)
        load_stream_end(c, "client disconnected during load");
    if (c->recording)
        session_unsubscribe(c->recording, c);
    if (c->topping)
        session_unsubscribe(c->topping, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nclients--;
    out_queue_clear(c);
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->timer, client_handle_closed_cb);
    uv_close((uv_handle_t *)&c->pipe, client_handle_closed_cb);
}

uint64_t client_unread(const struct client *c)
{
    return c->out_pending + c->oq_bytes;
}

static int client_idle(const struct client *c)
{
    return !c->oq_head && c->out_pending == 0 && c->held_len == 0;
}

/* Requests wait while the client has replies queued or a backlog: they are
 * answered in order, and a client cannot pile up work it does not read. */
static int client_busy(const struct client *c)
{
    return c->oq_head || c->out_pending >= CLIENT_OUT_LOW;
}

static void write_cb(uv_write_t *req, int status);

/* Hand a line to libuv; it counts as unread until its write completes. */
static int write_line(struct client *c, char *line, size_t len)
{
    struct write_req *w = ht_malloc(sizeof(*w));
    if (!w) {
        ht_free(line);
        client_close(c);
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
        client_close(c);
        return rc;
    }
    c->out_pending += len;
    c->srv->out_queued += len;
    return 0;
}

/* Move queued replies to libuv: lines at once (they were counted when
 * queued), a stream's next frame only while the client has read all but
 * CLIENT_OUT_LOW of what it was sent, and one frame per call: each written
 * frame asks for the next, so other clients get the loop in between. */
static void client_pump(struct client *c)
{
    int framed = 0;
    while (!c->closing && c->oq_head &&
           (c->oq_head->line || (!framed && c->out_pending < CLIENT_OUT_LOW))) {
        struct out_item *it = c->oq_head;
        char *line = it->line;
        int last = 1;
        if (!line)
            framed = 1;
        if (line) {
            c->oq_bytes -= it->len;
            c->srv->out_queued -= it->len;
        } else {
            line = reply_src_next(it->src, &last);
        }
        if (last) {
            c->oq_head = it->next;
            if (!c->oq_head)
                c->oq_tail = NULL;
            if (it->src && it->src->frames > 1)
                log_debug("client %llu: reply sent as %llu frames, %llu bytes, slowest frame "
                          "%.2f ms",
                          (unsigned long long)c->id, (unsigned long long)it->src->frames,
                          (unsigned long long)it->src->bytes, (double)it->src->slowest_ns / 1e6);
            if (it->src)
                reply_src_free(it->src);
            ht_free(it);
        }
        if (!line) {
            log_warn("client %llu: out of memory making a reply frame: disconnected",
                     (unsigned long long)c->id);
            client_close(c);
            return;
        }
        write_line(c, line, strlen(line));
    }
}

static void out_queue_clear(struct client *c)
{
    while (c->oq_head) {
        struct out_item *it = c->oq_head;
        c->oq_head = it->next;
        if (it->line) {
            c->srv->out_queued -= it->len;
            ht_free(it->line);
        }
        if (it->src)
            reply_src_free(it->src);
        ht_free(it);
    }
    c->oq_tail = NULL;
    c->oq_bytes = 0;
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

/* Requests read while the client was busy run now, in order. */
static void client_release_held(struct client *c)
{
    char *held = c->held;
    size_t n = c->held_len;
    c->held = NULL;
    c->held_len = 0;
    client_feed(c, held, n);
    ht_free(held);
    if (c->closing || c->held_len || c->eof)
        return;
    if (c->mode == CLIENT_LINES || c->mode == CLIENT_SKIP ||
        (c->mode == CLIENT_STREAM && !load_stream_full(c)))
        client_resume(c);
}

/* Output moved on: more frames, held requests, or the end of a client that
 * is done (half-closed and answered, or closing once flushed). */
static void client_output_moved(struct client *c)
{
    client_pump(c);
    if (!c->closing && c->held_len && !client_busy(c))
        client_release_held(c);
    if (c->closing || !client_idle(c))
        return;
    if (c->close_when_flushed ||
        (c->eof && !c->recording && !c->topping && !c->loading && c->mode != CLIENT_STREAM))
        client_close(c);
}

static void write_cb(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct client *c = w->c;
    c->out_pending -= w->len;
    c->srv->out_queued -= w->len;
    ht_free(w->line);
    ht_free(w);
    if (status < 0) {
        /* The client is gone: nothing more it was sent can arrive. */
        if (status != UV_ECANCELED) {
            log_debug("client %llu: write failed: %s", (unsigned long long)c->id,
                      uv_strerror(status));
            client_close(c);
        }
        return;
    }
    if (!c->closing)
        client_output_moved(c);
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
        client_close(c);
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
    c->srv->out_queued += len;
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
    out_queue_push(c, it);
    client_pump(c);
}

void client_send_then_close(struct client *c, char *line)
{
    c->close_when_flushed = 1;
    if (client_send(c, line) == 0 && client_idle(c))
        client_close(c);
}

/* One read buffer for every client: the loop is single-threaded and each read
 * is consumed before the next one is allocated, so the buffer is reused and
 * stays in cache (libuv's own advice for many connections). */
static char read_buf[CLIENT_READ_MAX];

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    buf->base = read_buf;
    buf->len = sizeof(read_buf);
}

/* Keep the rest of what was read until the client's replies drained; stop
 * reading it meanwhile (its requests wait in the socket). */
static void client_hold(struct client *c, const char *buf, size_t n)
{
    char *nb = ht_realloc(c->held, c->held_len + n);
    if (!nb) {
        log_warn("client %llu: out of memory holding its requests: disconnected",
                 (unsigned long long)c->id);
        client_close(c);
        return;
    }
    memcpy(nb + c->held_len, buf, n);
    c->held = nb;
    c->held_len += n;
    client_pause(c);
}

/* Line mode: complete requests are dispatched; an over-long line is refused
 * with ETOOBIG and skipped up to its newline, and the client stays. */
void client_feed(struct client *c, const char *buf, size_t n)
{
    while (n > 0 && !c->closing) {
        if (c->mode == CLIENT_STREAM || c->mode == CLIENT_DRAINING) {
            load_stream_bytes(c, buf, n);
            return;
        }
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) + 1 : n;
        if (nl && c->mode == CLIENT_LINES && client_busy(c)) {
            client_hold(c, buf, n);
            return;
        }
        if (c->mode == CLIENT_SKIP) {
            if (nl)
                c->mode = CLIENT_LINES;
        } else if (c->in_len + take > HT_REQUEST_MAX) {
            client_send(c, ht_reply_err(0, HT_ETOOBIG, "request line over 64 KiB: refused"));
            c->srv->request_errors++;
            c->in_len = 0;
            c->mode = nl ? CLIENT_LINES : CLIENT_SKIP;
        } else if (c->in_len == 0 && nl) {
            dispatch_request(c, buf, take - 1);
        } else {
            memcpy(c->in + c->in_len, buf, take);
            c->in_len += take;
            if (nl) {
                size_t len = c->in_len - 1;
                c->in_len = 0;
                dispatch_request(c, c->in, len);
            }
        }
        buf += take;
        n -= take;
    }
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

void client_pause(struct client *c)
{
    if (!c->paused && !c->closing) {
        c->paused = 1;
        uv_read_stop((uv_stream_t *)&c->pipe);
    }
}

void client_resume(struct client *c)
{
    /* Held requests go first; a half-closed client has nothing more to read. */
    if (c->paused && !c->closing && !c->held_len && !c->eof) {
        c->paused = 0;
        uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
    }
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct client *c = stream->data;
    if (nread > 0) {
        client_feed(c, buf->base, (size_t)nread);
        /* A load stream waits while its feed has less room than one read. */
        if (c->mode == CLIENT_STREAM && !c->closing && load_stream_full(c))
            client_pause(c);
    } else if (nread == UV_EOF && c->mode != CLIENT_STREAM) {
        /* Half-closed (shutdown(SHUT_WR), socat, nc -N): every complete
         * request is answered and flushed first; a partial line is dropped. */
        c->eof = 1;
        uv_read_stop(stream);
        client_output_moved(c);
    } else if (nread < 0) {
        client_close(c); /* error, or EOF in the middle of a load stream */
    }
    (void)buf;
}

static void connection_cb(uv_stream_t *server, int status)
{
    struct server *srv = server->data;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    struct client *c = ht_calloc(1, sizeof(*c));
    if (!c || !(c->in = ht_malloc(HT_REQUEST_MAX + 64))) {
        ht_free(c);
        log_error("out of memory accepting a client");
        return;
    }
    c->srv = srv;
    c->id = ++srv->next_client_id;
    uv_pipe_init(srv->loop, &c->pipe, 0);
    uv_timer_init(srv->loop, &c->timer);
    c->pipe.data = c;
    c->timer.data = c;
    c->next = srv->clients;
    if (srv->clients)
        srv->clients->prev = c;
    srv->clients = c;
    srv->nclients++;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0) {
        client_close(c);
        return;
    }
    char why[160];
    if (endpoint_admit(&c->pipe, why, sizeof(why)) != 0) {
        log_warn("refused a client: %s", why);
        srv->clients_refused++;
        client_send_then_close(c, ht_reply_err(0, HT_EPERM, why));
        return;
    }
    if (srv->nclients > srv->cfg->max_clients) {
        srv->clients_refused++;
        client_send_then_close(c, ht_reply_err(0, HT_EFULL, "too many clients"));
        return;
    }
    uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
}

static void signal_cb(uv_signal_t *h, int signum)
{
    struct server *srv = h->data;
    if (signum == SIGPIPE)
        return;
    log_info("signal %d: shutting down", signum);
    server_stop(srv);
}

static void tick_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    /* Triggers are also checked once a second, not only when events come.
     * Replayed streams keep their own clock (the stream's times). */
    for (struct session *s = srv->sessions; s; s = s->next)
        session_check_triggers(s);
}

int server_start(struct server *srv, uv_loop_t *loop, struct ht_config *cfg)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = cfg;
    char err[256];
    int rc = endpoint_prepare(cfg->endpoint, err, sizeof(err));
    if (rc != 0) {
        log_error("%s", err);
        return rc;
    }
    uv_pipe_init(loop, &srv->listener, 0);
    srv->listener.data = srv;
    rc = uv_pipe_bind(&srv->listener, cfg->endpoint);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, 128, connection_cb);
    if (rc != 0) {
        log_error("cannot listen on %s: %s", cfg->endpoint, uv_strerror(rc));
        uv_close((uv_handle_t *)&srv->listener, NULL);
        return rc;
    }
    srv->listening = 1;
    endpoint_secure(cfg->endpoint);
    uv_signal_init(loop, &srv->sigint);
    uv_signal_init(loop, &srv->sigterm);
    uv_signal_init(loop, &srv->sigpipe);
    srv->sigint.data = srv->sigterm.data = srv->sigpipe.data = srv;
    uv_signal_start(&srv->sigint, signal_cb, SIGINT);
    uv_signal_start(&srv->sigterm, signal_cb, SIGTERM);
    uv_signal_start(&srv->sigpipe, signal_cb, SIGPIPE);
    uv_timer_init(loop, &srv->tick);
    srv->tick.data = srv;
    uv_timer_start(&srv->tick, tick_cb, 1000, 1000);
    log_info("listening on %s", cfg->endpoint);
    return 0;
}

void server_stop(struct server *srv)
{
    if (srv->stopping)
        return;
    srv->stopping = 1;
    while (srv->clients)
        client_close(srv->clients);
    while (srv->sessions)
        session_drop(srv->sessions);
    if (srv->listening) {
        uv_close((uv_handle_t *)&srv->listener, NULL);
        endpoint_cleanup(srv->cfg->endpoint);
        srv->listening = 0;
    }
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sigpipe, NULL);
    uv_close((uv_handle_t *)&srv->tick, NULL);
}
