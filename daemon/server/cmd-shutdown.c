/* shutdown: stop every session and the daemon, after answering. */
#include "commands.h"

#include "log.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static void stop_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    server_stop(srv);
}

int cmd_shutdown(struct cmd_ctx *ctx)
{
    log_info("shutdown requested by client %llu", (unsigned long long)ctx->c->id);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "sessions", ctx->srv->nsessions);
    cmd_reply(ctx, d);
    /* Give the reply a moment to be written before every client closes. */
    uv_timer_t *t = malloc(sizeof(*t));
    if (!t) {
        server_stop(ctx->srv);
        return 0;
    }
    uv_timer_init(ctx->srv->loop, t);
    t->data = ctx->srv;
    uv_timer_start(t, stop_cb, 50, 0);
    return 0;
}
