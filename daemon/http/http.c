/* A minimal, hardened HTTP/1.1 server for read-only GET and HEAD (RFC 9112
 * message syntax): a connection persists for the next request when the
 * client lets it (RFC 9112 9.3) and sent nothing past its request (no
 * pipelining: "Connection: close" then), else closes after the answer; a
 * request bigger than HTTP_REQ_MAX or with more than HTTP_HEADERS_MAX
 * header lines is answered 431, one not whole within HTTP_IDLE_MS of the
 * connection (or of the last answer) is closed, connections past
 * HTTP_CONNS_MAX are closed at once. Each is counted (server-state.h http).
 * Debian 12 packages no HTTP parser library for C (no llhttp), hence this. */
#include "http.h"

#include "endpoint.h"
#include "ht-error.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

struct http {
    struct server *srv;
    const struct http_route *routes;
    uv_tcp_t listener;
    uv_timer_t idle;
    struct http_conn *conns;
    int handles; /* open handles of its own: freed when none is left */
};

enum conn_state { CONN_READING, CONN_HANDLING, CONN_WRITING, CONN_CLOSING };

struct http_conn {
    uv_tcp_t tcp;
    struct http *h;
    struct http_conn *prev, *next;
    enum conn_state state;
    int head;          /* HEAD: the answer has no body */
    int keep;          /* the connection waits for another request after the answer */
    /* Held (http_hold): its answer comes from a query job; no deadline
     * closes it, and gone(gone_arg) is told if it closes first. */
    void (*gone)(void *arg);
    void *gone_arg;
    char sink[64];     /* what a held client sends after its request: dropped */
    uint64_t deadline; /* uv_now (ms) past which it is closed */
    uv_write_t wr;
    char *out;
    struct http_shared *body; /* the answer's body when shared */
    size_t len;
    char buf[HTTP_REQ_MAX];
};

size_t http_head_end(const char *buf, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* The line at *p ends at its LF (a CR before it dropped): NUL-terminated
 * in place, *p moved past it; NULL at the end. */
static char *next_line(char **p, char *end)
{
    char *s = *p;
    char *lf = memchr(s, '\n', (size_t)(end - s));
    if (!lf)
        return NULL;
    *lf = '\0';
    if (lf > s && lf[-1] == '\r')
        lf[-1] = '\0';
    *p = lf + 1;
    return s;
}

static int token_char(char c)
{
    return c > 0x20 && c < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", c);
}

/* RFC 9112 3.2.2: a server MUST accept the absolute-form
 * ("http://host:port/metrics?x"); its path and query are what is routed (the
 * authority is ours whatever it says). *target moved to the path; a target
 * with no path after its authority is "/" (RFC 9110 4.2.3). Origin-form is
 * left as it is. */
static int absolute_form(char **target)
{
    char *t = *target;
    size_t skip = strncasecmp(t, "http://", 7) == 0    ? 7
                  : strncasecmp(t, "https://", 8) == 0 ? 8
                                                       : 0;
    if (!skip)
        return 0;
    char *p = t + skip + strcspn(t + skip, "/?");
    if (p == t + skip)
        return -1; /* no authority */
    if (*p == '/') {
        *target = p;
        return 0;
    }
    /* "http://host" or "http://host?q": the path is "/", written over the
     * authority's last byte. */
    p[-1] = '/';
    *target = p - 1;
    return 0;
}

static int parse_request_line(char *line, const char **method, const char **path,
                              const char **query, int *v11)
{
    char *sp1 = strchr(line, ' ');
    if (!sp1 || sp1 == line)
        return 400;
    *sp1 = '\0';
    for (const char *m = line; *m; m++)
        if (!token_char(*m))
            return 400;
    char *target = sp1 + 1, *sp2 = strchr(target, ' ');
    if (!sp2)
        return 400;
    *sp2 = '\0';
    /* HTTP/1.DIGIT (RFC 9112 2.3); a minor version above 1 is served as
     * 1.1 (RFC 9110 6.2: the highest minor version implemented). */
    const char *v = sp2 + 1;
    if (strncmp(v, "HTTP/1.", 7) != 0 || v[7] < '0' || v[7] > '9' || v[8] != '\0')
        return 400;
    *v11 = v[7] != '0';
    for (const char *t = target; *t; t++)
        if (*t <= 0x20 || *t >= 0x7f)
            return 400;
    if (absolute_form(&target) != 0 || target[0] != '/')
        return 400;
    char *q = strchr(target, '?');
    if (q)
        *q++ = '\0';
    *method = line;
    *path = target;
    *query = q ? q : "";
    if (strcmp(line, "GET") != 0 && strcmp(line, "HEAD") != 0)
        return 405;
    return 0;
}

/* A NUL, or a CR followed by anything but LF, in buf[from..n) (a CR last
 * waits for its next byte): RFC 9110 5.5 lets a recipient reject a field
 * value holding either, RFC 9112 2.2 a bare CR. */
static int bare_cr_or_nul(const char *buf, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++)
        if (buf[i] == '\0' || (buf[i] == '\r' && i + 1 < n && buf[i + 1] != '\n'))
            return 1;
    return 0;
}

