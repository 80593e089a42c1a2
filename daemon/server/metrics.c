/* The Prometheus text exposition (format 0.0.4: "# HELP", "# TYPE", then
 * `name{label="value"} number` lines, one family's samples together; see
 * prometheus/docs content/docs/instrumenting/exposition_formats.md).
 *
 * Per session every number of its status reply is a gauge named after its
 * path (heap.outstanding -> heaptrace_session_heap_outstanding), so the
 * exposition says what status says and a counter added to status is
 * exported without a change here. Per daemon: sessions, clients, memory,
 * queries and the HTTP listener's counters. */
#include "metrics.h"

#include "client.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"
#include "query-job.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRIC_NAME_MAX 160
/* Label values (names of sessions and processes) are cut to this many bytes. */
#define METRIC_LABEL_MAX 200

struct mbuf {
    char *p;
    size_t n, cap;
    int oom;
    unsigned cut; /* label values cut to METRIC_LABEL_MAX */
};

static void mb_put(struct mbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void mb_str(struct mbuf *b, const char *s)
{
    mb_put(b, s, strlen(s));
}

static void mb_printf(struct mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mb_printf(struct mbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        mb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A label value: backslash, double quote and line feed escaped as the
 * format requires; cut to METRIC_LABEL_MAX bytes at a UTF-8 boundary. */
static void mb_label(struct mbuf *b, const char *v)
{
    size_t n = strlen(v);
    if (n > METRIC_LABEL_MAX) {
        b->cut++;
        n = METRIC_LABEL_MAX;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\')
            mb_put(b, "\\\\", 2);
        else if (v[i] == '"')
            mb_put(b, "\\\"", 2);
        else if (v[i] == '\n')
            mb_put(b, "\\n", 2);
        else
            mb_put(b, v + i, 1);
    }
}

static void mb_value(struct mbuf *b, double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        mb_printf(b, " %.0f\n", v);
    else
        mb_printf(b, " %.17g\n", v);
}

/* One status number: its metric name and value. */
struct mfield {
    char name[METRIC_NAME_MAX];
    char path[METRIC_NAME_MAX]; /* as status names it, for HELP */
    double v;
};

struct mset {
    struct mfield *f;
    size_t n, cap;
    int oom;
};

/* Suffixes the exposition's linter (promtool check metrics) keeps for other
 * types or units, renamed: "_count"/"_sum"/"_bucket" belong to histograms
 * and summaries, "_total" to counters, "_ms" is not a base unit. */
static double field_name(char *name, size_t cap, const char *path, double v)
{
    size_t n = 0;
    for (const char *p = path; *p && n + 1 < cap; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        name[n++] = ok ? (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch) : '_';
    }
    name[n] = '\0';
    static const struct {
        const char *from, *to;
        double scale;
    } sfx[] = {{"_ms", "_seconds", 1e-3}, {"_ns", "_seconds", 1e-9},  {"_count", "_number", 1},
               {"_sum", "_summed", 1},    {"_bucket", "_buckets", 1}, {"_total", "_all", 1}};
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        size_t fl = strlen(sfx[i].from), tl = strlen(sfx[i].to);
        if (n >= fl && strcmp(name + n - fl, sfx[i].from) == 0 && n - fl + tl + 1 <= cap) {
            strcpy(name + n - fl, sfx[i].to);
            return v * sfx[i].scale;
        }
    }
    return v;
}

static void mset_add(struct mset *m, const char *path, double v)
{
    if (m->oom || !isfinite(v))
        return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        struct mfield *f = realloc(m->f, cap * sizeof(*f));
        if (!f) {
            m->oom = 1;
            return;
        }
        m->f = f;
        m->cap = cap;
    }
    struct mfield *f = &m->f[m->n++];
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->v = field_name(f->name, sizeof(f->name), path, v);
}

/* Every number and boolean under o, by its path ("heap.outstanding").
 * Arrays (heaps, triggers, snapshots, errors) have no fixed name per item:
 * left out, their lengths are not. */
static void flatten(struct mset *m, const cJSON *o, const char *prefix)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        char path[METRIC_NAME_MAX];
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
        if (cJSON_IsNumber(it))
            mset_add(m, path, it->valuedouble);
        else if (cJSON_IsBool(it))
            mset_add(m, path, cJSON_IsTrue(it) ? 1 : 0);
        else if (cJSON_IsObject(it))
            flatten(m, it, path);
    }
}

