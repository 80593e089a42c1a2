/*
 * Notice execs (Linux, execwatch-linux.c): the kernel's process events
 * connector, read by the caller's loop. Root (CAP_NET_ADMIN) only.
 */
#ifndef EXECWATCH_H
#define EXECWATCH_H

#include <stddef.h>
#include <stdint.h>

/* A descriptor to poll for readability, or a negative UV_E* error. */
int execwatch_open(void);
/* The processes (tgids) that exec'd since the last read, at most max in
 * pids: their number (0: none now), or a negative UV_E* error. *lost
 * grows by the events the kernel dropped (a full socket buffer: ENOBUFS). */
int execwatch_read(int fd, uint64_t *pids, size_t max, uint64_t *lost);
void execwatch_close(int fd);

#endif
