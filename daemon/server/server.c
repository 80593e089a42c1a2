/* The control endpoint: accept, admit, read lines (or load streams), write with a cap. */
#include "server.h"

#include "commands.h"
#include "endpoint.h"
#include "query-job.h"
#include "sys/stop.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        client_unsubscribe(c);
    if (c->topping)
        client_unsubscribe(c);
    qjob_client_gone(c); /* before its queue goes: the jobs point at their places */
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nclients--;
    client_out_clear(c);
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->timer, client_handle_closed_cb);
    uv_close((uv_handle_t *)&c->pipe, client_handle_closed_cb);
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
    if (c->closing || !client_flushed(c))
        return;
    if (c->close_when_flushed ||
        (c->eof && !c->recording && !c->topping && !c->loading && c->mode != CLIENT_STREAM))
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
            c->last_request = uv_now(c->srv->loop);
            dispatch_request(c, buf, take - 1);
        } else {
            memcpy(c->in + c->in_len, buf, take);
            c->in_len += take;
            if (nl) {
                size_t len = c->in_len - 1;
                c->in_len = 0;
                c->last_request = uv_now(c->srv->loop);
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
        c->last_progress = uv_now(c->srv->loop);
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

/* How many connections uid holds (the list is at most max_clients long). */
static uint32_t clients_of_uid(const struct server *srv, uint32_t uid)
{
    uint32_t n = 0;
    for (const struct client *c = srv->clients; c; c = c->next)
        n += !c->closing && c->uid == uid;
    return n;
}

/* Which slot limit keeps the new client c out (it is counted already): root
 * may take every slot, other users all but root_clients, and at most
 * max_clients_per_uid each, so idle connections of one user lock out no one
 * else. 0, or the error with a message in why. */
static int client_limit(struct server *srv, const struct client *c, char *why, size_t n)
{
    const struct ht_config *cfg = srv->cfg;
    if (srv->nclients > cfg->max_clients) {
        srv->clients_refused_full++;
        snprintf(why, n, "too many clients: all %u slots are taken", cfg->max_clients);
        return HT_EFULL;
    }
    if (c->uid == 0)
        return 0;
    if (srv->nclients > cfg->max_clients - cfg->root_clients) {
        srv->clients_refused_full++;
        snprintf(why, n, "too many clients: the %u slots open to non-root users are taken",
                 cfg->max_clients - cfg->root_clients);
        return HT_EFULL;
    }
    uint32_t mine = clients_of_uid(srv, c->uid);
    if (mine > cfg->max_clients_per_uid) {
        srv->clients_refused_uid++;
        snprintf(why, n,
                 "too many clients: uid %u holds %u connections already, the most one user "
                 "may (max_clients_per_uid)",
                 c->uid, mine - 1);
        return HT_EFULL;
    }
    return 0;
}

/* Accept failed in the endpoint: on EMFILE/ENFILE libuv itself accepts and
 * closes the waiting connections with a reserved descriptor (uv__emfile_trick
 * in src/unix/stream.c), so they are gone without a word; count and log it.
 * client_admit keeps a descriptor free so this stays the exception. */
static void accept_failed(struct server *srv, int status)
{
    srv->accept_errors++;
    log_warn("accept: %s (clients waiting were closed; %llu accept errors so far)",
             uv_strerror(status), (unsigned long long)srv->accept_errors);
}

/* Refuse a new client: its error line goes out at once (a short line into a
 * fresh socket's empty buffer) and the connection is closed now, so refused
 * clients hold neither a slot nor a descriptor while libuv accepts the next
 * ones in the same loop turn (uv_close closes the descriptor at once). */
static void client_refuse(struct client *c, int err, const char *why)
{
    char *line = ht_reply_err(0, err, why);
    if (line) {
        size_t len = strlen(line);
        if (endpoint_try_write(&c->pipe, line, len) < (int)len)
            log_debug("client %llu: the refusal did not fit its socket", (unsigned long long)c->id);
        ht_free(line);
    }
    client_close(c);
}

/* Admission of an accepted client: descriptors left, credentials, slots. */
static void client_admit(struct server *srv, struct client *c)
{
    char why[160];
    /* The newest client took the last descriptor: tell it and close it, so
     * the next accept has one and the daemon serves again as soon as
     * descriptors free up. */
    int rc = endpoint_headroom(&c->pipe);
    if (rc != 0) {
        srv->clients_refused_nofd++;
        log_warn("client %llu refused: %s (%llu refused for want of descriptors)",
                 (unsigned long long)c->id, uv_strerror(rc),
                 (unsigned long long)srv->clients_refused_nofd);
        client_refuse(c, rc, "the daemon is out of file descriptors: try again later");
        return;
    }
    if (endpoint_admit(&c->pipe, &c->uid, why, sizeof(why)) != 0) {
        log_warn("refused a client: %s", why);
        srv->clients_refused++;
        client_refuse(c, HT_EPERM, why);
        return;
    }
    if ((rc = client_limit(srv, c, why, sizeof(why))) != 0) {
        log_debug("client %llu (uid %u) refused: %s", (unsigned long long)c->id, c->uid, why);
        client_refuse(c, rc, why);
        return;
    }
    client_start(c);
}

struct client *client_new(struct server *srv)
{
#ifdef HEAPTRACE_TEST_KNOBS
    if (srv->test_fail_clients > 0) {
        srv->test_fail_clients--;
        return NULL;
    }
#endif
    struct client *c = ht_calloc(1, sizeof(*c));
    if (!c || !(c->in = ht_malloc(HT_REQUEST_MAX + 64))) {
        ht_free(c);
        return NULL;
    }
    c->srv = srv;
    c->id = ++srv->next_client_id;
    c->uid = UINT32_MAX; /* unknown until admitted */
    c->last_request = c->last_progress = uv_now(srv->loop);
    uv_pipe_init(srv->loop, &c->pipe, 0);
    uv_timer_init(srv->loop, &c->timer);
    c->pipe.data = c;
    c->timer.data = c;
    c->next = srv->clients;
    if (srv->clients)
        srv->clients->prev = c;
    srv->clients = c;
    srv->nclients++;
    return c;
}

void client_start(struct client *c)
{
    uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
}

static void refuse_nomem(struct server *srv);

static void nomem_pipe_closed(uv_handle_t *h)
{
    struct server *srv = h->data;
    srv->nomem_pipe_busy = 0;
    if (srv->nomem_waiting) {
        srv->nomem_waiting = 0;
        refuse_nomem(srv);
    }
}

/* No memory for a client: the waiting connection is still taken off the
 * listener (into the spare handle) and closed at once, so the endpoint keeps
 * listening and the next client is served when memory is back. A second one
 * in the same loop turn waits for the spare's close (this turn's close
 * phase): libuv stops watching the listener until it is taken, so at most
 * one waits. */
static void refuse_nomem(struct server *srv)
{
    if (srv->nomem_pipe_busy) {
        srv->nomem_waiting = 1;
        return;
    }
    srv->clients_refused_nomem++;
    log_error("out of memory accepting a client: connection closed (%llu so far)",
              (unsigned long long)srv->clients_refused_nomem);
    uv_pipe_init(srv->loop, &srv->nomem_pipe, 0);
    srv->nomem_pipe.data = srv;
    srv->nomem_pipe_busy = 1;
    if (endpoint_accept(srv->ep, &srv->nomem_pipe) != 0) {
        log_warn("accepting the refused client failed too");
    } else {
        /* Its error line, made without allocating (into a fresh connection's
         * empty buffer, as client_refuse does). */
        char line[160];
        int n = snprintf(line, sizeof(line),
                         "{\"v\":%d,\"id\":0,\"ok\":false,\"err\":\"%s\",\"msg\":\"the daemon is "
                         "out of memory: try again later\"}\n",
                         HT_PROTO_VERSION, ht_err_code(UV_ENOMEM));
        if (endpoint_try_write(&srv->nomem_pipe, line, (size_t)n) < n)
            log_debug("the out-of-memory refusal did not fit its connection");
    }
    uv_close((uv_handle_t *)&srv->nomem_pipe, nomem_pipe_closed);
}

static void connection_cb(void *arg, int status)
{
    struct server *srv = arg;
    if (status < 0) {
        accept_failed(srv, status);
        return;
    }
    struct client *c = client_new(srv);
    if (!c) {
        refuse_nomem(srv);
        return;
    }
    if (endpoint_accept(srv->ep, &c->pipe) != 0) {
        client_close(c);
        return;
    }
    client_admit(srv, c);
}

/* A client waiting for nothing (no load, subscription or output) that sent
 * no complete request for client_idle_ns holds a slot for nothing: closed,
 * with a line saying why. */
static int client_idle_expired(const struct client *c, uint64_t now, uint64_t idle_ms)
{
    if (c->closing || c->close_when_flushed || c->loading || c->recording || c->topping ||
        !client_flushed(c) || c->mode == CLIENT_STREAM || c->mode == CLIENT_DRAINING)
        return 0;
    return now - c->last_request >= idle_ms;
}

/* A client with output waiting in libuv that neither read any of it nor
 * sent a byte for idle_ms: it does not read and we no longer read it (its
 * backlog is full), so it would hold its slot forever. Its write queue
 * shrinking counts as reading (a long frame goes out in pieces). */
static int client_stalled(struct client *c, uint64_t now, uint64_t idle_ms)
{
    if (c->closing || c->out_pending == 0)
        return 0;
    size_t wq = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
    if (wq != c->last_wq) {
        c->last_wq = wq;
        c->last_progress = now;
    }
    return now - c->last_progress >= idle_ms;
}

/* Closed at once: a line saying why could not reach it. What it was not
 * sent, and the requests read from it that wait unanswered, are counted
 * (version: clients.closed_stalled, stalled_unread_bytes,
 * stalled_requests_unanswered). */
static void client_close_stalled(struct client *c, uint64_t now)
{
    struct server *srv = c->srv;
    uint64_t unread = client_backlog(c), waiting = 0;
    for (size_t i = 0; i < c->held_len; i++)
        waiting += c->held[i] == '\n';
    srv->clients_closed_stalled++;
    srv->stalled_unread_bytes += unread;
    srv->stalled_requests += waiting;
    log_warn("client %llu: read nothing and sent nothing for %llu ms with %llu bytes of replies "
             "unread and %llu requests read but not answered: closed as stalled",
             (unsigned long long)c->id, (unsigned long long)(now - c->last_progress),
             (unsigned long long)unread, (unsigned long long)waiting);
    client_close(c);
}

static void idle_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    uint64_t now = uv_now(srv->loop), idle_ms = srv->cfg->client_idle_ns / 1000000;
    for (struct client *c = srv->clients, *next; c; c = next) {
        next = c->next;
        if (client_stalled(c, now, idle_ms)) {
            client_close_stalled(c, now);
            continue;
        }
        if (!client_idle_expired(c, now, idle_ms))
            continue;
        srv->clients_idle_closed++;
        log_debug("client %llu: no request for %llu ms: closed", (unsigned long long)c->id,
                  (unsigned long long)(now - c->last_request));
        char why[96];
        snprintf(why, sizeof(why), "no complete request for %llu ms: connection closed",
                 (unsigned long long)idle_ms);
        client_send_then_close(c, ht_reply_err(0, UV_ETIMEDOUT, why));
    }
}

static void stop_requested_cb(void *arg, const char *why)
{
    log_info("%s: shutting down", why);
    server_stop(arg);
}

static void tick_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    /* Triggers are also checked once a second, not only when events come.
     * Replayed streams keep their own clock (the stream's times). */
    for (struct session *s = srv->sessions.head; s; s = session_next(s))
        session_check_triggers(s);
}

