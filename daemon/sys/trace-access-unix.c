/* Unix trace access: on Linux the kernel's ptrace rule, asked with the client's credentials on a
 * pidfd; elsewhere root only. */
#define _GNU_SOURCE /* syscall, pipe2 */
#include "trace-access.h"

#include "ht-error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#ifdef __linux__
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* include/uapi/asm-generic/unistd.h, Linux 5.3 */
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438 /* include/uapi/asm-generic/unistd.h, Linux 5.6 */
#endif

/* Yama's word in a refusal: ptrace_scope 1 lets a process be traced only by
 * its ancestors (or a tracer it named), 2 only by CAP_SYS_PTRACE, 3 by
 * nobody (Documentation/admin-guide/LSM/Yama.rst); the kernel check above
 * applies it. "" when Yama is not there or allows what the DAC allows. */
static const char *yama_note(char *buf, size_t sz)
{
    const char *path = "/proc/sys/kernel/yama/ptrace_scope";
#ifdef HEAPTRACE_TEST_KNOBS
    /* Tests on a kernel without Yama: the scope read from this file. */
    if (getenv("HEAPTRACED_TEST_YAMA_SCOPE_FILE"))
        path = getenv("HEAPTRACED_TEST_YAMA_SCOPE_FILE");
#endif
    FILE *f = fopen(path, "re");
    int scope = 0;
    if (!f)
        return "";
    if (fscanf(f, "%d", &scope) != 1)
        scope = 0;
    fclose(f);
    static const char *const what[] = {"", "only its ancestors may trace it",
                                       "only CAP_SYS_PTRACE may trace it", "nobody may trace it"};
    if (scope < 1 || scope > 3)
        return "";
    snprintf(buf, sz, "; or Yama: kernel.yama.ptrace_scope is %d, %s", scope, what[scope]);
    return buf;
}

/* A descriptor number no process can hold: fs/file.c caps fs.nr_open at
 * INT_MAX rounded down to a multiple of BITS_PER_LONG (sysctl_nr_open_max),
 * so pidfd_getfd on it can only answer the access check (EPERM) or EBADF. */
#define FD_NEVER 0x7fffffff
/* The helper answers in under a millisecond. One that does not answer in
 * time (a target held in exec) is killed and the client refused; the loop
 * waits at most this long. */
#define HELPER_TIMEOUT_MS 500
/* The wait is made in slices this long, between which a helper that stopped
 * or died is seen: its real uid is the client's, so the client may send it
 * SIGSTOP (kernel/signal.c, kill_ok_by_cred), and that must not hold the
 * loop for the whole timeout. */
#define HELPER_SLICE_MS 2

/* What the helper tells the daemon: the step that failed (0: none) and the
 * errno of pidfd_getfd or of that step. */
enum helper_step { STEP_ASKED, STEP_GROUPS, STEP_GID, STEP_UID, STEP_CAPS };
struct helper_answer {
    int step;
    int err;
};

/* Drop every capability (effective, permitted, inheritable) of the calling
 * thread, the only one of the helper. */
static int caps_drop(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capset, &h, d) != 0)
        return -1;
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (d[i].effective || d[i].permitted || d[i].inheritable) {
            errno = EPERM;
            return -1;
        }
    return 0;
}

/* The forked helper: take the client's real uid, real gid and groups, drop
 * every capability, and let the kernel check the process pidfd names with
 * those credentials. pidfd_getfd decides with ptrace_may_access(task,
 * PTRACE_MODE_ATTACH_REALCREDS) on the pidfd's task and answers EPERM when
 * refused (kernel/pid.c, __pidfd_fget): the ptrace rule itself (uids, gids,
 * dumpable, capabilities, LSMs such as Yama), on that very process. REALCREDS
 * compares the caller's real uid and gid (kernel/ptrace.c,
 * __ptrace_may_access) and its permitted capabilities (security/commoncap.c,
 * cap_ptrace_access_check). The effective uid counts too: the owner of a
 * user namespace holds every capability in it (security/commoncap.c,
 * cap_capable compares the namespace's owner with the caller's euid), so an
 * effective uid 0 would pass for any process in a namespace root made (a
 * container, a service with PrivateUsers=). The helper takes the client's
 * uid and gid as real and effective ids and keeps saved uid 0: the client
 * cannot ptrace it or read its copy of the daemon's memory (its uids are not
 * all the client's, and the euid change made it not dumpable).
 * Raw system calls only: the daemon has threads, the child one (fork(2)). */
