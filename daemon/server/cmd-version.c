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
    return cmd_reply(ctx, d);
}
