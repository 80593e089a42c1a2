/*
 * The agent source (source.h, mode SOURCE_LAUNCH): `heaptracectl run` asks
 * for a session, gets the agent's path, this session's socket and a token,
 * and execs the program itself (as the user, in the user's terminal) with
 * the agent preloaded. The agent connects to the socket, presents the
 * token and hands over its shared memory (agent/agent-ring.h); the peer's
 * credentials must be the session owner's uid and the ctl's pid (exec
 * keeps the pid). One agent per session: any other connection is refused
 * and counted.
 *
 * Draining: a timer on the loop looks at the ring; records go to the engine
 * through agent-decode.c (which treats the memory as hostile). The socket
 * closing is the target's end (exit, or an exec: the agent's descriptors
 * are close-on-exec); what it wrote is drained first.
 *
 * Threads: all on the loop, but symbolize and sym_sync (the session's
 * symbolizer lock): they touch only the symbol cache and the frame queue.
 */
#define _GNU_SOURCE
#include "agent-decode.h"
#include "agent-source.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "execwatch.h"
#include "inject.h"
#include "procmem.h"
#include "source.h"
#include "stack-intern.h"
#include "symbols.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The ring is looked at this often. */
#define DRAIN_MS 5
/* A reserved record not completed after this many looks is given up on
 * (its thread died, or the target is hostile): 200 ms. */
#define STUCK_TICKS 40
/* The program must connect within this time after the reply. */
#define CONNECT_MS 30000
/* Processes of a followed family whose children are taken. */
#define FAMILY_MAX 256
#define GATE_MARKS 8   /* files an --exe name is found as (the standard bin dirs) */
#define GATE_RECENT 64 /* pids the gate took, not counted again by the connector */
/* After the connection's end, a new program of the same process (an exec)
 * has this long to join (ms): its agent joins from its constructor. */
#define EXEC_JOIN_MS 10000
/* New frames waiting to be symbolized while the process lives, and the
 * frames queued so far, remembered to queue each once. */
#define FRAMEQ 16384
#define QSEEN (1u << 16)
/* A frame in no known module is tried again this long (ns). */
#define FRAME_RETRY_NS 1000000000ull

struct agent_handles; /* the libuv handles: freed in their close callbacks */
struct agent_pending;

struct frameq_ent {
    uint64_t addr, first_ns;
};

struct agent_source {
    struct source base;
    uv_loop_t *loop;
    struct agent_handles *h;
    int lfd, cfd; /* listening socket, the agent's connection */
    int pidfd;    /* the process, from its first connection: readable once it exited */
    /* The connection ended while the process lives: an exec, whose new
     * program may join (exec_switch) until exec_deadline_ms. */
    int exec_wait;
    uint64_t exec_deadline_ms, execs, last_exec_t;
    int keep_mods;    /* the symbolizer keeps the modules it knows (sym_sync) */
    int maps_changed; /* an exec: the symbolizer re-reads the maps at the next miss */
    /* A flush the agent asked for (HTA_FLUSH) before its image goes: 1 until
     * the ring is taken to flush_to, 2 until the symbolizer had the frames,
     * 3 to acknowledge. */
    int flush_stage; /* atomic: sym_sync moves it on from a query worker */
    uint64_t flush_to, flush_ms, flushes, flushes_late;
    /* Frames queued once each (an open-addressing set; 0 is no frame). */
    uint64_t *qseen;
    uint32_t qseen_n;
    char sockname[64], token[HTA_TOKEN_LEN + 1], agent_path[4096];
    uint64_t want_pid;
    uint32_t owner;
    /* run --follow: a connection from a descendant of the program becomes a
     * session of its own (sink.spawn), whose source adopts it. */
    int follow, handoff_fd, adopt_fd;
    uint64_t family[FAMILY_MAX]; /* the program and the descendants followed */
    unsigned nfamily;
    uint64_t spawned, refused_spawn;
    enum source_stacks stacks;
    uint32_t depth;
    uint64_t sample_ns, next_sample;
    uint64_t last_private, last_private_t;
    int private_sent;
    int started, connected, eof, ended, stopped, has_listener;
    int attach;         /* start --pid: the agent is loaded into the running process */
    uint64_t attach_ns; /* how long loading it took */
    /* start --exe: execs watched (xfd), each process of the image a session
     * of its own (sink.spawn) whose source is one of kids; a kid knows its
     * image source while both live. */
    int image_mode, xfd;
    char image[PATH_MAX];
    /* The exec gate (gfd, execwatch.h) on the image's files: a process
     * caught there is held before its first instruction; the connector's
     * notice (xfd) catches the image run from other files, late. gated: the
     * last pids the gate took, which the connector then reports again. */
    int gfd;
    char (*marked)[PATH_MAX]; /* GATE_MARKS of them */
    unsigned nmarked;
    uint64_t gated[GATE_RECENT], gate_taken, gate_missed, gate_lost;
    unsigned ngated;
    struct agent_source *kids[FAMILY_MAX], *image_src;
    unsigned nkids;
    uint64_t exec_lost, execs_seen;
    int entered; /* a process of the image attached at its entry point */
    uint64_t t0, start_ms;
    void *map;
    uint32_t *ids;
    struct agent_dec dec;
    uint64_t eof_end; /* at the end: the ring position past the last record there can be */
    unsigned stuck_ticks;
    uint32_t stack_seen; /* the highest engine stack id queued for the symbolizer */
    uint64_t stuck_tail;
    uint64_t lost_seen[HTA_CNT_MAX]; /* the agent's counters as of the last lost event */
    uint64_t delivered, cut;
    uint64_t refused_peer, refused_token, refused_memfd, refused_extra, refused_slow, socket_bytes;
    struct agent_pending *pend; /* a connection waiting for its hello */
    char end_reason[160];
    struct mem_acct acct, sym_acct; /* the loop's; the symbol cache's (symbolizer lock) */
    /* Symbolizer side (the session's symbolizer lock), frames queued by the loop. */
    struct sym_cache *syms;
    uv_mutex_t qmu;
    struct frameq_ent q[FRAMEQ];
    unsigned nq;
    uint64_t q_drops;
    /* The symbolizer's module counts (symbols.h), copied under its lock for
     * status, which never takes it. */
    uint64_t sym_kept_replaced, sym_kept_dropped, sym_not_added, sym_not_owner;
    /* The counters of the rings of programs before an exec (agent-ring.h):
     * status shows the process's totals. */
    uint64_t agent_before[HTA_CNT_MAX];
    uint64_t sample_bytes, sample_seed; /* run --sample, --sample-seed */
    /* Rate changes marked (rate_mark), and those the engine's mark cap (or a
     * user's mark of the same name) left unmarked. */
    uint64_t rate_marked, rate_marks_dropped;
    uint32_t max_overhead;              /* run --max-overhead */
    int child;                          /* a followed descendant's session */
};

