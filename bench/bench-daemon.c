/*
 * ht-bench-daemon: sustained ingest through heaptraced while a client issues
 * a stacks query every 100 ms, against the engine alone on the same events,
 * and against the daemon with no queries, for each kind of query users ask.
 *
 * The workload is the engine benchmark's (bench/workload.c): a long-lived set
 * of --live allocations over --stacks stacks, then --events of churn, on a
 * clock of --stream-rate events per second (the churn starts 6 s in). As in
 * the engine benchmark, the churn is timed; the whole run (from the load
 * request, the long-lived set included) is timed too. Each round runs the
 * engine alone (the same events, already decoded, applied in the engine
 * benchmark's batches) and the daemon once per load of --loads (a new
 * session fed the binary stream over the control socket, the session
 * dropped after): none; `stacks` (whole session, top 50: the load this
 * benchmark always had, which daemon_vs_engine is measured under);
 * `stacks --type AIFO`; `stacks --range -5s:`; `stacks --range -1s:`; each
 * issued every --query-interval-ms from a second connection (at once if the
 * last took longer); metrics50 (--loads, not run by default): no query, 50
 * clients scraping GET /metrics every 100 ms (scrape.c, one thread) on a
 * listener the daemon is started with, their CPU and the daemon's printed
 * apart. The order rotates from round to round.
 *
 * The machine is noisy: the engine alone runs at 7 or at 11 M events/s from
 * one round to the next, and the daemon likewise, independently. So rounds
 * are paired, the figure is the median of the per-round ratios (daemon vs
 * engine, and each load vs none), and there are 15 rounds by default: with
 * a quarter of single rounds under 0.80 (as measured before the loop
 * stopped reading every ring record), the median of 5 rounds falls under it
 * one run in ten, that of 15 one in sixty.
 * Each round also shows where its timed window went, for the engine's thread
 * and the daemon's loop: on a CPU, waiting for one, idle. Prints one JSON line.
 *
 * Before the rounds, on a fresh daemon, one session is loaded with the same
 * stream and no load: the daemon's RSS before and after, then each query
 * kind cold (the first of its kind) and --warm-runs times warm, as the
 * client sees them, with the CPU time of the daemon's loop meanwhile (the
 * machine may be shared: the wall clock counts others' time too). Any query that fails, answers
 * complete:false, or (a window) reaches the session's start fails the run.
 *
 * Issue 10's targets are printed next to the figures they judge (the JSON
 * line's "issue10_targets", and a table on stderr): AIFO cold <= 10 ms, each
 * window cold <= 30 ms, ingest under each query kind (top50 included) >= 0.9
 * of none, no event lost (each load session's quality.lost, summed over the
 * rounds), and everything that grows with live allocations <= 64 bytes per
 * live allocation, from the loaded session's status --json memory by
 * structure (the kinds that grow with the distinct stacks, per_stack_kind,
 * are printed apart, per stack and per live allocation, and not judged), the rings apart ("memory_per_live_alloc": each ring's records
 * now and its configured size, cap x record bytes). Missing a target does
 * not fail the run: it is a figure.
 *
 * usage: ht-bench-daemon --daemon PATH [--events N] [--live N] [--stacks N] [--rounds N]
 *        [--loads none,top50,aifo,window_5s,window_1s,metrics50] [--stream-rate EVENTS_PER_S]
 *        [--query-interval-ms N] [--warm-runs N] [--daemon-config FILE]
 *        HT_BENCH_ETW=1: also one round as a raw ETW record stream (etw_of).
 *        HT_BENCH_NO_QUERIES=1: no query load.  HT_BENCH_TEXT=1: also one round of
 *        the same stream as .htev text.
 */
#include "bench-util.h"
#include "engine.h"
#include "etw-raw.h"
#include "htev-write.h"
#include "htevb.h"
#include "scrape.h"
#include "workload.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 31
#define ENGINE_BATCH (1u << 18)

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void bin_out(void *arg, const void *data, size_t n)
{
    buf_put(arg, data, n);
}

/* Minor page faults so far of a process. */
static long minflt(pid_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    /* Field 10 (minflt), counted after the ")" that ends the command name. */
    const char *p = strrchr(text, ')');
    for (int field = 2; p && *p; p++)
        if (*p == ' ' && ++field == 10)
            return strtol(p + 1, NULL, 10);
    return -1;
}

static int connect_to(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, path, plen + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Read one line (up to cap) into buf, NUL-terminated; returns its length or
 * -1. Replies are read in blocks: one recv per byte would cost the client
 * more than the daemon spends on the query. Bytes past the newline are not
 * expected (one request, one reply line) and are dropped. */
static long read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k <= 0)
            return -1;
        char *nl = memchr(buf + n, '\n', (size_t)k);
        if (nl) {
            *nl = '\0';
            return (long)(nl - buf);
        }
        n += (size_t)k;
    }
    return -1;
}

/* One request on a fresh connection; the reply's first line goes to line. */
static int request(const char *sock, const char *req, char *line, size_t cap)
{
    int fd = connect_to(sock);
    if (fd < 0)
        return -1;
    int rc = send_all(fd, req, strlen(req)) == 0 && read_line(fd, line, cap) >= 0 ? 0 : -1;
    close(fd);
    return rc;
}

static void send_chunks(int fd, const char *data, size_t len)
{
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        char hdr[32];
        int k = snprintf(hdr, sizeof(hdr), "%zu\n", n);
        send_all(fd, hdr, (size_t)k);
        send_all(fd, data + off, n);
    }
}

/* A connection that reads replies frame by frame: a reply may come in
 * several lines ("more":true on all but the last), and bytes past a line
 * are kept for the next. */
#define CONN_LINE_MAX (8u << 20) /* far above a top-50 reply */

struct conn {
    int fd;
    char *buf;
    size_t len, used;
};

static int conn_open(struct conn *c, const char *path)
{
    c->len = c->used = 0;
    c->buf = malloc(CONN_LINE_MAX);
    c->fd = c->buf ? connect_to(path) : -1;
    return c->fd >= 0 ? 0 : -1;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    c->fd = -1;
    c->buf = NULL;
}

/* The next line, NUL-terminated in the connection's buffer (valid until
 * the next call), or NULL on EOF, error or a line over CONN_LINE_MAX. */
static char *conn_line(struct conn *c)
{
    memmove(c->buf, c->buf + c->used, c->len - c->used);
    c->len -= c->used;
    c->used = 0;
    size_t scanned = 0;
    for (;;) {
        char *nl = memchr(c->buf + scanned, '\n', c->len - scanned);
        if (nl) {
            *nl = '\0';
            c->used = (size_t)(nl - c->buf) + 1;
            return c->buf;
        }
        scanned = c->len;
        if (c->len == CONN_LINE_MAX)
            return NULL;
        ssize_t k = recv(c->fd, c->buf + c->len, CONN_LINE_MAX - c->len, 0);
        if (k <= 0)
            return NULL;
        c->len += (size_t)k;
    }
}

/* Does a reply line announce another frame? "more" comes before "data". */
static int line_more(const char *line)
{
    const char *more = strstr(line, "\"more\":true"), *data = strstr(line, "\"data\":");
    return more && (!data || more < data);
}

/* The query kinds, each a `heaptracectl stacks` request's arguments; then
 * metrics50, no query: 50 clients scraping GET /metrics every 100 ms over
 * HTTP (scrape.c), the daemon listening for them. */
