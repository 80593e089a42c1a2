/* inject-linux.c's parts (not a service header: sys/inject.h is). */
#ifndef INJECT_INT_H
#define INJECT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Thread tid of pid, ptrace-stopped by us: 0 if every seccomp filter it
 * runs under allows each call loading the agent makes; else HT_EPERM with
 * the call and the filter's verdict in err. */
int inject_seccomp_check(uint64_t pid, pid_t tid, char *err, size_t errsz);

#endif
