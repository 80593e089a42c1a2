/*
 * Which allocator entry points a process actually calls: the objects it
 * maps, in the dynamic linker's symbol-resolution order (the executable,
 * preloaded libraries, then DT_NEEDED breadth first, then the rest), and for
 * each function the first object that defines it. So jemalloc or tcmalloc
 * linked into the executable or preloaded is found, not only libc.
 */
#ifndef HT_BPF_RESOLVE_H
#define HT_BPF_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

#define RESOLVE_PATH_MAX 4200

/* One place to attach. */
struct resolve_point {
    char attach_path[RESOLVE_PATH_MAX]; /* a path the kernel opens: /proc/PID/map_files/... */
    char module[RESOLVE_PATH_MAX];      /* the module's path as the process maps it */
    const char *name;                   /* the first function found at this address */
    uint64_t file_offset;               /* of the probe (function + probe_off) */
    uint64_t addr;                      /* runtime address of the function */
    unsigned probe_off;                 /* bytes past the entry (prologue.h) */
    unsigned fn;                        /* enum hb_fn */
    unsigned aliases;                   /* other names found at the same address */
    int emulated;                       /* the kernel emulates the instruction probed */
    char why[96];                       /* if not: why no emulated site (prologue.h) */
};

/* The allocator functions of pid, one point per distinct address, as an
 * array the caller frees with ht_free; with hints, also the functions that
 * allocate through malloc without frame pointers (HB_FN_HINT). 0; UV_ENOENT/UV_ESRCH (no such
 * process), UV_ENOENT with "no allocator symbol" in err, or another error,
 * with a message for people in err. */
int resolve_points(uint64_t pid, int hints, struct resolve_point **out, size_t *n, char *err,
                   size_t errsz);

/* Where resolve_points would probe the allocator function name of the ELF
 * file at path (its dynamic symbols): its address in *vaddr and the site.
 * 0; UV_EINVAL (not a function probed), UV_ENOENT (not defined there), or
 * the error opening the file. */
struct prologue_site;
int resolve_file_site(const char *path, const char *name, uint64_t *vaddr,
                      struct prologue_site *site);

/* The enum hb_fn of an allocator symbol name (0 if not one), and whether it
 * is an operator delete. */
unsigned resolve_fn_of(const char *name, int *is_delete);

#endif
