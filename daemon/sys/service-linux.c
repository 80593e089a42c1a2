/* heaptraced install/uninstall on Linux: the systemd unit from config/heaptraced.service. */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UNIT_PATH "/etc/systemd/system/heaptraced.service"

/* config/heaptraced.service, embedded at build time. */
#include "service-unit.inc"

int service_install(const char *self, int install)
{
    (void)self;
    if (geteuid() != 0) {
        fprintf(stderr, "heaptraced: %s needs root\n", install ? "install" : "uninstall");
        return -1;
    }
    if (!install) {
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
