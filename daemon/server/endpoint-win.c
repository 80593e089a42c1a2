/* Windows endpoint: a named pipe with our DACL on every instance, one daemon per name, token
 * checks. */
#include "endpoint.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <windows.h>

#include <fcntl.h>
#include <io.h>
#include <sddl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define PIPE_PREFIX "\\\\.\\pipe\\"
/* Pipe names are at most 256 characters, prefix included (CreateNamedPipeW,
 * https://learn.microsoft.com/windows/win32/api/winbase/nf-winbase-createnamedpipew). */
#define PIPE_NAME_MAX 256
/* In and out buffer sizes: libuv's for its own instances (src/win/pipe.c). */
#define PIPE_BUF_BYTES 65536
/* A new instance that could not be made is tried again after this long. */
#define RETRY_MS 1000
/* Only LocalSystem and (elevated) Administrators, protected from inherited
 * ACEs; GA includes FILE_CREATE_PIPE_INSTANCE (docs/windows.md#the-pipes-security-descriptor). The
 * owner is set to Administrators (O:BA) rather than left to the token's
 * default: heaptracectl trusts a pipe owned by SYSTEM or Administrators when
 * it may not read the server's token (an operator facing a LocalSystem
 * service, ctl/conn-win.c), and only LocalSystem or an elevated
 * administrator can give an object that owner. */
#define SDDL_BASE L"O:BAD:P(A;;GA;;;SY)(A;;GA;;;BA)"
/* The operators group: FILE_GENERIC_READ (0x120089) | FILE_WRITE_DATA (0x2) |
 * FILE_WRITE_ATTRIBUTES (0x100), without FILE_APPEND_DATA, which on a pipe is
 * FILE_CREATE_PIPE_INSTANCE (0x4): an operator talks to the daemon but cannot
 * add a rogue server instance (winnt.h constants; docs/windows.md#the-pipes-security-descriptor,
 * https://learn.microsoft.com/windows/win32/ipc/named-pipe-security-and-access-rights).
 * Such a client opens the pipe with GENERIC_READ | FILE_WRITE_DATA |
 * FILE_WRITE_ATTRIBUTES, not GENERIC_WRITE (which includes FILE_APPEND_DATA). */
#define OPERATOR_ACCESS L"0x12018b"

struct endpoint {
    uv_async_t wake;  /* the thread pool's wait callback -> the loop */
    uv_timer_t retry; /* makes the next instance again after a failure */
    int open;         /* libuv handles not closed yet */
    int closing;
    endpoint_connection_cb cb;
    void *arg;
    WCHAR name[PIPE_NAME_MAX + 1];
    char path[PIPE_NAME_MAX * 3 + 1];
    SECURITY_ATTRIBUTES sa;      /* lpSecurityDescriptor from LocalAlloc (ConvertString...) */
    HANDLE mutex;                /* one daemon per pipe name */
    HANDLE inst;                 /* the instance waiting for a client, or INVALID_HANDLE_VALUE */
    OVERLAPPED ov;               /* ConnectNamedPipe on inst; ov.hEvent is manual-reset */
    HANDLE wait;                 /* RegisterWaitForSingleObject on ov.hEvent, or NULL */
    volatile LONG connected_now; /* ConnectNamedPipe found a client already there */
    HANDLE ready; /* connected, waiting for endpoint_accept, or INVALID_HANDLE_VALUE */
};

/* The operators group of the endpoint that listens (one per process: the
 * mutex below keeps one daemon per name, and a daemon listens once):
 * endpoint_admit has only the client. Its SID is a copy, freed at close. */
static PSID op_sid;
static char op_group[256];

/* GetLastError as text (ASCII, no trailing newline) for messages. */
static const char *win_strerror(DWORD e, char *buf, size_t bufsz)
{
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, e,
                             MAKELANGID(LANG_ENGLISH, SUBLANG_ENGLISH_US), buf, (DWORD)bufsz, NULL);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == '.'))
        buf[--n] = '\0';
    if (n == 0)
        snprintf(buf, bufsz, "error %lu", (unsigned long)e);
    return buf;
}

static void wide_to_utf8(const WCHAR *w, char *out, size_t outsz)
{
    if (!WideCharToMultiByte(CP_UTF8, 0, w, -1, out, (int)outsz, NULL, NULL))
        snprintf(out, outsz, "?");
}