static void helper_run(const struct trace_who *w, int pidfd, int out)
{
    struct helper_answer a = {STEP_ASKED, 0};
    /* w->groups as they are: a gid_t is 32 bits (endpoint_peer_groups). */
    if (syscall(SYS_setgroups, (size_t)w->ngroups, (const gid_t *)w->groups) != 0)
        a.step = STEP_GROUPS;
    else if (syscall(SYS_setresgid, (gid_t)w->gid, (gid_t)w->gid, (gid_t)-1) != 0)
        a.step = STEP_GID;
    else if (syscall(SYS_setresuid, (uid_t)w->uid, (uid_t)w->uid, (uid_t)-1) != 0)
        a.step = STEP_UID;
    else if (caps_drop() != 0)
        a.step = STEP_CAPS;
    if (a.step != STEP_ASKED) {
        a.err = errno;
    } else {
        long fd = syscall(SYS_pidfd_getfd, pidfd, FD_NEVER, 0);
        a.err = fd < 0 ? errno : 0;
        if (fd >= 0)
            close((int)fd);
    }
    ssize_t n = write(out, &a, sizeof(a));
    _exit(n == (ssize_t)sizeof(a) ? 0 : 1);
}

/* The helper's answer on in, waiting up to ms: 0 with it, 1 not yet, -1
 * never (the pipe closed without one). */
static int answer_read(int in, struct helper_answer *a, int ms)
{
    struct pollfd p = {.fd = in, .events = POLLIN};
    int ready;
    do
        ready = poll(&p, 1, ms);
    while (ready < 0 && errno == EINTR);
    if (ready == 0)
        return 1;
    return ready == 1 && read(in, a, sizeof(*a)) == (ssize_t)sizeof(*a) ? 0 : -1;
}

/* 1 once the helper has stopped or exited (left for waitpid to reap). */
static int helper_halted(pid_t child)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)child, &si, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) != 0)
        return errno != EINTR;
    return si.si_pid == child;
}

/* Wait for the helper's answer (at most HELPER_TIMEOUT_MS) and reap it. 0
 * with the answer; -1 without, with errno EINTR (it stopped or died before
 * answering) or ETIMEDOUT. */
static int helper_wait(pid_t child, int in, struct helper_answer *a)
{
    uint64_t end = uv_hrtime() + (uint64_t)HELPER_TIMEOUT_MS * 1000000;
    int rc = 1, e = ETIMEDOUT;
    while (rc == 1 && uv_hrtime() < end) {
        rc = answer_read(in, a, HELPER_SLICE_MS);
        if (rc == 1 && helper_halted(child)) {
            /* It may have answered just before it exited or was stopped. */
            rc = answer_read(in, a, 0) == 0 ? 0 : -1;
            e = EINTR;
        }
    }
    /* Killed even after its answer: stopped between its write and its exit,
     * it would hold waitpid (and the loop) for as long as the client likes.
     * Not yet reaped, its PID still names it. */
    kill(child, SIGKILL);
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0)
        return 0;
    errno = rc == 1 ? ETIMEDOUT : e;
    return -1;
}

/* Run the helper for who on pidfd: 0 with its answer, or -1 with errno
 * (no pipe, no fork, no answer). Every signal stays blocked in the child
 * (it is born with the mask set here): the client can signal it (its real
 * uid is the client's) and the daemon's handlers must not run there. */
static int helper_ask(const struct trace_who *w, int pidfd, struct helper_answer *a)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t child = fork();
    if (child == 0) {
        close(p[0]);
        helper_run(w, pidfd, p[1]);
    }
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(p[1]);
    int rc = child < 0 ? -1 : helper_wait(child, p[0], a);
    if (child > 0 && rc != 0)
        e = errno;
    close(p[0]);
    errno = e;
    return rc;
}

static const char *const step_names[] = {"", "setgroups", "setresgid", "setresuid", "capset"};

/* Ask the kernel whether who may trace the process pidfd names. */
static int access_ask(const struct trace_who *w, int pidfd, uint64_t pid, char *err, size_t errsz)
{
    struct helper_answer a;
    if (helper_ask(w, pidfd, &a) != 0) {
        if (errno == EINTR) {
            snprintf(err, errsz,
                     "cannot check whether uid %u may trace process %llu: the checking helper was "
                     "stopped or killed before it answered (uid %u may signal it): refused",
                     (unsigned)w->uid, (unsigned long long)pid, (unsigned)w->uid);
            return HT_EPERM;
        }
        snprintf(err, errsz,
                 "cannot check whether uid %u may trace process %llu (the checking helper: %s): "
                 "refused",
                 (unsigned)w->uid, (unsigned long long)pid, strerror(errno));
        return HT_EPERM;
    }
    if (a.step != STEP_ASKED) {
        snprintf(err, errsz,
                 "cannot take uid %u's credentials to check its access to process %llu (%s: "
                 "%s): refused",
                 (unsigned)w->uid, (unsigned long long)pid, step_names[a.step], strerror(a.err));
        return HT_EPERM;
    }
    if (a.err == 0 || a.err == EBADF)
        return 0;
    if (a.err == ESRCH) {
        snprintf(err, errsz, "process %llu exited", (unsigned long long)pid);
        return UV_ESRCH;
    }
    if (a.err == EPERM || a.err == EACCES) {
        char yama[200];
        snprintf(err, errsz,
                 "uid %u may not trace process %llu: the kernel would not let uid %u ptrace it "
                 "(another user's process, a setuid or setgid program, or one that is not "
                 "dumpable%s); only root traces it",
                 (unsigned)w->uid, (unsigned long long)pid, (unsigned)w->uid,
                 yama_note(yama, sizeof(yama)));
        return HT_EPERM;
    }
    snprintf(err, errsz, "cannot check whether uid %u may trace process %llu (%s): refused",
             (unsigned)w->uid, (unsigned long long)pid, strerror(a.err));
    return HT_EPERM;
}

