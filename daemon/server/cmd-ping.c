/* ping: the cheapest round trip. */
#include "commands.h"

#include <cjson/cJSON.h>

int cmd_ping(struct cmd_ctx *ctx)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "pong", "heaptraced");
    return cmd_reply(ctx, d);
}
