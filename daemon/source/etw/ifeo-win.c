/* IFEO TracingFlags with a crash-safe journal (ifeo.h). Registry facts, as
 * PerfView's heap tracing sets them: value name TracingFlags, REG_DWORD,
 * bit 0 = HeapTracingEnabled; key = the file name with .exe; 64-bit view. */
#include "ifeo.h"

#include "ht-error.h"

#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IFEO_KEY L"SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Image File Execution Options"
#define VIEW KEY_WOW64_64KEY
/* A journal entry (REG_QWORD named after the image): the value before in the
 * low 32 bits, and these bits. */
#define J_HAD_VALUE (1ull << 32)
#define J_KEY_CREATED (1ull << 33)

int ifeo_check_name(const char *exe, char *err, size_t errsz)
{
    size_t n = exe ? strlen(exe) : 0;
    if (n < 5 || n > 255) {
        snprintf(err, errsz, "image name must be a file name like app.exe (5 to 255 characters)");
        return HT_EBADARG;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)exe[i];
        if (c < 0x20 || c == '\\' || c == '/' || c == ':' || c == '*' || c == '?' || c == '"' ||
            c == '<' || c == '>' || c == '|') {
            snprintf(err, errsz, "image name must be a file name without a directory: %.64s", exe);
            return HT_EBADARG;
        }
    }
    if (_stricmp(exe + n - 4, ".exe") != 0) {
        snprintf(err, errsz, "image name must end in .exe: %.64s", exe);
        return HT_EBADARG;
    }
    return 0;
}

static int widen(const char *s, wchar_t *out, int cap)
{
    return MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, out, cap) > 0 ? 0 : -1;
}

static void win_err(char *err, size_t errsz, const char *what, LONG rc)
{
    char msg[160] = "";
    FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, (DWORD)rc, 0,
                   msg, sizeof(msg), NULL);
    size_t k = strlen(msg);
    while (k > 0 && (msg[k - 1] == '\n' || msg[k - 1] == '\r' || msg[k - 1] == '.'))
        msg[--k] = '\0';
    snprintf(err, errsz, "%s: %s (error %ld)", what, msg[0] ? msg : "failed", (long)rc);
}

static int map_err(LONG rc)
{
    return rc == ERROR_ACCESS_DENIED ? HT_EPERM : HT_EINTERNAL;
}

#ifdef HEAPTRACE_TEST_KNOBS
/* HEAPTRACE_TEST_IFEO_CRASH=journal|set: the process dies right after that
 * step, as a crash would (the journal tests). */
static void test_crash(const char *step)
{
    const char *c = getenv("HEAPTRACE_TEST_IFEO_CRASH");
    if (c && strcmp(c, step) == 0)
        TerminateProcess(GetCurrentProcess(), 99);
}
#else
#define test_crash(step) ((void)0)
#endif

static LONG open_journal(const char *journal, REGSAM access, HKEY *out, int create)
{
    wchar_t jk[256];
    if (widen(journal, jk, 256) != 0)
        return ERROR_INVALID_PARAMETER;
    if (create)
        return RegCreateKeyExW(HKEY_LOCAL_MACHINE, jk, 0, NULL, 0, access | VIEW, NULL, out, NULL);
    return RegOpenKeyExW(HKEY_LOCAL_MACHINE, jk, 0, access | VIEW, out);
}

static LONG read_dword(HKEY k, const wchar_t *name, DWORD *v, int *present)
{
    DWORD type = 0, size = sizeof(*v);
    LONG rc = RegQueryValueExW(k, name, NULL, &type, (BYTE *)v, &size);
    *present = 0;
    if (rc == ERROR_FILE_NOT_FOUND)
        return ERROR_SUCCESS;
    if (rc == ERROR_MORE_DATA || (rc == ERROR_SUCCESS && (type != REG_DWORD || size != 4)))
        return ERROR_INVALID_DATA;
    if (rc == ERROR_SUCCESS)
        *present = 1;
    return rc;
}

int ifeo_read(const char *exe, uint32_t *value)
{
    wchar_t w[300], path[600];
    if (widen(exe, w, 300) != 0)
        return HT_EBADARG;
    _snwprintf(path, 600, L"%ls\\%ls", IFEO_KEY, w);
    path[599] = 0;
    HKEY k;
    LONG rc = RegOpenKeyExW(HKEY_LOCAL_MACHINE, path, 0, KEY_QUERY_VALUE | VIEW, &k);
    if (rc == ERROR_FILE_NOT_FOUND)
        return 0;
    if (rc != ERROR_SUCCESS)
        return map_err(rc);
    DWORD v = 0;
    int present = 0;
    rc = read_dword(k, L"TracingFlags", &v, &present);
    RegCloseKey(k);
    if (rc != ERROR_SUCCESS)
        return map_err(rc);
    *value = v;
    return present;
}

