/* GET /debug/pprof/heap and /debug/pprof/allocs: a session's stacks as the
 * gzip'd profile.proto `export --format pprof` writes, at the paths Go's
 * net/http/pprof serves and pprof scrapers (Grafana Alloy's
 * pyroscope.scrape, Parca) request for memory. The profile is made on the
 * query workers like every query; the connection is held meanwhile
 * (http_hold). Like /metrics, every user's sessions are served: the
 * listener has no authentication (docs/fleet.md). */
#include "route-pprof.h"

#include "commands.h"
#include "export.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-proto.h"
#include "pprof-make.h"
#include "pprof.h"
#include "qjob.h"
#include "query-job.h"
#include "url.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT "text/plain; charset=utf-8"

struct http_pprof {
    struct pprof_make m;
    struct server *srv;
};

/* The session names a plain-text answer lists: each quoted, a quote, a
 * backslash or a byte outside printable ASCII as \xNN (a name is any
 * UTF-8: it must not forge lines of the answer). */
static int name_escaped(struct ht_sbuf *b, const char *name)
{
    int rc = ht_sbuf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)name; rc == 0 && *p; p++) {
        char x[8];
        if (*p < 0x20 || *p >= 0x7f || *p == '"' || *p == '\\')
            rc = ht_sbuf_add(b, x, (size_t)snprintf(x, sizeof(x), "\\x%02x", *p));
        else
            rc = ht_sbuf_add(b, (const char *)p, 1);
    }
    return rc ? rc : ht_sbuf_add(b, "\"", 1);
}

/* status with why, then the sessions a profile can be asked of. */
static void respond_sessions(struct http_conn *c, struct server *srv, int status, const char *why)
{
    struct ht_sbuf b = {0};
    static const char head[] = "\nsessions (session=NAME or ID):";
    int rc = ht_sbuf_add(&b, why, strlen(why));
    if (rc == 0)
        rc = ht_sbuf_add(&b, head, sizeof(head) - 1);
    int n = 0;
    for (struct session *s = srv->sessions.head; rc == 0 && s; s = session_next(s), n++) {
        char id[32];
        rc = ht_sbuf_add(&b, id, (size_t)snprintf(id, sizeof(id), "\n  %u ", session_id(s)));
        if (rc == 0)
            rc = name_escaped(&b, session_name(s));
    }
    if (rc == 0 && !n)
        rc = ht_sbuf_add(&b, " none", 5);
    if (rc == 0)
        rc = ht_sbuf_add(&b, "\n", 1);
    if (rc != 0) {
        srv->http.unavailable++;
        http_respond(c, 503, TEXT, "out of memory\n", 14);
    } else {
        http_respond(c, status, TEXT, b.p, b.len);
    }
    ht_sbuf_free(&b);
}

/* One URL parameter into args (an export's arguments) or session: 0, or
 * 400 with why in err. gc (Go's: collect garbage first) means nothing
 * here and is ignored; debug other than 0 (Go's text forms) is refused. */
static int one_param(const char *name, const char *val, char *session, size_t scap, cJSON *args,
                     char *err, size_t errsz)
{
    if (!strcmp(name, "session")) {
        size_t n = strlen(val);
        if (n >= scap) {
            snprintf(err, errsz, "session=: a name is at most %zu bytes", scap - 1);
            return 400;
        }
        memcpy(session, val, n + 1);
        return 0;
    }
    if (!strcmp(name, "type")) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(args, "type");
        if (!t)
            t = cJSON_AddArrayToObject(args, "type");
        if (t && cJSON_AddItemToArray(t, cJSON_CreateString(val)))
            return 0;
    } else if (!strcmp(name, "range")) {
        cJSON_DeleteItemFromObjectCaseSensitive(args, "range");
        if (cJSON_AddStringToObject(args, "range", val))
            return 0;
    } else if (!strcmp(name, "top")) {
        char *end;
        unsigned long n = strtoul(val, &end, 10);
        if (val[0] < '0' || val[0] > '9' || *end || n == 0 || n > HT_QUERY_TOP_MAX) {
            snprintf(err, errsz, "top=%.40s: a number of rows, 1 to %u", val, HT_QUERY_TOP_MAX);
            return 400;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(args, "top");
        if (cJSON_AddNumberToObject(args, "top", (double)n))
            return 0;
    } else if (!strcmp(name, "gc")) {
        return 0;
    } else if (!strcmp(name, "debug")) {
        if (!strcmp(val, "0"))
            return 0;
        snprintf(err, errsz, "debug=%.40s: only the binary profile (debug=0) is served", val);
        return 400;
    } else {
        snprintf(err, errsz, "unknown parameter \"%.40s\" (session, type, range, top)", name);
        return 400;
    }
    snprintf(err, errsz, "out of memory");
    return 503;
}

