/* status: everything about one session: state, memory, rings, data quality,
 * triggers, snapshots (the session layer builds it: session_status_json). */
#include "commands.h"

#include "query-args.h"

#include <cjson/cJSON.h>

/* What a recorder of s has been sent and not read: counted in status. */
static uint64_t sub_queued(struct session_sub *sub, const struct session *s)
{
    const struct client *c = client_of_sub(sub);
    return c->recording == s ? c->out_pending : 0;
}

int cmd_status(struct cmd_ctx *ctx)
{
    const struct session_status_ctx x = {&ctx->srv->mem, ctx->srv->out_queued, sub_queued,
                                         session_quality_json};
    return cmd_reply(ctx, session_status_json(ctx->s, &x));
}
