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

/*
 * The exec gate (start --exe with a path): a fanotify group whose marks ask
 * for FAN_OPEN_EXEC_PERM on the image's file, so an execve of it waits in
 * the kernel until the daemon answers. The daemon takes the process then
 * (ptrace, stopping at the exec's end) and lets the exec go on: the program
 * is held before its first instruction, which the connector's notice,
 * coming after the exec while the program runs, cannot do. Closing the
 * group (the daemon's exit or kill -9 included) lets every waiting exec
 * through. Root (CAP_SYS_ADMIN) only.
 */
/* A descriptor to poll for readability, or a negative UV_E* error. */
int execgate_open(void);
/* Watch the file at path (a lookup, never a read: the mark is on its inode
 * as it is now; a file replaced later, a package upgrade, is not watched).
 * 0 or a negative UV_E* error. */
int execgate_mark(int fd, const char *path);
struct execgate_ev {
    uint64_t pid; /* the process in execve (its tgid) */
    int fd;       /* the event's: execgate_answer closes it */
};
/* The waiting execs since the last read, at most max: their number, or a
 * negative UV_E* error. Each must be answered. *lost grows by the kernel's
 * queue overflows. */
int execgate_read(int fd, struct execgate_ev *evs, size_t max, uint64_t *lost);
/* Let the exec go on (never refused: the gate only delays it). */
void execgate_answer(int fd, struct execgate_ev *ev);

#endif