/* Was name, a parameter taken once, given before? (type is a list: it may
 * repeat.) Two values of one (session=a&session=b) were taken as the last,
 * the other dropped unsaid: which one a client meant is not known. */
static int param_again(const char *name, unsigned *seen)
{
    static const char *const once[] = {"session", "range", "top", "gc", "debug"};
    for (unsigned i = 0; i < sizeof(once) / sizeof(once[0]); i++) {
        if (strcmp(name, once[i]) != 0)
            continue;
        if (*seen & 1u << i)
            return 1;
        *seen |= 1u << i;
    }
    return 0;
}

/* The URL's parameters (name=value&...) into session and args: 0, or the
 * status to answer with why in err. */
static int url_params(const char *query, char *session, size_t scap, cJSON *args, char *err,
                      size_t errsz)
{
    unsigned seen = 0;
    for (const char *p = query; *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nl = eq ? (size_t)(eq - p) : len;
        char name[32], val[256];
        if (url_decode(p, nl, name, sizeof(name)) != 0 ||
            url_decode(eq ? eq + 1 : "", eq ? len - nl - 1 : 0, val, sizeof(val)) != 0) {
            snprintf(err, errsz, "a parameter is badly %%-encoded, holds a NUL or is too long");
            return 400;
        }
        p += len + (amp != NULL);
        if (nl == 0)
            continue; /* "&&" */
        if (param_again(name, &seen)) {
            snprintf(err, errsz, "%s= given twice (only type= may repeat)", name);
            return 400;
        }
        int rc = one_param(name, val, session, scap, args, err, errsz);
        if (rc)
            return rc;
    }
    return 0;
}

static void job_opened(struct qjob *j)
{
    struct http_pprof *x = j->arg;
    pprof_make_opened(&x->m, j->s);
}

static void job_work(struct qjob *j)
{
    struct http_pprof *x = j->arg;
    j->rc = pprof_make_work(&x->m, j);
}

static void job_done(struct qjob *j)
{
    struct http_conn *c = j->c;
    struct http_pprof *x = j->arg;
    if (!c)
        return;  /* the client went away: counted as http_gone_pending */
    j->c = NULL; /* answered: qjob_free has nothing to detach */
    if (j->rc) {
        x->srv->http.unavailable++;
        /* Past pprof_max_bytes: why, and what to ask for instead (counted). */
        int over = j->rc == HT_EFULL && x->m.err[0];
        x->srv->pprof_refused += over;
        const char *why = over ? x->m.err : qjob_failure_text(j->rc);
        http_respond(c, 503, TEXT, why, strlen(why));
        return;
    }
    x->srv->http.profiles++;
    if (j->res[0].ngroups > j->res[0].nrows) /* top kept the largest: counted, never silent */
        x->srv->http.profiles_cut++;
    http_respond(c, 200, "application/octet-stream", (const char *)x->m.bytes, x->m.n);
}

/* qjob_free of a job still holding its connection: never leave it waiting. */
static void job_detach(struct qjob *j)
{
    struct http_conn *c = j->c;
    struct http_pprof *x = j->arg;
    j->c = NULL;
    x->srv->http.unavailable++;
    http_respond(c, 503, TEXT, "the query ended without an answer\n", 34);
}

