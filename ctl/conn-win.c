/* Named-pipe connection for the ctl (Windows). */
#include "conn.h"
#include "linebuf.h"

#include <windows.h>
#include <aclapi.h>
#include <sddl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    HANDLE h;
    HANDLE ev_read, ev_write; /* the handle is overlapped: one event per direction */
    struct linebuf in;
};

/* How long a busy pipe (every instance taken) is waited for. */
#define CONN_BUSY_WAIT_MS 10000

/* The system's text for code, without its line end. */
static void conn_errstr(DWORD code, char *out, size_t n)
{
    DWORD k = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code,
                             0, out, (DWORD)n, NULL);
    while (k > 0 &&
           (out[k - 1] == '\n' || out[k - 1] == '\r' || out[k - 1] == ' ' || out[k - 1] == '.'))
        out[--k] = '\0';
    if (k == 0)
        snprintf(out, n, "error %lu", (unsigned long)code);
}

/* path as UTF-16 (malloc'd), or NULL. */
static wchar_t *conn_wide(const char *path)
{
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof(wchar_t)) : NULL;
    if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, w, n) != n) {
        free(w);
        return NULL;
    }
    return w;
}

/* The token's SID as S-1-..., for messages. */
static void conn_sid_text(PSID sid, char *out, size_t n)
{
    char *s = NULL;
    if (sid && ConvertSidToStringSidA(sid, &s)) {
        snprintf(out, n, "%s", s);
        LocalFree(s);
    } else {
        snprintf(out, n, "an unknown account");
    }
}

/* GetTokenInformation into a malloc'd buffer (two calls: the size, then the data). */
static void *conn_token_info(HANDLE tok, TOKEN_INFORMATION_CLASS cls)
{
    DWORD need = 0;
    GetTokenInformation(tok, cls, NULL, 0, &need);
    void *p = need ? malloc(need) : NULL;
    if (p && !GetTokenInformation(tok, cls, p, need, &need)) {
        free(p);
        return NULL;
    }
    return p;
}

/* 1 if the token is LocalSystem's or holds an enabled (elevated) Administrators
 * group, 0 if not (who it is in who), -1 if it cannot be read. BUILTIN\
 * Administrators is S-1-5-32-544, LocalSystem S-1-5-18 (well-known SIDs,
 * https://learn.microsoft.com/windows/win32/secauthz/well-known-sids); a
 * UAC-filtered token carries Administrators as SE_GROUP_USE_FOR_DENY_ONLY,
 * not enabled (docs/windows.md#the-pipes-security-descriptor), so only an
 * elevated admin passes. */
static int conn_token_trusted(HANDLE tok, char *who, size_t whosz)
{
    TOKEN_USER *user = conn_token_info(tok, TokenUser);
    TOKEN_GROUPS *groups = conn_token_info(tok, TokenGroups);
    int rc = -1;
    if (user && groups) {
        rc = IsWellKnownSid(user->User.Sid, WinLocalSystemSid) ? 1 : 0;
        for (DWORD i = 0; rc == 0 && i < groups->GroupCount; i++) {
            const SID_AND_ATTRIBUTES *g = &groups->Groups[i];
            if (IsWellKnownSid(g->Sid, WinBuiltinAdministratorsSid) &&
                (g->Attributes & SE_GROUP_ENABLED) && !(g->Attributes & SE_GROUP_USE_FOR_DENY_ONLY))
                rc = 1;
        }
        conn_sid_text(user->User.Sid, who, whosz);
    }
    free(user);
    free(groups);
    return rc;
}

/* Whoever created the pipe instance we reached must run as SYSTEM or an
 * elevated administrator before we send it anything: a user who squatted the
 * name must not receive an administrator's requests. The Windows counterpart
 * of conn-unix.c's SO_PEERCRED check: the server's process id from the pipe
 * (GetNamedPipeServerProcessId,
 * https://learn.microsoft.com/windows/win32/api/winbase/nf-winbase-getnamedpipeserverprocessid),
 * then that process's token. */
