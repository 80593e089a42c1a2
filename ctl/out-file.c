/* The ctl's output files: stdout or a temporary file put in place when complete. */
#include "out-file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int out_open(struct out_file *o, const char *output)
{
    memset(o, 0, sizeof(*o));
    if (!output || !strcmp(output, "-")) {
        o->f = stdout;
        return 0;
    }
    o->path = output;
    return out_file_create(o);
}

/* Report the first failure with the system's message; later writes are skipped. */
static int out_fail(struct out_file *o)
{
    if (!o->failed)
        fprintf(stderr, "heaptracectl: %s: %s\n", o->path ? o->path : "standard output",
                strerror(errno ? errno : EIO));
    o->failed = 1;
    return -1;
}

int out_write(struct out_file *o, const char *s, size_t n)
{
    if (o->failed)
        return -1;
    errno = 0;
    if (n && fwrite(s, 1, n, o->f) != n)
        return out_fail(o);
    return 0;
}

int out_puts(struct out_file *o, const char *s)
{
    return out_write(o, s, strlen(s));
}

void out_abort(struct out_file *o)
{
    if (o->f && o->f != stdout)
        fclose(o->f);
    if (o->tmp)
        remove(o->tmp);
    free(o->tmp);
    free(o->real);
    memset(o, 0, sizeof(*o));
}

int out_commit(struct out_file *o)
{
    if (o->failed) {
        out_abort(o);
        return -1;
    }
    errno = 0;
    if (o->f == stdout) {
        int rc = fflush(stdout) == 0 ? 0 : out_fail(o);
        memset(o, 0, sizeof(*o));
        return rc;
    }
    int rc = 0;
    if (fflush(o->f) != 0 || (o->tmp && out_file_sync(o->f) != 0))
        rc = out_fail(o);
    if (fclose(o->f) != 0 && rc == 0)
        rc = out_fail(o);
    o->f = NULL;
    const char *target = o->real ? o->real : o->path;
    if (rc == 0 && o->tmp && out_file_replace(o->tmp, target) != 0)
        rc = out_fail(o);
    if (rc != 0 && o->tmp)
        remove(o->tmp);
    free(o->tmp);
    free(o->real);
    memset(o, 0, sizeof(*o));
    return rc;
}