static const struct mfield *mset_find(const struct mset *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->f[i].name, name) == 0)
            return &m->f[i];
    return NULL;
}

/* What one session's samples are labelled with. */
struct msess {
    /* Room past METRIC_LABEL_MAX: mb_label cuts a longer value at a UTF-8
     * boundary; a cut here, by the copy, could split a character and make
     * the whole exposition unparsable (promtool: "invalid label value"). */
    char name[METRIC_LABEL_MAX + 4], image[METRIC_LABEL_MAX + 4], source[32];
    uint32_t id;
    long long pid;
    struct mset f;
};

static void mb_labels(struct mbuf *b, const struct msess *s)
{
    mb_put(b, "{session=\"", 10);
    mb_label(b, s->name);
    mb_printf(b, "\",id=\"%u\",pid=\"%lld\",image=\"", s->id, s->pid);
    mb_label(b, s->image);
    mb_put(b, "\",source=\"", 10);
    mb_label(b, s->source);
    mb_put(b, "\"}", 2);
}

static void sess_collect(struct msess *ms, struct session *s, const struct session_status_ctx *x)
{
    memset(ms, 0, sizeof(*ms));
    snprintf(ms->name, sizeof(ms->name), "%s", session_name(s));
    snprintf(ms->image, sizeof(ms->image), "%s", session_process_name(s));
    snprintf(ms->source, sizeof(ms->source), "%s", session_source_name(s));
    ms->id = session_id(s);
    cJSON *st = session_status_json(s, x);
    if (!st) {
        ms->f.oom = 1;
        return;
    }
    const cJSON *pid =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "process"), "pid");
    ms->pid = cJSON_IsNumber(pid) ? (long long)pid->valuedouble : 0;
    /* The daemon's memory is a daemon metric, not one per session. */
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "memory"),
                                            "daemon");
    flatten(&ms->f, st, "");
    cJSON_Delete(st);
}

/* A family of the sessions' samples: one metric name, its samples in
 * session order at ent[first..first+count). */
struct mfam {
    const struct mfield *f; /* its first field: the name and the HELP path */
    size_t first, count, fill;
    size_t last; /* the last session holding it, + 1 */
};

/* A sample: a field of a session. */
struct msample {
    const struct mfield *g;
    const struct msess *s;
};

/* The family of name in a table of cap (a power of two) slots, each a
 * family's index + 1 (0: free): its slot. FNV-1a (www.isthe.com/chongo/tech/comp/fnv). */
static size_t fam_slot(const uint32_t *tab, size_t cap, const struct mfam *fams, const char *name)
{
    uint64_t h = 14695981039346656037ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    size_t i = (size_t)h & (cap - 1);
    while (tab[i] && strcmp(fams[tab[i] - 1].f->name, name) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Each field's family (fid, in the order the fields come: SIZE_MAX for a
 * name the session has already given, of which the first is kept); the
 * families in the order first seen. 0, or -1 out of memory. */
static int fam_index(const struct msess *ss, size_t n, size_t total, struct mfam *fams,
                     size_t *nfam, size_t *fid)
{
    size_t cap = 16;
    while (cap < 2 * total)
        cap *= 2;
    uint32_t *tab = calloc(cap, sizeof(*tab));
    if (!tab)
        return -1;
    size_t e = 0;
    *nfam = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < ss[i].f.n; k++, e++) {
            const struct mfield *f = &ss[i].f.f[k];
            size_t slot = fam_slot(tab, cap, fams, f->name);
            if (!tab[slot]) {
                fams[*nfam] = (struct mfam){f, 0, 0, 0, 0};
                tab[slot] = (uint32_t)++ * nfam;
            }
            struct mfam *m = &fams[tab[slot] - 1];
            fid[e] = m->last == i + 1 ? SIZE_MAX : tab[slot] - 1;
            if (m->last != i + 1)
                m->count++;
            m->last = i + 1;
        }
    }
    free(tab);
    return 0;
}

