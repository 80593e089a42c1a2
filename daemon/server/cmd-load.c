/*
 * load: a new replay session fed by this client. After the acknowledgement
 * the client sends the .htev bytes as chunks, each "<length>\n" then that
 * many bytes, and "0\n" at the end; the final reply gives the ingest summary.
 * The daemon never opens the file: the ctl reads it with the user's rights.
 * This file keeps only the chunk framing: the bytes go to the session's
 * stream source (source.h, SOURCE_STREAM: replay) through its space/write/
 * close_input; the session drains it. The client stops being read while the
 * source's input is full.
 */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-chunk.h"
#include "ht-error.h"
#include "ht-units.h"
#include "log.h"
#include "sources.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void load_drained(struct session *s);
static void load_source_end(struct session *s);

/* The session is dropped while its stream comes: the loader is told, and
 * closed (the rest of its stream has nowhere to go). */
static void load_dropped(struct session *s)
{
    struct client *c = session_loader(s);
    if (!c)
        return;
    c->loading = NULL;
    session_set_loader(s, NULL);
    client_send(c, ht_reply_err(c->load_req_id, HT_ENOSESSION, "session dropped during load"));
    c->mode = CLIENT_LINES;
    c->srv->close_client(c);
}

int cmd_load(struct cmd_ctx *ctx)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "name");
    char err[512];
    const struct source_ops *ops = source_pick(SOURCE_STREAM, NULL, err, sizeof(err));
    if (!ops)
        return cmd_error(ctx, HT_ENOTSUP, "%s", err);
    int rc =
        session_admit_for(&ctx->srv->sessions, name ? name->valuestring : NULL, ctx->c->uid, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    struct session *s =
        session_new(&ctx->srv->sessions, name ? name->valuestring : NULL, ops->name, err, sizeof(err));
    if (!s)
        return cmd_error(ctx, HT_ENOMEM, "%s", err);
    session_set_owner(s, ctx->c->uid);
    rc = session_add_triggers(s, ctx->req->args, err, sizeof(err));
    if (rc != 0) {
        session_drop(s);
        return cmd_error(ctx, rc, "%s", err);
    }
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_STREAM;
    session_set_state(s, SESSION_LOADING);
    session_set_input_hooks(s, load_drained, load_source_end, load_dropped);
    rc = session_source_begin(s, ops, &p, err, sizeof(err));
    if (rc != 0) {
        session_drop(s);
        return cmd_error(ctx, rc == UV_ENOMEM ? HT_ENOMEM : HT_EINTERNAL, "%s", err);
    }
    session_set_loader(s, ctx->c);
    ctx->c->loading = s;
    ctx->c->load_req_id = ctx->req->id;
    ctx->c->mode = CLIENT_STREAM;
    ctx->c->chunk_left = 0;
    ctx->c->in_len = 0;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON_AddStringToObject(d, "name", session_name(s));
    cJSON_AddStringToObject(d, "send", "chunks: <length>\\n<bytes>, then 0\\n");
    client_send(ctx->c, ht_reply_ok(ctx->req->id, d, 1));
    return 0;
}

static void load_summary(struct client *c, struct session *s)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON_AddStringToObject(d, "name", session_name(s));
    cJSON_AddStringToObject(d, "state", session_state_name(session_state(s)));
    if (session_stop_reason(s)[0])
        cJSON_AddStringToObject(d, "stop_reason", session_stop_reason(s));
    /* The ingest figures sit at the top level of the summary. */
    cJSON *in = session_ingest_json(s), *m;
    while ((m = in->child) != NULL)
        cJSON_AddItemToObject(d, m->string, cJSON_DetachItemViaPointer(in, m));
    cJSON_Delete(in);
    client_send(c, ht_reply_ok(c->load_req_id, d, 0));
}

/* The loader gets its summary and is a line client again; what it sent
 * after the end chunk is read as requests. */
static void loader_done(struct client *c, struct session *s)
{
    c->loading = NULL;
    c->mode = CLIENT_LINES;
    c->in_len = 0;
    load_summary(c, s);
    char *after = c->after;
    size_t n = c->after_len;
    c->after = NULL;
    c->after_len = 0;
    if (after && !c->closing)
        c->srv->feed_client(c, after, n);
    ht_free(after);
    if (!c->closing)
        c->srv->resume_client(c);
}

