/* shutdown: stop every session and the daemon, after answering; refused to a
 * client while another user has a session. */
#include "commands.h"

#include "ht-error.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static void stop_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    srv->stop_server(srv);
}

/* Another user's session, if any: shutting down would stop and drop it. */
static const struct session *others_session(struct cmd_ctx *ctx)
{
    for (const struct session *s = ctx->srv->sessions.head; s; s = session_next(s))
        if (!session_visible(s, ctx->c->uid))
            return s;
    return NULL;
}

int cmd_shutdown(struct cmd_ctx *ctx)
{
    if (others_session(ctx))
        return cmd_error(ctx, HT_EPERM,
                         "other users have sessions here: only root may shut the daemon down "
                         "(uid %u may stop and drop its own sessions)",
                         (unsigned)ctx->c->uid);
    log_info("shutdown requested by client %llu", (unsigned long long)ctx->c->id);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "sessions", ctx->srv->sessions.n);
    cmd_reply(ctx, d);
    /* Give the reply a moment to be written before every client closes. */
    uv_timer_t *t = malloc(sizeof(*t));
    if (!t) {
        ctx->srv->stop_server(ctx->srv);
        return 0;
    }
    uv_timer_init(ctx->srv->loop, t);
    t->data = ctx->srv;
    uv_timer_start(t, stop_cb, 50, 0);
    return 0;
}
