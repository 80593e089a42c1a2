/* Configuration: defaults in code (mirrored by config/heaptraced.json), JSON overlay. */
#include "config.h"

#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "ht-error.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* config/cull-frames.txt, embedded at build time (see daemon/CMakeLists.txt). */
#include "cull-frames.inc"

/* Keep a pattern's text and its parsed form (which points into the text):
 * every query and every new stack use the parsed list. A pattern that does
 * not parse (only "!") matches nothing and is left out. */
static int add_cull(struct ht_config *cfg, const char *pat, size_t len)
{
    if (cfg->ncull >= HT_CULL_DEFAULT_MAX)
        return HT_EFULL;
    char **n = ht_realloc(cfg->cull, (cfg->ncull + 1) * sizeof(char *));
    if (!n)
        return HT_ENOMEM;
    cfg->cull = n;
    struct frame_pat *np = ht_realloc(cfg->cull_pats, (cfg->ncull + 1) * sizeof(*np));
    if (!np)
        return HT_ENOMEM;
    cfg->cull_pats = np;
    char *text = ht_strndup(pat, len);
    if (!text)
        return HT_ENOMEM;
    if (frame_pat_parse(text, len, &cfg->cull_pats[cfg->ncull]) != 0) {
        ht_free(text);
        return 0;
    }
    cfg->cull[cfg->ncull++] = text;
    return 0;
}

/* Parse cull-list text: one pattern a line, '#' comments, blanks ignored. */
static int parse_cull_text(struct ht_config *cfg, const char *text)
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *s = p, *e = p + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        int rc = e > s && *s != '#' ? add_cull(cfg, s, (size_t)(e - s)) : 0;
        if (rc)
            return rc;
        p += n + (nl ? 1 : 0);
    }
    return 0;
}

void config_defaults(struct ht_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->endpoint, sizeof(cfg->endpoint), "%s", HT_ENDPOINT_DEFAULT);
    cfg->log_level = LOG_INFO;
    cfg->max_sessions = 16;
    cfg->max_clients = 256;
    cfg->client_output_cap = 16u << 20;
    cfg->client_idle_ns = 30 * 1000000000ull;
    cfg->max_clients_per_uid = 32;
    cfg->root_clients = 16;
    cfg->recorder_cap = 4u << 20;
    cfg->output_cap_total = 64u << 20;
    cfg->max_snapshots = 16;
    cfg->snapshot_top = 50;
    /* As many as the clients: each has at most one request and one top
     * refresh waiting (its requests wait for its previous reply). */
    cfg->max_queued_queries = 256;
    cfg->session_memory_budget = 512ull << 20;
    cfg->bpf_ring_bytes = CONFIG_BPF_RING_DEFAULT;
    cfg->daemon_memory_budget = 2ull << 30;
    engine_limits_default(&cfg->limits);
    parse_cull_text(cfg, ht_default_cull_frames);
}

void config_free(struct ht_config *cfg)
{
    for (unsigned i = 0; i < cfg->ncull; i++)
        ht_free(cfg->cull[i]);
    ht_free(cfg->cull);
    ht_free(cfg->cull_pats);
    cfg->cull = NULL;
    cfg->cull_pats = NULL;
    cfg->ncull = 0;
}

int config_log_level(const char *s)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

static char *read_file(const char *path, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = ht_malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    int too_big = buf && n == cap && fgetc(f) != EOF;
    fclose(f);
    if (!buf || too_big) {
        ht_free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int get_u64(const cJSON *o, const char *key, uint64_t *out, int size_ok, int duration_ok,
                   char *err, size_t errsz)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return 0;
    /* 2^64 and above do not convert (undefined behaviour: 1e300 read as 0
     * or 2^63 depending on the compiler): refused like any bad value. */
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 18446744073709551616.0) {
        *out = (uint64_t)v->valuedouble;
        return 0;
    }
    if (cJSON_IsString(v) && ((size_ok && ht_parse_size(v->valuestring, out) == 0) ||
                              (duration_ok && ht_parse_duration(v->valuestring, out) == 0)))
        return 0;
    snprintf(err, errsz, "config: \"%s\" has a bad value", key);
    return HT_EBADARG;
}

static int get_u32(const cJSON *o, const char *key, uint32_t *out, char *err, size_t errsz)
{
    uint64_t v = *out;
    int rc = get_u64(o, key, &v, 0, 0, err, errsz);
    if (rc == 0 && (v == 0 || v > 0xffffffffu)) {
        snprintf(err, errsz, "config: \"%s\" must be between 1 and 4294967295", key);
        return HT_EBADARG;
    }
    *out = (uint32_t)v;
    return rc;
}

