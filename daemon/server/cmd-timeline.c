/* timeline: outstanding heap, committed and private bytes sampled over time. */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-units.h"
#include "query-args.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

int timeline_head(struct session *s, const cJSON *args, cJSON **out, struct tl_span *sp, char *err,
                  size_t errsz)
{
    const struct timeline *tl = &session_engine(s)->tl;
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
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON_AddNumberToObject(d, "interval_ns", (double)session_engine(s)->lim.timeline_ns);
    uint64_t n = timeline_len(tl);
    uint64_t oldest = n ? timeline_at(tl, 0)->t : 0;
    /* Samples older than the ring's oldest are gone: say so. */
    int complete = tl->pushed <= tl->cap || t1 >= oldest;
    cJSON_AddBoolToObject(d, "complete", complete);
    if (!complete)
        cJSON_AddNumberToObject(d, "horizon", (double)oldest);
    cJSON_AddArrayToObject(d, "samples");
    cJSON *heaps = cJSON_AddArrayToObject(d, "heaps");
    for (uint32_t h = 0; h < session_engine(s)->nheaps && h < HT_TIMELINE_HEAPS; h++) {
        char buf[32];
        if (h == HT_TIMELINE_HEAPS - 1 && session_engine(s)->nheaps > HT_TIMELINE_HEAPS)
            snprintf(buf, sizeof(buf), "other");
        else
            snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)session_engine(s)->heaps[h].handle);
        cJSON_AddItemToArray(heaps, cJSON_CreateString(buf));
    }
    /* The reply holds the samples taken so far: a live session's later ones
     * are not chased while the reply streams out. */
    uint64_t newest = n ? timeline_at(tl, n - 1)->t : 0;
    memset(sp, 0, sizeof(*sp));
    sp->t1 = t1;
    sp->t2 = t2 < newest ? t2 : newest;
    sp->step = step;
    sp->next = t1;
    sp->started = n == 0; /* with last_t = t2 = 0: nothing to send */
    if (!n)
        sp->t2 = 0;
    *out = d;
    return 0;
}

/* Index of the first sample at or after t (samples are in time order). */
static uint64_t sample_search(const struct timeline *tl, uint64_t t)
{
    uint64_t lo = 0, hi = timeline_len(tl);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (timeline_at(tl, mid)->t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const struct tl_sample *timeline_next(struct session *s, struct tl_span *sp)
{
    const struct timeline *tl = &session_engine(s)->tl;
    uint64_t from = sp->t1;
    if (sp->started) {
        if (sp->last_t >= sp->t2)
            return NULL;
        from = sp->last_t + 1;
    }
    if (sp->step && sp->next > from)
        from = sp->next;
    uint64_t i = sample_search(tl, from);
    if (i >= timeline_len(tl))
        return NULL;
    const struct tl_sample *x = timeline_at(tl, i);
    if (x->t > sp->t2)
        return NULL;
    sp->started = 1;
    sp->last_t = x->t;
    if (sp->step) {
        /* The step's next slot after x; saturated at the end of time. */
        uint64_t slot = x->t - (x->t - sp->t1) % sp->step;
        sp->next = slot > UINT64_MAX - sp->step ? UINT64_MAX : slot + sp->step;
    }
    return x;
}

cJSON *timeline_sample_json(struct session *s, const struct tl_sample *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "t", (double)x->t);
    cJSON_AddNumberToObject(o, "heap", (double)x->heap_bytes);
    cJSON_AddNumberToObject(o, "heap_count", (double)x->heap_count);
    cJSON_AddNumberToObject(o, "committed", (double)x->commit_bytes);
    cJSON_AddNumberToObject(o, "private_bytes", (double)x->private_bytes);
    cJSON *ph = cJSON_AddArrayToObject(o, "per_heap");
    for (uint32_t h = 0; h < HT_TIMELINE_HEAPS && h < session_engine(s)->nheaps; h++)
        cJSON_AddItemToArray(ph, cJSON_CreateNumber((double)x->per_heap[h]));
    return o;
}

/* The samples stream out a frame at a time. */
struct samples_src {
    struct reply_src base;
    struct server *srv;
    uint32_t session;
    uint32_t rank;
    struct tl_span span;
    reply_fmt_fn fmt;
    const void *fmt_arg;
};

static int samples_item(struct reply_src *r, struct ht_sbuf *out, char *err, size_t errsz)
{
    struct samples_src *t = (struct samples_src *)r;
    struct session *s = reply_session(t->srv, t->session, err, errsz);
    if (!s)
        return HT_ENOSESSION;
    int rc = 0;
    const struct tl_sample *x;
    while (rc == 0 && (x = timeline_next(s, &t->span))) {
        cJSON *o = timeline_sample_json(s, x);
        rc = reply_item_add(o, t->fmt, t->fmt_arg, ++t->rank, out);
        cJSON_Delete(o);
    }
    return rc;
}

static void samples_src_free(struct reply_src *r)
{
    ht_free(r);
}

int samples_reply(struct cmd_ctx *ctx, const struct tl_span *sp, cJSON *data, cJSON *arr,
                  cJSON *outer, reply_fmt_fn fmt, const void *fmt_arg, const char *lead)
{
    struct samples_src *t = ht_calloc(1, sizeof(*t));
    if (!t) {
        cJSON_Delete(data);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    t->srv = ctx->srv;
    t->session = session_id(ctx->s);
    t->span = *sp;
    t->fmt = fmt;
    t->fmt_arg = fmt_arg;
    t->base.item = samples_item;
    t->base.free = samples_src_free;
    t->base.lead = lead;
    return reply_start(ctx, &t->base, data, arr, outer);
}

int cmd_timeline(struct cmd_ctx *ctx)
{
    char err[256];
    cJSON *d;
    struct tl_span sp;
    int rc = timeline_head(ctx->s, ctx->req->args, &d, &sp, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    return samples_reply(ctx, &sp, d, cJSON_GetObjectItemCaseSensitive(d, "samples"), NULL, NULL,
                         NULL, NULL);
}
