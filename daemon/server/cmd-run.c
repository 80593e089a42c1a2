/* run: launch a program under tracing (needs a live backend). */
#include "server.h"

#include "ht-error.h"

#include <cjson/cJSON.h>

int cmd_run(struct cmd_ctx *ctx)
{
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "argv");
    if (cJSON_GetArraySize(argv) == 0)
        return cmd_error(ctx, HT_EBADARG, "run needs a program: heaptracectl run -- CMD ARGS...");
    return cmd_error(ctx, HT_ENOTSUP,
                     "run is not supported by this build yet: it has no live tracing backend "
                     "(only recorded streams: heaptracectl load FILE)");
}