/* The owner of the pipe instance we reached, when the server's token cannot
 * be read (an operator who is not an administrator may not open a LocalSystem
 * service's token): the instance's owner is its creator's token owner, which
 * only LocalSystem or an elevated administrator can make SYSTEM or
 * Administrators (an owner must be the token's user or one of its groups with
 * SE_GROUP_OWNER, unless it holds SeRestorePrivilege: "Ownership of Objects",
 * https://learn.microsoft.com/windows/win32/secauthz/ownership-of-objects); a
 * squatter's instance is owned by the squatter. Reading the owner needs
 * READ_CONTROL, which GENERIC_READ holds. 1 trusted, 0 not (who says whom), -1
 * unreadable. */
static int conn_owner_trusted(HANDLE h, char *who, size_t whosz)
{
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if (GetSecurityInfo(h, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION, &owner, NULL, NULL, NULL,
                        &sd) != ERROR_SUCCESS || !owner) {
        if (sd)
            LocalFree(sd);
        return -1;
    }
    int ok = IsWellKnownSid(owner, WinLocalSystemSid) ||
             IsWellKnownSid(owner, WinBuiltinAdministratorsSid);
    conn_sid_text(owner, who, whosz);
    LocalFree(sd);
    return ok;
}

static int conn_check_server(HANDLE h, const char *path, char *err, size_t errsz)
{
    ULONG pid = 0;
    char why[256];
    if (!GetNamedPipeServerProcessId(h, &pid)) {
        conn_errstr(GetLastError(), why, sizeof(why));
        snprintf(err, errsz, "cannot tell which process serves %s: %s", path, why);
        return -1;
    }
    HANDLE proc = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
    HANDLE tok = NULL;
#ifdef HEAPTRACE_TEST_KNOBS
    /* HEAPTRACECTL_TEST_OWNER_CHECK=1: as if the token could not be opened
     * (wine lets everyone open every token). */
    const char *knob = getenv("HEAPTRACECTL_TEST_OWNER_CHECK");
    if (knob && *knob == '1' && proc) {
        CloseHandle(proc);
        proc = NULL;
        SetLastError(ERROR_ACCESS_DENIED);
    }
#endif
    if (!proc || !OpenProcessToken(proc, TOKEN_QUERY, &tok)) {
        DWORD e = GetLastError();
        if (e == ERROR_ACCESS_DENIED) {
            char owner[128] = "?";
            int ok = conn_owner_trusted(h, owner, sizeof(owner));
            if (proc)
                CloseHandle(proc);
            proc = NULL;
            if (ok == 1)
                return 0;
            if (ok == 0) {
                snprintf(err, errsz,
                         "refusing to talk to the server at %s: its pipe is owned by %s (pid "
                         "%lu), neither SYSTEM nor Administrators; it is not a genuine heaptraced",
                         path, owner, (unsigned long)pid);
                return -1;
            }
            SetLastError(e);
        }
        conn_errstr(e, why, sizeof(why));
        snprintf(err, errsz,
                 "cannot check the server at %s (pid %lu): %s%s; refusing to send it anything",
                 path, (unsigned long)pid, why,
                 e == ERROR_ACCESS_DENIED ? " (run as administrator)" : "");
        if (proc)
            CloseHandle(proc);
        return -1;
    }
    char who[128];
    int ok = conn_token_trusted(tok, who, sizeof(who));
    CloseHandle(tok);
    CloseHandle(proc);
    if (ok == 1)
        return 0;
    if (ok < 0)
        snprintf(err, errsz, "cannot read the account of the server at %s (pid %lu)", path,
                 (unsigned long)pid);
    else
        snprintf(err, errsz,
                 "refusing to talk to the server at %s: it runs as %s (pid %lu), neither SYSTEM "
                 "nor an elevated administrator; it is not a genuine heaptraced",
                 path, who, (unsigned long)pid);
    return -1;
}

