/*
 * The agent source's connections (agent-source.c): the listening socket and its
 * token, a connection's credentials and hello (token, sealed memfd), the agent in,
 * a followed asrc_descendant's connection, an exec'd program's agent joining, the end.
 */
#define _GNU_SOURCE
#include "agent-src.h"

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

static void pending_closed_cb(uv_handle_t *h)
{
    struct agent_pending *pd = h->data;
    close(pd->fd);
    ht_free(pd);
}

void asrc_pending_end(struct agent_source *s)
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

void asrc_cpoll_close(struct agent_source *s)
{
    if (s->h && s->h->cpoll) {
        uv_close((uv_handle_t *)s->h->cpoll, cpoll_freed_cb);
        s->h->cpoll = NULL;
    }
}

/* Has the process exited? (Its pidfd polls readable then: pidfd_open(2).) */
int asrc_process_gone(const struct agent_source *s)
{
    struct pollfd pf = {.fd = s->pidfd, .events = POLLIN};
    return s->pidfd < 0 || poll(&pf, 1, 0) != 0;
}

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
    uint64_t now = asrc_mono_ns();
    for (;;) {
        uint64_t left = asrc_pending(s);
        size_t n = left ? agent_dec_take(&s->dec, evs, left < 254 ? (size_t)left : 254, now) : 0;
        if (n == 0 && left) {
            agent_dec_skip(&s->dec);
            continue;
        }
        n += asrc_lost_event(s, &evs[n]);
        if (n == 0)
            break;
        asrc_frames_queue(s, evs, n);
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
    asrc_cpoll_close(s);
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
    /* A program that exited before its hello was answered (a short run of
     * an --exe image while the loop attached the next one) has recorded
     * its whole life in the ring: taken, its connection's end then seen at
     * once. Refusing it left its session waiting CONNECT_MS for nothing
     * and its events lost. */
    if (cfd < 0 ||
        (send(fd, &yes, 1, MSG_NOSIGNAL) != 1 && errno != EPIPE && errno != ECONNRESET)) {
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
        asrc_pending_end(s);
        return;
    }
    void *map = memfd_map(mfd);
    close(mfd);
    if (!map || !agent_dec_header_ok(map)) {
        if (map)
            munmap(map, HTA_TOTAL_BYTES);
        s->refused_memfd++;
        (void)!send(pd->fd, &no, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        asrc_pending_end(s);
        return;
    }
    int rc = agent_in(s, pd->fd, map);
    asrc_pending_end(s);
    if (rc == 0)
        asrc_say_ready(s);
}

/* Wait for the hello on fd (nonblocking). */
void asrc_pending_begin(struct agent_source *s, int fd)
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

/* A asrc_descendant's connection (--follow): a session of its own, whose source
 * adopts the connection (agent_open_at, mode SOURCE_PID). */
void asrc_descendant(struct agent_source *s, int fd, uint64_t pid)
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
void asrc_listen_cb(uv_poll_t *p, int status, int events)
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
        asrc_descendant(s, fd, (uint64_t)cr.pid);
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
    asrc_pending_begin(s, fd);
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
    asrc_say_ready(s);
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
            asrc_say_ready(s);
        }
        return;
    }
    if (n < 0 && status >= 0 && (errno == EAGAIN || errno == EINTR) && !(events & UV_DISCONNECT))
        return;
    uv_poll_stop(p);
    conn_ended(s);
}

int asrc_listen_make(struct agent_source *s, char *err, size_t errsz)
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

/* Lost records the agent counted since the last look, as a lost event. */
size_t asrc_lost_event(struct agent_source *s, struct ht_event *ev)
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
