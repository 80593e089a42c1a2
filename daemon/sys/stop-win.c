/* Windows stop requests: the console's Ctrl-C and the service control handler, on their threads. */
#include "stop.h"

#include "ht-alloc.h"

#include <windows.h>

#include <stdio.h>

struct stop_watch {
    uv_async_t request; /* every request wakes the loop through it */
    stop_cb cb;
    void *arg;
    char why[96]; /* of the last request; under request_lock */
};

/* The running watch (one daemon loop per process). The console control
 * handler runs on a thread the system makes for it, the service control
 * handler on the dispatcher's thread
 * (https://learn.microsoft.com/windows/console/handlerroutine,
 * https://learn.microsoft.com/windows/win32/services/service-control-handler-function):
 * both reach it under this lock, which stop_watch_close takes too, so no
 * request touches a watch being closed. */
static SRWLOCK request_lock = SRWLOCK_INIT;
static struct stop_watch *running;
/* A stop_watch_request made while no watch ran (the service control
 * handler can ask before the daemon listens): the next watch gets it. */
static char pending[96];
static int console_handler_set;

static void request_cb(uv_async_t *a)
{
    struct stop_watch *sw = a->data;
    char why[sizeof(sw->why)];
    AcquireSRWLockExclusive(&request_lock);
    snprintf(why, sizeof(why), "%s", sw->why);
    ReleaseSRWLockExclusive(&request_lock);
    sw->cb(sw->arg, why);
}

/* 1 if a watch took it. */
static int request(const char *why)
{
    AcquireSRWLockExclusive(&request_lock);
    struct stop_watch *sw = running;
    if (sw) {
        snprintf(sw->why, sizeof(sw->why), "%s", why);
        uv_async_send(&sw->request);
    }
    ReleaseSRWLockExclusive(&request_lock);
    return sw != NULL;
}

void stop_watch_request(const char *why)
{
    AcquireSRWLockExclusive(&request_lock);
    if (!running)
        snprintf(pending, sizeof(pending), "%s", why);
    ReleaseSRWLockExclusive(&request_lock);
    request(why);
}

/* Ctrl-C, Ctrl-Break and the console window closing stop the daemon; with
 * no watch running the next handler (the default: exit) runs. */
static BOOL WINAPI console_cb(DWORD type)
{
    const char *why = type == CTRL_C_EVENT       ? "Ctrl-C"
                      : type == CTRL_BREAK_EVENT ? "Ctrl-Break"
                      : type == CTRL_CLOSE_EVENT ? "console closed"
                                                 : "logoff or shutdown";
    return request(why) ? TRUE : FALSE;
}

static void stop_closed_cb(uv_handle_t *h)
{
    ht_free(h->data);
}

int stop_watch_start(uv_loop_t *loop, stop_cb cb, void *arg, struct stop_watch **out)
{
    struct stop_watch *sw = ht_calloc(1, sizeof(*sw));
    *out = NULL;
    if (!sw)
        return UV_ENOMEM;
    sw->cb = cb;
    sw->arg = arg;
    int rc = uv_async_init(loop, &sw->request, request_cb);
    if (rc != 0) {
        ht_free(sw);
        return rc;
    }
    sw->request.data = sw;
    /* Set once and left: it passes requests on only while a watch runs. A
     * service has no console and the call fails harmlessly there. */
    if (!console_handler_set)
        console_handler_set = SetConsoleCtrlHandler(console_cb, TRUE) != 0;
    AcquireSRWLockExclusive(&request_lock);
    running = sw;
    if (pending[0]) {
        snprintf(sw->why, sizeof(sw->why), "%s", pending);
        pending[0] = '\0';
        uv_async_send(&sw->request);
    }
    ReleaseSRWLockExclusive(&request_lock);
    *out = sw;
    return 0;
}

void stop_watch_close(struct stop_watch *sw)
{
    AcquireSRWLockExclusive(&request_lock);
    if (running == sw)
        running = NULL;
    ReleaseSRWLockExclusive(&request_lock);
    uv_close((uv_handle_t *)&sw->request, stop_closed_cb);
}
