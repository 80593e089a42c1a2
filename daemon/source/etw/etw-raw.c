/* Raw ETW record streams (etw-raw.h). */
#include "etw-raw.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-text.h"
#include "mem-acct.h"
#include "rawtap.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct etw_raw {
    struct stack_intern *si;
    struct etw_corr *corr;
    etw_raw_event_fn fn;
    void *arg;
    struct rawtap *tap;
    int slow_only; /* tests: every line through cJSON */
    struct etw_raw_stats st;
    uint8_t payload[ETW_RAW_PAYLOAD_MAX];
};

int etw_raw_is_header(const char *line, size_t len)
{
    static const char tag[] = "\"etw_raw\"";
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] != '{')
        return 0;
    i++;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    return len - i >= sizeof(tag) - 1 && memcmp(line + i, tag, sizeof(tag) - 1) == 0;
}

/* An unsigned integer field within [0, max]: a JSON number that is an exact
 * integer (up to 2^53), or a string of decimal digits. 0, or -1. */
static int get_u64(const cJSON *o, const char *name, uint64_t max, uint64_t *out, char *err,
                   size_t errsz)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d >= 0 && d <= 9007199254740992.0 && d == (double)(uint64_t)d && (uint64_t)d <= max) {
            *out = (uint64_t)d;
            return 0;
        }
    } else if (cJSON_IsString(v) && v->valuestring[0]) {
        const char *s = v->valuestring;
        uint64_t x = 0;
        for (; *s >= '0' && *s <= '9'; s++) {
            if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
                break;
            x = x * 10 + (uint64_t)(*s - '0');
        }
        if (*s == '\0' && x <= max) {
            *out = x;
            return 0;
        }
    } else if (!v) {
        snprintf(err, errsz, "field \"%s\" missing", name);
        return -1;
    }
    snprintf(err, errsz, "field \"%s\" is not an integer in [0, %llu]", name,
             (unsigned long long)max);
    return -1;
}

static void emit(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct etw_raw *x = arg;
    struct ht_event e = *ev;
    if (depth) {
        e.stack = stack_intern_get(x->si, frames, depth);
        if (!e.stack)
            e.flags |= HT_EVF_STACK_DROPPED;
    }
    x->fn(x->arg, &e);
}

static uint32_t path_cb(void *arg, const char *path)
{
    struct etw_raw *x = arg;
    return stack_intern_str(x->si, path, (unsigned)strlen(path));
}

/* The traced process's Start or rundown: its name, when the header gave none. */
static void process_cb(void *arg, uint32_t pid, const char *name)
{
    struct etw_raw *x = arg;
    if (x->st.name[0] || !name[0])
        return;
    snprintf(x->st.name, sizeof(x->st.name), "%s", name);
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = pid};
    x->fn(x->arg, &ev); /* the replay names the process from the stats */
}

int etw_raw_new(struct etw_raw **out, struct stack_intern *si, const char *line, size_t len,
                etw_raw_event_fn fn, void *arg, char *err, size_t errsz)
{
    *out = NULL;
    cJSON *h = cJSON_ParseWithLength(line, len);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        snprintf(err, errsz, "raw ETW header: not a JSON object");
        return HT_EBADJSON;
    }
    uint64_t ver = 0, freq = 0, start = 0, pid = 0;
    struct etw_raw_stats st;
    memset(&st, 0, sizeof(st));
    int rc = HT_EBADJSON;
    if (get_u64(h, "etw_raw", 1, &ver, err, errsz) != 0 || ver != 1) {
        if (ver != 1)
            snprintf(err, errsz, "raw ETW header: version must be 1");
        goto out;
    }
    if (get_u64(h, "qpc_freq", UINT64_MAX, &freq, err, errsz) != 0 ||
        get_u64(h, "start_qpc", UINT64_MAX, &start, err, errsz) != 0)
        goto out;
    if (freq == 0) {
        snprintf(err, errsz, "raw ETW header: qpc_freq must be above 0");
        goto out;
    }
    const cJSON *proc = cJSON_GetObjectItemCaseSensitive(h, "process");
    if (proc) {
        if (!cJSON_IsObject(proc) || get_u64(proc, "pid", UINT32_MAX, &pid, err, errsz) != 0) {
            if (cJSON_IsObject(proc))
                ; /* err says which */
            else
                snprintf(err, errsz, "raw ETW header: \"process\" must be an object");
            goto out;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(proc, "name");
        if (cJSON_IsString(name))
            snprintf(st.name, sizeof(st.name), "%s", name->valuestring);
    }
    st.pid = (uint32_t)pid;
    st.qpc_freq = freq;
    st.start_qpc = start;
    struct mem_acct *acct = si->acct;
    struct etw_raw *x = mem_calloc(acct, MEM_decoder_buffers, 1, sizeof(*x));
    if (!x) {
        rc = UV_ENOMEM;
        snprintf(err, errsz, "out of memory");
        goto out;
    }
    x->si = si;
    x->fn = fn;
    x->arg = arg;
    x->st = st;
    struct etw_corr_config cfg = {.acct = acct,
                                  .pid = st.pid,
                                  .qpc_freq = freq,
                                  .start_qpc = start,
                                  .path = path_cb,
                                  .process = process_cb};
    if ((rc = etw_corr_new(&x->corr, &cfg, emit, x)) != 0) {
        mem_free(acct, MEM_decoder_buffers, x, sizeof(*x));
        snprintf(err, errsz, "out of memory");
        goto out;
    }
    *out = x;
    rc = 0;
out:
    cJSON_Delete(h);
    return rc;
}

