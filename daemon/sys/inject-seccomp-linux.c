/*
 * Would the target's seccomp filters let the agent load? Each filter is
 * read from the stopped thread (PTRACE_SECCOMP_GET_FILTER: ptrace(2),
 * needs CAP_SYS_ADMIN) and run, as the kernel would, on every system call
 * dlopen and the agent's attach make. A classic BPF program
 * (Documentation/networking/filter.rst) over struct seccomp_data
 * (include/uapi/linux/seccomp.h); the strictest result of all filters
 * wins (Documentation/userspace-api/seccomp_filter.rst, "Return values").
 * A path that reads a call's instruction pointer or arguments is not
 * guessed at: unknown, refused.
 */
#define _GNU_SOURCE
#include "inject-int.h"

#include "ht-error.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#define FILTER_MAX 4096 /* BPF_MAXINSNS */
#define FILTERS_MAX 64

/* What loading the agent calls: dlopen (open, map, protect, close, its
 * locks), the attach (memfd, socket, connect, sendmsg, a thread), the
 * GOT writes (mprotect), the unwinder's first use (mincore, msync). */
static const struct {
    long nr;
    const char *name;
} needed[] = {
    {SYS_openat, "openat"},
    {SYS_read, "read"},
    {SYS_pread64, "pread64"},
    {SYS_newfstatat, "newfstatat"},
    {SYS_fstat, "fstat"},
    {SYS_mmap, "mmap"},
    {SYS_mprotect, "mprotect"},
    {SYS_munmap, "munmap"},
    {SYS_close, "close"},
    {SYS_brk, "brk"},
    {SYS_futex, "futex"},
    {SYS_memfd_create, "memfd_create"},
    {SYS_ftruncate, "ftruncate"},
    {SYS_fcntl, "fcntl"},
    {SYS_socket, "socket"},
    {SYS_connect, "connect"},
    {SYS_sendmsg, "sendmsg"},
    {SYS_recvfrom, "recvfrom"},
    {SYS_clone3, "clone3"},
    {SYS_clone, "clone"},
    {SYS_rt_sigprocmask, "rt_sigprocmask"},
    {SYS_set_robust_list, "set_robust_list"},
    {SYS_rseq, "rseq"},
    {SYS_madvise, "madvise"},
    {SYS_mincore, "mincore"},
    {SYS_msync, "msync"},
    {SYS_getpid, "getpid"},
    {SYS_gettid, "gettid"},
    {SYS_exit, "exit"},
};

#define VERDICT_UNKNOWN 0xffffffffu

/* Run one filter on (nr, x86-64): its return value, or VERDICT_UNKNOWN.
 * Long: a classic-BPF interpreter, one switch over the instruction classes
 * sharing the machine's registers; split, the state would be passed around. */
