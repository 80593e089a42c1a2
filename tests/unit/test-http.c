/* The HTTP listener's request parser (daemon/http/http.c: http_scan,
 * http_parse) and URL decoding (daemon/http/url.c), on hostile input. */
#include "http.h"
#include "ht-test.h"
#include "url.h"

#include <stdio.h>
#include <string.h>

/* http_parse of text (a copy: the parser writes NULs into it); method,
 * path and query copied out. */
struct parsed {
    int rc, keep;
    char method[16], path[128], query[128];
};

static struct parsed parse_n(const char *text, size_t n)
{
    static char buf[HTTP_REQ_MAX * 2];
    struct parsed p = {0};
    const char *m = "", *path = "", *q = "";
    memcpy(buf, text, n);
    p.rc = http_parse(buf, n, &m, &path, &q, &p.keep);
    snprintf(p.method, sizeof(p.method), "%s", m);
    snprintf(p.path, sizeof(p.path), "%s", path);
    snprintf(p.query, sizeof(p.query), "%s", q);
    return p;
}

static struct parsed parse(const char *text)
{
    return parse_n(text, strlen(text));
}

static void test_request_lines(void)
{
    struct parsed p = parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.method, "GET");
    CHECK_STR(p.path, "/metrics");
    CHECK_STR(p.query, "");
    p = parse("GET /debug/pprof/heap?session=a&top=5 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.path, "/debug/pprof/heap");
    CHECK_STR(p.query, "session=a&top=5");
    /* RFC 9112 3.2.2: the absolute form is served by its path. */
    p = parse("GET http://127.0.0.1:9464/metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.path, "/metrics");
    CHECK_STR(p.query, "x=1");
    p = parse("GET http://h?x HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.path, "/");
    CHECK_STR(p.query, "x");
    /* RFC 9112 2.2: one empty line before the request line is ignored. */
    CHECK_EQ(parse("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").rc, 0);
    static const char *bad[] = {
        "\r\n\r\n",                                  /* no request line */
        "GET\r\nHost: x\r\n\r\n",                    /* no target */
        "GET /\r\nHost: x\r\n\r\n",                  /* no version (HTTP/0.9) */
        "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",        /* two spaces */
        "GET / HTTP/1.1 \r\nHost: x\r\n\r\n",        /* a space after the version */
        "GET / HTTP/2.0\r\nHost: x\r\n\r\n",         /* another major version */
        "GET / http/1.1\r\nHost: x\r\n\r\n",         /* the name is case-sensitive */
        "GET / HTTP/1.10\r\nHost: x\r\n\r\n",        /* one digit each */
        "GET metrics HTTP/1.1\r\nHost: x\r\n\r\n",   /* no leading '/' */
        "GET * HTTP/1.1\r\nHost: x\r\n\r\n",         /* asterisk form */
        "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n",     /* a control in the target */
        "GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n",     /* a byte past ASCII */
        "GET http:///x HTTP/1.1\r\nHost: x\r\n\r\n", /* absolute form, no authority */
        " GET / HTTP/1.1\r\nHost: x\r\n\r\n",        /* white space first */
        "G\"T / HTTP/1.1\r\nHost: x\r\n\r\n",        /* a method that is no token */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = parse(bad[i]);
        if (p.rc != 400)
            fprintf(stderr, "case %zu: %d\n", i, p.rc);
        CHECK_EQ(p.rc, 400);
    }
}

/* RFC 9110 6.2: a higher minor version of a major one implemented is
 * processed as the highest minor implemented (1.1); it was refused. */
static void test_versions(void)
{
    CHECK_EQ(parse("GET / HTTP/1.0\r\n\r\n").rc, 0);   /* 1.0 needs no Host */
    CHECK_EQ(parse("GET / HTTP/1.1\r\n\r\n").rc, 400); /* RFC 9112 3.2: 1.1 does */
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").rc, 0);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n").rc, 0);
    /* RFC 9112 9.3: 1.1 persists unless "close"; 1.0 only with "keep-alive". */
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\n\r\n").keep, 1);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").keep, 0);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nconnection: TE, Close\r\n\r\n").keep, 0);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n").keep, 1);
    CHECK_EQ(parse("GET / HTTP/1.0\r\n\r\n").keep, 0);
    CHECK_EQ(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive \r\n\r\n").keep, 1);
    CHECK_EQ(parse("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep, 0);
    CHECK_EQ(parse("GET / HTTP/1.2\r\nHost: x\r\n\r\n").keep, 1);
    CHECK_EQ(parse("GET / HTTP/1.2\r\nHost: x\r\n\r\n").rc, 0);
    CHECK_EQ(parse("GET / HTTP/1.9\r\n\r\n").rc, 400); /* as 1.1: a Host is needed */
    CHECK_EQ(parse("GET / HTTP/1.x\r\nHost: x\r\n\r\n").rc, 400);
    /* RFC 9112 3.2: a Host value that is no uri-host[:port]. */
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: a b\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: [::1]:9464\r\n\r\n").rc, 0);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost:\r\n\r\n").rc, 0); /* empty is allowed */
}

