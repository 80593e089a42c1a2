/* Platform: loading the agent into a running process (inject-linux.c). */
#ifndef INJECT_H
#define INJECT_H

#include <stddef.h>
#include <stdint.h>

/* What the target's thread is made to call: dlopen(lib, RTLD_NOW), then
 * lib's heaptrace_agent_attach(socket, token, stacks, depth). */
struct inject_req {
    uint64_t pid;
    const char *lib; /* the daemon's own agent path, never a client's */
    const char *socket, *token, *stacks;
    unsigned depth;
};

/* Every reason the target cannot take the agent, checked before anything
 * touches it: 0, or an error with the reason in err (HT_ENOTSUP, HT_EPERM). */
int inject_check(const struct inject_req *r, char *err, size_t errsz);
/* inject_check, then the calls; the thread used is left as it was found
 * (registers, FPU state, errno, a syscall it was in restarted). 0, or an
 * error with the reason in err. */
int inject_agent(const struct inject_req *r, char *err, size_t errsz);

#endif