/* A service has no console: descriptors 0-2 may be free, and a pipe opened
 * on one of them would be duplicated by uv_pipe_open and its descriptor
 * forgotten, leaking it (libuv 1.44 src/win/pipe.c, uv_pipe_open). Keep
 * them taken by NUL. */
static void stdio_hold(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (_get_osfhandle(fd) != (intptr_t)INVALID_HANDLE_VALUE)
            continue;
        int nul = _open("NUL", _O_RDWR | _O_BINARY);
        if (nul >= 0 && nul != fd) {
            _dup2(nul, fd);
            _close(nul);
        }
    }
}

/* \\.\pipe\NAME, converted to UTF-16 into ep->name. */
static int name_check(struct endpoint *ep, const char *path, char *err, size_t errsz)
{
    size_t pre = strlen(PIPE_PREFIX);
    if (_strnicmp(path, PIPE_PREFIX, pre) != 0 || !path[pre] || strlen(path) > PIPE_NAME_MAX) {
        snprintf(err, errsz,
                 "endpoint %s is not a pipe name (\\\\.\\pipe\\NAME, at most %d characters)", path,
                 PIPE_NAME_MAX);
        return HT_EBADARG;
    }
    if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, ep->name,
                             PIPE_NAME_MAX + 1)) {
        snprintf(err, errsz, "endpoint %s is not valid UTF-8", path);
        return HT_EBADARG;
    }
    snprintf(ep->path, sizeof(ep->path), "%s", path);
    return 0;
}

/* A named mutex per pipe name in the Global\ namespace: the service runs in
 * session 0 and an administrator's --foreground daemon in their own session,
 * and pipe names are machine-wide, so the guard must be too (Local\ would be
 * per session). Wine does not refuse a second FILE_FLAG_FIRST_PIPE_INSTANCE
 * pipe; a second CreateMutexW of one name gives ERROR_ALREADY_EXISTS there
 * as on Windows (docs/windows.md#what-wine-does-and-does-not-do). Another user could create the
 * mutex first: the daemon then refuses to start, naming it (a denial of
 * service, never a takeover: the pipe stays ours to create). */
static int mutex_take(struct endpoint *ep, char *err, size_t errsz)
{
    WCHAR mname[PIPE_NAME_MAX + 64] = L"Global\\heaptraced-";
    size_t n = wcslen(mname);
    /* Backslash is the one character a kernel object name may not hold
     * after its namespace (CreateMutexW). */
    for (const WCHAR *p = ep->name + wcslen(L"\\\\.\\pipe\\"); *p && n + 1 < PIPE_NAME_MAX + 64;
         p++)
        mname[n++] = *p == L'\\' ? L'/' : *p;
    mname[n] = 0;
    ep->mutex = CreateMutexW(NULL, FALSE, mname);
    DWORD e = GetLastError();
    if (ep->mutex && e != ERROR_ALREADY_EXISTS)
        return 0;
    char why[160];
    if (ep->mutex)
        snprintf(err, errsz, "another heaptraced is already running on %s (its mutex exists)",
                 ep->path);
    else
        snprintf(err, errsz, "cannot take the mutex of %s: %s (another user holds it?)", ep->path,
                 win_strerror(e, why, sizeof(why)));
    if (ep->mutex)
        CloseHandle(ep->mutex);
    ep->mutex = NULL;
    return HT_EEXIST;
}

/* Someone else's pipe of our name (a squatter, or a daemon that predates the
 * mutex): refuse before creating. WaitNamedPipeW only waits for an instance
 * and never connects, so a squatter cannot impersonate us; ERROR_FILE_NOT_FOUND
 * means no instance of the name exists. FILE_FLAG_FIRST_PIPE_INSTANCE closes
 * the race left on Windows; wine does not honour it
 * (docs/windows.md#what-wine-does-and-does-not-do). */
static int squat_check(struct endpoint *ep, char *err, size_t errsz)
{
    if (!WaitNamedPipeW(ep->name, 1) && GetLastError() == ERROR_FILE_NOT_FOUND)
        return 0;
    snprintf(err, errsz,
             "pipe %s already exists (another program created it): refusing to start "
             "(it could be squatting the name)",
             ep->path);
    return HT_EEXIST;
}

/* The group's SID from its name, or from its SID string ("S-1-5-32-545":
 * group names are localized, SIDs are not); only a group, alias or
 * well-known group. Sets op_sid and op_group. */
