/*
 * ht-bench-scrape: CLIENTS scrapers of a daemon's GET /metrics, each every
 * EVERY_MS, for SECS seconds (0: until SIGTERM or SIGINT), on one thread (scrape.c). Prints one
 * JSON line: the answers (200, failed, turns skipped because the last answer had not come),
 * connections opened, bytes, the scrapers' CPU time and, with --pid, the daemon's over the same
 * seconds (/proc/PID/stat utime + stime), so the daemon's cost is told apart from the scrapers'.
 *
 * usage: ht-bench-scrape --port PORT [--clients 50] [--every-ms 100] [--secs 10]
 *                        [--path /metrics] [--pid DAEMON_PID]
 */
#include "bench-util.h"
#include "scrape.h"

#include <signal.h>

static volatile int stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* utime + stime of pid in seconds (proc(5): fields 14 and 15), or -1. */
static double proc_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, stime;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &stime) != 2)
        return -1;
    return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

int main(int argc, char **argv)
{
    int port = (int)arg_u64(argc, argv, "--port", 0);
    int clients = (int)arg_u64(argc, argv, "--clients", 50);
    int every = (int)arg_u64(argc, argv, "--every-ms", 100);
    double secs = strtod(arg_str(argc, argv, "--secs", "10"), NULL);
    long pid = (long)arg_u64(argc, argv, "--pid", 0);
    const char *path = arg_str(argc, argv, "--path", "/metrics");
    if (port <= 0 || port > 65535 || clients < 1 || every < 1 || secs < 0) {
        fprintf(stderr, "usage: ht-bench-scrape --port PORT [--clients 50] [--every-ms 100] "
                        "[--secs 10] [--path /metrics] [--pid DAEMON_PID]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    double d0 = pid ? proc_cpu_s(pid) : -1;
    struct scrape_stats st;
    if (scrape_run(port, path, clients, every, secs, &stop, &st) != 0)
        return 1;
    double d1 = pid ? proc_cpu_s(pid) : -1;
    printf("{\"clients\":%d,\"every_ms\":%d,\"secs\":%.2f,\"ok\":%llu,\"failed\":%llu,"
           "\"late\":%llu,\"connects\":%llu,\"retries\":%llu,\"bytes\":%llu,\"scrapes_per_s\":%.1f,"
           "\"mean_ms\":%.2f,\"max_ms\":%.2f,\"scrapers_cpu_s\":%.3f,\"daemon_cpu_s\":%.3f}\n",
           clients, every, st.wall_s, (unsigned long long)st.ok, (unsigned long long)st.failed,
           (unsigned long long)st.late, (unsigned long long)st.connects,
           (unsigned long long)st.retries, (unsigned long long)st.bytes, (double)st.ok / st.wall_s,
           st.ok ? st.sum_ms / (double)st.ok : 0, st.max_ms, st.cpu_s,
           d0 >= 0 && d1 >= 0 ? d1 - d0 : -1);
    return st.failed ? 1 : 0;
}
