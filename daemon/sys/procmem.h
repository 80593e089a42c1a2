/*
 * A process's memory figures for triggers and the timeline. Linux reads
 * /proc/PID/status (~5 us a read, constant; docs/linux.md#private-bytes):
 * private bytes, the analogue of Windows' commit charge, is VmData + VmStk.
 * Windows (procmem-win.c): GetProcessMemoryInfo; only private_bytes is
 * filled (PrivateUsage, the commit charge), the Linux fields read 0.
 */
#ifndef PROCMEM_H
#define PROCMEM_H

#include <stdint.h>

struct procmem {
    uint64_t private_bytes; /* VmData + VmStk */
    uint64_t vm_data, vm_stk, rss_anon, vm_swap; /* bytes */
};

/* 0, UV_ENOENT (the process is gone) or another UV_E* error. */
int procmem_read(uint64_t pid, struct procmem *out);

#endif
