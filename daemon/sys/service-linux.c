/* heaptraced as a Linux service: the systemd unit from config/heaptraced.service. */
#include "service.h"

#include "daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UNIT_PATH "/etc/systemd/system/heaptraced.service"

/* config/heaptraced.service, embedded at build time. */
#include "service-unit.inc"

/* 0 when we run as root, else -1 with what needed it printed. */
static int service_need_root(const char *what)
{
    if (geteuid() == 0)
        return 0;
    fprintf(stderr, "heaptraced: %s needs root\n", what);
    return -1;
}

int service_uninstall(void)
{
    if (service_need_root("uninstall") != 0)
        return -1;
    if (system("systemctl disable --now heaptraced.service >/dev/null 2>&1") != 0)
        fprintf(stderr, "heaptraced: systemctl disable failed (continuing)\n");
    if (unlink(UNIT_PATH) != 0 && errno != ENOENT) {
        fprintf(stderr, "heaptraced: cannot remove %s: %s\n", UNIT_PATH, strerror(errno));
        return -1;
    }
    if (system("systemctl daemon-reload >/dev/null 2>&1") != 0)
        fprintf(stderr, "heaptraced: systemctl daemon-reload failed\n");
    printf("removed %s\n", UNIT_PATH);
    return 0;
}

int service_install(const char *self)
{
    (void)self; /* the unit names its own ExecStart */
    if (service_need_root("install") != 0)
        return -1;
    FILE *f = fopen(UNIT_PATH, "w");
    if (!f) {
        fprintf(stderr, "heaptraced: cannot write %s: %s\n", UNIT_PATH, strerror(errno));
        return -1;
    }
    fputs(ht_service_unit, f);
    if (fclose(f) != 0)
        return -1;
    if (system("getent group heaptrace >/dev/null || groupadd --system heaptrace") != 0)
        fprintf(stderr, "heaptraced: could not create group heaptrace\n");
    if (system("systemctl daemon-reload && systemctl enable --now heaptraced.service") != 0) {
        fprintf(stderr, "heaptraced: wrote %s, but systemctl could not enable it (no systemd?)\n",
                UNIT_PATH);
        return -1;
    }
    printf("installed and started %s\n", UNIT_PATH);
    return 0;
}

/* systemd starts and stops heaptraced as a plain process (SIGTERM to stop). */
int service_run(const struct run_opts *o)
{
    return heaptraced_run(o);
}
