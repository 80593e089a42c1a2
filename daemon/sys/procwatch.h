/*
 * Notice a process's exit on the loop: watch a pid, and a callback runs on
 * the loop thread once it has exited, with its exit status.
 * procwatch-linux.c: a pidfd (pidfd_open) polled by the loop, the exit
 * status as the eBPF source reads it (procwatch_exit_status);
 * procwatch-win.c: OpenProcess(SYNCHRONIZE) + RegisterWaitForSingleObject,
 * whose thread-pool callback wakes the loop through a uv_async.
 */
#ifndef PROCWATCH_H
#define PROCWATCH_H

#include <stdint.h>
#include <uv.h>

struct procwatch;

/* code: the exit code (Windows: GetExitCodeProcess; Linux: the exit code, or
 * 128 + the signal that killed it), known = 0 when it could not be read. */
typedef void (*procwatch_cb)(void *arg, uint64_t pid, int known, int code);

/* Watch pid; cb runs once on loop's thread after the process exited (also
 * when it had already exited but could still be opened). 0, UV_ENOENT (no
 * such process), UV_EACCES, or another UV_E* error. */
int procwatch_start(uv_loop_t *loop, uint64_t pid, procwatch_cb cb, void *arg,
                    struct procwatch **out);

/* Stop watching (cb no longer runs) and free the watch once the loop has
 * closed its handles. Safe from within cb. */
void procwatch_stop(struct procwatch *w);

#ifndef _WIN32
/* The exit status (wait(2) form) of pid, which exited: from its zombie's
 * /proc entry while its parent has not reaped it, else from its pidfd
 * (PIDFD_GET_INFO, Linux 6.15) once reaped; retried briefly (the pidfd wakes
 * before either is there). 0, or -1 when neither told. */
int procwatch_exit_status(uint64_t pid, int pidfd, int *status);
#endif

#endif
