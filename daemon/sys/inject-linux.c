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
#include "inject.h"
#include "inject-int.h"

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

#define CALL_TIMEOUT_MS 10000 /* dlopen of the agent and its libunwind */
#define ENTRY_TIMEOUT_MS 500  /* the loader's work up to the entry point */
#define EXEC_TIMEOUT_MS 1000  /* an answered execve to its end (the gate) */
#define SAFE_TRIES 50         /* stops per thread looking for a safe point */
#define XSTATE_MAX 16384      /* NT_X86_XSTATE, AMX included */
#define UNSAFE_MAX 64

/* What the check found, for the injection. */
struct target {
    uint64_t libc_bias;
    uint64_t fn_errno, fn_dlopen, fn_dlsym, fn_dlerror;
    uint64_t unsafe[UNSAFE_MAX][2];
    unsigned nunsafe;
    int seccomp; /* filters to run before the calls */
};

/* Symbol values of a file's .dynsym by name (0: absent or undefined). */
static int dynsym_find(int fd, const char *const *names, uint64_t *vals, unsigned n)
{
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e)
        return -1;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || !s.st_value)
                continue;
            const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
            for (unsigned k = 0; nm && k < n; k++)
                if (!vals[k] && strcmp(nm, names[k]) == 0)
                    vals[k] = s.st_value;
        }
    }
    elf_end(e);
    return 0;
}

/* The executable: 64-bit x86-64, dynamically linked, and not defining
 * malloc itself (its own calls would then reach it through no slot). */
