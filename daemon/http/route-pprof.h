/* GET /debug/pprof/heap and /debug/pprof/allocs (route-pprof.c): a
 * session's profile, Linux builds (HEAPTRACE_WITH_PPROF). heap: Go's
 * inuse_space shown by default; allocs: alloc_space. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef ROUTE_PPROF_H
#define ROUTE_PPROF_H

#include "http.h"

void route_pprof_heap(struct http_conn *c, struct server *srv, const char *query);
void route_pprof_allocs(struct http_conn *c, struct server *srv, const char *query);

#endif
