/*
 * pairloop: one thread making malloc+free pairs as fast as it can, block i
 * of 16 + (i mod 1024) bytes (the heap, never mmap) freed at once, so a
 * trace cut at any instant holds every pair it saw whole, and at most one
 * block live (a malloc whose free came after the cut); a free without its
 * malloc is the trace's doing.
 * usage: pairloop N [WORK]
 * WORK: iterations of a counting loop between pairs (default 0), so a
 * tracer whose reader is slower than the pairs' record rate (the agent's
 * daemon on a small machine) sees them all: a cut checked under ring
 * overflow would be the overflow's.
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait; N pairs; print
 * {"done":true,"pairs":N}; wait; exit 0.
 */
#include "app-sync.h"

static void *volatile keep;
static volatile long spin;

__attribute__((noinline)) static void pairs(long n, long work)
{
    for (long i = 0; i < n; i++) {
        void *p = malloc(16 + (size_t)(i % 1024));
        if (!p)
            exit(1);
        keep = p;
        free(p);
        for (long k = 0; k < work; k++)
            spin++;
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    long work = argc > 2 ? atol(argv[2]) : 0;
    if (n <= 0 || work < 0) {
        fprintf(stderr, "usage: pairloop N [WORK]\n");
        return 2;
    }
    app_sync_init();
    app_sync_ready();
    pairs(n, work);
    app_sync_say("{\"done\":true,\"pairs\":%ld}", n);
    app_sync_wait();
    return 0;
}
