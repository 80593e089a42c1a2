/* Configuration: the keys of config.def, defaulted, read from a JSON file and checked. */
#include "config.h"

#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "ht-error.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#ifndef _WIN32
#include <fcntl.h>
#include <unistd.h>
#endif

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

/* What a key takes; the HT_CONF type column without its prefix (config.def). */
enum conf_type { CONF_STR, CONF_BOOL, CONF_COUNT, CONF_SIZE, CONF_DURATION, CONF_LOGLEVEL };

struct conf_key {
    const char *key;
    enum conf_type type;
    size_t off, size; /* the field in struct ht_config */
    uint64_t min, max;
    const char *doc;
};

#define CONF_FIELD_SIZE(field) sizeof(((struct ht_config *)0)->field)

static const struct conf_key conf_keys[] = {
#define HT_CONF(key, type, field, def, min, max, doc)                                              \
    {key, CONF_##type, offsetof(struct ht_config, field), CONF_FIELD_SIZE(field), min, max, doc},
#include "config.def"
#undef HT_CONF
};

/* A range a 32-bit field cannot hold would be cut when stored: refused here. */
#define HT_CONF(key, type, field, def, min, max, doc)                                              \
    _Static_assert((max) <= 0xffffffffull || CONF_FIELD_SIZE(field) == 8,                          \
                   "config.def: the range of " key " does not fit its field");
#include "config.def"
#undef HT_CONF

#define CONF_DEFAULT_STR(f, d) snprintf(cfg->f, sizeof(cfg->f), "%s", d)
#define CONF_DEFAULT_BOOL(f, d) cfg->f = d
#define CONF_DEFAULT_COUNT(f, d) cfg->f = d
#define CONF_DEFAULT_SIZE(f, d) cfg->f = d
#define CONF_DEFAULT_DURATION(f, d) cfg->f = d
#define CONF_DEFAULT_LOGLEVEL(f, d) cfg->f = d

void config_defaults(struct ht_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    /* The engine's limits no key sets (max_modules) keep the engine's values. */
    engine_limits_default(&cfg->limits);
#define HT_CONF(key, type, field, def, min, max, doc) CONF_DEFAULT_##type(field, def);
#include "config.def"
#undef HT_CONF
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

/* path opened for reading, a directory refused. On a FIFO with no writer
 * fopen waited for one forever (the daemon hung at its start, nothing said):
 * opened without waiting, then read blocking, a writer's text (`--config
 * <(...)`) is read whole and a FIFO nobody writes reads as empty (pipe(7)). */
static FILE *open_file(const char *path)
{
#ifndef _WIN32
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || fcntl(fd, F_SETFL, 0) != 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f)
        close(fd);
    return f;
#else
    return fopen(path, "rb");
#endif
}

static char *read_file(const char *path, size_t cap)
{
    FILE *f = open_file(path);
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

static const struct conf_key *conf_find(const char *key)
{
    for (size_t i = 0; i < sizeof(conf_keys) / sizeof(conf_keys[0]); i++)
        if (!strcmp(conf_keys[i].key, key))
            return &conf_keys[i];
    return NULL;
}

/* name is an object of keys ("limits" for "limits.x"). */
static int conf_is_section(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(conf_keys) / sizeof(conf_keys[0]); i++)
        if (!strncmp(conf_keys[i].key, name, n) && conf_keys[i].key[n] == '.')
            return 1;
    return 0;
}

/* A value as it can be written back into a file: "16MiB", "30s", "50". */
static const char *conf_format(enum conf_type type, uint64_t v, char *buf, size_t n)
{
    static const char *const sizes[] = {"KiB", "MiB", "GiB", "TiB"};
    static const char *const times[] = {"us", "ms", "s"};
    static const uint64_t per[] = {1000, 1000, 1000};
    int i = -1;
    if (type == CONF_SIZE)
        for (; i < 3 && v && v % 1024 == 0; i++)
            v /= 1024;
    if (type == CONF_DURATION)
        for (; i < 2 && v && v % per[i + 1] == 0; i++)
            v /= per[i + 1];
    const char *unit = i < 0               ? (type == CONF_DURATION ? "ns" : "")
                       : type == CONF_SIZE ? sizes[i]
                                           : times[i];
    snprintf(buf, n, "%llu%s", (unsigned long long)v, unit);
    return buf;
}

/* Range errors name the key and the range, in the key's units. */
static int conf_range_error(const struct conf_key *k, char *err, size_t errsz)
{
    char lo[32], hi[32];
    conf_format(k->type, k->min, lo, sizeof(lo));
    conf_format(k->type, k->max, hi, sizeof(hi));
    if (k->type == CONF_SIZE) {
        snprintf(lo, sizeof(lo), "%llu", (unsigned long long)k->min);
        snprintf(hi, sizeof(hi), "%llu", (unsigned long long)k->max);
    }
    if (k->max == UINT64_MAX)
        snprintf(err, errsz, "config: %s must be at least %s%s", k->key, lo,
                 k->type == CONF_SIZE ? " bytes" : "");
    else
        snprintf(err, errsz, "config: %s must be between %s and %s%s", k->key, lo, hi,
                 k->type == CONF_SIZE ? " bytes" : "");
    return HT_EBADARG;
}

/* A number, or for sizes and durations a string with its unit. */
static int conf_number(const struct conf_key *k, const cJSON *v, uint64_t *out, char *err,
                       size_t errsz)
{
    /* 2^64 and above do not convert (undefined behaviour: 1e300 read as 0
     * or 2^63 depending on the compiler): refused like any bad value. */
    /* A fraction is refused too: 1.5 sessions was taken as 1. */
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 18446744073709551616.0 &&
        (double)(uint64_t)v->valuedouble == v->valuedouble) {
        *out = (uint64_t)v->valuedouble;
        return 0;
    }
    if (cJSON_IsString(v) &&
        ((k->type == CONF_SIZE && ht_parse_size(v->valuestring, out) == 0) ||
         (k->type == CONF_DURATION && ht_parse_duration(v->valuestring, out) == 0)))
        return 0;
    snprintf(err, errsz, "config: \"%s\" has a bad value", k->key);
    return HT_EBADARG;
}

