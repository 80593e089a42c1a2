/* The ctl's connection to the daemon: blocking, line-oriented. */
#ifndef CONN_H
#define CONN_H

#include <stddef.h>

struct conn {
    int fd;
    char *buf;
    size_t len, off, cap;
};

/* Connect to the endpoint. 0, or -1 with a message in err. */
int conn_open(struct conn *c, const char *path, char *err, size_t errsz);
void conn_close(struct conn *c);
/* Write everything. 0 or -1. */
int conn_send(struct conn *c, const void *buf, size_t n);
/* Close our sending side (the daemon sees the end of input). */
void conn_shutdown_write(struct conn *c);
/* Next line without its newline (malloc'd), NULL at end of stream or past max bytes. */
char *conn_read_line(struct conn *c, size_t max);

#endif
