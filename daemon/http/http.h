/* The HTTP listener (http.c): read-only GET/HEAD on the daemon's loop, off
 * unless the configuration names an address (metrics_listen). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef HTTP_H
#define HTTP_H

#include "server-state.h"

#include <stddef.h>

/* Limits of one connection: a request line and its headers fit in
 * HTTP_REQ_MAX bytes and HTTP_HEADERS_MAX lines, and come whole within
 * HTTP_IDLE_MS of the connection or of the last answer (a byte a second
 * does not keep it). */
#define HTTP_REQ_MAX 8192
#define HTTP_HEADERS_MAX 64
#define HTTP_IDLE_MS 10000
#define HTTP_CONNS_MAX 256

struct http;
struct http_conn;

/* A route's handler answers now or later (a handler that runs a query on
 * the workers answers from its done callback) with http_respond. query is
 * what followed '?' in the target ("" without one). */
typedef void (*http_handler)(struct http_conn *c, struct server *srv, const char *query);
struct http_route {
    const char *path;
    http_handler fn;
};

/* Listen on addr ("127.0.0.1:9464", "[::1]:9464") for srv, serving routes
 * (a table ended by {NULL, NULL}; routes.h): 0, or an error with a message
 * in err. */
int http_start(struct server *srv, const char *addr, const struct http_route *routes,
               struct http **out, char *err, size_t errsz);
/* Close the listener and every connection. */
void http_stop(struct http *h);
/* The answer to c's request: status, content type and body (copied; body
 * left out for HEAD); once it is written the connection closes, or waits
 * for the next request when the client keeps it (http.c). */
void http_respond(struct http_conn *c, int status, const char *ctype, const char *body, size_t len);
/* Is c's request a HEAD? */
int http_is_head(const struct http_conn *c);
/* The answer to a HEAD whose body's length is known only by making it (a
 * profile): no Content-Length, which RFC 9110 9.3.2 lets a server omit. */
#define HTTP_LEN_UNKNOWN ((size_t)-1)
void http_respond_head(struct http_conn *c, int status, const char *ctype);

/* A body several answers share (the metrics route's exposition): each
 * connection writing it holds a reference, so a client that does not read
 * costs the daemon a reference, not a copy (256 such clients held 256
 * copies of an 8 MB exposition: 2 GB). */
struct http_shared {
    unsigned refs;
    size_t len;
    char *data;
};
/* data (malloc'd, taken) as a shared body with one reference, or NULL
 * (data freed). */
struct http_shared *http_shared_new(char *data, size_t len);
void http_shared_unref(struct http_shared *b);
/* As http_respond, the body b shared: a reference taken until written. */
void http_respond_shared(struct http_conn *c, int status, const char *ctype, struct http_shared *b);
/* c's answer comes later, from a query job: the connection is held (the
 * request deadline does not close it under a worker); gone(arg) is called
 * if it closes before http_respond (the client went away, the listener
 * stops), after which c must not be used. */
void http_hold(struct http_conn *c, void (*gone)(void *arg), void *arg);

/* Parse a request held in buf (n bytes, the blank line included): 0 with
 * method, path and query (NUL-terminated inside buf), or the status to
 * answer (400, 405, 431); *keep is 1 when the client lets the connection
 * persist (RFC 9112 9.3). Exposed for the unit test. */
int http_parse(char *buf, size_t n, const char **method, const char **path, const char **query,
               int *keep);
/* Where the request's head ends (just past its blank line) in buf[0..n), or 0. */
size_t http_head_end(const char *buf, size_t n);
/* What a connection's bytes buf[0..n) (a buffer of cap) hold after a read
 * that added those past prev: a whole head (its end in *end), a NUL or a
 * bare CR before one (no line can end: answered 400 at once), a full
 * buffer without one (431), or not yet enough. Exposed for the unit test. */
enum http_scan { HTTP_SCAN_MORE, HTTP_SCAN_HEAD, HTTP_SCAN_BAD, HTTP_SCAN_FULL };
enum http_scan http_scan(const char *buf, size_t prev, size_t n, size_t cap, size_t *end);

#endif
