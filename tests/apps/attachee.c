/*
 * A target for `start --pid N --source agent` (tests/integration/cases-attach.sh)
 * that checks for itself what an attach must not disturb. The main thread
 * (the one the daemon stops and borrows) waits in epoll_wait on stdin with
 * errno set to a sentinel; a reader thread waits in read() on a pipe a
 * writer thread fills with a counting byte sequence; a SIGALRM timer
 * (every 2 ms, blocked on the main thread) interrupts the other threads.
 *
 * With "churn" a thread makes malloc/free pairs all along. With
 * "segv-main" the main thread blocks SIGSEGV, with "segv-all" every
 * thread does (the daemon's calls return through a fault: such a thread is
 * not borrowed).
 *
 * Commands on stdin, one per line:
 *   alloc N   malloc N blocks of 100 bytes, kept ("alloc" line out)
 *   free      free every block kept (before and after the attach alike)
 *   dlopen P  dlopen library P and allocate 6 blocks of 100 bytes through its
 *             plug_alloc (tests/apps/agentplug.c), kept
 *   dlmopen P load library P with dlmopen(LM_ID_BASE) (not through dlopen)
 *   plug N    allocate N blocks of 100 bytes through plug_alloc, kept
 *   check     one JSON line: the counts below; ok is true when none is off
 * Checked: the main thread's epoll_wait never fails with EINTR (no signal
 * is meant for it), errno is the sentinel after each successful wait, no
 * byte of the sequence is lost or changed, no signal but SIGALRM arrives.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

#define SENTINEL 4242
#define KEEP_MAX 100000

static volatile sig_atomic_t alarms, stray;
#ifndef ATTACHEE_STATIC
static void *mloaded; /* the library of the last dlmopen */
#endif
static long eintr_main, errno_bad, seq_bad, seq_bytes;
static void *keep[KEEP_MAX];
static int nkeep;
static int pipefd[2];

static void alarm_cb(int sig)
{
    (void)sig;
    alarms++;
}

static void stray_cb(int sig)
{
    (void)sig;
    stray++;
}