static int operators_resolve(const char *group, char *err, size_t errsz)
{
    WCHAR wname[256], name[256], dom[256];
    BYTE sid[SECURITY_MAX_SID_SIZE];
    DWORD sidsz = sizeof(sid), namesz = 256, domsz = 256;
    SID_NAME_USE use;
    PSID given = NULL;
    char why[160];
    if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, group, -1, wname, 256)) {
        snprintf(err, errsz, "pipe_operators_group \"%s\": not valid UTF-8 or too long", group);
        return HT_EBADARG;
    }
    int ok;
    if (wcsncmp(wname, L"S-1-", 4) == 0) {
        ok = ConvertStringSidToSidW(wname, &given) && GetLengthSid(given) <= sizeof(sid) &&
             CopySid(sizeof(sid), sid, given) &&
             LookupAccountSidW(NULL, sid, name, &namesz, dom, &domsz, &use);
    } else {
        ok = LookupAccountNameW(NULL, wname, sid, &sidsz, dom, &domsz, &use);
    }
    DWORD e = GetLastError();
    LocalFree(given);
    if (!ok) {
        snprintf(err, errsz, "pipe_operators_group \"%s\": unknown account (%s)", group,
                 win_strerror(e, why, sizeof(why)));
        return HT_EBADARG;
    }
    if (use != SidTypeGroup && use != SidTypeAlias && use != SidTypeWellKnownGroup) {
        snprintf(err, errsz, "pipe_operators_group \"%s\" is not a group (SID type %d)", group,
                 (int)use);
        return HT_EBADARG;
    }
    DWORD len = GetLengthSid(sid);
    op_sid = ht_malloc(len);
    if (!op_sid || !CopySid(len, op_sid, sid)) {
        snprintf(err, errsz, "pipe_operators_group \"%s\": out of memory", group);
        return HT_ENOMEM;
    }
    snprintf(op_group, sizeof(op_group), "%s", group);
    return 0;
}

/* ep->sa from the SDDL, with the operators' ACE when a group is named. */
static int sd_build(struct endpoint *ep, const char *group, char *err, size_t errsz)
{
    WCHAR sddl[512] = SDDL_BASE;
    if (group && *group) {
        int rc = operators_resolve(group, err, errsz);
        if (rc != 0)
            return rc;
        LPWSTR ssid = NULL;
        if (!ConvertSidToStringSidW(op_sid, &ssid)) {
            snprintf(err, errsz, "pipe_operators_group \"%s\": its SID does not convert", group);
            return HT_EBADARG;
        }
        _snwprintf(sddl + wcslen(sddl), 512 - wcslen(sddl), L"(A;;" OPERATOR_ACCESS L";;;%ls)",
                   ssid);
        sddl[511] = 0;
        LocalFree(ssid);
    }
    PSECURITY_DESCRIPTOR sd = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL)) {
        char why[160];
        snprintf(err, errsz, "cannot build the pipe's security descriptor: %s",
                 win_strerror(GetLastError(), why, sizeof(why)));
        return HT_EINTERNAL;
    }
    ep->sa.nLength = sizeof(ep->sa);
    ep->sa.lpSecurityDescriptor = sd;
    ep->sa.bInheritHandle = FALSE;
    return 0;
}

static HANDLE instance_new(struct endpoint *ep, int first)
{
    DWORD open =
        PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED | (first ? FILE_FLAG_FIRST_PIPE_INSTANCE : 0);
    DWORD mode = PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS;
    return CreateNamedPipeW(ep->name, open, mode, PIPE_UNLIMITED_INSTANCES, PIPE_BUF_BYTES,
                            PIPE_BUF_BYTES, 0, &ep->sa);
}

/* Runs on a thread pool thread when ConnectNamedPipe completes: only wakes the loop. */
static void CALLBACK connected_wait_cb(void *arg, BOOLEAN timed_out)
{
    (void)timed_out; /* INFINITE */
    struct endpoint *ep = arg;
    uv_async_send(&ep->wake);
}

/* Ends the wait on the current instance; blocks until a running callback returns. */
static void wait_end(struct endpoint *ep)
{
    if (ep->wait) {
        UnregisterWaitEx(ep->wait, INVALID_HANDLE_VALUE);
        ep->wait = NULL;
    }
}

