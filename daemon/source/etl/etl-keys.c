/* Stack-key definitions of an .etl file, kept between the two passes. Payloads (PerfView's
 * KernelTraceEventParser, StackWalkDefTraceData): StackKey P, then the frames, P bytes each,
 * P the record's own pointer size. */
#include "etl-keys.h"

#include <stdlib.h>
#include <string.h>

#define HOOK_KEY_CREATE 0x1822 /* ntwmi.h PERFINFO_LOG_TYPE_STACKKEY_CREATE */
#define HOOK_KEY_RUNDOWN 0x1824

struct key_def {
    uint64_t key, ts;
    uint64_t at; /* first frame in frames */
    uint32_t n;
};

struct etl_keys {
    struct key_def *defs;
    size_t ndefs, capdefs;
    uint64_t *frames;
    uint64_t nframes, capframes, max_frames;
    struct etl_keys_stats st;
};

struct etl_keys *etl_keys_new(uint64_t max_frames)
{
    struct etl_keys *k = calloc(1, sizeof(*k));
    if (k)
        k->max_frames = max_frames ? max_frames : 1u << 22;
    return k;
}

void etl_keys_free(struct etl_keys *k)
{
    if (!k)
        return;
    free(k->defs);
    free(k->frames);
    free(k);
}

static uint64_t rd_ptr(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int room(struct etl_keys *k, uint32_t n)
{
    if (k->nframes + n > k->max_frames)
        return -1;
    if (k->nframes + n > k->capframes) {
        uint64_t cap = k->capframes ? k->capframes * 2 : 4096;
        while (cap < k->nframes + n)
            cap *= 2;
        if (cap > k->max_frames)
            cap = k->max_frames;
        uint64_t *f = realloc(k->frames, cap * sizeof(*f));
        if (!f)
            return -1;
        k->frames = f;
        k->capframes = cap;
    }
    if (k->ndefs == k->capdefs) {
        size_t cap = k->capdefs ? k->capdefs * 2 : 1024;
        struct key_def *d = realloc(k->defs, cap * sizeof(*d));
        if (!d)
            return -1;
        k->defs = d;
        k->capdefs = cap;
    }
    return 0;
}

void etl_keys_collect(void *arg, const struct etl_record *r)
{
    struct etl_keys *k = arg;
    if (r->has_guid || r->hook < HOOK_KEY_CREATE || r->hook > HOOK_KEY_RUNDOWN)
        return;
    unsigned p = r->ptr_size ? r->ptr_size : 8;
    if (r->len < p) {
        k->st.short_records++;
        return;
    }
    uint32_t n = (r->len - p) / p;
    if (room(k, n) < 0) {
        k->st.defs_dropped++;
        return;
    }
    struct key_def *d = &k->defs[k->ndefs++];
    d->key = rd_ptr(r->payload, p);
    d->ts = r->ts;
    d->at = k->nframes;
    d->n = n;
    for (uint32_t i = 0; i < n; i++)
        k->frames[k->nframes++] = rd_ptr(r->payload + p + (size_t)i * p, p);
    k->st.defs++;
    k->st.frames += n;
}

static int def_cmp(const void *a, const void *b)
{
    const struct key_def *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

void etl_keys_seal(struct etl_keys *k)
{
    if (k->ndefs)
        qsort(k->defs, k->ndefs, sizeof(*k->defs), def_cmp);
}

const uint64_t *etl_keys_find(const struct etl_keys *k, uint64_t key, uint64_t ts, uint32_t *n)
{
    /* The first definition not before (key, ts). */
    size_t lo = 0, hi = k->ndefs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct key_def *d = &k->defs[mid];
        if (d->key < key || (d->key == key && d->ts < ts))
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct key_def *d = NULL;
    if (lo < k->ndefs && k->defs[lo].key == key)
        d = &k->defs[lo];
    else if (lo > 0 && k->defs[lo - 1].key == key)
        d = &k->defs[lo - 1];
    if (!d)
        return NULL;
    *n = d->n;
    return k->frames + d->at;
}

void etl_keys_stats(const struct etl_keys *k, struct etl_keys_stats *out)
{
    *out = k->st;
}
