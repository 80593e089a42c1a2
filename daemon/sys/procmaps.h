/*
 * A process's mappings and modules from /proc/PID/maps (Linux). Used by live
 * sources (which objects define the allocator, module load events) and the
 * symbolizer. Files are opened through /proc/PID/map_files/START-END, so a
 * module deleted or replaced on disk, or in another mount namespace, is still
 * the one the process runs.
 */
#ifndef PROCMAPS_H
#define PROCMAPS_H

#include <stddef.h>
#include <stdint.h>

#define PROCMAPS_PATH_MAX 4096
#define PROCMAPS_BUILD_ID_MAX 64 /* bytes; hex text is twice that plus NUL */

struct procmaps_entry {
    uint64_t start, end, offset, inode;
    unsigned prot;  /* PROT_READ/WRITE/EXEC bits */
    int shared;     /* 's' (else private) */
    const char *path; /* "" for anonymous; "[heap]", "[stack]"... as the kernel names them */
};

/* Call cb for each mapping in address order; cb returns nonzero to stop.
 * 0, or UV_ENOENT (no such process), UV_EACCES, or another UV_E* error. */
int procmaps_each(uint64_t pid, int (*cb)(void *arg, const struct procmaps_entry *e), void *arg);

/* One ELF object mapped from a file. */
struct procmaps_module {
    uint64_t start, end; /* lowest mapping start, highest mapping end */
    uint64_t bias;       /* load bias: runtime address - ELF virtual address */
    uint64_t first_map_end; /* end of the lowest mapping: map_files name is start-first_map_end */
    char path[PROCMAPS_PATH_MAX];
    char build_id[2 * PROCMAPS_BUILD_ID_MAX + 1]; /* hex, "" when none */
};

/* Every file-backed ELF module of pid (executable first if mapped first), as
 * an array the caller frees with ht_free. 0 or a UV_E* error. */
int procmaps_modules(uint64_t pid, struct procmaps_module **out, size_t *n);

/* Open a module's file as the process sees it (map_files, else
 * /proc/PID/root/PATH). A descriptor, or a negative UV_E* error. */
int procmaps_open_module(uint64_t pid, const struct procmaps_module *m);

#endif
