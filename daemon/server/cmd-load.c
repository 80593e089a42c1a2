/*
 * load: a new replay session fed by this client. After the acknowledgement
 * the client sends the .htev bytes as chunks, each "<length>\n" then that
 * many bytes, and "0\n" at the end; the final reply gives the ingest summary.
 * The daemon never opens the file: the ctl reads it with the user's rights.
 */
#include "server.h"

#include "ht-error.h"
#include "ht-units.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_CHUNK_MAX (4u << 20)

static int add_triggers(struct session *s, const cJSON *args, char *err, size_t errsz)
{
    uint64_t every = 0;
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(args, "every");
    if (ev && !cJSON_IsNumber(ev) && ht_parse_size(ev->valuestring, &every) != 0)
        return HT_EBADARG;
    if (cJSON_IsNumber(ev))
        every = (uint64_t)ev->valuedouble;
    static const char *const keys[] = {"stop_when", "snapshot_when"};
    for (int k = 0; k < 2; k++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(args, keys[k]))
        {
            int rc = session_add_trigger(s, it->valuestring, k, every, err, errsz);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int cmd_load(struct cmd_ctx *ctx)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "name");
    char err[256];
    struct session *s =
        session_new(ctx->srv, name ? name->valuestring : NULL, "replay", err, sizeof(err));
    if (!s)
        return cmd_error(ctx, strstr(err, "exists") ? HT_EEXIST : HT_EFULL, "%s", err);
    int rc = add_triggers(s, ctx->req->args, err, sizeof(err));
    if (rc != 0) {
        session_drop(s);
        return cmd_error(ctx, rc, "%s", err);
    }
    s->state = SESSION_LOADING;
    s->loader = ctx->c;
    ctx->c->loading = s;
    ctx->c->load_req_id = ctx->req->id;
    ctx->c->mode = CLIENT_STREAM;
    ctx->c->chunk_left = 0;
    ctx->c->in_len = 0;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", s->id);
    cJSON_AddStringToObject(d, "name", s->name);
    cJSON_AddStringToObject(d, "send", "chunks: <length>\\n<bytes>, then 0\\n");
    client_send(ctx->c, ht_reply_ok(ctx->req->id, d, 1));
    return 0;
}

static void load_summary(struct client *c, struct session *s)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", s->id);
    cJSON_AddStringToObject(d, "name", s->name);
    cJSON_AddStringToObject(d, "state", session_state_name(s->state));
    if (s->stop_reason[0])
        cJSON_AddStringToObject(d, "stop_reason", s->stop_reason);
    /* The ingest figures sit at the top level of the summary. */
    cJSON *in = session_ingest_json(s), *m;
    while ((m = in->child) != NULL)
        cJSON_AddItemToObject(d, m->string, cJSON_DetachItemViaPointer(in, m));
    cJSON_Delete(in);
    client_send(c, ht_reply_ok(c->load_req_id, d, 0));
}

void load_stream_end(struct client *c, const char *why)
{
    struct session *s = c->loading;
    c->loading = NULL;
    c->mode = CLIENT_LINES;
    c->in_len = 0;
    if (!s)
        return;
    s->loader = NULL;
    /* A stopped session takes no more input, not even a last partial line. */
    if (s->state == SESSION_LOADING)
        replay_finish(&s->replay);
    session_flush(s);
    if (s->state == SESSION_LOADING) {
        /* Stopping tells the subscribers (record, top) the stream is over;
         * a stream that ran out is "ended" rather than "stopped". */
        session_stop(s, why ? why : "end of stream");
        s->state = SESSION_ENDED;
    }
    log_info("session %u: load ended (%s): %llu events, %llu malformed lines", s->id,
             why ? why : "end of stream", (unsigned long long)s->replay.events,
             (unsigned long long)s->replay.malformed);
    if (!why)
        load_summary(c, s);
}

static void stream_error(struct client *c, const char *msg)
{
    int64_t id = c->load_req_id;
    load_stream_end(c, "bad chunk framing from the client");
    client_send(c, ht_reply_err(id, HT_EBADARG, msg));
    client_close(c); /* framing is lost: nothing after this can be read safely */
}

void load_stream_bytes(struct client *c, const char *buf, size_t n)
{
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
            c->in[c->in_len - 1] = '\0';
            char *end;
            unsigned long long len = strtoull(c->in, &end, 10);
            if (end == c->in || (*end && *end != '\r') || len > LOAD_CHUNK_MAX) {
                stream_error(c, "load: bad chunk header (expected a length up to 4 MiB)");
                return;
            }
            c->in_len = 0;
            if (len == 0) {
                load_stream_end(c, NULL);
                /* Anything after the end chunk is a request again. */
                if (n > 0 && !c->closing)
                    client_feed(c, buf, n);
                return;
            }
            c->chunk_left = len;
            continue;
        }
        size_t take = n < c->chunk_left ? n : (size_t)c->chunk_left;
        if (s && s->state == SESSION_LOADING)
            replay_feed(&s->replay, buf, take);
        c->chunk_left -= take;
        buf += take;
        n -= take;
    }
    if (c->loading)
        session_flush(c->loading);
}
