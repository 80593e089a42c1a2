/*
 * Quick probe-cost measurement: waits for a line on stdin (attach then),
 * runs N malloc+free pairs through a few noinline frames, prints ns per
 * pair, waits for another line, exits. Not a test (no timing is asserted);
 * tests/unit/bpf/measure.sh drives it. The full benchmark is bench/live.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

__attribute__((noinline)) static void pair(size_t n)
{
    sink = malloc(n);
    free(sink);
}

__attribute__((noinline)) static void level2(size_t n)
{
    pair(n);
}

__attribute__((noinline)) static void level1(size_t n)
{
    level2(n);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    char line[16];
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ready\n");
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        level1(16 + (size_t)(i & 127));
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("ns_per_pair %.1f\n", ns / (double)n);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 0;
}