static void conf_store(struct ht_config *cfg, const struct conf_key *k, uint64_t v)
{
    char *field = (char *)cfg + k->off;
    if (k->size == sizeof(uint32_t)) {
        uint32_t x = (uint32_t)v;
        memcpy(field, &x, sizeof(x));
    } else {
        memcpy(field, &v, sizeof(v));
    }
}

static int conf_set(struct ht_config *cfg, const struct conf_key *k, const cJSON *v, char *err,
                    size_t errsz)
{
    char *field = (char *)cfg + k->off;
    uint64_t n;
    int rc;
    switch (k->type) {
    case CONF_STR:
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= k->size) {
            snprintf(err, errsz, "config: \"%s\" must be a string shorter than %zu", k->key,
                     k->size);
            return HT_EBADARG;
        }
        snprintf(field, k->size, "%s", v->valuestring);
        return 0;
    case CONF_BOOL:
        if (!cJSON_IsBool(v)) {
            snprintf(err, errsz, "config: \"%s\" must be true or false", k->key);
            return HT_EBADARG;
        }
        *(int *)(void *)field = cJSON_IsTrue(v);
        return 0;
    case CONF_LOGLEVEL:
        if (!cJSON_IsString(v) || (*(int *)(void *)field = config_log_level(v->valuestring)) < 0) {
            snprintf(err, errsz, "config: log_level must be error, warn, info or debug");
            return HT_EBADARG;
        }
        return 0;
    default:
        if ((rc = conf_number(k, v, &n, err, errsz)) != 0)
            return rc;
        if (n < k->min || n > k->max)
            return conf_range_error(k, err, errsz);
        conf_store(cfg, k, n);
        return 0;
    }
}

