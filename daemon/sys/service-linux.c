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

/* The unit is heaptraced.service: another name or a manual start is a
 * Windows option (systemd's own tools do those). 0 or -1, printed. */
static int service_check_opts(const struct service_opts *so)
{
    if (so->name && strcmp(so->name, SERVICE_NAME_DEFAULT) != 0) {
        fprintf(stderr, "heaptraced: --name is for Windows services; the unit is %s\n", UNIT_PATH);
        return -1;
    }
    if (so->manual_start || so->config_path || so->pipe_name) {
        fprintf(stderr,
                "heaptraced: --start, --config and --pipe with install are for Windows "
                "services; edit %s (ExecStart) instead\n",
                UNIT_PATH);
        return -1;
    }
    return 0;
}

/* 0 when we run as root, else -1 with what needed it printed. */
static int service_need_root(const char *what)
{
    if (geteuid() == 0)
        return 0;
    fprintf(stderr, "heaptraced: %s needs root\n", what);
    return -1;
}

int service_uninstall(const struct service_opts *so)
{
    if (service_check_opts(so) != 0 || service_need_root("uninstall") != 0)
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

int service_install(const char *self, const struct service_opts *so)
{
    (void)self; /* the unit names its own ExecStart */
    if (service_check_opts(so) != 0 || service_need_root("install") != 0)
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
