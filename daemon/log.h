/* The operator's log (stderr or a file); clients get errors in replies, not here. */
#ifndef LOG_H
#define LOG_H

#include "config.h"

int log_open(int level, const char *file);
void log_close(void);
/* Also hand every line at LOG_WARN or worse to sink (the Windows event log
 * while running as a service); NULL stops. line is the escaped message
 * without timestamp or newline. Set before the loop starts, not during. */
typedef void (*log_sink_fn)(void *arg, int level, const char *line);
void log_set_sink(log_sink_fn sink, void *arg);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
