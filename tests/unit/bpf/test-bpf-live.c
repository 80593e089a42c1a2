/* The eBPF tracer attached to a real process with known allocations (needs root). */
#include "ht-error.h"
#include "ht-test.h"
#include "stack-intern.h"
#include "tracer.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

struct seen {
    uv_mutex_t lock;
    struct stack_intern si;
    uint64_t alloc777, alloc555, alloc2048, alloc_big, realloc7777, frees, commits64k, releases64k,
        big_commits, exits, exit_code, modules, stacked;
    uint64_t cxx_allocs, cxx_in_exe, exe_lo, exe_hi, jemalloc_probes;
    uint64_t addrs[64];
    unsigned naddrs;
    char reason[128];
    atomic_int done;
};

static void addr_keep(struct seen *s, uint64_t a)
{
    if (s->naddrs < 64)
        s->addrs[s->naddrs++] = a;
}

static int addr_drop(struct seen *s, uint64_t a)
{
    for (unsigned i = 0; i < s->naddrs; i++)
        if (s->addrs[i] == a) {
            s->addrs[i] = s->addrs[--s->naddrs];
            return 1;
        }
    return 0;
}

/* Has the stack a frame in [lo, hi)? */
static int frame_in(struct seen *s, uint32_t stack, uint64_t lo, uint64_t hi)
{
    unsigned depth;
    const uint64_t *f = stack_intern_frames(&s->si, stack, &depth);
    for (unsigned i = 0; f && i < depth; i++)
        if (f[i] >= lo && f[i] < hi)
            return 1;
    return 0;
}

static void alloc_seen(struct seen *s, const struct ht_event *ev)
{
    if (ev->size == 333 || ev->size == 444 || ev->size == 555)
        s->cxx_in_exe += frame_in(s, ev->stack, s->exe_lo, s->exe_hi);
    if (ev->size == 333 || ev->size == 444 || ev->size == 555)
        s->cxx_allocs++;
    uint64_t *c = ev->size == 777          ? &s->alloc777
                  : ev->size == 555        ? &s->alloc555
                  : ev->size == 2048       ? &s->alloc2048
                  : ev->size == (3u << 20) ? &s->alloc_big
                                           : NULL;
    if (!c)
        return;
    (*c)++;
    s->stacked += ev->stack != 0;
    addr_keep(s, ev->addr);
}

static int event_cb(void *arg, const struct ht_event *ev)
{
    struct seen *s = arg;
    uv_mutex_lock(&s->lock);
    switch (ev->kind) {
    case HT_EV_ALLOC:
        alloc_seen(s, ev);
        break;
    case HT_EV_REALLOC:
        if (ev->size == 7777 && addr_drop(s, ev->old_addr)) {
            s->realloc7777++;
            addr_keep(s, ev->addr);
        }
        break;
    case HT_EV_FREE:
        s->frees += addr_drop(s, ev->addr);
        break;
    case HT_EV_COMMIT:
        s->commits64k += ev->size == 65536;
        s->big_commits += ev->size >= (3u << 20);
        break;
    case HT_EV_RELEASE:
        s->releases64k += ev->size == 65536;
        break;
    case HT_EV_EXIT:
        s->exits++;
        s->exit_code = ev->size;
        break;
    case HT_EV_MODULE_LOAD:
        s->modules++;
        break;
    }
    uv_mutex_unlock(&s->lock);
    return 0;
}

static uint32_t stack_cb(void *arg, const uint64_t *frames, unsigned n)
{
    struct seen *s = arg;
    return stack_intern_get(&s->si, frames, n);
}

static uint32_t str_cb(void *arg, const char *str, unsigned len)
{
    struct seen *s = arg;
    return stack_intern_str(&s->si, str, len);
}

static void process_cb(void *arg, uint64_t pid, const char *name)
{
    (void)arg;
    printf("process %llu %s\n", (unsigned long long)pid, name);
}

