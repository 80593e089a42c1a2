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
 * as heaptrace_http_metrics_reused_total). An exposition that took longer
 * than a tenth of that to make is reused for METRICS_REUSE_FACTOR times
 * its making: scrapers keep the loop making expositions a tenth of the time
 * at most, however many sessions (200 took 65 ms each: 65% of the loop).
 * A session created or dropped since makes a new one: a dropped session
 * was still exported after its drop, a new one missing, for that time. */
#define METRICS_REUSE_MS 100
#define METRICS_REUSE_FACTOR 10

static struct {
    struct http_shared *text; /* shared by the connections still writing it */
    uint64_t at;              /* uv_hrtime when it was made, ms */
    uint64_t reuse_ms;        /* how long it is answered */
    uint32_t next_id, n;      /* the session set's when it was made */
} last;

/* The set of sessions is the one the last exposition was made of: every
 * creation takes a new id (next_id), every drop lowers n, so the pair
 * differs after any change. */
static int same_sessions(const struct server *srv)
{
    return last.next_id == srv->sessions.next_id && last.n == srv->sessions.n;
}

static void route_metrics(struct http_conn *c, struct server *srv, const char *query)
{
    (void)query;
    /* The clock now, not the loop's cached one: a request read after a long hold in the
     * same pass would take a text older than reuse_ms. */
    uint64_t now = uv_hrtime() / 1000000;
    if (last.text && now - last.at < last.reuse_ms && same_sessions(srv)) {
        srv->http.metrics_reused++;
        http_respond_shared(c, 200, "text/plain; version=0.0.4; charset=utf-8", last.text);
        return;
    }
    char *text = NULL;
    size_t n = 0;
    struct http_shared *b = NULL;
    uint64_t t0 = uv_hrtime();
    if (metrics_render(srv, &text, &n) != 0 || !(b = http_shared_new(text, n))) {
        srv->http.unavailable++;
        http_respond(c, 503, "text/plain; charset=utf-8", "out of memory\n", 14);
        return;
    }
    http_shared_unref(last.text);
    last.text = b;
    uint64_t made_ms = (uv_hrtime() - t0) / 1000000;
    last.reuse_ms = made_ms * METRICS_REUSE_FACTOR > METRICS_REUSE_MS
                        ? made_ms * METRICS_REUSE_FACTOR
                        : METRICS_REUSE_MS;
    last.at = now;
    last.next_id = srv->sessions.next_id;
    last.n = srv->sessions.n;
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
