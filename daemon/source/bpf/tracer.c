/* The eBPF tracer's life: checks, the one-tracer-per-PID registry, stats. */
#include "tracer-int.h"

#include "heaptrace.skel.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "unwind.h"

#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

/* PIDs traced now, process-wide: a second attach to one would double every event. */
#define REGISTRY_MAX 64
static uv_mutex_t registry_lock;
static uv_once_t registry_once = UV_ONCE_INIT;
static uint64_t registry[REGISTRY_MAX];

static void registry_init(void)
{
    uv_mutex_init(&registry_lock);
}

static int registry_add(uint64_t pid)
{
    int rc = HT_EFULL;
    uv_once(&registry_once, registry_init);
    uv_mutex_lock(&registry_lock);
    for (int i = 0; i < REGISTRY_MAX; i++)
        if (registry[i] == pid) {
            rc = HT_EEXIST;
            goto out;
        }
    for (int i = 0; i < REGISTRY_MAX; i++)
        if (registry[i] == 0) {
            registry[i] = pid;
            rc = 0;
            break;
        }
out:
    uv_mutex_unlock(&registry_lock);
    return rc;
}

/* The tracer's place in the registry given back once: by the loop at a stop
 * or a finish, or by the consumer at its end (under registry_lock). */
static void registry_leave(struct bpf_tracer *t)
{
    uv_once(&registry_once, registry_init);
    uv_mutex_lock(&registry_lock);
    for (int i = 0; t->registered && i < REGISTRY_MAX; i++)
        if (registry[i] == t->p.pid)
            registry[i] = 0;
    t->registered = 0;
    uv_mutex_unlock(&registry_lock);
}

static int cap_has(const struct __user_cap_data_struct *d, unsigned cap)
{
    return (d[cap / 32].effective >> (cap % 32)) & 1;
}

int bpf_tracer_available(char *err, size_t errsz)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capget, &h, d) != 0) {
        snprintf(err, errsz, "cannot read the daemon's capabilities: %s", strerror(errno));
        return uv_translate_sys_error(errno);
    }
    /* Loading tracing programs needs CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN,
     * kernels before 5.8); probing another user's process needs CAP_SYS_PTRACE. */
    int bpf_ok = cap_has(d, CAP_SYS_ADMIN) || (cap_has(d, CAP_BPF) && cap_has(d, CAP_PERFMON));
    if (!bpf_ok) {
        snprintf(err, errsz,
                 "the eBPF backend needs root, or CAP_BPF and CAP_PERFMON (the daemon runs "
                 "as uid %u without them)",
                 (unsigned)geteuid());
        return HT_EPERM;
    }
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
        snprintf(err, errsz,
                 "the kernel has no BTF (/sys/kernel/btf/vmlinux: %s): the eBPF backend needs a "
                 "kernel built with CONFIG_DEBUG_INFO_BTF=y",
                 strerror(errno));
        return HT_ENOTSUP;
    }
    return 0;
}

static int pid_open(struct bpf_tracer *t, char *err, size_t errsz)
{
    t->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)t->p.pid, 0);
    if (t->pidfd >= 0)
        return 0;
    int rc = uv_translate_sys_error(errno);
    if (errno == ESRCH)
        snprintf(err, errsz, "no process %llu", (unsigned long long)t->p.pid);
    else
        snprintf(err, errsz, "cannot watch process %llu (pidfd_open): %s",
                 (unsigned long long)t->p.pid, strerror(errno));
    return rc;
}

/* Processes no tracer can serve: the daemon itself (its own allocations,
 * made while it handles the events, would feed the trace it is taking) and
 * kernel threads (no user address space: /proc/PID/exe cannot be read while
 * the thread is alive). */
static int pid_refused(uint64_t pid, char *err, size_t errsz)
{
    char path[64], buf[8];
    if (pid == (uint64_t)getpid()) {
        snprintf(err, errsz, "process %llu is heaptraced itself: the daemon cannot trace itself",
                 (unsigned long long)pid);
        return HT_EBADARG;
    }
    snprintf(path, sizeof(path), "/proc/%llu/exe", (unsigned long long)pid);
    if (readlink(path, buf, sizeof(buf)) < 0 && errno == ENOENT) {
        snprintf(path, sizeof(path), "/proc/%llu/cmdline", (unsigned long long)pid);
        FILE *f = fopen(path, "re");
        int empty = f && fgetc(f) == EOF;
        if (f)
            fclose(f);
        if (empty) {
            snprintf(err, errsz,
                     "process %llu is a kernel thread (or has exited): it has no user-space "
                     "allocator to trace",
                     (unsigned long long)pid);
            return HT_ENOTSUP;
        }
    }
    return 0;
}