/* Every session's families: each name once, in the order first seen, its
 * samples in session order. The names are hashed: n sessions of f fields
 * cost n*f lookups, where a linear search of each name cost n*f*f/2
 * compares (strcmp was 12% of the daemon's CPU under 50 scrapers of 16
 * sessions, perf record). */
static void sess_families(struct mbuf *b, struct msess *ss, size_t n)
{
    size_t total = 0, nfam = 0;
    for (size_t i = 0; i < n; i++)
        total += ss[i].f.n;
    struct mfam *fams = malloc((total ? total : 1) * sizeof(*fams));
    size_t *fid = malloc((total ? total : 1) * sizeof(*fid));
    struct msample *ent = malloc((total ? total : 1) * sizeof(*ent));
    if (!fams || !fid || !ent || fam_index(ss, n, total, fams, &nfam, fid) != 0) {
        b->oom = 1;
        goto out;
    }
    for (size_t m = 0, at = 0; m < nfam; at += fams[m++].count)
        fams[m].first = fams[m].fill = at;
    for (size_t i = 0, e = 0; i < n; i++)
        for (size_t k = 0; k < ss[i].f.n; k++, e++)
            if (fid[e] != SIZE_MAX) {
                struct mfam *m = &fams[fid[e]];
                ent[m->fill++] = (struct msample){&ss[i].f.f[k], &ss[i]};
            }
    for (size_t m = 0; m < nfam; m++) {
        const struct mfield *f = fams[m].f;
        mb_printf(b, "# HELP heaptrace_session_%s status %s of the session\n", f->name, f->path);
        mb_printf(b, "# TYPE heaptrace_session_%s gauge\n", f->name);
        for (size_t e = fams[m].first; e < fams[m].first + fams[m].count; e++) {
            mb_printf(b, "heaptrace_session_%s", f->name);
            mb_labels(b, ent[e].s);
            mb_value(b, ent[e].g->v);
        }
    }
out:
    free(fams);
    free(fid);
    free(ent);
}

static void gauge(struct mbuf *b, const char *name, const char *help, double v)
{
    mb_printf(b, "# HELP heaptrace_%s %s\n# TYPE heaptrace_%s gauge\nheaptrace_%s", name, help,
              name, name);
    mb_value(b, v);
}

static void counter(struct mbuf *b, const char *name, const char *help, uint64_t v)
{
    mb_printf(b, "# HELP heaptrace_%s_total %s\n# TYPE heaptrace_%s_total counter\n", name, help,
              name);
    mb_printf(b, "heaptrace_%s_total %llu\n", name, (unsigned long long)v);
}

static double field_or0(const struct mset *m, const char *name)
{
    const struct mfield *f = mset_find(m, name);
    return f ? f->v : 0;
}

