/* A process's exit on the loop: a thread-pool wait on its handle wakes a uv_async. */
#include "procwatch.h"

#include "ht-alloc.h"

#include <windows.h>

struct procwatch {
    uv_async_t async;
    HANDLE proc, wait;
    uint64_t pid;
    procwatch_cb cb;
    void *arg;
    int stopped;
};

/* On a thread-pool thread, once (WT_EXECUTEONLYONCE): the process is signalled. */
static void CALLBACK on_signalled(void *ctx, BOOLEAN timed_out)
{
    (void)timed_out;
    struct procwatch *w = ctx;
    uv_async_send(&w->async);
}

static void on_closed(uv_handle_t *h)
{
    ht_free(h->data);
}

static void on_async(uv_async_t *a)
{
    struct procwatch *w = a->data;
    if (w->stopped)
        return;
    DWORD code = 0;
    int known = GetExitCodeProcess(w->proc, &code) && code != STILL_ACTIVE;
    /* An exit code of 259 reads STILL_ACTIVE: the process has exited all the same. */
    w->cb(w->arg, w->pid, known, (int)code);
}

int procwatch_start(uv_loop_t *loop, uint64_t pid, procwatch_cb cb, void *arg,
                    struct procwatch **out)
{
    if (pid == 0 || pid > 0xffffffffu)
        return UV_ENOENT;
    struct procwatch *w = ht_calloc(1, sizeof *w);
    if (!w)
        return UV_ENOMEM;
    w->pid = pid;
    w->cb = cb;
    w->arg = arg;
    /* SYNCHRONIZE to wait on it, PROCESS_QUERY_LIMITED_INFORMATION for its
     * exit code (learn.microsoft.com, GetExitCodeProcess). */
    w->proc = OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!w->proc) {
        DWORD e = GetLastError();
        ht_free(w);
        return e == ERROR_INVALID_PARAMETER ? UV_ENOENT : uv_translate_sys_error((int)e);
    }
    int rc = uv_async_init(loop, &w->async, on_async);
    if (rc) {
        CloseHandle(w->proc);
        ht_free(w);
        return rc;
    }
    w->async.data = w;
    /* The callback runs on a thread-pool thread when the handle is signalled
     * (learn.microsoft.com, RegisterWaitForSingleObject); an already
     * exited process is signalled at once. */
    if (!RegisterWaitForSingleObject(&w->wait, w->proc, on_signalled, w, INFINITE,
                                     WT_EXECUTEONLYONCE)) {
        rc = uv_translate_sys_error((int)GetLastError());
        CloseHandle(w->proc);
        uv_close((uv_handle_t *)&w->async, on_closed);
        return rc;
    }
    *out = w;
    return 0;
}

void procwatch_stop(struct procwatch *w)
{
    if (!w || w->stopped)
        return;
    w->stopped = 1;
    /* INVALID_HANDLE_VALUE: returns once a running callback has finished, so
     * no uv_async_send can follow the close below. */
    UnregisterWaitEx(w->wait, INVALID_HANDLE_VALUE);
    CloseHandle(w->proc);
    uv_close((uv_handle_t *)&w->async, on_closed);
}
