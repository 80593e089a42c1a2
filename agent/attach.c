/*
 * Attach: the agent loaded into a running process (`heaptracectl start
 * --pid N --source agent`). The daemon makes one thread of the target call
 * dlopen on this library and then heaptrace_agent_attach; nothing is
 * preloaded, so our malloc is not the one the program's calls bind to.
 * Instead the GOT slots of every loaded module that name an allocator
 * entry point (got.c) are pointed at our hooks, and dlopen's slots at a
 * wrapper that does the same for modules loaded later.
 *
 * The real entry points are the program's own definitions (the global
 * scope: RTLD_DEFAULT, where this library, loaded RTLD_LOCAL, is not), so
 * a program linked against jemalloc keeps jemalloc.
 *
 * Detach: the daemon closes the connection (stop, its exit, its death):
 * the watcher thread turns recording off and exits; every hook stays in
 * its slot as a pass-through. A later attach finds the library loaded
 * (dlopen returns the same handle), the slots patched, and only connects.
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* heaptrace_agent_attach's results (the daemon reads them as the call's
 * return value and names each). */
enum {
    ATTACH_OK = 0,
    ATTACH_BUSY = 1,    /* attached already (or still detaching) */
    ATTACH_NOREAL = 2,  /* the program's malloc is not found */
    ATTACH_MEMFD = 3,   /* the shared memory could not be made */
    ATTACH_CONNECT = 4, /* the daemon's socket refused the connection */
    ATTACH_THREAD = 5,  /* the watcher thread could not start */
    ATTACH_NOSLOT = 6,  /* no GOT slot of malloc in any module */
};

#define WATCH_TICK_MS 100 /* how late a module glibc loads on its own gets its slots */

static int attach_sock = -1;
static int attach_busy; /* from an attach to the watcher's exit */
static int attach_resolved, attach_atfork;

static int ring_fd = -1;
static void *ring_mem;

static void attach_fork_child(void)
{
    /* The ring and the connection are the parent's (agent.c fork_child):
     * the child lets go of both, so an attach to it makes its own ring
     * (a reset of the shared one would wipe the parent's). munmap and
     * close only: async-signal-safe, as a threaded parent's child needs. */
    __atomic_store_n(&agent_on, 0, __ATOMIC_RELAXED);
    agent_self.tid = 0;
    if (attach_sock >= 0)
        close(attach_sock);
    attach_sock = -1;
    attach_busy = 0;
    if (ring_mem)
        agent_real.munmap(ring_mem, HTA_TOTAL_BYTES);
    if (ring_fd >= 0)
        close(ring_fd);
    ring_mem = NULL;
    ring_fd = -1;
}

/* The daemon's verdict, then the connection until it closes: recording
 * (on since the attach) ends then, or at a refusal. All signals blocked
 * (the program's are for its threads). */
