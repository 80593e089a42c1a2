/* Scrapers of GET /metrics for the benchmarks (scrape.c): N clients on one
 * thread, each asking every interval on a keep-alive connection (a new one
 * when the server closed it), so the scrapers' own cost stays small next to
 * the daemon's and is measured apart. */
#ifndef SCRAPE_H
#define SCRAPE_H

#include <stdint.h>

struct scrape_stats {
    uint64_t ok;       /* answers 200, whole */
    uint64_t failed;   /* refused, reset, another status, cut short, timed out */
    uint64_t late;     /* turns skipped: the last answer had not come yet */
    uint64_t connects; /* connections opened (one per scrape when the server closes) */
    uint64_t retries;  /* requests sent again: a kept connection was closed idle */
    uint64_t bytes;    /* bytes read, heads included */
    double max_ms;     /* longest answer, from the request's first byte */
    double sum_ms;     /* of the answers 200 */
    double cpu_s;      /* the scraping thread's CPU time */
    double wall_s;
};

/* clients clients on 127.0.0.1:port each GET path every every_ms until
 * *stop is set (or secs seconds pass, secs > 0), on the calling thread.
 * 0, or -1 with a message on stderr (no descriptor for the clients). */
int scrape_run(int port, const char *path, int clients, int every_ms, double secs,
               volatile int *stop, struct scrape_stats *st);

#endif
