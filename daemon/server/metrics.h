/* The daemon and its sessions in the Prometheus text exposition format,
 * version 0.0.4 (metrics.c): served by `metrics` and by GET /metrics. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef METRICS_H
#define METRICS_H

#include "server-state.h"

#include <stddef.h>

/* The exposition, made on the loop from the session layer's status
 * (session_status_json) and the server's counters: 0 with *out (malloc'd,
 * NUL-terminated, *len bytes; the caller frees it), or HT_ENOMEM. */
int metrics_render(struct server *srv, char **out, size_t *len);
/* Frees the sites kept between expositions (once the loop has ended: no
 * refresh job is left). */
void metrics_sites_free(struct server *srv);

#endif