static void daemon_metrics(struct mbuf *b, struct server *srv, const struct msess *ss, size_t n)
{
    double run = 0, refused = 0, hold = 0;
    for (size_t i = 0; i < n; i++) {
        run += field_or0(&ss[i].f, "queries_run");
        refused += field_or0(&ss[i].f, "queries_rejected_busy");
        double h = field_or0(&ss[i].f, "queries_longest_loop_hold_seconds");
        hold = h > hold ? h : hold;
    }
    gauge(b, "sessions", "sessions the daemon holds", (double)n);
    gauge(b, "clients", "clients connected to the control socket", srv->nclients);
    gauge(b, "memory_used_bytes", "bytes held by every session and queued output",
          (double)(mem_budget_used(&srv->mem) + srv->out_queued));
    gauge(b, "memory_budget_bytes", "daemon_memory_budget (0: no limit)", (double)srv->mem.limit);
    gauge(b, "queries_run", "queries run by the sessions held now", run);
    gauge(b, "queries_refused", "queries refused (queue full) by the sessions held now", refused);
    gauge(b, "longest_loop_hold_seconds",
          "longest the loop was held by a query of a session held now", hold);
    counter(b, "requests", "control requests read", srv->requests);
    counter(b, "request_errors", "control requests answered with an error", srv->request_errors);
    counter(b, "clients_refused_full", "control clients refused: max_clients reached",
            srv->clients_refused_full);
    counter(b, "clients_refused_uid", "control clients refused: max_clients_per_uid reached",
            srv->clients_refused_uid);
    counter(b, "clients_refused_perm", "control clients refused: not allowed",
            srv->clients_refused);
    counter(b, "clients_idle_closed", "control clients closed idle", srv->clients_idle_closed);
    counter(b, "http_requests", "HTTP requests answered", srv->http.requests);
    counter(b, "http_refused_full", "HTTP connections refused: the connection cap was reached",
            srv->http.refused_full);
    counter(b, "http_refused_nofd",
            "HTTP connections closed for want of file descriptors (the last 64 are kept for "
            "the control socket and the sessions)",
            srv->http.refused_nofd);
    counter(b, "http_kept_alive", "HTTP connections kept open for another request after an answer",
            srv->http.kept_alive);
    counter(b, "http_bad_requests", "HTTP requests answered 400", srv->http.bad);
    counter(b, "http_too_large", "HTTP requests answered 431 (request or header count too big)",
            srv->http.too_large);
    counter(b, "http_idle_closed", "HTTP connections closed at the idle timeout",
            srv->http.idle_closed);
    counter(b, "http_not_found", "HTTP requests answered 404", srv->http.not_found);
    counter(b, "http_bad_method", "HTTP requests answered 405", srv->http.bad_method);
    counter(b, "http_unavailable", "HTTP requests answered 503", srv->http.unavailable);
    counter(b, "http_metrics_reused",
            "scrapes answered with the last exposition (made under 100 ms before, or 10 times "
            "the time it took to make)",
            srv->http.metrics_reused);
    counter(b, "http_profiles", "pprof profiles answered (/debug/pprof/heap, allocs)",
            srv->http.profiles);
    counter(b, "http_profiles_cut",
            "pprof profiles holding only the largest stacks of the query's (top, at most 10000)",
            srv->http.profiles_cut);
    counter(b, "http_gone_pending",
            "HTTP connections closed while their profile was being made (the profile dropped)",
            srv->http.gone_pending);
    gauge(b, "http_connections", "HTTP connections open", srv->http.conns);
    gauge(b, "http_longest_hold_seconds",
          "longest an HTTP request held the loop (parsed, answer made and queued)",
          (double)srv->http.hold_max_ns / 1e9);
}

/* What a recorder of s has been sent and not read (as status counts it). */
static uint64_t sub_queued(struct session_sub *sub, const struct session *s)
{
    const struct client *c = client_of_sub(sub);
    return c->recording == s ? c->out_pending : 0;
}

/* The top sites of each session by outstanding bytes (metrics_top_sites
 * of them): a query per session on the workers, never on the loop, so an
 * exposition shows the set last computed, with its age, and asks for a new
 * one when that is SITES_REFRESH_MS old (a scrape never waits for a query;
 * scrapes every 100 ms cost a query per session every 5 s). */
#define SITES_REFRESH_MS 5000

struct sess_sites {
    struct sess_sites *next;
    uint32_t id;
    int pending;      /* a refresh job runs or waits */
    uint64_t at, ask; /* uv_now (ms) of the set shown (0: none yet), of the last ask */
    cJSON *rows;      /* [{"frame","outstanding"},...] */
    double groups;    /* the sites the query found (rows holds the largest) */
};

