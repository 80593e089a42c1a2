/* version: what this daemon is and what it can trace. */
#include "server.h"

#include <cjson/cJSON.h>
#include <uv.h>

int cmd_version(struct cmd_ctx *ctx)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "daemon", HEAPTRACE_VERSION);
    cJSON_AddNumberToObject(d, "protocol", HT_PROTO_VERSION);
    cJSON_AddStringToObject(d, "libuv", uv_version_string());
    cJSON_AddStringToObject(d, "cjson", cJSON_Version());
#ifdef _WIN32
    cJSON_AddStringToObject(d, "platform", "windows");
#else
    cJSON_AddStringToObject(d, "platform", "linux");
#endif
    /* Sources this build has: live backends arrive with their own issues. */
    cJSON *src = cJSON_AddArrayToObject(d, "sources");
    cJSON_AddItemToArray(src, cJSON_CreateString("replay"));
    /* The daemon-wide byte budget: every session's memory plus queued client output. */
    const struct server *srv = ctx->srv;
    cJSON *m = cJSON_AddObjectToObject(d, "memory");
    cJSON_AddNumberToObject(m, "budget", (double)srv->mem.limit);
    cJSON_AddNumberToObject(m, "used", (double)(mem_budget_used(&srv->mem) + srv->out_queued));
    cJSON_AddNumberToObject(m, "sessions", (double)mem_budget_used(&srv->mem));
    cJSON_AddNumberToObject(m, "queued_output", (double)srv->out_queued);
    cJSON_AddNumberToObject(m, "session_budget", (double)srv->cfg->session_memory_budget);
    cJSON_AddNumberToObject(m, "refusals",
                            (double)atomic_load(&((struct server *)srv)->mem.refusals));
    return cmd_reply(ctx, d);
}