static void *reader(void *arg)
{
    (void)arg;
    unsigned char buf[256], want = 0;
    for (;;) {
        ssize_t n = read(pipefd[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue; /* SA_RESTART: not expected either, but not an attach's doing */
        if (n <= 0)
            return NULL;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != want++)
                __atomic_fetch_add(&seq_bad, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&seq_bytes, n, __ATOMIC_RELAXED);
    }
}

/* "churn": malloc/free pairs all along (10,000 a second), so an attach
 * rewrites the slots under calls in flight. */
static long churned;

static void *churn(void *arg)
{
    (void)arg;
    for (;;) {
        void *volatile p = malloc(32);
        free(p);
        __atomic_fetch_add(&churned, 1, __ATOMIC_RELAXED);
        usleep(100);
    }
    return NULL;
}

static void *writer(void *arg)
{
    (void)arg;
    unsigned char b = 0;
    for (;;) {
        if (write(pipefd[1], &b, 1) == 1)
            b++;
        usleep(500);
    }
    return NULL;
}

static void signals_set(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = alarm_cb;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = stray_cb;
    int strays[] = {SIGTRAP, SIGCHLD, SIGUSR1, SIGUSR2, SIGPIPE, SIGURG, SIGCONT, SIGWINCH};
    for (unsigned i = 0; i < sizeof(strays) / sizeof(strays[0]); i++)
        sigaction(strays[i], &sa, NULL);
}

static void command(char *line)
{
    int n;
    if (sscanf(line, "alloc %d", &n) == 1) {
        for (int i = 0; i < n && nkeep < KEEP_MAX; i++)
            keep[nkeep++] = malloc(100);
        printf("{\"alloc\":%d,\"kept\":%d}\n", n, nkeep);
    } else if (strncmp(line, "free", 4) == 0) {
        for (int i = 0; i < nkeep; i++)
            free(keep[i]);
        printf("{\"freed\":%d}\n", nkeep);
        nkeep = 0;
#ifndef ATTACHEE_STATIC /* (no dlopen in a static program) */
    } else if (strncmp(line, "dlopen ", 7) == 0) {
        /* A library loaded now, and n blocks allocated through its PLT. */
        void *h = dlopen(line + 7, RTLD_NOW);
        void *(*plug)(size_t) = h ? (void *(*)(size_t))dlsym(h, "plug_alloc") : NULL;
        for (int i = 0; plug && i < 6 && nkeep < KEEP_MAX; i++)
            keep[nkeep++] = plug(100);
        printf("{\"plugged\":%s,\"kept\":%d}\n", plug ? "true" : "false", nkeep);
    } else if (strncmp(line, "dlmopen ", 8) == 0) {
        /* Loaded other than through dlopen, as glibc loads NSS and iconv
         * modules: no slot of ours sees it. */
        mloaded = dlmopen(LM_ID_BASE, line + 8, RTLD_NOW);
        printf("{\"mloaded\":%s}\n", mloaded ? "true" : "false");
    } else if (strncmp(line, "plug ", 5) == 0) {
        /* n blocks through the PLT of the library dlmopen loaded. */
        void *(*plug)(size_t) = mloaded ? (void *(*)(size_t))dlsym(mloaded, "plug_alloc") : NULL;
        int n = atoi(line + 5);
        for (int i = 0; plug && i < n && nkeep < KEEP_MAX; i++)
            keep[nkeep++] = plug(100);
        printf("{\"plugged\":%s,\"kept\":%d}\n", plug ? "true" : "false", nkeep);
#endif
    } else if (strncmp(line, "check", 5) == 0) {
        long sb = __atomic_load_n(&seq_bytes, __ATOMIC_RELAXED);
        long bad = __atomic_load_n(&seq_bad, __ATOMIC_RELAXED);
        int ok = !eintr_main && !errno_bad && !bad && !stray && sb > 0 && alarms > 0;
        printf("{\"ok\":%s,\"eintr_main\":%ld,\"errno_bad\":%ld,\"seq_bad\":%ld,\"seq_bytes\":%ld,"
               "\"alarms\":%d,\"stray\":%d,\"churned\":%ld}\n",
               ok ? "true" : "false", eintr_main, errno_bad, bad, sb, (int)alarms, (int)stray,
               __atomic_load_n(&churned, __ATOMIC_RELAXED));
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (pipe(pipefd) != 0)
        return 1;
    signals_set();
    /* "segv-main": the main thread blocks SIGSEGV (the attach must borrow
     * another); "segv-all": every thread does (it must refuse). */
    const char *mode = argc > 1 ? argv[1] : "";
    sigset_t segv;
    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    if (!strcmp(mode, "segv-all"))
        pthread_sigmask(SIG_BLOCK, &segv, NULL);
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_t r, w;
    pthread_create(&r, NULL, reader, NULL);
    pthread_create(&w, NULL, writer, NULL);
    if (!strcmp(mode, "churn"))
        pthread_create(&w, NULL, churn, NULL);
    pthread_sigmask(SIG_BLOCK, &alrm, NULL); /* after the threads: theirs stays open */
    if (!strcmp(mode, "segv-main"))
        pthread_sigmask(SIG_BLOCK, &segv, NULL);
    struct itimerval it = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &it, NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = 0};
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
    printf("{\"ready\":true,\"pid\":%d}\n", (int)getpid());
    fflush(stdout);
    char line[256];
    size_t have = 0;
    for (;;) {
        errno = SENTINEL;
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n < 0) {
            eintr_main += errno == EINTR;
            continue;
        }
        if (errno != SENTINEL)
            errno_bad++;
        ssize_t got = read(0, line + have, sizeof(line) - 1 - have);
        if (got <= 0)
            return 0;
        have += (size_t)got;
        line[have] = '\0';
        char *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = '\0';
            command(line);
            have -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have + 1);
        }
    }
}