static void idle_cb(void *arg)
{
    (void)arg;
}

static void done_cb(void *arg, const char *reason)
{
    struct seen *s = arg;
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    atomic_store(&s->done, 1);
}

static void need_root(void)
{
    if (geteuid() != 0) {
        printf("skip: the eBPF tracer needs root (CAP_BPF, CAP_PERFMON)\n");
        exit(HT_TEST_SKIP);
    }
}

struct child {
    pid_t pid;
    FILE *to, *from;
};

static const char *target_path = BPF_TARGET;

static int child_start(struct child *c)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    c->pid = fork();
    if (c->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(target_path, target_path, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->to = fdopen(in[1], "w");
    c->from = fdopen(out[0], "r");
    char line[64];
    return fgets(line, sizeof(line), c->from) && strncmp(line, "ready", 5) == 0 ? 0 : -1;
}

static void child_say(struct child *c)
{
    fputs("go\n", c->to);
    fflush(c->to);
}

static int child_reap(struct child *c)
{
    int status = 0;
    if (c->to)
        fclose(c->to);
    if (c->from)
        fclose(c->from);
    c->to = c->from = NULL;
    waitpid(c->pid, &status, 0);
    return status;
}

/* The BPF programs and links (uprobe_multi links, perf-event links, perf
 * events) this process holds as descriptors: what bpftool lists for it. Both
 * must come back to what they were once the tracer is freed. (Counting the
 * kernel's whole lists races with other tracers on a shared machine.) */
static void kernel_objects(unsigned *progs, unsigned *links)
{
    *progs = *links = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], target[128];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strcmp(target, "anon_inode:bpf-prog") == 0)
            (*progs)++;
        else if (strcmp(target, "anon_inode:bpf-link") == 0 || strstr(target, "perf_event"))
            (*links)++;
    }
    if (d)
        closedir(d);
}

/* The kernel frees programs and links after an RCU grace period (tracing
 * programs after an RCU tasks one): give it up to two seconds to get back
 * to the counts before. */
static void kernel_objects_settle(unsigned progs0, unsigned links0, unsigned *progs,
                                  unsigned *links)
{
    for (int i = 0; i < 200; i++) {
        kernel_objects(progs, links);
        if (*progs == progs0 && *links == links0)
            return;
        usleep(10000);
    }
}

static struct bpf_tracer_sink sink_of(struct seen *s)
{
    struct bpf_tracer_sink k = {
        .emit = {.arg = s, .event = event_cb, .stack = stack_cb},
        .str = str_cb,
        .process = process_cb,
        .idle = idle_cb,
        .done = done_cb,
    };
    return k;
}

static void wait_done(struct seen *s, int ms)
{
    for (int i = 0; i < ms / 10 && !atomic_load(&s->done); i++)
        usleep(10000);
}

/* Attach, or skip when someone else's uprobe blocks ours: uprobes are keyed
 * by file and offset system-wide, and a bcc tool probing the same libc
 * function with a semaphore makes ours fail (EINVAL). */
static int attach_checked(struct bpf_tracer *t, struct child *c)
{
    char err[512];
    int rc = bpf_tracer_attach(t, err, sizeof(err));
    if (rc)
        fprintf(stderr, "%s\n", err);
    if (rc == UV_EINVAL && strstr(err, "another tracer")) {
        printf("skip: another tracer holds a conflicting uprobe: %s\n", err);
        bpf_tracer_free(t);
        kill(c->pid, SIGKILL);
        child_reap(c);
        exit(HT_TEST_SKIP);
    }
    return rc;
}

/* The address range of the executable's mappings in pid. */
static int exe_range(pid_t pid, uint64_t *lo, uint64_t *hi)
{
    char path[64], exe[512], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = 0;
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    *lo = UINT64_MAX;
    *hi = 0;
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long long a, b;
        if (strstr(line, exe) && sscanf(line, "%llx-%llx", &a, &b) == 2) {
            *lo = a < *lo ? a : *lo;
            *hi = b > *hi ? b : *hi;
        }
    }
    if (f)
        fclose(f);
    return *hi ? 0 : -1;
}

