/* Loading the eBPF program and attaching it to a process: uprobes on the allocator, syscall
 * tracepoints. */
#include "tracer-int.h"

#include "fpcheck.h"
#include "heaptrace.skel.h"
#include "ht-alloc.h"
#include "ht-error.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>


#define TRACEFS "/sys/kernel/tracing"

/* The per-syscall tracepoints need tracefs; it is not mounted on every host
 * (docs/linux.md#build-and-attach): the daemon is root, so mount it. 1 when the
 * syscalls' events are there. */
static int tracefs_ready(void)
{
    struct stat st;
    if (stat(TRACEFS "/events/syscalls/sys_enter_mmap", &st) == 0)
        return 1;
    if (mount("nodev", TRACEFS, "tracefs", 0, NULL) != 0)
        return 0;
    return stat(TRACEFS "/events/syscalls/sys_enter_mmap", &st) == 0;
}

static void programs_choose(struct bpf_tracer *t)
{
    struct heaptrace_bpf *s = t->skel;
    struct bpf_program *tps[] = {
        s->progs.ht_enter_mmap,     s->progs.ht_exit_mmap,     s->progs.ht_enter_munmap,
        s->progs.ht_exit_munmap,    s->progs.ht_enter_mremap,  s->progs.ht_exit_mremap,
        s->progs.ht_enter_mprotect, s->progs.ht_exit_mprotect, s->progs.ht_enter_brk,
        s->progs.ht_exit_brk,
    };
    t->tracepoints = t->p.no_virtual ? 0 : !t->p.force_tp_btf && tracefs_ready() ? 1 : 2;
    for (size_t i = 0; i < sizeof(tps) / sizeof(tps[0]); i++)
        bpf_program__set_autoload(tps[i], t->tracepoints == 1);
    bpf_program__set_autoload(s->progs.ht_sys_enter_btf, t->tracepoints == 2);
    bpf_program__set_autoload(s->progs.ht_sys_exit_btf, t->tracepoints == 2);
}

/* uprobe_multi (Linux 6.6): one link per program and file for every probe
 * offset, so detaching waits for one RCU grace period per link instead of
 * one per probe (~70 ms each on these hosts). libbpf 1.1 predates it: the
 * values come from include/uapi/linux/bpf.h (enum bpf_attach_type
 * BPF_TRACE_UPROBE_MULTI, BPF_F_UPROBE_MULTI_RETURN, the link_create
 * uprobe_multi member) and the link is created with the raw syscall. */
#define HT_BPF_TRACE_UPROBE_MULTI 48
#define HT_BPF_F_UPROBE_MULTI_RETURN 1u
#define HT_BPF_LINK_CREATE 28

