/* timeline: outstanding heap, committed and private bytes sampled over time. */
#include "server.h"

#include "ht-error.h"
#include "ht-units.h"
#include "query-args.h"

#include <cjson/cJSON.h>
#include <stdio.h>

int timeline_build(struct session *s, const cJSON *args, cJSON **out, char *err, size_t errsz)
{
    const struct timeline *tl = &s->eng.tl;
    uint64_t t1 = 0, t2 = UINT64_MAX, step = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "range");
    int rc;
    if (v && (rc = range_parse(s, v->valuestring, &t1, &t2, err, errsz)))
        return rc;
    v = cJSON_GetObjectItemCaseSensitive(args, "step");
    if (v && (ht_parse_duration(v->valuestring, &step) != 0 || step == 0)) {
        snprintf(err, errsz, "--step must be a positive duration like 1s or 250ms");
        return HT_EBADARG;
    }
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", s->id);
    cJSON_AddNumberToObject(d, "interval_ns", (double)s->eng.lim.timeline_ns);
    uint64_t n = timeline_len(tl);
    uint64_t oldest = n ? timeline_at(tl, 0)->t : 0;
    /* Samples older than the ring's oldest are gone: say so. */
    int complete = tl->pushed <= tl->cap || t1 >= oldest;
    cJSON_AddBoolToObject(d, "complete", complete);
    if (!complete)
        cJSON_AddNumberToObject(d, "horizon", (double)oldest);
    cJSON *arr = cJSON_AddArrayToObject(d, "samples");
    uint64_t next = t1;
    for (uint64_t i = 0; i < n; i++) {
        const struct tl_sample *x = timeline_at(tl, i);
        if (x->t < t1 || x->t > t2)
            continue;
        if (step && x->t < next)
            continue;
        if (step)
            next = x->t - (x->t - t1) % step + step;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "t", (double)x->t);
        cJSON_AddNumberToObject(o, "heap", (double)x->heap_bytes);
        cJSON_AddNumberToObject(o, "heap_count", (double)x->heap_count);
        cJSON_AddNumberToObject(o, "committed", (double)x->commit_bytes);
        cJSON_AddNumberToObject(o, "private_bytes", (double)x->private_bytes);
        cJSON *ph = cJSON_AddArrayToObject(o, "per_heap");
        for (uint32_t h = 0; h < HT_TIMELINE_HEAPS && h < s->eng.nheaps; h++)
            cJSON_AddItemToArray(ph, cJSON_CreateNumber((double)x->per_heap[h]));
        cJSON_AddItemToArray(arr, o);
    }
    cJSON *heaps = cJSON_AddArrayToObject(d, "heaps");
    for (uint32_t h = 0; h < s->eng.nheaps && h < HT_TIMELINE_HEAPS; h++) {
        char buf[32];
        if (h == HT_TIMELINE_HEAPS - 1 && s->eng.nheaps > HT_TIMELINE_HEAPS)
            snprintf(buf, sizeof(buf), "other");
        else
            snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)s->eng.heaps[h].handle);
        cJSON_AddItemToArray(heaps, cJSON_CreateString(buf));
    }
    *out = d;
    return 0;
}

int cmd_timeline(struct cmd_ctx *ctx)
{
    char err[256];
    cJSON *d;
    int rc = timeline_build(ctx->s, ctx->req->args, &d, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    return cmd_reply(ctx, d);
}