struct agent_handles {
    uv_timer_t timer;
    uv_poll_t lpoll, xpoll; /* xpoll: start --exe's exec watch */
    uv_poll_t gpoll;        /* start --exe's exec gate */
    uv_poll_t *cpoll;       /* the connection's: one per program the process ran (exec) */
    int open;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void handle_closed_cb(uv_handle_t *h)
{
    struct agent_handles *hs = h->data;
    if (--hs->open == 0)
        ht_free(hs);
}

static void handle_close(struct agent_handles *hs, uv_handle_t *h)
{
    if (!uv_is_closing(h)) {
        h->data = hs;
        uv_close(h, handle_closed_cb);
    }
}

/* The agent's library: next to the daemon (the build tree), or where
 * `make install` puts it relative to sbin/. Never a name a client gave. */
static int agent_locate(char *out, size_t sz)
{
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return UV_ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return UV_ENOENT;
    *slash = '\0';
    static const char *const rel[] = {"/libheaptrace-agent.so",
                                      "/../lib/heaptrace/libheaptrace-agent.so"};
    for (unsigned i = 0; i < 2; i++) {
        snprintf(out, sz, "%s%s", exe, rel[i]);
        char real[4096];
        if (realpath(out, real) && access(real, R_OK) == 0) {
            snprintf(out, sz, "%s", real);
            return 0;
        }
    }
    return UV_ENOENT;
}

static int agent_available(char *err, size_t errsz)
{
    char path[4096];
    if (agent_locate(path, sizeof(path)) != 0) {
        snprintf(err, errsz,
                 "libheaptrace-agent.so is neither next to heaptraced nor in "
                 "../lib/heaptrace");
        return HT_ENOTSUP;
    }
    return 0;
}

/* start --source auto: the target could take the agent (inject_check). */
static int agent_can_attach(uint64_t pid, char *err, size_t errsz)
{
    char path[4096];
    if (agent_locate(path, sizeof(path)) != 0)
        return agent_available(err, errsz);
    struct inject_req r = {.pid = pid, .lib = path, .socket = "", .token = "", .stacks = ""};
    return inject_check(&r, err, errsz);
}

static void say_ready(struct agent_source *s)
{
    if (s->base.sink.ready)
        s->base.sink.ready(s->base.sink.arg);
}

/* A connection that is not our agent: closed, with any descriptor it sent. */
static void refuse(int fd, uint64_t *counter)
{
    char no = HTA_REFUSE;
    (void)!send(fd, &no, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
    (*counter)++;
}

static void close_fds(struct msghdr *m)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            close(fd);
        }
    }
}

/* The hello and the one descriptor it carries, or -1. */
static int hello_read(int fd, struct hta_hello *h)
{
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = h, .iov_len = sizeof(*h)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    int got = -1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -2; /* not here yet */
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (n == (ssize_t)sizeof(*h) && !(m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) && c &&
        c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)) && !CMSG_NXTHDR(&m, c)) {
        memcpy(&got, CMSG_DATA(c), sizeof(int));
        return got;
    }
    close_fds(&m);
    return -1;
}

static int token_eq(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (unsigned i = 0; i < HTA_TOKEN_LEN; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* The memfd: a sealed memory file of exactly our size (F_GET_SEALS fails
 * on anything but memfd/shmem; F_SEAL_SHRINK keeps our mapping's pages
 * there: fcntl(2), memfd_create(2)). */
static void *memfd_map(int fd)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != HTA_TOTAL_BYTES)
        return NULL;
    void *p = mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void conn_cb(uv_poll_t *p, int status, int events);
static void conn_ended(struct agent_source *s);
static int conn_hung_up(int fd);

/* The process's name as the kernel has it now (/proc/PID/comm), to the session. */
static void process_named(struct agent_source *s)
{
    char comm[64] = "", path[64];
    snprintf(path, sizeof(path), "/proc/%llu/comm", (unsigned long long)s->want_pid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    struct source_process sp = {.pid = s->want_pid, .name = comm, .wall = ""};
    if (s->base.sink.process)
        s->base.sink.process(s->base.sink.arg, &sp);
}

static void process_learned(struct agent_source *s)
{
    process_named(s);
    struct ht_event ev = {.t = 0, .kind = HT_EV_PROCESS, .size = s->want_pid};
    s->base.sink.events(s->base.sink.arg, &ev, 1);
    struct sym_cache *sc = NULL;
    if (sym_cache_new(&sc, s->want_pid, &s->sym_acct, MEM_symbols) == 0) {
        sym_cache_set_owner(sc, s->owner);
        __atomic_store_n(&s->syms, sc, __ATOMIC_RELEASE);
    }
}

/* A connection from the right process, waiting for its hello: read when
 * it comes (never waited for on the loop), refused after 2 s. Its handle
 * is freed, and its descriptor closed, in the close callback. */
struct agent_pending {
    uv_poll_t poll;
    int fd;
    uint64_t since_ms;
    struct agent_source *s;
};

#define HELLO_MS 2000

static void pending_closed_cb(uv_handle_t *h)
{
    struct agent_pending *pd = h->data;
    close(pd->fd);
    ht_free(pd);
}

static void pending_end(struct agent_source *s)
{
    struct agent_pending *pd = s->pend;
    if (!pd)
        return;
    s->pend = NULL;
    pd->poll.data = pd;
    uv_close((uv_handle_t *)&pd->poll, pending_closed_cb);
}

static void cpoll_freed_cb(uv_handle_t *h)
{
    ht_free(h);
}

static void cpoll_close(struct agent_source *s)
{
    if (s->h && s->h->cpoll) {
        uv_close((uv_handle_t *)s->h->cpoll, cpoll_freed_cb);
        s->h->cpoll = NULL;
    }
}

/* Has the process exited? (Its pidfd polls readable then: pidfd_open(2).) */
static int process_gone(const struct agent_source *s)
{
    struct pollfd pf = {.fd = s->pidfd, .events = POLLIN};
    return s->pidfd < 0 || poll(&pf, 1, 0) != 0;
}

static size_t lost_event(struct agent_source *s, struct ht_event *ev);
static void frames_queue(struct agent_source *s, const struct ht_event *evs, size_t n);
static uint64_t pending(struct agent_source *s);

/* The process exec'd and the new program's agent joined. What the old
 * program wrote is taken to its end (nobody writes there any more: what
 * stays incomplete is skipped, counted stuck), then its heap and its
 * mappings are gone at this instant: the exec freed them. The symbolizer
 * is kept: it reads the new program's modules from /proc/PID/maps when a
 * frame is in none it knows, and the old program's stay known for the
 * stacks taken before (an old module the new program maps over is
 * replaced: its frames then read as the new one's). */
static void exec_switch(struct agent_source *s)
{
    struct ht_event evs[256];
    uint64_t now = mono_ns();
    for (;;) {
        uint64_t left = pending(s);
        size_t n = left ? agent_dec_take(&s->dec, evs, left < 254 ? (size_t)left : 254, now) : 0;
        if (n == 0 && left) {
            agent_dec_skip(&s->dec);
            continue;
        }
        n += lost_event(s, &evs[n]);
        if (n == 0)
            break;
        frames_queue(s, evs, n);
        s->base.sink.events(s->base.sink.arg, evs, n);
        s->delivered += n;
    }
    uint64_t t = now - s->t0 > s->dec.last_t ? now - s->t0 : s->dec.last_t;
    memset(evs, 0, 2 * sizeof(evs[0]));
    evs[0].kind = HT_EV_HEAP_DESTROY; /* the agent's one heap, 0 */
    evs[0].t = t;
    /* Every mapping of the old program: the whole user address space
     * (48 bits, the engine's size limit). */
    evs[1].kind = HT_EV_RELEASE;
    evs[1].flags = HT_EVF_WHOLE_SPACE;
    evs[1].size = (1ull << 48) - 1;
    evs[1].t = t;
    s->base.sink.events(s->base.sink.arg, evs, 2);
    s->delivered += 2;
    s->last_exec_t = t;
    cpoll_close(s);
    close(s->cfd);
    s->cfd = -1;
    for (int c = 0; c < HTA_CNT_MAX; c++)
        s->agent_before[c] += agent_dec_counter(&s->dec, (enum hta_counter)c);
    munmap(s->map, HTA_TOTAL_BYTES);
    s->map = NULL;
    memset(s->ids, 0, (HTA_STACKS + 1) * sizeof(*s->ids));
    memset(s->qseen, 0, QSEEN * sizeof(*s->qseen)); /* the new program's frames are new */
    s->qseen_n = 0;
    __atomic_store_n(&s->flush_stage, 0, __ATOMIC_RELEASE);
    memset(s->lost_seen, 0, sizeof(s->lost_seen));
    s->stuck_ticks = 0;
    s->stuck_tail = 0;
    __atomic_store_n(&s->maps_changed, 1, __ATOMIC_RELEASE);
    s->eof = s->exec_wait = 0;
    s->execs++;
    process_named(s); /* the new program's name (the pid is the same) */
}

/* The agent in: its memory mapped, its connection watched for the end. */
static int agent_in(struct agent_source *s, int fd, void *map)
{
    char yes = HTA_ACCEPT;
    int cfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (cfd < 0 || send(fd, &yes, 1, MSG_NOSIGNAL) != 1) {
        if (cfd >= 0)
            close(cfd);
        munmap(map, HTA_TOTAL_BYTES);
        return -1;
    }
    uv_poll_t *cp = ht_calloc(1, sizeof(*cp));
    if (!cp) {
        close(cfd);
        munmap(map, HTA_TOTAL_BYTES);
        return -1;
    }
    if (s->connected)
        exec_switch(s);
    s->map = map;
    /* The counts are the process's, whatever programs it ran: kept. */
    struct agent_dec_stats before = s->dec.st;
    agent_dec_init(&s->dec, map, s->ids, s->base.sink.si, s->t0, s->depth);
    s->dec.st = before;
    s->lost_seen[HTA_CNT_UNWIND_FAILED] = before.stuck; /* those went as lost events already */
    s->dec.last_t = s->last_exec_t;
    /* With a seed the program's weights repeat run after run (tests); a
     * followed child's must not repeat its parent's: its pid in. */
    agent_dec_seed(&s->dec, s->sample_seed && s->child ? s->sample_seed ^ (s->want_pid << 32)
                                                       : s->sample_seed);
    s->dec.rate = s->sample_bytes;
    s->cfd = cfd;
    if (!s->connected) {
        s->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)s->want_pid, 0);
        process_learned(s);
    }
    s->connected = 1;
    uv_poll_init(s->loop, cp, cfd);
    cp->data = s;
    s->h->cpoll = cp;
    uv_poll_start(cp, UV_READABLE | UV_DISCONNECT, conn_cb);
    return 0;
}

