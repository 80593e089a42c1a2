/* Request dispatch: parse, look the command up in the shared table, validate, resolve the session.
 */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Every command's handler, from the table: one without does not build. */
static const cmd_fn handlers[HT_CMD_COUNT] = {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer) [HT_CMD_##id] = handler,
#define HT_ARG(id, name, type, flags, meta, help)
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
};

int dispatch_complete(void)
{
    for (int i = 0; i < HT_CMD_COUNT; i++)
        if (!handlers[i])
            return 0;
    return 1;
}

/* The only place a command's SESSION is resolved, so no command can forget
 * whose it is: a client sees and names only its own sessions (root: all);
 * naming another's is EPERM. SESSION may be left out when exactly one
 * session is the client's to see. */
static int resolve_session(struct cmd_ctx *ctx)
{
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "session");
    uint32_t uid = ctx->c->uid;
    if (ref) {
        ctx->s = session_find(&ctx->srv->sessions, ref);
        if (!ctx->s)
            return cmd_error(ctx, HT_ENOSESSION, "no session %s%s%s",
                             cJSON_IsString(ref) ? "\"" : "",
                             cJSON_IsString(ref) ? ref->valuestring : "",
                             cJSON_IsString(ref) ? "\"" : "(by that id)");
        if (!session_visible(ctx->s, uid)) {
            ctx->s = NULL;
            return cmd_error(ctx, HT_EPERM,
                             "session %s%s%s belongs to another user: uid %u acts only on its own "
                             "sessions",
                             cJSON_IsString(ref) ? "\"" : "",
                             cJSON_IsString(ref) ? ref->valuestring : "",
                             cJSON_IsString(ref) ? "\"" : "(by that id)", (unsigned)uid);
        }
        return 0;
    }
    char names[256] = "";
    size_t n = 0;
    uint32_t seen = 0;
    for (struct session *s = ctx->srv->sessions.head; s; s = session_next(s)) {
        if (!session_visible(s, uid))
            continue;
        seen++;
        ctx->s = s;
        if (n + 70 < sizeof(names))
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%u (%s)", n ? ", " : "", session_id(s),
                                  session_name(s));
    }
    if (seen == 1)
        return 0;
    ctx->s = NULL;
    if (seen == 0)
        return cmd_error(ctx, HT_ENOSESSION, "no sessions: start, run or load one first");
    return cmd_error(ctx, HT_EAMBIGUOUS, "%u sessions exist, name one: %s", seen, names);
}

void dispatch_request(struct client *c, const char *line, size_t len)
{
    struct server *srv = c->srv;
    struct ht_request req;
    char err[256];
    srv->requests++;
    while (len > 0 && line[len - 1] == '\r')
        len--;
    int rc = ht_request_parse(line, len, &req, err, sizeof(err));
    if (rc != 0) {
        srv->request_errors++;
        client_send(c, ht_reply_err(req.id, rc, err));
        ht_request_free(&req);
        return;
    }
    struct cmd_ctx ctx = {srv, c, &req, ht_cmd_find(req.cmd), NULL};
    if (!ctx.spec) {
        cmd_error(&ctx, HT_EUNKNOWNCMD, "unknown command \"%.64s\"; heaptracectl help lists them",
                  req.cmd);
    } else if ((rc = ht_args_validate(ctx.spec, req.args, err, sizeof(err))) != 0) {
        cmd_error(&ctx, rc, "%s", err);
    } else if (!(ctx.spec->flags & HT_CMDF_SESSION) || resolve_session(&ctx) == 0) {
        uint64_t t0 = uv_hrtime();
        handlers[ctx.spec->id](&ctx);
        log_debug("client %llu: %s (%.2f ms)", (unsigned long long)c->id, req.cmd,
                  (double)(uv_hrtime() - t0) / 1e6);
    }
    ht_request_free(&req);
}
