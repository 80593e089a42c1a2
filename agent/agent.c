/*
 * libheaptrace-agent.so start-up: the real allocator's entry points, the
 * shared memory, the connection to the daemon, fork and exec.
 *
 * `heaptracectl run` preloads the library with the session's socket and
 * token in the environment (agent-ring.h). At load the agent takes them out
 * of the environment (and itself out of LD_PRELOAD), so that programs its
 * children exec run untraced (an exec of the process itself keeps it
 * traced: exec.c); makes a sealed memfd, maps it, and hands it to the daemon
 * with the token. It records only once the daemon accepted. A thread of
 * its own waits on the socket: when the daemon goes away the agent stops
 * writing and the program runs on untraced. A fork child stops too (it
 * must never write into the parent's ring).
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

AGENT_HIDDEN struct agent_real agent_real;

/* The bootstrap arena: dlsym allocates (its error buffer) before malloc is
 * known. Each block has its size in the 16 bytes before it. */
#define BOOT_BYTES (64u << 10)
static _Alignas(64) unsigned char boot_arena[BOOT_BYTES];
static size_t boot_used;

AGENT_HIDDEN void *agent_boot_alloc(size_t n, size_t align)
{
    (void)align; /* 16, the arena's only alignment */
    size_t need = 16 + ((n + 15) & ~(size_t)15);
    size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
    if (at + need > BOOT_BYTES || need < n)
        return NULL;
    memcpy(boot_arena + at, &n, sizeof(n));
    return boot_arena + at + 16;
}

AGENT_HIDDEN int agent_boot_owns(const void *p)
{
    return (const unsigned char *)p >= boot_arena &&
           (const unsigned char *)p < boot_arena + BOOT_BYTES;
}

AGENT_HIDDEN size_t agent_boot_size(const void *p)
{
    size_t n;
    memcpy(&n, (const unsigned char *)p - 16, sizeof(n));
    return n;
}

static int resolving;

AGENT_HIDDEN void agent_resolve(void)
{
    if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
        return; /* dlsym allocating: the arena serves it */
    struct agent_real r;
#define NEXT(name) *(void **)&r.name = dlsym(RTLD_NEXT, #name)
    NEXT(malloc);
    NEXT(free);
    NEXT(calloc);
    NEXT(realloc);
    NEXT(reallocarray);
    NEXT(posix_memalign);
    NEXT(aligned_alloc);
    NEXT(memalign);
    NEXT(valloc);
    NEXT(pvalloc);
    NEXT(mmap);
    NEXT(munmap);
    NEXT(mremap);
    NEXT(brk);
    NEXT(sbrk);
#undef NEXT
    /* malloc last: the hooks test it to know the others are there. */
    void *(*m)(size_t) = r.malloc;
    r.malloc = NULL;
    agent_real = r;
    __atomic_store_n(&agent_real.malloc, m, __ATOMIC_RELEASE);
    __atomic_store_n(&resolving, 0, __ATOMIC_RELEASE);
}

static int sock = -1;
static pid_t sock_pid; /* the process the connection is of (a fork child closes it) */
static int watching;   /* a watcher thread reads the socket (not in a followed fork child) */
static int flush_acked;
static dev_t sock_dev; /* the connection's socket, to know it under its number */
static ino_t sock_ino;

static void sock_remember(void)
{
    struct stat st;
    if (sock >= 0 && fstat(sock, &st) == 0) {
        sock_dev = st.st_dev;
        sock_ino = st.st_ino;
    }
}

/* Is the descriptor still our connection? A program may close every
 * descriptor past stderr (close_range, closefrom: daemons do) and open its
 * own under the same number: a flush would write into it, a fork child
 * close it. (The watcher's recv, under way, keeps the socket itself open.) */
