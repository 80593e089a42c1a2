/* ht-itest's Windows part (ht-itest.h): pipe names, a server as a
 * non-administrator, Ctrl-C on a console of our own, a shell's redirection. */
#include "ht-itest.h"

#include <windows.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pipe names live in their own namespace: unique per run and case. */
void itest_endpoint(char *buf, size_t n, const char *dir, unsigned counter)
{
    (void)dir;
    snprintf(buf, n, "\\\\.\\pipe\\ht-test-%d-%u", (int)uv_os_getpid(), counter);
}

static HANDLE untrusted_proc;

/* A primary token like ours with Administrators deny-only, as UAC's filtered
 * token has it (CreateRestrictedToken, SidsToDisable:
 * https://learn.microsoft.com/windows/win32/api/securitybaseapi/nf-securitybaseapi-createrestrictedtoken),
 * and the server started with it (CreateProcessAsUserW: a token of our own
 * needs no privilege). */
int itest_untrusted_start(const char *ep, const char *dir)
{
    HANDLE self = NULL, restricted = NULL;
    BYTE admins[SECURITY_MAX_SID_SIZE];
    DWORD asz = sizeof(admins);
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_ALL_ACCESS, &self) ||
        !CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, admins, &asz)) {
        fprintf(stderr, "cannot read our token: %lu\n", (unsigned long)GetLastError());
        return -1;
    }
    SID_AND_ATTRIBUTES deny = {admins, 0};
    int ok = CreateRestrictedToken(self, 0, 1, &deny, 0, NULL, 0, NULL, &restricted);
    CloseHandle(self);
    if (!ok) {
        fprintf(stderr, "CreateRestrictedToken: %lu\n", (unsigned long)GetLastError());
        return -1;
    }
    wchar_t exe[MAX_PATH], cmd[3 * MAX_PATH + 64];
    wchar_t wep[300], wdir[MAX_PATH];
    GetModuleFileNameW(NULL, exe, MAX_PATH);
    MultiByteToWideChar(CP_UTF8, 0, ep, -1, wep, 300);
    MultiByteToWideChar(CP_UTF8, 0, dir, -1, wdir, MAX_PATH);
    _snwprintf(cmd, sizeof(cmd) / sizeof(cmd[0]), L"\"%ls\" --serve \"%ls\" \"%ls\"", exe, wep,
               wdir);
    cmd[sizeof(cmd) / sizeof(cmd[0]) - 1] = 0;
    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof(si));
    si.cb = sizeof(si);
    ok = CreateProcessAsUserW(restricted, NULL, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi);
    DWORD e = GetLastError();
    CloseHandle(restricted);
    if (!ok) {
        fprintf(stderr, "CreateProcessAsUserW: %lu\n", (unsigned long)e);
        return -1;
    }
    CloseHandle(pi.hThread);
    untrusted_proc = pi.hProcess;
    return 0;
}

void itest_untrusted_wait(void)
{
    if (WaitForSingleObject(untrusted_proc, 20000) != WAIT_OBJECT_0)
        TerminateProcess(untrusted_proc, 1);
    CloseHandle(untrusted_proc);
}

static BOOL WINAPI itest_ctrl_cb(DWORD type)
{
    return type == CTRL_C_EVENT; /* the driver itself stays */
}

/* A console of our own, shared with the children started with child_on_console, so that the
 * Ctrl-C reaches no other process (ctest's): as test-stop does. 0, or 77. */
int itest_interrupt_prepare(void)
{
    FreeConsole();
    if (!AllocConsole()) {
        printf("skip: no console could be made for Ctrl-C (AllocConsole: error %lu)\n",
               (unsigned long)GetLastError());
        return 77;
    }
    SetConsoleCtrlHandler(NULL, FALSE); /* not ignored, whatever our parent said */
    SetConsoleCtrlHandler(itest_ctrl_cb, TRUE);
    return 0;
}

/* Ctrl-C to every process on our console (group 0): the recorder, and us (ignored). */
int itest_interrupt_send(struct child *c)
{
    (void)c;
    if (!GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)) {
        fprintf(stderr, "GenerateConsoleCtrlEvent: error %lu\n", (unsigned long)GetLastError());
        return -1;
    }
    return 0;
}

int itest_run_redirected(char **argv, const char *in_path, const char *out_path)
{
    char line[8192];
    size_t n = 0;
    for (int i = 0; argv[i]; i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s\"%s\"", i ? " " : "", argv[i]);
    wchar_t wline[8192], win[1200], wout[1200];
    MultiByteToWideChar(CP_UTF8, 0, line, -1, wline, 8192);
    MultiByteToWideChar(CP_UTF8, 0, in_path, -1, win, 1200);
    MultiByteToWideChar(CP_UTF8, 0, out_path, -1, wout, 1200);
    SECURITY_ATTRIBUTES sa = {sizeof(sa), NULL, TRUE};
    HANDLE in = CreateFileW(win, GENERIC_READ, FILE_SHARE_READ, &sa, OPEN_EXISTING, 0, NULL);
    HANDLE out = CreateFileW(wout, GENERIC_WRITE, FILE_SHARE_READ, &sa, CREATE_ALWAYS, 0, NULL);
    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof(si));
    si.cb = sizeof(si);
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = in;
    si.hStdOutput = si.hStdError = out;
    int rc = -1;
    if (in != INVALID_HANDLE_VALUE && out != INVALID_HANDLE_VALUE &&
        CreateProcessW(NULL, wline, NULL, NULL, TRUE, CREATE_NO_WINDOW, NULL, NULL, &si, &pi)) {
        DWORD code = 1;
        if (WaitForSingleObject(pi.hProcess, ITEST_CMD_MS) != WAIT_OBJECT_0)
            TerminateProcess(pi.hProcess, 1);
        else if (GetExitCodeProcess(pi.hProcess, &code))
            rc = (int)code;
        CloseHandle(pi.hThread);
        CloseHandle(pi.hProcess);
    } else {
        fprintf(stderr, "cannot run %s: %lu\n", argv[0], (unsigned long)GetLastError());
    }
    if (in != INVALID_HANDLE_VALUE)
        CloseHandle(in);
    if (out != INVALID_HANDLE_VALUE)
        CloseHandle(out);
    return rc;
}