/* The hello, once it is there: token, memfd, header. */
static void pending_cb(uv_poll_t *p, int status, int events)
{
    struct agent_pending *pd = p->data;
    struct agent_source *s = pd->s;
    (void)events;
    struct hta_hello h;
    int mfd = status < 0 ? -1 : hello_read(pd->fd, &h);
    if (mfd == -2)
        return;
    char no = HTA_REFUSE;
    if (mfd < 0 || h.magic != HTA_MAGIC || h.version != HTA_VERSION || h.bytes != HTA_TOTAL_BYTES ||
        !token_eq(h.token, s->token)) {
        if (mfd >= 0)
            close(mfd);
        (*(mfd < 0 ? &s->refused_memfd : &s->refused_token))++;
        (void)!send(pd->fd, &no, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        pending_end(s);
        return;
    }
    void *map = memfd_map(mfd);
    close(mfd);
    if (!map || !agent_dec_header_ok(map)) {
        if (map)
            munmap(map, HTA_TOTAL_BYTES);
        s->refused_memfd++;
        (void)!send(pd->fd, &no, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        pending_end(s);
        return;
    }
    int rc = agent_in(s, pd->fd, map);
    pending_end(s);
    if (rc == 0)
        say_ready(s);
}

/* Wait for the hello on fd (nonblocking). */
static void pending_begin(struct agent_source *s, int fd)
{
    struct agent_pending *pd = ht_calloc(1, sizeof(*pd));
    if (!pd) {
        close(fd);
        return;
    }
    pd->fd = fd;
    pd->s = s;
    pd->since_ms = uv_now(s->loop);
    uv_poll_init(s->loop, &pd->poll, fd);
    pd->poll.data = pd;
    s->pend = pd;
    uv_poll_start(&pd->poll, UV_READABLE, pending_cb);
}

/* The parent's pid of a process (/proc/PID/stat: the field after the
 * command name, which may hold spaces and parentheses: proc(5)), or 0. */
static uint64_t parent_of(uint64_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    unsigned long long pp = 0;
    if (!rp || sscanf(rp + 1, " %*c %llu", &pp) != 1)
        return 0;
    return pp;
}

static int in_family(const struct agent_source *s, uint64_t pid)
{
    for (unsigned i = 0; i < s->nfamily; i++)
        if (s->family[i] == pid)
            return 1;
    return 0;
}

/* A descendant's connection (--follow): a session of its own, whose source
 * adopts the connection (agent_open_at, mode SOURCE_PID). */
static void descendant(struct agent_source *s, int fd, uint64_t pid)
{
    char err[256];
    s->handoff_fd = fd;
    int rc = s->base.sink.spawn ? s->base.sink.spawn(s->base.sink.arg, pid, err, sizeof(err)) : -1;
    if (s->handoff_fd >= 0) { /* not adopted */
        s->handoff_fd = -1;
        refuse(fd, &s->refused_spawn);
        return;
    }
    s->spawned += rc == 0;
    if (s->nfamily < FAMILY_MAX)
        s->family[s->nfamily++] = pid;
}

/* A connection: the expected process (SO_PEERCRED: the owner's uid and the
 * ctl's pid, which the exec kept), one at a time, until one is in.
 * Listening goes on: a later connection is refused and counted. */
static void listen_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    (void)events;
    if (status < 0)
        return;
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (s->stopped || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        refuse(fd, &s->refused_extra);
        return;
    }
    if ((uint64_t)cr.pid != s->want_pid && s->follow && cr.uid == s->owner &&
        in_family(s, parent_of((uint64_t)cr.pid)) && !in_family(s, (uint64_t)cr.pid)) {
        descendant(s, fd, (uint64_t)cr.pid);
        return;
    }
    /* One connection at a time; after its end, while the process lives,
     * its next program's (an exec). The kernel closed the old one before
     * the new program ran (close-on-exec), but the loop may see the new
     * connection first. */
    if (s->connected && !s->eof && (uint64_t)cr.pid == s->want_pid && conn_hung_up(s->cfd)) {
        uv_poll_stop(s->h->cpoll);
        conn_ended(s);
    }
    if ((s->connected && !s->exec_wait) || s->pend) {
        refuse(fd, &s->refused_extra);
        return;
    }
    if ((uint64_t)cr.pid != s->want_pid || cr.uid != s->owner) {
        refuse(fd, &s->refused_peer);
        return;
    }
    pending_begin(s, fd);
}

/* The connection's end: the process exited, or exec'd (its next program
 * may join), or closed it. */
static void conn_ended(struct agent_source *s)
{
    s->eof_end = s->dec.tail + agent_dec_pending(&s->dec);
    s->eof = 1;
    /* An attached process's next program has no agent (none is preloaded):
     * its exec ends the session. */
    s->exec_wait = !s->stopped && !s->attach;
    s->exec_deadline_ms = uv_now(s->loop) + EXEC_JOIN_MS;
    /* Whether it exited or exec'd, the frames taken so far are the old
     * program's: its modules stay known when the maps change. */
    __atomic_store_n(&s->keep_mods, 1, __ATOMIC_RELEASE);
    say_ready(s);
}

/* Has the peer closed the connection? (Its end may not have been seen on
 * the loop yet when the next program's connection is.) */
static int conn_hung_up(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Anything the agent sends after the hello is read and dropped; the end
 * of the connection is the end of the program (conn_ended). */
static void conn_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    char buf[4096];
    ssize_t n = status < 0 ? -1 : recv(s->cfd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
        s->socket_bytes += (uint64_t)n;
        if (memchr(buf, HTA_FLUSH, (size_t)n) &&
            !__atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&s->flush_stage, 1, __ATOMIC_RELEASE);
            s->flush_to = s->dec.tail + agent_dec_pending(&s->dec);
            s->flush_ms = uv_now(s->loop);
            say_ready(s);
        }
        return;
    }
    if (n < 0 && status >= 0 && (errno == EAGAIN || errno == EINTR) && !(events & UV_DISCONNECT))
        return;
    uv_poll_stop(p);
    conn_ended(s);
}

