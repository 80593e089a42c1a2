/* Platform: heaptraced as a system service (service-linux.c: a systemd unit;
 * service-win.c on Windows: the service control manager). */
#ifndef SERVICE_H
#define SERVICE_H

struct run_opts;

#define SERVICE_NAME_DEFAULT "heaptraced"

/* What install and uninstall were asked (main.c); NULL or 0 keeps the default. */
struct service_opts {
    const char *name;        /* --name NAME: the service (default SERVICE_NAME_DEFAULT) */
    int manual_start;        /* --start manual (else auto: started at boot) */
    const char *config_path; /* --config/--pipe given with install: the service's */
    const char *pipe_name;   /* command line passes them to `run` */
};

/* Install the service and start it (Windows: started now only when
 * automatic). self is this executable's path (the Windows service runs it;
 * the systemd unit names its own). 0, or -1 with the reason printed on
 * stderr. */
int service_install(const char *self, const struct service_opts *so);
/* Stop the service (a bounded wait) and remove it; says on stdout what it
 * removed and what was left. 0, or -1 with the reason printed. */
int service_uninstall(const struct service_opts *so);
/* Run the daemon the way the service manager expects and return its exit
 * code. Linux: systemd runs heaptraced as a plain process, so this is
 * heaptraced_run. Windows: StartServiceCtrlDispatcherW; the service main
 * registers the control handler (it feeds sys/stop.h), reports
 * SERVICE_RUNNING once the endpoint listens, calls heaptraced_run and reports
 * SERVICE_STOPPED with its exit code; started from a console instead
 * (ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) it calls heaptraced_run itself. */
int service_run(const struct run_opts *o);

#endif
