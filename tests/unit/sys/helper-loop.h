/* The helpers' shared part: print "name address" lines, then obey commands read from stdin. */
#ifndef HELPER_LOOP_H
#define HELPER_LOOP_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void helper_put(const char *name, const void *addr)
{
    printf("%s %p\n", name, addr);
}

/* "alloc": 64 MiB malloc'd and touched; "quit" or end of input: exit. */
static int helper_loop(void)
{
    char line[64];
    helper_put("malloc", dlsym(RTLD_DEFAULT, "malloc"));
    helper_put("free", dlsym(RTLD_DEFAULT, "free"));
    helper_put("calloc", dlsym(RTLD_DEFAULT, "calloc"));
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "alloc", 5) == 0) {
            size_t n = (size_t)64 << 20;
            char *p = (char *)malloc(n);
            if (p)
                memset(p, 1, n);
            printf("%s\n", p ? "ok" : "fail");
            fflush(stdout);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
    }
    return 0;
}

#endif
