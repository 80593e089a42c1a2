/* heaptraced as a Windows service: install and uninstall through the service
 * control manager, and the service main that runs heaptraced_run under it. */
#include "service.h"

#include "daemon.h"
#include "log.h"
#include "stop.h"

#include <windows.h>
#include <aclapi.h>
#include <knownfolders.h>
#include <sddl.h>
#include <shlobj.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define SVC_DESCRIPTION                                                                            \
    L"heaptrace: live allocation tracing of processes (ETW heap sessions) and replays, "           \
    L"queried with heaptracectl over the pipe \\\\.\\pipe\\heaptrace."
/* Under HKLM: an event source is a key here holding EventMessageFile
 * (learn.microsoft.com, "Event Sources" and "Event Logging Elements":
 * HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\<source>). */
#define SVC_EVENTLOG_KEY L"SYSTEM\\CurrentControlSet\\Services\\EventLog\\Application\\"
/* Event ids of the message table (heaptraced-msg.mc): "%1" each. */
#define SVC_EVENT_ERROR 1u
#define SVC_EVENT_WARNING 2u
#define SVC_EVENT_INFO 3u
/* How long uninstall waits for a running service to stop. */
#define SVC_STOP_WAIT_MS 30000u
/* The log directory: SYSTEM and Administrators only, inherited by the log
 * file, not by the parent's ACEs (P: protected). OICI: object and container
 * inherit; FA: file all access (learn.microsoft.com, "ACE Strings"). */
#define SVC_LOG_DIR_SDDL L"D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"

/* ---- small helpers ---------------------------------------------------- */

/* UTF-8 to a new UTF-16 string (free), NULL when invalid or out of memory. */
static wchar_t *svc_wide(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    wchar_t *w = malloc((size_t)n * sizeof(*w));
    if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n) != n) {
        free(w);
        w = NULL;
    }
    return w;
}

/* The system's text for a Win32 error, in buf (UTF-8, no trailing newline). */
static const char *svc_strerror(DWORD err, char *buf, size_t n)
{
    wchar_t w[256];
    DWORD k = FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, err,
                             0, w, sizeof(w) / sizeof(w[0]), NULL);
    while (k > 0 &&
           (w[k - 1] == L'\n' || w[k - 1] == L'\r' || w[k - 1] == L' ' || w[k - 1] == L'.'))
        w[--k] = 0;
    if (k == 0 || WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)n, NULL, NULL) <= 0)
        snprintf(buf, n, "Win32 error");
    return buf;
}

/* Prints "heaptraced: WHAT: <system text> (CODE)" on stderr. */
static void svc_perror(const char *what, DWORD err)
{
    char b[512];
    fprintf(stderr, "heaptraced: %s: %s (%lu)\n", what, svc_strerror(err, b, sizeof(b)),
            (unsigned long)err);
}

/* A service name the SCM and the registry key both take: 1..256 characters,
 * no slash or backslash (learn.microsoft.com, "CreateServiceW": lpServiceName). */
static int svc_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= 256 && !strpbrk(name, "/\\\"");
}

/* The service's name as UTF-16 (free), or NULL with the reason printed. */
static wchar_t *svc_name_w(const struct service_opts *so)
{
    const char *name = so->name ? so->name : SERVICE_NAME_DEFAULT;
    wchar_t *w = svc_name_ok(name) ? svc_wide(name) : NULL;
    if (!w)
        fprintf(stderr,
                "heaptraced: bad service name \"%s\" (1 to 256 characters, no / \\ or \")\n", name);
    return w;
}

/* The SCM with the given rights, or NULL with the reason printed
 * ("run as administrator" when refused). */
static SC_HANDLE svc_scm(DWORD access)
{
    SC_HANDLE scm = OpenSCManagerW(NULL, NULL, access);
    if (!scm) {
        DWORD e = GetLastError();
        if (e == ERROR_ACCESS_DENIED)
            fprintf(stderr, "heaptraced: the service control manager refused access: run as "
                            "administrator (an elevated prompt)\n");
        else
            svc_perror("OpenSCManager", e);
    }
    return scm;
}

