/* Query arguments (range, types, filters, culling) into an engine query. */
#include "query-args.h"

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
    uint64_t now = session_engine(s)->now, d;
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
    const struct mark *m = engine_mark_find(session_engine(s), text);
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
    uint64_t now = session_engine(s)->now;
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

/* --require, --cull, --cull-list and the default cull list into qa's
 * pattern arrays, and the query pointed at them. */
static int qargs_patterns(struct qargs *qa, struct session *s, const struct ht_config *cfg,
                          const cJSON *args, char *err, size_t errsz)
{
    struct query *q = &qa->q;
    int rc;
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
            q->skip_cache = session_default_skip(s);
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

int qargs_parse(struct qargs *qa, struct session *s, const struct ht_config *cfg, const cJSON *args,
                int domain, char *err, size_t errsz)
{
    struct query *q = &qa->q;
    query_init(q);
    q->domain = domain;
    q->top = 50;
    q->t2 = session_engine(s)->now;
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
    return qargs_patterns(qa, s, cfg, args, err, errsz);
}
