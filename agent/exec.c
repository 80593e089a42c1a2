/*
 * exec in the traced process itself: the process is what the session
 * traces, whatever program it runs. A wrapper script that execs the real
 * program (pyenv's python3, a service's start script) is the common case.
 *
 * Without --follow the agent takes its variables and itself out of the
 * environment at load, so that children run untraced. An exec by the traced
 * process (not by a fork child: its pid is another) would lose them too, so
 * the exec family is interposed: such an exec gets them back in the
 * environment it passes, the new program loads the agent, which joins the
 * same session from the same pid. With --follow the environment was kept
 * and nothing is added. Nor is anything once the agent stopped recording
 * (the session stopped, the daemon went away).
 *
 * glibc's execvp, execl and the like call its internal execve, which no
 * interposition reaches, so each of them is interposed here.
 *
 * Before the image goes (an exec here, an _exit below, exit in agent.c's
 * destructor) the agent flushes: the daemon takes what was written and
 * names its frames while the program's modules are there to read.
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define VARS_MAX 32
#define VARS_BYTES 8192
#define VAR_PREFIX "HEAPTRACE_AGENT_"

extern char **environ;

static char saved[VARS_BYTES];
static char *vars[VARS_MAX];
static unsigned nvars;
static char agent_path[4096];
static pid_t traced_pid;
static int keep_on_exec;
static int follow_mode; /* run --follow: the environment kept, so every exec carries the agent */

AGENT_HIDDEN void agent_exec_save(const char *self_path, int follow)
{
    size_t used = 0;
    nvars = 0;
    keep_on_exec = 0;
    follow_mode = 0;
    if (!self_path || strlen(self_path) >= sizeof(agent_path))
        return;
    if (follow) {
        strcpy(agent_path, self_path);
        follow_mode = 1;
        return;
    }
    for (char **e = environ; e && *e && nvars < VARS_MAX; e++) {
        size_t n = strlen(*e) + 1;
        if (strncmp(*e, VAR_PREFIX, sizeof(VAR_PREFIX) - 1) != 0 || used + n > sizeof(saved))
            continue;
        memcpy(saved + used, *e, n);
        vars[nvars++] = saved + used;
        used += n;
    }
    strcpy(agent_path, self_path);
    traced_pid = getpid();
    keep_on_exec = 1;
}

/* Does an exec now keep the process traced? */
static int exec_traced(void)
{
    return keep_on_exec && __atomic_load_n(&agent_on, __ATOMIC_RELAXED) && getpid() == traced_pid;
}

static int is_ours(const char *kv)
{
    return strncmp(kv, VAR_PREFIX, sizeof(VAR_PREFIX) - 1) == 0 || strncmp(kv, "LD_PRELOAD=", 11) == 0;
}

/* An environment's memory: arr bytes of pointers, then strs bytes for the
 * strings (*strs_at), mapped (no malloc: the program may exec from
 * anywhere, a vfork child included). NULL if it cannot be had. */
static char **env_map(size_t arr, size_t strs, size_t *len, char **strs_at)
{
    *len = arr + strs;
    void *m = agent_real.mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    *strs_at = (char *)m + arr;
    return m;
}

/* envp with the agent's variables and the agent first in LD_PRELOAD, in
 * memory mapped for it (no malloc: the program may exec from anywhere, a
 * vfork child included). NULL when it cannot be made: the exec goes on with
 * envp, untraced. *len: the mapping's size. */
static char **env_with_agent(char *const envp[], size_t *len)
{
    size_t n = 0, pre = 0;
    const char *old = NULL;
    for (; envp && envp[n]; n++)
        if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0 && envp[n][11])
            old = envp[n] + 11;
    if (old)
        pre = strlen(old) + 1;
    size_t arr = (n + nvars + 2) * sizeof(char *);
    char *pl;
    char **out = env_map(arr, sizeof("LD_PRELOAD=") + strlen(agent_path) + pre + 1, len, &pl);
    if (!out)
        return NULL;
    size_t k = 0;
    strcpy(pl, "LD_PRELOAD=");
    strcat(pl, agent_path);
    if (old) {
        strcat(pl, ":");
        strcat(pl, old);
    }
    out[k++] = pl;
    for (unsigned i = 0; i < nvars; i++)
        out[k++] = vars[i];
    for (size_t i = 0; i < n; i++)
        if (!is_ours(envp[i]))
            out[k++] = envp[i];
    out[k] = NULL;
    return out;
}

/* LD_PRELOAD's value without the agent's path (its entries are separated
 * by ':' or ' ': ld.so(8)), into out (room for the whole value). */
static void preload_without_agent(const char *v, char *out)
{
    size_t alen = strlen(agent_path), o = 0;
    while (*v) {
        size_t n = strcspn(v, ": ");
        if (n && !(n == alen && memcmp(v, agent_path, n) == 0)) {
            if (o)
                out[o++] = ':';
            memcpy(out + o, v, n);
            o += n;
        }
        v += n;
        if (*v)
            v++;
    }
    out[o] = '\0';
}

/* envp without the agent (run --follow, an exec of a program its loader
 * cannot take): its variables out, its path out of LD_PRELOAD (dropped when
 * nothing else is left). Mapped as env_with_agent's; NULL: envp as it is. */