/* ---- install ------------------------------------------------------------ */

/* Appends s to the command line buf (cap wide characters), quoted when quote. -1 when
 * it does not fit or holds a quote (the SCM's command line has no escape for one). */
static int svc_cmdline_add(wchar_t *buf, size_t cap, const wchar_t *s, int quote)
{
    if (wcschr(s, L'"'))
        return -1;
    size_t len = wcslen(buf), n = wcslen(s);
    if (len + n + 4 >= cap)
        return -1;
    if (len)
        buf[len++] = L' ';
    if (quote)
        buf[len++] = L'"';
    wmemcpy(buf + len, s, n);
    len += n;
    if (quote)
        buf[len++] = L'"';
    buf[len] = 0;
    return 0;
}

/* The service's command line: this executable, quoted (a path with spaces
 * unquoted is the "unquoted service path" hole), then run and the options
 * given with install. 0, or -1 printed. */
static int svc_cmdline(const struct service_opts *so, wchar_t *buf, size_t cap, wchar_t *exe,
                       size_t exe_cap)
{
    DWORD n = GetModuleFileNameW(NULL, exe, (DWORD)exe_cap);
    if (n == 0 || n >= exe_cap) {
        svc_perror("GetModuleFileName", GetLastError());
        return -1;
    }
    buf[0] = 0;
    int rc = svc_cmdline_add(buf, cap, exe, 1) | svc_cmdline_add(buf, cap, L"run", 0);
    if (so->pipe_name) {
        wchar_t *p = svc_wide(so->pipe_name);
        rc |= !p || svc_cmdline_add(buf, cap, L"--pipe", 0) || svc_cmdline_add(buf, cap, p, 1);
        free(p);
    }
    if (so->config_path) {
        /* The service does not start in this directory: the config's full path. */
        wchar_t *c = svc_wide(so->config_path), full[MAX_PATH];
        DWORD k = c ? GetFullPathNameW(c, MAX_PATH, full, NULL) : 0;
        rc |= k == 0 || k >= MAX_PATH || svc_cmdline_add(buf, cap, L"--config", 0) ||
              svc_cmdline_add(buf, cap, full, 1);
        free(c);
    }
    if (rc) {
        fprintf(stderr, "heaptraced: the service's command line would be too long or the pipe "
                        "or config name has a quote in it\n");
        return -1;
    }
    return 0;
}

/* Description, and recovery: restart 5 s after the first failure, 30 s after
 * the second, then nothing; the count restarts after a day without one. A
 * failure is an exit without SERVICE_STOPPED, and with the flag below also a
 * SERVICE_STOPPED carrying an error code (learn.microsoft.com,
 * "SERVICE_FAILURE_ACTIONSW structure" and "SERVICE_FAILURE_ACTIONS_FLAG
 * structure"). The description and the actions must take; the flag may not
 * (warned). */
static int svc_configure(SC_HANDLE svc)
{
    SERVICE_DESCRIPTIONW desc = {(wchar_t *)SVC_DESCRIPTION};
    if (!ChangeServiceConfig2W(svc, SERVICE_CONFIG_DESCRIPTION, &desc)) {
        svc_perror("ChangeServiceConfig2 (description)", GetLastError());
        return -1;
    }
    SC_ACTION actions[3] = {
        {SC_ACTION_RESTART, 5000}, {SC_ACTION_RESTART, 30000}, {SC_ACTION_NONE, 0}};
    SERVICE_FAILURE_ACTIONSW fa = {0};
    fa.dwResetPeriod = 24 * 60 * 60;
    fa.cActions = 3;
    fa.lpsaActions = actions;
    if (!ChangeServiceConfig2W(svc, SERVICE_CONFIG_FAILURE_ACTIONS, &fa)) {
        svc_perror("ChangeServiceConfig2 (recovery actions)", GetLastError());
        return -1;
    }
    SERVICE_FAILURE_ACTIONS_FLAG flag = {TRUE};
    if (!ChangeServiceConfig2W(svc, SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, &flag)) {
        DWORD e = GetLastError();
        if (e == ERROR_INVALID_LEVEL) /* wine 8's SCM has no such level */
            fprintf(stderr, "heaptraced: note: this service manager has no "
                            "SERVICE_CONFIG_FAILURE_ACTIONS_FLAG: the service is restarted when "
                            "it dies, not when it stops with an error code\n");
        else
            svc_perror("warning: ChangeServiceConfig2 (restart after an error exit too)", e);
    }
    return 0;
}