struct metrics_sites {
    struct sess_sites *head;
};

static struct sess_sites *sites_of(struct server *srv, uint32_t id, int make)
{
    if (!srv->sites && (!make || !(srv->sites = ht_calloc(1, sizeof(*srv->sites)))))
        return NULL;
    struct sess_sites *e = srv->sites->head;
    while (e && e->id != id)
        e = e->next;
    if (!e && make && (e = ht_calloc(1, sizeof(*e)))) {
        e->id = id;
        e->next = srv->sites->head;
        srv->sites->head = e;
    }
    return e;
}

struct sites_job {
    struct server *srv;
    uint32_t id;
};

static void sites_done(struct qjob *j)
{
    struct sites_job *x = j->arg;
    struct sess_sites *e = sites_of(x->srv, x->id, 0);
    if (!e)
        return;
    e->pending = 0;
    cJSON *d = j->rc == 0 ? session_top_result(j, 0) : NULL;
    cJSON *rows = d ? cJSON_DetachItemFromObjectCaseSensitive(d, "rows") : NULL;
    if (!rows) {
        x->srv->sites_refresh_failed++;
        cJSON_Delete(d);
        return;
    }
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(d, "groups");
    e->groups = cJSON_IsNumber(g) ? g->valuedouble : 0;
    cJSON_Delete(d);
    cJSON_Delete(e->rows);
    e->rows = rows;
    e->at = uv_now(x->srv->loop);
}

static void sites_job_release(void *arg)
{
    ht_free(arg);
}

/* A refresh of s's sites: the query `stacks --by frame --top N` runs. */
static void sites_ask(struct server *srv, struct session *s, struct sess_sites *e)
{
    uint32_t top = srv->cfg->metrics_top_sites;
    struct qjob *j = qjob_new(s, "metrics sites");
    struct sites_job *x = j ? ht_calloc(1, sizeof(*x)) : NULL;
    cJSON *args = x ? cJSON_CreateObject() : NULL;
    char err[128];
    int rc = args && cJSON_AddStringToObject(args, "by", "frame") &&
                     cJSON_AddNumberToObject(args, "top", top)
                 ? 0
                 : HT_ENOMEM;
    if (x) {
        x->srv = srv;
        x->id = session_id(s);
        j->arg = x;
        j->release = sites_job_release;
    }
    if (rc == 0)
        rc = qjob_add_query(j, args, HT_DOM_HEAP, err, sizeof(err));
    else
        cJSON_Delete(args);
    if (rc == 0) {
        j->render = QJOB_ROWS_TREE;
        j->done = sites_done;
        rc = session_query_submit(j);
    }
    e->ask = uv_now(srv->loop);
    if (rc != 0) {
        srv->sites_refresh_failed++;
        qjob_free(j);
        return;
    }
    e->pending = 1;
}

/* Sets of sessions gone are freed; stale ones are asked for again. */
static void sites_refresh(struct server *srv)
{
    uint64_t now = uv_now(srv->loop);
    for (struct sess_sites **p = srv->sites ? &srv->sites->head : NULL, *e; p && (e = *p);) {
        struct session *s = srv->sessions.head;
        while (s && session_id(s) != e->id)
            s = session_next(s);
        if (!s) {
            *p = e->next;
            cJSON_Delete(e->rows);
            ht_free(e);
            continue;
        }
        p = &e->next;
    }
    for (struct session *s = srv->sessions.head; s; s = session_next(s)) {
        struct sess_sites *e = sites_of(srv, session_id(s), 1);
        if (!e) {
            srv->sites_refresh_failed++;
            continue;
        }
        if (!e->pending && (!e->ask || now - e->ask >= SITES_REFRESH_MS))
            sites_ask(srv, s, e);
    }
}

