/*
 * mapgrow: one private writable mapping grown with mremap by a named function, the commit a
 * live trace must attribute to that function (glibc's mremap wrapper has a stack frame of its
 * own but no frame pointer: a frame-pointer walk from the syscall skips its caller).
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait; grow_mapping(): mmap 64 KiB, mremap
 * to 192 KiB (may move); print {"done":true,"grown":196608}; wait; exit 0.
 */
#define _GNU_SOURCE
#include "app-sync.h"

#include <sys/mman.h>

static void *volatile keep;

__attribute__((noinline)) static void grow_mapping(void)
{
    char *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        exit(1);
    m[0] = 1;
    char *g = mremap(m, 65536, 196608, MREMAP_MAYMOVE);
    if (g == MAP_FAILED)
        exit(1);
    keep = g;
}

int main(void)
{
    app_sync_init();
    app_sync_ready();
    grow_mapping();
    app_sync_say("{\"done\":true,\"grown\":196608}");
    app_sync_wait();
    return 0;
}