/* The event log source NAME, its messages in exe (heaptraced-msg.mc). 0 or -1 printed. */
static int svc_eventlog_add(const wchar_t *name, const wchar_t *exe)
{
    wchar_t key[512];
    swprintf(key, sizeof(key) / sizeof(key[0]), L"%ls%ls", SVC_EVENTLOG_KEY, name);
    HKEY k;
    LSTATUS st =
        RegCreateKeyExW(HKEY_LOCAL_MACHINE, key, 0, NULL, 0, KEY_SET_VALUE, NULL, &k, NULL);
    if (st != ERROR_SUCCESS) {
        svc_perror("cannot register the event log source", (DWORD)st);
        return -1;
    }
    DWORD types = EVENTLOG_ERROR_TYPE | EVENTLOG_WARNING_TYPE | EVENTLOG_INFORMATION_TYPE;
    st = RegSetValueExW(k, L"EventMessageFile", 0, REG_EXPAND_SZ, (const BYTE *)exe,
                        (DWORD)((wcslen(exe) + 1) * sizeof(*exe)));
    if (st == ERROR_SUCCESS)
        st =
            RegSetValueExW(k, L"TypesSupported", 0, REG_DWORD, (const BYTE *)&types, sizeof(types));
    RegCloseKey(k);
    if (st != ERROR_SUCCESS) {
        svc_perror("cannot write the event log source", (DWORD)st);
        return -1;
    }
    return 0;
}

/* Removes the event log source NAME: 1 removed, 0 there was none, -1 failed (printed). */
static int svc_eventlog_remove(const wchar_t *name)
{
    wchar_t key[512];
    swprintf(key, sizeof(key) / sizeof(key[0]), L"%ls%ls", SVC_EVENTLOG_KEY, name);
    LSTATUS st = RegDeleteKeyW(HKEY_LOCAL_MACHINE, key);
    if (st == ERROR_SUCCESS)
        return 1;
    if (st == ERROR_FILE_NOT_FOUND)
        return 0;
    svc_perror("cannot remove the event log source", (DWORD)st);
    return -1;
}

/* Waits up to ms for svc to leave its pending state: the state it ends in, 0 on error. */
static DWORD svc_wait(SC_HANDLE svc, DWORD pending, DWORD ms)
{
    SERVICE_STATUS_PROCESS sp;
    DWORD need;
    ULONGLONG until = GetTickCount64() + ms;
    for (;;) {
        if (!QueryServiceStatusEx(svc, SC_STATUS_PROCESS_INFO, (BYTE *)&sp, sizeof(sp), &need))
            return 0;
        if (sp.dwCurrentState != pending || GetTickCount64() >= until)
            return sp.dwCurrentState;
        Sleep(100);
    }
}

/* Start an automatic service now, as at boot; its state is printed. */
static void svc_start_now(SC_HANDLE svc, const char *name)
{
    if (!StartServiceW(svc, 0, NULL)) {
        svc_perror("installed, but StartService failed", GetLastError());
        return;
    }
    DWORD st = svc_wait(svc, SERVICE_START_PENDING, SVC_STOP_WAIT_MS);
    if (st == SERVICE_RUNNING)
        printf("started service %s\n", name);
    else
        fprintf(stderr,
                "heaptraced: service %s did not reach RUNNING (state %lu): see its log "
                "and the Application event log\n",
                name, (unsigned long)st);
}

