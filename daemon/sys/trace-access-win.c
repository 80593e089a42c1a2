/* Windows trace access: the administrator only. */
#include "trace-access.h"

#include "ht-error.h"

#include <stdio.h>

/* Tracing another process takes SeDebugPrivilege and an ETW session, both
 * the daemon's (LocalSystem) and both beyond what an operator may do
 * itself (docs/windows.md#the-heap-logger-session, #the-pipes-security-descriptor): members of
 * pipe_operators_group query sessions; only LocalSystem or an elevated administrator (uid 0) starts
 * one. */
int trace_access_open(const struct trace_who *who, uint64_t pid, int *handle, char *err,
                      size_t errsz)
{
    *handle = -1;
    if (who->uid == 0)
        return 0;
    snprintf(err, errsz,
             "only an elevated administrator may trace a process (%llu) on Windows: run as "
             "administrator",
             (unsigned long long)pid);
    return HT_EPERM;
}

/* Nothing was opened: the administrator's access does not change. */
int trace_access_confirm(const struct trace_who *who, uint64_t pid, int handle, char *err,
                         size_t errsz)
{
    return trace_access_open(who, pid, &handle, err, errsz);
}

void trace_access_close(int handle)
{
    (void)handle;
}