/* m's key given before it in its object (comments aside): JSON leaves
 * duplicates to the reader (RFC 8259 4), and the first was kept silently. */
static int conf_duplicate(const cJSON *o, const cJSON *m)
{
    for (const cJSON *p = o->child; p && p != m; p = p->next)
        if (p->string[0] != '_' && strcmp(p->string, m->string) == 0)
            return 1;
    return 0;
}

/* Each member of o (under prefix: "limits" for its object) set, or refused
 * when not a key of the list. */
static int conf_walk(struct ht_config *cfg, const cJSON *o, const char *prefix, char *err,
                     size_t errsz)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, o)
    {
        char key[128];
        if (m->string[0] == '_')
            continue;
        snprintf(key, sizeof(key), "%s%s%s", prefix ? prefix : "", prefix ? "." : "", m->string);
        /* "limits.x" written as one key is not the member x of "limits". */
        const struct conf_key *k = strchr(m->string, '.') ? NULL : conf_find(key);
        int rc;
        if (conf_duplicate(o, m))
            rc = (snprintf(err, errsz, "config: key \"%.100s\" given twice", key), HT_EBADARG);
        else if (k)
            rc = conf_set(cfg, k, m, err, errsz);
        else if (!prefix && conf_is_section(key) && cJSON_IsObject(m))
            rc = conf_walk(cfg, m, key, err, errsz);
        else if (!prefix && conf_is_section(key))
            rc = (snprintf(err, errsz, "config: \"%s\" must be an object", key), HT_EBADARG);
        else
            rc = (snprintf(err, errsz,
                           "config: unknown key \"%.100s\" (heaptraced --help-config lists them)",
                           key),
                  HT_EBADARG);
        if (rc)
            return rc;
    }
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

/* What one key's range cannot say: the relations between keys and the
 * kernel's shape of the eBPF ring. */
static int config_check(const struct ht_config *cfg, char *err, size_t errsz)
{
    if (cfg->root_clients >= cfg->max_clients) {
        snprintf(err, errsz, "config: root_clients must be below max_clients");
        return HT_EBADARG;
    }
    /* The kernel takes a ring of a power of two pages (the range, in
     * config.def, keeps it between 64 KiB and 1 GiB). */
    uint64_t rb = cfg->bpf_ring_bytes;
    if ((rb & (rb - 1)) != 0) {
        snprintf(err, errsz, "config: bpf_ring_bytes must be a power of two from 64KiB to 1GiB");
        return HT_EBADARG;
    }
    return 0;
}

/* A "\u0000" escape in text: cJSON gives strings as C strings, so
 * "127.0.0.1:9464\u0000x" was read, and taken, as "127.0.0.1:9464". An
 * escaped backslash ("\\u0000") is not one. */
static int has_nul_escape(const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p != '\\')
            continue;
        if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0)
            return 1;
        if (p[1])
            p++; /* the escaped character */
    }
    return 0;
}

int config_load(struct ht_config *cfg, const char *path, char *err, size_t errsz)
{
    char *text = read_file(path, 1u << 20);
    if (!text) {
        snprintf(err, errsz,
                 "cannot read config file %s (missing, unreadable, a directory or over 1 MiB)",
                 path);
        return HT_EBADARG;
    }
    if (has_nul_escape(text)) {
        ht_free(text);
        snprintf(err, errsz, "config file %s has a NUL (\\u0000) in a string", path);
        return HT_EBADARG;
    }
    /* Anything but white space after the object is refused too. */
    const char *rest = NULL;
    cJSON *o = cJSON_ParseWithOpts(text, &rest, 0);
    int trailing = o && rest && rest[strspn(rest, " \t\r\n")] != '\0';
    ht_free(text);
    if (!cJSON_IsObject(o) || trailing) {
        cJSON_Delete(o);
        snprintf(err, errsz, "config file %s is not a JSON object", path);
        return HT_EBADARG;
    }
    int rc = conf_walk(cfg, o, NULL, err, errsz);
    cJSON_Delete(o);
    if (rc == 0)
        rc = config_check(cfg, err, errsz);
    if (rc == 0 && cfg->cull_list_file[0])
        rc = config_load_cull_file(cfg, cfg->cull_list_file, err, errsz);
    return rc;
}

