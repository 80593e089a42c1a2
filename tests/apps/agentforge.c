/*
 * agentforge: a program run under `heaptracectl run` that plays an agent
 * forging its stacks (tests/integration/cases-advrun.sh). Linked statically
 * (and position independent, so it is mapped nowhere a guess could name), so
 * the real agent is never loaded. It takes the session's socket and token
 * from the environment, hands over a sealed memfd, writes one allocation
 * whose stack is the addresses given (hex: return addresses, so one past
 * the instruction), closes its connection and execs the rest of its
 * arguments: usage: agentforge ADDR... -- PROGRAM ARGS...
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

static int join(const char *name, const char *token, int fd)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    char v = 0;
    if (sendmsg(s, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(h) || recv(s, &v, 1, 0) != 1 ||
        v != HTA_ACCEPT)
        exit(5);
    return s;
}

int main(int argc, char **argv)
{
    const char *name = getenv(HTA_ENV_SOCKET), *token = getenv(HTA_ENV_TOKEN);
    int dash = 1;
    while (dash < argc && strcmp(argv[dash], "--"))
        dash++;
    if (!name || !token || dash == 1 || dash > (int)HTA_DEPTH + 1 || dash + 1 >= argc)
        return 2;
    int fd = memfd_create("forge", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)HTA_TOTAL_BYTES) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        return 3;
    char *base = mmap(NULL, HTA_TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return 3;
    struct hta_header *h = (struct hta_header *)base;
    h->magic = HTA_MAGIC;
    h->version = HTA_VERSION;
    h->records = HTA_RECORDS;
    h->stacks = HTA_STACKS;
    h->depth = HTA_DEPTH;
    int s = join(name, token, fd);
    struct hta_stack *st = (struct hta_stack *)(base + HTA_STACKS_OFFSET);
    for (int i = 1; i < dash; i++)
        st->frames[i - 1] = strtoull(argv[i], NULL, 16);
    st->depth = (uint32_t)(dash - 1);
    st->hash = 1;
    __atomic_store_n(&st->state, 1, __ATOMIC_RELEASE);
    struct hta_rec *r = (struct hta_rec *)(base + HTA_RECS_OFFSET);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r->t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    r->kind = HTA_ALLOC;
    r->addr = 0x10000;
    r->size = 4242;
    r->stack = 1;
    __atomic_store_n(&r->seq, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->head, 1, __ATOMIC_RELEASE);
    usleep(200000); /* taken by the daemon meanwhile */
    close(s);
    execv(argv[dash + 1], argv + dash + 1);
    return 10;
}
