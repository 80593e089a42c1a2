/* Log lines with a UTC timestamp and level. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static FILE *log_fp;
static int log_level = LOG_INFO;

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
    fprintf(f, "%s heaptraced %s: ", ts, names[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}
