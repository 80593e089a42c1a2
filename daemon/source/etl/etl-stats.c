/* ht-convert --stats: what an .etl file holds, counted from the reader's records. */
#include "etl-stats.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernel records carry a HookId, Group << 8 | Type, and no GUID; consumers show them under
 * the classic provider of the group (ntwmi.h EVENT_TRACE_GROUP_*; the GUIDs are the MOF
 * classes of Microsoft's "NT Kernel Logger" event documentation). */
struct provider {
    int group; /* -1: a GUID provider */
    const char *guid, *name;
};
static const struct provider providers[] = {
    {0x00, "68fdd900-4a3e-11d1-84f4-0000f80464e3", "EventTrace"},
    {0x01, "3d6fa8d4-fe05-11d0-9dda-00c04fd7ba7c", "DiskIo"},
    {0x02, "3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c", "PageFault"},
    {0x03, "3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c", "Process"},
    {0x04, "90cbdc39-4a3e-11d1-84f4-0000f80464e3", "FileIo"},
    {0x05, "3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c", "Thread"},
    {0x06, "9a280ac0-c8e0-11d1-84e2-00c04fb998a2", "TcpIp"},
    {0x08, "bf3a50c5-a9c9-4988-a005-2df0b7c80f80", "UdpIp"},
    {0x0B, "01853a65-418f-4f36-aefc-dc0f1d2fd235", "SystemConfig"},
    {0x0F, "ce1dbfb4-137e-4da6-87b0-3f59aa102cbc", "PerfInfo"},
    {0x10, "222962ab-6180-4b88-a825-346b75f2a24a", "Heap"},
    {0x14, "2cb15d1d-5fc1-11d2-abe1-00a0c911f518", "ImageLoad"},
    {0x18, "def2fe46-7bd6-4b80-bd94-f57fe20d0ce3", "StackWalk"},
    {-1, "b3e675d7-2554-4f18-830b-2762732560de", "KernelTraceControl"},
    {-1, "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4", "Microsoft-Windows-DotNETRuntime"},
    {-1, "a669021c-c450-4609-a035-5af59af4df18", "Microsoft-Windows-DotNETRuntimeRundown"},
    {-1, "763fd754-7086-4dfe-95eb-c01a46faf4ca", "Microsoft-Windows-DotNETRuntimePrivate"},
};

/* StackWalk hooks (ntwmi.h PERFINFO_LOG_TYPE_STACKWALK, _STACKKEY_*, _STACKTRACE_*). */
#define HOOK_STACK 0x1820
#define HOOK_KEY_CREATE 0x1822
#define HOOK_KEY_RUNDOWN 0x1824
#define HOOK_KEY_KERNEL 0x1825
#define HOOK_KEY_USER 0x1826

struct kind_row {
    uint8_t used, has_guid, opcode;
    uint16_t hook, id;
    uint8_t guid[16];
    uint64_t count;
};

#define KEY_REF 1
#define KEY_DEF 2

struct etl_stats {
    struct kind_row *kinds;
    uint32_t kinds_cap, nkinds, max_kinds;
    uint64_t kinds_dropped;
    uint64_t *keys; /* open addressing; 0 is empty (a key of 0 is stored as flags only) */
    uint8_t *key_flags;
    uint32_t keys_cap, nkeys, max_keys;
    uint64_t keys_dropped;
    uint64_t inline_stacks, key_refs, key_defs, short_stack_records;
    uint64_t last_ts, out_of_order;
};

struct etl_stats *etl_stats_new(uint32_t max_kinds, uint32_t max_keys)
{
    struct etl_stats *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->max_kinds = max_kinds ? max_kinds : 8192;
    s->max_keys = max_keys ? max_keys : 1u << 20;
    s->kinds_cap = 256;
    s->keys_cap = 1024;
    s->kinds = calloc(s->kinds_cap, sizeof(*s->kinds));
    s->keys = calloc(s->keys_cap, sizeof(*s->keys));
    s->key_flags = calloc(s->keys_cap, 1);
    if (!s->kinds || !s->keys || !s->key_flags) {
        etl_stats_free(s);
        return NULL;
    }
    return s;
}

void etl_stats_free(struct etl_stats *s)
{
    if (!s)
        return;
    free(s->kinds);
    free(s->keys);
    free(s->key_flags);
    free(s);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t kind_hash(const struct kind_row *k)
{
    uint64_t h =
        (uint64_t)k->has_guid << 40 | (uint64_t)k->hook << 24 | (uint64_t)k->id << 8 | k->opcode;
    for (int i = 0; i < 16; i++)
        h = mix(h ^ k->guid[i]);
    return mix(h);
}

static int kind_eq(const struct kind_row *a, const struct kind_row *b)
{
    return a->has_guid == b->has_guid && a->hook == b->hook && a->id == b->id &&
           a->opcode == b->opcode && !memcmp(a->guid, b->guid, 16);
}

static struct kind_row *kind_slot(struct kind_row *t, uint32_t cap, const struct kind_row *k)
{
    uint32_t i = (uint32_t)kind_hash(k) & (cap - 1);
    while (t[i].used && !kind_eq(&t[i], k))
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static int kinds_grow(struct etl_stats *s)
{
    uint32_t cap = s->kinds_cap * 2;
    struct kind_row *t = calloc(cap, sizeof(*t));
    if (!t)
        return -1;
    for (uint32_t i = 0; i < s->kinds_cap; i++)
        if (s->kinds[i].used)
            *kind_slot(t, cap, &s->kinds[i]) = s->kinds[i];
    free(s->kinds);
    s->kinds = t;
    s->kinds_cap = cap;
    return 0;
}

static void count_kind(struct etl_stats *s, const struct etl_record *r)
{
    struct kind_row k;
    memset(&k, 0, sizeof(k));
    k.used = 1;
    k.has_guid = (uint8_t)r->has_guid;
    k.opcode = r->opcode;
    k.hook = r->has_guid ? 0 : r->hook;
    k.id = r->id;
    if (r->has_guid)
        memcpy(k.guid, r->guid, 16);
    struct kind_row *row = kind_slot(s->kinds, s->kinds_cap, &k);
    if (!row->used) {
        if (s->nkinds == s->max_kinds ||
            (2 * (s->nkinds + 1) > s->kinds_cap && kinds_grow(s) < 0)) {
            s->kinds_dropped++;
            return;
        }
        row = kind_slot(s->kinds, s->kinds_cap, &k);
        *row = k;
        s->nkinds++;
    }
    row->count++;
}

static uint32_t key_slot(const uint64_t *t, uint32_t cap, uint64_t key)
{
    uint32_t i = (uint32_t)mix(key + 1) & (cap - 1);
    while (t[i] && t[i] != key + 1)
        i = (i + 1) & (cap - 1);
    return i;
}

static int keys_grow(struct etl_stats *s)
{
    uint32_t cap = s->keys_cap * 2;
    uint64_t *t = calloc(cap, sizeof(*t));
    uint8_t *f = calloc(cap, 1);
    if (!t || !f) {
        free(t);
        free(f);
        return -1;
    }
    for (uint32_t i = 0; i < s->keys_cap; i++) {
        if (s->keys[i]) {
            uint32_t j = key_slot(t, cap, s->keys[i] - 1);
            t[j] = s->keys[i];
            f[j] = s->key_flags[i];
        }
    }
    free(s->keys);
    free(s->key_flags);
    s->keys = t;
    s->key_flags = f;
    s->keys_cap = cap;
    return 0;
}

/* Keys are stored as key + 1 so that 0 marks an empty slot; a key of ~0 collides with
 * empty and is counted as dropped. */
static void mark_key(struct etl_stats *s, uint64_t key, uint8_t flag)
{
    if (key == UINT64_MAX) {
        s->keys_dropped++;
        return;
    }
    uint32_t i = key_slot(s->keys, s->keys_cap, key);
    if (!s->keys[i]) {
        if (s->nkeys == s->max_keys || (2 * (s->nkeys + 1) > s->keys_cap && keys_grow(s) < 0)) {
            s->keys_dropped++;
            return;
        }
        i = key_slot(s->keys, s->keys_cap, key);
        s->keys[i] = key + 1;
        s->nkeys++;
    }
    s->key_flags[i] |= flag;
}

static uint64_t rd_ptr(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* StackWalk payloads (PerfView's KernelTraceEventParser: StackWalkStackTraceData,
 * StackWalkRefTraceData, StackWalkDefTraceData): references are EventTimeStamp u64,
 * StackProcess u32, StackThread u32, StackKey P; definitions start with StackKey P. */
static void count_stack(struct etl_stats *s, const struct etl_record *r)
{
    unsigned p = r->ptr_size ? r->ptr_size : 8;
    if (r->hook == HOOK_STACK) {
        s->inline_stacks++;
    } else if (r->hook == HOOK_KEY_KERNEL || r->hook == HOOK_KEY_USER) {
        s->key_refs++;
        if (r->len < 16 + p)
            s->short_stack_records++;
        else
            mark_key(s, rd_ptr(r->payload + 16, p), KEY_REF);
    } else if (r->hook >= HOOK_KEY_CREATE && r->hook <= HOOK_KEY_RUNDOWN) {
        s->key_defs++;
        if (r->len < p)
            s->short_stack_records++;
        else
            mark_key(s, rd_ptr(r->payload, p), KEY_DEF);
    }
}

void etl_stats_record(void *arg, const struct etl_record *r)
{
    struct etl_stats *s = arg;
    if (r->ts < s->last_ts)
        s->out_of_order++;
    s->last_ts = r->ts;
    if (r->kind == ETL_HDR_WPP || r->kind == ETL_HDR_TIMED || r->kind == ETL_HDR_ERROR ||
        r->kind == ETL_HDR_WNODE || r->kind == ETL_HDR_MESSAGE)
        return; /* counted by kind only: no provider to name */
    count_kind(s, r);
    if (!r->has_guid && r->hook >> 8 == 0x18)
        count_stack(s, r);
}

/* The GUID's text form: Data1 u32, Data2 u16, Data3 u16 little-endian, then 8 bytes. */
static void guid_str(const uint8_t *g, char *out)
{
    snprintf(out, 37, "%08x-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             (unsigned)(g[0] | g[1] << 8 | g[2] << 16 | (unsigned)g[3] << 24),
             (unsigned)(g[4] | g[5] << 8), (unsigned)(g[6] | g[7] << 8), g[8], g[9], g[10], g[11],
             g[12], g[13], g[14], g[15]);
}

static const struct provider *provider_of(const struct kind_row *k, const char *guid)
{
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
        if (k->has_guid ? providers[i].group < 0 && !strcmp(providers[i].guid, guid)
                        : providers[i].group == k->hook >> 8)
            return &providers[i];
    }
    return NULL;
}

static int row_cmp(const void *a, const void *b)
{
    const struct kind_row *x = a, *y = b;
    if (x->has_guid != y->has_guid)
        return x->has_guid - y->has_guid;
    int c = memcmp(x->guid, y->guid, 16);
    if (c)
        return c;
    if (x->hook != y->hook)
        return x->hook < y->hook ? -1 : 1;
    if (x->opcode != y->opcode)
        return x->opcode < y->opcode ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static cJSON *events_json(const struct etl_stats *s)
{
    struct kind_row *rows = malloc((s->nkinds ? s->nkinds : 1) * sizeof(*rows));
    cJSON *a = cJSON_CreateArray();
    if (!rows || !a) {
        free(rows);
        cJSON_Delete(a);
        return NULL;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->kinds_cap; i++)
        if (s->kinds[i].used)
            rows[n++] = s->kinds[i];
    qsort(rows, n, sizeof(*rows), row_cmp);
    for (uint32_t i = 0; i < n; i++) {
        const struct kind_row *k = &rows[i];
        char guid[37], hook[8];
        const struct provider *p;
        cJSON *o = cJSON_CreateObject();
        if (k->has_guid) {
            guid_str(k->guid, guid);
            p = provider_of(k, guid);
        } else {
            p = provider_of(k, NULL);
            snprintf(guid, sizeof(guid), "%s", p ? p->guid : "");
        }
        cJSON_AddStringToObject(o, "provider", p ? p->name : guid);
        cJSON_AddStringToObject(o, "guid", guid);
        if (!k->has_guid) {
            snprintf(hook, sizeof(hook), "0x%04x", k->hook);
            cJSON_AddStringToObject(o, "hook", hook);
        }
        cJSON_AddNumberToObject(o, "opcode", k->opcode);
        if (k->has_guid)
            cJSON_AddNumberToObject(o, "id", k->id);
        cJSON_AddNumberToObject(o, "count", (double)k->count);
        cJSON_AddItemToArray(a, o);
    }
    free(rows);
    return a;
}

static cJSON *stacks_json(const struct etl_stats *s)
{
    uint64_t distinct = 0, unresolved = 0;
    for (uint32_t i = 0; i < s->keys_cap; i++) {
        if (s->keys[i] && (s->key_flags[i] & KEY_REF)) {
            distinct++;
            unresolved += !(s->key_flags[i] & KEY_DEF);
        }
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "inline", (double)s->inline_stacks);
    cJSON_AddNumberToObject(o, "key_refs", (double)s->key_refs);
    cJSON_AddNumberToObject(o, "key_defs", (double)s->key_defs);
    cJSON_AddNumberToObject(o, "distinct_keys", (double)distinct);
    cJSON_AddNumberToObject(o, "unresolved_keys", (double)unresolved);
    cJSON_AddNumberToObject(o, "keys_dropped", (double)s->keys_dropped);
    cJSON_AddNumberToObject(o, "short_records", (double)s->short_stack_records);
    return o;
}

static cJSON *header_json(const struct etl_header *h)
{
    char v[32];
    cJSON *o = cJSON_CreateObject();
    snprintf(v, sizeof(v), "%u.%u", h->version[0], h->version[1]);
    cJSON_AddStringToObject(o, "os_version", v);
    snprintf(v, sizeof(v), "%u.%u", h->version[2], h->version[3]);
    cJSON_AddStringToObject(o, "layout_version", v);
    cJSON_AddNumberToObject(o, "build", h->provider_version);
    cJSON_AddNumberToObject(o, "processors", h->ncpus);
    cJSON_AddNumberToObject(o, "pointer_size", h->pointer_size);
    cJSON_AddNumberToObject(o, "buffer_size", h->buffer_size);
    cJSON_AddNumberToObject(o, "buffers_written", h->buffers_written);
    cJSON_AddNumberToObject(o, "log_file_mode", h->log_file_mode);
    cJSON_AddNumberToObject(o, "compression_format", h->compression);
    cJSON_AddNumberToObject(o, "clock_type", h->clock_type);
    cJSON_AddNumberToObject(o, "perf_freq", (double)h->perf_freq);
    cJSON_AddNumberToObject(o, "start_time", (double)h->start_time);
    cJSON_AddNumberToObject(o, "end_time", (double)h->end_time);
    return o;
}

static cJSON *kinds_json(const struct etl_counts *c)
{
    cJSON *o = cJSON_CreateObject();
    for (unsigned k = 0; k <= 0x16; k++) {
        const char *name = etl_hdr_name(k == 0x16 ? ETL_HDR_WPP : k);
        if (name && c->by_kind[k])
            cJSON_AddNumberToObject(o, name, (double)c->by_kind[k]);
    }
    return o;
}

static cJSON *errors_json(const struct etl_counts *c, uint64_t *total)
{
    cJSON *o = cJSON_CreateObject();
    *total = 0;
    for (int k = 0; k < ETL_ERR_N; k++) {
        if (!c->err[k])
            continue;
        cJSON *e = cJSON_AddObjectToObject(o, etl_err_name(k));
        cJSON_AddNumberToObject(e, "count", (double)c->err[k]);
        cJSON_AddNumberToObject(e, "first_offset", (double)c->err_first[k]);
        cJSON_AddStringToObject(e, "message", etl_err_msg(k));
        *total += c->err[k];
    }
    return o;
}

cJSON *etl_stats_json(const struct etl_stats *s, const struct etl_reader *rd)
{
    const struct etl_counts *c = etl_reader_counts(rd);
    const struct etl_header *h = etl_reader_header(rd);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uint64_t nerr;
    cJSON_AddItemToObject(o, "header", header_json(h));
    cJSON_AddNumberToObject(o, "buffers", (double)c->buffers);
    cJSON_AddNumberToObject(o, "compressed_buffers", (double)c->compressed);
    cJSON_AddNumberToObject(o, "bytes_inflated", (double)c->bytes_inflated);
    cJSON_AddNumberToObject(o, "buffers_skipped", (double)c->buffers_skipped);
    cJSON_AddNumberToObject(o, "buffers_with_data_past_end", (double)c->tail_data);
    cJSON_AddNumberToObject(o, "records_backwards_on_processor", (double)c->backwards);
    cJSON_AddNumberToObject(o, "records", (double)c->records);
    cJSON_AddItemToObject(o, "records_by_kind", kinds_json(c));
    cJSON_AddNumberToObject(o, "headers_32bit", (double)c->ptr32);
    cJSON_AddNumberToObject(o, "headers_64bit", (double)c->ptr64);
    cJSON_AddNumberToObject(o, "out_of_order", (double)s->out_of_order);
    cJSON_AddItemToObject(o, "events", events_json(s));
    cJSON_AddNumberToObject(o, "event_kinds_dropped", (double)s->kinds_dropped);
    cJSON_AddItemToObject(o, "stacks", stacks_json(s));
    cJSON *lost = cJSON_AddObjectToObject(o, "lost");
    cJSON_AddNumberToObject(lost, "events_lost", h->events_lost);
    cJSON_AddNumberToObject(lost, "buffers_lost", h->buffers_lost);
    cJSON_AddNumberToObject(lost, "buffers_flagged_events_lost", (double)c->flag_events_lost);
    cJSON_AddNumberToObject(lost, "buffers_flagged_buffer_lost", (double)c->flag_buffer_lost);
    cJSON_AddItemToObject(o, "errors", errors_json(c, &nerr));
    cJSON_AddNumberToObject(o, "errors_total", (double)nerr);
    return o;
}