/* Records reserved, not taken yet. Once the process is gone no more can
 * come: bounded by what was reserved then (the head is the target's word,
 * and a hostile one never lets the tail reach it). */
static uint64_t pending(struct agent_source *s)
{
    if (!s->eof)
        return agent_dec_pending(&s->dec);
    return s->eof_end > s->dec.tail ? s->eof_end - s->dec.tail : 0;
}

static void timer_cb(uv_timer_t *t)
{
    struct agent_source *s = t->data;
    if (s->ended)
        return;
    if (s->pend && uv_now(s->loop) - s->pend->since_ms > HELLO_MS) {
        s->refused_slow++;
        pending_end(s);
    }
    if (!s->connected && !s->eof && uv_now(s->loop) - s->start_ms > CONNECT_MS) {
        s->eof = 1;
        snprintf(s->end_reason, sizeof(s->end_reason),
                 "the program did not connect in %d s (not started, or the agent not loaded)",
                 CONNECT_MS / 1000);
    }
    uv_mutex_lock(&s->qmu);
    unsigned frames_waiting = s->nq;
    uv_mutex_unlock(&s->qmu);
    /* A drain, also for the frames waiting for the symbolizer (sym_sync follows a drain). */
    if (s->eof || frames_waiting || __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) ||
        (s->connected && (agent_dec_ready(&s->dec) || pending(s))))
        say_ready(s);
    else if (s->connected && s->sample_ns && mono_ns() >= s->next_sample)
        say_ready(s);
}

