/*
 * A target with many threads inside an allocator call at once: it defines
 * its own valloc (exported, so the tracer probes it as the process's
 * allocator), which waits until every thread has entered it. After a line
 * on stdin, N threads (argv[1]) each call valloc(64) once and keep the
 * block; prints "done" when all have returned, exits at the next line.
 * With "seq" (argv[2]) the threads run one after the other, each ended
 * before the next starts.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t all_in;
static char *pool;
static int next;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((visibility("default"), noinline)) void *valloc(size_t size)
{
    pthread_mutex_lock(&lock);
    char *p = pool + (size_t)next++ * 64;
    pthread_mutex_unlock(&lock);
    pthread_barrier_wait(&all_in);
    return size <= 64 ? p : NULL;
}

static void *thread_main(void *arg)
{
    void *volatile *slot = arg;
    *slot = valloc(64);
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int seq = argc > 2 && argv[2][0] == 's';
    pool = calloc((size_t)n, 64);
    pthread_t *th = calloc((size_t)n, sizeof(*th));
    void **keep = calloc((size_t)n, sizeof(*keep));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_barrier_init(&all_in, NULL, seq ? 1u : (unsigned)n);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    int made = 0;
    for (; made < n; made++) {
        if (pthread_create(&th[made], &attr, thread_main, &keep[made]) != 0)
            break;
        if (seq)
            pthread_join(th[made], NULL);
    }
    if (made < n) {
        printf("only %d threads\n", made);
        fflush(stdout);
        return 2;
    }
    for (int i = 0; i < n && !seq; i++)
        pthread_join(th[i], NULL);
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 0;
}
