/* ls: one line per session the client may see (its own; root: all). */
#include "commands.h"

#include <cjson/cJSON.h>

int cmd_ls(struct cmd_ctx *ctx)
{
    cJSON *d = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(d, "sessions");
    for (struct session *s = ctx->srv->sessions.head; s; s = s->next) {
        if (!session_visible(s, ctx->c->uid))
            continue; /* another user's */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", s->id);
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "state", session_state_name(s->state));
        cJSON_AddStringToObject(o, "source", s->source);
        cJSON_AddNumberToObject(o, "pid", (double)s->eng.pid);
        cJSON_AddStringToObject(o, "process", s->process_name);
        cJSON_AddNumberToObject(o, "events", (double)s->eng.q.events);
        cJSON_AddNumberToObject(o, "now", (double)s->eng.now);
        cJSON_AddNumberToObject(o, "outstanding", (double)s->eng.heap_bytes);
        cJSON_AddNumberToObject(o, "committed", (double)s->eng.commits.bytes);
        cJSON_AddNumberToObject(o, "private_bytes", (double)s->eng.private_bytes);
        cJSON_AddItemToArray(arr, o);
    }
    return cmd_reply(ctx, d);
}