enum { LOAD_NONE, LOAD_TOP50, LOAD_AIFO, LOAD_W5, LOAD_W1, LOAD_M50, NLOADS };
#define NQUERY_KINDS LOAD_M50

static const struct load_kind {
    const char *name;
    const char *args;
    int window;
} load_kinds[NLOADS] = {
    {"none", NULL, 0},
    {"top50", "\"top\":50", 0},                        /* stacks: today's load */
    {"aifo", "\"top\":50,\"type\":[\"AIFO\"]", 0},     /* stacks --type AIFO */
    {"window_5s", "\"top\":50,\"range\":\"-5s:\"", 1}, /* stacks --range -5s: */
    {"window_1s", "\"top\":50,\"range\":\"-1s:\"", 1}, /* stacks --range -1s: */
    {"metrics50", NULL, 0},
};

static char query_error[512]; /* the first query failure, for the report */

static void query_failed(const char *kind, const char *why, const char *line)
{
    if (!query_error[0])
        snprintf(query_error, sizeof(query_error), "query %s: %s: %.300s", kind, why,
                 line ? line : "(no reply)");
}

/* Is the reply (its first frame) an answer users can trust? A window must
 * be complete and a window (t1 > 0: not the whole session, not answered
 * from the exact totals); every kind must be complete and have rows. */
static int reply_check(int kind, const char *first)
{
    cJSON *root = cJSON_Parse(first);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "window");
    const cJSON *t1 = cJSON_GetObjectItemCaseSensitive(w, "t1");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(d, "rows");
    const char *why = NULL;
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "ok")))
        why = "failed";
    else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "complete")))
        why = "answered complete:false";
    else if (load_kinds[kind].window &&
             (!cJSON_IsNumber(t1) || t1->valuedouble <= 0 ||
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "exact_totals"))))
        why = "the window reaches the session's start, so it is no window (more --events or a "
              "lower --stream-rate)";
    else if (cJSON_GetArraySize(rows) == 0)
        why = "answered no rows";
    if (why)
        query_failed(load_kinds[kind].name, why, first);
    cJSON_Delete(root);
    return why ? -1 : 0;
}

/* One query of a kind on c, timed as the client sees it: from the request
 * to the last frame of the reply. 0, or -1 (a failed or untrustworthy
 * answer: noted in query_error). */
static int query_once(struct conn *c, int kind, const char *session, int id, double *ms,
                      _Atomic int *sent)
{
    char req[256];
    int k = snprintf(req, sizeof(req),
                     "{\"v\":1,\"id\":%d,\"cmd\":\"stacks\",\"args\":{\"session\":"
                     "\"%s\",%s}}\n",
                     id, session, load_kinds[kind].args);
    double t0 = now_s();
    int rc = send_all(c->fd, req, (size_t)k);
    if (sent)
        *sent = 1;
    if (rc != 0) {
        query_failed(load_kinds[kind].name, "send failed", NULL);
        return -1;
    }
    char *first = NULL, *line;
    while ((line = conn_line(c)) != NULL) {
        if (!first)
            first = strdup(line);
        if (!line_more(line))
            break;
    }
    *ms = (now_s() - t0) * 1000;
    if (getenv("HT_BENCH_TRACE"))
        fprintf(stderr, "query %s %.6f %.2f ms\n", load_kinds[kind].name, t0, *ms);
    rc = -1;
    if (!line || !first)
        query_failed(load_kinds[kind].name, "the connection ended mid-reply", first);
    else
        rc = reply_check(kind, first);
    free(first);
    return rc;
}

static const char *sock_path;
static char query_session[32];
static _Atomic int querying;
static int query_interval_ms = 100;
#define LAT_MAX 100000
static double lat[NLOADS][LAT_MAX];
static int nlat[NLOADS], nfailed[NLOADS];
static int load_now; /* the kind the query thread issues */
/* Set once the thread's first request is on the socket: the churn starts
 * after it, so every load has at least one query inside its timed window. */
static _Atomic int first_sent;

static void *query_thread(void *arg)
{
    (void)arg;
    int kind = load_now, id = 0;
    struct conn c;
    if (conn_open(&c, sock_path) != 0) {
        query_failed(load_kinds[kind].name, "cannot connect", NULL);
        nfailed[kind]++;
        conn_close(&c);
        first_sent = 1;
        return NULL;
    }
    while (querying) {
        double t0 = now_s(), ms;
        if (query_once(&c, kind, query_session, ++id, &ms, &first_sent) != 0) {
            nfailed[kind]++;
            break;
        }
        if (nlat[kind] < LAT_MAX)
            lat[kind][nlat[kind]++] = ms;
        double left = query_interval_ms / 1000.0 - (now_s() - t0);
        if (left > 0)
            usleep((useconds_t)(left * 1e6));
    }
    conn_close(&c);
    return NULL;
}

/* A thread's scheduler figures: nanoseconds on a CPU and waiting for one. */
struct sched_ns {
    unsigned long long run, wait;
};

static struct sched_ns schedstat(pid_t pid, pid_t tid)
{
    struct sched_ns s = {0, 0};
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &s.run, &s.wait) != 2)
            s.run = s.wait = 0;
        fclose(f);
    }
    return s;
}

/* Where a timed window went for one thread, as fractions of it. */
struct split {
    double run, wait; /* idle is the rest */
};

static struct split split_of(struct sched_ns a, struct sched_ns b, double secs)
{
    struct split s = {(double)(b.run - a.run) / 1e9 / secs, (double)(b.wait - a.wait) / 1e9 / secs};
    return s;
}

/* The rest of the window, in percent; never below 0 (the counters and the
 * window's clock are read at slightly different moments). */
static double idle_pct(struct split s)
{
    double idle = 1 - s.run - s.wait;
    return idle > 0 ? idle * 100 : 0;
}

/* A number of the session's status (data.KEY or data.OBJ.KEY), or -1. */
static double status_number(const char *name, const char *obj, const char *key)
{
    char req[128];
    static char line[1 << 20];
    snprintf(req, sizeof(req),
             "{\"v\":1,\"id\":2,\"cmd\":\"status\",\"args\":{\"session\":\"%s\"}}\n", name);
    if (request(sock_path, req, line, sizeof(line)) != 0)
        return -1;
    cJSON *root = cJSON_Parse(line);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (obj)
        d = cJSON_GetObjectItemCaseSensitive(d, obj);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, key);
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(root);
    return x;
}

/* The session's clock ("now") from its status, or 0. */
static uint64_t session_now(const char *name)
{
    double now = status_number(name, NULL, "now");
    return now > 0 ? (uint64_t)now : 0;
}

static void session_drop(const char *name)
{
    char req[160];
    static char line[1 << 16];
    snprintf(req, sizeof(req),
             "{\"v\":1,\"id\":3,\"cmd\":\"drop\",\"args\":{\"session\":\"%s\"}}\n", name);
    request(sock_path, req, line, sizeof(line));
}

/* What one daemon run measured. */
struct drun {
    double churn_secs; /* the churn, under the query load */
    double whole_secs; /* from the load request to the load summary */
    long faults;       /* the daemon's minor faults during the churn */
    double lost;       /* the session's quality.lost (-1: unknown) */
    double cpu_s;      /* the daemon's CPU time (every thread) during the churn */
    struct split loop;
    struct scrape_stats scrape; /* metrics50: the scrapers' answers and CPU */
};

