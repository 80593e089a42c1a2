/* Platform: the ctl's connection to the daemon, blocking and line-oriented
 * (conn-unix.c; conn-win.c on Windows). */
#ifndef CONN_H
#define CONN_H

#include <stddef.h>

/* A connection (opaque: the platform file keeps the socket or pipe handle). */
struct conn;

/* Connect to the endpoint and check that a genuine daemon answers there.
 * 0 and *out (freed by conn_close), or -1 with a message in err.
 * Unix: the listener must be root or ourselves (SO_PEERCRED). Windows: the
 * pipe opened with GENERIC_READ | FILE_WRITE_DATA (never FILE_CREATE_PIPE_
 * INSTANCE: docs/windows.md#the-pipes-security-descriptor), its server
 * process checked likewise. */
int conn_open(struct conn **out, const char *path, char *err, size_t errsz);
/* Close and free c (NULL is fine). */
void conn_close(struct conn *c);
/* Write everything. 0 or -1. */
int conn_send(struct conn *c, const void *buf, size_t n);
/* Close our sending side (the daemon sees the end of input). */
void conn_shutdown_write(struct conn *c);
/* Next line without its newline (malloc'd), NULL at end of stream or past max bytes. */
char *conn_read_line(struct conn *c, size_t max);
struct ht_chunk_reader;
/* A chunked byte stream (ht-chunk.h) read to its end chunk, each chunk's
 * bytes to out as they come; the lines after it stay for conn_read_line.
 * 0, or -1 at end of stream or on a bad chunk header. */
int conn_read_chunks(struct conn *c, struct ht_chunk_reader *r,
                     void (*out)(void *arg, const void *buf, size_t n), void *arg);

/* From now on an interrupt (Ctrl-C, SIGTERM) ends c instead of the process:
 * a blocked or later conn_read_line returns NULL and conn_interrupted() is 1.
 * Unix: a signal handler shuts the socket down (shutdown(2) is
 * async-signal-safe). Windows: a console control handler, on a thread of its
 * own, cancels the pending read (CancelIoEx). */
void conn_break_on_interrupt(struct conn *c);
/* 1 once an interrupt ended the connection given to conn_break_on_interrupt. */
int conn_interrupted(void);

#endif
