/*
 * samesp: allocations from two call paths that reach malloc at the same
 * stack pointer: path_a and path_b, the same code, each calling leaf_alloc
 * from main at one depth. Only the return address leaf_alloc's frame keeps
 * tells them apart, so a stack cache keyed by (return address, sp) must
 * check its slots (agent/stack-cache.h): the two paths' blocks are two
 * sites. Interleaved, so each call finds the other path's stack cached.
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait, run, then
 *   {"done":true,"sites":[{"site":"path_a",...},{"site":"path_b",...}]}
 * wait, exit 0.
 */
#include "app-sync.h"

#include <stdlib.h>

#define ROUNDS 200
#define SIZE_A 24
#define SIZE_B 40

static void *kept[2 * ROUNDS];

__attribute__((noinline)) static void *leaf_alloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *path_a(size_t n)
{
    void *p = leaf_alloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *path_b(size_t n)
{
    void *p = leaf_alloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    app_sync_init();
    app_sync_ready();
    for (int i = 0; i < ROUNDS; i++) {
        kept[2 * i] = path_a(SIZE_A);
        kept[2 * i + 1] = path_b(SIZE_B);
    }
    app_sync_say(
        "{\"done\":true,\"sites\":[{\"site\":\"path_a\",\"live_count\":%d,\"live_bytes\":%d},"
        "{\"site\":\"path_b\",\"live_count\":%d,\"live_bytes\":%d}]}",
        ROUNDS, ROUNDS * SIZE_A, ROUNDS, ROUNDS * SIZE_B);
    app_sync_wait();
    for (int i = 0; i < 2 * ROUNDS; i++)
        free(kept[i]);
    return 0;
}