/* The connection closed before the answer: the job answers nobody (one
 * still waiting is dropped unrun, session.c). */
static void conn_gone(void *arg)
{
    struct qjob *j = arg;
    j->c = NULL;
}

static void job_release(void *arg)
{
    struct http_pprof *x = arg;
    pprof_make_free(&x->m);
    ht_free(x);
}

/* The profile's job on s for args (taken over): 0, or the status to answer
 * with why in err. */
static int profile_job(struct http_conn *c, struct server *srv, struct session *s, cJSON *args,
                       int default_type, char *err, size_t errsz)
{
    const struct export_value *value;
    int rc = export_value_of(args, &value, err, errsz);
    struct qjob *j = rc == 0 ? qjob_new(s, "pprof over http") : NULL;
    struct http_pprof *x = j ? ht_calloc(1, sizeof(*x)) : NULL;
    if (!x) {
        cJSON_Delete(args);
        qjob_free(j);
        return rc ? 400 : (snprintf(err, errsz, "out of memory"), 503);
    }
    x->m.default_type = default_type;
    x->srv = srv;
    j->arg = x;
    j->release = job_release;
    rc = qjob_add_query(j, export_query_args(args, value), HT_DOM_HEAP, err, errsz);
    cJSON_Delete(args);
    if (rc) {
        qjob_free(j);
        return rc == HT_ENOMEM ? 503 : 400;
    }
    if (http_is_head(c)) {
        /* HEAD: the query checked as GET's is, but not run: the profile
         * would be made only to be dropped (its length is left out). */
        qjob_free(j);
        http_respond_head(c, 200, "application/octet-stream");
        return 0;
    }
    j->opened = job_opened;
    j->work = job_work;
    j->done = job_done;
    j->for_client = 1;
    j->c = c;
    j->detach = job_detach;
    /* Held before the submit: with no worker thread the job runs (and
     * answers) within it. */
    http_hold(c, conn_gone, j);
    rc = session_query_submit(j);
    if (rc == 0)
        return 0;
    j->c = NULL;
    qjob_free(j);
    snprintf(err, errsz, "%s",
             rc == HT_EFULL ? "the session is busy: its query queue is full "
                              "(max_queued_queries); try again"
                            : qjob_failure_text(rc));
    return 503;
}

static void route_profile(struct http_conn *c, struct server *srv, const char *query,
                          int default_type)
{
    char name[64] = "", err[256];
    cJSON *args = cJSON_CreateObject();
    int status = args ? url_params(query, name, sizeof(name), args, err, sizeof(err)) : 503;
    if (!args)
        snprintf(err, sizeof(err), "out of memory");
    struct session *s = NULL;
    if (status == 0 && !name[0]) {
        status = 400;
        snprintf(err, sizeof(err), "no session=NAME given");
    } else if (status == 0) {
        cJSON *ref = cJSON_CreateString(name);
        s = ref ? session_find(&srv->sessions, ref) : NULL;
        cJSON_Delete(ref);
        if (!s) {
            status = 404;
            snprintf(err, sizeof(err), "no session of that name or id");
        }
    }
    if (status == 0) {
        status = profile_job(c, srv, s, args, default_type, err, sizeof(err));
        args = NULL; /* taken over */
    }
    cJSON_Delete(args);
    if (status == 0)
        return;
    if (status == 400)
        srv->http.bad++;
    else if (status == 404)
        srv->http.not_found++;
    else
        srv->http.unavailable++;
    respond_sessions(c, srv, status, err);
}

void route_pprof_heap(struct http_conn *c, struct server *srv, const char *query)
{
    route_profile(c, srv, query, PPROF_INUSE_SPACE);
}

void route_pprof_allocs(struct http_conn *c, struct server *srv, const char *query)
{
    route_profile(c, srv, query, PPROF_ALLOC_SPACE);
}
