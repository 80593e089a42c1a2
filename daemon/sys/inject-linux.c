/*
 * Loading the agent into a running process (x86-64 Linux), without gdb:
 * ptrace(PTRACE_SEIZE) one thread, stop it (PTRACE_INTERRUPT), save its
 * registers and extended state, make it call functions of its own libc
 * (found in that libc's dynamic symbol table, read through
 * /proc/PID/map_files: never a path a client names), and put everything
 * back. ptrace(2) for the requests and stops.
 *
 * The calls: __errno_location (to save and restore errno), dlopen(agent,
 * RTLD_NOW), dlsym(handle, "heaptrace_agent_attach"), that function, and
 * dlerror for a failure's message. Each call returns to address 0: the
 * fault stops the thread (a signal-delivery-stop with SIGSEGV at rip 0),
 * and is never delivered. Any other signal arriving meanwhile is delivered
 * to the program as it would have been.
 *
 * The thread is taken at a safe point only: blocked in a system call other
 * than futex, or running outside libc, the loader, the unwinder and the
 * allocator (a thread stopped inside malloc holds its lock, and dlopen
 * would wait for it forever). Otherwise it is let go and tried again.
 */
#define _GNU_SOURCE
#include "inject-int.h"
#include "inject.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "procmaps.h"

#include <dlfcn.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

/* The program's entry point (AT_ENTRY in /proc/PID/auxv: getauxval(3)). */
static uint64_t entry_of(uint64_t pid)
{
    char path[64];
    uint64_t av[2], entry = 0;
    snprintf(path, sizeof(path), "/proc/%llu/auxv", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && read(fd, av, sizeof(av)) == (ssize_t)sizeof(av) && av[0] != AT_NULL)
        if (av[0] == AT_ENTRY)
            entry = av[1];
    if (fd >= 0)
        close(fd);
    return entry;
}

/* Is ip in the dynamic loader (ld-linux)? 1, 0, or -1 (no maps). Before
 * the entry point the main thread runs nothing else. */