int service_install(const char *self, const struct service_opts *so)
{
    (void)self; /* GetModuleFileNameW gives the full path; argv[0] may be relative */
    wchar_t cmd[2048], exe[MAX_PATH];
    wchar_t *name = svc_name_w(so);
    const char *name8 = so->name ? so->name : SERVICE_NAME_DEFAULT;
    if (!name || svc_cmdline(so, cmd, sizeof(cmd) / sizeof(cmd[0]), exe, MAX_PATH) != 0) {
        free(name);
        return -1;
    }
    int rc = -1;
    SC_HANDLE scm = svc_scm(SC_MANAGER_CONNECT | SC_MANAGER_CREATE_SERVICE), svc = NULL;
    if (!scm)
        goto free_name;
    wchar_t display[300];
    swprintf(display, sizeof(display) / sizeof(display[0]), L"heaptrace daemon (%ls)", name);
    /* NULL account: LocalSystem (learn.microsoft.com, "CreateServiceW": lpServiceStartName). */
    svc = CreateServiceW(scm, name, display, SERVICE_ALL_ACCESS, SERVICE_WIN32_OWN_PROCESS,
                         so->manual_start ? SERVICE_DEMAND_START : SERVICE_AUTO_START,
                         SERVICE_ERROR_NORMAL, cmd, NULL, NULL, NULL, NULL, NULL);
    if (!svc) {
        DWORD e = GetLastError();
        if (e == ERROR_SERVICE_EXISTS || e == ERROR_DUPLICATE_SERVICE_NAME)
            fprintf(stderr,
                    "heaptraced: a service %s exists already (heaptraced uninstall --name "
                    "%s removes it)\n",
                    name8, name8);
        else if (e == ERROR_SERVICE_MARKED_FOR_DELETE)
            fprintf(stderr,
                    "heaptraced: service %s is still being deleted: its process has not "
                    "exited yet\n",
                    name8);
        else
            svc_perror("CreateService", e);
        goto close_scm;
    }
    /* All or nothing: a service half configured is deleted again. */
    if (svc_configure(svc) != 0 || svc_eventlog_add(name, exe) != 0) {
        DeleteService(svc);
        svc_eventlog_remove(name);
        goto close_svc;
    }
    printf("installed service %s (%s start, LocalSystem): %ls\n", name8,
           so->manual_start ? "manual" : "automatic", cmd);
    rc = 0;
    if (!so->manual_start)
        svc_start_now(svc, name8);
close_svc:
    CloseServiceHandle(svc);
close_scm:
    CloseServiceHandle(scm);
free_name:
    free(name);
    return rc;
}

/* ---- uninstall ---------------------------------------------------------- */

/* Stops svc if it runs, waiting SVC_STOP_WAIT_MS at most. 1 stopped (or was), 0 not. */
static int svc_stop(SC_HANDLE svc, const char *name)
{
    SERVICE_STATUS ss;
    if (!QueryServiceStatus(svc, &ss)) {
        svc_perror("QueryServiceStatus", GetLastError());
        return 0;
    }
    if (ss.dwCurrentState == SERVICE_STOPPED)
        return 1;
    if (ss.dwCurrentState != SERVICE_STOP_PENDING &&
        !ControlService(svc, SERVICE_CONTROL_STOP, &ss)) {
        DWORD e = GetLastError();
        if (e != ERROR_SERVICE_NOT_ACTIVE) {
            svc_perror("ControlService (stop)", e);
            return 0;
        }
    }
    DWORD st = svc_wait(svc, SERVICE_STOP_PENDING, SVC_STOP_WAIT_MS);
    if (st == SERVICE_STOPPED) {
        printf("stopped service %s\n", name);
        return 1;
    }
    fprintf(stderr, "heaptraced: service %s did not stop within %u s (state %lu)\n", name,
            SVC_STOP_WAIT_MS / 1000, (unsigned long)st);
    return 0;
}

