/* N scrapers of one HTTP path on one thread (poll): what a fleet's scrapers
 * cost the daemon, without a thread or an interpreter per client on the
 * same CPUs. */
#include "scrape.h"

#include "bench-util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

#define SCRAPE_TIMEOUT_S 5.0
#define HEAD_MAX 8192

struct sc {
    int fd;
    int busy;         /* a request is out, its answer not whole */
    double due, sent; /* the next turn; when the request went */
    size_t hn;        /* head bytes held */
    int head_done, close_after, status;
    int reused;     /* the connection has answered before: the server may have closed it idle */
    long long left; /* body bytes to come (-1: to the end of the stream) */
    char head[HEAD_MAX];
};

static int sc_connect(struct sc *c, int port, struct scrape_stats *st)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    st->connects++;
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

/* A request on a kept connection the server closed meanwhile (its idle
 * timeout) is sent again on a new one, once, as HTTP clients do (RFC 9112
 * 9.3.1): counted as a retry, not a failure. 0, or -1 (no retry due). */
static int sc_retry(struct sc *c, int port, struct scrape_stats *st)
{
    if (!c->reused || c->hn)
        return -1;
    close(c->fd);
    c->fd = -1;
    c->reused = 0;
    st->retries++;
    if (sc_connect(c, port, st) != 0)
        return -1;
    c->busy = 2;
    return 0;
}

static void sc_end(struct sc *c, int ok, struct scrape_stats *st)
{
    double ms = (now_s() - c->sent) * 1e3;
    if (ok) {
        st->ok++;
        st->sum_ms += ms;
    } else {
        st->failed++;
    }
    if (ms > st->max_ms)
        st->max_ms = ms;
    c->busy = 0;
    if (!ok || c->close_after) {
        close(c->fd);
        c->fd = -1;
    }
    c->reused = c->fd >= 0;
}

/* A turn: the request on the connection (a new one if the last closed). A
 * request into a connecting socket waits in its buffer until it connects. */
static void sc_send(struct sc *c, int port, struct scrape_stats *st)
{
    c->sent = now_s();
    c->busy = 1;
    c->hn = 0;
    c->head_done = c->close_after = c->status = 0;
    c->left = -1;
    if (c->fd < 0 && sc_connect(c, port, st) != 0) {
        sc_end(c, 0, st);
        return;
    }
    c->busy = 2; /* to be written once writable */
}

/* The head is whole: its status, length and whether the server closes. */
static void sc_head(struct sc *c, size_t end)
{
    c->head[end - 1] = '\0';
    c->head_done = 1;
    sscanf(c->head, "HTTP/1.%*d %d", &c->status);
    for (char *l = strstr(c->head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "content-length:", 15) == 0)
            c->left = strtoll(l + 17, NULL, 10);
        else if (strncasecmp(l + 2, "connection:", 11) == 0 && strstr(l + 13, "close"))
            c->close_after = 1;
    }
}

static void sc_read(struct sc *c, int port, struct scrape_stats *st)
{
    char buf[65536];
    ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 && sc_retry(c, port, st) == 0)
        return;
    if (n <= 0) { /* the end: whole only if the body ran to it */
        c->close_after = 1;
        sc_end(c, n == 0 && c->head_done && c->left <= 0 && c->status == 200, st);
        return;
    }
    st->bytes += (uint64_t)n;
    size_t off = 0;
    if (!c->head_done) {
        size_t take = (size_t)n < HEAD_MAX - 1 - c->hn ? (size_t)n : HEAD_MAX - 1 - c->hn;
        memcpy(c->head + c->hn, buf, take);
        c->hn += take;
        c->head[c->hn] = '\0';
        char *e = strstr(c->head, "\r\n\r\n");
        if (!e) {
            if (c->hn == HEAD_MAX - 1)
                sc_end(c, 0, st);
            return;
        }
        size_t end = (size_t)(e - c->head) + 4;
        off = take - (c->hn - end);
        sc_head(c, end);
    }
    if (c->left >= 0) {
        c->left -= (long long)((size_t)n - off);
        if (c->left <= 0)
            sc_end(c, c->status == 200 && c->left == 0, st);
    }
}

static int sc_write(struct sc *c, int port, const char *req, size_t rn, struct scrape_stats *st)
{
    ssize_t w = send(c->fd, req, rn, MSG_NOSIGNAL);
    if (w == (ssize_t)rn) {
        c->busy = 1;
        return 0;
    }
    if (w < 0 && errno == EAGAIN)
        return 0;
    if (sc_retry(c, port, st) == 0)
        return 0;
    sc_end(c, 0, st);
    return -1;
}

/* One poll over the clients with something to do; the next due time ends it. */
static void sc_poll(struct sc *cs, int n, struct pollfd *pf, int *ix, int port, const char *req,
                    size_t rn, double next, struct scrape_stats *st)
{
    int np = 0;
    for (int i = 0; i < n; i++) {
        if (!cs[i].busy || cs[i].fd < 0)
            continue;
        pf[np] = (struct pollfd){cs[i].fd, cs[i].busy == 2 ? POLLOUT : POLLIN, 0};
        ix[np++] = i;
    }
    double wait = next - now_s();
    int ms = wait > 0 ? (int)(wait * 1e3) + 1 : 0;
    if (poll(pf, (nfds_t)np, ms) <= 0)
        return;
    for (int k = 0; k < np; k++) {
        struct sc *c = &cs[ix[k]];
        if (!pf[k].revents)
            continue;
        if (c->busy == 2)
            sc_write(c, port, req, rn, st);
        else
            sc_read(c, port, st);
    }
}

int scrape_run(int port, const char *path, int clients, int every_ms, double secs,
               volatile int *stop, struct scrape_stats *st)
{
    memset(st, 0, sizeof(*st));
    struct sc *cs = calloc((size_t)clients, sizeof(*cs));
    struct pollfd *pf = calloc((size_t)clients, sizeof(*pf));
    int *ix = calloc((size_t)clients, sizeof(*ix));
    if (!cs || !pf || !ix) {
        fprintf(stderr, "scrape: out of memory\n");
        return -1;
    }
    char req[512];
    int rn =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", path, port);
    double t0 = now_s(), c0 = cpu_now_s(), every = every_ms / 1e3;
    for (int i = 0; i < clients; i++) {
        cs[i].fd = -1;
        cs[i].due = t0 + every * i / clients; /* spread over the period */
    }
    while (!(stop && *stop) && (secs <= 0 || now_s() - t0 < secs)) {
        double now = now_s(), next = secs > 0 && t0 + secs < now + every ? t0 + secs : now + every;
        for (int i = 0; i < clients; i++) {
            struct sc *c = &cs[i];
            if (c->busy && now - c->sent > SCRAPE_TIMEOUT_S)
                sc_end(c, 0, st);
            if (now >= c->due) {
                c->due += every;
                if (c->busy)
                    st->late++;
                else
                    sc_send(c, port, st);
            }
            if (c->due < next)
                next = c->due;
        }
        sc_poll(cs, clients, pf, ix, port, req, (size_t)rn, next, st);
    }
    for (int i = 0; i < clients; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    st->cpu_s = cpu_now_s() - c0;
    st->wall_s = now_s() - t0;
    free(cs);
    free(pf);
    free(ix);
    return 0;
}