/* Closes the instance waiting for a client, its ConnectNamedPipe cancelled
 * and finished first (the OVERLAPPED must outlive it). */
static void instance_drop(struct endpoint *ep)
{
    wait_end(ep);
    if (ep->inst == INVALID_HANDLE_VALUE)
        return;
    DWORD n;
    if (CancelIoEx(ep->inst, &ep->ov) || GetLastError() != ERROR_NOT_FOUND)
        GetOverlappedResult(ep->inst, &ep->ov, &n, TRUE);
    CloseHandle(ep->inst);
    ep->inst = INVALID_HANDLE_VALUE;
    ep->connected_now = 0;
}

/* ConnectNamedPipe on ep->inst, completion waited for off the loop. 0, or
 * a Win32 error with the instance left to the caller. */
static DWORD instance_connect(struct endpoint *ep)
{
    DWORD e = ERROR_NO_DATA;
    /* ERROR_NO_DATA: a client connected and closed before ConnectNamedPipe;
     * the instance is disconnected and reused (never closed and made again,
     * which would free the name for a moment). */
    for (int tries = 0; tries < 8 && e == ERROR_NO_DATA; tries++) {
        ResetEvent(ep->ov.hEvent);
        if (ConnectNamedPipe(ep->inst, &ep->ov))
            e = ERROR_PIPE_CONNECTED; /* overlapped: not expected, but connected */
        else if ((e = GetLastError()) == ERROR_NO_DATA)
            DisconnectNamedPipe(ep->inst);
    }
    if (e == ERROR_PIPE_CONNECTED) { /* a client came between create and connect */
        ep->connected_now = 1;
        uv_async_send(&ep->wake);
        return 0;
    }
    if (e != ERROR_IO_PENDING)
        return e;
    /* The thread pool waits; no thread of ours, no loop spin. */
    if (RegisterWaitForSingleObject(&ep->wait, ep->ov.hEvent, connected_wait_cb, ep, INFINITE,
                                    WT_EXECUTEONLYONCE))
        return 0;
    ep->wait = NULL;
    return GetLastError();
}

/* A new instance waiting for a client (none if one is waiting already): 0 or a UV_E* code. */
static int instance_arm(struct endpoint *ep)
{
    if (ep->closing || ep->inst != INVALID_HANDLE_VALUE)
        return 0;
    ep->inst = instance_new(ep, 0);
    if (ep->inst == INVALID_HANDLE_VALUE)
        return uv_translate_sys_error(GetLastError());
    DWORD e = instance_connect(ep);
    if (e == 0)
        return 0;
    instance_drop(ep);
    return uv_translate_sys_error(e);
}

static void retry_cb(uv_timer_t *t);

/* Arms the next instance; on failure tells the server and tries again later. */
static void instance_next(struct endpoint *ep)
{
    int rc = instance_arm(ep);
    if (rc == 0 || ep->closing)
        return;
    ep->cb(ep->arg, rc);
    if (!ep->closing && !uv_is_active((uv_handle_t *)&ep->retry))
        uv_timer_start(&ep->retry, retry_cb, RETRY_MS, 0);
}

static void retry_cb(uv_timer_t *t)
{
    instance_next(t->data);
}

/* A client that left before being accepted: the instance is disconnected
 * and waits again. 0, or the instance is dropped and the error returned. */
static int instance_reuse(struct endpoint *ep)
{
    DisconnectNamedPipe(ep->inst);
    ep->connected_now = 0;
    DWORD e = instance_connect(ep);
    if (e == 0)
        return 0;
    instance_drop(ep);
    return uv_translate_sys_error(e);
}

/* On the loop: the waiting instance's ConnectNamedPipe ended (or found a
 * client there already). Connected: the server accepts it (endpoint_accept
 * makes the next instance); a client that left first: the instance waits
 * again; else the failure goes to the server and a new instance is made.
 * An instance is closed only once the next one exists: with none left the
 * name would be free for a squatter (FILE_FLAG_FIRST_PIPE_INSTANCE guards
 * only the first). */
