/*
 * The modules (executable and DLLs) loaded in a Windows process: the Windows
 * counterpart of procmaps_modules (procmaps.h). procmaps.h is shaped by
 * /proc/PID/maps and ELF (a mapping list, map_files, inodes, build ids from
 * PT_NOTE, an ELF load bias); a Windows process has none of these: a module
 * is an image base, a size and a file, which is all this header carries.
 * procmods-win.c: EnumProcessModulesEx(LIST_MODULES_ALL) +
 * GetModuleInformation + GetModuleFileNameExW. Windows only.
 */
#ifndef PROCMODS_H
#define PROCMODS_H

#include <stddef.h>
#include <stdint.h>

#define PROCMODS_PATH_MAX 1024 /* UTF-8 bytes; a longer path is cut */
#define PROCMODS_MAX 4096

struct procmods_module {
    uint64_t base, size;          /* the image in the process: [base, base + size) */
    char path[PROCMODS_PATH_MAX]; /* UTF-8, as GetModuleFileNameExW gives it */
};

/* Every module of pid (the executable first, as the loader lists it), as an
 * array the caller frees with ht_free. At most PROCMODS_MAX. 0, UV_ENOENT
 * (no such process, or it exited), UV_EACCES, or another UV_E* error. */
int procmods_list(uint64_t pid, struct procmods_module **out, size_t *n);

/* The file name of a module path: what follows its last '\\' or '/'. */
const char *procmods_basename(const char *path);

#endif