/* Attach with p to a fresh target, let it run and exit; the events into s. */
static void run_target(struct bpf_tracer_params *p, struct seen *s, struct bpf_tracer_stats *st,
                       int *status)
{
    uv_mutex_init(&s->lock);
    stack_intern_init(&s->si, 4096, 4096);
    unsigned progs0, links0, progs1, links1;
    kernel_objects(&progs0, &links0);
    struct child c;
    CHECK(child_start(&c) == 0);
    p->pid = (uint64_t)c.pid;
    exe_range(c.pid, &s->exe_lo, &s->exe_hi);
    struct bpf_tracer *t;
    char err[512];
    int rc = bpf_tracer_new(&t, p, err, sizeof(err));
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
    rc = attach_checked(t, &c);
    CHECK_EQ(rc, 0);
    struct bpf_tracer_sink k = sink_of(s);
    CHECK_EQ(bpf_tracer_run(t, &k, err, sizeof(err)), 0);
    kernel_objects(&progs1, &links1);
    CHECK(progs1 > progs0);
    child_say(&c);
    char line[64];
    CHECK(fgets(line, sizeof(line), c.from) != NULL);
    child_say(&c); /* exit with 7; not reaped until the tracer saw it */
    wait_done(s, 5000);
    *status = child_reap(&c);
    bpf_tracer_stats(t, st);
    cJSON *sj = bpf_tracer_status_json(t);
    char *js = cJSON_PrintUnformatted(sj);
    s->jemalloc_probes = js && strstr(js, "libjemalloc") ? 1 : 0;
    free(js);
    cJSON_Delete(sj);
    /* Done comes after the consumer gave the kernel's side back (run.c):
     * before the free. */
    kernel_objects_settle(progs0, links0, &progs1, &links1);
    CHECK_EQ(progs1, progs0);
    CHECK_EQ(links1, links0);
    bpf_tracer_free(t);
    printf("reason: %s; probes %u links %u records %llu lost %llu attach %.1f ms\n", s->reason,
           st->probes, st->links, (unsigned long long)st->records, (unsigned long long)st->lost,
           st->attach_ns / 1e6);
}

/* The counts bpf-target's run must give, whatever allocator it uses. */
static void check_counts(struct seen *s, const struct bpf_tracer_stats *st, int status)
{
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK(atomic_load(&s->done));
    CHECK_EQ(s->alloc777, 6); /* 5 malloc + calloc(3, 259) */
    CHECK_EQ(s->realloc7777, 1);
    CHECK_EQ(s->alloc555, 1);
    CHECK_EQ(s->alloc2048, 1);
    CHECK_EQ(s->alloc_big, 1);
    CHECK_EQ(s->frees, 7);   /* 5 x 777, 555, the big block */
    CHECK_EQ(s->naddrs, 2);  /* the realloc'ed block and the aligned one leak */
    CHECK_EQ(s->stacked, 9); /* every alloc above has its stack */
    CHECK_EQ(s->commits64k, 1);
    CHECK_EQ(s->releases64k, 1);
    CHECK_EQ(s->big_commits, 0); /* the allocator's own mmap is heap, not a commit */
    CHECK_EQ(s->exits, 1);
    CHECK_EQ(s->exit_code, 7);
    if (s->modules < 2)
        fprintf(stderr, "modules: %llu\n", (unsigned long long)s->modules);
    CHECK(s->modules >= 2);
    CHECK_EQ(st->lost, 0);
    CHECK_STR(s->reason, "target exited (code 7)");
}

