/*
 * What every part of the eBPF tracer uses (tracer.c, attach.c, run.c): the
 * clock, and libbpf's last message kept for errors instead of printed.
 */
#include "base.h"

#include <bpf/libbpf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bpf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Keep libbpf's last warning for error messages instead of printing it. */
static __thread char libbpf_last[256];

static int libbpf_print_cb(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("HT_BPF_DEBUG") != NULL; /* libbpf's whole log on stderr */
    if (verbose) {
        va_list copy;
        va_copy(copy, ap);
        vfprintf(stderr, fmt, copy);
        va_end(copy);
    }
    if (level == LIBBPF_DEBUG)
        return 0;
    int n = vsnprintf(libbpf_last, sizeof(libbpf_last), fmt, ap);
    if (n > 0 && libbpf_last[strlen(libbpf_last) - 1] == '\n')
        libbpf_last[strlen(libbpf_last) - 1] = 0;
    return n;
}

const char *bpf_libbpf_last(void)
{
    return libbpf_last;
}

void bpf_libbpf_log_install(void)
{
    libbpf_set_print(libbpf_print_cb);
}
