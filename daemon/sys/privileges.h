/* Platform: the privileges live tracing needs, enabled once at daemon start
 * (privileges-win.c; privileges-unix.c). */
#ifndef PRIVILEGES_H
#define PRIVILEGES_H

/* One privilege and what enabling it gave. */
struct privilege {
    const char *name;   /* "SeDebugPrivilege" */
    const char *needed; /* what it is for, in a few words */
    int enabled;        /* 1 held and enabled */
    unsigned long code; /* the native error when not enabled (1300 ERROR_NOT_ALL_ASSIGNED) */
};

/* Enable every privilege the platform's tracing needs; each one missing is
 * logged as a warning (log.h) naming what it is for. Returns how many are
 * missing. Windows: SeDebugPrivilege and SeSystemProfilePrivilege with
 * AdjustTokenPrivileges. Unix: none (capabilities cannot be switched on the
 * way privileges are: the eBPF source checks its own, see its available()). */
int privileges_enable(void);
/* The outcome of the last privileges_enable (static storage): n entries. */
const struct privilege *privileges_list(unsigned *n);

#endif