static void test_exact_counts(void)
{
    need_root();
    static struct seen s;
    struct bpf_tracer_params p = {.stacks = HB_STACKS_FP, .stack_depth = 64};
    struct bpf_tracer_stats st;
    int status = 0;
    run_target(&p, &s, &st, &status);
    if (ht_test_failed)
        return;
    check_counts(&s, &st, status);
    stack_intern_close(&s.si);
}

/* One perf-event link per probe (kernels before uprobe_multi). */
static void test_single_links(void)
{
    need_root();
    static struct seen s;
    struct bpf_tracer_params p = {.stacks = HB_STACKS_FP, .stack_depth = 64, .no_multi = 1};
    struct bpf_tracer_stats st;
    int status = 0;
    run_target(&p, &s, &st, &status);
    if (ht_test_failed)
        return;
    CHECK_EQ(st.multi, 0);
    check_counts(&s, &st, status);
    stack_intern_close(&s.si);
}

/* Linked with jemalloc: its functions are found first and probed. */
static void test_jemalloc_counts(void)
{
    need_root();
    if (!BPF_TARGET_JE[0]) {
        printf("skip: no libjemalloc to link the target with (libjemalloc-dev)\n");
        exit(HT_TEST_SKIP);
    }
    static struct seen s;
    struct bpf_tracer_params p = {.stacks = HB_STACKS_FP, .stack_depth = 64};
    struct bpf_tracer_stats st;
    int status = 0;
    target_path = BPF_TARGET_JE;
    run_target(&p, &s, &st, &status);
    if (ht_test_failed)
        return;
    check_counts(&s, &st, status);
    CHECK(s.jemalloc_probes > 0);
    stack_intern_close(&s.si);
}

/* libstdc++'s operator new calls malloc: each C++ allocation is counted once
 * (through malloc), and a bad_alloc thrown through new reaches its catch (a
 * return probe on new would make the unwinder terminate the target). */
static void test_cxx_new_once(void)
{
    need_root();
    static struct seen s;
    struct bpf_tracer_params p = {.stacks = HB_STACKS_FP, .stack_depth = 64};
    struct bpf_tracer_stats st;
    int status = 0;
    if (!BPF_TARGET_CXX[0]) {
        printf("skip: no C++ compiler to build the C++ target\n");
        exit(HT_TEST_SKIP);
    }
    target_path = BPF_TARGET_CXX;
    run_target(&p, &s, &st, &status);
    if (ht_test_failed)
        return;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK_EQ(s.cxx_allocs, 7);
    CHECK(s.exe_hi > 0);
    CHECK_EQ(s.cxx_in_exe, 7); /* the stacks reach the program's own code */
    CHECK_EQ(s.exit_code, 7);
    stack_intern_close(&s.si);
}

/* The syscalls through tp_btf/sys_enter+exit (no tracefs), DWARF stacks. */
static void test_tp_btf_dwarf(void)
{
    need_root();
    static struct seen s;
    struct bpf_tracer_params p = {.stacks = HB_STACKS_DWARF, .stack_depth = 64, .force_tp_btf = 1};
    struct bpf_tracer_stats st;
    int status = 0;
    run_target(&p, &s, &st, &status);
    if (ht_test_failed)
        return;
    CHECK_EQ(st.tracepoints, 2);
    CHECK_EQ(s.alloc777, 6);
    CHECK_EQ(s.frees, 7);
    CHECK_EQ(s.stacked, 9);
    CHECK_EQ(s.commits64k, 1);
    CHECK_EQ(s.releases64k, 1);
    CHECK_EQ(s.big_commits, 0);
    CHECK_EQ(s.exit_code, 7);
    CHECK_EQ(st.unwind_failures, 0);
    stack_intern_close(&s.si);
}

