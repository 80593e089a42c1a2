/* inject-linux.c's parts (not a service header: sys/inject.h is). */
#ifndef INJECT_INT_H
#define INJECT_INT_H

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

#define CALL_TIMEOUT_MS 10000 /* dlopen of the agent and its libunwind */
#define ENTRY_TIMEOUT_MS 500  /* the loader's work up to the entry point */
#define EXEC_TIMEOUT_MS 1000  /* an answered execve to its end (the gate) */
#define SAFE_TRIES 50         /* stops per thread looking for a safe point */
#define XSTATE_MAX 16384      /* NT_X86_XSTATE, AMX included */
#define UNSAFE_MAX 64
#define THREADS_TRIED 16 /* threads tried for a safe point: the main one, then others */

/* What the check found, for the injection. */
struct target {
    uint64_t libc_bias;
    uint64_t fn_errno, fn_dlopen, fn_dlsym, fn_dlerror;
    uint64_t unsafe[UNSAFE_MAX][2];
    unsigned nunsafe;
    int seccomp; /* filters to run before the calls */
};

/* A thread of the target, ptrace-stopped by us. */
struct thread {
    pid_t tid;
    struct user_regs_struct regs;
    unsigned char xstate[XSTATE_MAX];
    struct iovec xiov;
    int mem; /* /proc/PID/mem, read-write */
};

/* inject-check-linux.c */
const char *inj_base_name(const char *p);
int inj_exe_check(uint64_t pid, char *err, size_t errsz);
int inj_lib_visible(const struct inject_req *r, char *err, size_t errsz);
int inj_status_check(uint64_t pid, int *filtered, char *err, size_t errsz);
int inj_target_check(const struct inject_req *r, struct target *t, char *err, size_t errsz);

/* inject-ptrace-linux.c */
int inj_calls_make(struct thread *th, const struct target *t, const struct inject_req *r, char *err,
                   size_t errsz);
void inj_eintr_undo(struct user_regs_struct *r);
uint64_t inj_now_ms(void);
int inj_regs_restore(struct thread *th);
int inj_regs_save(struct thread *th);
int inj_stop_wait(pid_t tid, int *status, unsigned timeout_ms);
int inj_thread_interrupt(pid_t tid);
int inj_thread_pick(struct thread *th, const struct target *t, uint64_t pid);
void inj_thread_release(pid_t tid);

/* Thread tid of pid, ptrace-stopped by us: 0 if every seccomp filter it
 * runs under allows each call loading the agent makes; else HT_EPERM with
 * the call and the filter's verdict in err. */
int inject_seccomp_check(uint64_t pid, pid_t tid, char *err, size_t errsz);

#endif