/* A new session gets the long-lived set; once the daemon has applied it
 * (its clock reached the set's last event) the churn is sent and timed,
 * under the query load of kind load (LOAD_NONE: none), up to the load
 * summary. The session is dropped after, unless keep. */
/* The metrics50 load: the listener's port, and what each round's scrapers
 * did (their CPU and the whole daemon's over the same time apart). */
#define SCRAPERS 50
#define SCRAPE_EVERY_MS 100
static int http_port;
static volatile int scrape_stop;
static struct scrape_stats scrape_last;

static void *scrape_thread(void *arg)
{
    (void)arg;
    if (scrape_run(http_port, "/metrics", SCRAPERS, SCRAPE_EVERY_MS, 0, &scrape_stop,
                   &scrape_last) != 0)
        nfailed[LOAD_M50]++;
    return NULL;
}

/* utime + stime of the whole process pid, in seconds (proc(5) fields 14, 15). */
static double proc_cpu_s(pid_t pid)
{
    char p[64], b[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(b, 1, sizeof(b) - 1, f) : 0;
    if (f)
        fclose(f);
    b[n] = '\0';
    char *q = strrchr(b, ')');
    unsigned long long ut, st;
    if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static pthread_t load_start(int load)
{
    pthread_t th;
    if (load == LOAD_M50) {
        scrape_stop = 0;
        pthread_create(&th, NULL, scrape_thread, NULL);
        usleep(200000); /* every client has asked once: the churn runs under all 50 */
        return th;
    }
    pthread_create(&th, NULL, query_thread, NULL);
    while (!first_sent)
        usleep(100);
    return th;
}

static struct drun daemon_round(const char *name, const struct buf *pre, uint64_t pre_end,
                                const struct buf *churn, int load, pid_t pid, int keep)
{
    static char line[1 << 16];
    struct drun r;
    double w0 = now_s();
    int fd = connect_to(sock_path);
    char req[160];
    snprintf(req, sizeof(req), "{\"v\":1,\"id\":1,\"cmd\":\"load\",\"args\":{\"name\":\"%s\"}}\n",
             name);
    if (fd < 0 || send_all(fd, req, strlen(req)) != 0 || read_line(fd, line, sizeof(line)) < 0 ||
        !strstr(line, "\"ok\":true")) {
        fprintf(stderr, "load refused: %s\n", line);
        exit(1);
    }
    send_chunks(fd, pre->p, pre->len);
    while (session_now(name) < pre_end)
        usleep(2000);
    snprintf(query_session, sizeof(query_session), "%s", name);
    pthread_t th = 0;
    int queries = load != LOAD_NONE;
    querying = queries;
    load_now = load;
    first_sent = 0;
    if (queries)
        th = load_start(load);
    double cpu0 = proc_cpu_s(pid);
    long f0 = minflt(pid);
    struct sched_ns s0 = schedstat(pid, pid); /* the loop thread */
    double t0 = now_s();
    if (getenv("HT_BENCH_TRACE"))
        fprintf(stderr, "churn %s from %.6f\n", name, t0);
    send_chunks(fd, churn->p, churn->len);
    send_all(fd, "0\n", 2);
    read_line(fd, line, sizeof(line)); /* the load summary: everything is applied */
    double t1 = now_s();
    r.churn_secs = t1 - t0;
    r.whole_secs = t1 - w0;
    r.loop = split_of(s0, schedstat(pid, pid), r.churn_secs);
    r.faults = minflt(pid) - f0;
    r.cpu_s = proc_cpu_s(pid) - cpu0;
    if (getenv("HT_BENCH_TRACE"))
        fprintf(stderr, "churn %s to %.6f\n", name, t1);
    querying = 0;
    scrape_stop = 1;
    if (queries)
        pthread_join(th, NULL);
    if (load == LOAD_M50)
        r.scrape = scrape_last;
    close(fd);
    /* Issue 10: no event lost by any source because of a query. */
    r.lost = status_number(name, "quality", "lost");
    if (!keep)
        session_drop(name);
    return r;
}

/* The engine alone: the same long-lived set (timed apart), then the churn. */
static double engine_round(const struct ht_event *pre, size_t npre, const struct ht_event *churn,
                           size_t nchurn, long *faults, struct split *sp, double *whole_secs)
{
    struct engine_limits lim;
    engine_limits_default(&lim); /* the daemon's defaults: the same caps */
    struct engine e;
    double w0 = now_s();
    if (engine_init(&e, &lim) != 0)
        exit(1);
    /* The feed's batches for a stream that defines stacks as it goes. */
    for (size_t off = 0; off < npre; off += 256)
        engine_apply_batch(&e, pre + off, npre - off < 256 ? npre - off : 256);
    long f0 = minflt(getpid());
    pid_t tid = (pid_t)syscall(SYS_gettid);
    struct sched_ns s0 = schedstat(getpid(), tid);
    double t0 = now_s();
    /* The engine benchmark's batches (bench-engine.c BATCH). */
    for (size_t off = 0; off < nchurn; off += ENGINE_BATCH)
        engine_apply_batch(&e, churn + off,
                           nchurn - off < ENGINE_BATCH ? nchurn - off : ENGINE_BATCH);
    double t1 = now_s(), secs = t1 - t0;
    *whole_secs = t1 - w0;
    *sp = split_of(s0, schedstat(getpid(), tid), secs);
    *faults = minflt(getpid()) - f0;
    engine_close(&e);
    return secs;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static void minmax(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int k = 1; k < n; k++) {
        *lo = v[k] < *lo ? v[k] : *lo;
        *hi = v[k] > *hi ? v[k] : *hi;
    }
}

/* p-th percentile (0..100) of n sorted values, or -1. */
static double pct(const double *v, int n, int p)
{
    if (n == 0)
        return -1;
    int i = (n * p) / 100;
    return v[i < n ? i : n - 1];
}

static void text_of(const struct engine *e, const struct ht_event *evs, size_t n, struct buf *b)
{
    char line[16384];
    for (size_t i = 0; i < n; i++)
        buf_put(b, line, htev_format(&evs[i], &e->si, line, sizeof(line)));
}

/* The same events as the raw ETW stream the Windows sessions would deliver
 * (etw-raw.h; what `record --raw` writes and `load` replays anywhere): heap
 * Alloc/Free records, a moving realloc as its Free and Alloc, commits as
 * VirtualAlloc/VirtualFree, each alloc and commit followed by its StackWalk
 * (the stack's frames as user addresses), 10 MHz QPC. */
#define ETW_PID 4242
static void etw_put(struct buf *b, const struct etw_guid *g, uint8_t op, uint32_t pid, uint32_t tid,
                    uint64_t ts, const uint8_t *pl, uint32_t len)
{
    static char line[ETW_RAW_LINE_MAX];
    struct etw_record r = {.provider = *g, .opcode = op, .version = 2,
                           .flags = ETW_HDR_FLAG_64_BIT_HEADER, .pid = pid, .tid = tid,
                           .ts = ts, .payload = pl, .len = len};
    buf_put(b, line, etw_raw_format(&r, line, sizeof(line)));
}

static size_t le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return n;
}

static void etw_of(const struct engine *e, const struct ht_event *evs, size_t n, struct buf *b,
                   int header)
{
    static char line[1024];
    const uint64_t freq = 10000000, start = 1000;
    if (header)
        buf_put(b, line, etw_raw_header(freq, start, ETW_PID, "bench.exe", line, sizeof(line)));
    static uint8_t pl[16 + 8 * 512];
    for (size_t i = 0; i < n; i++) {
        const struct ht_event *ev = &evs[i];
        uint64_t ts = start + ev->t / 100;
        uint32_t tid = ev->tid ? ev->tid : 1;
        size_t k = 0;
        int stack = 0;
        switch (ev->kind) {
        case HT_EV_REALLOC:
            k = le(pl, ev->heap, 8);
            k += le(pl + k, ev->old_addr, 8);
            k += le(pl + k, 2, 4);
            etw_put(b, &etw_guid_heap, 36, ETW_PID, tid, ts, pl, (uint32_t)k);
            /* the new block: */
            __attribute__((fallthrough));
        case HT_EV_ALLOC:
            k = le(pl, ev->heap, 8);
            k += le(pl + k, ev->size, 8);
            k += le(pl + k, ev->addr, 8);
            k += le(pl + k, 2, 4);
            etw_put(b, &etw_guid_heap, 33, ETW_PID, tid, ts, pl, (uint32_t)k);
            stack = 1;
            break;
        case HT_EV_FREE:
            k = le(pl, ev->heap, 8);
            k += le(pl + k, ev->addr, 8);
            k += le(pl + k, 2, 4);
            etw_put(b, &etw_guid_heap, 36, ETW_PID, tid, ts, pl, (uint32_t)k);
            break;
        case HT_EV_COMMIT:
        case HT_EV_DECOMMIT:
        case HT_EV_RELEASE:
            k = le(pl, ev->addr, 8);
            k += le(pl + k, ev->size, 8);
            k += le(pl + k, ETW_PID, 4);
            k += le(pl + k,
                    ev->kind == HT_EV_COMMIT     ? ETW_MEM_COMMIT | ETW_MEM_RESERVE
                    : ev->kind == HT_EV_DECOMMIT ? ETW_MEM_DECOMMIT
                                                 : ETW_MEM_RELEASE,
                    4);
            etw_put(b, &etw_guid_pagefault, ev->kind == HT_EV_COMMIT ? 98 : 99, 0xFFFFFFFFu,
                    0xFFFFFFFFu, ts, pl, (uint32_t)k);
            stack = ev->kind == HT_EV_COMMIT;
            break;
        default:
            continue;
        }
        unsigned depth = 0;
        const uint64_t *fr = stack ? stack_intern_frames(&e->si, ev->stack, &depth) : NULL;
        if (!fr || !depth)
            continue;
        k = le(pl, ts, 8);
        k += le(pl + k, ETW_PID, 4);
        k += le(pl + k, tid, 4);
        for (unsigned d = 0; d < depth && d < 512; d++)
            k += le(pl + k, (fr[d] & 0x00007FFFFFFFFFFFull) | 0x10000, 8);
        etw_put(b, &etw_guid_stackwalk, 32, 0xFFFFFFFFu, 0xFFFFFFFFu, ts + 1, pl, (uint32_t)k);
    }
}

/* A free loopback port: bound to 0, then released for the daemon. */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                       getsockname(fd, (struct sockaddr *)&sa, &sl) == 0
                   ? ntohs(sa.sin_port)
                   : -1;
    if (fd >= 0)
        close(fd);
    return port;
}

