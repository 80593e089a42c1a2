/* A process's private bytes and resident anonymous memory from /proc/PID/status. */
#include "procmem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* The status file is a few kB; the fields we need come before "Threads:". */
#define STATUS_BUF 8192

/* "Name:   1234 kB" -> bytes. 0 when found. */
static int status_field(const char *text, const char *name, uint64_t *bytes)
{
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, nl) != 0 || p[nl] != ':')
            continue;
        p += nl + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        uint64_t v = 0;
        int digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 19; p++, digits++)
            v = v * 10 + (uint64_t)(*p - '0');
        if (digits == 0 || strncmp(p, " kB", 3) != 0)
            return -1;
        *bytes = v * 1024;
        return 0;
    }
    return -1;
}

int procmem_read(uint64_t pid, struct procmem *out)
{
    char path[64], buf[STATUS_BUF];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/status", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ESRCH ? UV_ENOENT : uv_translate_sys_error(errno);
    size_t len = 0;
    int err = 0;
    while (len < sizeof buf - 1) {
        ssize_t got = read(fd, buf + len, sizeof buf - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            err = errno == ESRCH ? UV_ENOENT : uv_translate_sys_error(errno);
            break;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    if (err)
        return err;
    buf[len] = '\0';
    memset(out, 0, sizeof *out);
    /* A kernel thread or a zombie has no Vm* lines: nothing to measure. */
    if (status_field(buf, "VmData", &out->vm_data) != 0)
        return strstr(buf, "State:\tZ") || strstr(buf, "State:\tX") ? UV_ENOENT : UV_EINVAL;
    if (status_field(buf, "VmStk", &out->vm_stk) != 0 ||
        status_field(buf, "RssAnon", &out->rss_anon) != 0)
        return UV_EINVAL;
    /* VmSwap is missing on kernels without swap support. */
    status_field(buf, "VmSwap", &out->vm_swap);
    out->private_bytes = out->vm_data + out->vm_stk;
    return 0;
}
