/*
 * agentcase: what the in-process agent must get through (heaptracectl run,
 * tests/integration/cases-agent.sh), one mode per run. Built like Debian
 * builds (-O2, no frame pointers): stacks come from the unwinder.
 * usage: agentcase fork|exec|dlopen|signal|spin PLUGIN_DIR
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait; run the mode; print
 * {"done":true,...} with the ground truth; wait; exit 0.
 *   fork:   the parent leaks 30 x 100 B (parent_leak); the child 40 x 200 B
 *           (child_leak) and exits; the parent 10 x 300 B more after it (after_fork).
 *   exec:   leaks 25 x 120 B (before_exec), then execs /bin/sh printing its
 *           LD_PRELOAD and the agent's variables ({"child_env":"..."}), which exits 0.
 *   dlopen: 20 x 64 B through PLUGIN_DIR/libagentplug.so (plug_alloc); {"at":"loaded"},
 *           wait; dlclose.
 *   signal: SIGALRM's handler leaks 48 B per signal (on_signal), raised 15 times.
 *   spin:   allocates and frees 64 B in a loop for the time given (ms) as PLUGIN_DIR.
 */
#define _GNU_SOURCE
#include "app-sync.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

void *volatile ac_sink;

__attribute__((noipa)) static void parent_leak(int n, size_t sz)
{
    for (int i = 0; i < n; i++)
        ac_sink = malloc(sz);
}

__attribute__((noipa)) static void child_leak(int n, size_t sz)
{
    for (int i = 0; i < n; i++)
        ac_sink = malloc(sz);
}

__attribute__((noipa)) static void after_fork(int n, size_t sz)
{
    for (int i = 0; i < n; i++)
        ac_sink = malloc(sz);
}

__attribute__((noipa)) static void before_exec(int n, size_t sz)
{
    for (int i = 0; i < n; i++)
        ac_sink = malloc(sz);
}

static void mode_fork(void)
{
    parent_leak(30, 100);
    pid_t c = fork();
    if (c == 0) {
        child_leak(40, 200);
        /* Alive a while: a traced child's frames are named from its
         * /proc/PID while it lives (run --follow). */
        app_sync_sleep_ms(300);
        _exit(0);
    }
    int st;
    waitpid(c, &st, 0);
    after_fork(10, 300);
    app_sync_say(
        "{\"done\":true,\"child_pid\":%d,\"child_status\":%d,\"sites\":[{\"site\":\"parent_leak\","
        "\"live_count\":30,\"live_bytes\":3000},{\"site\":\"child_leak\",\"live_count\":0,"
        "\"live_bytes\":0},{\"site\":\"after_fork\",\"live_count\":10,\"live_bytes\":3000}]}",
        (int)c, st);
}

static void mode_exec(void)
{
    before_exec(25, 120);
    app_sync_say("{\"done\":true,\"sites\":[{\"site\":\"before_exec\",\"live_count\":25,"
                 "\"live_bytes\":3000}]}");
    app_sync_wait();
    execl("/bin/sh", "sh", "-c",
          "echo \"{\\\"child_env\\\":\\\"$LD_PRELOAD|$HEAPTRACE_AGENT_SOCKET|"
          "$HEAPTRACE_AGENT_TOKEN\\\"}\"",
          (char *)NULL);
    perror("execl");
    exit(2);
}

static void mode_dlopen(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/libagentplug.so", dir);
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
    void *(*plug)(size_t) = (void *(*)(size_t))dlsym(h, "plug_alloc");
    for (int i = 0; i < 20; i++)
        ac_sink = plug(64);
    /* The daemon names the library's frames while it is mapped: a library
     * unloaded before the daemon saw its first frame keeps addresses. */
    app_sync_say("{\"at\":\"loaded\"}");
    app_sync_wait();
    dlclose(h);
    app_sync_say("{\"done\":true,\"sites\":[{\"site\":\"plug_alloc\",\"live_count\":20,"
                 "\"live_bytes\":1280}]}");
}

static void *volatile sig_blocks[64];
static volatile sig_atomic_t sig_n;

__attribute__((noipa)) static void on_signal(int sig)
{
    (void)sig;
    if (sig_n < 64)
        sig_blocks[sig_n++] = malloc(48);
}

static void mode_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGALRM, &sa, NULL);
    for (int i = 0; i < 15; i++)
        raise(SIGALRM);
    app_sync_say("{\"done\":true,\"sites\":[{\"site\":\"on_signal\",\"live_count\":%d,"
                 "\"live_bytes\":%d}]}",
                 (int)sig_n, 48 * (int)sig_n);
}

static void mode_spin(long ms)
{
    long long end = app_sync_now_ns() + ms * 1000000LL, n = 0;
    while (app_sync_now_ns() < end) {
        for (int i = 0; i < 1000; i++) {
            void *p = malloc(64);
            ac_sink = p;
            free(p);
        }
        n += 1000;
    }
    app_sync_say("{\"done\":true,\"pairs\":%lld}", n);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: agentcase fork|exec|dlopen|signal|spin DIR|MS\n");
        return 2;
    }
    app_sync_init();
    app_sync_ready();
    if (!strcmp(argv[1], "fork"))
        mode_fork();
    else if (!strcmp(argv[1], "exec"))
        mode_exec();
    else if (!strcmp(argv[1], "dlopen"))
        mode_dlopen(argv[2]);
    else if (!strcmp(argv[1], "signal"))
        mode_signal();
    else if (!strcmp(argv[1], "spin"))
        mode_spin(atol(argv[2]));
    else
        return 2;
    app_sync_wait();
    return 0;
}