static char **env_without_agent(char *const envp[], size_t *len)
{
    size_t n = 0, pre = 0;
    for (; envp && envp[n]; n++)
        if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0)
            pre += strlen(envp[n]) + 1;
    char *pl;
    char **out = env_map((n + 1) * sizeof(char *), pre + 1, len, &pl);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(envp[i], VAR_PREFIX, sizeof(VAR_PREFIX) - 1) == 0)
            continue;
        if (strncmp(envp[i], "LD_PRELOAD=", 11) != 0) {
            out[k++] = envp[i];
            continue;
        }
        strcpy(pl, "LD_PRELOAD=");
        preload_without_agent(envp[i] + 11, pl + 11);
        if (pl[11]) {
            out[k++] = pl;
            pl += strlen(pl) + 1;
        }
    }
    out[k] = NULL;
    return out;
}

/* Would the program's loader take the agent? Not in a program of another
 * ELF class (a 32-bit one): its loader would say "wrong ELF class" on the
 * program's stderr and go on without it. Unknown (a script, a name looked
 * up on PATH, a file it cannot read): yes. (ELF header: elf.h, e_ident.) */
static int same_class_fd(int fd)
{
    unsigned char id[EI_NIDENT];
    if (pread(fd, id, sizeof(id), 0) != (ssize_t)sizeof(id) || memcmp(id, ELFMAG, SELFMAG) != 0)
        return 1;
    return id[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32);
}

static int same_class_at(int dirfd, const char *path, int flags)
{
    struct stat st;
    if ((flags & AT_EMPTY_PATH) && path && !*path)
        return same_class_fd(dirfd);
    int nofollow = flags & AT_SYMLINK_NOFOLLOW;
    /* Only a regular file is opened (a FIFO's open would block). */
    if (!path || fstatat(dirfd, path, &st, nofollow) != 0 || !S_ISREG(st.st_mode))
        return 1;
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0)
        return 1;
    int same = same_class_fd(fd);
    close(fd);
    return same;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

/* Each exec: the real one with the environment the agent wants, or the
 * program's own when the process is not to stay traced. */
#define EXEC_WITH(envp, loads, call)                                                               \
    do {                                                                                           \
        size_t len_ = 0;                                                                           \
        agent_flush();                                                                             \
        int loads_ = (loads);                                                                      \
        char **env_ = exec_traced() && loads_ ? env_with_agent(envp, &len_)                        \
                      : follow_mode && !loads_ ? env_without_agent(envp, &len_)                    \
                                               : NULL;                                             \
        char *const *use_ = env_ ? (char *const *)env_ : (envp);                                   \
        int rc_ = (call);                                                                          \
        if (env_) {                                                                                \
            int e_ = errno;                                                                        \
            agent_real.munmap(env_, len_);                                                         \
            errno = e_;                                                                            \
        }                                                                                          \
        return rc_;                                                                                \
    } while (0)

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn f = (execve_fn)next("execve");
    if (!f) {
        errno = ENOSYS;
        return -1;
    }
    EXEC_WITH(envp, same_class_at(AT_FDCWD, path, 0), f(path, argv, use_));
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    execve_fn f = (execve_fn)next("execvpe");
    if (!f) {
        errno = ENOSYS;
        return -1;
    }
    EXEC_WITH(envp, !strchr(file, '/') || same_class_at(AT_FDCWD, file, 0), f(file, argv, use_));
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    execveat_fn f = (execveat_fn)next("execveat");
    if (!f) {
        errno = ENOSYS;
        return -1;
    }
    EXEC_WITH(envp, same_class_at(dirfd, path, flags), f(dirfd, path, argv, use_, flags));
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    fexecve_fn f = (fexecve_fn)next("fexecve");
    if (!f) {
        errno = ENOSYS;
        return -1;
    }
    EXEC_WITH(envp, same_class_fd(fd), f(fd, argv, use_));
}

EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

/* The list forms: argv gathered on the stack, as glibc does. */
static size_t count_args(const char *arg0, va_list ap)
{
    size_t n = 1;
    if (arg0)
        while (va_arg(ap, const char *))
            n++;
    return n;
}

#define GATHER(arg0, argv, n)                                                                      \
    do {                                                                                           \
        va_list ap_;                                                                               \
        va_start(ap_, arg0);                                                                       \
        (argv)[0] = (char *)(arg0);                                                                \
        for (size_t i_ = 1; i_ < (n); i_++)                                                        \
            (argv)[i_] = va_arg(ap_, char *);                                                      \
        (argv)[n] = NULL;                                                                          \
        va_end(ap_);                                                                               \
    } while (0)

EXPORT int execl(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    size_t n = count_args(arg0, ap);
    va_end(ap);
    char *argv[n + 1];
    GATHER(arg0, argv, n);
    return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    size_t n = count_args(arg0, ap);
    va_end(ap);
    char *argv[n + 1];
    GATHER(arg0, argv, n);
    return execvpe(file, argv, environ);
}

/* execle: the environment follows the NULL that ends the arguments. */
EXPORT int execle(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    size_t n = count_args(arg0, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    char *argv[n + 1];
    GATHER(arg0, argv, n);
    return execve(path, argv, envp);
}

/* _exit skips the destructors, where the flush is (agent.c): a program that
 * ends by it (dash does) flushes here. exit's own call of _exit is glibc's
 * internal one, which no interposition reaches: it flushed already. */
typedef void (*exit_fn)(int);

EXPORT void _exit(int status)
{
    agent_flush();
    exit_fn f = (exit_fn)next("_exit");
    if (f)
        f(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

EXPORT void _Exit(int status)
{
    _exit(status);
}
