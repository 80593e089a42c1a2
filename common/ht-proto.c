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

int ht_sbuf_add(struct ht_sbuf *b, const char *s, size_t n)
{
    size_t max = b->max ? b->max : HT_REPLY_MAX;
    if (b->len + n + 1 > max)
        return HT_ETOOBIG;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = ht_realloc(b->p, cap);
        if (!p)
            return HT_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void ht_sbuf_free(struct ht_sbuf *b)
{
    ht_free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Number of items, counted once (cJSON_GetArraySize walks the list). */
static int array_len(const cJSON *arr)
{
    int n = 0;
    for (const cJSON *x = arr->child; x; x = x->next)
        n++;
    return n;
}

static cJSON *biggest_array(cJSON *obj, int *best_n)
{
    cJSON *best = NULL;
    cJSON *m;
    cJSON_ArrayForEach(m, obj)
    {
        int n = cJSON_IsArray(m) ? array_len(m) : 0;
        if (n > *best_n) {
            best = m;
            *best_n = n;
        }
    }
    return best;
}

cJSON *ht_reply_split_member(cJSON *data, cJSON **outer)
{
    int best_n = 0;
    cJSON *best = biggest_array(data, &best_n);
    *outer = NULL;
    cJSON *m;
    cJSON_ArrayForEach(m, data)
    {
        cJSON *inner = cJSON_IsObject(m) ? biggest_array(m, &best_n) : NULL;
        if (inner) {
            best = inner;
            *outer = m;
        }
    }
    return best;
}

/* Print obj with arr's items replaced by a marker, and split the text there.
 * The marker is a raw \001: cJSON escapes control characters in strings, so
 * it cannot occur anywhere else in the text. */
static int print_split(cJSON *obj, cJSON *arr, char **pre, char **post)
{
    cJSON *saved = arr->child;
    arr->child = NULL;
    cJSON *marker = cJSON_CreateRaw("\001");
    if (!marker) {
        arr->child = saved;
        return HT_ENOMEM;
    }
    cJSON_AddItemToArray(arr, marker);
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(marker);
    arr->child = saved;
    char *cut = text ? strchr(text, '\001') : NULL;
    if (!cut) {
        cJSON_free(text);
        return HT_ENOMEM;
    }
    *cut = '\0';
    *pre = ht_strdup(text);
    *post = ht_strdup(cut + 1);
    cJSON_free(text);
    return *pre && *post ? 0 : HT_ENOMEM;
}

/* {"<outer>":{"<key>":[ and ]}} (keys escaped by cJSON). */
static int print_cont(const cJSON *arr, const cJSON *outer, char **pre, char **post)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *in = outer ? cJSON_AddObjectToObject(o, outer->string) : o;
    cJSON *a = in ? cJSON_AddArrayToObject(in, arr->string) : NULL;
    int rc = a ? print_split(o, a, pre, post) : HT_ENOMEM;
    cJSON_Delete(o);
    return rc;
}

int ht_framer_init(struct ht_framer *f, int64_t id, cJSON *data, cJSON *arr, cJSON *outer,
                   cJSON **items)
{
    memset(f, 0, sizeof(*f));
    f->id = id;
    *items = NULL;
    if (!arr) {
        char *text = cJSON_PrintUnformatted(data);
        f->pre = text ? ht_strdup(text) : NULL;
        cJSON_free(text);
        f->post = ht_strdup("");
        return f->pre && f->post ? 0 : HT_ENOMEM;
    }
    int rc = print_split(data, arr, &f->pre, &f->post);
    if (rc == 0)
        rc = print_cont(arr, outer, &f->cont_pre, &f->cont_post);
    if (rc != 0)
        return rc;
    *items = arr->child;
    arr->child = NULL;
    return 0;
}

char *ht_framer_frame(struct ht_framer *f, const char *items, size_t n, int more)
{
    char env[96];
    int el = snprintf(env, sizeof(env),
                      "{\"v\":%d,\"id\":%lld,\"ok\":true,%s\"data\":", HT_PROTO_VERSION,
                      (long long)f->id, more ? "\"more\":true," : "");
    const char *pre = f->started ? f->cont_pre : f->pre;
    const char *post = f->started ? f->cont_post : f->post;
    f->started = 1;
    size_t pl = strlen(pre), ql = strlen(post);
    char *line = ht_malloc((size_t)el + pl + n + ql + 3);
    if (!line)
        return NULL;
    char *p = line;
    memcpy(p, env, (size_t)el);
    p += el;
    memcpy(p, pre, pl);
    p += pl;
    memcpy(p, items, n);
    p += n;
    memcpy(p, post, ql);
    p += ql;
    memcpy(p, "}\n", 3);
    return line;
}

void ht_framer_close(struct ht_framer *f)
{
    ht_free(f->pre);
    ht_free(f->post);
    ht_free(f->cont_pre);
    ht_free(f->cont_post);
    memset(f, 0, sizeof(*f));
}

/* Append item's text (comma-separated) to b; 0 or an error. */
static int add_item_text(struct ht_sbuf *b, const cJSON *item)
{
    char *s = cJSON_PrintUnformatted(item);
    if (!s)
        return HT_ENOMEM;
    int rc = b->len ? ht_sbuf_add(b, ",", 1) : 0;
    if (rc == 0)
        rc = ht_sbuf_add(b, s, strlen(s));
    cJSON_free(s);
    return rc;
}

/* Every frame, emitted as soon as it is full: the items are printed one by
 * one, each once, and freed as they go (one pass over the chain). */
static int frames_emit(struct ht_framer *f, cJSON *items, ht_emit_fn emit, void *arg)
{
    struct ht_sbuf b = {0};
    int rc = 0;
    do {
        while (items && rc == 0 && (b.len == 0 || b.len < HT_FRAME_TARGET)) {
            cJSON *x = items;
            items = x->next;
            x->next = x->prev = NULL;
            rc = add_item_text(&b, x);
            cJSON_Delete(x);
        }
        if (rc != 0)
            break;
        char *line = ht_framer_frame(f, b.p ? b.p : "", b.len, items != NULL);
        b.len = 0;
        rc = line ? emit(arg, line) : HT_ENOMEM;
    } while (rc == 0 && items);
    if (items)
        items->prev = NULL;
    cJSON_Delete(items);
    ht_sbuf_free(&b);
    return rc;
}

int ht_reply_frames(int64_t id, cJSON *data, ht_emit_fn emit, void *arg)
{
    cJSON *outer;
    cJSON *arr = ht_reply_split_member(data, &outer);
    struct ht_framer f;
    cJSON *items = NULL;
    int rc = ht_framer_init(&f, id, data, arr, outer, &items);
    cJSON_Delete(data);
    if (rc == 0)
        rc = frames_emit(&f, items, emit, arg);
    else
        cJSON_Delete(items);
    ht_framer_close(&f);
    return rc;
}

/* Move next's items to the end of dst in one pass: the chains are spliced. */
static void array_append(cJSON *dst, cJSON *src)
{
    cJSON *first = src->child;
    if (!first)
        return;
    src->child = NULL;
    if (!dst->child) {
        dst->child = first;
        return;
    }
    cJSON *last = dst->child->prev; /* cJSON keeps the tail in child->prev */
    cJSON *src_last = first->prev;
    last->next = first;
    first->prev = last;
    dst->child->prev = src_last;
}

void ht_reply_merge(cJSON *into, cJSON *next)
{
    cJSON *m;
    cJSON_ArrayForEach(m, next)
    {
        cJSON *dst = cJSON_GetObjectItemCaseSensitive(into, m->string);
        if (cJSON_IsArray(m) && cJSON_IsArray(dst))
            array_append(dst, m);
        else if (cJSON_IsObject(m) && cJSON_IsObject(dst))
            ht_reply_merge(dst, m);
    }
}