/* The type column as the help says it. */
static const char *conf_type_name(enum conf_type t)
{
    static const char *const names[] = {"string", "bool", "count", "size", "duration", "level"};
    return names[t];
}

/* A key's default, read from a defaulted configuration, as a file writes it. */
static const char *conf_value(const struct ht_config *cfg, const struct conf_key *k, char *buf,
                              size_t n)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    const char *field = (const char *)cfg + k->off;
    uint32_t u32;
    uint64_t u64;
    int i;
    switch (k->type) {
    case CONF_STR:
        snprintf(buf, n, "\"%s\"", field);
        return buf;
    case CONF_BOOL:
        memcpy(&i, field, sizeof(i));
        return i ? "true" : "false";
    case CONF_LOGLEVEL:
        memcpy(&i, field, sizeof(i));
        return i >= 0 && i < 4 ? levels[i] : "?";
    default:
        if (k->size == sizeof(u32)) {
            memcpy(&u32, field, sizeof(u32));
            u64 = u32;
        } else {
            memcpy(&u64, field, sizeof(u64));
        }
        return conf_format(k->type, u64, buf, n);
    }
}

/* The values a key accepts. */
static const char *conf_accepts(const struct conf_key *k, char *buf, size_t n)
{
    char lo[32], hi[32];
    if (k->type == CONF_STR)
        snprintf(buf, n, "at most %zu bytes", k->size - 1);
    else if (k->type == CONF_BOOL)
        snprintf(buf, n, "true or false");
    else if (k->type == CONF_LOGLEVEL)
        snprintf(buf, n, "error, warn, info or debug");
    else if (k->max == UINT64_MAX && k->min == 0)
        snprintf(buf, n, "any");
    else if (k->max == UINT64_MAX)
        snprintf(buf, n, "at least %s", conf_format(k->type, k->min, lo, sizeof(lo)));
    else
        snprintf(buf, n, "%s to %s", conf_format(k->type, k->min, lo, sizeof(lo)),
                 conf_format(k->type, k->max, hi, sizeof(hi)));
    return buf;
}

static const char conf_intro[] =
    "heaptraced reads its configuration from a JSON object (--config FILE). Every key is\n"
    "optional: the defaults below apply. \"limits.x\" is the member x of the object \"limits\".\n"
    "Sizes are a number of bytes or a string such as \"64KiB\" or \"2GiB\"; durations are\n"
    "nanoseconds or a string such as \"250ms\" or \"30s\". Keys beginning with '_' are\n"
    "comments; any other key not listed here is refused, and the daemon does not start.\n";

void config_help(FILE *f, int markdown)
{
    struct ht_config cfg;
    char def[600], acc[96];
    config_defaults(&cfg);
    if (markdown)
        fprintf(f, "# Configuration\n\n<!-- Generated by `heaptraced --help-config=markdown` "
                   "from daemon/config.def: edit that list, not this file. -->\n\n");
    fprintf(f, "%s\n", conf_intro);
    if (markdown)
        fprintf(f, "| Key | Type | Default | Accepts | Meaning |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(conf_keys) / sizeof(conf_keys[0]); i++) {
        const struct conf_key *k = &conf_keys[i];
        conf_value(&cfg, k, def, sizeof(def));
        conf_accepts(k, acc, sizeof(acc));
        if (markdown)
            fprintf(f, "| `%s` | %s | `%s` | %s | %s |\n", k->key, conf_type_name(k->type),
                    conf_value(&cfg, k, def, sizeof(def)), acc, k->doc);
        else
            fprintf(f, "%-24s %-8s default %s; %s\n    %s\n", k->key, conf_type_name(k->type),
                    conf_value(&cfg, k, def, sizeof(def)), acc, k->doc);
    }
    config_free(&cfg);
}
