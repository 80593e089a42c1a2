/* Platform: which processes a client may trace (trace-access-unix.c;
 * trace-access-win.c on Windows). */
#ifndef TRACE_ACCESS_H
#define TRACE_ACCESS_H

#include <stddef.h>
#include <stdint.h>

/* Supplementary groups of a client taken into account: as many as a Linux
 * process may have (NGROUPS_MAX, include/uapi/linux/limits.h); a client with
 * more is refused (never checked with fewer groups than it has). 256 KiB:
 * a struct trace_who goes on the heap. */
#define TRACE_GROUPS_MAX 65536

/* Who asks: a client's credentials as the endpoint saw them at its connect
 * (endpoint_peer_groups). uid 0 is the administrator. */
struct trace_who {
    uint32_t uid, gid;
    uint32_t ngroups;
    uint32_t groups[TRACE_GROUPS_MAX];
};

/* May who trace process pid? The daemon probes with its own privileges on
 * the client's behalf, so it asks what the client itself could. 0 with
 * *handle naming that very process (whatever later happens to the number
 * pid), to give to trace_access_confirm once attached and then to
 * trace_access_close; else an error with the reason in err and no handle
 * (HT_EPERM: refused; UV_ESRCH: no such process; HT_EBADARG: pid is a
 * thread of another process).
 * Linux: the kernel decides, as it would for a ptrace attach by the client
 * (PTRACE_MODE_ATTACH_REALCREDS); *handle is a pidfd. Windows: only the
 * administrator, whom the pipe's DACL admits; *handle is -1. */
int trace_access_open(const struct trace_who *who, uint64_t pid, int *handle, char *err,
                      size_t errsz);
/* After the attach: 0 if the process handle names is still alive (so the
 * number pid named it throughout the attach) and who may still trace it (it
 * did not exec a setuid program meanwhile); else an error with why. Root:
 * always 0. */
int trace_access_confirm(const struct trace_who *who, uint64_t pid, int handle, char *err,
                         size_t errsz);
void trace_access_close(int handle);

#endif