static int listen_make(struct agent_source *s, char *err, size_t errsz)
{
    unsigned char rnd[HTA_TOKEN_LEN / 2 + 8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        snprintf(err, errsz, "getrandom: %s", strerror(errno));
        return UV_EIO;
    }
    for (unsigned i = 0; i < HTA_TOKEN_LEN / 2; i++)
        snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
    snprintf(s->sockname, sizeof(s->sockname), "heaptrace-agent-%d-%02x%02x%02x%02x%02x%02x",
             getpid(), rnd[16], rnd[17], rnd[18], rnd[19], rnd[20], rnd[21]);
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    size_t n = strlen(s->sockname);
    memcpy(a.sun_path + 1, s->sockname, n); /* abstract namespace: unix(7) */
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->lfd < 0 ||
        bind(s->lfd, (struct sockaddr *)&a,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0 ||
        listen(s->lfd, 4) != 0) {
        snprintf(err, errsz, "cannot listen for the agent: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

static void agent_close(struct source *base);

static void agent_close(struct source *base);
static void say_ready(struct agent_source *s);

/* The exec gate's marks: the image's path when one was given (a lookup by
 * root's daemon for root's client, the only one --exe admits: the file is
 * never opened or read), else each file of that name in the standard
 * program directories. A path that cannot be watched is an error; a name
 * found nowhere there is not (the connector still sees it run, late). */
static int gate_open(struct agent_source *s, char *err, size_t errsz)
{
    static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                       "/usr/bin", "/sbin", "/bin"};
    s->gfd = execgate_open();
    if (s->gfd < 0) {
        int rc = s->gfd;
        s->gfd = -1;
        snprintf(err, errsz, "cannot open the exec gate (fanotify): %s", uv_strerror(rc));
        return rc;
    }
    if (!(s->marked = ht_calloc(GATE_MARKS, PATH_MAX))) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    if (strchr(s->image, '/')) {
        int rc = execgate_mark(s->gfd, s->image);
        if (rc) {
            snprintf(err, errsz, "cannot watch %s for execs: %s", s->image, uv_strerror(rc));
            return rc;
        }
        snprintf(s->marked[s->nmarked++], PATH_MAX, "%s", s->image);
        return 0;
    }
    /* One file under several names (/bin is /usr/bin on a merged /usr) is
     * listed once. */
    dev_t devs[GATE_MARKS];
    ino_t inos[GATE_MARKS];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && s->nmarked < GATE_MARKS; i++) {
        char path[PATH_MAX];
        struct stat st;
        unsigned k = 0;
        if (snprintf(path, sizeof(path), "%s/%s", dirs[i], s->image) >= (int)sizeof(path) ||
            stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        while (k < s->nmarked && !(devs[k] == st.st_dev && inos[k] == st.st_ino))
            k++;
        if (k < s->nmarked || execgate_mark(s->gfd, path) != 0)
            continue;
        devs[s->nmarked] = st.st_dev;
        inos[s->nmarked] = st.st_ino;
        snprintf(s->marked[s->nmarked++], PATH_MAX, "%s", path);
    }
    return 0;
}

/* start --exe: traces every user's processes of the image, so root's. */
static int image_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                      const struct source_sink *sink, const char *agent_path, char *err,
                      size_t errsz)
{
    if (p->launcher_uid != 0) {
        snprintf(err, errsz, "start --exe traces every user's processes of an image: root only");
        return HT_EPERM;
    }
    if (!p->image || !p->image[0] || strlen(p->image) >= PATH_MAX) {
        snprintf(err, errsz, "start --exe needs an image name or path");
        return HT_EBADARG;
    }
    struct agent_source *s = ht_calloc(1, sizeof(*s));
    if (!s || !(s->h = ht_calloc(1, sizeof(*s->h)))) {
        ht_free(s);
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_agent_ops;
    s->base.sink = *sink;
    s->loop = loop;
    s->lfd = s->cfd = s->handoff_fd = s->adopt_fd = s->pidfd = s->gfd = -1;
    s->image_mode = 1;
    s->stacks = p->stacks;
    s->depth = p->stack_depth;
    snprintf(s->image, sizeof(s->image), "%s", p->image);
    snprintf(s->agent_path, sizeof(s->agent_path), "%s", agent_path);
    uv_mutex_init(&s->qmu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    s->xfd = execwatch_open();
    if (s->xfd < 0) {
        int rc = s->xfd;
        snprintf(err, errsz, "cannot watch execs (the process events connector): %s",
                 uv_strerror(rc));
        s->xfd = -1;
        agent_close(&s->base);
        return rc;
    }
    int rc = gate_open(s, err, errsz);
    if (rc) {
        agent_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}

/* Is pid's executable the image: the same path when one was given, else
 * the same file name. */
static int image_is(const struct agent_source *s, uint64_t pid)
{
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%llu/exe", (unsigned long long)pid);
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    if (strchr(s->image, '/'))
        return strcmp(exe, s->image) == 0;
    const char *b = strrchr(exe, '/');
    return strcmp(b ? b + 1 : exe, s->image) == 0;
}

/* A process of the image, its session made (sink.spawn); held: stopped by
 * inject_*, let go here when no session takes it. */
static void image_spawn(struct agent_source *s, uint64_t pid, int held)
{
    char err[512];
    if (s->base.sink.spawn && s->base.sink.spawn(s->base.sink.arg, pid, err, sizeof(err)) == 0) {
        s->spawned++;
        return;
    }
    s->refused_spawn++;
    if (held)
        inject_unhold(pid);
}

static int gate_took(const struct agent_source *s, uint64_t pid)
{
    for (unsigned i = 0; i < s->ngated && i < GATE_RECENT; i++)
        if (s->gated[i] == pid)
            return 1;
    return 0;
}

static void exec_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    uint64_t pids[256];
    (void)events;
    int n = status < 0 ? 0 : execwatch_read(s->xfd, pids, 256, &s->exec_lost);
    for (int i = 0; i < n && !s->stopped; i++) {
        if (gate_took(s, pids[i]))
            continue; /* the gate's, and already a session */
        s->execs_seen++;
        if (!image_is(s, pids[i]) || !s->base.sink.spawn)
            continue;
        /* Stopped first, while the loader may still be at work: its
         * session's source takes it at the entry point. */
        image_spawn(s, pids[i], inject_hold(pids[i]) == 0);
    }
}

/* Execs of the image waiting at the gate: each process seized, the exec let
 * go on, its end waited for (a few ms: the loop is held that long, as by an
 * attach), then its session made with the process still before its first
 * instruction. Every event is answered, whatever happens to its process. */
static void gate_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    struct execgate_ev evs[32];
    (void)events;
    int n = status < 0 ? 0 : execgate_read(s->gfd, evs, 32, &s->gate_lost);
    for (int i = 0; i < n; i++) {
        uint64_t pid = evs[i].pid;
        int seized = !s->stopped && pid && inject_exec_seize(pid) == 0;
        execgate_answer(s->gfd, &evs[i]);
        if (!seized || inject_exec_wait(pid) != 0) {
            s->gate_missed++;
            continue;
        }
        s->execs_seen++;
        s->gate_taken++;
        s->gated[s->ngated++ % GATE_RECENT] = pid;
        image_spawn(s, pid, 1);
    }
}

/* A process of the image whose session the image's stop ends: its agent
 * told (the connection shut), what it wrote drained, then ended. */
static void kid_end(struct agent_source *k)
{
    k->image_src = NULL;
    if (k->eof || k->stopped)
        return;
    if (k->connected && k->h && k->h->cpoll) {
        uv_poll_stop(k->h->cpoll);
        shutdown(k->cfd, SHUT_RDWR);
        k->eof_end = k->dec.tail + agent_dec_pending(&k->dec);
    }
    k->eof = 1;
    snprintf(k->end_reason, sizeof(k->end_reason), "the start --exe session stopped");
    say_ready(k);
}

/* A kid leaving: out of its image source's list. */
static void kids_forget(struct agent_source *s)
{
    struct agent_source *img = s->image_src;
    for (unsigned i = 0; img && i < img->nkids; i++)
        if (img->kids[i] == s) {
            img->kids[i] = img->kids[--img->nkids];
            break;
        }
    s->image_src = NULL;
}

/* The uid the attached agent connects with (SO_PEERCRED's: the effective
 * one), from /proc/PID/status; UINT32_MAX (nobody's) if it cannot be read. */
static uint32_t target_euid(uint64_t pid)
{
    char path[64], line[256];
    unsigned r, e;
    uint32_t uid = UINT32_MAX;
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
            uid = e;
    if (f)
        fclose(f);
    return uid;
}

static int agent_open_at(struct source **out, uv_loop_t *loop, const struct source_params *p,
                         const struct source_sink *sink, const char *agent_path, char *err,
                         size_t errsz)
{
    *out = NULL;
    struct agent_source *parent =
        p->mode == SOURCE_PID && p->parent && p->parent->ops == &source_agent_ops
            ? (struct agent_source *)p->parent
            : NULL;
    /* A process of an image (start --exe): attached at its entry point. */
    struct agent_source *image_src = parent && parent->image_mode ? parent : NULL;
    if (image_src)
        parent = NULL;
    int attach = p->mode == SOURCE_PID && (!p->parent || image_src);
    if (p->mode == SOURCE_IMAGE)
        return image_open(out, loop, p, sink, agent_path, err, errsz);
    if (p->mode != SOURCE_LAUNCH && !parent && !attach) {
        snprintf(err, errsz,
                 "the agent source launches programs (heaptracectl run) and attaches "
                 "to running ones (start --pid)");
        return HT_ENOTSUP;
    }
    if (parent && parent->handoff_fd < 0) {
        snprintf(err, errsz, "no connection of process %llu to adopt", (unsigned long long)p->pid);
        return HT_EBADARG;
    }
    if (!p->launcher_pid && !attach) {
        snprintf(err, errsz, "the agent source needs the launching client's pid");
        return HT_EBADARG;
    }
    struct agent_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_agent_ops;
    s->base.sink = *sink;
    s->loop = loop;
    s->lfd = s->cfd = s->handoff_fd = s->adopt_fd = s->pidfd = -1;
    s->want_pid = parent || attach ? p->pid : p->launcher_pid;
    s->attach = attach;
    s->xfd = s->gfd = -1;
    if (image_src && image_src->nkids < FAMILY_MAX) {
        s->image_src = image_src;
        image_src->kids[image_src->nkids++] = s;
    }
    s->follow = p->follow;
    s->family[s->nfamily++] = s->want_pid;
    s->owner = attach ? target_euid(p->pid) : p->launcher_uid;
    s->stacks = p->stacks;
    s->depth = p->stack_depth;
    s->sample_ns = p->sample_ns;
    s->sample_bytes = p->sample_bytes;
    s->sample_seed = p->sample_seed;
    s->max_overhead = p->max_overhead;
    s->child = parent != NULL;
    snprintf(s->agent_path, sizeof(s->agent_path), "%s", agent_path);
    uv_mutex_init(&s->qmu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    /* The shared memory is mapped into the daemon for the session's life. */
    int rc = mem_acct_charge(&s->acct, MEM_source_buffers,
                             HTA_TOTAL_BYTES + (HTA_STACKS + 1) * 4 + QSEEN * 8);
    if (rc) {
        snprintf(err, errsz,
                 "the memory budget cannot hold the agent's %llu KiB ring "
                 "(session_memory_budget, daemon_memory_budget)",
                 (unsigned long long)(HTA_TOTAL_BYTES >> 10));
        goto fail;
    }
    s->ids = ht_calloc(HTA_STACKS + 1, sizeof(*s->ids));
    s->qseen = ht_calloc(QSEEN, sizeof(*s->qseen));
    s->h = ht_calloc(1, sizeof(*s->h));
    if (!s->ids || !s->h || !s->qseen) {
        snprintf(err, errsz, "out of memory");
        rc = UV_ENOMEM;
        goto fail;
    }
    if (parent) {
        /* The descendant's connection, on the parent's socket: adopted. */
        memcpy(s->token, parent->token, sizeof(s->token));
        s->adopt_fd = parent->handoff_fd;
        parent->handoff_fd = -1;
    } else if ((rc = listen_make(s, err, errsz)) != 0) {
        goto fail;
    }
    *out = &s->base;
    return 0;
fail:
    agent_close(&s->base);
    return rc;
}

static int agent_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                      const struct source_sink *sink, char *err, size_t errsz)
{
    char path[4096];
    *out = NULL;
    if (agent_locate(path, sizeof(path)) != 0)
        return agent_available(err, errsz);
    return agent_open_at(out, loop, p, sink, path, err, errsz);
}

int agent_source_open_test(struct source **out, uv_loop_t *loop, const struct source_params *p,
                           const struct source_sink *sink, char *err, size_t errsz)
{
    return agent_open_at(out, loop, p, sink, "/nonexistent/libheaptrace-agent.so", err, errsz);
}

void agent_source_set_t0(struct source *base, uint64_t t0)
{
    ((struct agent_source *)base)->t0 = t0;
}

const char *agent_source_socket(struct source *base)
{
    return ((struct agent_source *)base)->sockname;
}

const char *agent_source_token(struct source *base)
{
    return ((struct agent_source *)base)->token;
}

static const char *stacks_name(enum source_stacks st);

/* start --pid: the running process made to load the agent (inject-linux.c),
 * which connects to the socket listened on now. The loop takes the
 * connection once this returns. */
static int agent_attach(struct agent_source *s, char *err, size_t errsz)
{
    struct inject_req r = {.pid = s->want_pid,
                           .lib = s->agent_path,
                           .socket = s->sockname,
                           .token = s->token,
                           .stacks = stacks_name(s->stacks),
                           .depth = s->depth < HTA_DEPTH ? s->depth : HTA_DEPTH,
                           .at_entry = s->image_src != NULL};
    uint64_t t = mono_ns();
    int rc = inject_agent(&r, err, errsz);
    s->attach_ns = mono_ns() - t;
    s->entered = r.entered;
    return rc;
}

static int agent_start(struct source *base, char *err, size_t errsz)
{
    struct agent_source *s = (struct agent_source *)base;
    if (s->started)
        return 0;
    if (s->image_mode) {
        uv_poll_init(s->loop, &s->h->xpoll, s->xfd);
        s->h->open++;
        s->h->xpoll.data = s;
        uv_poll_start(&s->h->xpoll, UV_READABLE, exec_cb);
        uv_poll_init(s->loop, &s->h->gpoll, s->gfd);
        s->h->open++;
        s->h->gpoll.data = s;
        uv_poll_start(&s->h->gpoll, UV_READABLE, gate_cb);
        s->started = 1;
        return 0;
    }
    s->t0 = mono_ns();
    s->start_ms = uv_now(s->loop);
    s->next_sample = s->t0;
    uv_timer_init(s->loop, &s->h->timer);
    s->h->open++;
    s->h->timer.data = s;
    uv_timer_start(&s->h->timer, timer_cb, DRAIN_MS, DRAIN_MS);
    s->started = 1;
    if (s->adopt_fd >= 0) { /* a descendant's session: its hello comes on the adopted connection */
        pending_begin(s, s->adopt_fd);
        s->adopt_fd = -1;
        return 0;
    }
    uv_poll_init(s->loop, &s->h->lpoll, s->lfd);
    s->h->open++;
    s->h->lpoll.data = s;
    uv_poll_start(&s->h->lpoll, UV_READABLE, listen_cb);
    s->has_listener = 1;
    return s->attach ? agent_attach(s, err, errsz) : 0;
}

/* Is addr new to the queue? (Remembered; once the set is three quarters
 * full every frame counts as new: queued again, never lost.) */
static int qseen_add(struct agent_source *s, uint64_t addr)
{
    if (!s->qseen || !addr || s->qseen_n >= QSEEN / 4 * 3)
        return 1;
    uint64_t h = addr * 0x9e3779b97f4a7c15ull;
    for (uint32_t i = (uint32_t)(h >> 40);; i++) {
        uint64_t *e = &s->qseen[i & (QSEEN - 1)];
        if (*e == addr)
            return 0;
        if (!*e) {
            *e = addr;
            s->qseen_n++;
            return 1;
        }
    }
}

/* New frames, for the symbolizer while the process is there to read. */
static void frames_queue(struct agent_source *s, const struct ht_event *evs, size_t n)
{
    uint64_t now = mono_ns();
    uv_mutex_lock(&s->qmu);
    for (size_t i = 0; i < n; i++) {
        /* Engine ids grow: a stack past the highest seen is new. */
        if (!evs[i].stack || evs[i].stack <= s->stack_seen)
            continue;
        s->stack_seen = evs[i].stack;
        unsigned depth;
        const uint64_t *f = stack_intern_frames(s->base.sink.si, evs[i].stack, &depth);
        for (unsigned k = 0; f && k < depth; k++) {
            if (!qseen_add(s, f[k]))
                continue;
            if (s->nq < FRAMEQ)
                s->q[s->nq++] = (struct frameq_ent){f[k], now};
            else
                s->q_drops++;
        }
    }
    uv_mutex_unlock(&s->qmu);
}

/* Lost records the agent counted since the last look, as a lost event. */
static size_t lost_event(struct agent_source *s, struct ht_event *ev)
{
    uint64_t lost = 0;
    for (int c = HTA_CNT_RING_FULL; c <= HTA_CNT_REENTRANT; c++) {
        if (c == HTA_CNT_STACKS_FULL)
            continue; /* those records came, without a stack */
        uint64_t v = agent_dec_counter(&s->dec, (enum hta_counter)c);
        if (v > s->lost_seen[c]) {
            lost += v - s->lost_seen[c];
            s->lost_seen[c] = v;
        }
    }
    uint64_t stuck = s->dec.st.stuck;
    if (stuck > s->lost_seen[HTA_CNT_UNWIND_FAILED]) { /* slot reused for the stuck count */
        lost += stuck - s->lost_seen[HTA_CNT_UNWIND_FAILED];
        s->lost_seen[HTA_CNT_UNWIND_FAILED] = stuck;
    }
    if (!lost)
        return 0;
    memset(ev, 0, sizeof(*ev));
    ev->kind = HT_EV_LOST;
    ev->size = lost;
    ev->t = s->dec.last_t;
    return 1;
}

static size_t private_event(struct agent_source *s, struct ht_event *ev, uint64_t now)
{
    struct procmem pm;
    if (!s->sample_ns || now < s->next_sample || s->eof)
        return 0;
    s->next_sample = now + s->sample_ns;
    if (procmem_read(s->want_pid, &pm) != 0)
        return 0;
    /* Sent when it changed, else once per four samples (a heartbeat that
     * moves the session's clock while the target is idle), as bpf does. */
    if (s->private_sent && pm.private_bytes == s->last_private &&
        now - s->last_private_t < 4 * s->sample_ns)
        return 0;
    s->private_sent = 1;
    s->last_private = pm.private_bytes;
    s->last_private_t = now;
    memset(ev, 0, sizeof(*ev));
    ev->kind = HT_EV_PRIVATE_BYTES;
    ev->size = pm.private_bytes;
    ev->t = now - s->t0 > s->dec.last_t ? now - s->t0 : s->dec.last_t;
    s->dec.last_t = ev->t;
    return 1;
}

/* Stuck records: a reserved one that stays incomplete, or every one left
 * once the process is gone (nobody will complete them). */
static void unstick(struct agent_source *s)
{
    if (agent_dec_ready(&s->dec) || !pending(s)) {
        s->stuck_ticks = 0;
        return;
    }
    if (s->dec.tail != s->stuck_tail) {
        s->stuck_tail = s->dec.tail;
        s->stuck_ticks = 0;
    }
    if (s->eof || ++s->stuck_ticks >= STUCK_TICKS) {
        agent_dec_skip(&s->dec);
        s->stuck_ticks = 0;
    }
}

/* After the connection's end: is the wait for an exec'd program over (the
 * process exited, the time is up, or the session stops)? The reason is said. */
static int exec_waited(struct agent_source *s)
{
    if (!s->exec_wait || s->stopped) {
        s->exec_wait = 0;
        return 1;
    }
    if (process_gone(s)) {
        s->exec_wait = 0;
        snprintf(s->end_reason, sizeof(s->end_reason), "target exited");
        return 1;
    }
    if (uv_now(s->loop) < s->exec_deadline_ms)
        return 0;
    s->exec_wait = 0;
    snprintf(s->end_reason, sizeof(s->end_reason),
             "the program closed the agent's connection, or exec'd a program that did not load "
             "the agent in %d s (static, setuid, or LD_PRELOAD dropped): it runs on untraced",
             EXEC_JOIN_MS / 1000);
    return 1;
}

static int end_now(struct agent_source *s)
{
    s->ended = 1;
    if (s->base.sink.ended)
        s->base.sink.ended(s->base.sink.arg, s->end_reason[0] ? s->end_reason : "tracing stopped");
    return 0;
}

/* The flush: taken to where the agent asked (or past what will never come),
 * then the symbolizer's turn (sym_sync), then the answer. Late: after the
 * agent stopped waiting (HTA_FLUSH_MS). */
static void flush_step(struct agent_source *s)
{
    int st = __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE);
    if (st == 1 && (s->dec.tail >= s->flush_to || s->eof))
        __atomic_store_n(&s->flush_stage, 2, __ATOMIC_RELEASE);
    if (st != 3)
        return;
    char a = HTA_FLUSH_ACK;
    if (s->cfd >= 0 && !s->eof)
        (void)!send(s->cfd, &a, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    s->flushes++;
    s->flushes_late += uv_now(s->loop) - s->flush_ms > HTA_FLUSH_MS;
    __atomic_store_n(&s->flush_stage, 0, __ATOMIC_RELEASE);
}

/* Each change of the sampling mean the agent made (run --max-overhead) is
 * a mark, rate.N at the change's time: a window can start or end there.
 * Changes closer than a drain apart make one mark, the latest's. */
static void rate_mark(struct agent_source *s)
{
    uint64_t n = s->dec.st.rate_changes; /* kept across an exec */
    if (n == s->rate_marked || !s->base.sink.mark)
        return;
    s->rate_marked = n;
    char name[32];
    snprintf(name, sizeof(name), "rate.%llu", (unsigned long long)n);
    if (s->base.sink.mark(s->base.sink.arg, name, s->dec.rate_t) != 0)
        s->rate_marks_dropped++;
}

static int agent_drain(struct source *base, size_t budget)
{
    struct agent_source *s = (struct agent_source *)base;
    struct ht_event evs[256];
    if (s->ended)
        return 0;
    if (!s->connected)
        return s->eof ? end_now(s) : 0;
    if (s->exec_wait && s->pend)
        return 0; /* the next program's hello is on its way */
    uint64_t now = mono_ns();
    while (budget > 0) {
        size_t cap = budget < 254 ? budget : 254;
        if (s->eof && pending(s) < cap)
            cap = (size_t)pending(s); /* another process may hold the memfd and write on */
        size_t n = cap ? agent_dec_take(&s->dec, evs, cap, now) : 0;
        size_t skipped = 0;
        if (n == 0 && pending(s)) {
            uint64_t before = s->dec.st.stuck;
            unstick(s);
            skipped = (size_t)(s->dec.st.stuck - before);
        }
        n += lost_event(s, &evs[n]);
        n += private_event(s, &evs[n], now);
        if (n == 0 && !skipped)
            break;
        if (n) {
            frames_queue(s, evs, n);
            if (s->base.sink.events(s->base.sink.arg, evs, n) != 0)
                return -1;
            s->delivered += n;
        }
        rate_mark(s);
        n += skipped; /* a skip is work too: the budget bounds a hostile ring's cost */
        budget = budget > n ? budget - n : 0;
    }
    flush_step(s);
    if (s->eof)
        return pending(s) ? 1 : exec_waited(s) ? end_now(s) : 0;
    return agent_dec_ready(&s->dec) || __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) ? 1 : 0;
}

static void agent_stop(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    if (s->stopped)
        return;
    s->stopped = 1;
    pending_end(s);
    if (s->map) {
        agent_dec_stop(&s->dec);
        s->cut = pending(s);
    }
    for (unsigned i = 0; i < s->nkids; i++)
        kid_end(s->kids[i]);
    s->nkids = 0;
    kids_forget(s);
    if (s->h) {
        if (s->started && s->image_mode) {
            handle_close(s->h, (uv_handle_t *)&s->h->xpoll);
            handle_close(s->h, (uv_handle_t *)&s->h->gpoll);
        }
        else if (s->started)
            handle_close(s->h, (uv_handle_t *)&s->h->timer);
        if (s->has_listener)
            handle_close(s->h, (uv_handle_t *)&s->h->lpoll);
        cpoll_close(s);
        if (!s->h->open)
            ht_free(s->h);
        s->h = NULL; /* freed by the last close callback */
    }
    /* Closing the socket tells the agent (its watcher thread) to stop. */
    if (s->cfd >= 0)
        close(s->cfd);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->adopt_fd >= 0)
        close(s->adopt_fd);
    s->adopt_fd = -1;
    execwatch_close(s->xfd);
    s->xfd = -1;
    if (s->gfd >= 0)
        close(s->gfd); /* lets any exec still waiting at the gate go on */
    s->gfd = -1;
    s->cfd = s->lfd = -1;
}

