/*
 * Subscriptions on the server side (session.h struct session_sub): record
 * gets the session's events as .htev lines, top gets its frames from its own
 * timer; both get a final reply frame when the session ends. The session
 * only calls these callbacks.
 */
#include "client.h"
#include "server-state.h"
#include "session.h"

#include "ht-alloc.h"
#include "htev-write.h"

#include <cjson/cJSON.h>
#include <string.h>

/* The line for a recorder's gap: .htev {"t":..,"ev":"lost","count":N}, or
 * in a raw ETW stream {"etw_raw_lost":N} (etw-raw.h: replayed as lost events). */
static char *record_lost_line(struct session *s, struct client *c, uint64_t t, uint64_t count)
{
    if (c->rec_raw) {
        char line[64];
        int n = snprintf(line, sizeof(line), "{\"etw_raw_lost\":%llu}\n", (unsigned long long)count);
        return ht_strndup(line, (size_t)n);
    }
    struct ht_event ev = {.t = t, .kind = HT_EV_LOST, .size = count};
    char line[128];
    size_t n = htev_format(&ev, &session_engine(s)->si, line, sizeof(line));
    return n ? ht_strndup(line, n) : NULL;
}

/* A gap ends: its "lost" line goes out before the next events (t: the first
 * event after the gap). */
static void record_gap_flush(struct session *s, struct client *c, uint64_t t)
{
    if (c->rec_lost == 0)
        return;
    if (client_send(c, record_lost_line(s, c, t, c->rec_lost)) == 0)
        c->rec_lost = 0;
}

/* A recorder whose unread output passed recorder_output_cap is behind: its
 * events become a gap, counted, until it reads again. The recording goes on
 * and the gap is in its stream, instead of the client being cut off at the
 * output cap (recorder_output_cap <= client_output_cap). */
static void record_send(struct session *s, struct client *c, const char *buf, size_t len,
                        unsigned n, uint64_t t)
{
    const struct ht_config *cfg = c->srv->cfg;
    uint64_t cap =
        cfg->recorder_cap < cfg->client_output_cap ? cfg->recorder_cap : cfg->client_output_cap;
    /* 128: room for the gap's own line. A recorder that holds unread output
     * while the daemon's queued output is at its total cap takes a gap too,
     * instead of being disconnected for it. */
    uint64_t unread = client_unread(c);
    if (unread > 0 &&
        (unread + len + 128 > cap || c->srv->out_queued + len + 128 > cfg->output_cap_total)) {
        c->rec_lost += n;
        c->rec_lost_total += n;
        session_recorder_lost(s, n);
        return;
    }
    record_gap_flush(s, c, t);
    if (client_send(c, ht_strndup(buf, len)) != 0)
        session_recorder_drops(s, n);
}

