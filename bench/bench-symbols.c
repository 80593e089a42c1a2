/* Symbolizer cost on this process: first lookup in a module (cold) and lookups per second (warm).
 */
#define _GNU_SOURCE
#include "procmaps.h"
#include "symbols.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mem-acct.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct text_map {
    const char *name;
    uint64_t start, end;
};

static int text_cb(void *arg, const struct procmaps_entry *e)
{
    struct text_map *t = arg;
    const char *b = strrchr(e->path, '/');
    if ((e->prot & PROT_EXEC) && b && strncmp(b + 1, t->name, strlen(t->name)) == 0 && !t->start) {
        t->start = e->start;
        t->end = e->end;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Cold: a new cache and its first lookup in the module (maps scan, open,
 * symbol table read and sorted). Median of runs, in microseconds. */
static double bench_cold(uint64_t addr, int runs, char *name, size_t namesz)
{
    uint64_t t[64];
    if (runs > 64)
        runs = 64;
    for (int i = 0; i < runs; i++) {
        struct sym_cache *c;
        char buf[512];
        uint64_t t0 = now_ns();
        if (sym_cache_new(&c, (uint64_t)getpid(), NULL, MEM_symbols) != 0)
            return -1;
        const char *r = sym_cache_resolve(c, addr, 0, buf, sizeof buf);
        t[i] = now_ns() - t0;
        snprintf(name, namesz, "%s", r ? r : "(null)");
        sym_cache_free(c);
    }
    qsort(t, (size_t)runs, sizeof t[0], cmp_u64);
    return (double)t[runs / 2] / 1e3;
}

/* Warm: random addresses in the module's text, after the first lookup. */
static void bench_warm(const struct text_map *t, uint64_t lookups)
{
    struct sym_cache *c;
    struct sym_stats st;
    char buf[512];
    enum { N = 4096 };
    static uint64_t addrs[N];
    srand(1);
    for (int i = 0; i < N; i++)
        addrs[i] = t->start + ((uint64_t)rand() * 7919u) % (t->end - t->start);
    if (sym_cache_new(&c, (uint64_t)getpid(), NULL, MEM_symbols) != 0)
        return;
    sym_cache_resolve(c, addrs[0], 0, buf, sizeof buf);
    uint64_t named = 0, t0 = now_ns();
    for (uint64_t i = 0; i < lookups; i++) {
        const char *r = sym_cache_resolve(c, addrs[i % N], 1, buf, sizeof buf);
        named += r && !strstr(r, "!+0x");
    }
    uint64_t dt = now_ns() - t0;
    sym_cache_stats(c, &st);
    printf("%-16s warm: %8.0f ns/lookup, %10.0f lookups/s (%" PRIu64 " of %" PRIu64
           " named; %" PRIu64 " symbols, %" PRIu64 " bytes)\n",
           t->name, (double)dt / (double)lookups, (double)lookups * 1e9 / (double)dt, named,
           lookups, st.symbols, st.bytes);
    sym_cache_free(c);
}

/* The same addresses through libdwfl per call (dwfl_addrmodule +
 * dwfl_module_addrinfo), as docs/linux.md#symbols measured it. */
static void bench_dwfl(const struct text_map *t, uint64_t lookups)
{
    static char *dip = "/usr/lib/debug";
    static const Dwfl_Callbacks cbs = {.find_elf = dwfl_linux_proc_find_elf,
                                       .find_debuginfo = dwfl_standard_find_debuginfo,
                                       .debuginfo_path = &dip};
    Dwfl *d = dwfl_begin(&cbs);
    if (!d || dwfl_linux_proc_report(d, getpid()) != 0 || dwfl_report_end(d, NULL, NULL) != 0)
        return;
    srand(1);
    uint64_t named = 0, t0 = now_ns();
    for (uint64_t i = 0; i < lookups; i++) {
        uint64_t a = t->start + ((uint64_t)rand() * 7919u) % (t->end - t->start);
        Dwfl_Module *m = dwfl_addrmodule(d, a);
        GElf_Off off;
        GElf_Sym sym;
        named += m && dwfl_module_addrinfo(m, a, &off, &sym, NULL, NULL, NULL) != NULL;
    }
    uint64_t dt = now_ns() - t0;
    printf("%-16s libdwfl per call: %8.0f ns/lookup (%" PRIu64 " of %" PRIu64 " named)\n", t->name,
           (double)dt / (double)lookups, named, lookups);
    dwfl_end(d);
}

int main(int argc, char **argv)
{
    uint64_t lookups = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    uint64_t dwfl_lookups = argc > 3 ? strtoull(argv[3], NULL, 10) : 2000;
    /* libstdc++ for demangled C++ names. */
    void *cxx = dlopen("libstdc++.so.6", RTLD_NOW);
    if (!cxx)
        fprintf(stderr, "no libstdc++.so.6: %s\n", dlerror());
    struct text_map maps[] = {{"libc.so.6", 0, 0}, {"libstdc++.so.6", 0, 0}};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        if (procmaps_each((uint64_t)getpid(), text_cb, &maps[i]) != 0 || !maps[i].start)
            continue;
        char name[512];
        /* libc's malloc even when a sanitizer interposes one. */
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        uint64_t probe = i == 0 ? (uint64_t)(uintptr_t)(libc ? dlsym(libc, "malloc") : NULL)
                                : (uint64_t)(uintptr_t)(cxx ? dlsym(cxx, "_Znwm") : NULL);
        double cold = bench_cold(probe, runs, name, sizeof name);
        printf("%-16s cold: %8.0f us for the first lookup (median of %d; %s)\n", maps[i].name, cold,
               runs, name);
        bench_warm(&maps[i], lookups);
        if (dwfl_lookups)
            bench_dwfl(&maps[i], dwfl_lookups);
    }
    return 0;
}
