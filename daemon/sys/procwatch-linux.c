/* A process's exit on the loop: its pidfd (pidfd_open, Linux 5.3) becomes readable when it exits.
 */
#include "procwatch.h"

#include "ht-alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct procwatch {
    uv_poll_t poll;
    int pidfd;
    uint64_t pid;
    procwatch_cb cb;
    void *arg;
    int stopped, fired;
};

/* The exit status of a zombie not yet reaped by its parent: field 52 of
 * /proc/PID/stat (proc(5), "exit_code", since Linux 3.5). -1 when gone. */
static int exit_code_read(uint64_t pid, int *status)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t r = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (r <= 0)
        return -1;
    buf[r] = 0;
    char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p || p[1] != ' ' || p[2] != 'Z')
        return -1;
    int field = 3; /* p + 2 is field 3 (state) */
    for (p += 2; *p && field < 52; p++)
        if (*p == ' ')
            field++;
    if (field != 52)
        return -1;
    *status = atoi(p);
    return 0;
}

/* PIDFD_GET_INFO with PIDFD_INFO_EXIT (Linux 6.15, include/uapi/linux/pidfd.h):
 * the exit status of any process, once it was reaped, through its pidfd.
 * Defined here: the build host's headers may predate it. */
struct ht_pidfd_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
};
#define HT_PIDFD_INFO_EXIT (1ULL << 3)
#define HT_PIDFD_GET_INFO _IOWR(0xFF, 11, struct ht_pidfd_info)

static int exit_code_pidfd(int pidfd, int *status)
{
    struct ht_pidfd_info info = {.mask = HT_PIDFD_INFO_EXIT};
    if (pidfd < 0 || ioctl(pidfd, HT_PIDFD_GET_INFO, &info) != 0 ||
        !(info.mask & HT_PIDFD_INFO_EXIT))
        return -1;
    *status = info.exit_code;
    return 0;
}

int procwatch_exit_status(uint64_t pid, int pidfd, int *status)
{
    for (int i = 0; i < 20; i++) {
        if (exit_code_read(pid, status) == 0 || exit_code_pidfd(pidfd, status) == 0)
            return 0;
        usleep(5000);
    }
    return -1;
}

static void on_closed(uv_handle_t *h)
{
    struct procwatch *w = h->data;
    close(w->pidfd);
    ht_free(w);
}

static void on_readable(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct procwatch *w = p->data;
    if (w->stopped || w->fired)
        return;
    w->fired = 1;
    uv_poll_stop(&w->poll);
    int st = 0;
    int known = procwatch_exit_status(w->pid, w->pidfd, &st) == 0;
    int code = (st & 0x7f) == 0 ? (st >> 8) & 0xff : 128 + (st & 0x7f);
    w->cb(w->arg, w->pid, known, known ? code : 0);
}

int procwatch_start(uv_loop_t *loop, uint64_t pid, procwatch_cb cb, void *arg,
                    struct procwatch **out)
{
    if (pid == 0 || pid > 0x7fffffff)
        return UV_ENOENT;
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0)
        return errno == ESRCH ? UV_ENOENT : uv_translate_sys_error(errno);
    struct procwatch *w = ht_calloc(1, sizeof *w);
    if (!w) {
        close(fd);
        return UV_ENOMEM;
    }
    w->pidfd = fd;
    w->pid = pid;
    w->cb = cb;
    w->arg = arg;
    int rc = uv_poll_init(loop, &w->poll, fd);
    if (rc) {
        close(fd);
        ht_free(w);
        return rc;
    }
    w->poll.data = w;
    /* A pidfd polls readable once the process has exited (pidfd_open(2)). */
    rc = uv_poll_start(&w->poll, UV_READABLE, on_readable);
    if (rc) {
        uv_close((uv_handle_t *)&w->poll, on_closed);
        return rc;
    }
    *out = w;
    return 0;
}

void procwatch_stop(struct procwatch *w)
{
    if (!w || w->stopped)
        return;
    w->stopped = 1;
    uv_close((uv_handle_t *)&w->poll, on_closed);
}
