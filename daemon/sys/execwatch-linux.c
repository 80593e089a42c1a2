/*
 * Exec events from the process events connector: a NETLINK_CONNECTOR
 * socket bound to the CN_IDX_PROC group, asked to listen with
 * PROC_CN_MCAST_LISTEN (include/uapi/linux/cn_proc.h,
 * include/uapi/linux/connector.h; drivers/connector/cn_proc.c sends a
 * PROC_EVENT_EXEC once a process has exec'd).
 */
#define _GNU_SOURCE
#include "execwatch.h"

#include <errno.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

static int listen_send(int fd, enum proc_cn_mcast_op op)
{
    struct {
        struct nlmsghdr nl;
        struct cn_msg cn;
        enum proc_cn_mcast_op op;
    } __attribute__((packed)) m;
    memset(&m, 0, sizeof(m));
    m.nl.nlmsg_len = sizeof(m);
    m.nl.nlmsg_type = NLMSG_DONE;
    m.nl.nlmsg_pid = (uint32_t)getpid();
    m.cn.id.idx = CN_IDX_PROC;
    m.cn.id.val = CN_VAL_PROC;
    m.cn.len = sizeof(op);
    m.op = op;
    return send(fd, &m, sizeof(m), 0) == (ssize_t)sizeof(m) ? 0 : -errno;
}

int execwatch_open(void)
{
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR);
    if (fd < 0)
        return uv_translate_sys_error(errno);
    struct sockaddr_nl a;
    memset(&a, 0, sizeof(a));
    a.nl_family = AF_NETLINK;
    a.nl_groups = CN_IDX_PROC;
    /* nl_pid 0: the kernel assigns a unique port (several sessions watch). */
    int rc = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? listen_send(fd, PROC_CN_MCAST_LISTEN)
                                                             : -errno;
    if (rc) {
        close(fd);
        return uv_translate_sys_error(-rc);
    }
    return fd;
}

int execwatch_read(int fd, uint64_t *pids, size_t max, uint64_t *lost)
{
    size_t n = 0;
    char buf[8192] __attribute__((aligned(NLMSG_ALIGNTO)));
    while (n < max) {
        ssize_t got = recv(fd, buf, sizeof(buf), 0);
        if (got < 0 && errno == ENOBUFS) {
            (*lost)++; /* some events dropped: how many is not said */
            continue;
        }
        if (got < 0)
            return errno == EAGAIN || errno == EINTR ? (int)n : uv_translate_sys_error(errno);
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)got);
             h = NLMSG_NEXT(h, got)) {
            struct cn_msg *cn = NLMSG_DATA(h);
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*cn) + sizeof(struct proc_event)) ||
                cn->id.idx != CN_IDX_PROC)
                continue;
            struct proc_event ev;
            memcpy(&ev, cn->data, sizeof(ev));
            if (ev.what == PROC_EVENT_EXEC && n < max)
                pids[n++] = (uint64_t)ev.event_data.exec.process_tgid;
            else if (ev.what == PROC_EVENT_EXEC)
                (*lost)++; /* more in one datagram than the caller takes */
        }
    }
    return (int)n;
}

void execwatch_close(int fd)
{
    if (fd >= 0) {
        listen_send(fd, PROC_CN_MCAST_IGNORE);
        close(fd);
    }
}