enum http_scan http_scan(const char *buf, size_t prev, size_t n, size_t cap, size_t *end)
{
    *end = http_head_end(buf, n);
    if (*end)
        return HTTP_SCAN_HEAD;
    if (bare_cr_or_nul(buf, prev ? prev - 1 : 0, n)) /* a CR last time: is an LF next? */
        return HTTP_SCAN_BAD;
    return n == cap ? HTTP_SCAN_FULL : HTTP_SCAN_MORE;
}

/* The whole head: a CR as its last byte is bare too. */
static int head_bytes_bad(const char *buf, size_t n)
{
    return bare_cr_or_nul(buf, 0, n) || (n && buf[n - 1] == '\r');
}

/* A Host value: uri-host [":" port] between optional white space, its
 * characters those RFC 3986 3.2.2 allows (a reg-name, an IPv6 literal in
 * brackets); RFC 9112 3.2 answers any other with 400. */
static int host_value_ok(const char *v)
{
    v += strspn(v, " \t");
    size_t n = strcspn(v, " \t");
    if (v[n + strspn(v + n, " \t")] != '\0')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("-._~!$&'()*+,;=:%[]", ch)))
            return 0;
    }
    return 1;
}

/* The options of a Connection line (RFC 9110 7.6.1: a list of tokens,
 * case-insensitive) that tell whether the connection persists. */
static void connection_options(const char *v, int *close_opt, int *keep_opt)
{
    while (*v) {
        v += strspn(v, " \t,");
        size_t n = strcspn(v, ",");
        size_t t = n;
        while (t && (v[t - 1] == ' ' || v[t - 1] == '\t'))
            t--;
        if (t == 5 && strncasecmp(v, "close", 5) == 0)
            *close_opt = 1;
        else if (t == 10 && strncasecmp(v, "keep-alive", 10) == 0)
            *keep_opt = 1;
        v += n;
    }
}

/* A Content-Length line other than 0, or any Transfer-Encoding line: the
 * request has a body (RFC 9112 6.3). It is not read, so on a kept
 * connection its bytes would be taken as the next request, one a proxy in
 * front passed as body (request smuggling); a GET or HEAD has no use for
 * one (RFC 9110 9.3.1), hence 400. */
static int body_line(const char *line, size_t name_len, const char *v)
{
    if (name_len == 17 && strncasecmp(line, "transfer-encoding", 17) == 0)
        return 1;
    if (name_len != 14 || strncasecmp(line, "content-length", 14) != 0)
        return 0;
    v += strspn(v, " \t");
    size_t zeros = strspn(v, "0");
    return zeros == 0 || v[zeros + strspn(v + zeros, " \t")] != '\0';
}

/* RFC 9112 3.2: an HTTP/1.1 request without a Host line, and any request
 * with more than one, MUST be answered 400. */
static int host_count_bad(unsigned hosts, int v11)
{
    return hosts > 1 || (hosts == 0 && v11);
}

