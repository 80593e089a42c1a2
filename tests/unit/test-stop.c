/* Stop requests (sys/stop.h): from another thread (the Windows service control handler's
 * case), before a watch runs, and the console's Ctrl-C on Windows. */
#ifdef _WIN32
#include <windows.h>
#endif

#include "ht-test.h"
#include "sys/stop.h"

#include <uv.h>

struct seen {
    int calls;
    char why[96];
    struct stop_watch *sw;
};

static void seen_cb(void *arg, const char *why)
{
    struct seen *s = arg;
    s->calls++;
    snprintf(s->why, sizeof(s->why), "%s", why);
    if (s->sw) { /* the server closes it on the first request */
        stop_watch_close(s->sw);
        s->sw = NULL;
    }
}

/* A request that never comes ends the wait (and the case) after 5 s. */
static void give_up_cb(uv_timer_t *t)
{
    struct seen *s = t->data;
    if (s->sw)
        stop_watch_close(s->sw);
    s->sw = NULL;
    uv_close((uv_handle_t *)t, NULL);
}

static void give_up_start(uv_loop_t *loop, uv_timer_t *t, struct seen *s)
{
    uv_timer_init(loop, t);
    t->data = s;
    uv_timer_start(t, give_up_cb, 5000, 0);
    uv_unref((uv_handle_t *)t);
}

static void give_up_end(uv_loop_t *loop, uv_timer_t *t)
{
    if (!uv_is_closing((uv_handle_t *)t))
        uv_close((uv_handle_t *)t, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
}

static void request_thread(void *arg)
{
    (void)arg;
    stop_watch_request("service stop");
}

/* The loop wakes up for a request from another thread, gets its reason, and ends once the
 * watch is closed (nothing left open). */
static void test_request_from_thread(void)
{
    uv_loop_t loop;
    struct seen s = {0};
    uv_loop_init(&loop);
    CHECK_EQ(stop_watch_start(&loop, seen_cb, &s, &s.sw), 0);
    uv_thread_t t;
    CHECK_EQ(uv_thread_create(&t, request_thread, NULL), 0);
    /* Without the request the loop would end only when the give-up timer closes the watch. */
    uv_timer_t give_up;
    give_up_start(&loop, &give_up, &s);
    uv_run(&loop, UV_RUN_DEFAULT);
    give_up_end(&loop, &give_up);
    uv_thread_join(&t);
    CHECK_EQ(s.calls, 1);
    CHECK_STR(s.why, "service stop");
    CHECK_EQ(uv_loop_close(&loop), 0);
}

/* A request before any watch runs (a service stopped while starting) is kept: the next
 * watch delivers it at once, then nothing more. */
static void test_request_before_watch(void)
{
    stop_watch_request("too early");
    uv_loop_t loop;
    struct seen s = {0};
    uv_loop_init(&loop);
    CHECK_EQ(stop_watch_start(&loop, seen_cb, &s, &s.sw), 0);
    uv_timer_t give_up;
    give_up_start(&loop, &give_up, &s);
    uv_run(&loop, UV_RUN_DEFAULT); /* ends: the first call closes the watch */
    give_up_end(&loop, &give_up);
    CHECK_EQ(s.calls, 1);
    CHECK_STR(s.why, "too early");
    /* Delivered once: a second watch sees nothing. */
    struct seen t = {0};
    CHECK_EQ(stop_watch_start(&loop, seen_cb, &t, &t.sw), 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_EQ(t.calls, 0);
    stop_watch_close(t.sw);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

#ifdef _WIN32
/* Ctrl-C on the daemon's console stops it (the console control handler). The case takes a
 * console of its own first, so that the Ctrl-C reaches no other process (ctest's). */
static void test_console_ctrl_c(void)
{
    FreeConsole();
    if (!AllocConsole()) {
        printf("skip: no console could be made for Ctrl-C (AllocConsole: error %lu)\n",
               (unsigned long)GetLastError());
        exit(HT_TEST_SKIP);
    }
    SetConsoleCtrlHandler(NULL, FALSE); /* Ctrl-C not ignored, whatever the parent said */
    uv_loop_t loop;
    struct seen s = {0};
    uv_loop_init(&loop);
    CHECK_EQ(stop_watch_start(&loop, seen_cb, &s, &s.sw), 0);
    if (!GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)) {
        DWORD e = GetLastError();
        stop_watch_close(s.sw);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        printf("skip: GenerateConsoleCtrlEvent failed (error %lu): no console to send Ctrl-C on\n",
               (unsigned long)e);
        exit(HT_TEST_SKIP);
    }
    uv_timer_t give_up;
    give_up_start(&loop, &give_up, &s);
    uv_run(&loop, UV_RUN_DEFAULT);
    give_up_end(&loop, &give_up);
    CHECK_EQ(s.calls, 1);
    CHECK_STR(s.why, "Ctrl-C");
    CHECK_EQ(uv_loop_close(&loop), 0);
}
#endif

int ht_test_failed;

int main(int argc, char **argv)
{
    static const struct ht_test_case cases[] = {
        T(request_from_thread),
        T(request_before_watch),
#ifdef _WIN32
        T(console_ctrl_c),
#endif
    };
    setvbuf(stdout, NULL, _IONBF, 0);
    return ht_test_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
