/* Query arguments (range, types, filters, culling) and query results as JSON. */
#include "query-args.h"

/* Not converted to session.h's functions yet: reads struct session. */
#include "session-int.h"

#include "config.h"
#include "engine.h"
#include "ht-error.h"
#include "ht-units.h"
#include "commands.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int bound_parse(struct session *s, const char *b, size_t n, int is_end, uint64_t *out,
                       char *err, size_t errsz)
{
    char text[80];
    if (n >= sizeof(text)) {
        snprintf(err, errsz, "range bound too long");
        return HT_EBADARG;
    }
    memcpy(text, b, n);
    text[n] = '\0';
    uint64_t now = s->eng.now, d;
    if (n == 0) {
        *out = is_end ? now : 0;
        return 0;
    }
    if (strcasecmp(text, "now") == 0 || strcasecmp(text, "end") == 0) {
        *out = now;
        return 0;
    }
    if (strcasecmp(text, "start") == 0) {
        *out = 0;
        return 0;
    }
    if (text[0] == '-' && ht_parse_duration(text + 1, &d) == 0) {
        *out = d > now ? 0 : now - d;
        return 0;
    }
    if (text[0] == '+' ? ht_parse_duration(text + 1, &d) == 0 : ht_parse_duration(text, &d) == 0) {
        *out = d;
        return 0;
    }
    const struct mark *m = engine_mark_find(&s->eng, text);
    if (m) {
        *out = m->t;
        return 0;
    }
    snprintf(err, errsz,
             "range bound \"%s\" is not a time (10s, 250ms, -60s, now, start) or a mark of this "
             "session",
             text);
    return (text[0] >= '0' && text[0] <= '9') || text[0] == '-' ? HT_EBADARG : HT_ENOMARK;
}

int range_parse(struct session *s, const char *text, uint64_t *t1, uint64_t *t2, char *err,
                size_t errsz)
{
    /* Split at the ':' that is not inside a bound ("-60s:now"). */
    const char *colon = strchr(text, ':');
    if (!colon) {
        snprintf(err, errsz, "range must be A:B (either side may be empty), got \"%s\"", text);
        return HT_EBADARG;
    }
    int rc = bound_parse(s, text, (size_t)(colon - text), 0, t1, err, errsz);
    if (!rc)
        rc = bound_parse(s, colon + 1, strlen(colon + 1), 1, t2, err, errsz);
    if (rc)
        return rc;
    /* Nothing has happened after now: a window that starts later is refused
     * (however its end is written), one that ends later ends at now. */
    uint64_t now = s->eng.now;
    if (*t1 > now) {
        char a[32], b[32];
        snprintf(err, errsz,
                 "range \"%s\" starts at %s (%llu ns), after the session's latest event at %s "
                 "(%llu ns): nothing is known there yet",
                 text, ht_format_time(*t1, a, sizeof(a)), (unsigned long long)*t1,
                 ht_format_time(now, b, sizeof(b)), (unsigned long long)now);
        return HT_EBADARG;
    }
    if (*t1 > *t2) {
        snprintf(err, errsz, "range \"%s\" is reversed: its start is after its end", text);
        return HT_EBADARG;
    }
    if (*t2 > now)
        *t2 = now;
    return 0;
}

typedef int (*scalar_parse_fn)(const char *, uint64_t *);

static int pair_parse(const char *text, scalar_parse_fn parse, const char *what, uint64_t *lo,
                      uint64_t *hi, char *err, size_t errsz)
{
    const char *colon = strchr(text, ':');
    char a[64], b[64];
    if (!colon || (size_t)(colon - text) >= sizeof(a) || strlen(colon + 1) >= sizeof(b)) {
        snprintf(err, errsz, "%s must be LO:HI (either side may be empty), got \"%s\"", what, text);
        return HT_EBADARG;
    }
    memcpy(a, text, (size_t)(colon - text));
    a[colon - text] = '\0';
    strcpy(b, colon + 1);
    *lo = 0;
    *hi = UINT64_MAX;
    if ((a[0] && parse(a, lo) != 0) || (b[0] && parse(b, hi) != 0)) {
        snprintf(err, errsz, "%s \"%s\": bad value", what, text);
        return HT_EBADARG;
    }
    if (*lo > *hi) {
        snprintf(err, errsz, "%s \"%s\" is reversed", what, text);
        return HT_EBADARG;
    }
    return 0;
}

static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcasecmp(names[i], s) == 0)
            return i;
    return -1;
}

