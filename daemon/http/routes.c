/* What the HTTP listener serves: one table entry per path. Every route is
 * read-only: no command that changes anything is reachable over HTTP. */
#include "routes.h"

#include "ht-error.h"
#include "metrics.h"

#include <stdlib.h>

/* GET /metrics: the Prometheus text exposition, made on the loop from the
 * sessions' status (what `heaptracectl metrics` prints). */
static void route_metrics(struct http_conn *c, struct server *srv, const char *query)
{
    (void)query;
    char *text = NULL;
    size_t n = 0;
    if (metrics_render(srv, &text, &n) != 0) {
        srv->http.unavailable++;
        http_respond(c, 503, "text/plain; charset=utf-8", "out of memory\n", 14);
        return;
    }
    http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, n);
    free(text);
}

const struct http_route http_routes[] = {
    {"/metrics", route_metrics},
    {NULL, NULL},
};
