/* Platform: which processes a client may trace (trace-access-unix.c;
 * trace-access-win.c on Windows). */
#ifndef TRACE_ACCESS_H
#define TRACE_ACCESS_H

#include <stddef.h>
#include <stdint.h>

/* May a client admitted as uid (endpoint_admit's; 0 is the administrator)
 * trace process pid? The daemon probes with its own privileges on the
 * client's behalf, so it asks what the client itself could. 0, or HT_EPERM
 * with the reason in err.
 * Linux: a non-root client traces only a process whose real, effective,
 * saved and filesystem uids are all its own. Windows: only the
 * administrator, whom the pipe's DACL admits (etw-mechanics.md §9). */
int trace_access_check(uint32_t uid, uint64_t pid, char *err, size_t errsz);

#endif