static int add_patterns(struct frame_pat *pats, unsigned *n, const cJSON *list, const char *what,
                        char *err, size_t errsz)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        /* Both "a,b" and ["a","b"] are accepted. */
        const char *p = it->valuestring;
        while (*p) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            while (len && *p == ' ')
                p++, len--;
            if (len) {
                if (*n >= QARGS_MAX_PATTERNS) {
                    snprintf(err, errsz, "more than %d %s patterns in one query",
                             QARGS_MAX_PATTERNS, what);
                    return HT_EBADARG;
                }
                if (frame_pat_parse(p, len, &pats[*n]) != 0) {
                    snprintf(err, errsz, "bad %s pattern \"%.*s\"", what, (int)len, p);
                    return HT_EBADARG;
                }
                (*n)++;
            }
            p += len + (comma ? 1 : 0);
        }
    }
    return 0;
}

int qargs_types(const cJSON *v, unsigned *types, char *err, size_t errsz)
{
    *types = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        char *save = NULL, buf[64];
        snprintf(buf, sizeof(buf), "%s", it->valuestring);
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            int t = name_index(ht_type_names, tok);
            if (t < 0 && strcasecmp(tok, "transient") == 0)
                t = HT_AIFI;
            if (t < 0 && strcasecmp(tok, "impacting") == 0)
                t = HT_AIFO;
            if (t < 0) {
                snprintf(err, errsz, "unknown type \"%s\" (AIFI, AIFO, AOFI, AOFO)", tok);
                return HT_EBADARG;
            }
            *types |= 1u << t;
        }
    }
    if (!*types) {
        snprintf(err, errsz, "--type names no type");
        return HT_EBADARG;
    }
    return 0;
}

int qargs_parse(struct qargs *qa, struct session *s, const struct ht_config *cfg, const cJSON *args,
                int domain, char *err, size_t errsz)
{
    struct query *q = &qa->q;
    query_init(q);
    q->domain = domain;
    q->top = 50;
    q->t2 = s->eng.now;
    qa->has_range = 0;
    const cJSON *v;
    int rc = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "range"))) {
        if ((rc = range_parse(s, v->valuestring, &q->t1, &q->t2, err, errsz)))
            return rc;
        qa->has_range = 1;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "type"))) {
        int rc = qargs_types(v, &q->types, err, errsz);
        if (rc)
            return rc;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "by"))) {
        if ((q->by = name_index(ht_by_names, v->valuestring)) < 0) {
            snprintf(err, errsz, "--by must be stack, frame, image, heap or type");
            return HT_EBADARG;
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "sort"))) {
        if ((q->sort = name_index(ht_sort_names, v->valuestring)) < 0) {
            snprintf(err, errsz, "--sort must be so, soc, st, stc, src or impact");
            return HT_EBADARG;
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "top"))) {
        if (v->valuedouble < 1 || v->valuedouble > HT_QUERY_TOP_MAX) {
            snprintf(err, errsz, "--top must be between 1 and %d", HT_QUERY_TOP_MAX);
            return HT_EBADARG;
        }
        q->top = (uint32_t)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "size")) &&
        (rc = pair_parse(v->valuestring, ht_parse_size, "--size", &q->size_min, &q->size_max, err,
                         errsz)))
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "lifetime")) &&
        (rc = pair_parse(v->valuestring, ht_parse_duration, "--lifetime", &q->life_min,
                         &q->life_max, err, errsz)))
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "list")))
        q->list = cJSON_IsTrue(v);
    if (q->list && !cJSON_GetObjectItemCaseSensitive(args, "sort"))
        q->sort = HT_SORT_ST; /* one block per row: biggest first */
    unsigned nreq = 0, ncull = 0;
    if ((rc = add_patterns(qa->require, &nreq, cJSON_GetObjectItemCaseSensitive(args, "require"),
                           "--require", err, errsz)))
        return rc;
    if ((rc = add_patterns(qa->cull, &ncull, cJSON_GetObjectItemCaseSensitive(args, "cull"),
                           "--cull and --cull-list", err, errsz)))
        return rc;
    if ((rc = add_patterns(qa->cull, &ncull, cJSON_GetObjectItemCaseSensitive(args, "cull_list"),
                           "--cull and --cull-list", err, errsz)))
        return rc;
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "no_default_cull"))) {
        /* The default list alone is the same every time: its per-stack
         * result is kept in the session across queries. */
        if (ncull == 0)
            q->skip_cache = &s->default_skip;
        /* The whole list, always: it has room of its own (config.c caps it). */
        if (cfg->ncull > HT_CULL_DEFAULT_MAX) {
            snprintf(err, errsz, "the default cull list has more than %d patterns",
                     HT_CULL_DEFAULT_MAX);
            return HT_EBADARG;
        }
        memcpy(qa->cull + ncull, cfg->cull_pats, cfg->ncull * sizeof(*cfg->cull_pats));
        ncull += cfg->ncull;
    }
    q->require = qa->require;
    q->nrequire = nreq;
    q->cull = qa->cull;
    q->ncull = ncull;
    return 0;
}