static void test_methods(void)
{
    CHECK_EQ(parse("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").rc, 0);
    static const char *m405[] = {"POST",  "PUT",     "DELETE", "OPTIONS", "PATCH",
                                 "TRACE", "CONNECT", "get",    "BREW"};
    for (size_t i = 0; i < sizeof(m405) / sizeof(m405[0]); i++) {
        char req[96];
        snprintf(req, sizeof(req), "%s /metrics HTTP/1.1\r\nHost: x\r\n\r\n", m405[i]);
        struct parsed p = parse(req);
        CHECK_EQ(p.rc, 405);
        CHECK_STR(p.method, m405[i]);
    }
    /* A 405's request must still be well formed: a bad head is 400 first. */
    CHECK_EQ(parse("POST /metrics HTTP/1.1\r\n\r\n").rc, 400);
}

/* RFC 9112 5.2: a line folded onto the last (obs-fold) may be refused. */
static void test_header_folding(void)
{
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\t2: 3\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n").rc, 400); /* RFC 9112 5.1 */
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\n: 1\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n").rc, 400);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-B:\tv \r\n\r\n").rc, 0);
}

/* RFC 9112 2.2: LF alone may end a line; a CR alone may not. */
static void test_bare_lf(void)
{
    struct parsed p = parse("GET /metrics HTTP/1.1\nHost: x\n\n");
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.path, "/metrics");
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\n\r\n").rc, 0);
    CHECK_EQ(parse("GET / HTTP/1.1\nHost: x\r\n\n").rc, 0);
    static const char a[] = "GET / HTTP/1.1\nHost: x\n\n";
    CHECK_EQ(http_head_end(a, sizeof(a) - 1), sizeof(a) - 1);
    static const char b[] = "GET / HTTP/1.1\r\nHost: x\n\r\nrest";
    CHECK_EQ(http_head_end(b, sizeof(b) - 1), sizeof(b) - 1 - 4);
    CHECK_EQ(parse("GET / HTTP/1.1\rHost: x\r\n\r\n").rc, 400);
    size_t end = 1;
    CHECK_EQ(http_scan("GET / HTTP/1.1\rHost", 0, 19, HTTP_REQ_MAX, &end), HTTP_SCAN_BAD);
}

static void test_nul_bytes(void)
{
    static const char a[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n";
    CHECK_EQ(parse_n(a, sizeof(a) - 1).rc, 400);
    static const char b[] = "GET /met\0rics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(parse_n(b, sizeof(b) - 1).rc, 400);
    size_t end;
    /* Seen at once, not held to the idle timeout. */
    CHECK_EQ(http_scan(a, 0, 38, HTTP_REQ_MAX, &end), HTTP_SCAN_BAD);
    CHECK_EQ(http_scan("\0", 0, 1, HTTP_REQ_MAX, &end), HTTP_SCAN_BAD);
}

static void test_huge_headers(void)
{
    static char req[HTTP_REQ_MAX * 2];
    size_t n = (size_t)snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 1; i < HTTP_HEADERS_MAX; i++)
        n += (size_t)snprintf(req + n, sizeof(req) - n, "X-%d: v\r\n", i);
    CHECK_EQ(parse_n(strcat(req, "\r\n"), n + 2).rc, 0); /* 64 lines */
    req[n] = '\0';
    n += (size_t)snprintf(req + n, sizeof(req) - n, "X-65: v\r\n\r\n");
    CHECK_EQ(parse_n(req, n).rc, 431);
    /* A head that fills the buffer without its end: 431, not a wait. */
    memset(req, 'a', HTTP_REQ_MAX);
    memcpy(req, "GET / HTTP/1.1\r\nX: ", 19);
    size_t end = 1;
    CHECK_EQ(http_scan(req, HTTP_REQ_MAX - 10, HTTP_REQ_MAX, HTTP_REQ_MAX, &end), HTTP_SCAN_FULL);
    CHECK_EQ(http_scan(req, 0, HTTP_REQ_MAX - 1, HTTP_REQ_MAX, &end), HTTP_SCAN_MORE);
    CHECK_EQ(end, 0);
}

/* Several requests in one read: the first is answered (the connection
 * then closes), whatever follows it. */