static void agent_close(struct source *base)
{
    if (!base)
        return;
    struct agent_source *s = (struct agent_source *)base;
    agent_stop(base);
    if (s->map)
        munmap(s->map, HTA_TOTAL_BYTES);
    if (s->pidfd >= 0)
        close(s->pidfd);
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    if (sc)
        sym_cache_free(sc);
    ht_free(s->ids);
    ht_free(s->qseen);
    ht_free(s->marked);
    mem_acct_close(&s->sym_acct);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->qmu);
    ht_free(s);
}

static void agent_stats(struct source *base, struct source_stats *st)
{
    struct agent_source *s = (struct agent_source *)base;
    memset(st, 0, sizeof(*st));
    st->events = s->delivered;
    st->lines = s->dec.st.records;
    st->malformed = s->dec.st.malformed + s->dec.st.bad_stacks;
    st->lost = s->cut; /* the rest went to the engine as lost events */
    st->stack_table_drops = s->dec.st.stack_drops;
    st->sampling = s->sample_bytes || s->max_overhead;
    if (st->sampling) {
        st->sample_max_overhead = s->max_overhead;
        st->sample_mean = s->map ? s->dec.rate : s->sample_bytes;
        st->sample_overhead_ppm = s->map ? agent_dec_overhead_ppm(&s->dec) : 0;
        st->sample_rate_changes = s->dec.st.rate_changes;
        st->sampled_allocs = s->dec.st.sampled;
        st->sample_set_full = s->map ? agent_dec_counter(&s->dec, HTA_CNT_SAMPLE_SET_FULL) : 0;
    }
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] = s->acct.bytes[k];
        st->over_budget[k] = s->acct.over_budget[k];
        st->no_memory[k] = s->acct.no_memory[k];
    }
}