int service_uninstall(const struct service_opts *so)
{
    wchar_t *name = svc_name_w(so);
    const char *name8 = so->name ? so->name : SERVICE_NAME_DEFAULT;
    if (!name)
        return -1;
    int rc = -1;
    SC_HANDLE scm = svc_scm(SC_MANAGER_CONNECT);
    if (!scm)
        goto free_name;
    SC_HANDLE svc = OpenServiceW(scm, name, SERVICE_STOP | SERVICE_QUERY_STATUS | DELETE);
    if (!svc) {
        DWORD e = GetLastError();
        if (e == ERROR_SERVICE_DOES_NOT_EXIST)
            fprintf(stderr, "heaptraced: no service %s\n", name8);
        else
            svc_perror("OpenService", e);
        /* A source left by an install that failed half way goes too. */
        if (svc_eventlog_remove(name) == 1)
            printf("removed the event log source %s\n", name8);
        goto close_scm;
    }
    int stopped = svc_stop(svc, name8);
    if (!DeleteService(svc)) {
        DWORD e = GetLastError();
        if (e != ERROR_SERVICE_MARKED_FOR_DELETE) {
            svc_perror("DeleteService", e);
            CloseServiceHandle(svc);
            goto close_scm;
        }
    }
    CloseServiceHandle(svc);
    printf("removed service %s\n", name8);
    rc = 0;
    if (!stopped) {
        /* The SCM deletes a marked service once its process exits and every
         * handle to it is closed (learn.microsoft.com, "DeleteService"). */
        printf("left: service %s still runs; it is marked for deletion and goes when its process "
               "exits\n",
               name8);
        rc = -1;
    }
    int ev = svc_eventlog_remove(name);
    if (ev == 1)
        printf("removed the event log source %s\n", name8);
    else if (ev < 0) {
        printf("left: the event log source %s (HKLM\\%ls%ls)\n", name8, SVC_EVENTLOG_KEY, name);
        rc = -1;
    }
    printf("left: the log files (%%ProgramData%%\\heaptrace, or the config's log_file), on "
           "purpose\n");
close_scm:
    CloseServiceHandle(scm);
free_name:
    free(name);
    return rc;
}

/* ---- running under the SCM ---------------------------------------------- */

/* The running service (one per process: SERVICE_WIN32_OWN_PROCESS). */
static struct {
    const struct run_opts *opts;
    SERVICE_STATUS_HANDLE handle;
    HANDLE events;         /* RegisterEventSourceW, NULL if not */
    CRITICAL_SECTION lock; /* status: the control handler runs on another thread */
    SERVICE_STATUS status;
    char log_default[MAX_PATH];
    int exit_code;
} svc;

/* Tells the SCM the state. Controls are accepted only while RUNNING: a stop
 * before the loop watches for one would be lost. Checkpoints count up while
 * pending (learn.microsoft.com, "SERVICE_STATUS structure"). */
static void svc_report(DWORD state, DWORD win32, DWORD specific, DWORD wait_hint)
{
    EnterCriticalSection(&svc.lock);
    SERVICE_STATUS *s = &svc.status;
    /* Once stopping, a late "listening" does not make it RUNNING again. */
    if (!(state == SERVICE_RUNNING && s->dwCurrentState == SERVICE_STOP_PENDING)) {
        s->dwServiceType = SERVICE_WIN32_OWN_PROCESS;
        s->dwControlsAccepted =
            state == SERVICE_RUNNING ? SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN : 0;
        s->dwCheckPoint = state == SERVICE_RUNNING || state == SERVICE_STOPPED
                              ? 0
                              : (s->dwCurrentState == state ? s->dwCheckPoint + 1 : 1);
        s->dwCurrentState = state;
        s->dwWin32ExitCode = win32;
        s->dwServiceSpecificExitCode = specific;
        s->dwWaitHint = wait_hint;
        SetServiceStatus(svc.handle, s);
    }
    LeaveCriticalSection(&svc.lock);
}