static uint32_t filter_run(const struct sock_filter *f, unsigned n, long nr)
{
    uint32_t A = 0, X = 0, M[BPF_MEMWORDS];
    memset(M, 0, sizeof(M));
    for (unsigned pc = 0, steps = 0; pc < n && steps < 65536; pc++, steps++) {
        const struct sock_filter *i = &f[pc];
        uint32_t k = i->k, src = BPF_SRC(i->code) == BPF_X ? X : k;
        switch (BPF_CLASS(i->code)) {
        case BPF_LD:
            if (BPF_MODE(i->code) == BPF_ABS && BPF_SIZE(i->code) == BPF_W) {
                if (k == offsetof(struct seccomp_data, nr))
                    A = (uint32_t)nr;
                else if (k == offsetof(struct seccomp_data, arch))
                    A = AUDIT_ARCH_X86_64;
                else
                    return VERDICT_UNKNOWN; /* the ip or an argument */
            } else if (BPF_MODE(i->code) == BPF_IMM) {
                A = k;
            } else if (BPF_MODE(i->code) == BPF_MEM && k < BPF_MEMWORDS) {
                A = M[k];
            } else if (BPF_MODE(i->code) == BPF_LEN) {
                A = sizeof(struct seccomp_data);
            } else {
                return VERDICT_UNKNOWN;
            }
            break;
        case BPF_LDX:
            if (BPF_MODE(i->code) == BPF_IMM)
                X = k;
            else if (BPF_MODE(i->code) == BPF_MEM && k < BPF_MEMWORDS)
                X = M[k];
            else if (BPF_MODE(i->code) == BPF_LEN)
                X = sizeof(struct seccomp_data);
            else
                return VERDICT_UNKNOWN;
            break;
        case BPF_ST:
        case BPF_STX:
            if (k >= BPF_MEMWORDS)
                return VERDICT_UNKNOWN;
            M[k] = BPF_CLASS(i->code) == BPF_ST ? A : X;
            break;
        case BPF_ALU:
            switch (BPF_OP(i->code)) {
            case BPF_ADD:
                A += src;
                break;
            case BPF_SUB:
                A -= src;
                break;
            case BPF_MUL:
                A *= src;
                break;
            case BPF_DIV:
                if (!src)
                    return VERDICT_UNKNOWN;
                A /= src;
                break;
            case BPF_MOD:
                if (!src)
                    return VERDICT_UNKNOWN;
                A %= src;
                break;
            case BPF_OR:
                A |= src;
                break;
            case BPF_AND:
                A &= src;
                break;
            case BPF_XOR:
                A ^= src;
                break;
            case BPF_LSH:
                A = src < 32 ? A << src : 0;
                break;
            case BPF_RSH:
                A = src < 32 ? A >> src : 0;
                break;
            case BPF_NEG:
                A = -A;
                break;
            default:
                return VERDICT_UNKNOWN;
            }
            break;
        case BPF_JMP: {
            int t;
            switch (BPF_OP(i->code)) {
            case BPF_JA:
                pc += k;
                continue;
            case BPF_JEQ:
                t = A == src;
                break;
            case BPF_JGT:
                t = A > src;
                break;
            case BPF_JGE:
                t = A >= src;
                break;
            case BPF_JSET:
                t = (A & src) != 0;
                break;
            default:
                return VERDICT_UNKNOWN;
            }
            pc += t ? i->jt : i->jf;
            break;
        }
        case BPF_RET:
            return BPF_RVAL(i->code) == BPF_A ? A : k;
        case BPF_MISC:
            if (BPF_MISCOP(i->code) == BPF_TAX)
                X = A;
            else
                A = X;
            break;
        default:
            return VERDICT_UNKNOWN;
        }
    }
    return VERDICT_UNKNOWN;
}

/* Actions lets the call run (ALLOW, LOG). */
static int verdict_allows(uint32_t v)
{
    uint32_t act = v & SECCOMP_RET_ACTION_FULL;
    return act == SECCOMP_RET_ALLOW || act == SECCOMP_RET_LOG;
}

static const char *verdict_name(uint32_t v)
{
    if (v == VERDICT_UNKNOWN)
        return "decided on its arguments (not guessed at)";
    switch (v & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS:
        return "killed (KILL_PROCESS)";
    case SECCOMP_RET_KILL_THREAD:
        return "killed (KILL_THREAD)";
    case SECCOMP_RET_TRAP:
        return "trapped (SIGSYS)";
    case SECCOMP_RET_ERRNO:
        return "refused (ERRNO)";
    case SECCOMP_RET_USER_NOTIF:
        return "sent to a supervisor (USER_NOTIF)";
    case SECCOMP_RET_TRACE:
        return "sent to a tracer (TRACE)";
    default:
        return "not allowed";
    }
}

int inject_seccomp_check(uint64_t pid, pid_t tid, char *err, size_t errsz)
{
    static struct sock_filter f[FILTER_MAX];
    for (long idx = 0; idx < FILTERS_MAX; idx++) {
        long n = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)idx, NULL);
        if (n < 0 && errno == ENOENT)
            return 0; /* past the last filter */
        if (n <= 0 || n > FILTER_MAX ||
            ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)idx, f) != n) {
            snprintf(err, errsz,
                     "process %llu runs under seccomp and its filter cannot be read (%s): the "
                     "calls loading the agent could be refused or kill it",
                     (unsigned long long)pid, strerror(n < 0 ? errno : EINVAL));
            return HT_EPERM;
        }
        for (unsigned s = 0; s < sizeof(needed) / sizeof(needed[0]); s++) {
            uint32_t v = filter_run(f, (unsigned)n, needed[s].nr);
            if (v == VERDICT_UNKNOWN || !verdict_allows(v)) {
                snprintf(err, errsz,
                         "process %llu runs under a seccomp filter by which %s would be %s; "
                         "loading the agent needs it: not attached (heaptracectl start --pid N "
                         "--source bpf traces it)",
                         (unsigned long long)pid, needed[s].name, verdict_name(v));
                return HT_EPERM;
            }
        }
    }
    snprintf(err, errsz, "process %llu has more than %d seccomp filters", (unsigned long long)pid,
             FILTERS_MAX);
    return HT_EPERM;
}
