/* The registration list (sources.def) and picking a source for a mode (sources.h). */
#include "sources.h"

#include "ht-error.h"

#include <stdio.h>
#include <string.h>

const struct source_ops *const source_list[] = {
#define X(name, ops) &ops,
#include "sources.def"
#undef X
};
const unsigned source_count = sizeof(source_list) / sizeof(source_list[0]);

static const char *mode_word(unsigned mode)
{
    switch (mode) {
    case SOURCE_STREAM:
        return "recorded streams";
    case SOURCE_PID:
        return "attaching to a running process (--pid)";
    case SOURCE_IMAGE:
        return "tracing an image name (--exe)";
    default:
        return "launching a program (run)";
    }
}

const struct source_ops *source_pick(unsigned mode, const char *name, char *err, size_t errsz)
{
    for (unsigned i = 0; i < source_count; i++) {
        const struct source_ops *o = source_list[i];
        if (name && strcmp(o->name, name) != 0)
            continue;
        if (o->modes & mode)
            return o;
        if (!name) /* the first source serving the mode: keep looking */
            continue;
        snprintf(err, errsz, "source \"%s\" does not serve %s", name, mode_word(mode));
        return NULL;
    }
    if (name) {
        size_t n =
            (size_t)snprintf(err, errsz, "no source named \"%s\" in this build (built:", name);
        for (unsigned i = 0; i < source_count && n < errsz; i++)
            n += (size_t)snprintf(err + n, errsz - n, "%s%s", i ? ", " : " ", source_list[i]->name);
        if (n < errsz)
            snprintf(err + n, errsz - n, ")");
    } else {
        snprintf(err, errsz, "this build has no source for %s", mode_word(mode));
    }
    return NULL;
}

void source_recover_all(void (*log)(void *arg, const char *msg), void *arg)
{
    for (unsigned i = 0; i < source_count; i++) {
        char msg[256] = "";
        if (source_list[i]->recover && source_list[i]->recover(msg, sizeof(msg)) > 0 && log)
            log(arg, msg);
    }
}