int bpf_tracer_new(struct bpf_tracer **out, const struct bpf_tracer_params *p, char *err,
                   size_t errsz)
{
    int rc = bpf_tracer_available(err, errsz);
    if (rc)
        return rc;
    if (p->pid == 0 || p->pid > 0x7fffffff) {
        snprintf(err, errsz, "invalid PID %llu", (unsigned long long)p->pid);
        return HT_EBADARG;
    }
    rc = pid_refused(p->pid, err, errsz);
    if (rc)
        return rc;
    struct bpf_tracer *t = ht_calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    t->p = *p;
    if (!t->p.ring_bytes)
        t->p.ring_bytes = 16u << 20;
    if (!t->p.sample_ns)
        t->p.sample_ns = 1000000000u;
    t->pidfd = -1;
    t->epfd = -1;
    uv_mutex_init(&t->stats_lock);
    uv_mutex_init(&t->end_lock);
    uv_cond_init(&t->end_cond);
    bpf_libbpf_log_install();
    rc = pid_open(t, err, errsz);
    if (rc)
        goto fail;
    rc = registry_add(p->pid);
    if (rc) {
        snprintf(err, errsz,
                 rc == HT_EEXIST ? "process %llu is already traced by this daemon"
                                 : "too many processes traced at once (%llu not attached)",
                 (unsigned long long)p->pid);
        goto fail;
    }
    t->registered = 1;
    rc = bpf_tracer_load(t, err, errsz);
    if (rc)
        goto fail;
    *out = t;
    return 0;
fail:
    bpf_tracer_free(t);
    return rc;
}

/* Everything the kernel holds for the tracer: links, programs, maps (the
 * ring's memory), the pidfd, the PID's place in the registry. The skeleton
 * leaves under stats_lock: the loop's bpf_tracer_cut reads it. */
void bpf_tracer_kernel_release(struct bpf_tracer *t)
{
    bpf_tracer_links_remove(t);
    if (t->rb)
        ring_buffer__free(t->rb);
    t->rb = NULL;
    uv_mutex_lock(&t->stats_lock);
    struct heaptrace_bpf *skel = t->skel;
    t->skel = NULL;
    uv_mutex_unlock(&t->stats_lock);
    if (skel)
        heaptrace_bpf__destroy(skel);
    if (t->pidfd >= 0)
        close(t->pidfd);
    t->pidfd = -1;
    if (t->epfd >= 0)
        close(t->epfd);
    t->epfd = -1;
    registry_leave(t);
}

void bpf_tracer_finish(struct bpf_tracer *t)
{
    bpf_tracer_cut(t);
    /* The probes take nothing now: the process may be traced again (stop,
     * then start) while this tracer's consumer converts its kernel ring. */
    registry_leave(t);
    /* The links go on the consumer thread (run.c, bpf_tracer_end): each
     * removal waits for the kernel (~20 ms, 0.5-0.9 s for a jemalloc
     * target's ~30 probes), which held the loop and every client that long. */
    if (t->running)
        atomic_store(&t->finish, 1);
    else
        bpf_tracer_links_remove(t);
}

/* Orphaned consumers (bpf_tracer_abandon) still giving the kernel's side
 * back: the process's exit waits for them. */
static uv_once_t orphans_once = UV_ONCE_INIT;
static uv_mutex_t orphans_lock;
static uv_cond_t orphans_cond;
static int orphans;

static void orphans_wait(void)
{
    uv_mutex_lock(&orphans_lock);
    while (orphans > 0)
        uv_cond_wait(&orphans_cond, &orphans_lock);
    uv_mutex_unlock(&orphans_lock);
}

static void orphans_init(void)
{
    uv_mutex_init(&orphans_lock);
    uv_cond_init(&orphans_cond);
    atexit(orphans_wait);
}

static void orphans_add(int d)
{
    uv_once(&orphans_once, orphans_init);
    uv_mutex_lock(&orphans_lock);
    orphans += d;
    if (orphans == 0)
        uv_cond_broadcast(&orphans_cond);
    uv_mutex_unlock(&orphans_lock);
}

/* The loop lets go of the sink: the consumer is told to quit and is waited
 * for only while it converts (it ends that soon once the caller made a put
 * blocked on room return), never while it gives the kernel's side back. */
static void sink_let_go(struct bpf_tracer *t)
{
    atomic_store(&t->quit, 1);
    uv_mutex_lock(&t->end_lock);
    while (!t->converted)
        uv_cond_wait(&t->end_cond, &t->end_lock);
    t->sink_gone = 1;
    uv_mutex_unlock(&t->end_lock);
}

void bpf_tracer_stop(struct bpf_tracer *t)
{
    bpf_tracer_detach(t);
    if (t->running)
        sink_let_go(t);
    registry_leave(t);
}

static void tracer_free_now(struct bpf_tracer *t)
{
    unwinder_free(t->cons.uw);
    bpf_consumer_close(&t->cons);
    ht_free(t->mods);
    ht_free(t->links);
    ht_free(t->link_fds);
    ht_free(t->points);
    uv_cond_destroy(&t->end_cond);
    uv_mutex_destroy(&t->end_lock);
    uv_mutex_destroy(&t->stats_lock);
    ht_free(t);
}

void bpf_tracer_free(struct bpf_tracer *t)
{
    if (!t)
        return;
    bpf_tracer_stop(t);
    if (t->running) {
        uv_thread_join(&t->thread);
        t->running = 0;
    }
    bpf_tracer_kernel_release(t);
    tracer_free_now(t);
}