static void wake_cb(uv_async_t *a)
{
    struct endpoint *ep = a->data;
    if (ep->closing || ep->inst == INVALID_HANDLE_VALUE)
        return;
    DWORD n, e = 0;
    int connected = ep->connected_now;
    if (!connected) {
        if (WaitForSingleObject(ep->ov.hEvent, 0) != WAIT_OBJECT_0)
            return; /* not ours: the wait is still registered */
        wait_end(ep);
        connected = GetOverlappedResult(ep->inst, &ep->ov, &n, FALSE) != 0;
        e = connected ? 0 : GetLastError();
    }
    if (!connected) {
        int rc = e == ERROR_NO_DATA || e == ERROR_BROKEN_PIPE || e == ERROR_PIPE_NOT_CONNECTED
                     ? instance_reuse(ep)
                     : uv_translate_sys_error(e);
        if (rc != 0) { /* its ConnectNamedPipe is over: ov is free for the next */
            HANDLE failed = ep->inst;
            ep->inst = INVALID_HANDLE_VALUE;
            ep->connected_now = 0;
            ep->cb(ep->arg, rc);
            instance_next(ep);
            if (failed != INVALID_HANDLE_VALUE)
                CloseHandle(failed);
        }
        return;
    }
    ep->ready = ep->inst;
    ep->inst = INVALID_HANDLE_VALUE;
    ep->connected_now = 0;
    ep->cb(ep->arg, 0);
    HANDLE left = ep->ready; /* the server did not take it */
    ep->ready = INVALID_HANDLE_VALUE;
    instance_next(ep);
    if (left != INVALID_HANDLE_VALUE) {
        DisconnectNamedPipe(left);
        CloseHandle(left);
    }
}

static void endpoint_closed_cb(uv_handle_t *h)
{
    struct endpoint *ep = h->data;
    if (--ep->open == 0)
        ht_free(ep);
}

int endpoint_listen(uv_loop_t *loop, const char *path, const char *operators,
                    endpoint_connection_cb cb, void *arg, struct endpoint **out, char *err,
                    size_t errsz)
{
    *out = NULL;
    err[0] = '\0';
    struct endpoint *ep = ht_calloc(1, sizeof(*ep));
    if (!ep) {
        snprintf(err, errsz, "cannot listen on %s: %s", path, uv_strerror(UV_ENOMEM));
        return UV_ENOMEM;
    }
    ep->cb = cb;
    ep->arg = arg;
    ep->inst = ep->ready = INVALID_HANDLE_VALUE;
    uv_async_init(loop, &ep->wake, wake_cb);
    uv_timer_init(loop, &ep->retry);
    ep->wake.data = ep->retry.data = ep;
    ep->open = 2;
    stdio_hold();
    int rc = name_check(ep, path, err, errsz);
    if (rc == 0)
        rc = mutex_take(ep, err, errsz);
    if (rc == 0)
        rc = squat_check(ep, err, errsz);
    if (rc == 0)
        rc = sd_build(ep, operators, err, errsz);
    if (rc == 0 && !(ep->ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL)))
        rc = uv_translate_sys_error(GetLastError());
    if (rc == 0) {
        /* The first instance is made here, with FILE_FLAG_FIRST_PIPE_INSTANCE:
         * ERROR_ACCESS_DENIED when the name exists already (CreateNamedPipeW). */
        HANDLE first = instance_new(ep, 1);
        DWORD e = GetLastError();
        if (first == INVALID_HANDLE_VALUE && e == ERROR_ACCESS_DENIED) {
            snprintf(err, errsz,
                     "pipe %s already exists (another program created it): refusing to start",
                     path);
            rc = HT_EEXIST;
        } else if (first == INVALID_HANDLE_VALUE) {
            char why[160];
            snprintf(err, errsz, "cannot create pipe %s: %s", path,
                     win_strerror(e, why, sizeof(why)));
            rc = uv_translate_sys_error(e);
        } else {
            /* Kept as the first waiting instance: closing it before making
             * the next would free the name for a squatter meanwhile. */
            ep->inst = first;
            e = instance_connect(ep);
            if (e != 0) {
                instance_drop(ep);
                rc = uv_translate_sys_error(e);
            }
            if (rc != 0)
                snprintf(err, errsz, "cannot listen on %s: %s", path, uv_strerror(rc));
        }
    }
    if (rc != 0) {
        if (err[0] == '\0')
            snprintf(err, errsz, "cannot listen on %s: %s", path, uv_strerror(rc));
        endpoint_close(ep);
        return rc;
    }
    *out = ep;
    return 0;
}

