/* Unix stop requests: SIGINT and SIGTERM through libuv, SIGPIPE ignored, requests from threads. */
#include "stop.h"

#include "ht-alloc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

struct stop_watch {
    uv_signal_t sigint, sigterm, sigpipe;
    uv_async_t request; /* stop_watch_request, from any thread */
    int open;           /* handles not closed yet */
    stop_cb cb;
    void *arg;
    char why[96]; /* of the last request; under request_lock */
};

/* The running watch, for stop_watch_request (one daemon loop per process). */
static uv_mutex_t request_lock;
static uv_once_t request_once = UV_ONCE_INIT;
static struct stop_watch *running;
/* A stop_watch_request made while no watch ran: the next watch gets it. */
static char pending[96];

static void request_lock_init(void)
{
    if (uv_mutex_init(&request_lock) != 0)
        abort();
}

static void signal_cb(uv_signal_t *h, int signum)
{
    struct stop_watch *sw = h->data;
    if (signum == SIGPIPE)
        return; /* watched only so that it does not kill the daemon */
    char why[32];
    snprintf(why, sizeof(why), "signal %d", signum);
    sw->cb(sw->arg, why);
}

static void request_cb(uv_async_t *a)
{
    struct stop_watch *sw = a->data;
    char why[sizeof(sw->why)];
    uv_mutex_lock(&request_lock);
    snprintf(why, sizeof(why), "%s", sw->why);
    uv_mutex_unlock(&request_lock);
    sw->cb(sw->arg, why);
}

void stop_watch_request(const char *why)
{
    uv_once(&request_once, request_lock_init);
    uv_mutex_lock(&request_lock);
    if (running) {
        snprintf(running->why, sizeof(running->why), "%s", why);
        uv_async_send(&running->request);
    } else {
        snprintf(pending, sizeof(pending), "%s", why);
    }
    uv_mutex_unlock(&request_lock);
}

static void stop_closed_cb(uv_handle_t *h)
{
    struct stop_watch *sw = h->data;
    if (--sw->open == 0)
        ht_free(sw);
}

int stop_watch_start(uv_loop_t *loop, stop_cb cb, void *arg, struct stop_watch **out)
{
    struct stop_watch *sw = ht_calloc(1, sizeof(*sw));
    *out = NULL;
    if (!sw)
        return UV_ENOMEM;
    sw->cb = cb;
    sw->arg = arg;
    uv_signal_t *h[] = {&sw->sigint, &sw->sigterm, &sw->sigpipe};
    int signum[] = {SIGINT, SIGTERM, SIGPIPE};
    int rc = uv_async_init(loop, &sw->request, request_cb);
    sw->request.data = sw;
    sw->open++;
    for (int i = 0; i < 3; i++) {
        uv_signal_init(loop, h[i]);
        h[i]->data = sw;
        sw->open++;
        if (rc == 0)
            rc = uv_signal_start(h[i], signal_cb, signum[i]);
    }
    if (rc != 0) {
        stop_watch_close(sw);
        return rc;
    }
    uv_once(&request_once, request_lock_init);
    uv_mutex_lock(&request_lock);
    running = sw;
    if (pending[0]) {
        snprintf(sw->why, sizeof(sw->why), "%s", pending);
        pending[0] = '\0';
        uv_async_send(&sw->request);
    }
    uv_mutex_unlock(&request_lock);
    *out = sw;
    return 0;
}

void stop_watch_close(struct stop_watch *sw)
{
    uv_once(&request_once, request_lock_init);
    uv_mutex_lock(&request_lock);
    if (running == sw)
        running = NULL;
    uv_mutex_unlock(&request_lock);
    uv_close((uv_handle_t *)&sw->request, stop_closed_cb);
    uv_close((uv_handle_t *)&sw->sigint, stop_closed_cb);
    uv_close((uv_handle_t *)&sw->sigterm, stop_closed_cb);
    uv_close((uv_handle_t *)&sw->sigpipe, stop_closed_cb);
}
