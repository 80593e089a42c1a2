/* top: a subscription that pushes the top stacks and the session's figures every interval. */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-units.h"
#include "query-args.h"
#include "query-job.h"

#include <cjson/cJSON.h>

/* Below 10 ms a refresh is more work than anyone can read; a day is the
 * longest interval worth a live view. */
#define TOP_INTERVAL_MIN 10000000ULL
#define TOP_INTERVAL_MAX 86400000000000ULL
/* A subscriber that read no byte for this long is not waited for. */
#define TOP_STALL_MS 3000

/* The session's figures at the instant of the view, sent with its stacks. */
struct top_figures {
    uint64_t now, outstanding, outstanding_count, committed, private_bytes, events;
};

static void top_opened(struct qjob *j)
{
    struct top_figures *f = j->arg;
    const struct engine *e = session_engine(j->s);
    f->now = e->now;
    f->outstanding = e->heap_bytes;
    f->outstanding_count = e->heap_count;
    f->committed = e->commits.bytes;
    f->private_bytes = e->private_bytes;
    f->events = e->q.events;
}

static void top_done(struct qjob *j)
{
    struct client *c = j->c;
    struct session *s = j->s;
    if (c)
        c->top_job = NULL;
    /* The client went, or its subscription ended meanwhile: nothing to send. */
    if (!c || c->closing || c->topping != s || session_dropped(s))
        return;
    if (j->rc) { /* the query failed (out of memory): this refresh is not sent */
        c->srv->top_frames_failed++;
        return;
    }
    const struct top_figures *f = j->arg;
    cJSON *d = session_top_result(j, 0);
    if (!d) {
        c->srv->top_frames_failed++;
        return;
    }
    cJSON_AddNumberToObject(d, "seq", (double)++c->top_seq);
    cJSON_AddStringToObject(d, "state", session_state_name(session_state(s)));
    cJSON_AddNumberToObject(d, "now", (double)f->now);
    cJSON_AddNumberToObject(d, "outstanding", (double)f->outstanding);
    cJSON_AddNumberToObject(d, "outstanding_count", (double)f->outstanding_count);
    cJSON_AddNumberToObject(d, "committed", (double)f->committed);
    cJSON_AddNumberToObject(d, "private_bytes", (double)f->private_bytes);
    cJSON_AddNumberToObject(d, "events", (double)f->events);
    int last = c->top_left == 1;
    if (c->top_left)
        c->top_left--;
    int64_t id = c->sub_req_id;
    if (last)
        client_unsubscribe(c);
    int caught_up = client_unread(c) == 0;
    char *line = qjob_reply_line(j, 0, id, d, !last);
    if (!line)
        c->srv->top_frames_failed++;
    if (client_send(c, line) != 0 || last || !caught_up)
        return;
    /* A client that had read everything gets its time to read this frame
     * from now, not from the tick that asked for it: building a big frame
     * can take longer than TOP_STALL_MS (1000 rows of deep stacks: about
     * 1 s). One that was not reading stays stalled (the caps drop it). */
    uv_update_time(c->srv->loop);
    c->top_progress_ms = uv_now(c->srv->loop);
    c->top_unread = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) + c->oq_bytes;
}

static void top_tick_cb(uv_timer_t *t)
{
    struct client *c = t->data;
    struct session *s = c->topping;
    if (!s || c->closing)
        return;
    /* A refreshing view: while the client reads what it was sent (the last
     * frame, or a reply queued on the same connection), a refresh is skipped
     * rather than queued behind it. Queued, frames of a big session (1000
     * rows of deep stacks: 11 MiB) passed client_output_cap within a few
     * ticks and cut off a ctl that reads. A client that read nothing for
     * TOP_STALL_MS is sent the refresh anyway: the output caps drop it.
     * Progress is libuv's write queue falling (partial writes of a frame
     * count; a write's callback comes only once all of it is written). */
    uint64_t unread = client_unread(c), now = uv_now(c->srv->loop);
    uint64_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) + c->oq_bytes;
    if (unread == 0 || queued < c->top_unread)
        c->top_progress_ms = now;
    c->top_unread = queued;
    if ((c->oq_head || unread > 0) && now - c->top_progress_ms < TOP_STALL_MS) {
        c->srv->top_frames_skipped++;
        return;
    }
    /* The refresh's query runs on a worker (query-job.h); one at a time per client. */
    if (c->top_job) {
        c->srv->top_frames_skipped++;
        return;
    }
    struct qjob *j = session_top_job(s, HT_DOM_HEAP, c->top_rows, "top");
    struct top_figures *f = j ? ht_calloc(1, sizeof(*f)) : NULL;
    if (!f) {
        c->srv->top_frames_failed++;
        qjob_free(j);
        return;
    }
    j->arg = f;
    j->release = ht_free;
    j->render = QJOB_ROWS_TEXT; /* 1000 rows of deep stacks: made off the loop */
    j->opened = top_opened;
    j->done = top_done;
    j->for_client = 1;
    qjob_attach(j, c);
    c->top_job = j;
    if (session_query_submit(j) != 0) { /* the session is busy: this refresh is skipped */
        c->srv->top_frames_skipped++;
        qjob_free(j);
    }
}

int cmd_top(struct cmd_ctx *ctx)
{
    uint64_t interval = 1000000000ULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "interval");
    if (v && (ht_parse_duration(v->valuestring, &interval) != 0 || interval < TOP_INTERVAL_MIN ||
              interval > TOP_INTERVAL_MAX))
        return cmd_error(ctx, HT_EBADARG,
                         "--interval \"%.32s\" must be a duration from 10ms to 1d (like 500ms, 2s)",
                         v->valuestring);
    if (ctx->c->recording || ctx->c->topping)
        return cmd_error(ctx, HT_ESTATE, "this connection already has a subscription");
    if (ctx->c == session_loader(ctx->s))
        return cmd_error(ctx, HT_ESTATE, "the loading connection cannot subscribe");
    v = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "top");
    ctx->c->top_rows = v ? (uint32_t)v->valuedouble : 20;
    if (ctx->c->top_rows == 0 || ctx->c->top_rows > 1000)
        return cmd_error(ctx, HT_EBADARG, "--top must be between 1 and 1000");
    v = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "count");
    ctx->c->top_left = v ? (uint64_t)v->valuedouble : 0;
    ctx->c->sub_req_id = ctx->req->id;
    ctx->c->top_seq = 0;
    ctx->c->top_unread = 0;
    ctx->c->top_progress_ms = uv_now(ctx->srv->loop);
    client_subscribe(ctx->c, ctx->s, 0);
    uint64_t ms = interval / 1000000ULL;
    uv_timer_start(&ctx->c->timer, top_tick_cb, 0, ms);
    return 0;
}