static cJSON *frames_json(const struct stack_intern *si, uint32_t stack, unsigned skip)
{
    cJSON *arr = cJSON_CreateArray();
    unsigned d;
    const uint64_t *f = stack_intern_frames(si, stack, &d);
    char buf[FRAME_TEXT_MAX];
    for (unsigned k = skip; k < d; k++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(frame_text(si, f[k], buf, sizeof(buf))));
    return arr;
}

static void figures_json(cJSON *o, const struct query_row *r)
{
    cJSON_AddNumberToObject(o, "count", (double)query_row_count(r));
    cJSON_AddNumberToObject(o, "size", (double)query_row_size(r));
    cJSON_AddNumberToObject(o, "impacting", (double)query_row_impacting(r));
    cJSON_AddNumberToObject(o, "outstanding", (double)query_row_outstanding(r));
    cJSON_AddNumberToObject(o, "outstanding_count", (double)query_row_outstanding_count(r));
    cJSON_AddNumberToObject(o, "reallocs", (double)r->reallocs);
    cJSON *types = cJSON_AddObjectToObject(o, "types");
    for (int k = 0; k < 4; k++) {
        if (!r->count[k] && !r->bytes[k])
            continue;
        cJSON *t = cJSON_AddObjectToObject(types, ht_type_names[k]);
        cJSON_AddNumberToObject(t, "count", (double)r->count[k]);
        cJSON_AddNumberToObject(t, "size", (double)r->bytes[k]);
    }
    if (r->untracked_count || r->untracked_bytes) {
        cJSON *u = cJSON_AddObjectToObject(o, "untracked");
        cJSON_AddNumberToObject(u, "count", (double)r->untracked_count);
        cJSON_AddNumberToObject(u, "size", (double)r->untracked_bytes);
    }
}

static void hex_json(cJSON *o, const char *key, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
    cJSON_AddStringToObject(o, key, buf);
}

/* A sampled session (run --sample, --max-overhead) says so in every reply:
 * its counts and sizes are estimates. Exact sessions' replies are unchanged. */
static void sampled_json(cJSON *o, const struct source_stats *in)
{
    if (!in->sampling)
        return;
    cJSON *sm = cJSON_AddObjectToObject(o, "sampled");
    cJSON_AddNumberToObject(sm, "mean_bytes", (double)in->sample_mean);
    cJSON_AddNumberToObject(sm, "sampled_allocs", (double)in->sampled_allocs);
    if (in->sample_max_overhead) {
        cJSON_AddNumberToObject(sm, "max_overhead_pct", in->sample_max_overhead);
        cJSON_AddNumberToObject(sm, "overhead_pct", (double)in->sample_overhead_ppm / 1e4);
        cJSON_AddNumberToObject(sm, "rate_changes", (double)in->sample_rate_changes);
    }
    cJSON_AddNumberToObject(o, "sample_set_full", (double)in->sample_set_full);
}

cJSON *quality_json(struct session *s)
{
    cJSON *o = cJSON_CreateObject();
#define X(name, doc) cJSON_AddNumberToObject(o, #name, (double)s->eng.q.name);
    HT_QUALITY_MAP(X)
#undef X
    /* Lost: "lost" records in the stream, and what the source itself knows it lost. */
    if (s->ingest.lost)
        cJSON_ReplaceItemInObjectCaseSensitive(
            o, "lost", cJSON_CreateNumber((double)(s->eng.q.lost + s->ingest.lost)));
    cJSON_AddNumberToObject(o, "malformed_lines", (double)s->ingest.malformed);
    cJSON_AddNumberToObject(o, "ring_drops",
                            (double)(s->eng.heap_life.dropped + s->eng.commit_life.dropped));
    cJSON_AddNumberToObject(o, "commit_split_drops", (double)s->eng.commits.split_drops);
    /* Both interners count: the engine's and the source's private one. */
    const struct source_stats *in = &s->ingest;
    cJSON_AddNumberToObject(o, "stack_table_drops",
                            (double)(s->eng.si.drops + in->stack_table_drops));
    cJSON_AddNumberToObject(o, "string_drops", (double)(s->eng.si.str_drops + in->string_drops));
    cJSON_AddNumberToObject(o, "long_names", (double)(s->eng.si.long_names + in->long_names));
    cJSON_AddNumberToObject(o, "invalid_utf8_names",
                            (double)(s->eng.si.bad_utf8 + in->bad_utf8_names));
    uint64_t over = mem_acct_refusals(&s->eng.acct, 1), nomem = mem_acct_refusals(&s->eng.acct, 0);
    for (int k = 0; k < MEM_KINDS; k++) {
        over += in->over_budget[k];
        nomem += in->no_memory[k];
    }
    cJSON_AddNumberToObject(o, "budget_drops", (double)over);
    cJSON_AddNumberToObject(o, "no_memory_drops", (double)nomem);
    cJSON_AddNumberToObject(o, "timeline_drops", (double)s->eng.tl.dropped);
    cJSON_AddNumberToObject(o, "snapshots_over_budget", (double)s->snaps_over_budget);
    cJSON_AddNumberToObject(o, "recorder_drops", (double)s->recorder_drops);
    sampled_json(o, in);
    return o;
}