void server_init(struct server *srv, uv_loop_t *loop, struct ht_config *cfg)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = cfg;
    mem_budget_init(&srv->mem, NULL, cfg->daemon_memory_budget);
    srv->close_client = client_close;
    srv->output_moved = client_output_moved;
    srv->stop_server = server_stop;
    srv->feed_client = client_feed;
    srv->pause_client = client_pause;
    srv->resume_client = client_resume;
    session_set_init(&srv->sessions, loop, cfg, &srv->mem, &qjob_session_hooks);
    srv->sessions.cull_max = QARGS_MAX_PATTERNS;
    uv_timer_init(loop, &srv->tick);
    srv->tick.data = srv;
    uv_timer_init(loop, &srv->idle);
    srv->idle.data = srv;
#ifdef HEAPTRACE_TEST_KNOBS
    const char *f = getenv("HEAPTRACED_TEST_FAIL_CLIENTS");
    if (f && *f) {
        srv->test_fail_clients = strtoull(f, NULL, 10);
        log_warn("test knob HEAPTRACED_TEST_FAIL_CLIENTS: the next %llu clients find no memory",
                 (unsigned long long)srv->test_fail_clients);
    }
    const char *sd = getenv("HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS");
    if (sd && *sd) {
        srv->sessions.test_sym_delay_ms = strtoull(sd, NULL, 10);
        log_warn("test knob HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS: a query worker's first frame of "
                 "each session holds the symbolizer %llu ms more",
                 (unsigned long long)srv->sessions.test_sym_delay_ms);
    }
