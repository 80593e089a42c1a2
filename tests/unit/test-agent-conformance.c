/*
 * Source conformance (tests/unit/source-conformance.h) for the agent
 * source: this process plays the agent. Random heap and commit events (the
 * kinds the agent records) are written as the agent writes them (records
 * and stack table entries in a sealed memfd, agent/agent-ring.h), handed to
 * the source's socket with its token, and the connection closed as a
 * program's exit closes it; the engine fed by the source must equal the
 * one fed the events directly.
 */
#define _GNU_SOURCE
#include "agent-ring.h"
#include "agent-source.h"
#include "ht-test.h"
#include "source-conformance.h"
#include "stack-intern.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NEVENTS 20000
/* Event times are up to NEVENTS * 2 ms after the origin, which is put this
 * far in the past so none is later than now (the source clamps those). */
#define BACK_NS 1000000000000ull

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint32_t stack_pick(struct stack_intern *si, uint64_t *s)
{
    uint64_t f[20];
    unsigned which = (unsigned)(rnd(s) % 40), n = 1 + which % 20;
    for (unsigned i = 0; i < n; i++)
        f[i] = 0x400000 + 0x100 * which + 0x10 * i;
    return stack_intern_get(si, f, n);
}

/* The process first, then allocs, frees (some of unknown blocks), reallocs
 * (in place and moving), commits and releases (whole and partial). */
static size_t make_events(struct stack_intern *si, uint64_t seed, struct ht_event *evs, size_t cap)
{
    uint64_t s = seed, t = 0, next = 0x100000;
    uint64_t live[512], commits[64];
    size_t nlive = 0, ncommits = 0, n = 0;
    evs[n++] = (struct ht_event){.t = 0, .kind = HT_EV_PROCESS, .size = (uint64_t)getpid()};
    while (n < cap) {
        struct ht_event ev = {0};
        t += 1 + rnd(&s) % 2000000;
        ev.t = t;
        unsigned r = (unsigned)(rnd(&s) % 100);
        if (r < 40 || nlive == 0) {
            ev.kind = HT_EV_ALLOC;
            ev.addr = next += 64 * (1 + rnd(&s) % 4);
            ev.size = 1 + rnd(&s) % 5000;
            ev.stack = stack_pick(si, &s);
            if (nlive < 512)
                live[nlive++] = ev.addr;
        } else if (r < 65) {
            size_t k = rnd(&s) % nlive;
            ev.kind = HT_EV_FREE;
            ev.addr = r < 62 ? live[k] : 0x50000000 + rnd(&s) % 1000 * 16; /* some unknown */
            if (r < 62)
                live[k] = live[--nlive];
        } else if (r < 80) {
            size_t k = rnd(&s) % nlive;
            ev.kind = HT_EV_REALLOC;
            ev.old_addr = live[k];
            ev.addr = rnd(&s) % 2 ? live[k] : (next += 128);
            ev.size = 1 + rnd(&s) % 9000;
            ev.stack = stack_pick(si, &s);
            live[k] = ev.addr;
        } else if (r < 90 || ncommits == 0) {
            ev.kind = HT_EV_COMMIT;
            ev.addr = 0x7f0000000000ull + (uint64_t)n * 0x100000;
            ev.size = 4096 * (1 + rnd(&s) % 64);
            ev.stack = stack_pick(si, &s);
            if (ncommits < 64)
                commits[ncommits++] = ev.addr;
        } else {
            size_t k = rnd(&s) % ncommits;
            ev.kind = HT_EV_RELEASE;
            ev.addr = commits[k] + 4096 * (rnd(&s) % 2);
            ev.size = 4096 * (1 + rnd(&s) % 4);
            commits[k] = commits[--ncommits];
        }
        evs[n++] = ev;
    }
    return n;
}

static int agent_kind(int kind)
{
    switch (kind) {
    case HT_EV_ALLOC:
        return HTA_ALLOC;
    case HT_EV_FREE:
        return HTA_FREE;
    case HT_EV_REALLOC:
        return HTA_REALLOC;
    case HT_EV_COMMIT:
        return HTA_COMMIT;
    default:
        return HTA_RELEASE;
    }
}

