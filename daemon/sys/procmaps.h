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
#define PROCMAPS_MODULES_MAX 4096

struct procmaps_entry {
    uint64_t start, end, offset, inode;
    unsigned prot;    /* PROT_READ/WRITE/EXEC bits */
    int shared;       /* 's' (else private) */
    int deleted;      /* the kernel marked the file " (deleted)"; path has the suffix removed */
    const char *path; /* "" for anonymous; "[heap]", "[stack]"... as the kernel names them (a
                         newline in a file name reads "\012", as the kernel escapes it) */
};

/* Call cb for each mapping in address order; cb returns nonzero to stop.
 * e->path is valid during the call only. A line that does not parse (or is
 * longer than a path can be) is skipped. 0, or UV_ENOENT (no such process),
 * UV_EACCES, or another UV_E* error. */
int procmaps_each(uint64_t pid, int (*cb)(void *arg, const struct procmaps_entry *e), void *arg);

/* The same parser on maps text read from fd to its end (tests, fuzzers): a
 * name ending in " (deleted)" is taken as deleted without checking. */
int procmaps_parse_fd(int fd, int (*cb)(void *arg, const struct procmaps_entry *e), void *arg);

/* One ELF object mapped from a file. */
struct procmaps_module {
    uint64_t start, end;    /* lowest mapping start, highest mapping end */
    uint64_t bias;          /* load bias: runtime address - ELF virtual address */
    uint64_t first_map_end; /* end of the lowest mapping: map_files name is start-first_map_end */
    uint64_t inode;         /* as in the maps; the /proc/PID/root fallback must match it */
    int deleted;            /* the file was deleted or replaced on disk since it was mapped */
    char path[PROCMAPS_PATH_MAX];
    char build_id[2 * PROCMAPS_BUILD_ID_MAX + 1]; /* hex, "" when none */
};

/* Every file-backed ELF module of pid (executable first if mapped first), as
 * an array the caller frees with ht_free. A module starts at a mapping of
 * file offset 0 (or at the first mapping of a file not seen before); later
 * mappings of the same path and inode join it. Files that are not ELF are
 * left out. At most PROCMAPS_MODULES_MAX modules. 0 or a UV_E* error. */
int procmaps_modules(uint64_t pid, struct procmaps_module **out, size_t *n);

/* Open a module's file as the process sees it (map_files, else
 * /proc/PID/root/PATH when the file was not deleted and its inode still
 * matches). O_RDONLY|O_CLOEXEC; the caller closes it. A descriptor, or a
 * negative UV_E* error. */
int procmaps_open_module(uint64_t pid, const struct procmaps_module *m);

/* Build id (hex, "" when the file has none) and load bias of the ELF file fd
 * when its mapping at map_start holds file offset map_offset: read through
 * libelf from the program headers and the PT_NOTE segments. 0, or HT_EBADARG
 * for a file that is not a usable ELF object. */
int procmaps_elf_info(int fd, uint64_t map_start, uint64_t map_offset, uint64_t *bias,
                      char *build_id, size_t build_id_sz);

#endif