/* The source is over: drained to the end, or its session stopped. */
static void load_source_end(struct session *s)
{
    struct client *c = session_loader(s);
    if (!c)
        return;
    if (c->mode == CLIENT_DRAINING) {
        /* The summary waits for the snapshots the load took: what the
         * client asks next sees them whole (query-job.h runs them). */
        if (session_snapshots_pending(s))
            return;
        session_set_loader(s, NULL);
        loader_done(c, s);
    } else {
        c->srv->resume_client(c); /* stopped early: the rest of its stream is read and dropped */
    }
}

/* After each drain: a paused loader reads again once its source has room. */
static void load_drained(struct session *s)
{
    struct client *c = session_loader(s);
    if (c && c->mode == CLIENT_STREAM && session_taking_input(s) &&
        session_input_space(s) >= CLIENT_READ_MAX)
        c->srv->resume_client(c);
}

int load_stream_full(const struct client *c)
{
    const struct session *s = c->loading;
    return s && session_taking_input(s) && session_input_space(s) < CLIENT_READ_MAX;
}

/* The input ended (end chunk, disconnect, bad framing): the session ends
 * once the source has applied what came before. */
void load_stream_end(struct client *c, const char *why)
{
    struct session *s = c->loading;
    c->in_len = 0;
    if (s && c->mode == CLIENT_DRAINING) {
        /* Gone after its end chunk: the session ends as it would have. */
        session_set_loader(s, NULL);
        c->loading = NULL;
        return;
    }
    if (!s || !session_taking_input(s)) {
        /* Stopped before its end: the summary can go now. */
        c->loading = NULL;
        c->mode = CLIENT_LINES;
        if (s)
            session_set_loader(s, NULL);
        if (s && !why)
            load_summary(c, s);
        return;
    }
    if (why) {
        session_set_end_reason(s, why);
        session_set_loader(s, NULL);
        c->loading = NULL;
        c->mode = CLIENT_LINES;
    } else {
        c->mode = CLIENT_DRAINING;
        c->srv->pause_client(c);
    }
    session_input_close(s);
}

static void stream_error(struct client *c, const char *msg)
{
    int64_t id = c->load_req_id;
    load_stream_end(c, "bad chunk framing from the client");
    client_send(c, ht_reply_err(id, HT_EBADARG, msg));
    c->srv->close_client(c); /* framing is lost: nothing after this can be read safely */
}

/* Keep what the client sent after its end chunk until the summary is out. */
static void keep_after(struct client *c, const char *buf, size_t n)
{
    char *nb = ht_realloc(c->after, c->after_len + n);
    if (!nb) {
        c->srv->close_client(c);
        return;
    }
    memcpy(nb + c->after_len, buf, n);
    c->after = nb;
    c->after_len += n;
}

void load_stream_bytes(struct client *c, const char *buf, size_t n)
{
    if (c->mode == CLIENT_DRAINING) {
        keep_after(c, buf, n);
        return;
    }
    while (n > 0 && c->mode == CLIENT_STREAM && !c->closing) {
        struct session *s = c->loading;
        if (c->chunk_left == 0) {
            /* Chunk header: decimal length and a newline. */
            const char *nl = memchr(buf, '\n', n);
            size_t take = nl ? (size_t)(nl - buf) + 1 : n;
            if (c->in_len + take > 24) {
                stream_error(c, "load: chunk header too long");
                return;
            }
            memcpy(c->in + c->in_len, buf, take);
            c->in_len += take;
            buf += take;
            n -= take;
            if (!nl)
                return;
            uint64_t len;
            if (ht_chunk_length(c->in, c->in_len - 1, &len) != 0) {
                stream_error(c, "load: bad chunk header (expected decimal digits, a length up "
                                "to 4194304 without sign or leading zeros, then a newline)");
                return;
            }
            c->in_len = 0;
            if (len == 0) {
                load_stream_end(c, NULL);
                if (n > 0 && !c->closing) {
                    if (c->mode == CLIENT_DRAINING)
                        keep_after(c, buf, n);
                    else
                        c->srv->feed_client(c, buf, n); /* a request again */
                }
                return;
            }
            c->chunk_left = len;
            continue;
        }
        size_t take = n < c->chunk_left ? n : (size_t)c->chunk_left;
        /* Reading pauses while the source has less room than one read, so
         * this always fits; a stopped session drops the rest. */
        if (s && session_taking_input(s))
            session_input_write(s, buf, take);
        c->chunk_left -= take;
        buf += take;
        n -= take;
    }
}