cJSON *query_row_json(const struct stack_intern *si, const struct query *q,
                      const struct query_result *res, const struct query_row *r)
{
    char buf[FRAME_TEXT_MAX];
    cJSON *o = cJSON_CreateObject();
    if (q->list) {
        cJSON_AddNumberToObject(o, "alloc_time", (double)r->a);
        if (r->f != UINT64_MAX)
            cJSON_AddNumberToObject(o, "free_time", (double)r->f);
        else
            cJSON_AddNullToObject(o, "free_time");
        cJSON_AddItemToObject(o, "frames", frames_json(si, r->stack, r->skip));
    } else {
        switch (q->by) {
        case HT_BY_FRAME: {
            /* The function the row groups (query.c function_key). */
            char fn[HT_STR_MAX_LEN + 1];
            const char *text = frame_text(si, r->key, buf, sizeof(buf));
            size_t len = frame_function_len(text);
            if (len && len < strlen(text)) {
                snprintf(fn, sizeof(fn), "%.*s", (int)len, text);
                text = fn;
            }
            cJSON_AddStringToObject(o, "frame", text);
            break;
        }
        case HT_BY_IMAGE: {
            const char *m = query_result_image(res, r->key);
            cJSON_AddStringToObject(o, "image", m ? m : "?");
            break;
        }
        case HT_BY_HEAP:
            hex_json(o, "heap", r->key);
            break;
        case HT_BY_TYPE:
            cJSON_AddStringToObject(o, "type", ht_type_names[r->key]);
            break;
        default:
            cJSON_AddItemToObject(o, "frames", frames_json(si, r->stack, r->skip));
            break;
        }
    }
    figures_json(o, r);
    return o;
}

cJSON *query_rows_json(const struct stack_intern *si, const struct query *q,
                       const struct query_result *res)
{
    cJSON *rows = cJSON_CreateArray();
    for (uint32_t i = 0; rows && i < res->nrows; i++) {
        cJSON *o = query_row_json(si, q, res, &res->rows[i]);
        if (!o || !cJSON_AddItemToArray(rows, o)) {
            cJSON_Delete(o);
            cJSON_Delete(rows);
            return NULL;
        }
    }
    return rows;
}

cJSON *query_result_json(struct session *s, const struct query *q, const struct query_result *res)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", s->id);
    cJSON *proc = cJSON_AddObjectToObject(d, "process");
    cJSON_AddNumberToObject(proc, "pid", (double)s->eng.pid);
    cJSON_AddStringToObject(proc, "name", s->process_name);
    cJSON_AddStringToObject(d, "domain", q->domain == HT_DOM_HEAP ? "heap" : "commit");
    cJSON *w = cJSON_AddObjectToObject(d, "window");
    cJSON_AddNumberToObject(w, "t1", (double)q->t1);
    cJSON_AddNumberToObject(w, "t2", (double)(q->t2 > s->eng.now ? s->eng.now : q->t2));
    cJSON_AddNumberToObject(w, "wall_start", (double)s->wall_start);
    cJSON_AddStringToObject(d, "by", q->list ? "block" : ht_by_names[q->by]);
    cJSON_AddStringToObject(d, "sort", ht_sort_names[q->sort]);
    cJSON_AddBoolToObject(d, "complete", res->complete);
    if (!res->complete)
        cJSON_AddNumberToObject(d, "horizon", (double)res->horizon);
    cJSON_AddBoolToObject(d, "exact_totals", res->exact_totals);
    cJSON_AddNumberToObject(d, "groups", (double)res->ngroups);
    cJSON *rows = cJSON_AddArrayToObject(d, "rows");
    for (uint32_t i = 0; i < res->nrows; i++)
        cJSON_AddItemToArray(rows, query_row_json(&s->eng.si, q, res, &res->rows[i]));
    cJSON *total = cJSON_AddObjectToObject(d, "total");
    figures_json(total, &res->total);
    cJSON_AddItemToObject(d, "quality", quality_json(s));
    return d;
}
