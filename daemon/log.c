/* Log lines with a UTC timestamp and level. */
#include "log.h"

#include "ht-text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static FILE *log_fp;
static int log_level = LOG_INFO;
static log_sink_fn log_sink;
static void *log_sink_arg;

void log_set_sink(log_sink_fn sink, void *arg)
{
    log_sink = sink;
    log_sink_arg = arg;
}

int log_open(int level, const char *file)
{
    log_level = level;
    log_fp = stderr;
    if (file && *file) {
        FILE *f = fopen(file, "a");
        if (!f)
            return -1;
        setvbuf(f, NULL, _IOLBF, 0);
        log_fp = f;
    }
    return 0;
}

void log_close(void)
{
    if (log_fp && log_fp != stderr)
        fclose(log_fp);
    log_fp = NULL;
}

void log_msg(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if (level > log_level)
        return;
    FILE *f = log_fp ? log_fp : stderr;
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* Names in log lines come from clients and streams: a newline or an
     * escape sequence in one must not forge a line or reach a terminal. */
    char msg[1024], safe[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(msg))
        memcpy(msg + sizeof(msg) - 4, "...", 4);
    ht_text_escape(msg, safe, sizeof(safe));
    fprintf(f, "%s heaptraced %s: %s\n", ts, names[level], safe);
    fflush(f);
    if (log_sink && level <= LOG_WARN)
        log_sink(log_sink_arg, level, safe);
}