/* A count that may be 0. */
static int get_u64_in(const cJSON *o, const char *key, uint32_t *out, char *err, size_t errsz)
{
    uint64_t v = *out;
    int rc = get_u64(o, key, &v, 0, 0, err, errsz);
    if (rc == 0 && v > 0xffffffffu) {
        snprintf(err, errsz, "config: \"%s\" must be below 4294967296", key);
        return HT_EBADARG;
    }
    *out = (uint32_t)v;
    return rc;
}

static int get_str(const cJSON *o, const char *key, char *out, size_t outsz, char *err,
                   size_t errsz)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= outsz) {
        snprintf(err, errsz, "config: \"%s\" must be a string shorter than %zu", key, outsz);
        return HT_EBADARG;
    }
    snprintf(out, outsz, "%s", v->valuestring);
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int *out, char *err, size_t errsz)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v)) {
        snprintf(err, errsz, "config: \"%s\" must be true or false", key);
        return HT_EBADARG;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

int config_load_cull_file(struct ht_config *cfg, const char *path, char *err, size_t errsz)
{
    char *text = read_file(path, 1u << 20);
    if (!text) {
        snprintf(err, errsz, "cannot read cull list %s", path);
        return HT_EBADARG;
    }
    config_free(cfg);
    int rc = parse_cull_text(cfg, text);
    ht_free(text);
    if (rc == HT_EFULL)
        snprintf(err, errsz, "cull list %s has more than %d patterns", path, HT_CULL_DEFAULT_MAX);
    else if (rc)
        snprintf(err, errsz, "out of memory reading cull list %s", path);
    return rc;
}

int config_load(struct ht_config *cfg, const char *path, char *err, size_t errsz)
{
    char *text = read_file(path, 1u << 20);
    if (!text) {
        snprintf(err, errsz, "cannot read config file %s (missing, unreadable or over 1 MiB)",
                 path);
        return HT_EBADARG;
    }
    cJSON *o = cJSON_Parse(text);
    ht_free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        snprintf(err, errsz, "config file %s is not a JSON object", path);
        return HT_EBADARG;
    }
    char level[16] = "", cull_file[512] = "";
    uint64_t interval = cfg->limits.timeline_ns;
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(o, "limits");
    uint64_t life = cfg->limits.life_ring, cring = cfg->limits.commit_ring,
             tring = cfg->limits.timeline_ring;
    int rc = get_str(o, "endpoint", cfg->endpoint, sizeof(cfg->endpoint), err, errsz);
    if (!rc)
        rc = get_str(o, "pipe_operators_group", cfg->pipe_operators_group,
                     sizeof(cfg->pipe_operators_group), err, errsz);
    if (!rc)
        rc = get_str(o, "symbol_path", cfg->symbol_path, sizeof(cfg->symbol_path), err, errsz);
    if (!rc)
        rc = get_bool(o, "debuginfod", &cfg->debuginfod, err, errsz);
    if (!rc)
        rc = get_str(o, "log_level", level, sizeof(level), err, errsz);
    if (!rc)
        rc = get_str(o, "log_file", cfg->log_file, sizeof(cfg->log_file), err, errsz);
    if (!rc)
        rc = get_str(o, "cull_list_file", cull_file, sizeof(cull_file), err, errsz);
    if (!rc)
        rc = get_u32(o, "max_sessions", &cfg->max_sessions, err, errsz);
    if (!rc)
        rc = get_u32(o, "max_clients", &cfg->max_clients, err, errsz);
    if (!rc)
        rc = get_u64(o, "client_output_cap", &cfg->client_output_cap, 1, 0, err, errsz);
    if (!rc)
        rc = get_u64(o, "client_idle_timeout", &cfg->client_idle_ns, 0, 1, err, errsz);
    if (!rc)
        rc = get_u32(o, "max_clients_per_uid", &cfg->max_clients_per_uid, err, errsz);
    if (!rc)
        rc = get_u64_in(o, "root_clients", &cfg->root_clients, err, errsz);
    if (!rc)
        rc = get_u64(o, "recorder_output_cap", &cfg->recorder_cap, 1, 0, err, errsz);
    if (!rc)
        rc = get_u64(o, "output_cap_total", &cfg->output_cap_total, 1, 0, err, errsz);
    if (!rc)
        rc = get_u64(o, "timeline_interval", &interval, 0, 1, err, errsz);
    if (!rc)
        rc = get_u32(o, "max_snapshots", &cfg->max_snapshots, err, errsz);
    if (!rc)
        rc = get_u32(o, "snapshot_top", &cfg->snapshot_top, err, errsz);
    if (!rc)
        rc = get_u32(o, "max_queued_queries", &cfg->max_queued_queries, err, errsz);
    if (!rc)
        rc = get_u64(o, "session_memory_budget", &cfg->session_memory_budget, 1, 0, err, errsz);
    if (!rc)
        rc = get_u64(o, "daemon_memory_budget", &cfg->daemon_memory_budget, 1, 0, err, errsz);
    if (!rc)
        rc = get_u64(o, "bpf_ring_bytes", &cfg->bpf_ring_bytes, 1, 0, err, errsz);
    if (!rc && lim) {
        rc = get_u32(lim, "table_cap", &cfg->limits.table_cap, err, errsz);
        if (!rc)
            rc = get_u32(lim, "commit_cap", &cfg->limits.commit_cap, err, errsz);
        if (!rc)
            rc = get_u64(lim, "life_ring", &life, 0, 0, err, errsz);
        if (!rc)
            rc = get_u64(lim, "commit_ring", &cring, 0, 0, err, errsz);
        if (!rc)
            rc = get_u64(lim, "timeline_ring", &tring, 0, 0, err, errsz);
        if (!rc)
            rc = get_u32(lim, "max_stacks", &cfg->limits.max_stacks, err, errsz);
        if (!rc)
            rc = get_u32(lim, "max_strings", &cfg->limits.max_strings, err, errsz);
        if (!rc)
            rc = get_u32(lim, "max_marks", &cfg->limits.max_marks, err, errsz);
        if (!rc)
            rc = get_u32(lim, "max_name_len", &cfg->limits.max_name_len, err, errsz);
    }
    cJSON_Delete(o);
    if (rc)
        return rc;
    if (level[0] && (cfg->log_level = config_log_level(level)) < 0) {
        snprintf(err, errsz, "config: log_level must be error, warn, info or debug");
        return HT_EBADARG;
    }
    if (cfg->root_clients >= cfg->max_clients) {
        snprintf(err, errsz, "config: root_clients must be below max_clients");
        return HT_EBADARG;
    }
    if (cfg->client_idle_ns < 1000000 || cfg->recorder_cap == 0) {
        snprintf(err, errsz,
                 "config: client_idle_timeout must be at least 1ms and "
                 "recorder_output_cap at least 1 byte");
        return HT_EBADARG;
    }
    /* Below this, every client is cut off at its first reply of any size
     * (0 was accepted: the daemon ran and closed every connection unanswered). */
    if (cfg->client_output_cap < CONFIG_OUTPUT_CAP_MIN) {
        snprintf(err, errsz, "config: client_output_cap must be at least %u bytes",
                 CONFIG_OUTPUT_CAP_MIN);
        return HT_EBADARG;
    }
    /* The engine takes every due sample on the loop when an event arrives
     * (take_due_samples: up to timeline_ring of them per event): with 1ns and
     * a ring of 1e8, a 30 s stream froze the loop for minutes. */
    if (interval < CONFIG_TIMELINE_NS_MIN || tring > CONFIG_TIMELINE_RING_MAX) {
        snprintf(err, errsz,
                 "config: timeline_interval must be at least 1ms and timeline_ring at most %u",
                 CONFIG_TIMELINE_RING_MAX);
        return HT_EBADARG;
    }
    if (interval == 0 || life == 0 || cring == 0 || tring == 0) {
        snprintf(err, errsz, "config: intervals and ring sizes must be positive");
        return HT_EBADARG;
    }
    /* The kernel takes a ring of a power of two pages; past 1 GiB it is
     * memory locked for nothing, below 64 KiB a few stacks fill it. */
    uint64_t rb = cfg->bpf_ring_bytes;
    if (rb < CONFIG_BPF_RING_MIN || rb > CONFIG_BPF_RING_MAX || (rb & (rb - 1)) != 0) {
        snprintf(err, errsz, "config: bpf_ring_bytes must be a power of two from 64KiB to 1GiB");
        return HT_EBADARG;
    }
    /* Stack ids carry two flag bits in the stream id maps (htevb.c, evring.c). */
    if (cfg->limits.max_stacks >= (1u << 30)) {
        snprintf(err, errsz, "config: max_stacks must be below 1073741824");
        return HT_EBADARG;
    }
    if (cfg->limits.max_name_len > HT_STR_MAX_LEN) {
        snprintf(err, errsz, "config: max_name_len must be at most %u", HT_STR_MAX_LEN);
        return HT_EBADARG;
    }
    cfg->limits.timeline_ns = interval;
    cfg->limits.life_ring = life;
    cfg->limits.commit_ring = cring;
    cfg->limits.timeline_ring = tring;
    if (cull_file[0])
        return config_load_cull_file(cfg, cull_file, err, errsz);
    return 0;
}