/* What TracingFlags is now for the image (key w at path), journaled before
 * anything changes: 0, or a negative code with err set. */
static int journal_first(HKEY j, const wchar_t *w, const wchar_t *path, const char *exe, char *err,
                         size_t errsz)
{
    HKEY k = NULL;
    uint64_t entry = 0;
    LONG lr;
    DWORD prev = 0;
    int present = 0;
    lr = RegOpenKeyExW(HKEY_LOCAL_MACHINE, path, 0, KEY_QUERY_VALUE | VIEW, &k);
    if (lr == ERROR_FILE_NOT_FOUND) {
        entry = J_KEY_CREATED;
    } else if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot open the image's execution options", lr);
        return map_err(lr);
    } else {
        lr = read_dword(k, L"TracingFlags", &prev, &present);
        RegCloseKey(k);
        k = NULL;
        if (lr != ERROR_SUCCESS) {
            snprintf(err, errsz, "%.64s has a TracingFlags value that is not a DWORD: not "
                     "touched", exe);
            return HT_ESTATE;
        }
        entry = present ? (J_HAD_VALUE | prev) : 0;
    }
    lr = RegSetValueExW(j, w, 0, REG_QWORD, (const BYTE *)&entry, sizeof(entry));
    if (lr == ERROR_SUCCESS)
        lr = RegFlushKey(j);
    if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot write the journal", lr);
        return map_err(lr);
    }
    test_crash("journal");
    return 0;
}

int ifeo_enable(const char *journal, const char *exe, char *err, size_t errsz)
{
    int rc = ifeo_check_name(exe, err, errsz);
    if (rc != 0)
        return rc;
    wchar_t w[300], path[600];
    if (widen(exe, w, 300) != 0) {
        snprintf(err, errsz, "image name is not UTF-8");
        return HT_EBADARG;
    }
    _snwprintf(path, 600, L"%ls\\%ls", IFEO_KEY, w);
    path[599] = 0;
    HKEY j = NULL, k = NULL;
    LONG lr = open_journal(journal, KEY_QUERY_VALUE | KEY_SET_VALUE, &j, 1);
    if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot open the journal key", lr);
        return map_err(lr);
    }
    uint64_t entry = 0;
    DWORD type = 0, size = sizeof(entry);
    int journaled = RegQueryValueExW(j, w, NULL, &type, (BYTE *)&entry, &size) == ERROR_SUCCESS &&
                    type == REG_QWORD;
    if (!journaled) {
        rc = journal_first(j, w, path, exe, err, errsz);
        if (rc)
            goto out;
    }
    lr = RegCreateKeyExW(HKEY_LOCAL_MACHINE, path, 0, NULL, 0, KEY_QUERY_VALUE | KEY_SET_VALUE | VIEW,
                         NULL, &k, NULL);
    if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot create the image's execution options", lr);
        rc = map_err(lr);
        goto out;
    }
    DWORD now = 0;
    int present = 0;
    if (read_dword(k, L"TracingFlags", &now, &present) != ERROR_SUCCESS)
        now = 0;
    DWORD v = (present ? now : 0) | 1u; /* HeapTracingEnabled */
    lr = RegSetValueExW(k, L"TracingFlags", 0, REG_DWORD, (const BYTE *)&v, sizeof(v));
    if (lr == ERROR_SUCCESS)
        lr = RegFlushKey(k);
    if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot set TracingFlags", lr);
        rc = map_err(lr);
        goto out;
    }
    test_crash("set");
    rc = 0;
out:
    if (k)
        RegCloseKey(k);
    RegCloseKey(j);
    return rc;
}