int endpoint_accept(struct endpoint *ep, uv_pipe_t *client)
{
    HANDLE h = ep->ready;
    if (h == INVALID_HANDLE_VALUE)
        return UV_EAGAIN;
    ep->ready = INVALID_HANDLE_VALUE;
    /* uv_pipe_open takes a CRT descriptor (uv__get_osfhandle), which owns
     * the handle from now on: libuv closes it with the pipe. */
    int fd = _open_osfhandle((intptr_t)h, _O_BINARY);
    int rc = fd < 0 ? UV_EMFILE : uv_pipe_open(client, fd);
    if (fd < 0)
        CloseHandle(h);
    else if (rc != 0)
        _close(fd);
    instance_next(ep); /* the next client's instance */
    return rc;
}

void endpoint_close(struct endpoint *ep)
{
    ep->closing = 1;
    instance_drop(ep); /* ends the wait first: no callback runs after this */
    if (ep->ready != INVALID_HANDLE_VALUE) {
        CloseHandle(ep->ready);
        ep->ready = INVALID_HANDLE_VALUE;
    }
    if (ep->ov.hEvent)
        CloseHandle(ep->ov.hEvent);
    ep->ov.hEvent = NULL;
    if (ep->mutex)
        CloseHandle(ep->mutex);
    ep->mutex = NULL;
    LocalFree(ep->sa.lpSecurityDescriptor);
    ep->sa.lpSecurityDescriptor = NULL;
    ht_free(op_sid);
    op_sid = NULL;
    op_group[0] = '\0';
    uv_close((uv_handle_t *)&ep->wake, endpoint_closed_cb);
    uv_close((uv_handle_t *)&ep->retry, endpoint_closed_cb);
}

int endpoint_headroom(uv_pipe_t *client)
{
    (void)client;
    return 0;
}

int endpoint_in_reserve(uv_handle_t *h, unsigned reserve)
{
    (void)h;
    (void)reserve;
    return 0;
}

/* The client's handle is overlapped and on libuv's completion port: an event
 * whose low-order bit is set keeps this write's completion off the port
 * ("A valid event handle whose low-order bit is set keeps I/O completion
 * from being queued to the completion port",
 * https://learn.microsoft.com/windows/win32/api/ioapiset/nf-ioapiset-getqueuedcompletionstatus).
 * A fresh connection's 64 KiB buffer is empty, so the write completes at
 * once; it is cancelled if it has not after WRITE_WAIT_MS. */
#define WRITE_WAIT_MS 100
int endpoint_try_write(uv_pipe_t *client, const char *buf, size_t n)
{
    uv_os_fd_t h;
    if (uv_fileno((uv_handle_t *)client, &h) != 0)
        return UV_EBADF;
    HANDLE ev = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!ev)
        return uv_translate_sys_error(GetLastError());
    OVERLAPPED ov;
    memset(&ov, 0, sizeof(ov));
    ov.hEvent = (HANDLE)((uintptr_t)ev | 1);
    DWORD done = 0;
    int rc;
    if (WriteFile(h, buf, (DWORD)n, &done, &ov)) {
        rc = (int)done;
    } else if (GetLastError() == ERROR_IO_PENDING) {
        if (WaitForSingleObject(ev, WRITE_WAIT_MS) != WAIT_OBJECT_0) {
            CancelIoEx(h, &ov);
            WaitForSingleObject(ev, INFINITE); /* ov must outlive the write */
        }
        rc = GetOverlappedResult(h, &ov, &done, FALSE) || done > 0
                 ? (int)done
                 : uv_translate_sys_error(GetLastError());
    } else {
        rc = uv_translate_sys_error(GetLastError());
    }
    CloseHandle(ev);
    return rc;
}

/* "DOMAIN\user" of a SID, or its S-1-... form. */
static void sid_name(PSID sid, char *out, size_t outsz)
{
    WCHAR name[256], dom[256], full[520];
    DWORD namesz = 256, domsz = 256;
    SID_NAME_USE use;
    LPWSTR ssid = NULL;
    if (LookupAccountSidW(NULL, sid, name, &namesz, dom, &domsz, &use)) {
        _snwprintf(full, 520, L"%ls%ls%ls", dom, *dom ? L"\\" : L"", name);
        full[519] = 0;
        wide_to_utf8(full, out, outsz);
    } else if (ConvertSidToStringSidW(sid, &ssid)) {
        wide_to_utf8(ssid, out, outsz);
        LocalFree(ssid);
    } else {
        snprintf(out, outsz, "an unknown user");
    }
}