static void sites_families(struct mbuf *b, struct server *srv, const struct msess *ss, size_t n)
{
    uint64_t now = uv_now(srv->loop);
    mb_printf(b, "# HELP heaptrace_site_outstanding_bytes bytes outstanding at the session's "
                 "top allocation sites (stacks --by frame, metrics_top_sites of them)\n"
                 "# TYPE heaptrace_site_outstanding_bytes gauge\n");
    for (size_t i = 0; i < n; i++) {
        const struct sess_sites *e = sites_of(srv, ss[i].id, 0);
        const cJSON *r, *rows = e ? e->rows : NULL;
        cJSON_ArrayForEach(r, rows)
        {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "frame");
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "outstanding");
            if (!cJSON_IsNumber(o) || o->valuedouble <= 0)
                continue; /* sorted by outstanding: a site with none is not one of the top */
            mb_str(b, "heaptrace_site_outstanding_bytes{session=\"");
            mb_label(b, ss[i].name);
            mb_str(b, "\",site=\"");
            mb_label(b, cJSON_IsString(f) ? f->valuestring : "?");
            mb_put(b, "\"}", 2);
            mb_value(b, o->valuedouble);
        }
    }
    mb_printf(b, "# HELP heaptrace_site_outstanding_age_seconds age of the sites shown "
                 "(refreshed every %d s while scraped)\n"
                 "# TYPE heaptrace_site_outstanding_age_seconds gauge\n",
              SITES_REFRESH_MS / 1000);
    for (size_t i = 0; i < n; i++) {
        const struct sess_sites *e = sites_of(srv, ss[i].id, 0);
        if (!e || !e->at)
            continue;
        mb_str(b, "heaptrace_site_outstanding_age_seconds{session=\"");
        mb_label(b, ss[i].name);
        mb_put(b, "\"}", 2);
        mb_value(b, (double)(now - e->at) / 1e3);
    }
    mb_printf(b, "# HELP heaptrace_site_groups sites the last query found (the gauge shows "
                 "the largest)\n# TYPE heaptrace_site_groups gauge\n");
    for (size_t i = 0; i < n; i++) {
        const struct sess_sites *e = sites_of(srv, ss[i].id, 0);
        if (!e || !e->at)
            continue;
        mb_str(b, "heaptrace_site_groups{session=\"");
        mb_label(b, ss[i].name);
        mb_put(b, "\"}", 2);
        mb_value(b, e->groups);
    }
    counter(b, "site_refresh_failed", "refreshes of the sites refused (queue full) or failed",
            srv->sites_refresh_failed);
}

void metrics_sites_free(struct server *srv)
{
    while (srv->sites && srv->sites->head) {
        struct sess_sites *e = srv->sites->head;
        srv->sites->head = e->next;
        cJSON_Delete(e->rows);
        ht_free(e);
    }
    ht_free(srv->sites);
    srv->sites = NULL;
}

int metrics_render(struct server *srv, char **out, size_t *len)
{
    const struct session_status_ctx x = {&srv->mem, srv->out_queued, sub_queued, session_quality_json};
    size_t n = 0;
    for (struct session *s = srv->sessions.head; s; s = session_next(s))
        n++;
    struct msess *ss = calloc(n ? n : 1, sizeof(*ss));
    if (!ss)
        return HT_ENOMEM;
    size_t i = 0;
    int oom = 0;
    for (struct session *s = srv->sessions.head; s && i < n; s = session_next(s), i++) {
        sess_collect(&ss[i], s, &x);
        oom |= ss[i].f.oom;
    }
    struct mbuf b = {0};
    daemon_metrics(&b, srv, ss, n);
    sess_families(&b, ss, n);
    if (srv->cfg->metrics_top_sites) {
        sites_families(&b, srv, ss, n);
        if (!srv->stopping)
            sites_refresh(srv);
    }
    gauge(&b, "metrics_labels_cut",
          "label values (session, image, site) cut to 200 bytes in this exposition",
          (double)b.cut);
    for (i = 0; i < n; i++)
        free(ss[i].f.f);
    free(ss);
    if (b.oom || oom) {
        free(b.p);
        return HT_ENOMEM;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}
