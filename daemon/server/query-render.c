/* Query results as reply JSON: rows with symbolized frames, totals, completeness, data quality. */
#include "query-render.h"

#include "commands.h"
#include "engine.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

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
            /* The function the row groups (query-image.c function_key). */
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
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON *proc = cJSON_AddObjectToObject(d, "process");
    cJSON_AddNumberToObject(proc, "pid", (double)session_engine(s)->pid);
    cJSON_AddStringToObject(proc, "name", session_process_name(s));
    cJSON_AddStringToObject(d, "domain", q->domain == HT_DOM_HEAP ? "heap" : "commit");
    cJSON *w = cJSON_AddObjectToObject(d, "window");
    cJSON_AddNumberToObject(w, "t1", (double)q->t1);
    cJSON_AddNumberToObject(w, "t2", (double)(q->t2 > session_engine(s)->now ? session_engine(s)->now : q->t2));
    cJSON_AddNumberToObject(w, "wall_start", (double)session_wall_start(s));
    cJSON_AddStringToObject(d, "by", q->list ? "block" : ht_by_names[q->by]);
    cJSON_AddStringToObject(d, "sort", ht_sort_names[q->sort]);
    cJSON_AddBoolToObject(d, "complete", res->complete);
    if (!res->complete)
        cJSON_AddNumberToObject(d, "horizon", (double)res->horizon);
    cJSON_AddBoolToObject(d, "exact_totals", res->exact_totals);
    cJSON_AddNumberToObject(d, "groups", (double)res->ngroups);
    cJSON *rows = cJSON_AddArrayToObject(d, "rows");
    for (uint32_t i = 0; i < res->nrows; i++)
        cJSON_AddItemToArray(rows, query_row_json(&session_engine(s)->si, q, res, &res->rows[i]));
    cJSON *total = cJSON_AddObjectToObject(d, "total");
    figures_json(total, &res->total);
    cJSON_AddItemToObject(d, "quality", session_quality_json(s));
    return d;
}