int http_parse(char *buf, size_t n, const char **method, const char **path, const char **query,
               int *keep)
{
    *keep = 0;
    char *p = buf, *end = buf + n;
    if (head_bytes_bad(buf, n))
        return 400;
    /* RFC 9112 2.2: a server SHOULD ignore an empty line before the
     * request line (some clients send one after a POST's body). */
    if (p < end && *p == '\r')
        p++;
    if (p < end && *p == '\n')
        p++;
    char *line = next_line(&p, end);
    if (!line)
        return 400;
    int v11 = 0;
    int rc = parse_request_line(line, method, path, query, &v11);
    if (rc == 400)
        return rc;
    /* Header lines: "name: value", no line folding (RFC 9112 5.2 lets a
     * server reject it), at most HTTP_HEADERS_MAX of them. */
    unsigned nh = 0, hosts = 0;
    int close_opt = 0, keep_opt = 0, body = 0;
    while ((line = next_line(&p, end)) && line[0]) {
        if (++nh > HTTP_HEADERS_MAX)
            return 431;
        char *colon = strchr(line, ':');
        if (!colon || colon == line)
            return 400;
        for (const char *c = line; c < colon; c++)
            if (!token_char(*c))
                return 400;
        if (colon - line == 4 && strncasecmp(line, "host", 4) == 0) {
            if (!host_value_ok(colon + 1))
                return 400;
            hosts++;
        } else if (colon - line == 10 && strncasecmp(line, "connection", 10) == 0) {
            connection_options(colon + 1, &close_opt, &keep_opt);
        } else {
            body |= body_line(line, (size_t)(colon - line), colon + 1);
        }
    }
    /* RFC 9112 9.3: HTTP/1.1 persists unless "close" is sent; HTTP/1.0
     * only with "keep-alive". */
    *keep = !close_opt && (v11 || keep_opt);
    return host_count_bad(hosts, v11) || body ? 400 : rc;
}

static void conn_closed(uv_handle_t *hd)
{
    struct http_conn *c = hd->data;
    free(c->out);
    http_shared_unref(c->body);
    free(c);
}

static void conn_close(struct http_conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_CLOSING;
    if (c->gone) { /* the job answering it must not write to it */
        c->h->srv->http.gone_pending++;
        c->gone(c->gone_arg);
        c->gone = NULL;
    }
    struct http *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    h->srv->http.conns--;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b);
static void conn_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b);

/* The answer is written and the connection persists: it waits for the next
 * request as a new one does (its own idle timeout), counted as kept_alive. */
static void conn_reuse(struct http_conn *c)
{
    free(c->out);
    c->out = NULL;
    http_shared_unref(c->body);
    c->body = NULL;
    c->len = 0;
    c->head = c->keep = 0;
    c->state = CONN_READING;
    c->deadline = uv_now(c->tcp.loop) + HTTP_IDLE_MS;
    c->h->srv->http.kept_alive++;
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) != 0)
        conn_close(c);
}

static void write_done(uv_write_t *w, int status)
{
    struct http_conn *c = w->data;
    if (status == 0 && c->keep && c->state == CONN_WRITING)
        conn_reuse(c);
    else
        conn_close(c);
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    default:
        return "Service Unavailable";
    }
}

struct http_shared *http_shared_new(char *data, size_t len)
{
    struct http_shared *b = malloc(sizeof(*b));
    if (!b) {
        free(data);
        return NULL;
    }
    b->refs = 1;
    b->len = len;
    b->data = data;
    return b;
}

void http_shared_unref(struct http_shared *b)
{
    if (b && --b->refs == 0) {
        free(b->data);
        free(b);
    }
}

/* The answer's head and, unless shared (c->body), its body copied into
 * c->out; then written (the shared body as a second buffer). */
static void respond(struct http_conn *c, int status, const char *ctype, const char *body,
                    size_t len)
{
    c->gone = NULL;
    char head[320], clen[48] = "";
    if (len != HTTP_LEN_UNKNOWN)
        snprintf(clen, sizeof(clen), "Content-Length: %zu\r\n", len);
    else
        len = 0;
    int hn =
        snprintf(head, sizeof(head),
                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s"
                 "Connection: %s\r\n\r\n",
                 status, reason(status), ctype, clen, status == 405 ? "Allow: GET, HEAD\r\n" : "",
                 c->keep ? "keep-alive" : "close");
    size_t blen = c->head || c->body ? 0 : len;
    c->out = malloc((size_t)hn + blen);
    if (!c->out) {
        c->h->srv->http.unavailable++;
        conn_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)hn);
    if (blen)
        memcpy(c->out + hn, body, blen);
    c->state = CONN_WRITING;
    /* A reader as slow as a slow writer gets the same time to take the answer. */
    c->deadline = uv_now(c->tcp.loop) + HTTP_IDLE_MS;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_buf_t b[2] = {uv_buf_init(c->out, (unsigned)((size_t)hn + blen)), {0}};
    unsigned nb = 1;
    if (c->body && !c->head)
        b[nb++] = uv_buf_init(c->body->data, (unsigned)c->body->len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, b, nb, write_done) != 0)
        conn_close(c);
}

void http_respond(struct http_conn *c, int status, const char *ctype, const char *body, size_t len)
{
    if (c->state != CONN_READING && c->state != CONN_HANDLING)
        return;
    respond(c, status, ctype, body, len);
}

