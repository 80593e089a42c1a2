/* The ctl's output files (-o FILE): written with the user's own rights and
 * replaced only when complete (out-file.c; the platform part in
 * out-file-unix.c, out-file-win.c on Windows). */
#ifndef OUT_FILE_H
#define OUT_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Opened only once the daemon accepted the request, filled under a temporary
 * name in the same directory, put in the target's place only when every
 * write, the flush and the close succeeded. "-" or no -o is stdout. */
struct out_file {
    const char *path;
    char *real; /* the path with symlinks resolved (NULL if it does not exist yet) */
    char *tmp;  /* NULL when written in place (stdout, a device, a fifo) */
    FILE *f;
    int failed;
};

/* Open output (NULL or "-": stdout). 0, or -1 with the reason printed. */
int out_open(struct out_file *o, const char *output);
/* Write n bytes. 0, or -1 once a write failed (the first failure is printed). */
int out_write(struct out_file *o, const char *s, size_t n);
int out_puts(struct out_file *o, const char *s);
/* Drop a failed or refused output: the target is left as it was. */
void out_abort(struct out_file *o);
/* Flush, sync and close, then put the file in place. 0 or -1 (printed). */
int out_commit(struct out_file *o);

/* Platform. Open o->path (set) for writing: in place when it is not a
 * regular file, else a temporary file next to its target (symlinks
 * followed) with the mode the target has or fopen would give it; sets f,
 * tmp and real. 0, or -1 with the reason printed. */
int out_file_create(struct out_file *o);
/* The temporary file's bytes on disk (Unix fsync; Windows FlushFileBuffers). 0 or -1. */
int out_file_sync(FILE *f);
/* Put tmp in target's place in one step. Unix: rename(2). Windows:
 * MoveFileExW with MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH, since
 * rename fails there when the target exists. 0 or -1 (errno set). */
int out_file_replace(const char *tmp, const char *target);

#endif
