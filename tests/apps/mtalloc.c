/*
 * mtalloc: a multi-threaded program whose heap behaviour is known exactly.
 * usage: mtalloc [THREADS [ITERATIONS]]   (default 3 threads, 40 iterations)
 *
 * Every worker thread runs ITERATIONS rounds; each round calls every site
 * once (mtalloc.h). Leaking sites: malloc, calloc, a malloc+realloc chain
 * (grow in place, grow with a move, shrink), posix_memalign, aligned_alloc,
 * memalign, strdup, new, new[]. Transient sites allocate and free in the same
 * function: malloc/free, calloc/free, a realloc chain then free,
 * posix_memalign/free, new/delete, new[]/delete[].
 *
 * Protocol on stdout (app-sync.h): {"pid":N,"ready":true}, wait for the
 * go-signal; run; print the ground truth
 *   {"done":true,"pid":N,"threads":T,"iterations":I,
 *    "sites":[{"site":"leak_malloc","kind":"leak","count":C,"bytes":B,"live_count":C,"live_bytes":B},...]}
 * then wait for the go-signal again and exit 0 (--no-pause: exit at once).
 * "count"/"bytes" are blocks allocated by the site and their requested bytes
 * (for a realloc chain: one block, its last size); live_* what is still
 * allocated at the end. Allocations the runtime makes itself (thread
 * creation, stdio) are in no site.
 *
 * Linked as is (glibc), with jemalloc (mtalloc-jemalloc) and with tcmalloc
 * (mtalloc-tcmalloc) when those are installed.
 */
#define _GNU_SOURCE
#include "mtalloc.h"

#include "app-sync.h"

#include <malloc.h>
#include <pthread.h>
#include <string.h>

/* Every thread's blocks pass through it (so no allocation is optimised
 * away); a block is freed through its own pointer, never re-read from here:
 * another thread may have stored its own meanwhile (a double free). */
void *volatile mt_sink;

static const char *const site_names[MT_SITES] = {
    "leak_malloc",        "leak_calloc",   "leak_realloc_chain", "leak_posix_memalign",
    "leak_aligned_alloc", "leak_memalign", "leak_strdup",        "leak_new",
    "leak_new_array",     "churn_malloc",  "churn_calloc",       "churn_realloc",
    "churn_aligned",      "churn_new",     "churn_new_array",
};

static void *check(void *p, const char *what)
{
    if (!p) {
        fprintf(stderr, "mtalloc: %s failed\n", what);
        exit(2);
    }
    return p;
}

static void add(struct mt_truth *t, enum mt_site s, size_t bytes)
{
    t->site[s].count++;
    t->site[s].bytes += bytes;
}

__attribute__((noinline)) void leak_malloc(struct mt_truth *t, int i, int th)
{
    size_t n = 16 + (size_t)((i * 7 + th) % 100);
    mt_sink = check(malloc(n), "malloc");
    add(t, MT_LEAK_MALLOC, n);
}

__attribute__((noinline)) void leak_calloc(struct mt_truth *t, int i)
{
    size_t n = 1 + (size_t)(i % 5);
    mt_sink = check(calloc(n, 24), "calloc");
    add(t, MT_LEAK_CALLOC, n * 24);
}

/* One block, grown in place or not, moved by a large growth, then shrunk. */
__attribute__((noinline)) void leak_realloc_chain(struct mt_truth *t, int i, int th)
{
    char *p = check(malloc(10), "malloc");
    p = check(realloc(p, 40), "realloc");
    p = check(realloc(p, 5000), "realloc");
    size_t last = 100 + (size_t)i + (size_t)th;
    p = check(realloc(p, last), "realloc");
    mt_sink = p;
    add(t, MT_LEAK_REALLOC_CHAIN, last);
}

__attribute__((noinline)) void leak_posix_memalign(struct mt_truth *t, int i)
{
    void *p = NULL;
    size_t n = 100 + (size_t)i;
    if (posix_memalign(&p, 64, n) != 0)
        check(NULL, "posix_memalign");
    mt_sink = p;
    add(t, MT_LEAK_POSIX_MEMALIGN, n);
}

__attribute__((noinline)) void leak_aligned_alloc(struct mt_truth *t)
{
    mt_sink = check(aligned_alloc(256, 512), "aligned_alloc");
    add(t, MT_LEAK_ALIGNED_ALLOC, 512);
}

__attribute__((noinline)) void leak_memalign(struct mt_truth *t, int i)
{
    size_t n = 72 + (size_t)i;
    mt_sink = check(memalign(32, n), "memalign");
    add(t, MT_LEAK_MEMALIGN, n);
}

