/*
 * record: stream the session's events as .htev from now until it stops.
 * After the acknowledgement, every line is an .htev event ({"t":...}); the
 * stream ends with a reply envelope ({"v":1,...}) saying why.
 */
#include "server.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_record(struct cmd_ctx *ctx)
{
    struct session *s = ctx->s;
    if (s->state != SESSION_LOADING && s->state != SESSION_RUNNING)
        return cmd_error(ctx, HT_ESTATE, "session %u is %s: no more events will come to record",
                         s->id, session_state_name(s->state));
    if (ctx->c->recording || ctx->c->topping)
        return cmd_error(ctx, HT_ESTATE, "this connection already has a subscription");
    if (ctx->c == s->loader)
        return cmd_error(ctx, HT_ESTATE, "the loading connection cannot record");
    session_flush(s); /* events before now are not part of the recording */
    ctx->c->recording = s;
    ctx->c->sub_req_id = ctx->req->id;
    ctx->c->sub_next = s->subs;
    s->subs = ctx->c;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", s->id);
    cJSON_AddStringToObject(d, "recording", "htev lines follow; a reply line ends them");
    client_send(ctx->c, ht_reply_ok(ctx->req->id, d, 1));
    /* A recording is replayable on its own: it opens with the process line. */
    char line[512];
    snprintf(line, sizeof(line), "{\"t\":%llu,\"ev\":\"process\",\"pid\":%llu,\"name\":",
             (unsigned long long)s->eng.now, (unsigned long long)s->eng.pid);
    cJSON *nm = cJSON_CreateString(s->process_name);
    char *q = cJSON_PrintUnformatted(nm);
    cJSON_Delete(nm);
    char *full = NULL;
    if (q) {
        size_t need = strlen(line) + strlen(q) + 4;
        full = ht_malloc(need);
        if (full)
            snprintf(full, need, "%s%s}\n", line, q);
        cJSON_free(q);
    }
    if (full)
        client_send(ctx->c, full);
    return 0;
}
