/* Request parsing and reply framing (cJSON). */
#include "ht-proto.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-text.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static char *print_line(cJSON *obj)
{
    char *s = cJSON_PrintUnformatted(obj);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = ht_realloc(s, n + 2);
    if (!line) {
        cJSON_free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

int ht_request_parse(const char *line, size_t len, struct ht_request *req, char *err, size_t errsz)
{
    memset(req, 0, sizeof(*req));
    /* cJSON skips a NUL as white space and stops after the first value: a
     * line must be one JSON text (RFC 8259 section 2) and nothing else. */
    if (memchr(line, '\0', len)) {
        snprintf(err, errsz, "request contains a NUL byte");
        return HT_EBADJSON;
    }
    const char *end = NULL;
    req->root = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (!req->root) {
        snprintf(err, errsz, "request is not valid JSON");
        return HT_EBADJSON;
    }
    if (!cJSON_IsObject(req->root)) {
        snprintf(err, errsz, "request must be a JSON object");
        return HT_EBADJSON;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req->root, "id");
    if (id) {
        if (!cJSON_IsNumber(id) || floor(id->valuedouble) != id->valuedouble ||
            fabs(id->valuedouble) > 9007199254740991.0) {
            snprintf(err, errsz, "\"id\" must be an integer");
            return HT_EBADJSON;
        }
        req->id = (int64_t)id->valuedouble;
    }
    while (end < line + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (end != line + len) {
        snprintf(err, errsz, "request has bytes after its JSON object");
        return HT_EBADJSON;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req->root, "v");
    if (!cJSON_IsNumber(v)) {
        snprintf(err, errsz, "\"v\" (protocol version) is missing");
        return HT_EBADJSON;
    }
    req->v = v->valuedouble > 1e6 || v->valuedouble < -1e6 ? -1 : (int)v->valuedouble;
    if (req->v != HT_PROTO_VERSION) {
        snprintf(err, errsz, "protocol version %d is not supported; this daemon speaks %d", req->v,
                 HT_PROTO_VERSION);
        return HT_EVERSION;
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req->root, "cmd");
    if (!cJSON_IsString(cmd)) {
        snprintf(err, errsz, "\"cmd\" must be a string");
        return HT_EBADJSON;
    }
    req->cmd = cmd->valuestring;
    req->args = cJSON_GetObjectItemCaseSensitive(req->root, "args");
    if (cJSON_IsNull(req->args))
        req->args = NULL;
    return 0;
}

void ht_request_free(struct ht_request *req)
{
    cJSON_Delete(req->root);
    memset(req, 0, sizeof(*req));
}

char *ht_request_build(int64_t id, const char *cmd, cJSON *args)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", HT_PROTO_VERSION);
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddStringToObject(o, "cmd", cmd);
    if (args)
        cJSON_AddItemToObject(o, "args", args);
    char *line = print_line(o);
    cJSON_Delete(o);
    return line;
}

char *ht_reply_ok(int64_t id, cJSON *data, int more)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", HT_PROTO_VERSION);
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddTrueToObject(o, "ok");
    if (more)
        cJSON_AddTrueToObject(o, "more");
    cJSON_AddItemToObject(o, "data", data ? data : cJSON_CreateObject());
    char *line = print_line(o);
    cJSON_Delete(o);
    return line;
}

char *ht_reply_err(int64_t id, int err, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", HT_PROTO_VERSION);
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddFalseToObject(o, "ok");
    cJSON_AddStringToObject(o, "err", ht_err_code(err));
    /* Messages quote what the client sent: bytes that are not UTF-8 or are
     * controls are written as escapes, so the reply stays valid JSON text. */
    char safe[2048];
    ht_text_escape(msg && *msg ? msg : ht_strerror(err), safe, sizeof(safe));
    cJSON_AddStringToObject(o, "msg", safe);
    char *line = print_line(o);
    cJSON_Delete(o);
    return line;
}

/* The array member to split, if the reply is big enough to need it. */
static cJSON *split_member(cJSON *data)
{
    cJSON *best = NULL;
    int best_n = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, data)
    {
        if (cJSON_IsArray(m) && cJSON_GetArraySize(m) > best_n) {
            best = m;
            best_n = cJSON_GetArraySize(m);
        }
    }
    return best_n > 1 ? best : NULL;
}

int ht_reply_frames(int64_t id, cJSON *data, ht_emit_fn emit, void *arg)
{
    char *whole = ht_reply_ok(id, cJSON_Duplicate(data, 1), 0);
    if (!whole) {
        cJSON_Delete(data);
        return HT_ENOMEM;
    }
    cJSON *arr = strlen(whole) > HT_FRAME_TARGET ? split_member(data) : NULL;
    if (!arr) {
        cJSON_Delete(data);
        return emit(arg, whole);
    }
    size_t total = strlen(whole);
    ht_free(whole);
    int n = cJSON_GetArraySize(arr);
    int per = (int)((double)n * HT_FRAME_TARGET / (double)total);
    if (per < 1)
        per = 1;
    /* First frame: everything, with the array cut to its first items. */
    cJSON *rest = cJSON_CreateArray();
    while (cJSON_GetArraySize(arr) > per)
        cJSON_AddItemToArray(rest, cJSON_DetachItemFromArray(arr, per));
    char key[64];
    snprintf(key, sizeof(key), "%s", arr->string);
    int rc = emit(arg, ht_reply_ok(id, data, cJSON_GetArraySize(rest) > 0));
    while (rc == 0 && cJSON_GetArraySize(rest) > 0) {
        cJSON *part = cJSON_CreateArray();
        while (cJSON_GetArraySize(part) < per && cJSON_GetArraySize(rest) > 0)
            cJSON_AddItemToArray(part, cJSON_DetachItemFromArray(rest, 0));
        cJSON *frame = cJSON_CreateObject();
        cJSON_AddItemToObject(frame, key, part);
        rc = emit(arg, ht_reply_ok(id, frame, cJSON_GetArraySize(rest) > 0));
    }
    cJSON_Delete(rest);
    return rc;
}

void ht_reply_merge(cJSON *into, cJSON *next)
{
    cJSON *m;
    cJSON_ArrayForEach(m, next)
    {
        cJSON *dst = cJSON_GetObjectItemCaseSensitive(into, m->string);
        if (!cJSON_IsArray(m) || !cJSON_IsArray(dst))
            continue;
        while (cJSON_GetArraySize(m) > 0)
            cJSON_AddItemToArray(dst, cJSON_DetachItemFromArray(m, 0));
    }
}
