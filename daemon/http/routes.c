/* What the HTTP listener serves: one table entry per path. Every route is
 * read-only: no command that changes anything is reachable over HTTP. */
#include "routes.h"

#include "ht-error.h"
#include "metrics.h"
#ifdef HEAPTRACE_WITH_PPROF
#include "route-pprof.h"
#endif

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
    struct http_shared *text; /* shared by the connections still writing it */
    uint64_t at;              /* uv_now, ms */
} last;

static void route_metrics(struct http_conn *c, struct server *srv, const char *query)
{
    (void)query;
    uint64_t now = uv_now(srv->loop);
    if (last.text && now - last.at < METRICS_REUSE_MS) {
        srv->http.metrics_reused++;
        http_respond_shared(c, 200, "text/plain; version=0.0.4; charset=utf-8", last.text);
        return;
    }
    char *text = NULL;
    size_t n = 0;
    struct http_shared *b = NULL;
    if (metrics_render(srv, &text, &n) != 0 || !(b = http_shared_new(text, n))) {
        srv->http.unavailable++;
        http_respond(c, 503, "text/plain; charset=utf-8", "out of memory\n", 14);
        return;
    }
    http_shared_unref(last.text);
    last.text = b;
    last.at = now;
    http_respond_shared(c, 200, "text/plain; version=0.0.4; charset=utf-8", b);
}

void routes_free(void)
{
    http_shared_unref(last.text);
    last.text = NULL;
}

const struct http_route http_routes[] = {
    {"/metrics", route_metrics},
#ifdef HEAPTRACE_WITH_PPROF
    {"/debug/pprof/heap", route_pprof_heap},
    {"/debug/pprof/allocs", route_pprof_allocs},
#endif
    {NULL, NULL},
};