static int token_member(HANDLE tok, PSID sid)
{
    BOOL is = FALSE;
    return sid && CheckTokenMembership(tok, sid, &is) && is;
}

/* uid 0 for LocalSystem and elevated Administrators (BA is deny-only in a
 * UAC-filtered token, and CheckTokenMembership ignores deny-only groups:
 * https://learn.microsoft.com/windows/win32/api/securitybaseapi/nf-securitybaseapi-checktokenmembership);
 * an operator gets its user SID's RID, never 0. */
static int token_check(HANDLE tok, unsigned long pid, uint32_t *uid, char *err, size_t errsz)
{
    union {
        TOKEN_USER tu;
        BYTE buf[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
    } user;
    DWORD n;
    if (!GetTokenInformation(tok, TokenUser, &user, sizeof(user), &n)) {
        snprintf(err, errsz, "cannot read the token of the client (pid %lu): error %lu", pid,
                 (unsigned long)GetLastError());
        return HT_EPERM;
    }
    PSID usid = user.tu.User.Sid;
    BYTE admins[SECURITY_MAX_SID_SIZE];
    DWORD asz = sizeof(admins);
    int admin = CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, admins, &asz) &&
                token_member(tok, admins);
    if (IsWellKnownSid(usid, WinLocalSystemSid) || admin) {
        *uid = 0;
        return 0;
    }
    if (token_member(tok, op_sid)) {
        DWORD rid = *GetSidSubAuthority(usid, *GetSidSubAuthorityCount(usid) - 1);
        *uid = rid == 0 || rid == UINT32_MAX ? 1 : rid;
        return 0;
    }
    char who[300];
    sid_name(usid, who, sizeof(who));
    snprintf(
        err, errsz,
        "%s (pid %lu) is not LocalSystem, an elevated administrator%s%s%s: run as administrator",
        who, pid, op_sid ? " or in group \"" : "", op_sid ? op_group : "", op_sid ? "\"" : "");
    return HT_EPERM;
}

/* The pipe's DACL admitted the client already; its token is checked again
 * as the client's own thread token (defence in depth:
 * docs/windows.md#the-pipes-security-descriptor). */
int endpoint_admit(uv_pipe_t *client, uint32_t *uid, char *err, size_t errsz)
{
    uv_os_fd_t h;
    if (uv_fileno((uv_handle_t *)client, &h) != 0) {
        snprintf(err, errsz, "cannot identify the client: no pipe handle");
        return HT_EPERM;
    }
    ULONG pid = 0;
    GetNamedPipeClientProcessId(h, &pid);
    if (!ImpersonateNamedPipeClient(h)) {
        snprintf(err, errsz,
                 "cannot identify the client (pid %lu): ImpersonateNamedPipeClient: error %lu",
                 (unsigned long)pid, (unsigned long)GetLastError());
        return HT_EPERM;
    }
    HANDLE tok = NULL;
    /* OpenAsSelf: the access check is the daemon's, not the client's. */
    BOOL ok = OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, TRUE, &tok);
    DWORD e = GetLastError();
    if (!RevertToSelf()) {
        /* Running on as the client is not an option: "you should shut down
         * the process"
         * (https://learn.microsoft.com/windows/win32/api/securitybaseapi/nf-securitybaseapi-reverttoself).
         */
        log_error("RevertToSelf failed (error %lu): stopping", (unsigned long)GetLastError());
        abort();
    }
    if (!ok) {
        snprintf(err, errsz, "cannot read the token of the client (pid %lu): error %lu",
                 (unsigned long)pid, (unsigned long)e);
        return HT_EPERM;
    }
    int rc = token_check(tok, pid, uid, err, errsz);
    CloseHandle(tok);
    return rc;
}

/* Only the administrator traces on Windows (trace-access-win.c): no groups to act with. */
int endpoint_peer_pid(uv_pipe_t *client, uint64_t *pid)
{
    (void)client;
    *pid = 0;
    return UV_ENOTSUP;
}

int endpoint_peer_groups(uv_pipe_t *client, uint32_t *gid, uint32_t *groups, uint32_t cap,
                         uint32_t *n, char *err, size_t errsz)
{
    (void)client, (void)groups, (void)cap, (void)err, (void)errsz;
    *gid = 0;
    *n = 0;
    return 0;
}