static uint64_t proc_number(const char *path)
{
    unsigned long long v = 0;
    FILE *f = fopen(path, "re");
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Room in the per-thread maps for every thread the target can have: each
 * thread takes a thread id below pid_max, and the system holds at most
 * threads-max (kernel/fork.c; both read now: raised later, an entry finding
 * no room is counted lost). HEAPTRACED_TEST_THREAD_MAP sets a small cap for
 * the tests. */
static uint32_t thread_cap(void)
{
    const char *knob = getenv("HEAPTRACED_TEST_THREAD_MAP");
    if (knob && atoi(knob) > 0)
        return (uint32_t)atoi(knob);
    uint64_t tmax = proc_number("/proc/sys/kernel/threads-max");
    uint64_t pmax = proc_number("/proc/sys/kernel/pid_max");
    uint64_t cap = tmax && pmax ? (tmax < pmax ? tmax : pmax) : tmax ? tmax : pmax;
    /* PID_MAX_LIMIT (include/linux/threads.h): 4M ids at most on 64-bit. */
    if (cap == 0 || cap > (4u << 20))
        cap = cap ? 4u << 20 : 32768;
    return cap < 8192 ? 8192 : (uint32_t)cap;
}

static int skel_load(struct bpf_tracer *t, int multi)
{
    t->skel = heaptrace_bpf__open();
    if (!t->skel)
        return -errno;
    t->skel->rodata->target_tgid = (uint32_t)t->p.pid;
    t->skel->rodata->stack_mode = t->p.stacks;
    t->skel->rodata->wake_bytes = t->p.ring_bytes / 4;
    t->skel->rodata->probe_floor = (uint32_t) !!t->p.probe_floor;
    int rc = bpf_map__set_max_entries(t->skel->maps.events, t->p.ring_bytes);
    t->thread_cap = thread_cap();
    if (!rc)
        rc = bpf_map__set_max_entries(t->skel->maps.threads, t->thread_cap);
    if (!rc)
        rc = bpf_map__set_max_entries(t->skel->maps.syscalls, t->thread_cap);
    if (rc)
        return rc;
    programs_choose(t);
    if (multi) {
        bpf_program__set_expected_attach_type(t->skel->progs.ht_enter, HT_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(t->skel->progs.ht_return, HT_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(t->skel->progs.ht_free, HT_BPF_TRACE_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(t->skel->progs.ht_hint, HT_BPF_TRACE_UPROBE_MULTI);
    }
    return heaptrace_bpf__load(t->skel);
}

/* Can a frame-pointer walk go through the module? 1 when it keeps frame
 * pointers or has no code; 0 when it does not, or cannot be read. */
static int module_has_fp(uint64_t pid, const struct procmaps_module *m)
{
    int fd = procmaps_open_module(pid, m);
    if (fd < 0)
        return 0;
    struct fpcheck f;
    int rc = fpcheck_fd(fd, &f);
    close(fd);
    return rc == 0 && (f.functions == 0 || fpcheck_has_fp(&f));
}

/* The module's file name into the list buf, or "..." once it is full. */
static void name_add(char *buf, size_t sz, const char *path)
{
    const char *b = strrchr(path, '/');
    const char *name = b ? b + 1 : path;
    size_t len = strlen(buf), nl = strlen(name);
    if (len >= 3 && strcmp(buf + len - 3, "...") == 0)
        return;
    if (len + nl + 7 >= sz) {
        name = "...";
        nl = 3;
    }
    if (len) {
        memcpy(buf + len, ", ", 2);
        len += 2;
    }
    memcpy(buf + len, name, nl + 1);
}

/* --stacks auto (the default): the frame-pointer walk only when every
 * module mapped now keeps frame pointers (a walk through one that does not
 * reads data as return addresses), else copies of the stack unwound with
 * DWARF CFI. What was chosen and why, for status. */
static void stacks_auto(struct bpf_tracer *t)
{
    struct procmaps_module *ms = NULL;
    size_t n = 0, nofp = 0;
    char names[160] = "";
    uint64_t t0 = bpf_now_ns();
    t->stacks_auto = 1;
    t->p.stacks = HB_STACKS_DWARF;
    if (procmaps_modules(t->p.pid, &ms, &n) != 0 || n == 0) {
        snprintf(t->stacks_why, sizeof(t->stacks_why),
                 "auto: the modules could not be read: dwarf (DWARF CFI unwinding)");
        ht_free(ms);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!module_has_fp(t->p.pid, &ms[i])) {
            nofp++;
            name_add(names, sizeof(names), ms[i].path);
        }
    if (nofp == 0) {
        t->p.stacks = HB_STACKS_FP;
        snprintf(t->stacks_why, sizeof(t->stacks_why),
                 "auto: all %zu modules keep frame pointers: fp (frame-pointer walk)", n);
    } else {
        snprintf(t->stacks_why, sizeof(t->stacks_why),
                 "auto: %zu of %zu modules have no frame pointers (%s): dwarf (DWARF CFI "
                 "unwinding of a copy of the stack)",
                 nofp, n, names);
    }
    t->stacks_check_ns = bpf_now_ns() - t0;
    ht_free(ms);
}

int bpf_tracer_load(struct bpf_tracer *t, char *err, size_t errsz)
{
    uint64_t t0 = bpf_now_ns();
    if (t->p.stacks == HB_STACKS_AUTO)
        stacks_auto(t);
    /* A kernel without uprobe_multi refuses the attach type: load again for
     * one perf-event link per probe. */
    t->multi = !t->p.no_multi;
    int rc = t->multi ? skel_load(t, 1) : -EINVAL;
    if (rc) {
        if (t->skel)
            heaptrace_bpf__destroy(t->skel);
        t->skel = NULL;
        t->multi = 0;
        rc = skel_load(t, 0);
    }
    if (rc) {
        snprintf(err, errsz, "cannot load the BPF program: %s (libbpf: %s)", strerror(-rc),
                 bpf_libbpf_last());
        return uv_translate_sys_error(-rc);
    }
    t->load_ns = bpf_now_ns() - t0;
    return 0;
}

/* The uprobe_multi member of union bpf_attr's link_create. */
struct ht_link_create {
    uint32_t prog_fd, target_fd, attach_type, flags;
    uint64_t path, offsets, ref_ctr_offsets, cookies;
    uint32_t cnt, multi_flags, pid, pad;
};

static int fd_keep(struct bpf_tracer *t, int fd)
{
    if (t->nfds == t->fds_alloc) {
        uint32_t na = t->fds_alloc ? t->fds_alloc * 2 : 16;
        int *nf = ht_realloc(t->link_fds, na * sizeof(*nf));
        if (!nf) {
            close(fd);
            return UV_ENOMEM;
        }
        t->link_fds = nf;
        t->fds_alloc = na;
    }
    t->link_fds[t->nfds++] = fd;
    return 0;
}

/* Which program serves a point: 0 enter+return, HB_FN_FREE, HB_FN_HINT. */
static unsigned point_class(unsigned fn)
{
    return fn == HB_FN_FREE || fn == HB_FN_HINT ? fn : 0;
}

/* One link of prog for the points [i, j) that share a file and are of class cls. */
static int multi_link(struct bpf_tracer *t, struct bpf_program *prog, size_t i, size_t j,
                      unsigned cls, int ret, char *err, size_t errsz)
{
    uint64_t offs[64], cookies[64];
    uint32_t cnt = 0;
    for (size_t k = i; k < j && cnt < 64; k++) {
        if (point_class(t->points[k].fn) != cls)
            continue;
        offs[cnt] = t->points[k].file_offset;
        cookies[cnt++] = t->points[k].fn;
    }
    if (cnt == 0)
        return 0;
    struct ht_link_create a;
    memset(&a, 0, sizeof(a));
    a.prog_fd = (uint32_t)bpf_program__fd(prog);
    a.attach_type = HT_BPF_TRACE_UPROBE_MULTI;
    a.path = (uint64_t)(uintptr_t)t->points[i].attach_path;
    a.offsets = (uint64_t)(uintptr_t)offs;
    a.cookies = (uint64_t)(uintptr_t)cookies;
    a.cnt = cnt;
    a.multi_flags = ret ? HT_BPF_F_UPROBE_MULTI_RETURN : 0;
    a.pid = (uint32_t)t->p.pid;
    int fd = (int)syscall(__NR_bpf, HT_BPF_LINK_CREATE, &a, sizeof(a));
    if (fd < 0) {
        int e = errno;
        snprintf(err, errsz, "cannot attach %u %s to %s: %s%s", cnt, ret ? "uretprobes" : "uprobes",
                 t->points[i].module, strerror(e),
                 e == EINVAL ? "; another tracer may hold a uprobe at one of these offsets "
                               "(dmesg: \"ref_ctr_offset mismatch\")"
                             : "");
        return uv_translate_sys_error(e);
    }
    return fd_keep(t, fd);
}

/* Points are grouped by file (resolve.c adds them module by module only per
 * function): one pass per distinct attach path. */
static int points_attach_multi(struct bpf_tracer *t, char *err, size_t errsz)
{
    for (size_t i = 0; i < t->npoints; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(t->points[k].attach_path, t->points[i].attach_path) == 0;
        if (seen)
            continue;
        /* Move this file's points together after i. */
        size_t j = i + 1;
        for (size_t k = i + 1; k < t->npoints; k++)
            if (strcmp(t->points[k].attach_path, t->points[i].attach_path) == 0) {
                struct resolve_point tmp = t->points[j];
                t->points[j++] = t->points[k];
                t->points[k] = tmp;
            }
        int rc = multi_link(t, t->skel->progs.ht_enter, i, j, 0, 0, err, errsz);
        if (!rc)
            rc = multi_link(t, t->skel->progs.ht_return, i, j, 0, 1, err, errsz);
        if (!rc)
            rc = multi_link(t, t->skel->progs.ht_free, i, j, HB_FN_FREE, 0, err, errsz);
        if (!rc)
            rc = multi_link(t, t->skel->progs.ht_hint, i, j, HB_FN_HINT, 0, err, errsz);
        if (rc)
            return rc;
        i = j - 1;
    }
    return 0;
}

static int link_keep(struct bpf_tracer *t, struct bpf_link *l)
{
    if (t->nlinks == t->links_alloc) {
        uint32_t na = t->links_alloc ? t->links_alloc * 2 : 64;
        struct bpf_link **nl = ht_realloc(t->links, na * sizeof(*nl));
        if (!nl) {
            bpf_link__destroy(l);
            return UV_ENOMEM;
        }
        t->links = nl;
        t->links_alloc = na;
    }
    t->links[t->nlinks++] = l;
    return 0;
}

static int uprobe_attach(struct bpf_tracer *t, struct bpf_program *prog,
                         const struct resolve_point *pt, int ret, char *err, size_t errsz)
{
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .bpf_cookie = pt->fn);
    struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, (pid_t)t->p.pid, pt->attach_path,
                                                         pt->file_offset, &opts);
    if (!l) {
        int e = errno;
        /* The kernel keys uprobes by file and offset for the whole system:
         * another tracer's probe there with a USDT semaphore (bcc's
         * memleak registers one) makes ours fail with EINVAL and logs
         * "ref_ctr_offset mismatch" (kernel/events/uprobes.c). */
        snprintf(err, errsz, "cannot attach a %s to %s+%u in %s: %s%s (libbpf: %s)",
                 ret ? "uretprobe" : "uprobe", pt->name, pt->probe_off, pt->module, strerror(e),
                 e == EINVAL ? "; another tracer may hold a uprobe there (dmesg: "
                               "\"ref_ctr_offset mismatch\")"
                             : "",
                 bpf_libbpf_last());
        return uv_translate_sys_error(e);
    }
    return link_keep(t, l);
}

static int points_attach(struct bpf_tracer *t, char *err, size_t errsz)
{
    int rc =
        resolve_points(t->p.pid, t->p.stacks == HB_STACKS_FP, &t->points, &t->npoints, err, errsz);
    if (rc)
        return rc;
    if (t->multi)
        return points_attach_multi(t, err, errsz);
    for (size_t i = 0; i < t->npoints; i++) {
        const struct resolve_point *pt = &t->points[i];
        if (pt->fn == HB_FN_FREE) {
            rc = uprobe_attach(t, t->skel->progs.ht_free, pt, 0, err, errsz);
        } else if (pt->fn == HB_FN_HINT) {
            rc = uprobe_attach(t, t->skel->progs.ht_hint, pt, 0, err, errsz);
        } else {
            rc = uprobe_attach(t, t->skel->progs.ht_enter, pt, 0, err, errsz);
            if (!rc)
                rc = uprobe_attach(t, t->skel->progs.ht_return, pt, 1, err, errsz);
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int syscalls_attach(struct bpf_tracer *t, char *err, size_t errsz)
{
    struct bpf_object *obj = t->skel->obj;
    struct bpf_program *prog;
    bpf_object__for_each_program(prog, obj)
    {
        if (!bpf_program__autoload(prog) || bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE ||
            prog == t->skel->progs.ht_exec || prog == t->skel->progs.ht_thread_exit)
            continue;
        struct bpf_link *l = bpf_program__attach(prog);
        if (!l) {
            int e = errno;
            snprintf(err, errsz, "cannot attach %s: %s (libbpf: %s)", bpf_program__name(prog),
                     strerror(e), bpf_libbpf_last());
            return uv_translate_sys_error(e);
        }
        int rc = link_keep(t, l);
        if (rc)
            return rc;
    }
    return 0;
}

/* The exec watch (tp_btf, any kernel with BTF): without it an exec goes
 * unnoticed, so attaching fails rather than trace the wrong program. */
static int exec_attach(struct bpf_tracer *t, char *err, size_t errsz)
{
    struct bpf_link *l = bpf_program__attach(t->skel->progs.ht_exec);
    if (!l) {
        int e = errno;
        snprintf(err, errsz,
                 "cannot watch the target's exec (tp_btf/sched_process_exec): %s "
                 "(libbpf: %s)",
                 strerror(e), bpf_libbpf_last());
        return uv_translate_sys_error(e);
    }
    return link_keep(t, l);
}

/* The thread-exit watch: without it the per-thread maps keep the states of
 * threads gone and fill up. */
static int thread_exit_attach(struct bpf_tracer *t, char *err, size_t errsz)
{
    struct bpf_link *l = bpf_program__attach(t->skel->progs.ht_thread_exit);
    if (!l) {
        int e = errno;
        snprintf(err, errsz,
                 "cannot watch the target's threads end (tp_btf/sched_process_exit): %s "
                 "(libbpf: %s)",
                 strerror(e), bpf_libbpf_last());
        return uv_translate_sys_error(e);
    }
    return link_keep(t, l);
}

static int pid_gone(struct bpf_tracer *t)
{
    struct pollfd pfd = {.fd = t->pidfd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1;
}

static void name_read(struct bpf_tracer *t)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/comm", (unsigned long long)t->p.pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t r = read(fd, t->name, sizeof(t->name) - 1);
    close(fd);
    t->name[r > 0 ? r : 0] = 0;
    t->name[strcspn(t->name, "\n")] = 0;
}

int bpf_tracer_attach(struct bpf_tracer *t, char *err, size_t errsz)
{
    uint64_t t0 = bpf_now_ns();
    int rc = exec_attach(t, err, errsz);
    if (!rc)
        rc = thread_exit_attach(t, err, errsz);
    if (!rc && !t->p.no_heap)
        rc = points_attach(t, err, errsz);
    if (!rc && t->tracepoints)
        rc = syscalls_attach(t, err, errsz);
    /* Read before the process can go: the consumer reports them first. */
    if (!rc) {
        name_read(t);
        ht_free(t->mods);
        t->mods = NULL;
        t->nmods = 0;
        procmaps_modules(t->p.pid, &t->mods, &t->nmods);
    }
    /* The process may have exited while we read its maps or attached: its
     * files and probes are then gone, whatever the error said. */
    if (pid_gone(t)) {
        snprintf(err, errsz, "process %llu exited during attach", (unsigned long long)t->p.pid);
        rc = UV_ESRCH;
    }
    if (rc) {
        bpf_tracer_detach(t);
        return rc;
    }
    t->attach_ns = bpf_now_ns() - t0;
    return 0;
}

/* The programs take nothing from here on (heaptrace.bpf.c, detaching): the
 * trace ends at this instant, whatever the links' removal takes after. The
 * consumer gives the skeleton back at its end (bpf_tracer_kernel_release):
 * under stats_lock. */
void bpf_tracer_cut(struct bpf_tracer *t)
{
    uv_mutex_lock(&t->stats_lock);
    if (t->skel && t->skel->bss)
        __atomic_store_n(&t->skel->bss->detaching, 1, __ATOMIC_SEQ_CST);
    uv_mutex_unlock(&t->stats_lock);
}

void bpf_tracer_detach(struct bpf_tracer *t)
{
    bpf_tracer_cut(t);
    /* A running consumer removes the links itself at its end (run.c): off
     * the loop, which their removal held 0.5-0.9 s. */
    if (t->running)
        return;
    bpf_tracer_links_remove(t);
}

void bpf_tracer_links_remove(struct bpf_tracer *t)
{
    if (t->nlinks == 0 && t->nfds == 0)
        return;
    uint64_t t0 = bpf_now_ns();
    /* The programs stop taking events first: each link's removal waits for
     * the kernel, the target runs meanwhile, and a trace cut probe by probe
     * holds frees without their malloc. */
    bpf_tracer_cut(t);
    for (uint32_t i = 0; i < t->nlinks; i++)
        bpf_link__destroy(t->links[i]);
    for (uint32_t i = 0; i < t->nfds; i++)
        close(t->link_fds[i]);
    /* The consumer thread detaches while status reads these on the loop. */
    uv_mutex_lock(&t->stats_lock);
    t->nlinks = 0;
    t->nfds = 0;
    t->detach_ns = bpf_now_ns() - t0;
    uv_mutex_unlock(&t->stats_lock);
}
