/* heaptraced's body: configuration, log, server and loop (main and a service main call it). */
#include "daemon.h"

#include "commands.h"
#include "config.h"
#include "ht-endpoint.h"
#include "http.h"
#include "routes.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "sys/privileges.h"
#include "source.h"
#include "symbols.h"
#include "sources.h"

#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

/* Configuration file, then the options over it. 0 or the exit code (printed). */
/* libdw's debuginfod client asks the servers in DEBUGINFOD_URLS for every
 * debug file not found locally: main cleared the variable; put back only when
 * the configuration turns debuginfod on. */
static void debuginfod_setup(const struct run_opts *o, const struct ht_config *cfg)
{
#ifndef _WIN32
    if (cfg->debuginfod && o->debuginfod_urls && o->debuginfod_urls[0]) {
        setenv("DEBUGINFOD_URLS", o->debuginfod_urls, 1);
        log_info("debuginfod on: missing debug files are fetched from %.200s", o->debuginfod_urls);
    } else if (cfg->debuginfod) {
        log_warn("debuginfod is on in the configuration, but the daemon was started without "
                 "DEBUGINFOD_URLS: no server to ask");
    } else if (o->debuginfod_urls) {
        log_info("DEBUGINFOD_URLS ignored: debuginfod is off in the configuration (no network "
                 "lookups)");
    }
#else
    (void)o;
    (void)cfg;
#endif
}

static int run_config(const struct run_opts *o, struct ht_config *cfg)
{
    char err[512];
    config_defaults(cfg);
    if (o->config_path && config_load(cfg, o->config_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "heaptraced: %s\n", err);
        return 1;
    }
    if (o->log_level && (cfg->log_level = config_log_level(o->log_level)) < 0) {
        fprintf(stderr, "heaptraced: --log-level must be error, warn, info or debug\n");
        return 2;
    }
    const char *ep = ht_endpoint(o->pipe_name);
    if (o->pipe_name || getenv(HT_ENDPOINT_ENV))
        snprintf(cfg->endpoint, sizeof(cfg->endpoint), "%s", ep);
    return 0;
}

/* The server stops the HTTP listener with itself (server-state.h stop_hook). */
static void stop_http(void *arg)
{
    http_stop(arg);
    routes_free();
}

/* Serve until stopped. The exit code. */
static int run_loop(const struct run_opts *o, struct ht_config *cfg)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct server srv;
    if (server_start(&srv, &loop, cfg) != 0) {
        fprintf(stderr, "heaptraced: cannot start on %s (see the log above)\n", cfg->endpoint);
        uv_run(&loop, UV_RUN_DEFAULT); /* let the closed handles finish */
        uv_loop_close(&loop);
        return 1;
    }
    struct http *http = NULL;
    if (cfg->metrics_listen[0]) {
        char err[320];
        if (http_start(&srv, cfg->metrics_listen, http_routes, &http, err, sizeof(err)) != 0) {
            log_error("%s", err);
            server_stop(&srv);
            uv_run(&loop, UV_RUN_DEFAULT);
            uv_loop_close(&loop);
            return 1;
        }
        srv.stop_hook = stop_http;
        srv.stop_hook_arg = http;
        log_info("HTTP (GET /metrics, /debug/pprof/heap, /debug/pprof/allocs) on %s",
                 cfg->metrics_listen);
    }
    if (o->listening)
        o->listening(o->hook_arg);
    uv_run(&loop, UV_RUN_DEFAULT);
    metrics_sites_free(&srv);
    int rc = uv_loop_close(&loop);
    if (rc != 0)
        log_error("uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
    else
        log_info("stopped cleanly");
    return rc == 0 ? 0 : 1;
}

static void recover_log(void *arg, const char *msg)
{
    (void)arg;
    log_warn("%s", msg);
}

int heaptraced_run(const struct run_opts *o)
{
    struct ht_config cfg;
    int rc = run_config(o, &cfg);
    if (rc != 0)
        goto free_config;
    if (!cfg.log_file[0] && o->log_file_default)
        snprintf(cfg.log_file, sizeof(cfg.log_file), "%s", o->log_file_default);
    const char *log_file = o->foreground || !cfg.log_file[0] ? NULL : cfg.log_file;
    if (log_file && o->log_prepare && (rc = o->log_prepare(o->hook_arg, log_file)) != 0)
        goto free_config;
    if (log_open(cfg.log_level, log_file) != 0) {
        fprintf(stderr, "heaptraced: cannot open log file %s\n", cfg.log_file);
        rc = 1;
        goto free_config;
    }
    /* Missing privileges are logged (a warning each) and shown by version;
     * the daemon still serves replays without them. */
    privileges_enable();
    debuginfod_setup(o, &cfg);
    if (sym_set_search_path(cfg.symbol_path) != 0) {
        log_error("symbol_path \"%.200s\" refused: it is DbgHelp's search path, for Windows (valid "
                  "UTF-8); on Linux it must stay empty: separate debug files come from "
                  "/usr/lib/debug", cfg.symbol_path);
        rc = 1;
        goto close_log;
    }
    if (!dispatch_complete()) {
        log_error("internal: a command of the table has no handler");
        rc = 1;
        goto close_log;
    }
    /* What a crashed run left outside the daemon (ETW sessions, IFEO), and
     * at the end what this run left. */
    source_recover_all(recover_log, NULL);
    rc = run_loop(o, &cfg);
    source_recover_all(recover_log, NULL);
close_log:
    log_close();
free_config:
    config_free(&cfg);
    return rc;
}
