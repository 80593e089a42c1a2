/* heaptraced: the command line; the daemon itself is heaptraced_run (daemon.c). */
#include "daemon.h"
#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "sys/service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: heaptraced [--config FILE] [--pipe NAME] [--foreground] [--log-level L]\n"
            "       heaptraced install | uninstall | run\n"
            "\n"
            "  --config FILE     JSON configuration (defaults: config/heaptraced.json)\n"
            "  --pipe NAME       control endpoint (default %s, or $%s)\n"
            "  --foreground      stay attached to the terminal, log to stderr\n"
            "  --log-level L     error, warn, info or debug\n"
            "  install           install and start the service (systemd unit; Windows service)\n"
            "  uninstall         stop and remove it\n"
            "  run               run under the service manager (the default)\n",
            HT_ENDPOINT_DEFAULT, HT_ENDPOINT_ENV);
}

int main(int argc, char **argv)
{
    struct run_opts o = {0};
    ht_alloc_init();
#ifndef _WIN32
    /* The symbolizer (libdw) would ask a debuginfod server over the network
     * for every module without local debug info: a root daemon does not. */
    unsetenv("DEBUGINFOD_URLS");
#endif
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config") && i + 1 < argc)
            o.config_path = argv[++i];
        else if (!strcmp(a, "--pipe") && i + 1 < argc)
            o.pipe_name = argv[++i];
        else if (!strcmp(a, "--log-level") && i + 1 < argc)
            o.log_level = argv[++i];
        else if (!strcmp(a, "--foreground"))
            o.foreground = 1;
        else if (!strcmp(a, "run"))
            continue; /* the default: under the service manager, or as from a console */
        else if (!strcmp(a, "install"))
            return service_install(argv[0]) == 0 ? 0 : 1;
        else if (!strcmp(a, "uninstall"))
            return service_uninstall() == 0 ? 0 : 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "heaptraced: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    /* In the foreground there is no service manager to talk to. */
    return o.foreground ? heaptraced_run(&o) : service_run(&o);
}