static int restore_w(HKEY j, const wchar_t *w, char *err, size_t errsz)
{
    uint64_t entry = 0;
    DWORD type = 0, size = sizeof(entry);
    LONG lr = RegQueryValueExW(j, w, NULL, &type, (BYTE *)&entry, &size);
    if (lr == ERROR_FILE_NOT_FOUND)
        return 0;
    if (lr != ERROR_SUCCESS || type != REG_QWORD) {
        /* Not ours to interpret: removed so it cannot block the others. */
        snprintf(err, errsz, "a journal entry that is not a QWORD: removed");
        RegDeleteValueW(j, w);
        return HT_ESTATE;
    }
    wchar_t path[600];
    _snwprintf(path, 600, L"%ls\\%ls", IFEO_KEY, w);
    path[599] = 0;
    HKEY k;
    lr = RegOpenKeyExW(HKEY_LOCAL_MACHINE, path, 0, KEY_QUERY_VALUE | KEY_SET_VALUE | VIEW, &k);
    if (lr == ERROR_SUCCESS) {
        if (entry & J_HAD_VALUE) {
            DWORD prev = (DWORD)entry;
            lr = RegSetValueExW(k, L"TracingFlags", 0, REG_DWORD, (const BYTE *)&prev, sizeof(prev));
        } else {
            lr = RegDeleteValueW(k, L"TracingFlags");
            if (lr == ERROR_FILE_NOT_FOUND)
                lr = ERROR_SUCCESS;
        }
        DWORD nsub = 0, nval = 0;
        if (lr == ERROR_SUCCESS)
            lr = RegQueryInfoKeyW(k, NULL, NULL, NULL, &nsub, NULL, NULL, &nval, NULL, NULL, NULL,
                                  NULL);
        RegFlushKey(k);
        RegCloseKey(k);
        if (lr != ERROR_SUCCESS) {
            win_err(err, errsz, "cannot restore TracingFlags", lr);
            return map_err(lr);
        }
        /* The image's key goes only if we made it and nothing was added since. */
        if ((entry & J_KEY_CREATED) && nsub == 0 && nval == 0) {
            HKEY ifeo;
            if (RegOpenKeyExW(HKEY_LOCAL_MACHINE, IFEO_KEY, 0, DELETE | KEY_ENUMERATE_SUB_KEYS |
                              KEY_QUERY_VALUE | VIEW, &ifeo) == ERROR_SUCCESS) {
                RegDeleteKeyExW(ifeo, w, VIEW, 0);
                RegCloseKey(ifeo);
            }
        }
    } else if (lr != ERROR_FILE_NOT_FOUND) {
        win_err(err, errsz, "cannot open the image's execution options", lr);
        return map_err(lr);
    }
    lr = RegDeleteValueW(j, w);
    RegFlushKey(j);
    if (lr != ERROR_SUCCESS && lr != ERROR_FILE_NOT_FOUND) {
        win_err(err, errsz, "cannot remove the journal entry", lr);
        return map_err(lr);
    }
    return 0;
}

int ifeo_restore(const char *journal, const char *exe, char *err, size_t errsz)
{
    wchar_t w[300];
    if (widen(exe, w, 300) != 0) {
        snprintf(err, errsz, "image name is not UTF-8");
        return HT_EBADARG;
    }
    HKEY j;
    LONG lr = open_journal(journal, KEY_QUERY_VALUE | KEY_SET_VALUE, &j, 0);
    if (lr == ERROR_FILE_NOT_FOUND)
        return 0;
    if (lr != ERROR_SUCCESS) {
        win_err(err, errsz, "cannot open the journal key", lr);
        return map_err(lr);
    }
    int rc = restore_w(j, w, err, errsz);
    RegCloseKey(j);
    return rc;
}

unsigned ifeo_restore_all(const char *journal, unsigned *failed)
{
    *failed = 0;
    HKEY j;
    if (open_journal(journal, KEY_QUERY_VALUE | KEY_SET_VALUE, &j, 0) != ERROR_SUCCESS)
        return 0;
    unsigned done = 0;
    /* Entries are deleted as they are restored: always read index 0, and
     * skip past the ones that stay. */
    for (DWORD idx = 0;;) {
        wchar_t name[300];
        DWORD nlen = 300;
        if (RegEnumValueW(j, idx, name, &nlen, NULL, NULL, NULL, NULL) != ERROR_SUCCESS)
            break;
        char err[200];
        if (restore_w(j, name, err, sizeof(err)) == 0) {
            done++;
        } else {
            (*failed)++;
            /* Past an entry that stays; a removed bad one moved the rest up. */
            if (RegQueryValueExW(j, name, NULL, NULL, NULL, NULL) == ERROR_SUCCESS)
                idx++;
        }
    }
    RegCloseKey(j);
    return done;
}
