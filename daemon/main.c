/* heaptraced: the command line; the daemon itself is heaptraced_run (daemon.c). */
#include "config.h"
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
            "usage: heaptraced [run] [--config FILE] [--pipe NAME] [--foreground] [--log-level L]\n"
#ifdef _WIN32
            "       heaptraced install [--start auto|manual] [--name NAME]\n"
            "                          [--config FILE] [--pipe NAME]\n"
            "       heaptraced uninstall [--name NAME]\n"
#else
            "       heaptraced install | uninstall\n"
#endif
            "\n"
            "  --config FILE     JSON configuration (defaults: config/heaptraced.json)\n"
            "  --pipe NAME       control endpoint (default %s, or $%s)\n"
            "  --foreground      stay attached to the terminal, log to stderr\n"
            "  --log-level L     error, warn, info or debug\n"
            "  --help-config     every configuration key: type, default, range, meaning\n"
            "                    (--help-config=markdown: docs/configuration.md)\n"
#ifdef _WIN32
            "  run               run under the service control manager (what the service's\n"
            "                    command line says); from a console it runs there instead\n"
            "  install           register the Windows service (LocalSystem, restarted after\n"
            "                    a failure) and its event log source; --config and --pipe go\n"
            "                    into the service's command line\n"
            "  --start auto      start at boot, and now (the default); manual: sc start NAME\n"
            "  --name NAME       the service's name (default " SERVICE_NAME_DEFAULT ")\n"
            "  uninstall         stop the service (30 s at most) and remove it\n",
#else
            "  run               run the daemon (the default)\n"
            "  install           install and enable the systemd unit\n"
            "  uninstall         disable and remove it\n",
#endif
            HT_ENDPOINT_DEFAULT, HT_ENDPOINT_ENV);
}

enum cmd { CMD_RUN, CMD_INSTALL, CMD_UNINSTALL };

/* One option of install or uninstall (they are parsed with the rest). 1 taken, 0 not
 * one of them, -1 bad value (printed). */
static int parse_service_opt(int argc, char **argv, int *i, struct service_opts *so)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--name") && *i + 1 < argc) {
        so->name = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--start") && *i + 1 < argc) {
        const char *v = argv[++*i];
        if (strcmp(v, "auto") != 0 && strcmp(v, "manual") != 0) {
            fprintf(stderr, "heaptraced: --start must be auto or manual\n");
            return -1;
        }
        so->manual_start = !strcmp(v, "manual");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct run_opts o = {0};
    struct service_opts so = {0};
    enum cmd cmd = CMD_RUN;
    int service_opt = 0;
    ht_alloc_init();
#ifndef _WIN32
    /* The symbolizer (libdw) would ask a debuginfod server over the network
     * for every module without local debug info: a root daemon does not,
     * unless the configuration turns debuginfod on (daemon.c). The string
     * stays valid: it is in the environment block the process started with. */
    o.debuginfod_urls = getenv("DEBUGINFOD_URLS");
    unsetenv("DEBUGINFOD_URLS");
#endif
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = parse_service_opt(argc, argv, &i, &so);
        if (r < 0)
            return 2;
        if (r > 0) {
            service_opt = 1;
            continue;
        }
        if (!strcmp(a, "--config") && i + 1 < argc)
            o.config_path = argv[++i];
        else if (!strcmp(a, "--pipe") && i + 1 < argc)
            o.pipe_name = argv[++i];
        else if (!strcmp(a, "--log-level") && i + 1 < argc)
            o.log_level = argv[++i];
        else if (!strcmp(a, "--foreground"))
            o.foreground = 1;
        else if (!strcmp(a, "run"))
            cmd = CMD_RUN;
        else if (!strcmp(a, "install"))
            cmd = CMD_INSTALL;
        else if (!strcmp(a, "uninstall"))
            cmd = CMD_UNINSTALL;
        else if (!strcmp(a, "--help-config") || !strcmp(a, "--help-config=text") ||
                 !strcmp(a, "--help-config=markdown")) {
            config_help(stdout, !strcmp(a, "--help-config=markdown"));
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "heaptraced: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (service_opt && cmd == CMD_RUN) {
        fprintf(stderr, "heaptraced: --name and --start go with install or uninstall\n");
        return 2;
    }
    if (cmd == CMD_INSTALL) {
        so.config_path = o.config_path;
        so.pipe_name = o.pipe_name;
        return service_install(argv[0], &so) == 0 ? 0 : 1;
    }
    if (cmd == CMD_UNINSTALL)
        return service_uninstall(&so) == 0 ? 0 : 1;
    /* In the foreground there is no service manager to talk to. */
    return o.foreground ? heaptraced_run(&o) : service_run(&o);
}
