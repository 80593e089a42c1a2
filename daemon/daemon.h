/* heaptraced's body, the same whether main or a service manager starts it (daemon.c). */
#ifndef DAEMON_H
#define DAEMON_H

/* What the command line chose; NULL or 0 keeps the default. */
struct run_opts {
    const char *config_path; /* --config FILE */
    const char *pipe_name;   /* --pipe NAME (else $HEAPTRACE_PIPE, else the configuration's) */
    const char *log_level;   /* --log-level L */
    int foreground;          /* log to stderr instead of the log file */
    /* DEBUGINFOD_URLS as the daemon was started with (main clears it from the
     * environment; the configuration's "debuginfod" puts it back), or NULL. */
    const char *debuginfod_urls;
    /* Set by a service manager's glue (service-win.c), else NULL. */
    const char *log_file_default; /* the log file when the configuration names none */
    /* Called with the log file's path before it is opened (the service makes
     * its directory); 0 or the exit code, the reason printed on stderr. */
    int (*log_prepare)(void *arg, const char *path);
    /* Called once the endpoint listens and stop requests are watched: the
     * service reports SERVICE_RUNNING. */
    void (*listening)(void *arg);
    void *hook_arg;
};

/* Load the configuration, open the log, listen and run the loop until a stop
 * request or a shutdown command. Returns the process's exit code: 0 stopped
 * cleanly, 1 error (printed, or in the log once it is open), 2 bad option. */
int heaptraced_run(const struct run_opts *o);

#endif
