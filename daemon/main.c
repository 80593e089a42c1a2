/* heaptraced: the daemon. Options, configuration, the loop, install/uninstall. */
#include "config.h"
#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "log.h"
#include "commands.h"
#include "server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int service_install(const char *self, int install);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: heaptraced [--config FILE] [--pipe NAME] [--foreground] [--log-level L]\n"
            "       heaptraced install | uninstall\n"
            "\n"
            "  --config FILE     JSON configuration (defaults: config/heaptraced.json)\n"
            "  --pipe NAME       control endpoint (default %s, or $%s)\n"
            "  --foreground      stay attached to the terminal, log to stderr\n"
            "  --log-level L     error, warn, info or debug\n"
            "  install           install and enable the systemd unit\n"
            "  uninstall         disable and remove it\n",
            HT_ENDPOINT_DEFAULT, HT_ENDPOINT_ENV);
}

int main(int argc, char **argv)
{
    const char *config_path = NULL, *pipe_name = NULL, *level = NULL;
    int foreground = 0;
    ht_alloc_init();
    /* The symbolizer (libdw) would ask a debuginfod server over the network
     * for every module without local debug info: a root daemon does not. */
    unsetenv("DEBUGINFOD_URLS");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config") && i + 1 < argc)
            config_path = argv[++i];
        else if (!strcmp(a, "--pipe") && i + 1 < argc)
            pipe_name = argv[++i];
        else if (!strcmp(a, "--log-level") && i + 1 < argc)
            level = argv[++i];
        else if (!strcmp(a, "--foreground"))
            foreground = 1;
        else if (!strcmp(a, "install") || !strcmp(a, "uninstall"))
            return service_install(argv[0], !strcmp(a, "install")) == 0 ? 0 : 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "heaptraced: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    struct ht_config cfg;
    config_defaults(&cfg);
    char err[512];
    if (config_path && config_load(&cfg, config_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "heaptraced: %s\n", err);
        config_free(&cfg);
        return 1;
    }
    if (level && (cfg.log_level = config_log_level(level)) < 0) {
        fprintf(stderr, "heaptraced: --log-level must be error, warn, info or debug\n");
        config_free(&cfg);
        return 2;
    }
    const char *ep = ht_endpoint(pipe_name);
    if (pipe_name || getenv(HT_ENDPOINT_ENV))
        snprintf(cfg.endpoint, sizeof(cfg.endpoint), "%s", ep);
    if (log_open(cfg.log_level, foreground ? NULL : cfg.log_file) != 0) {
        fprintf(stderr, "heaptraced: cannot open log file %s\n", cfg.log_file);
        config_free(&cfg);
        return 1;
    }
    if (!dispatch_complete()) {
        log_error("internal: a command of the table has no handler");
        return 1;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct server srv;
    int rc = server_start(&srv, &loop, &cfg);
    if (rc != 0) {
        fprintf(stderr, "heaptraced: cannot start on %s (see the log above)\n", cfg.endpoint);
        uv_run(&loop, UV_RUN_DEFAULT); /* let the closed handles finish */
        uv_loop_close(&loop);
        config_free(&cfg);
        log_close();
        return 1;
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&loop);
    if (rc != 0)
        log_error("uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
    else
        log_info("stopped cleanly");
    config_free(&cfg);
    log_close();
    return rc == 0 ? 0 : 1;
}
