/* A process's private bytes (commit charge) from GetProcessMemoryInfo. */
#include "procmem.h"

#include "proc-win.h"

#include <string.h>
#include <uv.h>
#include <windows.h>
#include <psapi.h>

/* GetExitCodeProcess reads STILL_ACTIVE (259) for a running process, and
 * for one that exited with 259: the wait tells them apart
 * (learn.microsoft.com, GetExitCodeProcess). */
int proc_win_gone(HANDLE h)
{
    DWORD code;
    if (!GetExitCodeProcess(h, &code))
        return 0;
    return code != STILL_ACTIVE || WaitForSingleObject(h, 0) == WAIT_OBJECT_0;
}

int procmem_read(uint64_t pid, struct procmem *out)
{
    if (pid == 0 || pid > 0xffffffffu)
        return UV_ENOENT;
    /* PROCESS_QUERY_LIMITED_INFORMATION is enough for GetProcessMemoryInfo
     * since Windows 7 (learn.microsoft.com, GetProcessMemoryInfo, hProcess);
     * SYNCHRONIZE for the exit check. */
    HANDLE h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, FALSE, (DWORD)pid);
    if (!h) {
        DWORD e = GetLastError();
        /* A pid that names no process: ERROR_INVALID_PARAMETER. */
        return e == ERROR_INVALID_PARAMETER ? UV_ENOENT : uv_translate_sys_error((int)e);
    }
    int rc = 0;
    PROCESS_MEMORY_COUNTERS_EX pmc;
    memset(&pmc, 0, sizeof pmc);
    pmc.cb = sizeof pmc;
    if (proc_win_gone(h)) {
        rc = UV_ENOENT;
    } else if (!GetProcessMemoryInfo(h, (PROCESS_MEMORY_COUNTERS *)&pmc, sizeof pmc)) {
        rc = uv_translate_sys_error((int)GetLastError());
    } else {
        memset(out, 0, sizeof *out);
        /* Wine 8 fills only the base struct: PrivateUsage reads 0; on Windows
         * PagefileUsage equals it (docs/windows.md#what-wine-does-and-does-not-do). */
        out->private_bytes = pmc.PrivateUsage ? pmc.PrivateUsage : pmc.PagefileUsage;
    }
    CloseHandle(h);
    return rc;
}