static int in_loader(uint64_t pid, uint64_t ip)
{
    struct procmaps_module *mods = NULL;
    size_t n = 0;
    int found = 0;
    if (procmaps_modules(pid, &mods, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!strncmp(inj_base_name(mods[i].path), "ld-linux", 8) && ip >= mods[i].start &&
            ip < mods[i].end)
            found = 1;
    ht_free(mods);
    return found;
}

/* Run the stopped main thread of a process still in the dynamic loader to
 * its entry point: an int3 (0xcc) there, the stop it makes (SIGTRAP with
 * rip one past it), the byte put back and rip moved back onto it. The
 * loader has then mapped and initialized every library: libc's dlopen
 * can be called. 0, or an error (the byte is restored either way). */
static int entry_run(struct thread *th, uint64_t entry)
{
    unsigned char orig, trap = 0xcc;
    if (pread(th->mem, &orig, 1, (off_t)entry) != 1 || pwrite(th->mem, &trap, 1, (off_t)entry) != 1)
        return UV_EFAULT;
    int rc = ptrace(PTRACE_CONT, th->tid, 0, 0) == 0 ? 0 : -errno;
    uint64_t end = inj_now_ms() + ENTRY_TIMEOUT_MS;
    while (rc == 0) {
        int st;
        rc = inj_stop_wait(th->tid, &st, (unsigned)(end > inj_now_ms() ? end - inj_now_ms() : 1));
        if (rc)
            break;
        struct user_regs_struct r;
        if (WSTOPSIG(st) == SIGTRAP && (st >> 16) == 0 &&
            ptrace(PTRACE_GETREGS, th->tid, 0, &r) == 0 && r.rip == entry + 1)
            break;
        rc = ptrace(PTRACE_CONT, th->tid, 0, (void *)(uintptr_t)((st >> 16) ? 0 : WSTOPSIG(st)))
                 ? -errno
                 : 0;
    }
    if (rc == UV_ETIMEDOUT) {
        /* Past the entry already (the loader was only resolving a lazy
         * symbol): stopped again, the byte put back below, attached where
         * it is. Its registers are saved afresh by the caller's path. */
        int st;
        ptrace(PTRACE_INTERRUPT, th->tid, 0, 0);
        inj_stop_wait(th->tid, &st, 1000);
        rc = 1;
    }
    if (pwrite(th->mem, &orig, 1, (off_t)entry) != 1 && rc == 0)
        rc = UV_EFAULT;
    if (rc == 1)
        return 1;
    if (rc == 0 && (rc = inj_regs_save(th)) == 0) {
        th->regs.rip = entry;
        th->regs.orig_rax = (unsigned long long)-1;
    }
    return rc;
}

/* Processes stopped by inject_hold, not yet taken by inject_agent. */
#define HELD_MAX 64
static uint64_t held[HELD_MAX];

static int held_take(uint64_t pid)
{
    for (unsigned i = 0; i < HELD_MAX; i++)
        if (held[i] == pid) {
            held[i] = 0;
            return 1;
        }
    return 0;
}

int inject_hold(uint64_t pid)
{
    unsigned i = 0;
    while (i < HELD_MAX && held[i])
        i++;
    if (i == HELD_MAX)
        return UV_EBUSY;
    if (ptrace(PTRACE_SEIZE, (pid_t)pid, 0, 0) != 0)
        return -errno;
    int rc = inj_thread_interrupt((pid_t)pid);
    if (rc) {
        inj_thread_release((pid_t)pid);
        return rc;
    }
    held[i] = pid;
    return 0;
}

void inject_unhold(uint64_t pid)
{
    if (held_take(pid))
        ptrace(PTRACE_DETACH, (pid_t)pid, 0, 0);
}

/* The exec gate (execwatch.h): pid is waiting in execve for the daemon's
 * answer. Seized now with PTRACE_O_TRACEEXEC, it stops at the exec's end
 * (PTRACE_EVENT_EXEC, before the new program's first instruction: ptrace(2)),
 * a ptrace stop its parent never sees. 0 or a negative UV_E* error. */
int inject_exec_seize(uint64_t pid)
{
    if (ptrace(PTRACE_SEIZE, (pid_t)pid, 0, (void *)(uintptr_t)PTRACE_O_TRACEEXEC) != 0)
        return -errno;
    /* An interrupt asked now stays pending while execve waits at the gate
     * (a killable wait: only SIGKILL ends it, fs/notify/fanotify/fanotify.c)
     * and is taken at the first return to user mode: after a failed execve,
     * at once. A successful one stops at PTRACE_EVENT_EXEC first, and that
     * trap clears the pending one (kernel/signal.c, ptrace_stop: "any trap
     * clears pending STOP trap"). So the process never runs on traced by a
     * daemon that has stopped waiting for it. */
    if (ptrace(PTRACE_INTERRUPT, (pid_t)pid, 0, 0) != 0) {
        int e = errno;
        ptrace(PTRACE_DETACH, (pid_t)pid, 0, 0);
        return -e;
    }
    return 0;
}

/* After the answer: the exec's stop waited for, then held for the
 * inject_agent (at_entry) that follows. Any other stop comes first only
 * when execve returned, failed (E2BIG, ENOEXEC...: the old program runs on),
 * or when a thread other than the one seized exec'd: let go at once, a
 * signal stopped at delivered on the detach, a job-control stop kept
 * (ptrace(2), PTRACE_DETACH). Before, the daemon waited EXEC_TIMEOUT_MS
 * for an exec that never came, and took the process's next exec of any
 * program as one of the image. UV_ECANCELED, UV_ETIMEDOUT or UV_ESRCH. */
int inject_exec_wait(uint64_t pid)
{
    pid_t tid = (pid_t)pid;
    unsigned slot = 0;
    while (slot < HELD_MAX && held[slot])
        slot++;
    int st, rc = inj_stop_wait(tid, &st, EXEC_TIMEOUT_MS);
    if (rc) {
        if (rc != UV_ESRCH)
            inj_thread_release(tid);
        return rc;
    }
    if ((st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8)) && slot < HELD_MAX) {
        held[slot] = pid;
        return 0;
    }
    int sig = (st >> 16) == 0 ? WSTOPSIG(st) : 0;
    ptrace(PTRACE_DETACH, tid, 0, (void *)(uintptr_t)sig);
    return (st >> 16) == PTRACE_EVENT_EXEC ? UV_EBUSY : UV_ECANCELED;
}

/* start --exe: the main thread stopped now, run to the entry point if the
 * loader is not done, then the calls. *late = 1 when it was past it. */
