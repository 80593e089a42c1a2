/* version: what this daemon is and what it can trace. */
#include "commands.h"

#include "ht-error.h"
#include "sys/privileges.h"
#include "sources.h"

#include <cjson/cJSON.h>
#include <uv.h>

static cJSON *source_json(const struct source_ops *o)
{
    static const struct {
        unsigned bit;
        const char *name;
    } modes[] = {{SOURCE_STREAM, "stream"},
                 {SOURCE_PID, "pid"},
                 {SOURCE_IMAGE, "image"},
                 {SOURCE_LAUNCH, "launch"}};
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", o->name);
    cJSON *m = cJSON_AddArrayToObject(j, "modes");
    for (unsigned k = 0; k < sizeof(modes) / sizeof(modes[0]); k++)
        if (o->modes & modes[k].bit)
            cJSON_AddItemToArray(m, cJSON_CreateString(modes[k].name));
    cJSON_AddStringToObject(j, "summary", o->summary ? o->summary : "");
    char err[256] = "";
    int rc = o->available ? o->available(err, sizeof(err)) : 0;
    cJSON_AddBoolToObject(j, "available", rc == 0);
    if (rc != 0)
        cJSON_AddStringToObject(j, "why", err[0] ? err : ht_strerror(rc));
    return j;
}

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
    /* Every source built in (sources.def), in order of preference: its
     * modes and whether it can work here and now. */
    cJSON *src = cJSON_AddArrayToObject(d, "sources");
    for (unsigned i = 0; i < source_count; i++)
        cJSON_AddItemToArray(src, source_json(source_list[i]));
    /* The privileges the daemon enabled at start (sys/privileges.h; none on
     * Unix) and, for each missing one, the native error. */
    unsigned np;
    const struct privilege *pv = privileges_list(&np);
    cJSON *pa = cJSON_AddArrayToObject(d, "privileges");
    for (unsigned k = 0; k < np; k++) {
        cJSON *pj = cJSON_CreateObject();
        cJSON_AddStringToObject(pj, "name", pv[k].name);
        cJSON_AddBoolToObject(pj, "enabled", pv[k].enabled);
        if (!pv[k].enabled) {
            cJSON_AddStringToObject(pj, "needed_to", pv[k].needed);
            cJSON_AddNumberToObject(pj, "error", (double)pv[k].code);
        }
        cJSON_AddItemToArray(pa, pj);
    }
    /* The control endpoint's limits and what they refused, each under its own name. */
    const struct server *srv = ctx->srv;
    cJSON *cl = cJSON_AddObjectToObject(d, "clients");
    cJSON_AddNumberToObject(cl, "connected", srv->nclients);
    cJSON_AddNumberToObject(cl, "max", srv->cfg->max_clients);
    cJSON_AddNumberToObject(cl, "root_reserved", srv->cfg->root_clients);
    cJSON_AddNumberToObject(cl, "max_per_uid", srv->cfg->max_clients_per_uid);
    cJSON_AddNumberToObject(cl, "idle_timeout_ns", (double)srv->cfg->client_idle_ns);
    cJSON_AddNumberToObject(cl, "refused_perm", (double)srv->clients_refused);
    cJSON_AddNumberToObject(cl, "refused_full", (double)srv->clients_refused_full);
    cJSON_AddNumberToObject(cl, "refused_uid_limit", (double)srv->clients_refused_uid);
    cJSON_AddNumberToObject(cl, "refused_no_fd", (double)srv->clients_refused_nofd);
    cJSON_AddNumberToObject(cl, "refused_no_memory", (double)srv->clients_refused_nomem);
    cJSON_AddNumberToObject(cl, "accept_errors", (double)srv->accept_errors);
    cJSON_AddNumberToObject(cl, "idle_closed", (double)srv->clients_idle_closed);
    cJSON_AddNumberToObject(cl, "dropped_slow", (double)srv->clients_dropped_slow);
    cJSON_AddNumberToObject(cl, "closed_stalled", (double)srv->clients_closed_stalled);
    cJSON_AddNumberToObject(cl, "stalled_unread_bytes", (double)srv->stalled_unread_bytes);
    cJSON_AddNumberToObject(cl, "stalled_requests_unanswered", (double)srv->stalled_requests);
    cJSON_AddNumberToObject(cl, "dropped_output_total", (double)srv->clients_dropped_output_total);
    cJSON_AddNumberToObject(cl, "top_frames_skipped", (double)srv->top_frames_skipped);
    cJSON_AddNumberToObject(cl, "top_frames_failed", (double)srv->top_frames_failed);
    /* The daemon-wide byte budget: every session's memory plus queued client output. */
    cJSON *m = cJSON_AddObjectToObject(d, "memory");
    cJSON_AddNumberToObject(m, "budget", (double)srv->mem.limit);
    cJSON_AddNumberToObject(m, "used", (double)(mem_budget_used(&srv->mem) + srv->out_queued));
    cJSON_AddNumberToObject(m, "sessions", (double)mem_budget_used(&srv->mem));
    cJSON_AddNumberToObject(m, "queued_output", (double)srv->out_queued);
    cJSON_AddNumberToObject(m, "session_budget", (double)srv->cfg->session_memory_budget);
    cJSON_AddNumberToObject(m, "refusals",
                            (double)atomic_load(&((struct server *)srv)->mem.refusals));
    cJSON_AddNumberToObject(m, "pprof_max_bytes", (double)srv->cfg->pprof_max_bytes);
    cJSON_AddNumberToObject(m, "pprof_refused", (double)srv->pprof_refused);
    return cmd_reply(ctx, d);
}