__attribute__((noinline)) void leak_strdup(struct mt_truth *t, int i)
{
    static const char text[] = "mtalloc strdup leak text";
    char src[32];
    size_t len = 5 + (size_t)(i % 10);
    memcpy(src, text, len);
    src[len] = 0;
    mt_sink = check(strdup(src), "strdup");
    add(t, MT_LEAK_STRDUP, len + 1);
}

__attribute__((noinline)) void churn_malloc(struct mt_truth *t, int i)
{
    size_t n = 300 + (size_t)i;
    void *p = check(malloc(n), "malloc");
    mt_sink = p;
    free(p);
    add(t, MT_CHURN_MALLOC, n);
}

__attribute__((noinline)) void churn_calloc(struct mt_truth *t, int i)
{
    size_t n = 2 + (size_t)(i % 3);
    void *p = check(calloc(n, 100), "calloc");
    mt_sink = p;
    free(p);
    add(t, MT_CHURN_CALLOC, n * 100);
}

__attribute__((noinline)) void churn_realloc(struct mt_truth *t, int i)
{
    char *p = check(malloc(24), "malloc");
    p = check(realloc(p, 3000 + (size_t)i), "realloc");
    mt_sink = p;
    free(p);
    add(t, MT_CHURN_REALLOC, 3000 + (size_t)i);
}

__attribute__((noinline)) void churn_aligned(struct mt_truth *t, int i)
{
    void *p = NULL;
    size_t n = 64 + (size_t)i;
    if (posix_memalign(&p, 128, n) != 0)
        check(NULL, "posix_memalign");
    mt_sink = p;
    free(p);
    add(t, MT_CHURN_ALIGNED, n);
}

struct worker {
    pthread_t tid;
    int index, iterations;
    pthread_barrier_t *start;
    struct mt_truth truth;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct mt_truth *t = &w->truth;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < w->iterations; i++) {
        leak_malloc(t, i, w->index);
        leak_calloc(t, i);
        leak_realloc_chain(t, i, w->index);
        leak_posix_memalign(t, i);
        leak_aligned_alloc(t);
        leak_memalign(t, i);
        leak_strdup(t, i);
        leak_new(t, i);
        leak_new_array(t, i);
        churn_malloc(t, i);
        churn_calloc(t, i);
        churn_realloc(t, i);
        churn_aligned(t, i);
        churn_new(t, i);
        churn_new_array(t, i);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int pause_end = 1, threads = 3, iterations = 40, pos = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--no-pause"))
            pause_end = 0;
        else if (pos++ == 0)
            threads = atoi(argv[a]);
        else
            iterations = atoi(argv[a]);
    }
    if (threads < 1 || threads > 64 || iterations < 1) {
        fprintf(stderr, "usage: mtalloc [--no-pause] [THREADS(1-64) [ITERATIONS]]\n");
        return 2;
    }
    app_sync_init();
    struct worker *w = check(calloc((size_t)threads, sizeof *w), "calloc");
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int k = 0; k < threads; k++) {
        w[k].index = k;
        w[k].iterations = iterations;
        w[k].start = &start;
        if (pthread_create(&w[k].tid, NULL, worker_main, &w[k]) != 0)
            check(NULL, "pthread_create");
    }
    app_sync_ready(); /* threads exist and wait at the barrier: attach now */
    pthread_barrier_wait(&start);
    struct mt_truth sum;
    memset(&sum, 0, sizeof sum);
    for (int k = 0; k < threads; k++) {
        pthread_join(w[k].tid, NULL);
        for (int s = 0; s < MT_SITES; s++) {
            sum.site[s].count += w[k].truth.site[s].count;
            sum.site[s].bytes += w[k].truth.site[s].bytes;
        }
    }
    printf("{\"done\":true,\"pid\":%d,\"threads\":%d,\"iterations\":%d,\"sites\":[", (int)getpid(),
           threads, iterations);
    for (int s = 0; s < MT_SITES; s++) {
        int leak = s < MT_CHURN_MALLOC;
        printf("%s{\"site\":\"%s\",\"kind\":\"%s\",\"count\":%lu,\"bytes\":%lu,\"live_count\":%lu,"
               "\"live_bytes\":%lu}",
               s ? "," : "", site_names[s], leak ? "leak" : "transient", sum.site[s].count,
               sum.site[s].bytes, leak ? sum.site[s].count : 0, leak ? sum.site[s].bytes : 0);
    }
    printf("]}\n");
    fflush(stdout);
    if (pause_end)
        app_sync_wait();
    pthread_barrier_destroy(&start);
    free(w);
    return 0;
}