/* metrics50: the daemon's configuration (--daemon-config's, or none) with
 * metrics_listen on a free loopback port, written as dir/m50.json. */
static int m50_config_write(const char *dir, const char *base, char *path, size_t cap)
{
    cJSON *cfg = NULL;
    if (base) {
        FILE *f = fopen(base, "r");
        static char text[1 << 16];
        size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
        if (f)
            fclose(f);
        text[n] = '\0';
        cfg = cJSON_Parse(text);
    } else {
        cfg = cJSON_CreateObject();
    }
    char addr[32];
    http_port = free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", http_port);
    snprintf(path, cap, "%s/m50.json", dir);
    char *out = cfg && http_port > 0 && cJSON_AddStringToObject(cfg, "metrics_listen", addr)
                    ? cJSON_PrintUnformatted(cfg)
                    : NULL;
    FILE *f = out ? fopen(path, "w") : NULL;
    int rc = f && fputs(out, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc)
        fprintf(stderr, "metrics50: cannot write %s (--daemon-config %s)\n", path,
                base ? base : "none");
    free(out);
    cJSON_Delete(cfg);
    return rc;
}

/* metrics50 over the rounds: the scrapes, and the CPU seconds per churn
 * second of the scrapers and of the daemon (under metrics50 and under none). */
struct m50_sum {
    uint64_t ok, failed, late, connects;
    double scrapers_cpu, secs;                             /* the scrapers' thread, its wall time */
    double daemon_cpu, daemon_cpu_none, churn, churn_none; /* the daemon, the churns' seconds */
    double max_ms;
};

static void m50_round(const struct drun *none, const struct drun *m, struct m50_sum *s)
{
    const struct scrape_stats *st = &m->scrape;
    fprintf(stderr,
            "  metrics50: %llu answered 200, %llu failed, %llu late, %llu connections, "
            "longest %.1f ms; CPU per churn second: scrapers %.3f, daemon %.3f (none: %.3f)\n",
            (unsigned long long)st->ok, (unsigned long long)st->failed,
            (unsigned long long)st->late, (unsigned long long)st->connects, st->max_ms,
            st->cpu_s / st->wall_s, m->cpu_s / m->churn_secs, none->cpu_s / none->churn_secs);
    s->ok += st->ok;
    s->failed += st->failed;
    s->late += st->late;
    s->connects += st->connects;
    s->max_ms = st->max_ms > s->max_ms ? st->max_ms : s->max_ms;
    s->scrapers_cpu += st->cpu_s;
    s->secs += st->wall_s;
    s->daemon_cpu += m->cpu_s;
    s->churn += m->churn_secs;
    s->daemon_cpu_none += none->cpu_s;
    s->churn_none += none->churn_secs;
    if (st->failed || !st->ok)
        nfailed[LOAD_M50]++;
}

/* --loads: a comma list of kinds; none is always run (the ratios' base). */
static int loads_parse(const char *text, int *on)
{
    for (int k = 0; k < NLOADS; k++)
        on[k] = k == LOAD_NONE;
    while (*text) {
        size_t len = strcspn(text, ",");
        int k = 0;
        while (k < NLOADS &&
               !(strlen(load_kinds[k].name) == len && strncmp(load_kinds[k].name, text, len) == 0))
            k++;
        if (k == NLOADS)
            return -1;
        on[k] = 1;
        text += len + (text[len] == ',');
    }
    return 0;
}

/*
 * The user queries on a fresh daemon, before any round: a session loaded
 * with the long-lived set and the churn, no query load; the daemon's RSS
 * before and after; then each query kind once, cold (the first of its kind
 * on the session; the daemon warmed its cull cache during the load, as it
 * always does), then each repeated warm_runs times, as the client sees them.
 */
/* The session's memory (status --json "memory"), split as issue 10 counts
 * it: the rings apart at their configured size, everything else is what
 * grows with live allocations (and with stacks: the interner is counted
 * too). */
