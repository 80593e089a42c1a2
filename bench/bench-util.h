/* Timing and random numbers shared by the benchmarks. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define BENCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BENCH_ASAN 1
#endif
#endif
#ifdef BENCH_ASAN
/* ASan's allocator statistics (compiler-rt's sanitizer/allocator_interface.h,
 * a header gcc does not install; libasan exports the function). */
size_t __sanitizer_get_current_allocated_bytes(void);
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of the calling thread: on a shared machine the wall clock also
 * counts the time other processes had the CPU. */
static inline double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64: fast, reproducible. */
static inline uint64_t xrand_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline uint64_t arg_u64(int argc, char **argv, const char *name, uint64_t dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtoull(argv[i + 1], NULL, 0);
    return dflt;
}

static inline const char *arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return dflt;
}

/* Heap bytes in use by the whole process, or -1 where that cannot be had.
 * glibc: mallinfo2()'s uordblks (bytes in chunks handed out, headers
 * included) plus hblkhd (bytes in blocks that malloc mmapped on its own:
 * every large table). Under AddressSanitizer malloc is ASan's, which keeps
 * its own count. Either counts every malloc'ed structure, whatever it is. */
static inline double heap_in_use(void)
{
#if defined(BENCH_ASAN)
    return (double)__sanitizer_get_current_allocated_bytes();
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
#else
    return -1;
#endif
}

static inline const char *heap_measure_name(void)
{
#if defined(BENCH_ASAN)
    return "asan";
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    return "mallinfo2";
#else
    return "none";
#endif
}

/* Resident bytes of a process (0: this one) from /proc/PID/statm, or -1. */
static inline double rss_bytes(pid_t pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/statm");
    FILE *f = fopen(path, "r");
    unsigned long long size, resident;
    int ok = f && fscanf(f, "%llu %llu", &size, &resident) == 2;
    if (f)
        fclose(f);
    return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) : -1;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One query kind's latencies: the first run after the data was loaded
 * (cold), then the same query repeated (warm). No best-of: every run is
 * printed, with the median and the max of the warm ones. */
#define WARM_RUNS_MAX 101

struct qtimes {
    double cold;
    double warm[WARM_RUNS_MAX];
    int nwarm;
    int has_cpu; /* the CPU times below are known (the engine's, in process) */
    double cold_cpu, warm_cpu[WARM_RUNS_MAX];
};

static inline void qtimes_print(FILE *out, const char *name, const struct qtimes *t)
{
    double v[WARM_RUNS_MAX], c[WARM_RUNS_MAX];
    int n = t->nwarm;
    memcpy(v, t->warm, (size_t)n * sizeof(double));
    memcpy(c, t->warm_cpu, (size_t)n * sizeof(double));
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    fprintf(out, "\"%s\":{\"cold_ms\":%.2f,\"warm_median_ms\":%.2f,\"warm_max_ms\":%.2f,", name,
            t->cold, n ? v[n / 2] : -1, n ? v[n - 1] : -1);
    if (t->has_cpu)
        fprintf(out, "\"cold_cpu_ms\":%.2f,\"warm_cpu_median_ms\":%.2f,\"warm_cpu_max_ms\":%.2f,",
                t->cold_cpu, n ? c[n / 2] : -1, n ? c[n - 1] : -1);
    fprintf(out, "\"warm_ms\":[");
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%.2f", i ? "," : "", t->warm[i]);
    fprintf(out, "]}");
}

#endif
