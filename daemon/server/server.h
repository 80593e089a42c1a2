/* heaptraced's server (server.c): starts and stops the listener, the
 * timers and the sessions; its state is server-state.h. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SERVER_H
#define SERVER_H

#include "server-state.h"

/* The server's state and handles on loop, not listening, with no timer
 * started and no stop requests watched (server_stop closes them). */
void server_init(struct server *srv, uv_loop_t *loop, struct ht_config *cfg);
/* server_init, then listen on cfg->endpoint, watch for stop requests
 * (sys/stop.h) and start the timers. 0 or an error (already running, bad path); on error the
 * handles are closed and the loop ends by itself. */
int server_start(struct server *srv, uv_loop_t *loop, struct ht_config *cfg);
/* Close every session, client and handle; the loop then ends by itself. */
void server_stop(struct server *srv);

#endif