enum { RING_HEAP, RING_COMMIT, RING_REALLOC, RING_TIMELINE, NRINGS };
static const struct ring_kind {
    const char *name;   /* in status --json "rings" */
    size_t record_size; /* bytes a record takes in the engine */
} ring_kinds[NRINGS] = {
    {"heap_lifetimes", sizeof(struct life_rec)},
    {"commit_lifetimes", sizeof(struct life_rec)},
    {"realloc_events", sizeof(struct realloc_rec)},
    {"timeline", sizeof(struct tl_sample)},
};

struct mem_split {
    double by[MEM_KINDS]; /* bytes by structure, -1 unknown */
    double ring_len[NRINGS], ring_cap[NRINGS];
    double stacks; /* distinct stacks */
    int ok;
};

struct user_phase {
    struct qtimes t[NLOADS];
    double rss_before, rss_loaded, live;
    struct mem_split mem;
    int failed;
};

static void mem_split_read(const char *name, struct mem_split *m)
{
    char req[128];
    static char line[1 << 20];
    memset(m, 0, sizeof(*m));
    snprintf(req, sizeof(req),
             "{\"v\":1,\"id\":4,\"cmd\":\"status\",\"args\":{\"session\":\"%s\"}}\n", name);
    if (request(sock_path, req, line, sizeof(line)) != 0)
        return;
    cJSON *root = cJSON_Parse(line);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(d, "memory"), "by_structure");
    const cJSON *rings = cJSON_GetObjectItemCaseSensitive(d, "rings");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(d, "memory"), "distinct_stacks");
    m->ok = cJSON_IsObject(by) && cJSON_IsObject(rings) && cJSON_IsNumber(ns);
    m->stacks = cJSON_IsNumber(ns) ? ns->valuedouble : -1;
    for (int k = 0; k < MEM_KINDS; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(by, mem_kind_names[k]);
        m->by[k] = cJSON_IsNumber(v) ? v->valuedouble : -1;
    }
    for (int k = 0; k < NRINGS; k++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(rings, ring_kinds[k].name);
        const cJSON *len = cJSON_GetObjectItemCaseSensitive(r, "len");
        const cJSON *cap = cJSON_GetObjectItemCaseSensitive(r, "cap");
        m->ring_len[k] = cJSON_IsNumber(len) ? len->valuedouble : -1;
        m->ring_cap[k] = cJSON_IsNumber(cap) ? cap->valuedouble : -1;
        m->ok &= cJSON_IsNumber(len) && cJSON_IsNumber(cap);
    }
    cJSON_Delete(root);
}

/* Bytes of everything but the rings (MEM_lifetimes holds the lifetime and
 * realloc rings, MEM_timeline the timeline). */
static double mem_nonring(const struct mem_split *m)
{
    double sum = 0;
    for (int k = 0; k < MEM_KINDS; k++)
        if (k != MEM_lifetimes && k != MEM_timeline && m->by[k] > 0)
            sum += m->by[k];
    return sum;
}

/* Structures that grow with the distinct stacks (and their names), not with
 * the live allocations: one entry (or a query's scratch row) per stack. */
static int per_stack_kind(int k)
{
    return k == MEM_aggregates || k == MEM_stacks || k == MEM_strings || k == MEM_query_scratch ||
           k == MEM_decoder_stacks || k == MEM_decoder_strings;
}

static double mem_per_stack(const struct mem_split *m)
{
    double sum = 0;
    for (int k = 0; k < MEM_KINDS; k++)
        if (per_stack_kind(k) && m->by[k] > 0)
            sum += m->by[k];
    return sum;
}

/* "memory_per_live_alloc": every structure per live allocation; the total
 * without the rings, split into what grows with live allocations (issue
 * 10: at most 64 bytes each) and what grows with the stacks (also per stack);
 * and the rings apart: now and at their configured size. */
static void mem_split_print(FILE *out, const struct mem_split *m, double live)
{
    fprintf(out, ",\"memory_per_live_alloc\":{\"ok\":%s,\"live_allocs\":%.0f",
            m->ok ? "true" : "false", live);
    if (!m->ok || live <= 0) {
        fprintf(out, "}");
        return;
    }
    fprintf(out, ",\"by_structure\":{");
    for (int k = 0, first = 1; k < MEM_KINDS; k++) {
        if (k == MEM_lifetimes || k == MEM_timeline || m->by[k] <= 0)
            continue;
        fprintf(out, "%s\"%s\":%.1f", first ? "" : ",", mem_kind_names[k], m->by[k] / live);
        first = 0;
    }
    double all = mem_nonring(m), st = mem_per_stack(m), grows = (all - st) / live;
    fprintf(out,
            "},\"without_rings\":%.1f,\"grows_with_live\":%.1f,\"target\":64,\"pass\":%s,"
            "\"grows_with_stacks\":{\"stacks\":%.0f,\"per_live\":%.1f,\"per_stack\":%.1f},"
            "\"rings\":{",
            all / live, grows, grows <= 64 ? "true" : "false", m->stacks, st / live,
            m->stacks > 0 ? st / m->stacks : -1);
    double configured = 0;
    for (int k = 0; k < NRINGS; k++) {
        double bytes = m->ring_cap[k] * (double)ring_kinds[k].record_size;
        configured += bytes;
        fprintf(
            out,
            "%s\"%s\":{\"len\":%.0f,\"cap\":%.0f,\"record_bytes\":%zu,\"configured_bytes\":%.0f}",
            k ? "," : "", ring_kinds[k].name, m->ring_len[k], m->ring_cap[k],
            ring_kinds[k].record_size, bytes);
    }
    fprintf(out, ",\"configured_bytes\":%.0f,\"bytes_now\":%.0f}}", configured,
            m->by[MEM_lifetimes] + m->by[MEM_timeline]);
}

/* One user query: its latency as the client sees it, and the CPU time the
 * daemon's loop thread spent meanwhile (nothing else runs on it then). The
 * kernel adds a thread's run time when it stops running: the loop is given
 * a millisecond to go back to waiting before it is read. 0 or 1 (failed). */
static int user_query(struct conn *c, int kind, int id, pid_t pid, double *ms, double *cpu_ms)
{
    struct sched_ns s0 = schedstat(pid, pid);
    int rc = query_once(c, kind, "queries", id, ms, NULL);
    usleep(1000);
    *cpu_ms = (double)(schedstat(pid, pid).run - s0.run) / 1e6;
    return rc != 0;
}

/* Issue 10's targets, each next to its figure: in the JSON line
 * ("issue10_targets") and as a table on stderr. */
#define TARGET_AIFO_COLD_MS 10.0
#define TARGET_WINDOW_COLD_MS 30.0
#define TARGET_LOAD_RATIO 0.9
#define TARGET_BYTES_PER_LIVE 64.0

struct target_row {
    char figure[48];
    double measured;
    char target[16];
    int pass;
};

