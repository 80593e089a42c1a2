/*
 * record: stream the session's events as .htev from now until it stops.
 * After the acknowledgement, every line is an .htev event ({"t":...}); the
 * stream ends with a reply envelope ({"v":1,...}) saying why.
 * record {"raw":true}: the source's raw records instead (a live ETW session,
 * or a raw ETW stream being loaded): the raw ETW stream format (etw-raw.h),
 * its header line first, {"etw_raw_lost":N} where lines were lost.
 */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "rawtap.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_record(struct cmd_ctx *ctx)
{
    struct session *s = ctx->s;
    if (session_state(s) != SESSION_LOADING && session_state(s) != SESSION_RUNNING)
        return cmd_error(ctx, HT_ESTATE, "session %u is %s: no more events will come to record",
                         session_id(s), session_state_name(session_state(s)));
    if (ctx->c->recording || ctx->c->topping)
        return cmd_error(ctx, HT_ESTATE, "this connection already has a subscription");
    if (ctx->c == session_loader(s))
        return cmd_error(ctx, HT_ESTATE, "the loading connection cannot record");
    /* .htev has no field for a sample's weight: a replay would count each
     * sampled block once. Refused rather than silently wrong. */
    if (session_ingest(s)->sampling)
        return cmd_error(
            ctx, HT_ENOTSUP,
            "session %u is sampled (run --sample or --max-overhead): .htev carries "
            "no sample weights, so a replay would be wrong; query or export it instead",
            session_id(s));
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "raw");
    if (raw && !cJSON_IsBool(raw))
        return cmd_error(ctx, HT_EBADARG, "\"raw\" must be true or false");
    ctx->c->sub_req_id = ctx->req->id;
    if (cJSON_IsTrue(raw)) {
        char err[256], header[RAWTAP_HEADER_MAX];
        size_t hn = 0;
        int rc = client_subscribe_raw(ctx->c, s, header, sizeof(header), &hn, err, sizeof(err));
        if (rc)
            return cmd_error(ctx, rc, "%s", err);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "session", session_id(s));
        cJSON_AddStringToObject(d, "recording", "raw ETW stream lines follow; a reply line ends them");
        client_send(ctx->c, ht_reply_ok(ctx->req->id, d, 1));
        /* Joining a recording under way: the stream's header opens this one too. */
        if (hn && client_send(ctx->c, ht_strndup(header, hn)) == 0)
            ctx->c->rec_lines++;
        return 0;
    }
    client_subscribe(ctx->c, s, 1);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON_AddStringToObject(d, "recording", "htev lines follow; a reply line ends them");
    client_send(ctx->c, ht_reply_ok(ctx->req->id, d, 1));
    /* A recording is replayable on its own: it opens with the process line
     * when the process is known already (else the stream's own line comes). */
    if (session_engine(s)->pid || session_process_name(s)[0]) {
        char line[1024];
        size_t n = session_process_line(s, session_engine(s)->now, line, sizeof(line));
        if (n)
            client_send(ctx->c, ht_strndup(line, n));
    }
    return 0;
}