void bpf_tracer_abandon(struct bpf_tracer *t)
{
    if (!t)
        return;
    bpf_tracer_stop(t);
    if (!t->running) {
        bpf_tracer_free(t);
        return;
    }
    /* Counted before the thread can end and free itself. */
    uv_thread_t th = t->thread;
    orphans_add(1);
    uv_mutex_lock(&t->end_lock);
    int orphan = t->orphan = !t->ended;
    uv_mutex_unlock(&t->end_lock);
    if (orphan) {
        pthread_detach(th); /* t may be gone already */
        return;
    }
    orphans_add(-1);
    bpf_tracer_free(t);
}

/* The consumer's last steps (run.c): an orphan frees the tracer. */
void bpf_tracer_end(struct bpf_tracer *t, const char *reason)
{
    bpf_tracer_kernel_release(t);
    uv_mutex_lock(&t->end_lock);
    if (!t->sink_gone)
        t->sink.done(t->sink.emit.arg, reason);
    t->ended = 1;
    int orphan = t->orphan;
    uv_mutex_unlock(&t->end_lock);
    if (orphan) {
        tracer_free_now(t);
        orphans_add(-1);
    }
}

void bpf_tracer_converted(struct bpf_tracer *t)
{
    uv_mutex_lock(&t->end_lock);
    t->converted = 1;
    uv_cond_broadcast(&t->end_cond);
    uv_mutex_unlock(&t->end_lock);
}

const struct procmaps_module *bpf_tracer_modules(const struct bpf_tracer *t, size_t *n)
{
    *n = t->nmods;
    return t->mods;
}

const char *bpf_tracer_name(const struct bpf_tracer *t)
{
    return t->name;
}

void bpf_tracer_stats(struct bpf_tracer *t, struct bpf_tracer_stats *st)
{
    uv_mutex_lock(&t->stats_lock);
    *st = t->st;
    st->links = t->nlinks + t->nfds;
    st->detach_ns = t->detach_ns;
    uv_mutex_unlock(&t->stats_lock);
    st->multi = t->multi;
    st->probes = (uint32_t)t->npoints;
    st->attach_ns = t->attach_ns;
    st->load_ns = t->load_ns;
    st->tracepoints = t->tracepoints;
}

static const char *const fn_names[HB_FN_COUNT] = {
    "",         "malloc",         "calloc",  "realloc", "reallocarray",
    "memalign", "posix_memalign", "pvalloc", "free",    "hint",
};
static const char *const stack_names[] = {"none", "fp", "dwarf"};

struct cJSON *bpf_tracer_status_json(struct bpf_tracer *t)
{
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    if (!o || !arr) {
        cJSON_Delete(o);
        cJSON_Delete(arr);
        return NULL;
    }
    cJSON_AddStringToObject(o, "stacks", stack_names[t->p.stacks % 3]);
    cJSON_AddStringToObject(o, "stacks_requested",
                            t->stacks_auto ? "auto" : stack_names[t->p.stacks % 3]);
    if (t->stacks_auto) {
        cJSON_AddStringToObject(o, "stacks_why", t->stacks_why);
        cJSON_AddNumberToObject(o, "stacks_check_ms", (double)t->stacks_check_ns / 1e6);
    }
    cJSON_AddNumberToObject(o, "ring_bytes", t->p.ring_bytes);
    cJSON_AddStringToObject(o, "syscalls",
                            t->tracepoints == 1   ? "tracepoints"
                            : t->tracepoints == 2 ? "tp_btf"
                                                  : "off");
    uv_mutex_lock(&t->stats_lock);
    uint32_t links = t->nlinks + t->nfds;
    uv_mutex_unlock(&t->stats_lock);
    cJSON_AddNumberToObject(o, "links", links);
    cJSON_AddBoolToObject(o, "uprobe_multi", t->multi);
    cJSON_AddNumberToObject(o, "attach_ms", (double)t->attach_ns / 1e6);
    uint32_t stepped = 0;
    for (size_t i = 0; i < t->npoints; i++) {
        const struct resolve_point *pt = &t->points[i];
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddStringToObject(e, "function", pt->name);
        cJSON_AddStringToObject(e, "as", fn_names[pt->fn < HB_FN_COUNT ? pt->fn : 0]);
        cJSON_AddStringToObject(e, "module", pt->module);
        cJSON_AddNumberToObject(e, "probe_offset", pt->probe_off);
        /* A single-stepped probe costs several times an emulated one (prologue.h). */
        cJSON_AddStringToObject(e, "site", pt->emulated ? "emulated" : "single-stepped");
        if (!pt->emulated)
            cJSON_AddStringToObject(e, "why", pt->why);
        stepped += !pt->emulated;
        cJSON_AddItemToArray(arr, e);
    }
    cJSON_AddNumberToObject(o, "probes_emulated", (double)(t->npoints - stepped));
    cJSON_AddNumberToObject(o, "probes_single_stepped", stepped);
    cJSON_AddItemToObject(o, "probes", arr);
    return o;
}