static void test_pipelined(void)
{
    static const char two[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                              "GET /debug/pprof/heap HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t end = 0, first = strlen("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(http_scan(two, 0, sizeof(two) - 1, HTTP_REQ_MAX, &end), HTTP_SCAN_HEAD);
    CHECK_EQ(end, first);
    struct parsed p = parse_n(two, end);
    CHECK_EQ(p.rc, 0);
    CHECK_STR(p.path, "/metrics");
    static const char junk[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n\0\r\x01garbage";
    CHECK_EQ(http_scan(junk, 0, sizeof(junk) - 1, HTTP_REQ_MAX, &end), HTTP_SCAN_HEAD);
    CHECK_EQ(end, first);
    CHECK_EQ(parse_n(junk, end).rc, 0);
}

/* A request with a body (Content-Length other than 0, any
 * Transfer-Encoding) is refused: its body is not read, and on a kept
 * connection it was taken as the next request (smuggled past a proxy that
 * passed it as body). Content-Length: 0 is no body. */
static void test_body_smuggling(void)
{
    static const char *bad[] = {
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 34\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\ncontent-length:1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 5\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HEAD /metrics HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: identity\r\n\r\n",
        "GET /metrics HTTP/1.0\r\nContent-Length: 0\r\nContent-Length: 7\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct parsed p = parse(bad[i]);
        if (p.rc != 400)
            fprintf(stderr, "case %zu: %d\n", i, p.rc);
        CHECK_EQ(p.rc, 400);
    }
    struct parsed p = parse("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0 \r\n\r\n");
    CHECK_EQ(p.rc, 0);
    CHECK_EQ(p.keep, 1);
    CHECK_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 00\r\n\r\n").rc, 0);
}

/* Each request fed one byte per read, and in two reads split at every
 * byte: the same verdict as whole, at the byte that decides it. */
static void split_check(const char *req, size_t n, enum http_scan want, size_t want_at)
{
    size_t end = 0;
    for (size_t i = 0; i < n; i++) {
        enum http_scan sc = http_scan(req, i, i + 1, HTTP_REQ_MAX, &end);
        if (i + 1 < want_at) {
            CHECK_EQ(sc, HTTP_SCAN_MORE);
        } else {
            CHECK_EQ(sc, want);
            break;
        }
    }
    for (size_t k = 0; k < want_at; k++)
        CHECK_EQ(http_scan(req, k, want_at, HTTP_REQ_MAX, &end), want);
}

static void test_split_every_byte(void)
{
    static const char ok[] = "GET /metrics?x=%41 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
    split_check(ok, sizeof(ok) - 1, HTTP_SCAN_HEAD, sizeof(ok) - 1);
    static const char lf[] = "GET / HTTP/1.0\n\n";
    split_check(lf, sizeof(lf) - 1, HTTP_SCAN_HEAD, sizeof(lf) - 1);
    /* The bare CR is known when the byte after it comes. */
    static const char cr[] = "GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n";
    size_t at = (size_t)(strchr(cr, 'Y') - cr) + 1;
    split_check(cr, sizeof(cr) - 1, HTTP_SCAN_BAD, at);
    static const char nul[] = "GET / HTTP/1.1\r\nHo\0st: x\r\n\r\n";
    at = strlen(nul) + 1;
    split_check(nul, sizeof(nul) - 1, HTTP_SCAN_BAD, at);
    size_t end;
    CHECK_EQ(http_scan(ok, 0, sizeof(ok) - 1, HTTP_REQ_MAX, &end), HTTP_SCAN_HEAD);
    CHECK_EQ(end, sizeof(ok) - 1);
    CHECK_EQ(parse_n(ok, end).rc, 0);
}

static int decode(const char *s, char *out, size_t cap)
{
    return url_decode(s, strlen(s), out, cap);
}

static void test_url_decode(void)
{
    char out[16];
    CHECK_EQ(decode("a%20b+c", out, sizeof(out)), 0);
    CHECK_STR(out, "a b c");
    CHECK_EQ(decode("%C3%a9", out, sizeof(out)), 0);
    CHECK_STR(out, "\xc3\xa9");
    CHECK_EQ(decode("%2500", out, sizeof(out)), 0); /* decoded once */
    CHECK_STR(out, "%00");
    CHECK_EQ(decode("", out, sizeof(out)), 0);
    CHECK_STR(out, "");
    static const char *bad[] = {"%", "%4", "a%", "%zz", "%4g", "%00", "x%00y", "%%41"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ(decode(bad[i], out, sizeof(out)), -1);
    /* n bounds the input: a "%41" cut after "%4" is malformed. */
    CHECK_EQ(url_decode("%41", 2, out, sizeof(out)), -1);
    CHECK_EQ(decode("123456789012345", out, sizeof(out)), 0); /* 15 + NUL fit */
    CHECK_EQ(decode("1234567890123456", out, sizeof(out)), -1);
}

HT_TEST_MAIN(T(request_lines), T(versions), T(methods), T(header_folding), T(bare_lf), T(nul_bytes),
             T(huge_headers), T(pipelined), T(body_smuggling), T(split_every_byte), T(url_decode))
