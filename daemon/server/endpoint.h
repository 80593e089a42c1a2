/* Platform: the control endpoint. It listens, produces connected clients and
 * admits their peers (endpoint-unix.c; endpoint-win.c on Windows). */
#ifndef ENDPOINT_H
#define ENDPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* A listening endpoint, owned by the platform file (opaque). */
struct endpoint;

/* A client is waiting (status 0), or accepting failed (status < 0: counted
 * and logged by the server; the endpoint keeps listening). Runs on the loop
 * thread. With status 0 the callback calls endpoint_accept once. */
typedef void (*endpoint_connection_cb)(void *arg, int status);

/* Listen on path: refuse a path another daemon answers on or that is not
 * ours to replace (err says why, HT_EEXIST / HT_EPERM / HT_EBADARG), create
 * the listener with its access rules set at creation, and call cb on loop for
 * every connection. On error nothing is left open. *out is freed by
 * endpoint_close.
 * Unix: a unix socket made 0660, group heaptrace, in a checked directory;
 * libuv accepts. Windows: every pipe instance is made by the endpoint with
 * CreateNamedPipeW and an explicit SDDL (the first one with
 * FILE_FLAG_FIRST_PIPE_INSTANCE, all with PIPE_REJECT_REMOTE_CLIENTS), since
 * libuv cannot give a pipe a DACL (docs/windows.md#the-pipes-security-descriptor); ConnectNamedPipe
 * completes off the loop and wakes it with a uv_async_t, whose callback calls
 * cb once per connected instance.
 * operators (pipe_operators_group; NULL or "" for none) names a group whose
 * members may talk to the daemon without being the administrator: Windows
 * gives it read/write on every instance (never FILE_CREATE_PIPE_INSTANCE);
 * an unknown group is HT_EBADARG. Unix has its group heaptrace and refuses
 * the option (HT_EBADARG). */
int endpoint_listen(uv_loop_t *loop, const char *path, const char *operators,
                    endpoint_connection_cb cb, void *arg, struct endpoint **out, char *err,
                    size_t errsz);
/* Hand the waiting connection to client, a uv_pipe_t initialized on the
 * endpoint's loop and not yet open: on success it is connected and ready for
 * uv_read_start. Unix: uv_accept. Windows: uv_pipe_open on the connected
 * (overlapped) instance, which takes a CRT descriptor: _open_osfhandle
 * first (libuv src/win/pipe.c, uv_pipe_open calls uv__get_osfhandle); a new
 * instance takes its place. 0 or a UV_E* code. */
int endpoint_accept(struct endpoint *ep, uv_pipe_t *client);
/* Stop listening, remove what listen created (the socket file), and free ep
 * once its handles are closed; the loop then ends by itself. */
void endpoint_close(struct endpoint *ep);

/* 0 if the peer of a connected client may talk to us (*uid = its user, 0
 * for the administrator: root, or LocalSystem and elevated Administrators on
 * Windows), else HT_EPERM with who it was in err.
 * Unix: SO_PEERCRED. Windows: the pipe's DACL already admits only those, and
 * the client's token is checked again (ImpersonateNamedPipeClient). */
int endpoint_admit(uv_pipe_t *client, uint32_t *uid, char *err, size_t errsz);
/* The peer's groups as they were at its connect, for acting with its
 * rights (trace-access.h): its gid and its supplementary groups, at most cap
 * of them (a peer with more is refused, HT_EPERM: never checked with fewer
 * groups than it has). 0 or HT_EPERM with why in err.
 * Unix: SO_PEERCRED and SO_PEERGROUPS (Linux 4.13). Windows: gid 0 and no
 * groups (only the administrator traces there). */
int endpoint_peer_groups(uv_pipe_t *client, uint32_t *gid, uint32_t *groups, uint32_t cap,
                         uint32_t *n, char *err, size_t errsz);
/* The peer's pid as it was at its connect (the program `run` execs keeps
 * it). Unix: SO_PEERCRED; Windows: UV_ENOTSUP. */
int endpoint_peer_pid(uv_pipe_t *client, uint64_t *pid);
/* 0 while the process can take one more client, else UV_EMFILE or UV_ENFILE:
 * the newest client (which took the last descriptor) is then refused, so the
 * next accept has one. Windows has no descriptor limit here: always 0. */
int endpoint_headroom(uv_pipe_t *client);
/* 1 if h, just opened, took one of the process's last reserve descriptors
 * (the HTTP listener then closes it, leaving them to the control socket).
 * Windows has no descriptor limit here: always 0. */
int endpoint_in_reserve(uv_handle_t *h, unsigned reserve);
/* Writes a short line into a client's fresh connection without waiting and
 * without a request (refusals: the client is closed right after): the
 * bytes written, or a UV_E* code. Unix: uv_try_write. Windows: libuv 1.44's
 * uv_try_write always says UV_EAGAIN for a pipe (src/win/stream.c), so the
 * line is written with WriteFile, its completion kept off libuv's port. */
int endpoint_try_write(uv_pipe_t *client, const char *buf, size_t n);

#endif
