/* Windows output files: a temporary file next to the target, FlushFileBuffers, MoveFileExW. */
#include "out-file.h"

#include <windows.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdlib.h>
#include <string.h>

/* path as UTF-16 (malloc'd), or NULL. */
static wchar_t *out_wide(const char *path)
{
    int n = MultiByteToWideChar(CP_UTF8, 0, path, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof(wchar_t)) : NULL;
    if (w && MultiByteToWideChar(CP_UTF8, 0, path, -1, w, n) != n) {
        free(w);
        return NULL;
    }
    return w;
}

/* The path a handle's file really has (links resolved), UTF-8 and malloc'd,
 * or NULL. "\\?\" paths are fine for CreateFileW and MoveFileExW
 * (https://learn.microsoft.com/windows/win32/api/fileapi/nf-fileapi-getfinalpathnamebyhandlew). */
static char *out_final_path(HANDLE h)
{
    wchar_t w[32768];
    DWORD n = GetFinalPathNameByHandleW(h, w, sizeof(w) / sizeof(w[0]),
                                        FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
    if (n == 0 || n >= sizeof(w) / sizeof(w[0]))
        return NULL;
    int k = WideCharToMultiByte(CP_UTF8, 0, w, -1, NULL, 0, NULL, NULL);
    char *s = k > 0 ? malloc((size_t)k) : NULL;
    if (s && WideCharToMultiByte(CP_UTF8, 0, w, -1, s, k, NULL, NULL) != k) {
        free(s);
        return NULL;
    }
    return s;
}

/* errno for a Windows error code, enough for strerror's message. */
static int out_errno(DWORD e)
{
    switch (e) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
        return EACCES;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
        return EEXIST;
    default:
        return EIO;
    }
}

static int out_fail_open(struct out_file *o, int err)
{
    fprintf(stderr, "heaptracectl: %s: %s\n", o->path, strerror(err));
    return -1;
}

/* Not a regular file (NUL, CON, a pipe): written in place, in binary. */
static int out_open_direct(struct out_file *o)
{
    o->f = fopen(o->path, "wb");
    return o->f ? 0 : out_fail_open(o, errno);
}

int out_file_create(struct out_file *o)
{
    wchar_t *wpath = out_wide(o->path);
    if (!wpath)
        return out_fail_open(o, EINVAL);
    DWORD attr = GetFileAttributesW(wpath);
    int exists = attr != INVALID_FILE_ATTRIBUTES;
    if (exists && (attr & FILE_ATTRIBUTE_DIRECTORY)) {
        free(wpath);
        return out_fail_open(o, EISDIR);
    }
    /* A device (NUL, CON, COM1) is not a disk file: written in place. The
     * handle follows a symbolic link (no FILE_FLAG_OPEN_REPARSE_POINT). */
    HANDLE probe =
        exists ? CreateFileW(wpath, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                             OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL)
               : INVALID_HANDLE_VALUE;
    DWORD type = probe != INVALID_HANDLE_VALUE ? GetFileType(probe) : FILE_TYPE_DISK;
    if (probe != INVALID_HANDLE_VALUE && type == FILE_TYPE_DISK)
        o->real = out_final_path(probe);
    if (probe != INVALID_HANDLE_VALUE)
        CloseHandle(probe);
    free(wpath);
    if (type != FILE_TYPE_DISK)
        return out_open_direct(o);
    /* The temporary file sits in the target's directory (the same volume:
     * MoveFileExW then replaces without copying); a link's target is the one
     * replaced, as on Unix. The new file gets its directory's inherited ACL,
     * not the old file's. */
    const char *target = o->real ? o->real : o->path;
    const char *sep = NULL;
    for (const char *p = target; *p; p++)
        if (*p == '/' || *p == '\\' || (*p == ':' && p == target + 1))
            sep = p;
    size_t dl = sep ? (size_t)(sep - target) + 1 : 0;
    size_t n = strlen(target) + 40;
    o->tmp = malloc(n);
    if (!o->tmp)
        return out_fail_open(o, ENOMEM);
    /* CREATE_NEW: a name another process holds is never opened; retried with the next counter. */
    HANDLE h = INVALID_HANDLE_VALUE;
    DWORD e = 0;
    for (unsigned i = 0; i < 100 && h == INVALID_HANDLE_VALUE; i++) {
        snprintf(o->tmp, n, "%.*s.%s.%lu.%u", (int)dl, target, target + dl,
                 (unsigned long)GetCurrentProcessId(), i);
        wchar_t *wtmp = out_wide(o->tmp);
        h = wtmp
                ? CreateFileW(wtmp, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL)
                : INVALID_HANDLE_VALUE;
        e = GetLastError();
        free(wtmp);
        if (h == INVALID_HANDLE_VALUE && e != ERROR_FILE_EXISTS && e != ERROR_ALREADY_EXISTS)
            break;
    }
    int fd = h != INVALID_HANDLE_VALUE ? _open_osfhandle((intptr_t)h, _O_BINARY | _O_WRONLY) : -1;
    o->f = fd >= 0 ? _fdopen(fd, "wb") : NULL;
    if (!o->f) {
        int err = h == INVALID_HANDLE_VALUE ? out_errno(e) : errno;
        if (fd >= 0)
            _close(fd);
        else if (h != INVALID_HANDLE_VALUE)
            CloseHandle(h);
        if (h != INVALID_HANDLE_VALUE)
            remove(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return out_fail_open(o, err);
    }
    return 0;
}

/* FlushFileBuffers: the file's data and metadata on disk
 * (https://learn.microsoft.com/windows/win32/api/fileapi/nf-fileapi-flushfilebuffers). */
int out_file_sync(FILE *f)
{
    HANDLE h = (HANDLE)_get_osfhandle(_fileno(f));
    if (h == INVALID_HANDLE_VALUE || !FlushFileBuffers(h)) {
        errno = h == INVALID_HANDLE_VALUE ? EBADF : out_errno(GetLastError());
        return -1;
    }
    return 0;
}

/* rename() refuses an existing target on Windows; MoveFileExW replaces it,
 * and returns only once the move is on disk with MOVEFILE_WRITE_THROUGH
 * (https://learn.microsoft.com/windows/win32/api/winbase/nf-winbase-movefileexw). */
int out_file_replace(const char *tmp, const char *target)
{
    wchar_t *wt = out_wide(tmp), *wd = out_wide(target);
    BOOL ok = wt && wd && MoveFileExW(wt, wd, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
    DWORD e = GetLastError();
    free(wt);
    free(wd);
    if (!ok) {
        errno = out_errno(e);
        return -1;
    }
    return 0;
}
