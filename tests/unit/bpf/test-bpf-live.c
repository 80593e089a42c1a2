/* The eBPF tracer attached to a real process with known allocations (needs root). */
#include "ht-error.h"
#include "ht-test.h"
#include "stack-intern.h"
#include "tracer.h"

#include <bpf/bpf.h>
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

static void alloc_seen(struct seen *s, const struct ht_event *ev)
{
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
        execl(BPF_TARGET, BPF_TARGET, (char *)NULL);
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

/* Our programs loaded in the kernel, and every BPF link: both must come back to
 * what they were once the tracer is freed (what `bpftool prog`/`link` list). */
static void kernel_objects(unsigned *progs, unsigned *links)
{
    uint32_t id = 0;
    *progs = *links = 0;
    while (bpf_prog_get_next_id(id, &id) == 0) {
        int fd = bpf_prog_get_fd_by_id(id);
        struct bpf_prog_info info;
        uint32_t len = sizeof(info);
        memset(&info, 0, sizeof(info));
        if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
            strncmp(info.name, "ht_", 3) == 0)
            (*progs)++;
        if (fd >= 0)
            close(fd);
    }
    id = 0;
    while (bpf_link_get_next_id(id, &id) == 0)
        (*links)++;
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

static void test_exact_counts(void)
{
    need_root();
    static struct seen s;
    uv_mutex_init(&s.lock);
    stack_intern_init(&s.si, 4096, 4096);
    unsigned progs0, links0, progs1, links1;
    kernel_objects(&progs0, &links0);
    struct child c;
    CHECK(child_start(&c) == 0);
    struct bpf_tracer_params p = {
        .pid = (uint64_t)c.pid, .stacks = HB_STACKS_FP, .stack_depth = 64};
    struct bpf_tracer *t;
    char err[512];
    int rc = bpf_tracer_new(&t, &p, err, sizeof(err));
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
    rc = bpf_tracer_attach(t, err, sizeof(err));
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
    struct bpf_tracer_sink k = sink_of(&s);
    CHECK_EQ(bpf_tracer_run(t, &k, err, sizeof(err)), 0);
    child_say(&c);
    char line[64];
    CHECK(fgets(line, sizeof(line), c.from) != NULL);
    child_say(&c); /* exit with 7; not reaped until the tracer saw it */
    wait_done(&s, 5000);
    int status = child_reap(&c);
    struct bpf_tracer_stats st;
    bpf_tracer_stats(t, &st);
    kernel_objects(&progs1, &links1);
    CHECK(progs1 > progs0);
    bpf_tracer_free(t);
    printf("reason: %s; probes %u links %u records %llu lost %llu attach %.1f ms\n", s.reason,
           st.probes, st.links, (unsigned long long)st.records, (unsigned long long)st.lost,
           st.attach_ns / 1e6);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK(atomic_load(&s.done));
    CHECK_EQ(s.alloc777, 6); /* 5 malloc + calloc(3, 259) */
    CHECK_EQ(s.realloc7777, 1);
    CHECK_EQ(s.alloc555, 1);
    CHECK_EQ(s.alloc2048, 1);
    CHECK_EQ(s.alloc_big, 1);
    CHECK_EQ(s.frees, 7);   /* 5 x 777, 555, the big block */
    CHECK_EQ(s.naddrs, 2);  /* the realloc'ed block and the aligned one leak */
    CHECK_EQ(s.stacked, 9); /* every alloc above has its stack */
    CHECK_EQ(s.commits64k, 1);
    CHECK_EQ(s.releases64k, 1);
    CHECK_EQ(s.big_commits, 0); /* malloc's own mmap is heap, not a commit */
    CHECK_EQ(s.exits, 1);
    CHECK_EQ(s.exit_code, 7);
    CHECK(s.modules >= 2);
    CHECK_EQ(st.lost, 0);
    CHECK_STR(s.reason, "target exited (code 7)");
    kernel_objects(&progs1, &links1);
    CHECK_EQ(progs1, progs0);
    CHECK_EQ(links1, links0);
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
    CHECK_EQ(bpf_tracer_attach(t, err, sizeof(err)), 0);
    kernel_objects(&progs1, &links1);
    bpf_tracer_free(t); /* never run: freed straight after attach */
    kernel_objects(&progs2, &links2);
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

HT_TEST_MAIN(T(exact_counts), T(nothing_left), T(already_attached), T(no_such_pid))
