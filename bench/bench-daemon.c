/*
 * ht-bench-daemon: sustained ingest through heaptraced while a client issues
 * a stacks query every 100 ms, against the engine alone on the same events.
 *
 * The workload is the engine benchmark's (bench/workload.c): a long-lived set
 * of --live allocations over --stacks stacks, then --events of churn. As in
 * the engine benchmark, the long-lived set is loaded first and not timed;
 * the churn is timed. Each round runs the engine alone (the same events,
 * already decoded, applied in the engine benchmark's batches) and the daemon
 * (a new session fed the binary stream over the control socket, a stacks
 * --top 50 query every 100 ms from a second connection, the session dropped
 * after), one first in even rounds and the other in odd ones.
 *
 * The machine is noisy: the engine alone runs at 7 or at 11 M events/s from
 * one round to the next, and the daemon likewise, independently. So rounds
 * are paired, the figure is the median of the per-round ratios, and there
 * are 15 rounds by default: with a quarter of single rounds under 0.80 (as
 * measured before the loop stopped reading every ring record), the median
 * of 5 rounds falls under it one run in ten, that of 15 one in sixty.
 * Each round also shows where its timed window went, for the engine's thread
 * and the daemon's loop: on a CPU, waiting for one, idle. Prints one JSON line.
 *
 * usage: ht-bench-daemon --daemon PATH [--events N] [--live N] [--stacks N] [--rounds N]
 *        HT_BENCH_NO_QUERIES=1: no query load.  HT_BENCH_TEXT=1: also one round of
 *        the same stream as .htev text.
 */
#include "bench-util.h"
#include "engine.h"
#include "htev-write.h"
#include "htevb.h"
#include "workload.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static const char *sock_path;
static char query_session[32];
static volatile int querying;
static double lat[100000];
static int nlat, nfailed;