int http_is_head(const struct http_conn *c)
{
    return c->head;
}

void http_respond_head(struct http_conn *c, int status, const char *ctype)
{
    if (c->state != CONN_READING && c->state != CONN_HANDLING)
        return;
    respond(c, status, ctype, NULL, HTTP_LEN_UNKNOWN);
}

void http_respond_shared(struct http_conn *c, int status, const char *ctype, struct http_shared *b)
{
    if (c->state != CONN_READING && c->state != CONN_HANDLING)
        return;
    b->refs++;
    c->body = b;
    respond(c, status, ctype, b->data, b->len);
}

static void sink_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct http_conn *c = hd->data;
    *b = uv_buf_init(c->sink, sizeof(c->sink));
}

void http_hold(struct http_conn *c, void (*gone)(void *arg), void *arg)
{
    c->gone = gone;
    c->gone_arg = arg;
    /* Read on, into the sink: a client that goes away is seen now (its
     * end of file), not when the answer is written. */
    if (uv_read_start((uv_stream_t *)&c->tcp, sink_alloc, conn_read) != 0)
        conn_close(c);
}

static void respond_text(struct http_conn *c, int status, const char *text)
{
    http_respond(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

static void conn_request(struct http_conn *c, size_t n)
{
    struct server *srv = c->h->srv;
    const char *method = "", *path = "", *query = "";
    int keep = 0;
    int rc = http_parse(c->buf, n, &method, &path, &query, &keep);
    c->state = CONN_HANDLING;
    c->head = strcmp(method, "HEAD") == 0;
    /* Kept only for a request served and nothing read past it: pipelined
     * requests are not answered in turn, the client is told to send them
     * again on a new connection (Connection: close; RFC 9112 9.3.2). */
    c->keep = rc == 0 && keep && c->len == n;
    if (rc == 400) {
        srv->http.bad++;
        respond_text(c, 400, "bad request\n");
        return;
    }
    if (rc == 431) {
        srv->http.too_large++;
        respond_text(c, 431, "too many header lines\n");
        return;
    }
    if (rc == 405) {
        srv->http.bad_method++;
        respond_text(c, 405, "only GET and HEAD\n");
        return;
    }
    for (const struct http_route *r = c->h->routes; r->path; r++) {
        if (strcmp(r->path, path) == 0) {
            srv->http.requests++;
            r->fn(c, srv, query);
            return;
        }
    }
    srv->http.not_found++;
    respond_text(c, 404, "not found\n");
}

static void conn_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct http_conn *c = hd->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    (void)b;
    struct http_conn *c = st->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (c->state != CONN_READING) {
        c->keep = 0; /* bytes past a held request (read into the sink): dropped, so no reuse */
        return;
    }
    size_t prev = c->len, end = 0;
    c->len += (size_t)nread;
    enum http_scan sc = http_scan(c->buf, prev, c->len, sizeof(c->buf), &end);
    if (sc == HTTP_SCAN_BAD) {
        /* No line can end: answered now, not held to the idle timeout. */
        uv_read_stop(st);
        c->state = CONN_HANDLING;
        c->h->srv->http.bad++;
        respond_text(c, 400, "bad request\n");
    } else if (sc == HTTP_SCAN_HEAD) {
        uv_read_stop(st);
        uint64_t t0 = uv_hrtime();
        conn_request(c, end);
        uint64_t held = uv_hrtime() - t0;
        struct server *srv = c->h->srv;
        if (held > srv->http.hold_max_ns)
            srv->http.hold_max_ns = held;
    } else if (sc == HTTP_SCAN_FULL) {
        uv_read_stop(st);
        c->state = CONN_HANDLING;
        c->h->srv->http.too_large++;
        respond_text(c, 431, "request head over 8 KiB\n");
    }
}

static void refused_closed(uv_handle_t *hd)
{
    free(hd);
}

/* Past the cap a connection is accepted and closed: one left waiting would
 * stay in the backlog, and the listener would keep being told of it. */
static void refuse(struct http *h, uv_stream_t *server)
{
    h->srv->http.refused_full++;
    uv_tcp_t *t = malloc(sizeof(*t));
    if (!t)
        return;
    uv_tcp_init(server->loop, t);
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, refused_closed);
}

/* Descriptors the listener leaves to the control socket, the sessions and
 * their files: an HTTP connection that took one of the last HTTP_FD_RESERVE
 * is closed (HTTP_CONNS_MAX held ones fit in the usual limit of 1024 with
 * room to spare; a lower limit is the case this guards). */