static void targets_print(const struct user_phase *up, const int *on,
                          double load_ratio[][MAX_ROUNDS], int rounds, const double *lost,
                          const int *lost_unknown)
{
    struct target_row rows[18];
    int n = 0;
    static const int cold_kinds[] = {LOAD_AIFO, LOAD_W5, LOAD_W1};
    for (unsigned i = 0; i < sizeof(cold_kinds) / sizeof(cold_kinds[0]); i++) {
        int k = cold_kinds[i];
        double lim = k == LOAD_AIFO ? TARGET_AIFO_COLD_MS : TARGET_WINDOW_COLD_MS;
        struct target_row *r = &rows[n++];
        snprintf(r->figure, sizeof(r->figure), "%s cold ms (1 query)", load_kinds[k].name);
        r->measured = up->t[k].cold;
        snprintf(r->target, sizeof(r->target), "<= %.0f", lim);
        r->pass = up->t[k].cold <= lim;
    }
    for (int k = LOAD_TOP50; k < NLOADS; k++) {
        if (!on[k])
            continue;
        double v[MAX_ROUNDS];
        memcpy(v, load_ratio[k], sizeof(double) * (size_t)rounds);
        struct target_row *r = &rows[n++];
        snprintf(r->figure, sizeof(r->figure), "ingest %s / none (median)", load_kinds[k].name);
        r->measured = median(v, rounds);
        snprintf(r->target, sizeof(r->target), ">= %.1f", TARGET_LOAD_RATIO);
        r->pass = r->measured >= TARGET_LOAD_RATIO;
    }
    for (int k = 0; k < NLOADS; k++) {
        if (!on[k])
            continue;
        struct target_row *r = &rows[n++];
        snprintf(r->figure, sizeof(r->figure), "lost under %s (all rounds)", load_kinds[k].name);
        r->measured = lost[k];
        snprintf(r->target, sizeof(r->target), "= 0");
        r->pass = lost[k] == 0 && lost_unknown[k] == 0;
    }
    if (up->mem.ok && up->live > 0) {
        struct target_row *r = &rows[n++];
        snprintf(r->figure, sizeof(r->figure), "bytes per live alloc (per-live kinds)");
        r->measured = (mem_nonring(&up->mem) - mem_per_stack(&up->mem)) / up->live;
        snprintf(r->target, sizeof(r->target), "<= %.0f", TARGET_BYTES_PER_LIVE);
        r->pass = r->measured <= TARGET_BYTES_PER_LIVE;
        /* Not judged: the per-stack structures at this scale's live:stacks. */
        r = &rows[n++];
        snprintf(r->figure, sizeof(r->figure), "same + per-stack kinds, rings apart");
        r->measured = mem_nonring(&up->mem) / up->live;
        snprintf(r->target, sizeof(r->target), "(info)");
        r->pass = -1;
    }
    printf(",\"issue10_targets\":[");
    fprintf(stderr, "%-40s %12s %8s  %s\n", "issue 10 figure", "measured", "target", "");
    for (int i = 0; i < n; i++) {
        printf("%s{\"figure\":\"%s\",\"measured\":%.3f,\"target\":\"%s\",\"pass\":%s}",
               i ? "," : "", rows[i].figure, rows[i].measured, rows[i].target,
               rows[i].pass < 0 ? "null" : rows[i].pass ? "true" : "false");
        fprintf(stderr, "%-40s %12.3f %8s  %s\n", rows[i].figure, rows[i].measured, rows[i].target,
                rows[i].pass < 0 ? "" : rows[i].pass ? "ok" : "MISSED");
    }
    printf("]");
}

static void user_queries(const struct buf *pre, uint64_t pre_end, const struct buf *churn,
                         pid_t pid, int warm_runs, struct user_phase *u)
{
    memset(u, 0, sizeof(*u));
    u->rss_before = rss_bytes(pid);
    daemon_round("queries", pre, pre_end, churn, LOAD_NONE, pid, 1);
    u->rss_loaded = rss_bytes(pid);
    u->live = status_number("queries", "heap", "outstanding_count");
    mem_split_read("queries", &u->mem);
    struct conn c;
    int id = 100;
    if (conn_open(&c, sock_path) != 0) {
        query_failed("user queries", "cannot connect", NULL);
        u->failed++;
    }
    for (int k = LOAD_TOP50; k < NQUERY_KINDS && !u->failed; k++) {
        u->t[k].has_cpu = 1;
        u->failed += user_query(&c, k, ++id, pid, &u->t[k].cold, &u->t[k].cold_cpu);
    }
    for (int k = LOAD_TOP50; k < NQUERY_KINDS && !u->failed; k++)
        for (u->t[k].nwarm = 0; u->t[k].nwarm < warm_runs && !u->failed; u->t[k].nwarm++)
            u->failed += user_query(&c, k, ++id, pid, &u->t[k].warm[u->t[k].nwarm],
                                    &u->t[k].warm_cpu[u->t[k].nwarm]);
    conn_close(&c);
    session_drop("queries");
}