/* A batch as .htev lines to the recorder, one write per batch. */
static void record_batch(struct session *s, struct client *c, const struct ht_event *evs,
                         unsigned n)
{
    size_t cap = (size_t)n * 512 + 4096, len = 0;
    char *buf = ht_malloc(cap);
    for (unsigned i = 0; buf && i < n; i++) {
        if (cap - len < 16384 + 1024) {
            char *nb = ht_realloc(buf, cap * 2);
            if (!nb) {
                ht_free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        len += evs[i].kind == HT_EV_PROCESS
                   ? session_process_line(s, evs[i].t, buf + len, cap - len - 1)
                   : htev_format(&evs[i], &session_engine(s)->si, buf + len, cap - len - 1);
    }
    if (!buf) { /* out of memory: the batch is a gap in the recording */
        c->rec_lost += n;
        c->rec_lost_total += n;
        session_recorder_lost(s, n);
    } else if (len > 0) {
        record_send(s, c, buf, len, n, evs[0].t);
    }
    ht_free(buf);
}

static void sub_events(struct session_sub *sub, const struct ht_event *evs, size_t n)
{
    struct client *c = client_of_sub(sub);
    /* A batch's send can close the client (a write that fails at once, the
     * output cap): it is unsubscribed then (sub->s NULL) and gets no more. */
    for (size_t i = 0; i < n && sub->s; i += SESSION_BATCH)
        record_batch(sub->s, c, evs + i, n - i < SESSION_BATCH ? (unsigned)(n - i) : SESSION_BATCH);
}

/* Raw record lines (record --raw): sent as they are, a gap line for lines
 * the source dropped (its buffer full) or that found no room here. */
static void sub_raw(struct session_sub *sub, const char *buf, size_t n, uint64_t lines,
                    uint64_t lost)
{
    struct client *c = client_of_sub(sub);
    struct session *s = sub->s;
    if (lost) {
        c->rec_lost += lost;
        c->rec_lost_total += lost;
        session_recorder_lost(s, lost);
    }
    /* In pieces of whole lines of at most a quarter of the recorder's cap:
     * the tap hands over up to 8 MiB at once, and a piece that size sent to
     * an idle recorder would pass the client's output cap and close it; in
     * pieces, the first goes and the rest become a counted gap while it is
     * behind (found by integration.etw_record_raw_slow under load). */
    (void)lines; /* counted per piece */
    const struct ht_config *cfg = c->srv->cfg;
    uint64_t cap =
        cfg->recorder_cap < cfg->client_output_cap ? cfg->recorder_cap : cfg->client_output_cap;
    size_t piece = cap / 4 > 4096 ? (size_t)(cap / 4) : 4096;
    for (size_t off = 0; off < n && sub->s;) {
        size_t end = n - off > piece ? off + piece : n;
        if (end < n) { /* back to the end of a line; a longer line goes whole */
            const char *nl = NULL;
            for (size_t k = end; k > off; k--)
                if (buf[k - 1] == '\n') {
                    nl = buf + k - 1;
                    break;
                }
            if (!nl)
                nl = memchr(buf + end, '\n', n - end);
            end = nl ? (size_t)(nl - buf) + 1 : n;
        }
        unsigned nlines = 0;
        for (const char *p = buf + off; (p = memchr(p, '\n', (size_t)(buf + end - p))) != NULL; p++)
            nlines++;
        uint64_t before = c->rec_lost_total;
        record_send(s, c, buf + off, end - off, nlines, session_engine(s)->now);
        if (c->rec_lost_total == before)
            c->rec_lines += nlines;
        off = end;
    }
    if (!n && lost)
        record_gap_flush(s, c, session_engine(s)->now);
}

/* The client side of a subscription that ended. */
static void client_sub_clear(struct client *c)
{
    if (c->topping)
        uv_timer_stop(&c->timer);
    c->recording = NULL;
    c->topping = NULL;
}


/* The session is over: the final frame says why. */
static void sub_ended(struct session_sub *sub, const char *why)
{
    struct client *c = client_of_sub(sub);
    struct session *s = sub->s;
    int was_recording = c->recording == s;
    client_sub_clear(c);
    if (was_recording)
        record_gap_flush(s, c, session_engine(s)->now);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "end", why);
    cJSON_AddNumberToObject(d, "session", session_id(s));
    if (was_recording && c->rec_raw) {
        cJSON_AddNumberToObject(d, "records", (double)c->rec_lines);
        cJSON_AddNumberToObject(d, "lost", (double)c->rec_lost_total);
    } else if (was_recording) {
        cJSON_AddNumberToObject(d, "events", (double)session_recorded_events(s));
        cJSON_AddNumberToObject(d, "lost", (double)c->rec_lost_total);
    }
    client_send(c, ht_reply_ok(c->sub_req_id, d, 0));
}

static const struct session_sub_ops record_ops = {sub_events, sub_ended, NULL};
static const struct session_sub_ops raw_ops = {NULL, sub_ended, sub_raw};
static const struct session_sub_ops top_ops = {NULL, sub_ended, NULL};

void client_subscribe(struct client *c, struct session *s, int events)
{
    c->sub.ops = events ? &record_ops : &top_ops;
    c->rec_raw = 0;
    if (events)
        c->recording = s;
    else
        c->topping = s;
    session_subscribe(s, &c->sub);
}

int client_subscribe_raw(struct client *c, struct session *s, char *header, size_t hcap, size_t *hn,
                         char *err, size_t errsz)
{
    c->sub.ops = &raw_ops;
    int rc = session_subscribe_raw(s, &c->sub, header, hcap, hn, err, errsz);
    if (rc == 0) {
        c->recording = s;
        c->rec_raw = 1;
        c->rec_lines = 0;
    }
    return rc;
}

void client_unsubscribe(struct client *c)
{
    session_unsubscribe(&c->sub);
    client_sub_clear(c);
}