static int sock_ours(void)
{
    struct stat st;
    return sock >= 0 && fstat(sock, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == sock_dev &&
           st.st_ino == sock_ino;
}
static struct hta_header *gov_hdr; /* the ring the governor reports into */

/* The daemon closed the socket (it stopped the session, or died): no more
 * records. It may also acknowledge a flush (HTA_FLUSH_ACK). Every signal
 * blocked: the program's signals are for its threads. */
static void *watch_thread(void *arg)
{
    (void)arg;
    char buf[64];
    ssize_t n;
    /* Governed (run --max-overhead): a tick every 100 ms between reads. */
    int tick = agent_gov_on() ? 100 : -1;
    for (;;) {
        struct pollfd p = {.fd = sock, .events = POLLIN};
        int rc = poll(&p, 1, tick);
        if (rc == 0) {
            agent_gov_tick(gov_hdr);
            continue;
        }
        if (rc < 0 && errno == EINTR)
            continue;
        if (!sock_ours())
            return NULL; /* the number is the program's now: never read it */
        n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        if (memchr(buf, HTA_FLUSH_ACK, (size_t)n))
            __atomic_store_n(&flush_acked, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&agent_on, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&flush_acked, 1, __ATOMIC_RELEASE); /* nobody to wait for */
    return NULL;
}

/* Before the program's image goes (exit, exec): the daemon takes what was
 * written and names its frames while the modules are there to read, then
 * acknowledges; waited for HTA_FLUSH_MS at most. */
AGENT_HIDDEN void agent_flush(void)
{
    if (!__atomic_load_n(&agent_on, __ATOMIC_ACQUIRE) || !watching || sock < 0 ||
        getpid() != sock_pid || !sock_ours())
        return;
    __atomic_store_n(&flush_acked, 0, __ATOMIC_RELEASE);
    char f = HTA_FLUSH;
    if (send(sock, &f, 1, MSG_NOSIGNAL) != 1)
        return;
    struct timespec ms = {0, 1000000};
    for (unsigned i = 0; i < HTA_FLUSH_MS && !__atomic_load_n(&flush_acked, __ATOMIC_ACQUIRE); i++)
        nanosleep(&ms, NULL);
}

/* At exit: the last library's destructor to run (preloaded, so the first
 * initialized), after the program's atexit handlers. */
__attribute__((destructor)) static void agent_end(void)
{
    agent_flush();
}

/* run --follow: the session's socket and token, kept for fork children. */
static int follow;
static char follow_name[108], follow_token[HTA_TOKEN_LEN + 1];
static enum agent_stacks follow_stacks;
static unsigned follow_depth;
static void *ring_base;

static int memfd_make(void);
static int daemon_join(const char *name, const char *token, int fd);

/* A followed fork child: a ring of its own, handed to the daemon, which
 * makes the child a session of its own. No watcher thread (the child of a
 * threaded program may only make async-signal-safe calls until it execs):
 * should the daemon go, the ring fills and the child runs on. */
static void follow_child(void)
{
    int fd = memfd_make();
    if (fd < 0)
        return;
    void *base = agent_real.mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return;
    }
    agent_map(base, follow_stacks, follow_depth);
    sock = daemon_join(follow_name, follow_token, fd);
    sock_remember();
    close(fd);
    if (sock < 0) {
        agent_real.munmap(base, HTA_TOTAL_BYTES);
        return;
    }
    ring_base = base;
    ring_base = base;
    __atomic_store_n(&agent_on, 1, __ATOMIC_RELEASE);
}

static void fork_child(void)
{
    /* The ring is the parent's: a child writing into it would mix its
     * records with the parent's. Untraced (or, followed, a ring and a
     * session of its own), and the parent's connection left to the parent
     * so the daemon sees the parent's exit. */
    __atomic_store_n(&agent_on, 0, __ATOMIC_RELAXED);
    watching = 0; /* threads are not inherited */
    agent_self.tid = 0;
    if (sock_ours())
        close(sock);
    sock = -1;
    if (ring_base)
        agent_real.munmap(ring_base, HTA_TOTAL_BYTES);
    ring_base = NULL;
    if (follow)
        follow_child();
}

static int self_phdr_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo && me < hi) {
            agent_self_range(lo, hi);
            return 1;
        }
    }
    return 0;
}

/* VAR copied into buf, and taken out of the environment unless keep. */
static const char *env_take(const char *var, char *buf, size_t sz, int keep)
{
    const char *v = getenv(var);
    if (!v || strlen(v) >= sz)
        return NULL;
    strcpy(buf, v);
    if (!keep)
        unsetenv(var);
    return buf;
}

/* Take our own path out of LD_PRELOAD, in place (no allocation). */
static void preload_scrub(void)
{
    Dl_info di;
    char *pre = getenv("LD_PRELOAD");
    if (!pre || !dladdr((void *)preload_scrub, &di) || !di.dli_fname)
        return;
    size_t len = strlen(di.dli_fname);
    char *at = strstr(pre, di.dli_fname);
    if (!at || (at[len] && at[len] != ':' && at[len] != ' '))
        return;
    char *end = at + len;
    while (*end == ':' || *end == ' ')
        end++;
    memmove(at, end, strlen(end) + 1);
    if (!*pre)
        unsetenv("LD_PRELOAD");
}