static const char *stacks_name(enum source_stacks st)
{
    return st == SOURCE_STACKS_FP ? "fp" : st == SOURCE_STACKS_NONE ? "none" : "dwarf";
}

static void agent_counters_json(struct agent_source *s, cJSON *o)
{
    static const char *const names[HTA_CNT_MAX] = {
        "ring_full",   "stacks_full",   "reentrant",    "unwind_failed", "sample_set_full",
        "unwind_slow", "rules_evicted", "modules_full",  "modules_late"};
    cJSON *a = cJSON_AddObjectToObject(o, "agent");
    for (int c = 0; a && s->map && c < HTA_CNT_MAX; c++)
        cJSON_AddNumberToObject(
            a, names[c],
            (double)(s->agent_before[c] + agent_dec_counter(&s->dec, (enum hta_counter)c)));
}

static struct cJSON *agent_status_json(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "stacks", stacks_name(s->stacks));
    cJSON_AddBoolToObject(o, "connected", s->connected);
    cJSON_AddNumberToObject(o, "records", (double)s->dec.st.records);
    cJSON_AddNumberToObject(o, "malformed", (double)s->dec.st.malformed);
    cJSON_AddNumberToObject(o, "bad_stacks", (double)s->dec.st.bad_stacks);
    cJSON_AddNumberToObject(o, "stuck", (double)s->dec.st.stuck);
    cJSON_AddNumberToObject(o, "clamped_time", (double)s->dec.st.clamped_time);
    cJSON_AddNumberToObject(o, "cut_at_stop", (double)s->cut);
    cJSON_AddNumberToObject(o, "socket_bytes", (double)s->socket_bytes);
    cJSON *r = cJSON_AddObjectToObject(o, "refused");
    if (r) {
        cJSON_AddNumberToObject(r, "peer", (double)s->refused_peer);
        cJSON_AddNumberToObject(r, "token", (double)s->refused_token);
        cJSON_AddNumberToObject(r, "memfd", (double)s->refused_memfd);
        cJSON_AddNumberToObject(r, "extra", (double)s->refused_extra);
        cJSON_AddNumberToObject(r, "slow", (double)s->refused_slow);
        cJSON_AddNumberToObject(r, "spawn", (double)s->refused_spawn);
    }
    cJSON_AddNumberToObject(o, "symbol_queue_drops", (double)s->q_drops);
    /* Modules of programs before an exec the running one mapped over, or
     * dropped for room (their frames unnamed from then on); mappings the
     * symbolizer could not add. */
    cJSON *sy = cJSON_AddObjectToObject(o, "symbols");
    if (sy) {
        cJSON_AddNumberToObject(sy, "kept_replaced",
                                (double)__atomic_load_n(&s->sym_kept_replaced, __ATOMIC_RELAXED));
        cJSON_AddNumberToObject(sy, "kept_dropped",
                                (double)__atomic_load_n(&s->sym_kept_dropped, __ATOMIC_RELAXED));
        cJSON_AddNumberToObject(sy, "modules_not_added",
                                (double)__atomic_load_n(&s->sym_not_added, __ATOMIC_RELAXED));
        /* The process became another's (a setuid exec): not read since. */
        cJSON_AddNumberToObject(sy, "not_owner",
                                (double)__atomic_load_n(&s->sym_not_owner, __ATOMIC_RELAXED));
    }
    cJSON_AddBoolToObject(o, "follow", s->follow);
    cJSON_AddNumberToObject(o, "spawned", (double)s->spawned);
    /* Programs the process exec'd into and went on being traced in. */
    cJSON_AddNumberToObject(o, "execs", (double)s->execs);
    /* Flushes the agent asked for before exit or exec; late: answered after
     * it stopped waiting (frames of that program may stay unnamed). */
    cJSON_AddNumberToObject(o, "flushes", (double)s->flushes);
    cJSON_AddNumberToObject(o, "flushes_late", (double)s->flushes_late);
    /* Changes of the sampling mean left without their mark rate.N. */
    cJSON_AddNumberToObject(o, "rate_marks_dropped", (double)s->rate_marks_dropped);
    agent_counters_json(s, o);
    /* What `heaptracectl run` needs to exec the program: the reply takes it
     * (cmd-start.c), and only until the agent is in. */
    if (s->attach)
        cJSON_AddNumberToObject(o, "attach_ms", (double)s->attach_ns / 1e6);
    if (s->attach)
        cJSON_AddStringToObject(o, "attached_at", s->entered ? "entry point" : "running");
    if (s->image_mode) {
        cJSON_AddStringToObject(o, "image", s->image);
        cJSON_AddNumberToObject(o, "execs_seen", (double)s->execs_seen);
        cJSON_AddNumberToObject(o, "exec_events_lost", (double)s->exec_lost);
        /* The gate: the files watched, the processes held there before
         * their first instruction, those it could not hold (another tracer,
         * a failed exec: seen late by the connector, if at all), and the
         * kernel's queue overflows. */
        cJSON *g = cJSON_AddObjectToObject(o, "exec_gate");
        cJSON *m = g ? cJSON_AddArrayToObject(g, "watched") : NULL;
        for (unsigned i = 0; m && i < s->nmarked; i++)
            cJSON_AddItemToArray(m, cJSON_CreateString(s->marked[i]));
        if (g) {
            cJSON_AddNumberToObject(g, "taken", (double)s->gate_taken);
            cJSON_AddNumberToObject(g, "missed", (double)s->gate_missed);
            cJSON_AddNumberToObject(g, "lost", (double)s->gate_lost);
        }
    }
    if (!s->connected && !s->stopped && !s->eof && !s->attach) {
        cJSON *l = cJSON_AddObjectToObject(o, "launch");
        if (l) {
            cJSON_AddStringToObject(l, "agent", s->agent_path);
            cJSON_AddStringToObject(l, "socket", s->sockname);
            cJSON_AddStringToObject(l, "token", s->token);
            cJSON_AddStringToObject(l, "stacks", stacks_name(s->stacks));
            cJSON_AddNumberToObject(l, "depth", s->depth < HTA_DEPTH ? s->depth : HTA_DEPTH);
            cJSON_AddNumberToObject(l, "pid", (double)s->want_pid);
            cJSON_AddBoolToObject(l, "follow", s->follow);
            if (s->sample_bytes)
                cJSON_AddNumberToObject(l, "sample", (double)s->sample_bytes);
            if (s->sample_seed)
                cJSON_AddNumberToObject(l, "sample_seed", (double)s->sample_seed);
            if (s->max_overhead)
                cJSON_AddNumberToObject(l, "max_overhead", s->max_overhead);
        }
    }
    return o;
}

