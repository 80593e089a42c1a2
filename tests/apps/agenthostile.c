/*
 * agenthostile: a program run under `heaptracectl run` that plays a hostile
 * agent (tests/integration/cases-agent.sh, agent_hostile). Linked
 * statically, so the real agent is never loaded (the dynamic loader is what
 * reads LD_PRELOAD). It takes the session's socket and token from the
 * environment and:
 *   0. connects and says nothing (refused after 2 s; the daemon serves meanwhile),
 *   1. connects with a wrong token (refused),
 *   2. with the token and a memfd that is not sealed (refused),
 *   3. with the token and a sealed memfd of the right size (accepted), then
 *      writes garbage: records of every kind with bad fields, stack ids out
 *      of range, stack entries with bad depths, records rewritten after
 *      being published, a head far ahead (records reserved, never done);
 *   4. connects once more (refused: one agent per session).
 * Prints {"done":true,"records":N} and exits 0, or, given a program and its
 * arguments, closes its connection and execs it (the session follows the
 * process into it: what was counted of the hostile ring must stay counted).
 * No app-sync: it never waits.
 */
#define _GNU_SOURCE
#include "../../agent/agent-ring.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static uint64_t rnd_state = 42;

static uint64_t rnd(void)
{
    uint64_t z = (rnd_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int memfd(int seal, off_t size)
{
    int fd = memfd_create("hostile", MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, size) != 0)
        exit(3);
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        exit(3);
    return fd;
}

/* Connect and send the hello with fd; the daemon's verdict byte (0: none). */
static char hello(const char *name, const char *token, int fd, int *sock_out)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)))
        exit(4);
    struct hta_hello h;
    memset(&h, 0, sizeof(h));
    h.magic = HTA_MAGIC;
    h.version = HTA_VERSION;
    memcpy(h.token, token, strnlen(token, HTA_TOKEN_LEN));
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
    sendmsg(s, &m, MSG_NOSIGNAL);
    char v = 0;
    if (recv(s, &v, 1, 0) != 1)
        v = 0;
    if (sock_out)
        *sock_out = s;
    else
        close(s);
    return v;
}

static void header(void *base)
{
    struct hta_header *h = base;
    h->magic = HTA_MAGIC;
    h->version = HTA_VERSION;
    h->records = HTA_RECORDS;
    h->stacks = HTA_STACKS;
    h->depth = HTA_DEPTH;
}

/* Garbage in the stack table: a few complete entries, the rest bad. */
static void stacks(void *base)
{
    struct hta_stack *st = (struct hta_stack *)((char *)base + HTA_STACKS_OFFSET);
    for (unsigned i = 0; i < 64; i++) {
        st[i].hash = rnd() | 1;
        st[i].state = i % 4 ? 1 : (uint32_t)rnd();
        st[i].depth = i % 3 ? 1 + i % HTA_DEPTH : (uint32_t)rnd();
        for (unsigned k = 0; k < HTA_DEPTH; k++)
            st[i].frames[k] = rnd();
    }
}

static uint64_t garbage(void *base, unsigned n)
{
    struct hta_header *h = base;
    struct hta_rec *r = (struct hta_rec *)((char *)base + HTA_RECS_OFFSET);
    struct timespec ts;
    uint64_t pos = 0;
    for (unsigned i = 0; i < n; i++, pos++) {
        struct hta_rec *x = &r[pos & (HTA_RECORDS - 1)];
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t v = rnd();
        x->t = i % 5 ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec : v;
        x->kind = (uint8_t)(i % 7 ? 1 + v % HTA_KIND_MAX : v >> 8);
        x->addr = i % 6 ? 0x10000 + 16 * (v % 4096) : rnd();
        x->old_addr = i % 2 ? 0x10000 + 16 * (rnd() % 4096) : rnd();
        x->size = i % 9 ? rnd() % 100000 : rnd();
        x->stack = (uint32_t)(i % 4 ? rnd() % 80 : rnd());
        x->tid = (uint32_t)rnd();
        x->flags = (uint8_t)rnd();
        __atomic_store_n(&x->seq, i % 11 ? pos + 1 : rnd(), __ATOMIC_RELEASE);
        if (i % 13 == 0) /* rewritten after being published */
            x->kind = (uint8_t)rnd();
        __atomic_store_n(&h->head, pos + 1, __ATOMIC_RELEASE);
        if (i % 512 == 0)
            usleep(1000);
    }
    /* Reserved and never completed, and a head far ahead. */
    __atomic_store_n(&h->head, ~0ull - 5, __ATOMIC_RELEASE);
    h->counters[HTA_CNT_RING_FULL] = ~0ull;
    return n;
}

int main(int argc, char **argv)
{
    const char *name = getenv(HTA_ENV_SOCKET), *token = getenv(HTA_ENV_TOKEN);
    if (!name || !token)
        return 2;
    /* A connection that says nothing: refused after the daemon's 2 s. */
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, name, strlen(name));
    int quiet = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(quiet, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) != 0)
        return 4;
    printf("{\"quiet\":true}\n");
    fflush(stdout);
    char v;
    if (recv(quiet, &v, 1, 0) > 0 && v == HTA_ACCEPT)
        return 9;
    close(quiet);
    int fd = memfd(1, (off_t)HTA_TOTAL_BYTES);
    if (hello(name, "0123456789abcdef0123456789abcdef", fd, NULL) == HTA_ACCEPT)
        return 5;
    int loose = memfd(0, (off_t)HTA_TOTAL_BYTES);
    if (hello(name, token, loose, NULL) == HTA_ACCEPT)
        return 6;
    void *base = mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return 3;
    header(base);
    stacks(base);
    int s = -1;
    if (hello(name, token, fd, &s) != HTA_ACCEPT)
        return 7;
    uint64_t n = garbage(base, 20000);
    if (hello(name, token, fd, NULL) == HTA_ACCEPT)
        return 8;
    printf("{\"done\":true,\"records\":%llu}\n", (unsigned long long)n);
    fflush(stdout);
    usleep(300000);
    if (argc > 1) {
        close(s); /* the daemon drains the ring to where it was reserved then */
        execv(argv[1], argv + 1);
        return 10;
    }
    return 0;
}
