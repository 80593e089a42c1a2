/* What the HTTP listener serves: one table entry per path. Every route is
 * read-only: no command that changes anything is reachable over HTTP. */
#include "routes.h"

#include "ht-error.h"
#include "metrics.h"

#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

/* GET /metrics: the Prometheus text exposition, made on the loop from the
 * sessions' status (what `heaptracectl metrics` prints). Scrapes within
 * METRICS_REUSE_MS of the last one are answered with its text: many
 * scrapers cost the loop one exposition per period, not one each (counted
 * as heaptrace_http_metrics_reused_total). */
#define METRICS_REUSE_MS 100

static struct {
    char *text;
    size_t n;
    uint64_t at; /* uv_now, ms */
} last;

static void route_metrics(struct http_conn *c, struct server *srv, const char *query)
{
    (void)query;
    uint64_t now = uv_now(srv->loop);
    if (last.text && now - last.at < METRICS_REUSE_MS) {
        srv->http.metrics_reused++;
        http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", last.text, last.n);
        return;
    }
    char *text = NULL;
    size_t n = 0;
    if (metrics_render(srv, &text, &n) != 0) {
        srv->http.unavailable++;
        http_respond(c, 503, "text/plain; charset=utf-8", "out of memory\n", 14);
        return;
    }
    free(last.text);
    last.text = text;
    last.n = n;
    last.at = now;
    http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, n);
}

void routes_free(void)
{
    free(last.text);
    last.text = NULL;
}

const struct http_route http_routes[] = {
    {"/metrics", route_metrics},
    {NULL, NULL},
};