void etw_raw_free(struct etw_raw *x)
{
    if (!x)
        return;
    etw_corr_free(x->corr);
    mem_free(x->si->acct, MEM_decoder_buffers, x, sizeof(*x));
}

/* A parsed record into the tap (record --raw) and through the decoder and
 * correlator. 1, or -1 (a payload shorter than its layout: err says so). */
static int take_record(struct etw_raw *x, const struct etw_record *r, char *err, size_t errsz)
{
    if (rawtap_on(x->tap)) {
        /* What the stream held, as the Windows sessions write it. */
        static _Thread_local char line[ETW_RAW_LINE_MAX];
        size_t n = etw_raw_format(r, line, sizeof(line));
        if (n)
            rawtap_put(x->tap, line, n);
    }
    struct etw_decoded d;
    int dr = etw_decode(r, &d, &x->st.dec);
    if (dr < 0) {
        char g[40];
        etw_guid_format(&r->provider, g);
        snprintf(err, errsz, "provider %s opcode %u: payload of %u bytes is shorter than its layout",
                 g, r->opcode, r->len);
        return -1;
    }
    if (dr == 1)
        etw_corr_add(x->corr, r, &d);
    return 1;
}

/* The fast path: a line exactly as etw_raw_format writes it (keys in its
 * order, no spaces, decimal numbers without leading zeros) is read without
 * building a cJSON tree, ~5x cheaper. Anything else (another key order,
 * spaces, a value out of range, a bad payload) returns 0 and the line goes
 * through cJSON, which gives the same record or says what is wrong
 * (test-etw.raw_fast_path compares both on every record). */
static int lit(const char **p, const char *end, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(end - *p) < n || memcmp(*p, s, n) != 0)
        return 0;
    *p += n;
    return 1;
}

static int num(const char **p, const char *end, uint64_t max, uint64_t *out)
{
    const char *q = *p;
    uint64_t v = 0;
    if (q == end || *q < '0' || *q > '9' || (*q == '0' && q + 1 < end && q[1] >= '0' && q[1] <= '9'))
        return 0;
    for (; q < end && *q >= '0' && *q <= '9'; q++) {
        if (v > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*q - '0');
    }
    if (v > max)
        return 0;
    *p = q;
    *out = v;
    return 1;
}

static int fast_record(struct etw_raw *x, const char *line, size_t len, struct etw_record *r)
{
    const char *p = line, *end = line + len;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
        end--;
    uint64_t op, ver, fl, pid, tid, cpu, ts;
    memset(r, 0, sizeof(*r));
    if (!lit(&p, end, "{\"provider\":\"") || end - p < 36 || etw_guid_parse(p, 36, &r->provider))
        return 0;
    p += 36;
    if (!lit(&p, end, "\",\"opcode\":") || !num(&p, end, 255, &op) ||
        !lit(&p, end, ",\"version\":") || !num(&p, end, 255, &ver) ||
        !lit(&p, end, ",\"flags\":") || !num(&p, end, 65535, &fl) ||
        !lit(&p, end, ",\"pid\":") || !num(&p, end, UINT32_MAX, &pid) ||
        !lit(&p, end, ",\"tid\":") || !num(&p, end, UINT32_MAX, &tid) ||
        !lit(&p, end, ",\"cpu\":") || !num(&p, end, UINT32_MAX, &cpu) ||
        !lit(&p, end, ",\"ts\":"))
        return 0;
    if (lit(&p, end, "\"")) { /* above 2^53: a decimal string */
        if (!num(&p, end, UINT64_MAX, &ts) || !lit(&p, end, "\""))
            return 0;
    } else if (!num(&p, end, 9007199254740992ull, &ts)) {
        return 0;
    }
    if (!lit(&p, end, ",\"payload\":\""))
        return 0;
    const char *h = p;
    while (p < end && *p != '"')
        p++;
    size_t hl = (size_t)(p - h);
    if (hl % 2 || hl / 2 > ETW_RAW_PAYLOAD_MAX || !lit(&p, end, "\"}") || p != end)
        return 0;
    for (size_t k = 0; k < hl; k += 2) {
        int a = ht_hexval(h[k]), b = ht_hexval(h[k + 1]);
        if (a < 0 || b < 0)
            return 0;
        x->payload[k / 2] = (uint8_t)(a << 4 | b);
    }
    r->opcode = (uint8_t)op;
    r->version = (uint8_t)ver;
    r->flags = (uint16_t)fl;
    r->pid = (uint32_t)pid;
    r->tid = (uint32_t)tid;
    r->cpu = (uint32_t)cpu;
    r->ts = ts;
    r->payload = x->payload;
    r->len = (uint32_t)(hl / 2);
    return 1;
}