int main(int argc, char **argv)
{
    const char *daemon = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--daemon"))
            daemon = argv[i + 1];
    if (!daemon) {
        fprintf(stderr,
                "usage: ht-bench-daemon --daemon PATH [--events N] [--live N] "
                "[--stacks N] [--rounds N] [--loads none,top50,aifo,window_5s,window_1s,metrics50] "
                "[--stream-rate EVENTS_PER_S] [--query-interval-ms N] [--warm-runs N] "
                "[--daemon-config FILE]\n");
        return 2;
    }
    uint64_t nevents = arg_u64(argc, argv, "--events", 4000000);
    uint64_t nlive = arg_u64(argc, argv, "--live", 1000000);
    uint64_t nstacks = arg_u64(argc, argv, "--stacks", 100000);
    int rounds = (int)arg_u64(argc, argv, "--rounds", 15);
    uint64_t rate = arg_u64(argc, argv, "--stream-rate", WORKLOAD_STREAM_RATE);
    int warm_runs = (int)arg_u64(argc, argv, "--warm-runs", 9);
    query_interval_ms = (int)arg_u64(argc, argv, "--query-interval-ms", 100);
    const char *daemon_config = arg_str(argc, argv, "--daemon-config", NULL);
    int on[NLOADS];
    if (rounds < 1 || rounds > MAX_ROUNDS || nstacks == 0 || nlive == 0 || warm_runs < 1 ||
        warm_runs > WARM_RUNS_MAX || query_interval_ms < 1 ||
        loads_parse(arg_str(argc, argv, "--loads", "none,top50,aifo,window_5s,window_1s"), on)) {
        fprintf(stderr,
                "--rounds must be 1..%d, --warm-runs 1..%d, --stacks, --live and "
                "--query-interval-ms at least 1, --loads a list of none, top50, aifo, "
                "window_5s, window_1s, metrics50\n",
                MAX_ROUNDS, WARM_RUNS_MAX);
        return 2;
    }
    /* Today's load, the one the engine is compared with; none without queries. */
    int queries = !getenv("HT_BENCH_NO_QUERIES");
    if (!queries)
        for (int k = LOAD_TOP50; k < NLOADS; k++)
            on[k] = 0;
    int ref = queries ? LOAD_TOP50 : LOAD_NONE;
    on[ref] = 1;
    signal(SIGPIPE, SIG_IGN);

    /* The events, decoded, and their binary stream (pre and churn apart). */
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine names; /* holds the stacks the streams define */
    struct workload w;
    if (engine_init(&names, &lim) != 0 || workload_init(&w, &names.si, nlive, nstacks, 0) != 0)
        return 1;
    workload_set_rate(&w, rate);
    struct ht_event *pre = malloc((nlive + 1) * sizeof(*pre));
    struct ht_event *churn = malloc((nevents + 2) * sizeof(*churn));
    size_t npre = 0, nchurn = 0;
    for (size_t n; (n = workload_preload(&w, pre + npre, nlive + 1 - npre)) > 0;)
        npre += n;
    while (nchurn < nevents)
        nchurn += workload_churn(&w, churn + nchurn, nevents + 2 - nchurn, nevents - nchurn);
    uint64_t pre_end = npre ? pre[npre - 1].t : 0;
    struct buf bin_pre = {0}, bin_churn = {0};
    struct htevb_writer bw;
    htevb_writer_init(&bw, &names.si, bin_out, &bin_pre);
    htevb_write_process(&bw, 0, 1, "svc");
    for (size_t i = 0; i < npre; i++)
        htevb_write_event(&bw, &pre[i]);
    bw.arg = &bin_churn; /* the same writer state: stacks defined once */
    for (size_t i = 0; i < nchurn; i++)
        htevb_write_event(&bw, &churn[i]);
    htevb_writer_close(&bw);
    const char *dump = getenv("HT_BENCH_DUMP");
    if (dump) {
        /* The stream the daemon is fed, as a file (its size per event: README). */
        FILE *df = fopen(dump, "wb");
        if (!df || fwrite(bin_pre.p, 1, bin_pre.len, df) != bin_pre.len ||
            fwrite(bin_churn.p, 1, bin_churn.len, df) != bin_churn.len || fclose(df) != 0) {
            fprintf(stderr, "cannot write %s\n", dump);
            return 1;
        }
        printf("{\"dumped\":\"%s\",\"events\":%zu}\n", dump, npre + nchurn + 1);
        return 0;
    }

    /* The daemon, on a private endpoint. */
    char dir[] = "/tmp/ht-bench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    static char m50_config[300];
    if (on[LOAD_M50]) {
        if (m50_config_write(dir, daemon_config, m50_config, sizeof(m50_config)) != 0)
            return 1;
        daemon_config = m50_config;
    }
    static char path[256];
    snprintf(path, sizeof(path), "%s/ht.sock", dir);
    sock_path = path;
    pid_t pid = fork();
    if (pid == 0) {
        if (daemon_config)
            execl(daemon, daemon, "--foreground", "--pipe", path, "--log-level", "warn", "--config",
                  daemon_config, (char *)NULL);
        else
            execl(daemon, daemon, "--foreground", "--pipe", path, "--log-level", "warn",
                  (char *)NULL);
        _exit(127);
    }
    int fd = -1;
    for (int i = 0; i < 200 && (fd = connect_to(path)) < 0; i++)
        usleep(10000);
    if (fd < 0) {
        fprintf(stderr, "daemon did not start\n");
        return 1;
    }
    close(fd);

    static struct user_phase up;
    user_queries(&bin_pre, pre_end, &bin_churn, pid, warm_runs, &up);

    /* Each round runs the engine alone and the daemon under each load, in
     * an order that rotates from round to round: a load is compared with
     * none, and the daemon with the engine, within the same round. */
    int runs[1 + NLOADS], nruns = 0;
    runs[nruns++] = -1; /* the engine */
    for (int k = 0; k < NLOADS; k++)
        if (on[k])
            runs[nruns++] = k;
    double eng_rate[MAX_ROUNDS], eng_whole[MAX_ROUNDS], ratio[MAX_ROUNDS], whole_ratio[MAX_ROUNDS];
    static double dmn_rate[NLOADS][MAX_ROUNDS], dmn_whole[NLOADS][MAX_ROUNDS],
        load_ratio[NLOADS][MAX_ROUNDS];
    double dmn_lost[NLOADS] = {0};
    int lost_unknown[NLOADS] = {0};
    long eng_faults[MAX_ROUNDS], dmn_faults[MAX_ROUNDS];
    struct split eng_sp[MAX_ROUNDS];
    int under = 0; /* rounds under 0.80 */
    struct m50_sum m50 = {0};
    for (int k = 0; k < rounds; k++) {
        struct drun dr[NLOADS];
        double te = 0, tew = 0;
        for (int i = 0; i < nruns; i++) {
            int run = runs[(i + k) % nruns];
            char name[32];
            if (run < 0) {
                te = engine_round(pre, npre, churn, nchurn, &eng_faults[k], &eng_sp[k], &tew);
                continue;
            }
            snprintf(name, sizeof(name), "round%d-%s", k, load_kinds[run].name);
            dr[run] = daemon_round(name, &bin_pre, pre_end, &bin_churn, run, pid, 0);
            dmn_rate[run][k] = nchurn / dr[run].churn_secs;
            dmn_whole[run][k] = (npre + nchurn) / dr[run].whole_secs;
            if (dr[run].lost < 0)
                lost_unknown[run]++;
            else
                dmn_lost[run] += dr[run].lost;
        }
        for (int i = 1; i < nruns; i++)
            load_ratio[runs[i]][k] = dr[LOAD_NONE].churn_secs / dr[runs[i]].churn_secs;
        eng_rate[k] = nchurn / te;
        eng_whole[k] = (npre + nchurn) / tew;
        ratio[k] = te / dr[ref].churn_secs;
        whole_ratio[k] = tew / dr[LOAD_NONE].whole_secs;
        dmn_faults[k] = dr[ref].faults;
        under += ratio[k] < 0.80;
        /* Of each timed window: on a CPU, waiting for one (preempted), idle. */
        fprintf(stderr,
                "round %d: engine %.2f M/s (cpu %.0f%%, waited %.0f%%), daemon %.2f M/s (loop: "
                "cpu %.0f%%, waited %.0f%%, idle %.0f%%), ratio %.3f;",
                k, eng_rate[k] / 1e6, eng_sp[k].run * 100, eng_sp[k].wait * 100,
                dmn_rate[ref][k] / 1e6, dr[ref].loop.run * 100, dr[ref].loop.wait * 100,
                idle_pct(dr[ref].loop), ratio[k]);
        for (int i = 1; i < nruns; i++)
            fprintf(stderr, " %s %.2f M/s (%.3f)", load_kinds[runs[i]].name,
                    dmn_rate[runs[i]][k] / 1e6, load_ratio[runs[i]][k]);
        fprintf(stderr, "\n");
        if (on[LOAD_M50])
            m50_round(&dr[LOAD_NONE], &dr[LOAD_M50], &m50);
    }
    double text_ratio = -1, text_rate = -1;
    if (getenv("HT_BENCH_TEXT")) {
        struct buf txt_pre = {0}, txt_churn = {0};
        text_of(&names, pre, npre, &txt_pre);
        text_of(&names, churn, nchurn, &txt_churn);
        long ef;
        struct split es;
        double tw;
        double te = engine_round(pre, npre, churn, nchurn, &ef, &es, &tw);
        struct drun dr = daemon_round("text", &txt_pre, pre_end, &txt_churn, ref, pid, 0);
        text_ratio = te / dr.churn_secs;
        text_rate = nchurn / dr.churn_secs;
        free(txt_pre.p);
        free(txt_churn.p);
    }
    /* One more round as a raw ETW stream (at most 500,000 churn events: the
     * text is ~10x the binary's size): the decoder, the stack correlator
     * and cJSON per line, against the engine on the same events. */
    double etw_ratio = -1, etw_rate = -1;
    if (getenv("HT_BENCH_ETW")) {
        size_t ne = nchurn < 500000 ? nchurn : 500000;
        struct buf etw_pre = {0}, etw_churn = {0};
        etw_of(&names, pre, npre, &etw_pre, 1);
        etw_of(&names, churn, ne, &etw_churn, 0);
        long ef;
        struct split es;
        double tw;
        double te = engine_round(pre, npre, churn, ne, &ef, &es, &tw);
        struct drun dr = daemon_round("etw", &etw_pre, pre_end, &etw_churn, ref, pid, 0);
        etw_ratio = te / dr.churn_secs;
        etw_rate = ne / dr.churn_secs;
        fprintf(stderr, "raw ETW: %zu churn events in %zu bytes of records, %.2f M events/s (%.3f of "
                        "the engine)\n",
                ne, etw_churn.len, etw_rate / 1e6, etw_ratio);
        free(etw_pre.p);
        free(etw_churn.p);
    }
    static char line[1 << 16];
    request(path, "{\"v\":1,\"id\":9,\"cmd\":\"shutdown\"}\n", line, sizeof(line));
    int status;
    waitpid(pid, &status, 0);
    unlink(path);
    rmdir(dir);

    for (int k = 0; k < NLOADS; k++)
        qsort(lat[k], (size_t)nlat[k], sizeof(double), cmp_double);
    double rmin, rmax;
    minmax(ratio, rounds, &rmin, &rmax);
    double ef_sum = 0, df_sum = 0;
    for (int k = 0; k < rounds; k++) {
        ef_sum += (double)eng_faults[k];
        df_sum += (double)dmn_faults[k];
    }
    int failed = up.failed;
    for (int k = 0; k < NLOADS; k++)
        failed += nfailed[k];
    for (int i = 1; i < nruns; i++)
        if (runs[i] != LOAD_NONE && runs[i] != LOAD_M50 && nlat[runs[i]] < rounds) {
            query_failed(load_kinds[runs[i]].name, "fewer answers than rounds", NULL);
            failed++;
        }
    printf("{\"rounds\":%d,\"live\":%llu,\"stacks\":%llu,\"churn_events\":%zu,\"binary_bytes\":%zu,"
           "\"queries\":%s,\"engine_events_per_s\":%.0f,\"daemon_events_per_s\":%.0f,"
           "\"daemon_vs_engine\":%.3f,\"daemon_vs_engine_min\":%.3f,\"daemon_vs_engine_max\":%.3f,"
           "\"rounds_under_0_80\":%d,"
           "\"query_ms_p50\":%.2f,\"query_ms_p99\":%.2f,\"query_ms_max\":%.2f,\"query_count\":%d,"
           "\"query_failed\":%d,\"engine_faults_per_round\":%.0f,\"daemon_faults_per_round\":%.0f,"
           "\"text_daemon_events_per_s\":%.0f,\"text_daemon_vs_engine\":%.3f,"
           "\"etw_daemon_events_per_s\":%.0f,\"etw_daemon_vs_engine\":%.3f,\"daemon_exit\":%d",
           rounds, (unsigned long long)nlive, (unsigned long long)nstacks, nchurn,
           bin_pre.len + bin_churn.len, queries ? "true" : "false", median(eng_rate, rounds),
           median(dmn_rate[ref], rounds), median(ratio, rounds), rmin, rmax, under,
           pct(lat[LOAD_TOP50], nlat[LOAD_TOP50], 50), pct(lat[LOAD_TOP50], nlat[LOAD_TOP50], 99),
           pct(lat[LOAD_TOP50], nlat[LOAD_TOP50], 100), nlat[LOAD_TOP50], nfailed[LOAD_TOP50],
           ef_sum / rounds, df_sum / rounds, text_rate, text_ratio, etw_rate, etw_ratio,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    minmax(whole_ratio, rounds, &rmin, &rmax);
    printf(",\"preload_events\":%zu,\"stream_rate\":%llu,\"query_interval_ms\":%d,"
           "\"engine_events_per_s_whole_run\":%.0f,\"daemon_events_per_s_whole_run\":%.0f,"
           "\"daemon_vs_engine_whole_run\":%.3f,\"daemon_vs_engine_whole_run_min\":%.3f,"
           "\"daemon_vs_engine_whole_run_max\":%.3f,\"live_allocs\":%.0f,"
           "\"daemon_rss_bytes_before\":%.0f,\"daemon_rss_bytes\":%.0f,"
           "\"daemon_rss_bytes_per_live_alloc\":%.1f,\"loads\":{",
           npre, (unsigned long long)rate, query_interval_ms, median(eng_whole, rounds),
           median(dmn_whole[LOAD_NONE], rounds), median(whole_ratio, rounds), rmin, rmax, up.live,
           up.rss_before, up.rss_loaded, up.live > 0 ? up.rss_loaded / up.live : -1);
    for (int i = 1; i < nruns; i++) {
        int k = runs[i];
        printf("%s\"%s\":{\"events_per_s\":%.0f,\"events_per_s_whole_run\":%.0f,\"lost\":%.0f,"
               "\"lost_unknown_rounds\":%d,\"target_lost\":0",
               i > 1 ? "," : "", load_kinds[k].name, median(dmn_rate[k], rounds),
               median(dmn_whole[k], rounds), dmn_lost[k], lost_unknown[k]);
        if (k != LOAD_NONE) {
            minmax(load_ratio[k], rounds, &rmin, &rmax);
            printf(",\"target_ratio_to_none\":%.2f", TARGET_LOAD_RATIO);
            printf(",\"ratio_to_none\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f,"
                   "\"query_ms_p50\":%.2f,\"query_ms_p99\":%.2f,\"query_ms_max\":%.2f,"
                   "\"query_count\":%d,\"query_failed\":%d",
                   median(load_ratio[k], rounds), rmin, rmax, pct(lat[k], nlat[k], 50),
                   pct(lat[k], nlat[k], 99), pct(lat[k], nlat[k], 100), nlat[k], nfailed[k]);
        }
        if (k == LOAD_M50)
            printf(",\"scrapes_ok\":%llu,\"scrapes_failed\":%llu,\"scrapes_late\":%llu,"
                   "\"connections\":%llu,\"scrape_max_ms\":%.1f,\"scrapers_cpu_per_s\":%.3f,"
                   "\"daemon_cpu_per_s\":%.3f,\"daemon_cpu_per_s_none\":%.3f",
                   (unsigned long long)m50.ok, (unsigned long long)m50.failed,
                   (unsigned long long)m50.late, (unsigned long long)m50.connects, m50.max_ms,
                   m50.secs > 0 ? m50.scrapers_cpu / m50.secs : -1,
                   m50.churn > 0 ? m50.daemon_cpu / m50.churn : -1,
                   m50.churn_none > 0 ? m50.daemon_cpu_none / m50.churn_none : -1);
        printf("}");
    }
    printf("},\"warm_runs\":%d,\"user_queries\":{", warm_runs);
    for (int k = LOAD_TOP50; k < NQUERY_KINDS; k++) {
        if (k > LOAD_TOP50)
            printf(",");
        qtimes_print(stdout, load_kinds[k].name, &up.t[k]);
    }
    printf("},\"user_queries_failed\":%d", up.failed);
    mem_split_print(stdout, &up.mem, up.live);
    targets_print(&up, on, load_ratio, rounds, dmn_lost, lost_unknown);
    printf("}\n");
    if (query_error[0])
        fprintf(stderr, "ht-bench-daemon: %s\n", query_error);
    free(bin_pre.p);
    free(bin_churn.p);
    free(pre);
    free(churn);
    workload_close(&w);
    engine_close(&names);
    /* A failed or untrustworthy query or a daemon that did not exit cleanly fails the run. */
    return failed == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
