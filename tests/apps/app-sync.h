/*
 * Go-signal handshake shared by the test apps (tests/apps/README in
 * CMakeLists.txt's header comment): an app prints one JSON line, then waits
 * until it receives SIGUSR1 or reads a byte on stdin, so a tracer can attach
 * (or a test can place a mark) before it goes on.
 *
 * Call app_sync_init() first in main, before any thread is created: it blocks
 * SIGUSR1 in the calling thread, so every thread created afterwards inherits
 * the mask and the signal stays pending until app_sync_wait() takes it.
 *
 * Threads: app_sync_* are for the main thread only. Header-only (static
 * functions) so C and C++ apps share it without a library.
 */
#ifndef APP_SYNC_H
#define APP_SYNC_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

static __attribute__((unused)) int app_sync_sfd = -1;
static __attribute__((unused)) int app_sync_stdin_open = 1;
static __attribute__((unused)) struct timespec app_sync_t0;

static __attribute__((unused)) void app_sync_init(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
        perror("sigprocmask");
        exit(2);
    }
    app_sync_sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (app_sync_sfd < 0) {
        perror("signalfd");
        exit(2);
    }
    clock_gettime(CLOCK_MONOTONIC, &app_sync_t0);
}

/* Nanoseconds since app_sync_init(). */
static __attribute__((unused)) long long app_sync_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)(t.tv_sec - app_sync_t0.tv_sec) * 1000000000LL +
           (t.tv_nsec - app_sync_t0.tv_nsec);
}

/* One JSON line on stdout, flushed (the test reads it while we wait). */
static __attribute__((unused)) void app_sync_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Block until SIGUSR1 or a byte on stdin (EOF on stdin: only the signal). */
static __attribute__((unused)) void app_sync_wait(void)
{
    for (;;) {
        struct pollfd p[2] = {{app_sync_sfd, POLLIN, 0}, {0, POLLIN, 0}};
        int n = poll(p, app_sync_stdin_open ? 2 : 1, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("poll");
            exit(2);
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(app_sync_sfd, &si, sizeof si) == (ssize_t)sizeof si)
                return;
        }
        if (app_sync_stdin_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            char c;
            ssize_t r = read(0, &c, 1);
            if (r == 1)
                return;
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                app_sync_stdin_open = 0;
        }
    }
}

/* Print {"pid":N,"ready":true} and wait for the go-signal. */
static __attribute__((unused)) void app_sync_ready(void)
{
    app_sync_say("{\"pid\":%d,\"ready\":true}", (int)getpid());
    app_sync_wait();
}

/* Sleep ms milliseconds (not interrupted: SIGUSR1 is blocked). */
static __attribute__((unused)) void app_sync_sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

#endif
