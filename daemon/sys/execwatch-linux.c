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
#include <fcntl.h>
#include <string.h>
#include <sys/fanotify.h>
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

/* The exec gate: fanotify(7). FAN_OPEN_EXEC_PERM (Linux 5.0) is asked when
 * a file is opened to be executed (execve, uselib), before the exec goes on;
 * permission events need a group of FAN_CLASS_CONTENT or higher, and each is
 * answered with a struct fanotify_response naming the event's fd
 * (include/uapi/linux/fanotify.h; fs/notify/fanotify/fanotify_user.c lets
 * every waiting event through when the group is closed). */
int execgate_open(void)
{
    int fd = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK,
                           O_RDONLY | O_CLOEXEC | O_LARGEFILE);
    return fd < 0 ? uv_translate_sys_error(errno) : fd;
}

int execgate_mark(int fd, const char *path)
{
    if (fanotify_mark(fd, FAN_MARK_ADD, FAN_OPEN_EXEC_PERM, AT_FDCWD, path) != 0)
        return uv_translate_sys_error(errno);
    return 0;
}

int execgate_read(int fd, struct execgate_ev *evs, size_t max, uint64_t *lost)
{
    size_t n = 0;
    /* Read no more events than can be returned: the rest stay queued (a
     * permission event read and not answered would hold its exec until the
     * group closes). */
    char buf[sizeof(struct fanotify_event_metadata) * 16]
        __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
    while (n < max) {
        size_t want = (max - n) < 16 ? (max - n) : 16;
        ssize_t got = read(fd, buf, want * sizeof(struct fanotify_event_metadata));
        if (got < 0)
            return errno == EAGAIN || errno == EINTR || n ? (int)n : uv_translate_sys_error(errno);
        if (got == 0)
            break;
        struct fanotify_event_metadata *m = (struct fanotify_event_metadata *)buf;
        for (; FAN_EVENT_OK(m, got); m = FAN_EVENT_NEXT(m, got)) {
            if (m->vers != FANOTIFY_METADATA_VERSION)
                return UV_EPROTO;
            if (m->mask & FAN_Q_OVERFLOW)
                (*lost)++;
            if (m->fd < 0)
                continue;
            if (!(m->mask & FAN_OPEN_EXEC_PERM) || n == max) {
                struct execgate_ev ev = {(uint64_t)m->pid, m->fd};
                execgate_answer(fd, &ev); /* not ours to hold */
                continue;
            }
            evs[n].pid = (uint64_t)(m->pid > 0 ? m->pid : 0);
            evs[n++].fd = m->fd;
        }
    }
    return (int)n;
}

void execgate_answer(int fd, struct execgate_ev *ev)
{
    if (ev->fd < 0)
        return;
    struct fanotify_response r = {.fd = ev->fd, .response = FAN_ALLOW};
    ssize_t w = write(fd, &r, sizeof(r));
    (void)w; /* a failed answer (the group closing) lets the exec go on all the same */
    close(ev->fd);
    ev->fd = -1;
}