static void *attach_watch(void *arg)
{
    (void)arg;
    char c = 0, buf[64];
    ssize_t n;
    do
        n = recv(attach_sock, &c, 1, 0);
    while (n < 0 && errno == EINTR);
    /* Until the daemon closes: every WATCH_TICK_MS, modules glibc loaded
     * on its own get their slots (got.c). */
    while (n == 1 && c == HTA_ACCEPT) {
        struct pollfd p = {.fd = attach_sock, .events = POLLIN};
        int rc = poll(&p, 1, WATCH_TICK_MS);
        if (rc == 0 || (rc < 0 && errno == EINTR)) {
            agent_got_recheck();
            continue;
        }
        n = recv(attach_sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            n = 1;
        else if (n <= 0)
            break;
        else
            n = 1;
    }
    __atomic_store_n(&agent_on, 0, __ATOMIC_RELEASE);
    close(attach_sock);
    attach_sock = -1;
    __atomic_store_n(&attach_busy, 0, __ATOMIC_RELEASE);
    return NULL;
}

static int watch_begin(void)
{
    return agent_thread_start(attach_watch);
}

/* Preloaded (a program heaptracectl run started, whose session ended):
 * the global malloc is ours already, agent_real the next one (agent.c),
 * and no slot needs a rewrite. */
static int preloaded(void)
{
    Dl_info g, me;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    return m && dladdr(m, &g) && dladdr((void *)preloaded, &me) && g.dli_fbase == me.dli_fbase;
}

/* The program's definitions (the global scope), not the next after us. */
static int resolve_global(void)
{
    struct agent_real r;
    memset(&r, 0, sizeof(r));
#define GLOBAL(name) *(void **)&r.name = dlsym(RTLD_DEFAULT, #name)
    GLOBAL(malloc);
    GLOBAL(free);
    GLOBAL(calloc);
    GLOBAL(realloc);
    GLOBAL(reallocarray);
    GLOBAL(posix_memalign);
    GLOBAL(aligned_alloc);
    GLOBAL(memalign);
    GLOBAL(valloc);
    GLOBAL(pvalloc);
    GLOBAL(mmap);
    GLOBAL(munmap);
    GLOBAL(mremap);
    GLOBAL(brk);
    GLOBAL(sbrk);
#undef GLOBAL
    if (!r.malloc || !r.free || !r.calloc || !r.realloc)
        return -1;
    /* No slot points at us yet: nobody reads agent_real meanwhile. */
    agent_real = r;
    agent_next_handle = RTLD_DEFAULT;
    return 0;
}

static int self_range_cb(struct dl_phdr_info *info, size_t size, void *arg)
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

static int connect_to(const char *name)
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
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* One ring for every attach of the process's life: made at the first,
 * reset and handed over again at the next (a ring per attach would stay
 * mapped for good: a thread may still be finishing a record in an old
 * one). Reset: no record (their seq would look current to the new
 * session), head, tail, counters and the stop flag at 0; the stack table
 * stays (its entries are this process's stacks, read by id). */
static void ring_reset(void *base)
{
    struct hta_header *h = base;
    memset((char *)base + HTA_RECS_OFFSET, 0, (size_t)HTA_RECORDS * sizeof(struct hta_rec));
    memset(h->counters, 0, sizeof(h->counters));
    __atomic_store_n(&h->tail, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->stop, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->head, 0, __ATOMIC_RELEASE);
}

static int ring_get(void)
{
    if (ring_mem) {
        ring_reset(ring_mem);
        return 0;
    }
    int fd = agent_memfd_make();
    if (fd < 0)
        return -1;
    void *base = agent_real.mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return -1;
    }
    ring_fd = fd;
    ring_mem = base;
    return 0;
}

/* The ring and the connection; the verdict is the watcher's to wait for
 * (the daemon answers once this call has returned and the thread it runs
 * on is the program's again). */
static int session_open(const char *name, const char *token, const char *stacks, unsigned depth)
{
    if (ring_get() != 0)
        return ATTACH_MEMFD;
    agent_map(ring_mem, agent_stacks_of(stacks), depth);
    attach_sock = connect_to(name);
    if (attach_sock < 0 || agent_hello_send(attach_sock, ring_fd, token) != 0) {
        if (attach_sock >= 0)
            close(attach_sock);
        attach_sock = -1;
        return ATTACH_CONNECT;
    }
    if (watch_begin() != 0) {
        close(attach_sock);
        attach_sock = -1;
        return ATTACH_THREAD;
    }
    return ATTACH_OK;
}

/* Called by the daemon on a thread of the program it stopped (and will
 * restore exactly): name and token of the session's socket, stacks mode
 * ("fp", "dwarf", "none") and depth. Re-entrant across attaches. */
EXPORT int heaptrace_agent_attach(const char *name, const char *token, const char *stacks,
                                  unsigned depth)
{
    if (__atomic_exchange_n(&attach_busy, 1, __ATOMIC_ACQ_REL))
        return ATTACH_BUSY;
    int pre = preloaded();
    if (pre && __atomic_load_n(&agent_on, __ATOMIC_ACQUIRE)) {
        attach_busy = 0; /* a launch's agent still records (heaptracectl run) */
        return ATTACH_BUSY;
    }
    if (!attach_resolved && !pre) {
        if (resolve_global() != 0) {
            attach_busy = 0;
            return ATTACH_NOREAL;
        }
        dl_iterate_phdr(self_range_cb, (void *)(uintptr_t)heaptrace_agent_attach);
        attach_resolved = 1;
    }
    if (!attach_atfork && pthread_atfork(NULL, NULL, attach_fork_child) == 0)
        attach_atfork = 1;
    int rc = session_open(name, token, stacks, depth);
    if (rc != ATTACH_OK) {
        attach_busy = 0;
        return rc;
    }
    /* Recording from now, before the daemon's answer: the program runs on
     * as soon as this returns (start --exe: its main), and the ring is
     * drained from its start once accepted; refused, nobody reads it and
     * the watcher turns recording off. Slots last: from here on the
     * program's calls reach the hooks. */
    __atomic_store_n(&agent_on, 1, __ATOMIC_RELEASE);
    if (pre)
        return ATTACH_OK; /* the hooks are the program's malloc already */
    if (agent_got_patch_all() == 0) {
        __atomic_store_n(&agent_on, 0, __ATOMIC_RELEASE);
        /* Nothing to redirect (an allocator without PLT slots): no session. */
        shutdown(attach_sock, SHUT_RDWR);
        return ATTACH_NOSLOT;
    }
    return ATTACH_OK;
}