/* Open the pipe: GENERIC_READ | FILE_WRITE_DATA, never GENERIC_WRITE (it
 * would include FILE_CREATE_PIPE_INSTANCE: Microsoft Learn, "Named Pipe
 * Security and Access Rights"); the server
 * may only identify us, not impersonate us (SECURITY_SQOS_PRESENT |
 * SECURITY_IDENTIFICATION, "Impersonating a Named Pipe Client",
 * https://learn.microsoft.com/windows/win32/ipc/impersonating-a-named-pipe-client).
 * Every instance busy: WaitNamedPipeW, CONN_BUSY_WAIT_MS in all. */
static HANDLE conn_connect(const char *path, char *err, size_t errsz)
{
    wchar_t *w = conn_wide(path);
    if (!w) {
        snprintf(err, errsz, "endpoint name is not UTF-8: %s", path);
        return INVALID_HANDLE_VALUE;
    }
    ULONGLONG deadline = GetTickCount64() + CONN_BUSY_WAIT_MS;
    HANDLE h;
    DWORD e;
    for (;;) {
        h = CreateFileW(w, GENERIC_READ | FILE_WRITE_DATA, 0, NULL, OPEN_EXISTING,
                        FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION,
                        NULL);
        if (h != INVALID_HANDLE_VALUE)
            break;
        e = GetLastError();
        ULONGLONG now = GetTickCount64();
        if (e != ERROR_PIPE_BUSY || now >= deadline)
            break;
        /* An instance may free up; a false return is retried until the deadline. */
        WaitNamedPipeW(w, (DWORD)(deadline - now));
    }
    free(w);
    if (h != INVALID_HANDLE_VALUE)
        return h;
    char why[256];
    conn_errstr(e, why, sizeof(why));
    snprintf(err, errsz, "cannot reach heaptraced at %s: %s%s", path, why,
             e == ERROR_FILE_NOT_FOUND ? " (is the daemon running?)"
             : e == ERROR_ACCESS_DENIED
                 ? " (run as administrator: the pipe admits SYSTEM and elevated administrators)"
             : e == ERROR_PIPE_BUSY ? " (every instance stayed busy)"
                                    : "");
    return INVALID_HANDLE_VALUE;
}

int conn_open(struct conn **out, const char *path, char *err, size_t errsz)
{
    *out = NULL;
    HANDLE h = conn_connect(path, err, errsz);
    if (h == INVALID_HANDLE_VALUE)
        return -1;
    if (conn_check_server(h, path, err, errsz) != 0) {
        CloseHandle(h);
        return -1;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->h = h;
        if (linebuf_init(&c->in, 1 << 16) != 0)
            c->in.buf = NULL;
        c->ev_read = CreateEventW(NULL, TRUE, FALSE, NULL);
        c->ev_write = CreateEventW(NULL, TRUE, FALSE, NULL);
    }
    if (!c || !c->in.buf || !c->ev_read || !c->ev_write) {
        snprintf(err, errsz, "out of memory");
        if (c) {
            linebuf_free(&c->in);
            if (c->ev_read)
                CloseHandle(c->ev_read);
            if (c->ev_write)
                CloseHandle(c->ev_write);
            free(c);
        }
        CloseHandle(h);
        return -1;
    }
    *out = c;
    return 0;
}

static struct conn *volatile conn_interrupt_c;
static volatile LONG conn_was_interrupted;

void conn_close(struct conn *c)
{
    if (!c)
        return;
    if (conn_interrupt_c == c)
        conn_interrupt_c = NULL;
    CloseHandle(c->h);
    CloseHandle(c->ev_read);
    CloseHandle(c->ev_write);
    linebuf_free(&c->in);
    free(c);
}