static void test_nothing_left(void)
{
    need_root();
    unsigned progs0, links0, progs1, links1, progs2, links2;
    kernel_objects(&progs0, &links0);
    struct child c;
    CHECK(child_start(&c) == 0);
    struct bpf_tracer_params p = {
        .pid = (uint64_t)c.pid, .stacks = HB_STACKS_DWARF, .stack_depth = 64};
    struct bpf_tracer *t;
    char err[512];
    CHECK_EQ(bpf_tracer_new(&t, &p, err, sizeof(err)), 0);
    CHECK_EQ(attach_checked(t, &c), 0);
    kernel_objects(&progs1, &links1);
    bpf_tracer_free(t); /* never run: freed straight after attach */
    kernel_objects_settle(progs0, links0, &progs2, &links2);
    kill(c.pid, SIGKILL);
    child_reap(&c);
    printf("programs %u -> %u -> %u, links %u -> %u -> %u\n", progs0, progs1, progs2, links0,
           links1, links2);
    CHECK(progs1 > progs0 && links1 > links0);
    CHECK_EQ(progs2, progs0);
    CHECK_EQ(links2, links0);
}

static void test_already_attached(void)
{
    need_root();
    struct child c;
    CHECK(child_start(&c) == 0);
    struct bpf_tracer_params p = {.pid = (uint64_t)c.pid, .stacks = HB_STACKS_NONE};
    struct bpf_tracer *t, *t2 = NULL;
    char err[512];
    CHECK_EQ(bpf_tracer_new(&t, &p, err, sizeof(err)), 0);
    int rc = bpf_tracer_new(&t2, &p, err, sizeof(err));
    printf("second attach: %s\n", err);
    bpf_tracer_free(t);
    kill(c.pid, SIGKILL);
    child_reap(&c);
    CHECK_EQ(rc, HT_EEXIST);
    CHECK(strstr(err, "already traced") != NULL);
}

static void test_no_such_pid(void)
{
    need_root();
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0); /* gone and reaped */
    struct bpf_tracer_params p = {.pid = (uint64_t)pid};
    struct bpf_tracer *t = NULL;
    char err[512];
    int rc = bpf_tracer_new(&t, &p, err, sizeof(err));
    printf("error: %s\n", err);
    CHECK_EQ(rc, UV_ESRCH);
    CHECK(strstr(err, "no process") != NULL);
}

/* The daemon's own PID is refused: its allocations while it takes the events would feed the
 * trace. */
static void test_self_refused(void)
{
    need_root();
    struct bpf_tracer_params p = {.pid = (uint64_t)getpid()};
    struct bpf_tracer *t = NULL;
    char err[512] = "";
    int rc = bpf_tracer_new(&t, &p, err, sizeof(err));
    printf("error: %s\n", err);
    CHECK_EQ(rc, HT_EBADARG);
    CHECK(t == NULL);
    CHECK(strstr(err, "itself") != NULL);
}

/* A kernel thread (kthreadd, PID 2 in the initial PID namespace) has no allocator: said so,
 * not "a static binary". */
static void test_kernel_thread(void)
{
    need_root();
    char name[32] = "";
    FILE *f = fopen("/proc/2/comm", "r");
    if (!f || !fgets(name, sizeof(name), f) || strcmp(name, "kthreadd\n") != 0) {
        printf("skip: PID 2 is not kthreadd here (a PID namespace)\n");
        if (f)
            fclose(f);
        exit(HT_TEST_SKIP);
    }
    fclose(f);
    struct bpf_tracer_params p = {.pid = 2};
    struct bpf_tracer *t = NULL;
    char err[512] = "";
    int rc = bpf_tracer_new(&t, &p, err, sizeof(err));
    printf("error: %s\n", err);
    CHECK_EQ(rc, HT_ENOTSUP);
    CHECK(t == NULL);
    CHECK(strstr(err, "kernel thread") != NULL);
}

HT_TEST_MAIN(T(exact_counts), T(single_links), T(tp_btf_dwarf), T(cxx_new_once), T(jemalloc_counts),
             T(nothing_left), T(already_attached), T(no_such_pid), T(self_refused),
             T(kernel_thread))