/* A recording's gap (record --raw fell behind): lost records. 1, or -1
 * with err set. */
static int lost_line(struct etw_raw *x, const cJSON *o, char *err, size_t errsz)
{
    uint64_t n;
    if (get_u64(o, "etw_raw_lost", UINT32_MAX, &n, err, errsz) != 0)
        return -1;
    x->st.lost_records += n;
    etw_corr_lost(x->corr, n);
    if (rawtap_on(x->tap)) {
        /* Recorded again: the gap stays where it was. */
        char line[48];
        int k = snprintf(line, sizeof(line), "{\"etw_raw_lost\":%llu}\n", (unsigned long long)n);
        rawtap_put(x->tap, line, (size_t)k);
    }
    return 1;
}

/* The payload's hl hex digits into x->payload: 0, or -1 with err set. */
static int payload_hex(struct etw_raw *x, const char *hex, size_t hl, char *err, size_t errsz)
{
    for (size_t k = 0; k < hl; k += 2) {
        int a = ht_hexval(hex[k]), b = ht_hexval(hex[k + 1]);
        if (a < 0 || b < 0) {
            snprintf(err, errsz, "field \"payload\": not hex at digit %zu", k);
            return -1;
        }
        x->payload[k / 2] = (uint8_t)(a << 4 | b);
    }
    return 0;
}

int etw_raw_line(struct etw_raw *x, const char *line, size_t len, char *err, size_t errsz)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    if (i == len)
        return 0;
    struct etw_record fr;
    if (!x->slow_only && fast_record(x, line + i, len - i, &fr))
        return take_record(x, &fr, err, errsz);
    cJSON *o = cJSON_ParseWithLength(line, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        snprintf(err, errsz, "not a JSON object");
        return -1;
    }
    struct etw_record r;
    memset(&r, 0, sizeof(r));
    uint64_t op, ver, fl, pid, tid, cpu, ts;
    int rc = -1;
    if (cJSON_GetObjectItemCaseSensitive(o, "etw_raw_lost")) {
        rc = lost_line(x, o, err, errsz);
        goto out;
    }
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(o, "provider");
    if (!cJSON_IsString(prov) ||
        etw_guid_parse(prov->valuestring, strlen(prov->valuestring), &r.provider) != 0) {
        snprintf(err, errsz, "field \"provider\" is not a GUID");
        goto out;
    }
    if (get_u64(o, "opcode", 255, &op, err, errsz) || get_u64(o, "version", 255, &ver, err, errsz) ||
        get_u64(o, "flags", 65535, &fl, err, errsz) ||
        get_u64(o, "pid", UINT32_MAX, &pid, err, errsz) ||
        get_u64(o, "tid", UINT32_MAX, &tid, err, errsz) ||
        get_u64(o, "cpu", UINT32_MAX, &cpu, err, errsz) ||
        get_u64(o, "ts", UINT64_MAX, &ts, err, errsz))
        goto out;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(o, "payload");
    if (!cJSON_IsString(pl)) {
        snprintf(err, errsz, "field \"payload\" is not a hex string");
        goto out;
    }
    size_t hl = strlen(pl->valuestring);
    if (hl % 2 || hl / 2 > ETW_RAW_PAYLOAD_MAX) {
        snprintf(err, errsz, "field \"payload\": %s", hl % 2 ? "odd number of hex digits"
                                                           : "longer than 64 KiB");
        goto out;
    }
    if (payload_hex(x, pl->valuestring, hl, err, errsz) != 0)
        goto out;
    r.opcode = (uint8_t)op;
    r.version = (uint8_t)ver;
    r.flags = (uint16_t)fl;
    r.pid = (uint32_t)pid;
    r.tid = (uint32_t)tid;
    r.cpu = (uint32_t)cpu;
    r.ts = ts;
    r.payload = x->payload;
    r.len = (uint32_t)(hl / 2);
    rc = take_record(x, &r, err, errsz);
out:
    cJSON_Delete(o);
    return rc;
}

