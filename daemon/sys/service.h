/* Platform: heaptraced as a system service (service-linux.c: a systemd unit;
 * service-win.c on Windows: the service control manager). */
#ifndef SERVICE_H
#define SERVICE_H

struct run_opts;

/* Install the service and start it. self is this executable's path (the
 * Windows service runs it; the systemd unit names its own). 0, or -1 with
 * the reason printed on stderr. */
int service_install(const char *self);
/* Stop and remove the service. 0, or -1 with the reason printed. */
int service_uninstall(void);
/* Run the daemon the way the service manager expects and return its exit
 * code. Linux: systemd runs heaptraced as a plain process, so this is
 * heaptraced_run. Windows: StartServiceCtrlDispatcherW; the service main
 * registers the control handler (it feeds sys/stop.h), reports
 * SERVICE_RUNNING, calls heaptraced_run and reports SERVICE_STOPPED with its
 * exit code; started from a console instead
 * (ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) it calls heaptraced_run itself. */
int service_run(const struct run_opts *o);

#endif
