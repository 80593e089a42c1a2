/* Unix-socket connection for the ctl. */
#include "conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int conn_open(struct conn *c, const char *path, char *err, size_t errsz)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errsz, "endpoint path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errsz, "cannot reach heaptraced at %s: %s%s", path, strerror(errno),
                 errno == ENOENT || errno == ECONNREFUSED ? " (is the daemon running?)"
                 : errno == EACCES                        ? " (root or group heaptrace needed)"
                                                          : "");
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->cap = 1 << 16;
    c->buf = malloc(c->cap);
    return c->buf ? 0 : -1;
}

void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
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
        char *nl = memchr(c->buf + c->off, '\n', c->len - c->off);
        if (nl) {
            size_t n = (size_t)(nl - (c->buf + c->off));
            char *line = malloc(n + 1);
            if (!line)
                return NULL;
            memcpy(line, c->buf + c->off, n);
            line[n] = '\0';
            c->off += n + 1;
            return line;
        }
        if (c->off > 0) {
            memmove(c->buf, c->buf + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        }
        if (c->len == c->cap) {
            if (c->cap >= max)
                return NULL;
            char *nb = realloc(c->buf, c->cap * 2);
            if (!nb)
                return NULL;
            c->buf = nb;
            c->cap *= 2;
        }
        ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return NULL;
        c->len += (size_t)k;
    }
}
