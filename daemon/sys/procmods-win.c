/* A Windows process's modules: EnumProcessModulesEx, GetModuleInformation, GetModuleFileNameExW. */
#include "procmods.h"

#include "ht-alloc.h"
#include "proc-win.h"

#include <string.h>
#include <uv.h>
#include <windows.h>
#include <psapi.h>

const char *procmods_basename(const char *path)
{
    const char *b = path;
    for (const char *p = path; *p; p++)
        if (*p == '\\' || *p == '/')
            b = p + 1;
    return b;
}

/* UTF-16 to UTF-8 into out (cut at a character boundary when too long). */
static void utf8_of(const WCHAR *w, char *out, size_t outsz)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, out, (int)outsz, NULL, NULL);
    if (n > 0)
        return;
    /* Too long: cut the wide string until it fits. */
    size_t wl = wcslen(w);
    while (wl > 0) {
        wl /= 2;
        n = WideCharToMultiByte(CP_UTF8, 0, w, (int)wl, out, (int)outsz - 1, NULL, NULL);
        if (n > 0) {
            out[n] = '\0';
            return;
        }
    }
    out[0] = '\0';
}

static int sys_err(DWORD e)
{
    return e == ERROR_INVALID_PARAMETER ? UV_ENOENT : uv_translate_sys_error((int)e);
}

int procmods_list(uint64_t pid, struct procmods_module **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (pid == 0 || pid > 0xffffffffu)
        return UV_ENOENT;
    /* EnumProcessModulesEx, GetModuleInformation and GetModuleFileNameExW
     * need PROCESS_QUERY_INFORMATION | PROCESS_VM_READ (learn.microsoft.com,
     * EnumProcessModulesEx, hProcess); they read the loader's list in the
     * target's memory. */
    HANDLE h =
        OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ | SYNCHRONIZE, FALSE, (DWORD)pid);
    if (!h)
        return sys_err(GetLastError());
    int rc = 0;
    HMODULE *hm = NULL;
    struct procmods_module *v = NULL;
    DWORD need = 0, cap = 0;
    if (proc_win_gone(h)) {
        rc = UV_ENOENT;
        goto done;
    }
    /* The list may grow between two calls: retry with the size it asks for. */
    for (int tries = 0; tries < 4; tries++) {
        if (!EnumProcessModulesEx(h, hm, cap, &need, LIST_MODULES_ALL)) {
            DWORD e = GetLastError();
            /* A process still starting (no loader list yet) or gone: partial copy. */
            rc = proc_win_gone(h) ? UV_ENOENT : sys_err(e);
            goto done;
        }
        if (need <= cap)
            break;
        if (need / sizeof *hm > PROCMODS_MAX)
            need = PROCMODS_MAX * sizeof *hm;
        if (need <= cap)
            break;
        ht_free(hm);
        cap = need + 16 * sizeof *hm;
        hm = ht_malloc(cap);
        if (!hm) {
            rc = UV_ENOMEM;
            goto done;
        }
    }
    size_t count = (need < cap ? need : cap) / sizeof *hm;
    if (count == 0)
        goto done;
    v = ht_calloc(count, sizeof *v);
    if (!v) {
        rc = UV_ENOMEM;
        goto done;
    }
    size_t k = 0;
    WCHAR wpath[32768];
    for (size_t i = 0; i < count; i++) {
        MODULEINFO mi;
        /* A module unloaded meanwhile fails here: left out. */
        if (!GetModuleInformation(h, hm[i], &mi, sizeof mi))
            continue;
        DWORD wl = GetModuleFileNameExW(h, hm[i], wpath, sizeof wpath / sizeof *wpath);
        if (wl == 0)
            continue;
        wpath[wl < sizeof wpath / sizeof *wpath ? wl : sizeof wpath / sizeof *wpath - 1] = 0;
        v[k].base = (uint64_t)(uintptr_t)mi.lpBaseOfDll;
        v[k].size = mi.SizeOfImage;
        utf8_of(wpath, v[k].path, sizeof v[k].path);
        k++;
    }
    *out = v;
    *n = k;
    v = NULL;
done:
    ht_free(v);
    ht_free(hm);
    CloseHandle(h);
    return rc;
}
