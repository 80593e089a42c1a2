/* run: launch a program under tracing (a source serving SOURCE_LAUNCH; cmd-start.c). */
#include "commands.h"

#include "ht-error.h"

#include <cjson/cJSON.h>

int cmd_run(struct cmd_ctx *ctx)
{
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "argv");
    if (cJSON_GetArraySize(argv) == 0)
        return cmd_error(ctx, HT_EBADARG, "run needs a program: heaptracectl run -- CMD ARGS...");
    return cmd_start_live(ctx, SOURCE_LAUNCH);
}
