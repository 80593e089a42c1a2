/* Unix trace access: on Linux a client's own processes by /proc/PID/status; elsewhere root only. */
#include "trace-access.h"

#include "ht-error.h"

#include <stdio.h>

/* The daemon probes as root on the client's behalf, so a client admitted
 * without being root (the heaptrace group) traces only a process whose real,
 * effective, saved and filesystem uids are all its own: what ptrace(2) asks
 * of an unprivileged tracer (PTRACE_MODE_REALCREDS). A PID without a status
 * file is left to the source to report. */
int trace_access_check(uint32_t uid, uint64_t pid, char *err, size_t errsz)
{
    if (uid == 0)
        return 0;
#ifdef __linux__
    char path[64], line[256];
    unsigned r = 0, e = 0, sv = 0, fs = 0;
    int found = 0;
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "Uid: %u %u %u %u", &r, &e, &sv, &fs) == 4;
    fclose(f);
    if (found && r == uid && e == uid && sv == uid && fs == uid)
        return 0;
    snprintf(err, errsz,
             "uid %u may not trace process %llu (uid %u): only root traces another user's process",
             (unsigned)uid, (unsigned long long)pid, found ? e : 0u);
    return HT_EPERM;
#else
    (void)pid;
    snprintf(err, errsz, "only root may trace a process on this platform");
    return HT_EPERM;
#endif
}
