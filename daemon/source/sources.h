/*
 * The sources built in (sources.def) and picking one for a mode
 * (sources.c): what the daemon and the commands that open sources use.
 * A backend includes source.h only, so that the list depends on the
 * backends and no backend on the list.
 */
#ifndef SOURCES_H
#define SOURCES_H

#include "source.h"

/* The registration list (sources.def), in order of preference. */
extern const struct source_ops *const source_list[];
extern const unsigned source_count;

/* The first source serving mode (or the one called name, when not NULL), or
 * NULL with why in err: no backend built for the mode, or the named one does
 * not serve it. */
const struct source_ops *source_pick(unsigned mode, const char *name, char *err, size_t errsz);
/* Every backend's recover (daemon start and stop): calls log(arg, msg) for
 * each that undid something. */
void source_recover_all(void (*log)(void *arg, const char *msg), void *arg);

#endif
