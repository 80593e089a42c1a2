/* Unix output files: mkstemp next to the target, its mode, fsync, rename(2). */
#include "out-file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Not a regular file (/dev/null, a fifo, a terminal): written in place. */
static int out_open_direct(struct out_file *o)
{
    o->f = fopen(o->path, "w");
    if (!o->f) {
        fprintf(stderr, "heaptracectl: %s: %s\n", o->path, strerror(errno));
        return -1;
    }
    return 0;
}

int out_file_create(struct out_file *o)
{
    struct stat st;
    int exists = stat(o->path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode))
        return out_open_direct(o);
    /* A symlink is followed: its target is replaced, not the link. */
    o->real = realpath(o->path, NULL);
    const char *target = o->real ? o->real : o->path;
    const char *slash = strrchr(target, '/');
    size_t dl = slash ? (size_t)(slash - target) + 1 : 0;
    size_t n = strlen(target) + 16;
    o->tmp = malloc(n);
    if (!o->tmp)
        return -1;
    snprintf(o->tmp, n, "%.*s.%s.XXXXXX", (int)dl, target, target + dl);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        /* The error is the new file's, not the target's: writing onto
         * /proc/version said "No such file or directory" of a file that is. */
        fprintf(stderr,
                "heaptracectl: %s: cannot create the file written before it replaces it (%s): %s\n",
                o->path, o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    mode_t mask = umask(0);
    umask(mask);
    /* The target's mode if it exists, else what fopen(path, "w") would make. */
    fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~mask);
    o->f = fdopen(fd, "w");
    if (!o->f) {
        fprintf(stderr, "heaptracectl: %s: %s\n", o->path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

int out_file_sync(FILE *f)
{
    return fsync(fileno(f));
}

int out_file_replace(const char *tmp, const char *target)
{
    return rename(tmp, target);
}