#define HTTP_FD_RESERVE 64

static void on_connection(uv_stream_t *server, int status)
{
    struct http *h = server->data;
    if (status < 0) {
        /* EMFILE or ENFILE: libuv has accepted and closed the connections
         * waiting, with a descriptor it keeps for this (uv__emfile_trick,
         * src/unix/stream.c); they are counted here, not lost unsaid. */
        h->srv->http.refused_nofd++;
        return;
    }
    if (h->srv->http.conns >= HTTP_CONNS_MAX) {
        refuse(h, server);
        return;
    }
    struct http_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        refuse(h, server);
        return;
    }
    c->h = h;
    uv_tcp_init(server->loop, &c->tcp);
    c->tcp.data = c;
    c->state = CONN_READING;
    c->deadline = uv_now(server->loop) + HTTP_IDLE_MS;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    h->srv->http.conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    if (endpoint_in_reserve((uv_handle_t *)&c->tcp, HTTP_FD_RESERVE)) {
        h->srv->http.refused_nofd++;
        conn_close(c);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) != 0)
        conn_close(c);
}

static void idle_tick(uv_timer_t *t)
{
    struct http *h = t->data;
    uint64_t now = uv_now(t->loop);
    for (struct http_conn *c = h->conns, *next; c; c = next) {
        next = c->next;
        if (now >= c->deadline && !c->gone) {
            h->srv->http.idle_closed++;
            conn_close(c);
        }
    }
}

/* "host:port" or "[v6]:port" into sa. */
static int parse_addr(const char *addr, struct sockaddr_storage *sa, char *err, size_t errsz)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    const char *h = addr, *he = colon;
    if (colon && addr[0] == '[') {
        h = addr + 1;
        he = colon > addr && colon[-1] == ']' ? colon - 1 : NULL;
    }
    char *endp = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &endp, 10) : 0;
    if (!colon || !he || he <= h || (size_t)(he - h) >= sizeof(host) || !endp || *endp ||
        colon[1] == '\0' || port == 0 || port > 65535) {
        snprintf(err, errsz, "metrics_listen \"%s\": not HOST:PORT or [V6]:PORT", addr);
        return HT_EBADARG;
    }
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) != 0 &&
        uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa) != 0) {
        snprintf(err, errsz, "metrics_listen \"%s\": %s is not an IP address", addr, host);
        return HT_EBADARG;
    }
    return 0;
}

/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z (RFC 1122 3.2.1.3, RFC 4291 2.5.3,
 * 2.5.5.2). */
static int is_loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET) {
        const unsigned char *a = (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
        return a[0] == 127;
    }
    const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const unsigned char one[16] = {[15] = 1};
    static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
    return memcmp(a, one, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127);
}

static void own_closed(uv_handle_t *hd)
{
    struct http *h = hd->data;
    if (--h->handles == 0)
        free(h);
}

int http_start(struct server *srv, const char *addr, const struct http_route *routes,
               struct http **out, char *err, size_t errsz)
{
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof(sa));
    int rc = parse_addr(addr, &sa, err, errsz);
    if (rc)
        return rc;
    struct http *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(err, errsz, "out of memory");
        return HT_ENOMEM;
    }
    h->srv = srv;
    h->routes = routes;
    uv_tcp_init(srv->loop, &h->listener);
    uv_timer_init(srv->loop, &h->idle);
    h->listener.data = h->idle.data = h;
    h->handles = 2;
    int uerr = uv_tcp_bind(&h->listener, (const struct sockaddr *)&sa, 0);
    if (!uerr)
        uerr = uv_listen((uv_stream_t *)&h->listener, 128, on_connection);
    if (uerr) {
        snprintf(err, errsz, "metrics_listen %s: %s", addr, uv_strerror(uerr));
        uv_close((uv_handle_t *)&h->listener, own_closed);
        uv_close((uv_handle_t *)&h->idle, own_closed);
        return uerr;
    }
    if (!is_loopback(&sa))
        log_warn("metrics_listen %s is not a loopback address: every session's name, process "
                 "and numbers are readable, unauthenticated, by whoever reaches it "
                 "(docs/fleet.md)",
                 addr);
    uv_timer_start(&h->idle, idle_tick, 1000, 1000);
    *out = h;
    return 0;
}

void http_stop(struct http *h)
{
    while (h->conns)
        conn_close(h->conns);
    uv_close((uv_handle_t *)&h->listener, own_closed);
    uv_close((uv_handle_t *)&h->idle, own_closed);
}