static int entry_take(const struct inject_req *r, struct thread *th, int *late, char *err,
                      size_t errsz)
{
    uint64_t entry = entry_of(r->pid);
    th->tid = (pid_t)r->pid;
    int was_held = held_take(r->pid);
    if (!entry || (!was_held && ptrace(PTRACE_SEIZE, th->tid, 0, 0) != 0)) {
        int e = errno;
        if (was_held)
            inj_thread_release(th->tid);
        snprintf(err, errsz, "cannot stop process %llu at its start: %s",
                 (unsigned long long)r->pid, entry ? strerror(e) : "no AT_ENTRY");
        return entry ? -e : UV_EINVAL;
    }
    int rc = was_held ? 0 : inj_thread_interrupt(th->tid);
    if (rc == 0)
        rc = inj_regs_save(th);
    int loader = rc == 0 ? in_loader(r->pid, th->regs.rip) : -1;
    if (loader == 0) { /* let go as it was, an EINTR of ours undone */
        inj_eintr_undo(&th->regs);
        ptrace(PTRACE_SETREGS, th->tid, 0, &th->regs);
    }
    if (rc == 0 && loader == 1)
        rc = entry_run(th, entry);
    *late = loader == 0 || rc == 1;
    if (rc == 1)
        rc = 0;
    if (rc || *late || loader < 0) {
        inj_thread_release(th->tid);
        if (rc)
            snprintf(err, errsz, "cannot run process %llu to its entry point: %s",
                     (unsigned long long)r->pid, uv_strerror(rc));
        return rc ? rc : (loader < 0 && !*late ? UV_ESRCH : 0);
    }
    return 0;
}

static int calls_and_restore(struct thread *th, struct target *t, const struct inject_req *r,
                             char *err, size_t errsz)
{
    inj_eintr_undo(&th->regs);
    int rc = t->seccomp ? inject_seccomp_check(r->pid, th->tid, err, errsz) : 0;
    if (rc == 0)
        rc = inj_calls_make(th, t, r, err, errsz);
    int rrc = inj_regs_restore(th);
    ptrace(PTRACE_DETACH, th->tid, 0, 0);
    if (rrc && !rc) {
        snprintf(err, errsz, "cannot restore process %llu's registers: %s",
                 (unsigned long long)r->pid, uv_strerror(rrc));
        rc = rrc;
    }
    return rc;
}

static int inject_entry(const struct inject_req *r, struct thread *th, char *err, size_t errsz)
{
    struct target t;
    memset(&t, 0, sizeof(t));
    int rc = inj_status_check(r->pid, &t.seccomp, err, errsz);
    if (!rc)
        rc = inj_exe_check(r->pid, err, errsz);
    if (!rc)
        rc = inj_lib_visible(r, err, errsz);
    int late = 0;
    if (!rc)
        rc = entry_take(r, th, &late, err, errsz);
    if (rc || late)
        return rc ? rc : 1;
    rc = inj_target_check(r, &t, err, errsz);
    if (rc) {
        inj_regs_restore(th);
        ptrace(PTRACE_DETACH, th->tid, 0, 0);
        return rc;
    }
    return calls_and_restore(th, &t, r, err, errsz);
}

int inject_agent(struct inject_req *r, char *err, size_t errsz)
{
    struct target t;
    err[0] = '\0';
    int rc = 0;
    if (r->at_entry) {
        struct thread *th = ht_calloc(1, sizeof(*th));
        char path[64];
        if (!th)
            return UV_ENOMEM;
        snprintf(path, sizeof(path), "/proc/%llu/mem", (unsigned long long)r->pid);
        th->mem = open(path, O_RDWR | O_CLOEXEC);
        rc = th->mem < 0 ? -errno : inject_entry(r, th, err, errsz);
        r->entered = rc == 0;
        if (th->mem >= 0)
            close(th->mem);
        ht_free(th);
        if (rc != 1)
            return rc;
        err[0] = '\0'; /* past its entry already: attached where it is */
    }
    rc = inj_target_check(r, &t, err, errsz);
    if (rc)
        return rc;
    struct thread *th = ht_calloc(1, sizeof(*th));
    if (!th)
        return UV_ENOMEM;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/mem", (unsigned long long)r->pid);
    th->mem = open(path, O_RDWR | O_CLOEXEC);
    rc = th->mem < 0 ? -errno : inj_thread_pick(th, &t, r->pid);
    if (rc == 1) {
        snprintf(err, errsz,
                 "no thread of process %llu (of the first %d tried, %d stops each) was at a "
                 "safe point (outside libc, the loader and the allocator, or in a system call "
                 "other than a lock wait) with SIGSEGV neither blocked nor ignored",
                 (unsigned long long)r->pid, THREADS_TRIED, SAFE_TRIES);
        rc = UV_EBUSY;
    } else if (rc < 0) {
        snprintf(err, errsz, "cannot stop process %llu (ptrace): %s", (unsigned long long)r->pid,
                 uv_strerror(rc));
    } else {
        rc = calls_and_restore(th, &t, r, err, errsz);
    }
    if (th->mem >= 0)
        close(th->mem);
    ht_free(th);
    return rc;
}
