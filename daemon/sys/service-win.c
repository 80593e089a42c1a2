/* PLACEHOLDER (h-svc replaces this file): heaptraced under the SCM, not built yet. */
#include "service.h"

#include "daemon.h"

#include <stdio.h>

int service_install(const char *self)
{
    (void)self;
    fprintf(stderr, "heaptraced: install: the Windows service is not built yet\n");
    return -1;
}

int service_uninstall(void)
{
    fprintf(stderr, "heaptraced: uninstall: the Windows service is not built yet\n");
    return -1;
}

/* No dispatcher yet: the daemon runs as from a console. */
int service_run(const struct run_opts *o)
{
    return heaptraced_run(o);
}
