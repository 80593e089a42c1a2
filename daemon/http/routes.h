/* What the HTTP listener serves (routes.c): one entry per path, read-only.
 * The profile paths (/debug/pprof/heap, /allocs) are in route-pprof.h. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef ROUTES_H
#define ROUTES_H

#include "http.h"

/* Ended by {NULL, NULL}; passed to http_start by the daemon's startup. */
extern const struct http_route http_routes[];
/* What the routes keep between requests (the last exposition), freed. */
void routes_free(void);

#endif