static int memfd_make(void)
{
    int fd = memfd_create("heaptrace-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    /* Sealed against shrinking: the daemon maps it and refuses one that is
     * not (a shrunk file would fault the daemon's reads). memfd_create(2). */
    if (ftruncate(fd, (off_t)HTA_TOTAL_BYTES) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_hello(int s, int fd, const char *token)
{
    struct hta_hello h;
    memset(&h, 0, sizeof(h));
    h.magic = HTA_MAGIC;
    h.version = HTA_VERSION;
    memcpy(h.token, token, strnlen(token, HTA_TOKEN_LEN));
    h.bytes = HTA_TOTAL_BYTES;
    struct iovec iov = {.iov_base = &h, .iov_len = sizeof(h)};
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(s, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(h) ? 0 : -1;
}

/* Seconds each step of joining the session may take. */
#define JOIN_S 2

/* Connect to the session's socket, hand over the memfd, wait for the verdict. */
static int daemon_join(const char *name, const char *token, int fd)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n + 1 > sizeof(a.sun_path))
        return -1;
    memcpy(a.sun_path + 1, name, n); /* abstract namespace: unix(7) */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    /* Bounded, each step: a daemon that is stopped or stalled must not hold
     * the program. connect blocks while the listening socket's backlog is
     * full, up to SO_SNDTIMEO (net/unix/af_unix.c, unix_stream_connect);
     * the verdict waits SO_RCVTIMEO. The daemon refuses a hello that takes
     * longer than this too. Past it the program runs untraced. */
    struct timeval tv = {.tv_sec = JOIN_S};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char verdict = 0;
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0 ||
        send_hello(s, fd, token) != 0 || recv(s, &verdict, 1, 0) != 1 || verdict != HTA_ACCEPT) {
        close(s);
        return -1;
    }
    tv.tv_sec = 0;
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return s;
}

/* A thread of the agent's, detached, with every signal blocked (the
 * program's signals are for its own threads): 0 or an errno. */
AGENT_HIDDEN int agent_thread_start(void *(*fn)(void *))
{
    sigset_t all, old;
    pthread_t th;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&th, NULL, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pthread_detach(th);
    return rc;
}

static int watch_start(void)
{
    return agent_thread_start(watch_thread);
}

static enum agent_stacks stacks_of(const char *v)
{
    if (v && !strcmp(v, "fp"))
        return AGENT_STACKS_FP;
    if (v && !strcmp(v, "none"))
        return AGENT_STACKS_NONE;
    return AGENT_STACKS_DWARF;
}

__attribute__((constructor)) static void agent_start(void)
{
    char name[108], token[HTA_TOKEN_LEN + 1], stacks[16] = "", depth[16] = "";
    char sample[24] = "", seed[24] = "", over[16] = "";
    if (!agent_real.malloc)
        agent_resolve();
    /* --follow: the environment stays, so programs the program execs (in
     * children) load the agent and connect as its descendants. */
    const char *fo = getenv(HTA_ENV_FOLLOW);
    follow = fo && !strcmp(fo, "1");
    /* Kept for an exec of this process (exec.c), before they leave the environment. */
    Dl_info di;
    if (getenv(HTA_ENV_SOCKET) && dladdr((void *)agent_start, &di))
        agent_exec_save(di.dli_fname, follow);
    const char *sn = env_take(HTA_ENV_SOCKET, name, sizeof(name), follow);
    const char *tk = env_take(HTA_ENV_TOKEN, token, sizeof(token), follow);
    env_take(HTA_ENV_STACKS, stacks, sizeof(stacks), follow);
    env_take(HTA_ENV_DEPTH, depth, sizeof(depth), follow);
    env_take(HTA_ENV_SAMPLE, sample, sizeof(sample), follow);
    env_take(HTA_ENV_SEED, seed, sizeof(seed), follow);
    env_take(HTA_ENV_MAX_OVERHEAD, over, sizeof(over), follow);
    if (!follow)
        preload_scrub();
    if (!sn || !tk)
        return; /* not launched by heaptracectl run: stay out of the way */
    dl_iterate_phdr(self_phdr_cb, (void *)(uintptr_t)agent_start);
    if (agent_sample_init(strtoull(sample, NULL, 10), strtoull(seed, NULL, 10), atoi(over) > 0) !=
        0)
        return; /* no set for the sampled blocks: untraced rather than wrong */
    if (atoi(over) > 0)
        agent_gov_init((unsigned)atoi(over));
    int fd = memfd_make();
    if (fd < 0)
        return;
    void *base = agent_real.mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return;
    }
    agent_map(base, stacks_of(stacks), (unsigned)atoi(depth));
    gov_hdr = base;
    if (follow) {
        snprintf(follow_name, sizeof(follow_name), "%s", sn);
        snprintf(follow_token, sizeof(follow_token), "%s", tk);
        follow_stacks = stacks_of(stacks);
        follow_depth = (unsigned)atoi(depth);
    }
    sock = daemon_join(sn, tk, fd);
    sock_remember();
    close(fd); /* the daemon has its own now, and the mapping stays */
    sock_pid = getpid();
    if (sock < 0 || pthread_atfork(NULL, NULL, fork_child) != 0 || watch_start() != 0) {
        if (sock >= 0)
            close(sock);
        sock = -1;
        agent_real.munmap(base, HTA_TOTAL_BYTES);
        return;
    }
    watching = 1;
    __atomic_store_n(&agent_on, 1, __ATOMIC_RELEASE);
}

/* For attach.c: the same memfd, hello and stacks names as a launch. */
AGENT_HIDDEN int agent_memfd_make(void)
{
    return memfd_make();
}

AGENT_HIDDEN int agent_hello_send(int s, int fd, const char *token)
{
    return send_hello(s, fd, token);
}

AGENT_HIDDEN enum agent_stacks agent_stacks_of(const char *v)
{
    return stacks_of(v);
}
