/* One request and its (possibly multi-frame) reply. */
#include "ctl.h"

#include "ht-alloc.h"
#include "ht-proto.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int ctl_print_error(const cJSON *env)
{
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(env, "err");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(env, "msg");
    fprintf(stderr, "heaptracectl: %s: %s\n",
            cJSON_IsString(err) ? ctl_text(err->valuestring) : "error",
            cJSON_IsString(msg) ? ctl_text(msg->valuestring) : "(no message)");
    return EXIT_CMD;
}

int ctl_read_frame(struct ctl *c, int64_t id, cJSON **frame)
{
    for (;;) {
        char *line = conn_read_line(c->conn, HT_REPLY_MAX);
        if (!line) {
            fprintf(stderr, "heaptracectl: the daemon closed the connection\n");
            return EXIT_UNREACHABLE;
        }
        cJSON *env = cJSON_Parse(line);
        free(line);
        if (!cJSON_IsObject(env)) {
            cJSON_Delete(env);
            fprintf(stderr, "heaptracectl: malformed reply from the daemon\n");
            return EXIT_CMD;
        }
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(env, "id");
        /* id 0 errors are about the connection itself (EPERM at accept). */
        if (cJSON_IsNumber(rid) && (int64_t)rid->valuedouble != id && rid->valuedouble != 0) {
            cJSON_Delete(env);
            continue;
        }
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "ok"))) {
            int rc = ctl_print_error(env);
            cJSON_Delete(env);
            return rc;
        }
        *frame = env;
        return EXIT_OK;
    }
}

int ctl_send(struct ctl *c, const char *cmd, cJSON *args, int64_t *id)
{
    *id = ++c->next_id;
    char *line = ht_request_build(*id, cmd, args);
    if (!line)
        return EXIT_CMD;
    int rc = conn_send(c->conn, line, strlen(line));
    ht_free(line);
    if (rc != 0) {
        /* The daemon may have said why it closed (EPERM at accept) first. */
        char *why = conn_read_line(c->conn, HT_REQUEST_MAX);
        cJSON *env = why ? cJSON_Parse(why) : NULL;
        free(why);
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(env, "ok"))) {
            rc = ctl_print_error(env);
            cJSON_Delete(env);
            return rc;
        }
        cJSON_Delete(env);
        fprintf(stderr, "heaptracectl: lost the connection to the daemon\n");
        return EXIT_UNREACHABLE;
    }
    return EXIT_OK;
}

int ctl_call(struct ctl *c, const char *cmd, cJSON *args, cJSON **data)
{
    int64_t id;
    int rc = ctl_send(c, cmd, args, &id);
    *data = NULL;
    if (rc)
        return rc;
    for (;;) {
        cJSON *env;
        rc = ctl_read_frame(c, id, &env);
        if (rc) {
            cJSON_Delete(*data);
            *data = NULL;
            return rc;
        }
        cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
        int more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
        cJSON_Delete(env);
        if (!*data) {
            *data = d;
        } else {
            ht_reply_merge(*data, d);
            cJSON_Delete(d);
        }
        if (!more)
            return EXIT_OK;
    }
}
