/* Platform: the operator's requests to stop the daemon, delivered on the loop
 * (stop-unix.c; stop-win.c on Windows). */
#ifndef STOP_H
#define STOP_H

#include <uv.h>

/* Watches for stop requests (opaque, owned by the platform file). */
struct stop_watch;

/* Runs on the loop thread; why says what asked ("signal 15"). */
typedef void (*stop_cb)(void *arg, const char *why);

/* From now on call cb on loop whenever a stop is requested (it may come more
 * than once). 0 or a UV_E* code; *out is freed by stop_watch_close.
 * Unix: SIGINT and SIGTERM through uv_signal_t, and SIGPIPE is ignored (a
 * client that went away fails its write with EPIPE instead).
 * Windows: there is no SIGPIPE. The service control handler
 * (SERVICE_CONTROL_STOP and _SHUTDOWN) and, in the foreground, the console
 * control handler (Ctrl-C) run on threads of their own: they record why and
 * wake the loop through one uv_async_t, whose callback calls cb. */
int stop_watch_start(uv_loop_t *loop, stop_cb cb, void *arg, struct stop_watch **out);
/* Stop watching; sw is freed once its handles are closed. */
void stop_watch_close(struct stop_watch *sw);
/* Ask the running watch for a stop, from any thread (the Windows service
 * control handler calls it): why is copied, and cb gets it on the loop. A
 * request made while no watch runs is dropped. */
void stop_watch_request(const char *why);

#endif
