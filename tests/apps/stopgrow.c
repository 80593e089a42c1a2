/*
 * stopgrow: one thread allocating as fast as it can, never freeing, in a
 * known order, so a trace cut at any point can be checked against it: block
 * i has size stopgrow_size(i), so the first K blocks hold a known sum. A
 * trace that applied every allocation it took holds exactly a prefix.
 * usage: stopgrow N
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait; grow(): N mallocs;
 * print {"done":true,"blocks":N}; wait; exit 0 (the process stays for its
 * symbols until the second go-signal).
 */
#include "app-sync.h"

#include <stdint.h>

static void *volatile keep;

/* 256 to 1264 bytes, in steps of 16, repeating every 64 blocks. */
static size_t stopgrow_size(long i)
{
    return 256 + (size_t)(i % 64) * 16;
}

__attribute__((noinline)) static void grow(long n)
{
    for (long i = 0; i < n; i++) {
        void *p = malloc(stopgrow_size(i));
        if (!p)
            exit(1);
        keep = p;
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: stopgrow N\n");
        return 2;
    }
    app_sync_init();
    app_sync_ready();
    grow(n);
    app_sync_say("{\"done\":true,\"blocks\":%ld}", n);
    app_sync_wait();
    return 0;
}
