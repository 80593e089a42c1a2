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
    /* A process that has just exec'd (start --exe): run it to its entry
     * point first, so the agent is in before main and the libraries'
     * later allocations (a process already past it is attached where it
     * is). */
    int at_entry;
    int entered; /* out: it was stopped at its entry point (else attached where it was) */
};

/* Every reason the target cannot take the agent, checked before anything
 * touches it: 0, or an error with the reason in err (HT_ENOTSUP, HT_EPERM). */
int inject_check(const struct inject_req *r, char *err, size_t errsz);
/* inject_check, then the calls; the thread used is left as it was found
 * (registers, FPU state, errno, a syscall it was in restarted). 0, or an
 * error with the reason in err. */
int inject_agent(struct inject_req *r, char *err, size_t errsz);
/* start --exe: stop a process that has just exec'd now, while it may be
 * in the loader still, for the inject_agent (at_entry) that follows; or
 * let it go when none does. 0 or an error (then inject_agent stops it). */
int inject_hold(uint64_t pid);
void inject_unhold(uint64_t pid);
/* start --exe through the exec gate (execwatch.h): seize a process waiting
 * in execve before the gate's answer, then, after it, wait for the exec's
 * end and hold it there for inject_agent (at_entry). 0 or an error (the
 * process let go as it was). */
int inject_exec_seize(uint64_t pid);
int inject_exec_wait(uint64_t pid);

#endif