/* Under the symbolizer lock: the queued frames resolved while the process
 * lives (its files are read through /proc/PID). A frame in no module the
 * cache knows yet is tried again for a while: the cache re-reads the maps
 * at most every 100 ms (symbols-linux.c), and a library dlopen'd since may
 * be unloaded soon. */
static void agent_sym_sync(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    struct frameq_ent q[256], again[256];
    unsigned nagain = 0;
    char buf[256];
    uint64_t now = mono_ns();
    if (sc && __atomic_exchange_n(&s->keep_mods, 0, __ATOMIC_ACQ_REL))
        sym_cache_keep_modules(sc);
    /* A flush: the program's modules are read now, whatever the last read's
     * age, while it waits (a program that lives less than the rescan
     * interval, such as one a wrapper execs, would have none). */
    if (sc && (__atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) == 2 ||
               __atomic_exchange_n(&s->maps_changed, 0, __ATOMIC_ACQ_REL)))
        sym_cache_maps_changed(sc);
    for (;;) {
        uv_mutex_lock(&s->qmu);
        unsigned n = s->nq < 256 ? s->nq : 256;
        s->nq -= n;
        memcpy(q, s->q + s->nq, n * sizeof(q[0]));
        uv_mutex_unlock(&s->qmu);
        if (!n || !sc)
            break;
        for (unsigned i = 0; i < n; i++)
            if (!sym_cache_resolve(sc, q[i].addr, 1, buf, sizeof(buf)) &&
                now - q[i].first_ns < FRAME_RETRY_NS && nagain < 256)
                again[nagain++] = q[i];
    }
    uv_mutex_lock(&s->qmu);
    for (unsigned i = 0; i < nagain && s->nq < FRAMEQ; i++)
        s->q[s->nq++] = again[i];
    uv_mutex_unlock(&s->qmu);
    if (sc) {
        struct sym_stats ss;
        sym_cache_stats(sc, &ss);
        __atomic_store_n(&s->sym_kept_replaced, ss.kept_replaced, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_kept_dropped, ss.kept_dropped, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_not_added, ss.modules_not_added, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_not_owner, ss.not_owner, __ATOMIC_RELAXED);
    }
    /* Every frame queued by the flush's drain had its turn. */
    int two = 2;
    __atomic_compare_exchange_n(&s->flush_stage, &two, 3, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Frames are return addresses: looked up as addr - 1. */
static const char *agent_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz)
{
    struct agent_source *s = (struct agent_source *)base;
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    if (!sc)
        return NULL;
    agent_sym_sync(base);
    return sym_cache_resolve(sc, addr, 1, buf, bufsz);
}

const struct source_ops source_agent_ops = {
    .name = "agent",
    .modes = SOURCE_LAUNCH | SOURCE_PID | SOURCE_IMAGE,
    .summary = "an in-process agent preloaded into a program heaptracectl run starts, or "
               "loaded into a running one (start --pid N --source agent; Linux x86-64)",
    .available = agent_available,
    .can_attach = agent_can_attach,
    .open = agent_open,
    .start = agent_start,
    .drain = agent_drain,
    .stop = agent_stop,
    .close = agent_close,
    .stats = agent_stats,
    .status_json = agent_status_json,
    .symbolize = agent_symbolize,
    .sym_sync = agent_sym_sync,
};