/* The events as the agent writes them: table id = the reference's stack id. */
static void ring_write(void *base, const struct ht_event *evs, size_t n,
                       const struct stack_intern *si, uint64_t t0)
{
    struct hta_header *h = base;
    h->magic = HTA_MAGIC;
    h->version = HTA_VERSION;
    h->records = HTA_RECORDS;
    h->stacks = HTA_STACKS;
    h->depth = HTA_DEPTH;
    h->pid = (uint32_t)getpid();
    struct hta_rec *recs = (struct hta_rec *)((char *)base + HTA_RECS_OFFSET);
    struct hta_stack *st = (struct hta_stack *)((char *)base + HTA_STACKS_OFFSET);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const struct ht_event *ev = &evs[i];
        if (ev->kind == HT_EV_PROCESS)
            continue; /* the source reports it at the agent's hello */
        if (ev->stack && !st[ev->stack - 1].state) {
            unsigned d;
            const uint64_t *f = stack_intern_frames(si, ev->stack, &d);
            st[ev->stack - 1].hash = ev->stack;
            st[ev->stack - 1].depth = d;
            memcpy(st[ev->stack - 1].frames, f, d * sizeof(*f));
            st[ev->stack - 1].state = 1;
        }
        struct hta_rec *r = &recs[pos];
        r->t = t0 + ev->t;
        r->kind = (uint8_t)agent_kind(ev->kind);
        r->addr = ev->addr;
        r->old_addr = ev->old_addr;
        r->size = ev->size;
        r->stack = ev->stack;
        r->seq = ++pos;
    }
    h->head = pos;
}

static int agent_open(void *arg, struct source **out, uv_loop_t *loop,
                      const struct source_params *p, const struct source_sink *sink, char *err,
                      size_t errsz)
{
    (void)arg;
    struct source_params lp = *p;
    lp.mode = SOURCE_LAUNCH;
    lp.launcher_pid = (uint64_t)getpid();
    lp.launcher_uid = (uint32_t)getuid();
    lp.sample_ns = 0; /* no private-bytes readings of this process */
    return agent_source_open_test(out, loop, &lp, sink, err, errsz);
}

static int hello_send(int s, int fd, const char *token)
{
    struct hta_hello h;
    memset(&h, 0, sizeof(h));
    h.magic = HTA_MAGIC;
    h.version = HTA_VERSION;
    memcpy(h.token, token, HTA_TOKEN_LEN);
    h.bytes = HTA_TOTAL_BYTES;
    struct iovec iov = {.iov_base = &h, .iov_len = sizeof(h)};
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(s, &m, 0) == (ssize_t)sizeof(h) ? 0 : -1;
}

static int agent_feed(void *arg, struct conf_run *r, struct source *src, const struct ht_event *evs,
                      size_t n, const struct stack_intern *si)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - BACK_NS;
    agent_source_set_t0(src, t0);
    int fd = memfd_create("conf", MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)HTA_TOTAL_BYTES) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        return -1;
    void *base = mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return -1;
    ring_write(base, evs, n, si, t0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    const char *name = agent_source_socket(src);
    size_t len = strlen(name);
    memcpy(a.sun_path + 1, name, len);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) != 0 ||
        hello_send(s, fd, agent_source_token(src)) != 0)
        return -1;
    close(fd);
    char v = 0;
    for (int i = 0; i < 100000; i++) {
        conf_pump(r);
        if (recv(s, &v, 1, 0) == 1 || (errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        usleep(100);
    }
    munmap(base, HTA_TOTAL_BYTES);
    close(s); /* the program's end */
    return v == HTA_ACCEPT ? 0 : -1;
}

static const struct conf_backend agent_backend = {"agent", agent_open, agent_feed, NULL};

static void run(int prefill)
{
    static struct ht_event evs[NEVENTS];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        struct engine_limits lim;
        engine_limits_default(&lim);
        struct engine ref;
        CHECK(engine_init(&ref, &lim) == 0);
        size_t n = make_events(&ref.si, seed, evs, NEVENTS);
        char why[1024] = "";
        int rc = conf_check(&agent_backend, &ref, evs, n, prefill, why, sizeof(why));
        if (rc != 0)
            fprintf(stderr, "seed %llu prefill %d: %s\n", (unsigned long long)seed, prefill, why);
        CHECK(ref.q.unknown_frees > 0 && ref.commits.n > 0);
        engine_close(&ref);
        CHECK_EQ(rc, 0);
    }
}

static void test_agent(void)
{
    run(0);
}

static void test_agent_remapped(void)
{
    run(1);
}

HT_TEST_MAIN(T(agent), T(agent_remapped))
