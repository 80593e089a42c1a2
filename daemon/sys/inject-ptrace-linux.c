/*
 * Loading the agent (inject-linux.c): a thread of the target under ptrace:
 * stopped at a safe point, its registers and FPU state saved and put back,
 * calls made on it (dlopen, the agent's attach), let go as it was found.
 */
#define _GNU_SOURCE
#include "inject-int.h"

uint64_t inj_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next stop of tid within timeout_ms: 0 with *status, or an error. */
int inj_stop_wait(pid_t tid, int *status, unsigned timeout_ms)
{
    uint64_t end = inj_now_ms() + timeout_ms;
    for (;;) {
        pid_t w = waitpid(tid, status, __WALL | WNOHANG);
        if (w == tid)
            return WIFSTOPPED(*status) ? 0 : UV_ESRCH;
        if (w < 0 && errno != EINTR)
            return UV_ESRCH;
        if (inj_now_ms() > end)
            return UV_ETIMEDOUT;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* Stop tid with PTRACE_INTERRUPT; a signal arriving first is delivered
 * (PTRACE_CONT with it) and the interrupt's stop waited for. */
int inj_thread_interrupt(pid_t tid)
{
    if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0)
        return -errno;
    for (int i = 0; i < 64; i++) {
        int st;
        int rc = inj_stop_wait(tid, &st, 2000);
        if (rc)
            return rc;
        if ((st >> 16) == PTRACE_EVENT_STOP)
            return 0;
        if (ptrace(PTRACE_CONT, tid, 0, (void *)(uintptr_t)WSTOPSIG(st)) != 0)
            return -errno;
    }
    return UV_ETIMEDOUT;
}

int inj_regs_save(struct thread *th)
{
    if (ptrace(PTRACE_GETREGS, th->tid, 0, &th->regs) != 0)
        return -errno;
    th->xiov.iov_base = th->xstate;
    th->xiov.iov_len = sizeof(th->xstate);
    return ptrace(PTRACE_GETREGSET, th->tid, (void *)NT_X86_XSTATE, &th->xiov) == 0 ? 0 : -errno;
}

/* Registers as they were, orig_rax and rax included: a system call the
 * thread was in (rax -ERESTARTSYS, -ERESTARTNOHAND... with orig_rax its
 * number) is then restarted by the kernel as after any stop
 * (arch/x86/kernel/signal.c, arch_do_signal_or_restart). */
int inj_regs_restore(struct thread *th)
{
    struct iovec x = th->xiov;
    if (ptrace(PTRACE_SETREGSET, th->tid, (void *)NT_X86_XSTATE, &x) != 0)
        return -errno;
    return ptrace(PTRACE_SETREGS, th->tid, 0, &th->regs) == 0 ? 0 : -errno;
}

/* Some calls fail with EINTR when their thread is merely stopped, with no
 * handler run (signal(7), "Interruption of system calls and library
 * functions by stop signals": epoll_wait, semop, sigtimedwait...); our
 * stop must not show. -ERESTARTNOHAND (include/linux/errno.h: 514) instead:
 * the kernel restarts the call when no handler runs, and fails it with
 * EINTR when one does (arch/x86/kernel/signal.c), as for a real signal.
 * A call with a timeout restarts with its whole timeout. */
#define ERESTARTNOHAND_ 514

void inj_eintr_undo(struct user_regs_struct *r)
{
    if ((long long)r->orig_rax >= 0 && (long long)r->rax == -EINTR)
        r->rax = (unsigned long long)-ERESTARTNOHAND_;
}

static int in_ranges(const struct target *t, uint64_t ip)
{
    for (unsigned i = 0; i < t->nunsafe; i++)
        if (ip >= t->unsafe[i][0] && ip < t->unsafe[i][1])
            return 1;
    return 0;
}

static int safe_point(const struct target *t, const struct user_regs_struct *r)
{
    if ((long long)r->orig_rax >= 0) /* in a system call: anything but a lock wait */
        return r->orig_rax != SYS_futex;
    return !in_ranges(t, r->rip);
}

/* Call fn(a0..a3) on the stopped thread and wait for it to return. */
static int remote_call(struct thread *th, uint64_t fn, const uint64_t *args, unsigned nargs,
                       uint64_t sp, uint64_t *ret)
{
    struct user_regs_struct r = th->regs;
    /* The System V x86-64 ABI: arguments in rdi, rsi, rdx, rcx; rsp + 8
     * 16-byte aligned at entry, the return address at [rsp]. */
    uint64_t a[4] = {0, 0, 0, 0};
    if (nargs)
        memcpy(a, args, nargs * sizeof(uint64_t));
    r.rdi = a[0];
    r.rsi = a[1];
    r.rdx = a[2];
    r.rcx = a[3];
    r.rax = 0;
    r.rip = fn;
    r.rsp = (sp & ~(uint64_t)15) - 8;
    r.orig_rax = (unsigned long long)-1; /* not in a system call: nothing to restart */
    uint64_t zero = 0;
    if (pwrite(th->mem, &zero, sizeof(zero), (off_t)r.rsp) != (ssize_t)sizeof(zero))
        return -errno;
    if (ptrace(PTRACE_SETREGS, th->tid, 0, &r) != 0 || ptrace(PTRACE_CONT, th->tid, 0, 0) != 0)
        return -errno;
    uint64_t end = inj_now_ms() + CALL_TIMEOUT_MS;
    for (;;) {
        int st, rc = inj_stop_wait(th->tid, &st,
                                   (unsigned)(end > inj_now_ms() ? end - inj_now_ms() : 1));
        if (rc)
            return rc;
        int sig = WSTOPSIG(st);
        if (sig == SIGSEGV && (st >> 16) == 0) {
            struct user_regs_struct out;
            if (ptrace(PTRACE_GETREGS, th->tid, 0, &out) != 0)
                return -errno;
            if (out.rip == 0) {
                *ret = out.rax;
                return 0;
            }
            return UV_EFAULT; /* a fault inside the call: not delivered, reported */
        }
        /* The program's own signal (a timer's...): delivered now, its
         * handler runs on top of the call as on top of any code. A stop
         * of another kind (group stop, an event) resumes as is. */
        if (ptrace(PTRACE_CONT, th->tid, 0, (void *)(uintptr_t)((st >> 16) ? 0 : sig)) != 0)
            return -errno;
    }
}

/* Strings below the red zone (128 bytes under rsp: the ABI's). */
static uint64_t push_str(struct thread *th, uint64_t *sp, const char *s)
{
    size_t n = strlen(s) + 1;
    *sp = (*sp - n) & ~(uint64_t)15;
    return pwrite(th->mem, s, n, (off_t)*sp) == (ssize_t)n ? *sp : 0;
}

static void remote_string(struct thread *th, uint64_t at, char *out, size_t sz)
{
    out[0] = '\0';
    if (!at || sz == 0)
        return;
    ssize_t n = pread(th->mem, out, sz - 1, (off_t)at);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

static const char *attach_reason(uint64_t rc)
{
    /* agent/attach.c's results. */
    switch (rc) {
    case 1:
        return "the agent in it is attached to another session, or still detaching";
    case 2:
        return "the agent found no malloc in the program's global scope";
    case 3:
        return "the agent could not make its shared memory (memfd_create, mmap)";
    case 4:
        return "the agent could not connect to the daemon";
    case 5:
        return "the agent could not start its thread";
    case 6:
        return "no module has a GOT slot for malloc: the allocator is linked statically";
    default:
        return "an unknown result";
    }
}

/* The calls themselves, on a thread stopped at a safe point. */
int inj_calls_make(struct thread *th, const struct target *t, const struct inject_req *r, char *err,
                   size_t errsz)
{
    uint64_t sp = th->regs.rsp - 128 - 256, ret = 0;
    uint64_t lib = push_str(th, &sp, r->lib), sock = push_str(th, &sp, r->socket);
    uint64_t tok = push_str(th, &sp, r->token), stk = push_str(th, &sp, r->stacks);
    uint64_t ent = push_str(th, &sp, "heaptrace_agent_attach");
    sp -= 64;
    if (!lib || !sock || !tok || !stk || !ent) {
        snprintf(err, errsz, "cannot write to process %llu's stack", (unsigned long long)r->pid);
        return UV_EFAULT;
    }
    uint64_t errno_at = 0;
    int saved_errno = 0, rc = remote_call(th, t->fn_errno, NULL, 0, sp, &errno_at);
    if (rc == 0 && pread(th->mem, &saved_errno, sizeof(int), (off_t)errno_at) != sizeof(int))
        rc = UV_EFAULT;
    uint64_t a[4] = {lib, RTLD_NOW, 0, 0}, handle = 0, fn = 0;
    if (rc == 0)
        rc = remote_call(th, t->fn_dlopen, a, 2, sp, &handle);
    if (rc == 0 && !handle) {
        char why[512];
        uint64_t msg = 0;
        remote_call(th, t->fn_dlerror, NULL, 0, sp, &msg);
        remote_string(th, msg, why, sizeof(why));
        snprintf(err, errsz, "process %llu could not load the agent: %s",
                 (unsigned long long)r->pid, why[0] ? why : "dlopen failed");
        rc = HT_ENOTSUP;
    }
    a[0] = handle;
    a[1] = ent;
    if (rc == 0 && (rc = remote_call(th, t->fn_dlsym, a, 2, sp, &fn)) == 0 && !fn) {
        snprintf(err, errsz, "the agent loaded in process %llu has no heaptrace_agent_attach",
                 (unsigned long long)r->pid);
        rc = HT_ENOTSUP;
    }
    uint64_t b[4] = {sock, tok, stk, r->depth};
    if (rc == 0 && (rc = remote_call(th, fn, b, 4, sp, &ret)) == 0 && (int)ret != 0) {
        snprintf(err, errsz, "attaching to process %llu failed: %s", (unsigned long long)r->pid,
                 attach_reason((uint32_t)ret));
        rc = (uint32_t)ret == 1 ? UV_EBUSY : HT_ENOTSUP;
    }
    if (errno_at)
        (void)!pwrite(th->mem, &saved_errno, sizeof(int), (off_t)errno_at);
    if (rc < 0 && !err[0])
        snprintf(err, errsz, "the call into process %llu failed: %s", (unsigned long long)r->pid,
                 uv_strerror(rc));
    return rc;
}

/* Seize tid and stop it at a safe point: 0 (stopped, registers saved),
 * 1 (no safe point in time: let go), or an error. */
/* Let a seized thread go, stopped or running, untouched. */
void inj_thread_release(pid_t tid)
{
    int st;
    if (ptrace(PTRACE_DETACH, tid, 0, 0) == 0)
        return;
    ptrace(PTRACE_INTERRUPT, tid, 0, 0);
    inj_stop_wait(tid, &st, 1000);
    ptrace(PTRACE_DETACH, tid, 0, 0);
}

static int thread_take(struct thread *th, const struct target *t)
{
    if (ptrace(PTRACE_SEIZE, th->tid, 0, 0) != 0)
        return -errno;
    for (int i = 0; i < SAFE_TRIES; i++) {
        int rc = inj_thread_interrupt(th->tid);
        if (rc == 0)
            rc = inj_regs_save(th);
        if (rc) {
            inj_thread_release(th->tid);
            return rc;
        }
        if (safe_point(t, &th->regs))
            return 0;
        if (ptrace(PTRACE_CONT, th->tid, 0, 0) != 0) {
            rc = -errno;
            inj_thread_release(th->tid);
            return rc;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    inj_thread_release(th->tid);
    return 1;
}

/* A thread the calls may return through: SIGSEGV neither blocked by it
 * nor ignored. The kernel forces a fault's signal through a block or an
 * ignore by resetting the action to default and unblocking it
 * (kernel/signal.c, force_sig_info_to_task): the program would keep
 * that change. Zombie threads (exited, the main one after pthread_exit)
 * run nothing. */
static int thread_usable(uint64_t pid, pid_t tid)
{
    char path[96], line[256];
    snprintf(path, sizeof(path), "/proc/%llu/task/%d/status", (unsigned long long)pid, (int)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    unsigned long long blk = 0, ign = 0;
    char state = '?';
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "State: %c", &state);
        sscanf(line, "SigBlk: %llx", &blk);
        sscanf(line, "SigIgn: %llx", &ign);
    }
    fclose(f);
    unsigned long long segv = 1ull << (SIGSEGV - 1);
    return state != 'Z' && state != 'X' && !(blk & segv) && !(ign & segv);
}

/* The main thread first, then the others (as many as THREADS_TRIED):
 * 0 with th stopped at a safe point, 1 if none was, or an error. */
int inj_thread_pick(struct thread *th, const struct target *t, uint64_t pid)
{
    pid_t tids[THREADS_TRIED];
    unsigned n = 0;
    tids[n++] = (pid_t)pid;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/task", (unsigned long long)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && n < THREADS_TRIED && (de = readdir(d))) {
        long tid = strtol(de->d_name, NULL, 10);
        if (tid > 0 && (uint64_t)tid != pid)
            tids[n++] = (pid_t)tid;
    }
    if (d)
        closedir(d);
    int rc = 1;
    for (unsigned i = 0; i < n && rc == 1; i++) {
        if (!thread_usable(pid, tids[i]))
            continue;
        th->tid = tids[i];
        rc = thread_take(th, t);
        if (rc == UV_ESRCH)
            rc = 1; /* a thread that went away meanwhile: the next */
    }
    return rc;
}