static int exe_check(uint64_t pid, char *err, size_t errsz)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/exe", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errsz, "cannot read process %llu's executable: %s", (unsigned long long)pid,
                 strerror(errno));
        return errno == ENOENT ? UV_ESRCH : HT_EPERM;
    }
    unsigned char id[EI_NIDENT];
    int rc = 0;
    if (pread(fd, id, sizeof(id), 0) != (ssize_t)sizeof(id) || memcmp(id, ELFMAG, SELFMAG) != 0) {
        snprintf(err, errsz, "process %llu's executable is not ELF", (unsigned long long)pid);
        rc = HT_ENOTSUP;
    } else if (id[EI_CLASS] != ELFCLASS64) {
        snprintf(err, errsz,
                 "process %llu is a 32-bit program: the agent attaches to 64-bit x86-64 "
                 "programs only (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    elf_version(EV_CURRENT);
    Elf *e = rc ? NULL : elf_begin(fd, ELF_C_READ, NULL);
    GElf_Ehdr eh;
    if (!rc && (!e || !gelf_getehdr(e, &eh) || eh.e_machine != EM_X86_64)) {
        snprintf(err, errsz,
                 "process %llu is not an x86-64 program: the agent attaches to "
                 "x86-64 programs only",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    int interp = 0;
    size_t nph = 0;
    if (!rc && elf_getphdrnum(e, &nph) == 0)
        for (size_t i = 0; i < nph; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_INTERP)
                interp = 1;
        }
    if (e)
        elf_end(e);
    if (!rc && !interp) {
        snprintf(err, errsz,
                 "process %llu is statically linked: no dynamic loader to load the agent and "
                 "no PLT slot to redirect (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    static const char *const mal[] = {"malloc"};
    uint64_t v = 0;
    if (!rc && dynsym_find(fd, mal, &v, 1) == 0 && v) {
        snprintf(err, errsz,
                 "process %llu's allocator is linked statically into its executable (it "
                 "defines malloc): its own calls go through no PLT slot the agent could "
                 "redirect (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    close(fd);
    return rc;
}

/* /proc/PID/status: another tracer, a seccomp filter. */
static int status_check(uint64_t pid, int *filtered, char *err, size_t errsz)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errsz, "no process %llu", (unsigned long long)pid);
        return UV_ESRCH;
    }
    long tracer = 0, seccomp = 0;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "TracerPid: %ld", &tracer);
        sscanf(line, "Seccomp: %ld", &seccomp);
    }
    fclose(f);
    /* Ourselves: a process inject_hold stopped (start --exe). */
    if (tracer && tracer != (long)getpid() && tracer != (long)gettid()) {
        snprintf(err, errsz,
                 "process %llu is already traced by process %ld (a debugger or strace): a "
                 "process has one tracer at a time (ptrace(2)); the agent cannot be loaded",
                 (unsigned long long)pid, tracer);
        return UV_EBUSY;
    }
    /* Strict mode allows none of the calls loading the agent makes; a
     * filter is read and run once a thread is stopped (inject-seccomp-linux.c). */
    if (seccomp == 1) {
        snprintf(err, errsz,
                 "process %llu runs under seccomp strict mode: none of the calls loading the "
                 "agent makes is allowed (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        return HT_EPERM;
    }
    *filtered = seccomp == 2;
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Code a stopped thread must not be in: it may hold the loader's or the
 * allocator's lock. */
static int unsafe_module(const char *path)
{
    const char *b = base_name(path);
    return !strncmp(b, "libc.so", 7) || !strncmp(b, "ld-linux", 8) || !strncmp(b, "libgcc_s", 8) ||
           !strncmp(b, "libunwind", 9) || strstr(b, "malloc") ||
           !strncmp(b, "libheaptrace-agent", 18);
}

static int libc_of(uint64_t pid, const struct procmaps_module *mods, size_t n, struct target *t,
                   char *err, size_t errsz)
{
    const struct procmaps_module *libc = NULL;
    for (size_t i = 0; i < n; i++) {
        if (unsafe_module(mods[i].path) && t->nunsafe < UNSAFE_MAX) {
            t->unsafe[t->nunsafe][0] = mods[i].start;
            t->unsafe[t->nunsafe++][1] = mods[i].end;
        }
        if (!strcmp(base_name(mods[i].path), "libc.so.6"))
            libc = &mods[i];
    }
    if (!libc) {
        snprintf(err, errsz,
                 "process %llu maps no glibc libc.so.6 (another C library, or none): there is "
                 "no dlopen the agent knows how to call",
                 (unsigned long long)pid);
        return HT_ENOTSUP;
    }
    int fd = procmaps_open_module(pid, libc);
    static const char *const names[] = {"__errno_location", "dlopen", "dlsym", "dlerror"};
    uint64_t v[4] = {0, 0, 0, 0};
    int rc = fd < 0 ? fd : dynsym_find(fd, names, v, 4);
    if (fd >= 0)
        close(fd);
    if (rc != 0 || !v[0] || !v[1] || !v[2] || !v[3]) {
        snprintf(err, errsz,
                 "process %llu's libc (%s) has no dlopen, dlsym, dlerror or __errno_location in "
                 "its dynamic symbols (glibc before 2.34 keeps dlopen in libdl): the agent "
                 "cannot be loaded",
                 (unsigned long long)pid, libc->path);
        return HT_ENOTSUP;
    }
    t->libc_bias = libc->bias;
    t->fn_errno = libc->bias + v[0];
    t->fn_dlopen = libc->bias + v[1];
    t->fn_dlsym = libc->bias + v[2];
    t->fn_dlerror = libc->bias + v[3];
    return 0;
}

/* The agent must be the same file in the target's mount namespace. */
static int lib_visible(const struct inject_req *r, char *err, size_t errsz)
{
    char path[4200];
    struct stat a, b;
    snprintf(path, sizeof(path), "/proc/%llu/root%s", (unsigned long long)r->pid, r->lib);
    if (stat(r->lib, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
        snprintf(err, errsz,
                 "the agent library %s is not the same file in process %llu's mount namespace "
                 "(a container): it cannot load it",
                 r->lib, (unsigned long long)r->pid);
        return HT_ENOTSUP;
    }
    return 0;
}

static int target_check(const struct inject_req *r, struct target *t, char *err, size_t errsz)
{
    memset(t, 0, sizeof(*t));
    int rc = status_check(r->pid, &t->seccomp, err, errsz);
    if (!rc)
        rc = exe_check(r->pid, err, errsz);
    if (!rc)
        rc = lib_visible(r, err, errsz);
    if (rc)
        return rc;
    struct procmaps_module *mods = NULL;
    size_t n = 0;
    rc = procmaps_modules(r->pid, &mods, &n);
    if (rc != 0) {
        snprintf(err, errsz, "cannot read process %llu's modules: %s", (unsigned long long)r->pid,
                 uv_strerror(rc));
        return rc;
    }
    rc = libc_of(r->pid, mods, n, t, err, errsz);
    ht_free(mods);
    return rc;
}

int inject_check(const struct inject_req *r, char *err, size_t errsz)
{
    struct target t;
    return target_check(r, &t, err, errsz);
}

/* ---- the stopped thread ---- */

struct thread {
    pid_t tid;
    struct user_regs_struct regs;
    unsigned char xstate[XSTATE_MAX];
    struct iovec xiov;
    int mem; /* /proc/PID/mem, read-write */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next stop of tid within timeout_ms: 0 with *status, or an error. */
static int stop_wait(pid_t tid, int *status, unsigned timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    for (;;) {
        pid_t w = waitpid(tid, status, __WALL | WNOHANG);
        if (w == tid)
            return WIFSTOPPED(*status) ? 0 : UV_ESRCH;
        if (w < 0 && errno != EINTR)
            return UV_ESRCH;
        if (now_ms() > end)
            return UV_ETIMEDOUT;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* Stop tid with PTRACE_INTERRUPT; a signal arriving first is delivered
 * (PTRACE_CONT with it) and the interrupt's stop waited for. */
static int thread_interrupt(pid_t tid)
{
    if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0)
        return -errno;
    for (int i = 0; i < 64; i++) {
        int st;
        int rc = stop_wait(tid, &st, 2000);
        if (rc)
            return rc;
        if ((st >> 16) == PTRACE_EVENT_STOP)
            return 0;
        if (ptrace(PTRACE_CONT, tid, 0, (void *)(uintptr_t)WSTOPSIG(st)) != 0)
            return -errno;
    }
    return UV_ETIMEDOUT;
}

static int regs_save(struct thread *th)
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
static int regs_restore(struct thread *th)
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

static void eintr_undo(struct user_regs_struct *r)
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
    uint64_t end = now_ms() + CALL_TIMEOUT_MS;
    for (;;) {
        int st, rc = stop_wait(th->tid, &st, (unsigned)(end > now_ms() ? end - now_ms() : 1));
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
static int calls_make(struct thread *th, const struct target *t, const struct inject_req *r,
                      char *err, size_t errsz)
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
static void thread_release(pid_t tid)
{
    int st;
    if (ptrace(PTRACE_DETACH, tid, 0, 0) == 0)
        return;
    ptrace(PTRACE_INTERRUPT, tid, 0, 0);
    stop_wait(tid, &st, 1000);
    ptrace(PTRACE_DETACH, tid, 0, 0);
}

static int thread_take(struct thread *th, const struct target *t)
{
    if (ptrace(PTRACE_SEIZE, th->tid, 0, 0) != 0)
        return -errno;
    for (int i = 0; i < SAFE_TRIES; i++) {
        int rc = thread_interrupt(th->tid);
        if (rc == 0)
            rc = regs_save(th);
        if (rc) {
            thread_release(th->tid);
            return rc;
        }
        if (safe_point(t, &th->regs))
            return 0;
        if (ptrace(PTRACE_CONT, th->tid, 0, 0) != 0) {
            rc = -errno;
            thread_release(th->tid);
            return rc;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    thread_release(th->tid);
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
#define THREADS_TRIED 16
static int thread_pick(struct thread *th, const struct target *t, uint64_t pid)
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
        if (!strncmp(base_name(mods[i].path), "ld-linux", 8) && ip >= mods[i].start &&
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
    uint64_t end = now_ms() + ENTRY_TIMEOUT_MS;
    while (rc == 0) {
        int st;
        rc = stop_wait(th->tid, &st, (unsigned)(end > now_ms() ? end - now_ms() : 1));
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
        stop_wait(th->tid, &st, 1000);
        rc = 1;
    }
    if (pwrite(th->mem, &orig, 1, (off_t)entry) != 1 && rc == 0)
        rc = UV_EFAULT;
    if (rc == 1)
        return 1;
    if (rc == 0 && (rc = regs_save(th)) == 0) {
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
    int rc = thread_interrupt((pid_t)pid);
    if (rc) {
        thread_release((pid_t)pid);
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
    return 0;
}

/* After the answer: the exec's stop waited for (signals that arrive first
 * delivered as they came, a job-control stop kept), then held for the
 * inject_agent (at_entry) that follows. An exec that failed (execve
 * returned an error, the old program runs on) or a stop that never comes is
 * let go: UV_ETIMEDOUT or UV_ESRCH. */
int inject_exec_wait(uint64_t pid)
{
    pid_t tid = (pid_t)pid;
    uint64_t end = now_ms() + EXEC_TIMEOUT_MS;
    unsigned slot = 0;
    while (slot < HELD_MAX && held[slot])
        slot++;
    for (;;) {
        int st, rc = slot == HELD_MAX ? UV_EBUSY : 0;
        if (!rc)
            rc = stop_wait(tid, &st, (unsigned)(end > now_ms() ? end - now_ms() : 1));
        if (rc) {
            if (rc != UV_ESRCH)
                thread_release(tid);
            return rc;
        }
        if ((st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) {
            held[slot] = pid;
            return 0;
        }
        int ev = st >> 16;
        long r = ev == PTRACE_EVENT_STOP && WSTOPSIG(st) != SIGTRAP
                     ? ptrace(PTRACE_LISTEN, tid, 0, 0) /* a group stop: stays stopped */
                     : ptrace(PTRACE_CONT, tid, 0, (void *)(uintptr_t)(ev ? 0 : WSTOPSIG(st)));
        if (r != 0) {
            int e = errno;
            thread_release(tid);
            return -e;
        }
    }
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
            thread_release(th->tid);
        snprintf(err, errsz, "cannot stop process %llu at its start: %s",
                 (unsigned long long)r->pid, entry ? strerror(e) : "no AT_ENTRY");
        return entry ? -e : UV_EINVAL;
    }
    int rc = was_held ? 0 : thread_interrupt(th->tid);
    if (rc == 0)
        rc = regs_save(th);
    int loader = rc == 0 ? in_loader(r->pid, th->regs.rip) : -1;
    if (loader == 0) { /* let go as it was, an EINTR of ours undone */
        eintr_undo(&th->regs);
        ptrace(PTRACE_SETREGS, th->tid, 0, &th->regs);
    }
    if (rc == 0 && loader == 1)
        rc = entry_run(th, entry);
    *late = loader == 0 || rc == 1;
    if (rc == 1)
        rc = 0;
    if (rc || *late || loader < 0) {
        thread_release(th->tid);
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
    eintr_undo(&th->regs);
    int rc = t->seccomp ? inject_seccomp_check(r->pid, th->tid, err, errsz) : 0;
    if (rc == 0)
        rc = calls_make(th, t, r, err, errsz);
    int rrc = regs_restore(th);
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
    int rc = status_check(r->pid, &t.seccomp, err, errsz);
    if (!rc)
        rc = exe_check(r->pid, err, errsz);
    if (!rc)
        rc = lib_visible(r, err, errsz);
    int late = 0;
    if (!rc)
        rc = entry_take(r, th, &late, err, errsz);
    if (rc || late)
        return rc ? rc : 1;
    rc = target_check(r, &t, err, errsz);
    if (rc) {
        regs_restore(th);
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
    rc = target_check(r, &t, err, errsz);
    if (rc)
        return rc;
    struct thread *th = ht_calloc(1, sizeof(*th));
    if (!th)
        return UV_ENOMEM;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/mem", (unsigned long long)r->pid);
    th->mem = open(path, O_RDWR | O_CLOEXEC);
    rc = th->mem < 0 ? -errno : thread_pick(th, &t, r->pid);
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
