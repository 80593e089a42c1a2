/* Unix-socket connection for the ctl. */
#define _GNU_SOURCE /* struct ucred */
#include "conn.h"
#include "linebuf.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct conn {
    int fd;
    struct linebuf in;
};

/* Whoever listens on the endpoint must be root or ourselves before we send
 * it anything: a user who squatted the path (a pre-created directory, a
 * stale socket's place) must not receive root's requests. SO_PEERCRED gives
 * the credentials the listener had when it called listen(2) (unix(7)). */
static int conn_check_peer(int fd, const char *path, char *err, size_t errsz)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(err, errsz, "cannot read the credentials of the server at %s: %s", path,
                 strerror(errno));
        return -1;
    }
    uid_t me = getuid();
    if (cred.uid == 0 || cred.uid == me)
        return 0;
    snprintf(err, errsz,
             "refusing to talk to the server at %s: it runs as uid %u (pid %d), not root or "
             "you (uid %u); it is not a genuine heaptraced",
             path, (unsigned)cred.uid, (int)cred.pid, (unsigned)me);
    return -1;
}

/* A connected socket whose listener passed the check, or -1 (err says why). */
static int conn_connect(const char *path, char *err, size_t errsz)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errsz, "endpoint path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errsz, "cannot reach heaptraced at %s: %s%s", path, strerror(errno),
                 errno == ENOENT || errno == ECONNREFUSED ? " (is the daemon running?)"
                 : errno == EACCES                        ? " (root or group heaptrace needed)"
                                                          : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (conn_check_peer(fd, path, err, errsz) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int conn_open(struct conn **out, const char *path, char *err, size_t errsz)
{
    *out = NULL;
    int fd = conn_connect(path, err, errsz);
    if (fd < 0)
        return -1;
    struct conn *c = calloc(1, sizeof(*c));
    if (c)
        c->fd = fd;
    if (!c || linebuf_init(&c->in, 1 << 16) != 0) {
        snprintf(err, errsz, "out of memory");
        free(c);
        close(fd);
        return -1;
    }
    *out = c;
    return 0;
}

void conn_close(struct conn *c)
{
    if (!c)
        return;
    close(c->fd);
    linebuf_free(&c->in);
    free(c);
}

int conn_send(struct conn *c, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

void conn_shutdown_write(struct conn *c)
{
    shutdown(c->fd, SHUT_WR);
}

char *conn_read_line(struct conn *c, size_t max)
{
    for (;;) {
        char *line;
        int got = linebuf_line(&c->in, &line);
        if (got != 0)
            return got > 0 ? line : NULL;
        size_t room;
        char *p = linebuf_room(&c->in, max, &room);
        if (!p)
            return NULL;
        ssize_t k = recv(c->fd, p, room, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return NULL;
        linebuf_filled(&c->in, (size_t)k);
    }
}

int conn_read_chunks(struct conn *c, struct ht_chunk_reader *r,
                     void (*out)(void *arg, const void *buf, size_t n), void *arg)
{
    for (;;) {
        int got = linebuf_chunks(&c->in, r, out, arg);
        if (got != 0)
            return got > 0 ? 0 : -1;
        size_t room;
        char *p = linebuf_room(&c->in, c->in.cap, &room); /* all read: room at the front */
        if (!p)
            return -1;
        ssize_t k = recv(c->fd, p, room, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        linebuf_filled(&c->in, (size_t)k);
    }
}

/* Interrupts end the connection, not the process (a recording keeps what it got). */
static volatile sig_atomic_t conn_was_interrupted;
static int conn_interrupt_fd = -1;

static void conn_interrupt_cb(int sig)
{
    (void)sig;
    conn_was_interrupted = 1;
    if (conn_interrupt_fd >= 0)
        shutdown(conn_interrupt_fd, SHUT_RDWR);
}

void conn_break_on_interrupt(struct conn *c)
{
    conn_interrupt_fd = c->fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = conn_interrupt_cb;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int conn_interrupted(void)
{
    return conn_was_interrupted;
}
