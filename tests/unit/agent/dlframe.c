/* libdlframe-{a,b}.so: functions at the same offsets in both, calling
 * malloc with a frame of FRAME bytes: the same return addresses, different
 * CFI (CFA = rsp + FRAME + ...). dlreload loads one, then the other at the
 * address the first left. Built without frame pointers, like Debian.
 * dlframe_signal allocates in a signal handler under such a frame: a
 * stack through a signal frame, which the fast unwinder leaves to
 * libunwind. */
#include <signal.h>
#include <stdlib.h>

__attribute__((noinline)) void *dlframe_alloc(size_t n)
{
    volatile char pad[FRAME];
    pad[0] = 1;
    void *p = malloc(n);
    if (pad[0] != 1) /* read back: the frame stays */
        abort();
    return p;
}

static void *volatile in_handler;

static void on_signal(int sig)
{
    (void)sig;
    in_handler = malloc(24);
}

__attribute__((noinline)) void *dlframe_signal(void)
{
    volatile char pad[FRAME];
    pad[0] = 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGUSR2, &sa, NULL);
    raise(SIGUSR2);
    if (pad[0] != 1)
        abort();
    return in_handler;
}