static void *query_thread(void *arg)
{
    (void)arg;
    int fd = connect_to(sock_path);
    static char line[1 << 22];
    int id = 0;
    while (querying && fd >= 0) {
        double t0 = now_s();
        char req[160];
        int k = snprintf(
            req, sizeof(req),
            "{\"v\":1,\"id\":%d,\"cmd\":\"stacks\",\"args\":{\"session\":\"%s\",\"top\":50}}\n",
            ++id, query_session);
        if (send_all(fd, req, (size_t)k) != 0 || read_line(fd, line, sizeof(line)) < 0)
            break;
        double ms = (now_s() - t0) * 1000;
        if (getenv("HT_BENCH_TRACE"))
            fprintf(stderr, "query %.6f %.2f ms\n", t0, ms);
        if (strstr(line, "\"ok\":true") && nlat < 100000)
            lat[nlat++] = ms;
        else
            nfailed++;
        double left = 0.1 - (now_s() - t0);
        if (left > 0)
            usleep((useconds_t)(left * 1e6));
    }
    if (fd >= 0)
        close(fd);
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

/* The session's clock ("now") from its status, or 0. */
static uint64_t session_now(const char *name)
{
    char req[128];
    static char line[1 << 20];
    snprintf(req, sizeof(req), "{\"v\":1,\"id\":2,\"cmd\":\"status\",\"args\":{\"session\":\"%s\"}}\n",
             name);
    if (request(sock_path, req, line, sizeof(line)) != 0)
        return 0;
    const char *p = strstr(line, "\"now\":");
    return p ? strtoull(p + 6, NULL, 10) : 0;
}

/* A new session gets the long-lived set; once the daemon has applied it
 * (its clock reached the set's last event) the churn is sent and timed,
 * under the query load, up to the load summary. Returns the timed seconds. */
static double daemon_round(const char *name, const struct buf *pre, uint64_t pre_end,
                           const struct buf *churn, int queries, pid_t pid, long *faults,
                           struct split *loop)
{
    static char line[1 << 16];
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
    pthread_t th;
    querying = queries;
    if (queries)
        pthread_create(&th, NULL, query_thread, NULL);
    long f0 = minflt(pid);
    struct sched_ns s0 = schedstat(pid, pid); /* the loop thread */
    double t0 = now_s();
    if (getenv("HT_BENCH_TRACE"))
        fprintf(stderr, "churn %s from %.6f\n", name, t0);
    send_chunks(fd, churn->p, churn->len);
    send_all(fd, "0\n", 2);
    read_line(fd, line, sizeof(line)); /* the load summary: everything is applied */
    double secs = now_s() - t0;
    *loop = split_of(s0, schedstat(pid, pid), secs);
    *faults = minflt(pid) - f0;
    if (getenv("HT_BENCH_TRACE"))
        fprintf(stderr, "churn %s to %.6f\n", name, t0 + secs);
    querying = 0;
    if (queries)
        pthread_join(th, NULL);
    close(fd);
    snprintf(req, sizeof(req), "{\"v\":1,\"id\":3,\"cmd\":\"drop\",\"args\":{\"session\":\"%s\"}}\n",
             name);
    request(sock_path, req, line, sizeof(line));
    return secs;
}

/* The engine alone: the same long-lived set (not timed), then the churn. */
static double engine_round(const struct ht_event *pre, size_t npre, const struct ht_event *churn,
                           size_t nchurn, long *faults, struct split *sp)
{
    struct engine_limits lim;
    engine_limits_default(&lim); /* the daemon's defaults: the same caps */
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        exit(1);
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
    double secs = now_s() - t0;
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

static void text_of(const struct engine *e, const struct ht_event *evs, size_t n, struct buf *b)
{
    char line[16384];
    for (size_t i = 0; i < n; i++)
        buf_put(b, line, htev_format(&evs[i], &e->si, line, sizeof(line)));
}

int main(int argc, char **argv)
{
    const char *daemon = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--daemon"))
            daemon = argv[i + 1];
    if (!daemon) {
        fprintf(stderr, "usage: ht-bench-daemon --daemon PATH [--events N] [--live N] "
                        "[--stacks N] [--rounds N]\n");
        return 2;
    }
    uint64_t nevents = arg_u64(argc, argv, "--events", 4000000);
    uint64_t nlive = arg_u64(argc, argv, "--live", 1000000);
    uint64_t nstacks = arg_u64(argc, argv, "--stacks", 100000);
    int rounds = (int)arg_u64(argc, argv, "--rounds", 15);
    if (rounds < 1 || rounds > MAX_ROUNDS || nstacks == 0) {
        fprintf(stderr, "--rounds must be 1..%d and --stacks at least 1\n", MAX_ROUNDS);
        return 2;
    }
    int queries = !getenv("HT_BENCH_NO_QUERIES");
    signal(SIGPIPE, SIG_IGN);

    /* The events, decoded, and their binary stream (pre and churn apart). */
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine names; /* holds the stacks the streams define */
    struct workload w;
    if (engine_init(&names, &lim) != 0 || workload_init(&w, &names.si, nlive, nstacks, 0) != 0)
        return 1;
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

    /* The daemon, on a private endpoint. */
    char dir[] = "/tmp/ht-bench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    static char path[256];
    snprintf(path, sizeof(path), "%s/ht.sock", dir);
    sock_path = path;
    pid_t pid = fork();
    if (pid == 0) {
        execl(daemon, daemon, "--foreground", "--pipe", path, "--log-level", "warn", (char *)NULL);
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

    double eng_rate[MAX_ROUNDS], dmn_rate[MAX_ROUNDS], ratio[MAX_ROUNDS];
    long eng_faults[MAX_ROUNDS], dmn_faults[MAX_ROUNDS];
    struct split eng_sp[MAX_ROUNDS], loop_sp[MAX_ROUNDS];
    int under = 0; /* rounds under 0.80 */
    for (int k = 0; k < rounds; k++) {
        char name[16];
        snprintf(name, sizeof(name), "round%d", k);
        double te = 0, td = 0;
        for (int half = 0; half < 2; half++) {
            if ((half + k) % 2 == 0)
                te = engine_round(pre, npre, churn, nchurn, &eng_faults[k], &eng_sp[k]);
            else
                td = daemon_round(name, &bin_pre, pre_end, &bin_churn, queries, pid,
                                  &dmn_faults[k], &loop_sp[k]);
        }
        eng_rate[k] = nchurn / te;
        dmn_rate[k] = nchurn / td;
        ratio[k] = te / td;
        under += ratio[k] < 0.80;
        /* Of each timed window: on a CPU, waiting for one (preempted), idle. */
        fprintf(stderr,
                "round %d: engine %.2f M/s (cpu %.0f%%, waited %.0f%%), daemon %.2f M/s (loop: "
                "cpu %.0f%%, waited %.0f%%, idle %.0f%%), ratio %.3f\n",
                k, eng_rate[k] / 1e6, eng_sp[k].run * 100, eng_sp[k].wait * 100, dmn_rate[k] / 1e6,
                loop_sp[k].run * 100, loop_sp[k].wait * 100,
                idle_pct(loop_sp[k]), ratio[k]);
    }
    double text_ratio = -1, text_rate = -1;
    if (getenv("HT_BENCH_TEXT")) {
        struct buf txt_pre = {0}, txt_churn = {0};
        text_of(&names, pre, npre, &txt_pre);
        text_of(&names, churn, nchurn, &txt_churn);
        long ef, df;
        struct split es, ls;
        double te = engine_round(pre, npre, churn, nchurn, &ef, &es);
        double td = daemon_round("text", &txt_pre, pre_end, &txt_churn, queries, pid, &df, &ls);
        text_ratio = te / td;
        text_rate = nchurn / td;
        free(txt_pre.p);
        free(txt_churn.p);
    }
    static char line[1 << 16];
    request(path, "{\"v\":1,\"id\":9,\"cmd\":\"shutdown\"}\n", line, sizeof(line));
    int status;
    waitpid(pid, &status, 0);
    unlink(path);
    rmdir(dir);

    qsort(lat, (size_t)nlat, sizeof(double), cmp_double);
    double p50 = nlat ? lat[nlat / 2] : -1,
           p99 = nlat ? lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1] : -1,
           pmax = nlat ? lat[nlat - 1] : -1;
    double rmin = ratio[0], rmax = ratio[0];
    for (int k = 1; k < rounds; k++) {
        rmin = ratio[k] < rmin ? ratio[k] : rmin;
        rmax = ratio[k] > rmax ? ratio[k] : rmax;
    }
    double ef_sum = 0, df_sum = 0;
    for (int k = 0; k < rounds; k++) {
        ef_sum += (double)eng_faults[k];
        df_sum += (double)dmn_faults[k];
    }
    printf("{\"rounds\":%d,\"live\":%llu,\"stacks\":%llu,\"churn_events\":%zu,\"binary_bytes\":%zu,"
           "\"queries\":%s,\"engine_events_per_s\":%.0f,\"daemon_events_per_s\":%.0f,"
           "\"daemon_vs_engine\":%.3f,\"daemon_vs_engine_min\":%.3f,\"daemon_vs_engine_max\":%.3f,"
           "\"rounds_under_0_80\":%d,"
           "\"query_ms_p50\":%.2f,\"query_ms_p99\":%.2f,\"query_ms_max\":%.2f,\"query_count\":%d,"
           "\"query_failed\":%d,\"engine_faults_per_round\":%.0f,\"daemon_faults_per_round\":%.0f,"
           "\"text_daemon_events_per_s\":%.0f,\"text_daemon_vs_engine\":%.3f,\"daemon_exit\":%d}\n",
           rounds, (unsigned long long)nlive, (unsigned long long)nstacks, nchurn,
           bin_pre.len + bin_churn.len, queries ? "true" : "false", median(eng_rate, rounds),
           median(dmn_rate, rounds), median(ratio, rounds), rmin, rmax, under, p50, p99, pmax, nlat,
           nfailed, ef_sum / rounds, df_sum / rounds, text_rate, text_ratio,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(bin_pre.p);
    free(bin_churn.p);
    free(pre);
    free(churn);
    workload_close(&w);
    engine_close(&names);
    /* A failed query or a daemon that did not exit cleanly fails the run. */
    return nfailed == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
