/*
 * ht-bench-daemon: sustained ingest of a replayed stream through heaptraced
 * while a client issues a stacks query every 100 ms. Prints one JSON line:
 * the daemon's events/s and the query latency p50/p99, next to the rate of
 * the same stream replayed in-process (parse + engine, no daemon, no
 * queries), measured in the same run.
 *
 * usage: ht-bench-daemon --daemon PATH [--events N] [--live N] [--stacks N]
 */
#include "bench-util.h"
#include "engine.h"
#include "htevb.h"
#include "replay.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t xrand(void)
{
    return xrand_next(&rng);
}

/* A synthetic stream with the shape of a real service: short-lived blocks
 * freed FIFO, addresses reused LIFO, a slowly growing long-lived set,
 * occasional commits, private bytes every 1000 events. */
static char *make_stream(uint64_t nevents, uint64_t nlive, unsigned nstacks, size_t *len)
{
    size_t cap = (nevents + nlive) * 200 + (size_t)nstacks * 512, n = 0;
    char *buf = malloc(cap);
    char **stacks = malloc(nstacks * sizeof(char *));
    for (unsigned s = 0; s < nstacks; s++) {
        char tmp[512];
        int k = snprintf(tmp, sizeof(tmp), "[\"libc.so.6!malloc\",\"svc!alloc_site_%u\"", s);
        for (int d = 0; d < 6; d++)
            k += snprintf(tmp + k, sizeof(tmp) - (size_t)k, ",\"svc!fn_%llu\"",
                          (unsigned long long)(xrand() % 400));
        snprintf(tmp + k, sizeof(tmp) - (size_t)k, "]");
        stacks[s] = strdup(tmp);
    }
    n += (size_t)snprintf(buf + n, cap - n, "{\"ev\":\"process\",\"pid\":1,\"name\":\"svc\"}\n");
    uint64_t pending[4096], reuse[8192], head = 0, tail = 0, nreuse = 0, next = 0x10000000;
    uint64_t t = 0;
    /* The engine benchmark's shape: a large live set first (never freed). */
    for (uint64_t i = 0; i < nlive; i++) {
        t += 100;
        uint64_t r = xrand();
        n += (size_t)snprintf(buf + n, cap - n,
                              "{\"t\":%llu,\"ev\":\"alloc\",\"tid\":1,\"heap\":\"0x0\",\"addr\":\"0x%llx\",\"size\":%llu,\"stack\":%s}\n",
                              (unsigned long long)t, (unsigned long long)(0x200000000ULL + i * 48),
                              (unsigned long long)(16 + r % 512), stacks[(r >> 16) % nstacks]);
    }
    for (uint64_t i = 0; i < nevents; i++) {
        t += 1000;
        uint64_t r = xrand();
        if (i % 1000 == 999) {
            n += (size_t)snprintf(buf + n, cap - n,
                                  "{\"t\":%llu,\"ev\":\"private_bytes\",\"bytes\":%llu}\n",
                                  (unsigned long long)t, (unsigned long long)(100000000 + i * 8));
        } else if (i % 5000 == 17) {
            n += (size_t)snprintf(
                buf + n, cap - n,
                "{\"t\":%llu,\"ev\":\"commit\",\"addr\":\"0x%llx\",\"size\":65536,\"stack\":%s}\n",
                (unsigned long long)t, (unsigned long long)(0x7f0000000000ULL + i * 65536),
                stacks[r % nstacks]);
        } else if (head - tail < 4096 && (r & 1)) {
            uint64_t a = nreuse ? reuse[--nreuse] : (next += 48);
            if ((r >> 8) % 64 == 0)
                a = (next += 48); /* long-lived: never freed */
            else
                pending[head++ % 4096] = a;
            n += (size_t)snprintf(buf + n, cap - n,
                                  "{\"t\":%llu,\"ev\":\"alloc\",\"tid\":1,\"heap\":\"0x0\","
                                  "\"addr\":\"0x%llx\",\"size\":%llu,\"stack\":%s}\n",
                                  (unsigned long long)t, (unsigned long long)a,
                                  (unsigned long long)(16 + (r >> 16) % 512),
                                  stacks[(r >> 24) % nstacks]);
        } else if (head > tail) {
            uint64_t a = pending[tail++ % 4096];
            if (nreuse < 8192)
                reuse[nreuse++] = a;
            n += (size_t)snprintf(
                buf + n, cap - n,
                "{\"t\":%llu,\"ev\":\"free\",\"tid\":1,\"heap\":\"0x0\",\"addr\":\"0x%llx\"}\n",
                (unsigned long long)t, (unsigned long long)a);
        }
    }
    for (unsigned s = 0; s < nstacks; s++)
        free(stacks[s]);
    free(stacks);
    *len = n;
    return buf;
}