#endif
}

int server_start(struct server *srv, uv_loop_t *loop, struct ht_config *cfg)
{
    server_init(srv, loop, cfg);
    char err[640];
    int rc = endpoint_listen(loop, cfg->endpoint, cfg->pipe_operators_group, connection_cb, srv,
                             &srv->ep, err, sizeof(err));
    if (rc != 0) {
        log_error("%s", err);
        server_stop(srv); /* closes the handles server_init made */
        return rc;
    }
    if ((rc = stop_watch_start(loop, stop_requested_cb, srv, &srv->stop)) != 0) {
        log_error("cannot watch for stop requests: %s", uv_strerror(rc));
        server_stop(srv);
        return rc;
    }
    uv_timer_start(&srv->tick, tick_cb, 1000, 1000);
    /* Idle clients are looked for four times per timeout, at most once a second. */
    uint64_t idle_ms = cfg->client_idle_ns / 1000000, every = idle_ms / 4;
    every = every < 10 ? 10 : every > 1000 ? 1000 : every;
    uv_timer_start(&srv->idle, idle_cb, every, every);
    log_info("listening on %s", cfg->endpoint);
    return 0;
}

void server_stop(struct server *srv)
{
    if (srv->stopping)
        return;
    srv->stopping = 1;
    srv->sessions.stopping = 1; /* no query is taken from now on */
    while (srv->clients)
        client_close(srv->clients);
    session_set_close(&srv->sessions);
    if (srv->stop_hook)
        srv->stop_hook(srv->stop_hook_arg);
    if (srv->ep) {
        endpoint_close(srv->ep);
        srv->ep = NULL;
    }
    if (srv->stop) {
        stop_watch_close(srv->stop);
        srv->stop = NULL;
    }
    uv_close((uv_handle_t *)&srv->tick, NULL);
    uv_close((uv_handle_t *)&srv->idle, NULL);
}