/* One overlapped transfer, waited for. Bytes moved, or -1 (cancelled, broken pipe, EOF). */
static long conn_io(struct conn *c, int writing, void *p, DWORD n)
{
    OVERLAPPED ov;
    memset(&ov, 0, sizeof(ov));
    ov.hEvent = writing ? c->ev_write : c->ev_read;
    ResetEvent(ov.hEvent);
    DWORD k = 0;
    BOOL ok = writing ? WriteFile(c->h, p, n, NULL, &ov) : ReadFile(c->h, p, n, NULL, &ov);
    if (!ok && GetLastError() != ERROR_IO_PENDING)
        return -1;
    /* A cancelled read (conn_ctrl_cb) ends with ERROR_OPERATION_ABORTED; the
     * wait wakes now and then for an interrupt that came before the read was
     * issued, which CancelIoEx could not find. */
    while (WaitForSingleObject(ov.hEvent, 250) == WAIT_TIMEOUT)
        if (!writing && conn_was_interrupted && conn_interrupt_c == c)
            CancelIoEx(c->h, &ov);
    if (!GetOverlappedResult(c->h, &ov, &k, TRUE))
        return -1;
    return (long)k;
}

int conn_send(struct conn *c, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        DWORD chunk = n > (1u << 20) ? (1u << 20) : (DWORD)n;
        long k = conn_io(c, 1, (void *)p, chunk);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A named pipe has no half-close: the daemon learns the end of input from
 * the protocol (the load stream's "0" chunk) or from conn_close. */
void conn_shutdown_write(struct conn *c)
{
    FlushFileBuffers(c->h);
}

char *conn_read_line(struct conn *c, size_t max)
{
    for (;;) {
        char *line;
        int got = linebuf_line(&c->in, &line);
        if (got != 0)
            return got > 0 ? line : NULL;
        size_t room;
        char *p = linebuf_room(&c->in, max, &room);
        if (!p)
            return NULL;
        /* An interrupt that came before this read was issued has nothing to cancel. */
        if (conn_was_interrupted && conn_interrupt_c == c)
            return NULL;
        long k = conn_io(c, 0, p, room > (1u << 20) ? (1u << 20) : (DWORD)room);
        if (k <= 0)
            return NULL;
        linebuf_filled(&c->in, (size_t)k);
    }
}

int conn_read_chunks(struct conn *c, struct ht_chunk_reader *r,
                     void (*out)(void *arg, const void *buf, size_t n), void *arg)
{
    for (;;) {
        int got = linebuf_chunks(&c->in, r, out, arg);
        if (got != 0)
            return got > 0 ? 0 : -1;
        size_t room;
        char *p = linebuf_room(&c->in, c->in.cap, &room); /* all read: room at the front */
        if (!p)
            return -1;
        if (conn_was_interrupted && conn_interrupt_c == c)
            return -1;
        long k = conn_io(c, 0, p, room > (1u << 20) ? (1u << 20) : (DWORD)room);
        if (k <= 0)
            return -1;
        linebuf_filled(&c->in, (size_t)k);
    }
}

/* Interrupts end the connection, not the process (a recording keeps what it
 * got). The handler runs on a thread the system creates for it
 * (https://learn.microsoft.com/windows/console/handlerroutine); CancelIoEx
 * cancels the main thread's pending read on the handle
 * (https://learn.microsoft.com/windows/win32/fileio/cancelioex-func). */
static BOOL WINAPI conn_ctrl_cb(DWORD type)
{
    if (type != CTRL_C_EVENT && type != CTRL_BREAK_EVENT && type != CTRL_CLOSE_EVENT)
        return FALSE;
    InterlockedExchange(&conn_was_interrupted, 1);
    struct conn *c = conn_interrupt_c;
    if (c)
        CancelIoEx(c->h, NULL);
    return TRUE;
}

void conn_break_on_interrupt(struct conn *c)
{
    conn_interrupt_c = c;
    SetConsoleCtrlHandler(conn_ctrl_cb, TRUE);
}

int conn_interrupted(void)
{
    return conn_was_interrupted != 0;
}