/* The process (thread group) of thread tid from /proc/TID/status, or 0. */
static uint64_t thread_group_of(uint64_t tid)
{
    char path[64], line[256];
    unsigned long long tgid = 0;
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "Tgid: %llu", &tgid) == 1;
    fclose(f);
    return found ? tgid : 0;
}

/* pidfd_open refused pid (errno e): say why in the client's terms. */
static int open_failed(uint64_t pid, int e, char *err, size_t errsz)
{
    /* pidfd_open of a thread that is not its group's leader, without
     * PIDFD_THREAD: EINVAL (pidfd_open(2)), ENOENT on newer kernels (6.18
     * here; kernel/pid.c). */
    uint64_t tgid = e == EINVAL || e == ENOENT ? thread_group_of(pid) : 0;
    if (tgid && tgid != pid) {
        snprintf(err, errsz,
                 "%llu is thread %llu of process %llu, not a process: start --pid %llu traces "
                 "the process (all of its threads)",
                 (unsigned long long)pid, (unsigned long long)pid, (unsigned long long)tgid,
                 (unsigned long long)tgid);
        return HT_EBADARG;
    }
    if (e == ESRCH) {
        snprintf(err, errsz, "no process %llu", (unsigned long long)pid);
        return UV_ESRCH;
    }
    snprintf(err, errsz, "cannot open process %llu (pidfd_open): %s", (unsigned long long)pid,
             strerror(e));
    return uv_translate_sys_error(e);
}

/* 1 once the process a pidfd names has exited: it then polls readable
 * (pidfd_open(2)), its number free for reuse once it is reaped. */
static int pidfd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

/* The check proper (trace_access_open, trace_access_confirm). */
static int access_check(const struct trace_who *who, uint64_t pid, int handle, char *err,
                        size_t errsz)
{
    if (who->uid != 0) {
        if (who->ngroups > TRACE_GROUPS_MAX) {
            snprintf(err, errsz, "uid %u has more than %u groups: refused", (unsigned)who->uid,
                     TRACE_GROUPS_MAX);
            return HT_EPERM;
        }
        int rc = access_ask(who, handle, pid, err, errsz);
        if (rc != 0)
            return rc;
    }
    /* Alive after the check: the number still names the process checked
     * (a PID is reused only once its process is reaped). */
    if (pidfd_exited(handle)) {
        snprintf(err, errsz, "process %llu exited", (unsigned long long)pid);
        return UV_ESRCH;
    }
    return 0;
}

int trace_access_open(const struct trace_who *who, uint64_t pid, int *handle, char *err,
                      size_t errsz)
{
    *handle = -1;
    if (pid == 0 || pid > 0x7fffffff) {
        snprintf(err, errsz, "invalid PID %llu", (unsigned long long)pid);
        return HT_EBADARG;
    }
    /* The pidfd first: the check below and the attach concern the process
     * it names, whatever becomes of the number. */
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0)
        return open_failed(pid, errno, err, errsz);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    int rc = access_check(who, pid, fd, err, errsz);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *handle = fd;
    return 0;
}

/* Root may trace any process: nothing to confirm (a target that exited
 * right after the attach keeps its session, which ends with the exit). */
int trace_access_confirm(const struct trace_who *who, uint64_t pid, int handle, char *err,
                         size_t errsz)
{
    return who->uid == 0 ? 0 : access_check(who, pid, handle, err, errsz);
}

void trace_access_close(int handle)
{
    if (handle >= 0)
        close(handle);
}

#else /* not Linux: root only */

int trace_access_open(const struct trace_who *who, uint64_t pid, int *handle, char *err,
                      size_t errsz)
{
    *handle = -1;
    if (who->uid == 0)
        return 0;
    snprintf(err, errsz, "only root may trace a process (%llu) on this platform",
             (unsigned long long)pid);
    return HT_EPERM;
}

int trace_access_confirm(const struct trace_who *who, uint64_t pid, int handle, char *err,
                         size_t errsz)
{
    (void)handle;
    return trace_access_open(who, pid, &handle, err, errsz);
}

void trace_access_close(int handle)
{
    (void)handle;
}

#endif
