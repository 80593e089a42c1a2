/*
 * allocbench: the allocation-heavy loop of the live benchmark (bench/live).
 * usage: allocbench [--no-wait] [--dlopen LIB] PAIRS THREADS
 *
 * Each thread makes PAIRS malloc+free pairs of mixed sizes (7 in 8 between 8
 * and 264 bytes, 1 in 8 up to 4 KiB) over a window of 256 live blocks, malloc
 * called through a chain of 6 noinline functions (the shape of
 * docs/linux.md#ring-buffer-and-event-rates). Each thread times its own loop with
 * clock_gettime(CLOCK_MONOTONIC) around the loop only, after an untimed warm-up
 * of 8192 pairs made before the ready line.
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait for the go-signal
 * (--no-wait: start at once), run, print
 *   {"threads":T,"pairs":P,"ns_per_pair":X,"thread_ns_per_pair":[...]}
 * (ns_per_pair: the mean over threads of each thread's loop time / PAIRS)
 * and exit 0. --dlopen LIB: once the threads run, wait for a second
 * go-signal, dlopen(LIB) (a module load while the loop runs: the symbolizer
 * tests), print {"dlopened":"LIB"} (or {"dlopen_error":"..."}) and wait for a
 * third before the result and the exit (the process stays for its files).
 */
#define _GNU_SOURCE
#include "app-sync.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define WINDOW 256
#define WARMUP 8192

static void *volatile bench_sink;

__attribute__((noinline)) static void *level6(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *level5(size_t n)
{
    void *p = level6(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *level4(size_t n)
{
    void *p = level5(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *level3(size_t n)
{
    void *p = level4(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *level2(size_t n)
{
    void *p = level3(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *level1(size_t n)
{
    void *p = level2(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

struct worker {
    pthread_t tid;
    long pairs;
    unsigned seed;
    pthread_barrier_t *start;
    double ns_per_pair;
};

static inline uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    void *live[WINDOW];
    uint32_t s = w->seed;
    memset(live, 0, sizeof live);
    /* Warm-up, untimed and before the go-signal (so before any tracer attaches): the heap's
     * pages are faulted in and the thread's arena exists when the timed loop starts. */
    for (unsigned i = 0; i < WARMUP; i++) {
        uint32_t r = rnd(&s);
        free(live[i % WINDOW]);
        live[i % WINDOW] = level1((r & 7) ? 8 + (r >> 8) % 257 : 8 + (r >> 8) % 4089);
    }
    for (unsigned k = 0; k < WINDOW; k++) {
        free(live[k]);
        live[k] = NULL;
    }
    s = w->seed;
    pthread_barrier_wait(w->start);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < w->pairs; i++) {
        uint32_t r = rnd(&s);
        size_t n = (r & 7) ? 8 + (r >> 8) % 257 : 8 + (r >> 8) % 4089;
        unsigned slot = (unsigned)i % WINDOW;
        free(live[slot]); /* free(NULL) the first WINDOW times: every malloc pairs with a free below
                           */
        live[slot] = level1(n);
        bench_sink = live[slot];
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (unsigned k = 0; k < WINDOW; k++)
        free(live[k]);
    w->ns_per_pair =
        ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)w->pairs;
    return NULL;
}

int main(int argc, char **argv)
{
    int wait = 1, a = 1;
    const char *lib = NULL;
    if (a < argc && !strcmp(argv[a], "--no-wait")) {
        wait = 0;
        a++;
    }
    if (a + 1 < argc && !strcmp(argv[a], "--dlopen")) {
        lib = argv[a + 1];
        a += 2;
    }
    if (argc - a != 2 || atol(argv[a]) < 1 || atoi(argv[a + 1]) < 1 || atoi(argv[a + 1]) > 64) {
        fprintf(stderr, "usage: allocbench [--no-wait] [--dlopen LIB] PAIRS THREADS(1-64)\n");
        return 2;
    }
    long pairs = atol(argv[a]);
    int threads = atoi(argv[a + 1]);
    app_sync_init();
    struct worker w[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int k = 0; k < threads; k++) {
        w[k].pairs = pairs;
        w[k].seed = 2463534242u + (unsigned)k * 7919u;
        w[k].start = &start;
        if (pthread_create(&w[k].tid, NULL, worker_main, &w[k]) != 0) {
            perror("pthread_create");
            return 2;
        }
    }
    if (wait)
        app_sync_ready();
    pthread_barrier_wait(&start);
    if (lib) {
        app_sync_wait();
        if (dlopen(lib, RTLD_NOW))
            app_sync_say("{\"dlopened\":\"%s\"}", lib);
        else
            app_sync_say("{\"dlopen_error\":\"%s\"}", dlerror());
        app_sync_wait();
    }
    double sum = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(w[k].tid, NULL);
        sum += w[k].ns_per_pair;
    }
    printf("{\"threads\":%d,\"pairs\":%ld,\"ns_per_pair\":%.1f,\"thread_ns_per_pair\":[", threads,
           pairs, sum / threads);
    for (int k = 0; k < threads; k++)
        printf("%s%.1f", k ? "," : "", w[k].ns_per_pair);
    printf("]}\n");
    fflush(stdout);
    pthread_barrier_destroy(&start);
    return 0;
}
