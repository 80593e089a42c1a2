/* Stack keys of an .etl file in one pass. Payloads (PerfView's KernelTraceEventParser,
 * StackWalkDefTraceData): StackKey P, then the frames, P bytes each, P the record's own
 * pointer size. A definition is interned once (etl_keys_stack_fn) and its references take
 * the stack id: frames are never kept here, only ids. */
#include "etl-keys.h"

#include "ht-event.h"

#include <stdlib.h>
#include <string.h>

#define HOOK_KEY_CREATE 0x1822 /* ntwmi.h PERFINFO_LOG_TYPE_STACKKEY_CREATE */
#define HOOK_KEY_RUNDOWN 0x1824

enum { REF_FREE, REF_WAIT, REF_READY };

struct key_def {
    uint64_t key;
    uint32_t stack;
    uint8_t flags, used, create; /* create: the key's last definition made it (in the cache) */
};

/* A reference, in a ring by id (the oldest is pushed out first); the ones waiting are
 * chained by key hash, doubly so that one leaves in O(1). */
struct key_ref {
    uint64_t id, key;
    uint32_t prev, next; /* slot + 1 in its bucket's chain, 0 = none */
    uint64_t gone;       /* the id this slot held before, pushed out while still waiting */
    uint32_t stack;
    uint8_t state, flags;
    uint8_t lost; /* given up waiting (a cap), not unresolved: its event's stack was dropped */
};

struct etl_keys {
    etl_keys_stack_fn fn;
    void *arg;
    struct etl_keys_limits lim;
    struct key_def *defs;
    uint32_t defs_cap, ndefs;
    struct key_ref *refs; /* lim.max_waiting slots */
    uint32_t *bucket;     /* slot + 1 of a chain's head */
    uint32_t nbuckets, nwaiting;
    int creates; /* a KeyCreate was read: references look for a current definition */
    uint64_t next_id;
    struct etl_keys_stats st;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull; /* MurmurHash3's fmix64 constant */
    x ^= x >> 33;
    return x;
}

struct etl_keys *etl_keys_new(const struct etl_keys_limits *lim, etl_keys_stack_fn fn, void *arg)
{
    struct etl_keys *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->fn = fn;
    k->arg = arg;
    k->lim.max_waiting = lim && lim->max_waiting ? lim->max_waiting : ETL_KEYS_WAITING;
    k->lim.max_keys = lim && lim->max_keys ? lim->max_keys : 1u << 20;
    k->next_id = 1;
    k->nbuckets = 1;
    while (k->nbuckets < k->lim.max_waiting)
        k->nbuckets <<= 1;
    k->defs_cap = 1024;
    k->defs = calloc(k->defs_cap, sizeof(*k->defs));
    /* The list and its buckets are made when a reference first waits: a file without
     * stack keys costs nothing. */
    if (!k->defs) {
        free(k);
        return NULL;
    }
    return k;
}

void etl_keys_free(struct etl_keys *k)
{
    if (!k)
        return;
    free(k->defs);
    free(k->refs);
    free(k->bucket);
    free(k);
}

