/* start: attach to a running process or an image name (needs a live backend). */
#include "server.h"

#include "ht-error.h"

#include <cjson/cJSON.h>

int cmd_start(struct cmd_ctx *ctx)
{
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "pid");
    const cJSON *exe = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "exe");
    if (!pid == !exe)
        return cmd_error(ctx, HT_EBADARG, "start needs exactly one of --pid PID or --exe NAME");
    /* No live source is built in yet (eBPF/LD_PRELOAD on Linux, ETW on
     * Windows come with their own work); replayed streams work: load. */
    return cmd_error(ctx, HT_ENOTSUP,
                     "start --%s is not supported by this build yet: it has no live tracing "
                     "backend (only recorded streams: heaptracectl load FILE)",
                     pid ? "pid" : "exe");
}
