/* Windows: enable SeDebugPrivilege and SeSystemProfilePrivilege in the
 * daemon's own token (docs/windows.md#the-heap-logger-session: opening other users' processes
 * for DbgHelp and GetProcessMemoryInfo; kernel stacks in the heap session). */
#include "privileges.h"

#include "log.h"

#include <windows.h>

#include <stdio.h>
#include <stdlib.h>

static struct privilege privs[3] = {
    {"SeDebugPrivilege", "open other users' processes (symbols, private bytes)", 0, 0},
    {"SeSystemProfilePrivilege", "ETW heap tracing with kernel stacks", 0, 0},
};
static unsigned nprivs = 2;

#ifdef HEAPTRACE_TEST_KNOBS
/* HEAPTRACED_TEST_PRIVILEGE=NAME: one privilege more, for the tests of the
 * missing path (wine's token holds both of ours; it lacks e.g.
 * SeCreateTokenPrivilege, and has no CreateRestrictedToken to take ours away). */
static void privileges_knob(void)
{
    static char name[64];
    const char *e = getenv("HEAPTRACED_TEST_PRIVILEGE");
    if (!e || !*e || nprivs != 2)
        return;
    snprintf(name, sizeof(name), "%s", e);
    privs[2] = (struct privilege){name, "pass the test (HEAPTRACED_TEST_PRIVILEGE)", 0, 0};
    nprivs = 3;
}
#else
static void privileges_knob(void) {}
#endif

/* 0, or the Win32 error. AdjustTokenPrivileges succeeds even when the token
 * does not hold the privilege: it then sets ERROR_NOT_ALL_ASSIGNED, so the
 * last error is read after a success too (learn.microsoft.com, "AdjustTokenPrivileges
 * function (securitybaseapi.h)", Return value). A privilege the token lacks
 * cannot be added, only enabled when present. */
static DWORD privilege_enable(HANDLE token, const char *name)
{
    TOKEN_PRIVILEGES tp;
    tp.PrivilegeCount = 1;
    tp.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
    if (!LookupPrivilegeValueA(NULL, name, &tp.Privileges[0].Luid))
        return GetLastError();
    SetLastError(ERROR_SUCCESS);
    if (!AdjustTokenPrivileges(token, FALSE, &tp, sizeof(tp), NULL, NULL))
        return GetLastError();
    return GetLastError();
}

int privileges_enable(void)
{
    HANDLE token = NULL;
    DWORD open_err = 0;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY, &token))
        open_err = GetLastError();
    int missing = 0;
    privileges_knob();
    for (unsigned i = 0; i < nprivs; i++) {
        struct privilege *p = &privs[i];
        p->code = token ? privilege_enable(token, p->name) : open_err;
        p->enabled = p->code == ERROR_SUCCESS;
        if (p->enabled) {
            log_debug("privilege %s enabled", p->name);
            continue;
        }
        missing++;
        if (p->code == ERROR_NOT_ALL_ASSIGNED)
            log_warn("privilege %s is not held by this account (needed to %s): run heaptraced "
                     "as LocalSystem (the service) or from an elevated administrator prompt",
                     p->name, p->needed);
        else
            log_warn("privilege %s could not be enabled (needed to %s): Win32 error %lu", p->name,
                     p->needed, p->code);
    }
    if (token)
        CloseHandle(token);
    return missing;
}

const struct privilege *privileges_list(unsigned *n)
{
    *n = nprivs;
    return privs;
}