static uint64_t rd_ptr(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static struct key_def *def_slot(struct key_def *t, uint32_t cap, uint64_t key)
{
    uint32_t i = (uint32_t)mix(key) & (cap - 1);
    while (t[i].used && t[i].key != key)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

/* Half full at most; past lim.max_keys keys a new one is not kept. 0, or -1. */
static int defs_room(struct etl_keys *k)
{
    if ((uint64_t)(k->ndefs + 1) * 2 <= k->defs_cap)
        return 0;
    if (k->ndefs >= k->lim.max_keys)
        return -1;
    uint32_t cap = k->defs_cap * 2;
    struct key_def *t = calloc(cap, sizeof(*t));
    if (!t)
        return -1;
    for (uint32_t i = 0; i < k->defs_cap; i++)
        if (k->defs[i].used)
            *def_slot(t, cap, k->defs[i].key) = k->defs[i];
    free(k->defs);
    k->defs = t;
    k->defs_cap = cap;
    return 0;
}

static const struct key_def *def_find(const struct etl_keys *k, uint64_t key)
{
    const struct key_def *d = def_slot(k->defs, k->defs_cap, key);
    return d->used ? d : NULL;
}

static uint32_t bucket_of(const struct etl_keys *k, uint64_t key)
{
    return (uint32_t)mix(key) & (k->nbuckets - 1);
}

static void unlink_ref(struct etl_keys *k, uint32_t slot)
{
    struct key_ref *r = &k->refs[slot];
    if (r->prev)
        k->refs[r->prev - 1].next = r->next;
    else
        k->bucket[bucket_of(k, r->key)] = r->next;
    if (r->next)
        k->refs[r->next - 1].prev = r->prev;
    r->prev = r->next = 0;
    k->nwaiting--;
}

static void resolve(struct key_ref *r, uint32_t stack, uint8_t flags)
{
    r->state = REF_READY;
    r->stack = stack;
    r->flags = flags;
}

/* The references waiting for key take the definition just read. */
static void wake(struct etl_keys *k, uint64_t key, uint32_t stack, uint8_t flags)
{
    if (!k->bucket)
        return;
    uint32_t s = k->bucket[bucket_of(k, key)];
    while (s) {
        uint32_t slot = s - 1;
        s = k->refs[slot].next;
        if (k->refs[slot].key != key)
            continue;
        unlink_ref(k, slot);
        resolve(&k->refs[slot], stack, flags);
    }
}

void etl_keys_define(struct etl_keys *k, const struct etl_record *r)
{
    if (r->has_guid || r->hook < HOOK_KEY_CREATE || r->hook > HOOK_KEY_RUNDOWN)
        return;
    unsigned p = r->ptr_size ? r->ptr_size : 8;
    if (r->len < p) {
        k->st.short_records++;
        return;
    }
    uint64_t key = rd_ptr(r->payload, p);
    uint8_t flags = 0;
    uint32_t stack = k->fn(k->arg, r->payload + p, (r->len - p) / p, p, &flags);
    k->st.defs++;
    wake(k, key, stack, flags);
    struct key_def *d = def_slot(k->defs, k->defs_cap, key);
    if (!d->used) {
        if (defs_room(k) < 0) {
            k->st.defs_dropped++;
            return;
        }
        d = def_slot(k->defs, k->defs_cap, key);
        d->used = 1;
        d->key = key;
        k->ndefs++;
    }
    d->stack = stack;
    d->flags = flags;
    d->create = r->hook == HOOK_KEY_CREATE;
    k->creates |= d->create;
}

static int list_make(struct etl_keys *k)
{
    k->refs = calloc(k->lim.max_waiting, sizeof(*k->refs));
    k->bucket = calloc(k->nbuckets, sizeof(*k->bucket));
    return k->refs && k->bucket ? 0 : -1;
}

uint64_t etl_keys_ref(struct etl_keys *k, uint64_t key)
{
    k->st.refs++;
    if (!k->refs && list_make(k) < 0) {
        k->st.dropped++;
        return 0;
    }
    uint64_t id = k->next_id++;
    uint32_t slot = (uint32_t)(id % k->lim.max_waiting);
    struct key_ref *r = &k->refs[slot];
    /* The oldest reference gives way: bounded memory whatever the file holds. */
    uint64_t gone = 0;
    if (r->state == REF_WAIT) {
        unlink_ref(k, slot);
        k->st.dropped++;
        gone = r->id;
    }
    memset(r, 0, sizeof(*r));
    r->gone = gone;
    r->id = id;
    r->key = key;
    const struct key_def *d = k->creates ? def_find(k, key) : NULL;
    if (d && d->create) {
        resolve(r, d->stack, d->flags);
        return id;
    }
    r->state = REF_WAIT;
    uint32_t b = bucket_of(k, key);
    r->next = k->bucket[b];
    if (r->next)
        k->refs[r->next - 1].prev = slot + 1;
    k->bucket[b] = slot + 1;
    k->st.waited++;
    if (++k->nwaiting > k->st.max_waiting)
        k->st.max_waiting = k->nwaiting;
    return id;
}

static struct key_ref *ref_of(struct etl_keys *k, uint64_t id)
{
    if (!k->refs || id == 0)
        return NULL;
    struct key_ref *r = &k->refs[id % k->lim.max_waiting];
    return r->id == id ? r : NULL;
}

int etl_keys_take(struct etl_keys *k, uint64_t id, uint32_t *stack, uint8_t *flags)
{
    struct key_ref *r = ref_of(k, id);
    if (!r && id && k->refs && k->refs[id % k->lim.max_waiting].gone != id)
        k->st.evicted++; /* resolved, then pushed out (a waiting one counted as dropped) */
    if (!r || r->state == REF_FREE) {
        /* Pushed out of the ring, or given up: a cap took the stack. Unresolved (no
         * definition in the file): the event had none. */
        if (id && (!r || r->lost))
            *flags = HT_EVF_STACK_DROPPED;
        return ETL_KEY_GONE;
    }
    if (r->state == REF_WAIT)
        return ETL_KEY_WAIT;
    *stack = r->stack;
    *flags = r->flags;
    r->state = REF_FREE;
    return ETL_KEY_READY;
}

void etl_keys_drop(struct etl_keys *k, uint64_t id)
{
    struct key_ref *r = ref_of(k, id);
    if (!r || r->state != REF_WAIT)
        return;
    unlink_ref(k, (uint32_t)(id % k->lim.max_waiting));
    r->state = REF_FREE;
    r->lost = 1;
    k->st.dropped++;
}

void etl_keys_finish(struct etl_keys *k)
{
    for (uint32_t i = 0; k->refs && i < k->lim.max_waiting; i++) {
        struct key_ref *r = &k->refs[i];
        if (r->state != REF_WAIT)
            continue;
        const struct key_def *d = def_find(k, r->key);
        unlink_ref(k, i);
        if (d) {
            resolve(r, d->stack, d->flags);
        } else {
            r->state = REF_FREE;
            k->st.unresolved++;
        }
    }
}

void etl_keys_stats(const struct etl_keys *k, struct etl_keys_stats *out)
{
    *out = k->st;
}
