/*
 * A target for the live eBPF test: after a line on stdin, makes an exactly
 * known set of allocations (sizes chosen so the test can pick them out of
 * libc's own), a mapping outside the allocator, then waits for another line
 * and exits with code 7. Volatile sinks keep the compiler from removing calls
 * (docs/linux.md#mmap-family-accounting).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void leaf_alloc(void)
{
    void *keep[8];
    for (int i = 0; i < 5; i++) /* 5 malloc(777), all freed */
        keep[i] = malloc(777);
    for (int i = 0; i < 5; i++)
        free(keep[i]);
    void *c = calloc(3, 259); /* calloc 777 */
    c = realloc(c, 7777);     /* realloc 777 -> 7777, kept */
    sink = c;
    void *p = NULL;
    if (posix_memalign(&p, 64, 555) == 0) /* 555, freed */
        free(p);
    sink = aligned_alloc(256, 2048); /* 2048, leaked */
    void *big = malloc(3 << 20);     /* an mmap inside malloc: heap, not a commit */
    memset(big, 1, 4096);
    free(big);
}

__attribute__((noinline)) static void map_region(void)
{
    /* One commit of 64 KiB outside the allocator, released. */
    char *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
        m[0] = 1;
        munmap(m, 65536);
    }
}

int main(void)
{
    char line[16];
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ready %d\n", (int)getpid());
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    leaf_alloc();
    map_region();
    printf("done\n");
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 7;
}