/* The control handler, on the dispatcher's thread. */
static DWORD WINAPI svc_ctrl(DWORD control, DWORD type, void *data, void *ctx)
{
    (void)type;
    (void)data;
    (void)ctx;
    switch (control) {
    case SERVICE_CONTROL_STOP:
    case SERVICE_CONTROL_SHUTDOWN:
        svc_report(SERVICE_STOP_PENDING, NO_ERROR, 0, 30000);
        stop_watch_request(control == SERVICE_CONTROL_STOP ? "service stop" : "system shutdown");
        return NO_ERROR;
    case SERVICE_CONTROL_INTERROGATE:
        /* The SCM keeps the last status; answering is enough
         * (learn.microsoft.com, "HandlerEx callback function"). */
        return NO_ERROR;
    default:
        return ERROR_CALL_NOT_IMPLEMENTED;
    }
}

/* Warnings and errors of the log also go to the Application event log. */
static void svc_event_sink(void *arg, int level, const char *line)
{
    (void)arg;
    if (!svc.events)
        return;
    wchar_t *w = svc_wide(line);
    const wchar_t *strs[1] = {w ? w : L"(a log line that is not UTF-8)"};
    WORD type = level == LOG_ERROR ? EVENTLOG_ERROR_TYPE : EVENTLOG_WARNING_TYPE;
    DWORD id = level == LOG_ERROR ? SVC_EVENT_ERROR : SVC_EVENT_WARNING;
    ReportEventW(svc.events, type, 0, id, NULL, 1, 0, strs, NULL);
    free(w);
}

static void svc_event(WORD type, DWORD id, const char *fmt, int arg)
{
    char line[512];
    snprintf(line, sizeof(line), fmt, arg);
    if (!svc.events)
        return;
    wchar_t *w = svc_wide(line);
    const wchar_t *strs[1] = {w};
    if (w)
        ReportEventW(svc.events, type, 0, id, NULL, 1, 0, strs, NULL);
    free(w);
}

/* Creates path's directory with SVC_LOG_DIR_SDDL, or gives an existing one
 * that DACL (protected): %ProgramData% lets any user create a folder, so one
 * made by someone else must not keep its ACL. 0 or 1 (the reason in the
 * event log). */
static int svc_log_prepare(void *arg, const char *path)
{
    (void)arg;
    svc_report(SERVICE_START_PENDING, NO_ERROR, 0, 10000); /* configuration read: a checkpoint */
    wchar_t *w = svc_wide(path);
    wchar_t *slash = w ? wcsrchr(w, L'\\') : NULL;
    if (!slash) {
        free(w);
        return 0; /* no directory part: the current one, not ours */
    }
    *slash = 0;
    PSECURITY_DESCRIPTOR sd = NULL;
    int rc = 1;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(SVC_LOG_DIR_SDDL, SDDL_REVISION_1,
                                                              &sd, NULL)) {
        svc_event(EVENTLOG_ERROR_TYPE, SVC_EVENT_ERROR, "log directory: bad SDDL (%d)",
                  (int)GetLastError());
        goto free_path;
    }
    SECURITY_ATTRIBUTES sa = {sizeof(sa), sd, FALSE};
    if (CreateDirectoryW(w, &sa)) {
        rc = 0;
    } else if (GetLastError() == ERROR_ALREADY_EXISTS) {
        BOOL present = FALSE, defaulted = FALSE;
        PACL dacl = NULL;
        DWORD e = GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted)
                      ? SetNamedSecurityInfoW(w, SE_FILE_OBJECT,
                                              DACL_SECURITY_INFORMATION |
                                                  PROTECTED_DACL_SECURITY_INFORMATION,
                                              NULL, NULL, dacl, NULL)
                      : GetLastError();
        if (e == ERROR_SUCCESS)
            rc = 0;
        else
            svc_event(EVENTLOG_ERROR_TYPE, SVC_EVENT_ERROR,
                      "the log directory exists and its DACL cannot be set to SYSTEM and "
                      "Administrators only: Win32 error %d",
                      (int)e);
    } else {
        svc_event(EVENTLOG_ERROR_TYPE, SVC_EVENT_ERROR,
                  "cannot create the log directory: Win32 error %d", (int)GetLastError());
    }
    LocalFree(sd);
