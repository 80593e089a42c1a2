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

static void client_free_if_closed(struct client *c)
{
    if (--c->pending_closes > 0)
        return;
    ht_free(c->in);
    ht_free(c->after);
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
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->timer, client_handle_closed_cb);
    uv_close((uv_handle_t *)&c->pipe, client_handle_closed_cb);
}

static void write_cb(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct client *c = w->c;
    c->out_pending -= w->len;
    c->srv->out_queued -= w->len;
    atomic_store_explicit(&c->srv->mem.outside, c->srv->out_queued, memory_order_relaxed);
    if (status < 0 && status != UV_ECANCELED)
        log_debug("client %llu: write failed: %s", (unsigned long long)c->id, uv_strerror(status));
    ht_free(w->line);
    ht_free(w);
    if (c->out_pending == 0 && c->close_when_flushed)
        client_close(c);
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
    if (c->out_pending + len > c->srv->cfg->client_output_cap) {
        /* The client does not read: drop it rather than grow without bound. */
        log_warn("client %llu: %llu bytes unread, over the %llu byte cap: disconnected",
                 (unsigned long long)c->id, (unsigned long long)c->out_pending,
                 (unsigned long long)c->srv->cfg->client_output_cap);
        c->srv->clients_dropped_slow++;
        ht_free(line);
        client_close(c);
        return UV_ENOBUFS;
    }
    struct write_req *w = ht_malloc(sizeof(*w));
    if (!w) {
        ht_free(line);
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
    /* Queued output counts in the daemon-wide budget that sessions grow against. */
    atomic_store_explicit(&c->srv->mem.outside, c->srv->out_queued, memory_order_relaxed);
    return 0;
}

void client_send_then_close(struct client *c, char *line)
{
    c->close_when_flushed = 1;
    if (client_send(c, line) == 0 && c->out_pending == 0)
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
    if (c->paused && !c->closing) {
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
    } else if (nread < 0)
        client_close(c); /* EOF or error; a partial line is dropped with the client */
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
    mem_budget_init(&srv->mem, NULL, cfg->daemon_memory_budget);
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