void etw_raw_tap(struct etw_raw *x, struct rawtap *tap)
{
    x->tap = tap;
}

void etw_raw_slow_only(struct etw_raw *x, int on)
{
    x->slow_only = on;
}

size_t etw_raw_format(const struct etw_record *r, char *buf, size_t cap)
{
    char g[40], ts[32];
    etw_guid_format(&r->provider, g);
    /* Up to 2^53 a JSON number; past it a decimal string (the format's rule). */
    if (r->ts <= 9007199254740992ull)
        snprintf(ts, sizeof(ts), "%llu", (unsigned long long)r->ts);
    else
        snprintf(ts, sizeof(ts), "\"%llu\"", (unsigned long long)r->ts);
    int k = snprintf(buf, cap,
                     "{\"provider\":\"%s\",\"opcode\":%u,\"version\":%u,\"flags\":%u,\"pid\":%lu,"
                     "\"tid\":%lu,\"cpu\":%lu,\"ts\":%s,\"payload\":\"",
                     g, r->opcode, r->version, r->flags, (unsigned long)r->pid,
                     (unsigned long)r->tid, (unsigned long)r->cpu, ts);
    if (k < 0 || (size_t)k + 2 * (size_t)r->len + 3 > cap || r->len > ETW_RAW_PAYLOAD_MAX)
        return 0;
    static const char hx[] = "0123456789abcdef";
    size_t n = (size_t)k;
    for (uint32_t i = 0; i < r->len; i++) {
        buf[n++] = hx[r->payload[i] >> 4];
        buf[n++] = hx[r->payload[i] & 15];
    }
    buf[n++] = '"';
    buf[n++] = '}';
    buf[n++] = '\n';
    return n;
}

size_t etw_raw_header(uint64_t qpc_freq, uint64_t start_qpc, uint32_t pid, const char *name,
                      char *buf, size_t cap)
{
    cJSON *h = cJSON_CreateObject();
    if (!h)
        return 0;
    cJSON_AddNumberToObject(h, "etw_raw", 1);
    /* Exact up to 2^53 as numbers; larger as decimal strings. */
    char v[32];
    if (qpc_freq <= 9007199254740992ull) {
        cJSON_AddNumberToObject(h, "qpc_freq", (double)qpc_freq);
    } else {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)qpc_freq);
        cJSON_AddStringToObject(h, "qpc_freq", v);
    }
    if (start_qpc <= 9007199254740992ull) {
        cJSON_AddNumberToObject(h, "start_qpc", (double)start_qpc);
    } else {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)start_qpc);
        cJSON_AddStringToObject(h, "start_qpc", v);
    }
    if (pid) {
        cJSON *p = cJSON_AddObjectToObject(h, "process");
        if (p) {
            cJSON_AddNumberToObject(p, "pid", pid);
            if (name && name[0])
                cJSON_AddStringToObject(p, "name", name);
        }
    }
    char *t = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t n = t ? strlen(t) : 0;
    if (!t || n + 2 > cap) {
        cJSON_free(t);
        return 0;
    }
    memcpy(buf, t, n);
    buf[n++] = '\n';
    buf[n] = '\0';
    cJSON_free(t);
    return n;
}

void etw_raw_finish(struct etw_raw *x)
{
    etw_corr_flush(x->corr);
}

void etw_raw_stats(const struct etw_raw *x, struct etw_raw_stats *out)
{
    *out = x->st;
    out->corr = *etw_corr_stats(x->corr);
}

cJSON *etw_raw_stats_json(const struct etw_raw_stats *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
#define N(obj, field) cJSON_AddNumberToObject(o, #field, (double)st->obj.field)
    N(dec, decoded);
    N(dec, unknown_provider);
    N(dec, ignored_opcode);
    N(dec, malformed);
    N(dec, longer_payloads);
    N(dec, old_versions);
    N(corr, events_in);
    N(corr, other_process);
    N(corr, stacks_in);
    N(corr, stacks_matched);
    N(corr, stacks_merged);
    N(corr, stacks_early);
    N(corr, stacks_unmatched);
    N(corr, events_no_stack);
    N(corr, pending_overflow);
    N(corr, kernel_frames);
    N(corr, truncated_stacks);
    N(corr, realloc_in_place);
    N(corr, realloc_moved);
    N(corr, realloc_moved_unpaired);
    N(corr, heaps_created);
    N(corr, reserve_only);
    N(corr, free_other);
    N(corr, before_start);
    N(corr, modules_loaded);
    N(corr, modules_unloaded);
    N(corr, module_names_dropped);
    N(corr, process_exits);
    N(corr, process_ends_repeated);
    N(corr, before_follow);
    cJSON_AddNumberToObject(o, "lost_records", (double)st->lost_records);
#undef N
    return o;
}