#define ROUNDS 3 /* medians of this many rounds */

static char *bin;
static size_t bin_len, bin_cap;

static void bin_out(void *arg, const void *buf, size_t n)
{
    (void)arg;
    if (bin_len + n > bin_cap) {
        bin_cap = (bin_len + n) * 2;
        bin = realloc(bin, bin_cap);
    }
    memcpy(bin + bin_len, buf, n);
    bin_len += n;
}

static struct ht_event *parsed;
static size_t nparsed;

static void sink_apply(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
}

static void sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
    parsed[nparsed++] = *ev;
}

static int connect_to(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
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

/* Read one line (up to cap) into buf; returns its length or -1. */
static long read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t k = recv(fd, buf + n, 1, 0);
        if (k <= 0)
            return -1;
        if (buf[n] == '\n')
            return (long)n;
        n++;
    }
    return -1;
}

static const char *sock_path;
static const char *query_session;
static volatile int loading;
static double lat[100000];
static int nlat;

static void *query_thread(void *arg)
{
    (void)arg;
    int fd = connect_to(sock_path);
    static char line[1 << 22];
    int id = 0;
    while (loading && fd >= 0 && !getenv("HT_BENCH_NO_QUERIES")) {
        double t0 = now_s();
        char req[160];
        int k = snprintf(
            req, sizeof(req),
            "{\"v\":1,\"id\":%d,\"cmd\":\"stacks\",\"args\":{\"session\":\"%s\",\"top\":50}}\n",
            ++id, query_session);
        if (send_all(fd, req, (size_t)k) != 0 || read_line(fd, line, sizeof(line)) < 0)
            break;
        double ms = (now_s() - t0) * 1000;
        if (strstr(line, "\"ok\":true") && nlat < 100000)
            lat[nlat++] = ms;
        double left = 0.1 - (now_s() - t0);
        if (left > 0)
            usleep((useconds_t)(left * 1e6));
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Load a stream through the daemon while the query thread runs; returns seconds. */
static double daemon_ingest(const char *name, const char *data, size_t len)
{
    static char line[1 << 16];
    int fd = connect_to(sock_path);
    char req[128];
    snprintf(req, sizeof(req), "{\"v\":1,\"id\":1,\"cmd\":\"load\",\"args\":{\"name\":\"%s\"}}\n",
             name);
    send_all(fd, req, strlen(req));
    read_line(fd, line, sizeof(line));
    query_session = name;
    loading = 1;
    pthread_t th;
    pthread_create(&th, NULL, query_thread, NULL);
    double t0 = now_s();
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        char hdr[32];
        int k = snprintf(hdr, sizeof(hdr), "%zu\n", n);
        send_all(fd, hdr, (size_t)k);
        send_all(fd, data + off, n);
    }
    send_all(fd, "0\n", 2);
    read_line(fd, line, sizeof(line)); /* the load summary: everything is applied */
    double secs = now_s() - t0;
    loading = 0;
    pthread_join(th, NULL);
    close(fd);
    return secs;
}

int main(int argc, char **argv)
{
    const char *daemon = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--daemon"))
            daemon = argv[i + 1];
    if (!daemon) {
        fprintf(stderr, "usage: ht-bench-daemon --daemon PATH [--events N] [--stacks N]\n");
        return 2;
    }
    /* Defaults: the engine benchmark's workload (1 M live, 100 k stacks). */
    uint64_t nevents = arg_u64(argc, argv, "--events", 3000000);
    uint64_t nlive = arg_u64(argc, argv, "--live", 1000000);
    unsigned nstacks = (unsigned)arg_u64(argc, argv, "--stacks", 100000);
    signal(SIGPIPE, SIG_IGN);
    size_t len;
    char *stream = make_stream(nevents, nlive, nstacks, &len);

    /* 1. The same stream replayed in-process: parse + engine, nothing else. */
    parsed = malloc((nevents + nlive + 16) * sizeof(*parsed));
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine e;
    engine_init(&e, &lim);
    struct replay r;
    replay_init(&r, &e.si, sink, &e);
    double t0 = now_s();
    for (size_t off = 0; off < len; off += 65536)
        replay_feed(&r, stream + off, len - off < 65536 ? len - off : 65536);
    replay_finish(&r);
    double inproc = now_s() - t0;
    uint64_t events = r.events;
    /* The binary twin of the same stream, written from the parsed events. */
    struct htevb_writer w;
    bin_len = 0;
    htevb_writer_init(&w, &e.si, bin_out, NULL);
    for (size_t i = 0; i < nparsed; i++) {
        if (parsed[i].kind == HT_EV_PROCESS)
            htevb_write_process(&w, parsed[i].t, parsed[i].size, "svc");
        else
            htevb_write_event(&w, &parsed[i]);
    }
    htevb_writer_close(&w);
    replay_close(&r);
    engine_close(&e);
    /* 1b. The engine alone on the same events, already parsed (stack ids are
     * plain numbers to the aggregates, so a fresh engine takes them). Three
     * rounds, interleaved with the daemon's below: the machine is noisy. */
    double engine_rounds[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        engine_init(&e, &lim);
        t0 = now_s();
        for (size_t off = 0; off < nparsed; off += 256)
            engine_apply_batch(&e, parsed + off, nparsed - off < 256 ? nparsed - off : 256);
        engine_rounds[k] = now_s() - t0;
        engine_close(&e);
    }
    qsort(engine_rounds, ROUNDS, sizeof(double), cmp_double);
    double engine_only = engine_rounds[ROUNDS / 2];
    free(parsed);
    /* 1c. The binary twin replayed in-process. */
    engine_init(&e, &lim);
    replay_init(&r, &e.si, sink_apply, &e);
    t0 = now_s();
    for (size_t off = 0; off < bin_len; off += 65536)
        replay_feed(&r, bin + off, bin_len - off < 65536 ? bin_len - off : 65536);
    replay_finish(&r);
    double inproc_bin = now_s() - t0;
    replay_close(&r);
    engine_close(&e);

    const char *save = getenv("HT_BENCH_SAVE"); /* keep the binary stream for profiling */
    if (save) {
        FILE *f = fopen(save, "wb");
        if (f) {
            fwrite(bin, 1, bin_len, f);
            fclose(f);
        }
    }
    /* 2. Through the daemon, with a query every 100 ms. */
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
    static char line[1 << 16];
    /* HT_BENCH_BINARY_ONLY=1 skips the text stream through the daemon (profiling). */
    double via = getenv("HT_BENCH_BINARY_ONLY") ? 1e-9 : daemon_ingest("text", stream, len);
    int text_queries = nlat;
    qsort(lat, (size_t)nlat, sizeof(double), cmp_double);
    double text_p99 = nlat ? lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1] : -1;
    nlat = 0;
    double bin_rounds[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        char name[16];
        snprintf(name, sizeof(name), "binary%d", k);
        bin_rounds[k] = daemon_ingest(name, bin, bin_len);
    }
    qsort(bin_rounds, ROUNDS, sizeof(double), cmp_double);
    double via_bin = bin_rounds[ROUNDS / 2];
    int sfd = connect_to(path);
    const char *bye = "{\"v\":1,\"id\":9,\"cmd\":\"shutdown\"}\n";
    send_all(sfd, bye, strlen(bye));
    read_line(sfd, line, sizeof(line));
    close(sfd);
    int status;
    waitpid(pid, &status, 0);
    unlink(path);
    rmdir(dir);
    qsort(lat, (size_t)nlat, sizeof(double), cmp_double);
    double p50 = nlat ? lat[nlat / 2] : -1,
           p99 = nlat ? lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1] : -1;
    printf("{\"rounds\":%d,\"live\":%llu,\"events\":%llu,\"stream_bytes\":%zu,\"binary_bytes\":%zu,\"stacks\":%u,"
           "\"engine_events_per_s\":%.0f,"
           "\"binary_daemon_events_per_s\":%.0f,\"binary_daemon_vs_engine\":%.3f,"
           "\"binary_inprocess_events_per_s\":%.0f,\"binary_query_ms_p50\":%.2f,"
           "\"binary_query_ms_p99\":%.2f,\"binary_queries\":%d,"
           "\"text_daemon_vs_engine\":%.3f,\"text_query_ms_p99\":%.2f,\"text_queries\":%d,"
           "\"text_inprocess_events_per_s\":%.0f,"
           "\"text_daemon_events_per_s\":%.0f,\"text_daemon_vs_inprocess\":%.3f,"
           "\"daemon_exit\":%d}\n",
           ROUNDS, (unsigned long long)nlive, (unsigned long long)events, len, bin_len, nstacks, events / engine_only,
           events / via_bin, engine_only / via_bin, events / inproc_bin, p50, p99, nlat,
           engine_only / via, text_p99, text_queries, events / inproc, events / via, inproc / via,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(bin);
    free(stream);
    return 0;
}