free_path:
    free(w);
    return rc;
}

static void svc_listening(void *arg)
{
    (void)arg;
    svc_report(SERVICE_RUNNING, NO_ERROR, 0, 0);
}

/* %ProgramData%\heaptrace\heaptraced.log: the service's data directory.
 * The known folder, not the environment variable: a service's environment
 * is not the operator's (wine's services.exe even gives it another
 * ProgramData). FOLDERID_ProgramData (learn.microsoft.com, "KNOWNFOLDERID"). */
static void svc_default_log(void)
{
    wchar_t *pd = NULL;
    char pd8[MAX_PATH];
    if (SHGetKnownFolderPath(&FOLDERID_ProgramData, 0, NULL, &pd) != S_OK ||
        WideCharToMultiByte(CP_ACP, 0, pd, -1, pd8, sizeof(pd8), NULL, NULL) <= 0)
        snprintf(pd8, sizeof(pd8), "C:\\ProgramData");
    CoTaskMemFree(pd);
    snprintf(svc.log_default, sizeof(svc.log_default), "%s\\heaptrace\\heaptraced.log", pd8);
}

static void WINAPI svc_main(DWORD argc, wchar_t **argv)
{
    const wchar_t *name = argc > 0 && argv[0] ? argv[0] : L"" SERVICE_NAME_DEFAULT;
    svc.handle = RegisterServiceCtrlHandlerExW(name, svc_ctrl, NULL);
    if (!svc.handle) {
        svc.exit_code = 1; /* nothing to report to: the SCM sees the process end */
        return;
    }
    svc.events = RegisterEventSourceW(NULL, name);
    svc_report(SERVICE_START_PENDING, NO_ERROR, 0, 10000);
    struct run_opts o = *svc.opts;
    svc_default_log();
    o.log_file_default = svc.log_default;
    o.log_prepare = svc_log_prepare;
    o.listening = svc_listening;
    o.hook_arg = NULL;
    log_set_sink(svc_event_sink, NULL);
    int rc = heaptraced_run(&o);
    log_set_sink(NULL, NULL);
    if (rc != 0)
        svc_event(EVENTLOG_ERROR_TYPE, SVC_EVENT_ERROR,
                  "heaptraced stopped with exit code %d: see its log file (an error "
                  "before it opens shows with heaptraced run --foreground and the service's "
                  "--config and --pipe)",
                  rc);
    svc.exit_code = rc;
    if (svc.events)
        DeregisterEventSource(svc.events);
    svc.events = NULL;
    /* Last: after SERVICE_STOPPED the SCM may end the process. A nonzero code
     * is service specific (learn.microsoft.com, "SERVICE_STATUS structure":
     * dwWin32ExitCode ERROR_SERVICE_SPECIFIC_ERROR). */
    svc_report(SERVICE_STOPPED, rc == 0 ? NO_ERROR : ERROR_SERVICE_SPECIFIC_ERROR, (DWORD)rc, 0);
}

int service_run(const struct run_opts *o)
{
    svc.opts = o;
    InitializeCriticalSection(&svc.lock);
    /* An own-process service's table name is not looked at, but must not be
     * NULL (learn.microsoft.com, "SERVICE_TABLE_ENTRYW structure"). */
    SERVICE_TABLE_ENTRYW table[] = {{(wchar_t *)L"", svc_main}, {NULL, NULL}};
    if (StartServiceCtrlDispatcherW(table))
        return svc.exit_code;
    DWORD e = GetLastError();
    if (e != ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
        svc_perror("StartServiceCtrlDispatcher", e);
        return 1;
    }
    /* Started from a console, not by the SCM: run here (Ctrl-C stops). */
    return heaptraced_run(o);
}
