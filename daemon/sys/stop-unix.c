/* Unix stop requests: SIGINT and SIGTERM through libuv, SIGPIPE ignored. */
#include "stop.h"

#include "ht-alloc.h"

#include <signal.h>
#include <stdio.h>

struct stop_watch {
    uv_signal_t sigint, sigterm, sigpipe;
    int open; /* handles not closed yet */
    stop_cb cb;
    void *arg;
};

static void signal_cb(uv_signal_t *h, int signum)
{
    struct stop_watch *sw = h->data;
    if (signum == SIGPIPE)
        return; /* watched only so that it does not kill the daemon */
    char why[32];
    snprintf(why, sizeof(why), "signal %d", signum);
    sw->cb(sw->arg, why);
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
    int rc = 0;
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
    *out = sw;
    return 0;
}

void stop_watch_close(struct stop_watch *sw)
{
    uv_close((uv_handle_t *)&sw->sigint, stop_closed_cb);
    uv_close((uv_handle_t *)&sw->sigterm, stop_closed_cb);
    uv_close((uv_handle_t *)&sw->sigpipe, stop_closed_cb);
}
