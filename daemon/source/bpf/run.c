/* The eBPF consumer thread: ring records to events, lost counts, modules, private bytes, exit. */
#include "tracer-int.h"

#include "heaptrace.skel.h"
#include "ht-alloc.h"
#include "procmem.h"
#include "procwatch.h"
#include "unwind.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/* The consumer wakes this often when the kernel side does not wake it
 * (wakeups only past a quarter of the ring: docs/linux.md#ring-buffer-and-event-rates). */
#define POLL_MS 10

static uint64_t now_rel(struct bpf_tracer *t)
{
    uint64_t n = bpf_now_ns();
    return n > t->t0 ? n - t->t0 : 0;
}

static int put(struct bpf_tracer *t, const struct ht_event *ev)
{
    if (t->sink.emit.event(t->sink.emit.arg, ev))
        return -1;
    t->cons.events++;
    return 0;
}

static int ring_cb(void *ctx, void *data, size_t size)
{
    struct bpf_tracer *t = ctx;
    if (t->discarding) { /* stopped: what the ring still holds is counted, not converted */
        t->cons.undelivered++;
        return 0;
    }
    return bpf_consume_record(&t->cons, data, size) ? -ECANCELED : 0;
}

static int module_put(struct bpf_tracer *t, const struct procmaps_module *m, int load)
{
    struct ht_event ev = {.t = now_rel(t), .addr = m->start};
    ev.kind = load ? HT_EV_MODULE_LOAD : HT_EV_MODULE_UNLOAD;
    if (load) {
        ev.size = m->end - m->start;
        ev.old_addr = m->bias;
        ev.heap = t->sink.str(t->sink.emit.arg, m->path, (unsigned)strlen(m->path));
        if (m->build_id[0])
            ev.old_size = t->sink.str(t->sink.emit.arg, m->build_id, (unsigned)strlen(m->build_id));
    }
    return put(t, &ev);
}

static int module_in(const struct procmaps_module *ms, size_t n, const struct procmaps_module *m)
{
    for (size_t i = 0; i < n; i++)
        if (ms[i].start == m->start && strcmp(ms[i].path, m->path) == 0)
            return 1;
    return 0;
}

static int exec_cb(void *arg, const struct procmaps_entry *e)
{
    struct bpf_tracer *t = arg;
    if (e->prot & PROT_EXEC)
        bpf_consumer_exec_add(&t->cons, e->start, e->end);
    return 0;
}

/* The executable mappings, read whole (frames outside them are cut). */
static void exec_read(struct bpf_tracer *t)
{
    bpf_consumer_exec_reset(&t->cons);
    procmaps_each(t->p.pid, exec_cb, t);
}

/* Read the module list again and report what changed. */
static int modules_scan(struct bpf_tracer *t)
{
    struct procmaps_module *ms;
    size_t n;
    if (procmaps_modules(t->p.pid, &ms, &n))
        return 0; /* gone: the exit comes through the pidfd */
    int rc = 0;
    for (size_t i = 0; i < t->nmods && !rc; i++)
        if (!module_in(ms, n, &t->mods[i]))
            rc = module_put(t, &t->mods[i], 0);
    for (size_t i = 0; i < n && !rc; i++)
        if (!module_in(t->mods, t->nmods, &ms[i]))
            rc = module_put(t, &ms[i], 1);
    ht_free(t->mods);
    t->mods = ms;
    t->nmods = n;
    exec_read(t);
    if (t->cons.uw)
        unwinder_refresh(t->cons.uw);
    return rc;
}

/* Records the ring had no room for, summed over CPUs: 0 when unreadable. */
/* Sum over CPUs of the program's counter k (heaptrace.bpf.c "drops"). */
static uint64_t counter_read(struct bpf_tracer *t, uint32_t k)
{
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || ncpu > 4096)
        return 0;
    uint64_t vals[ncpu], sum = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(t->skel->maps.drops), &k, vals))
        return 0;
    for (int i = 0; i < ncpu; i++)
        sum += vals[i];
    return sum;
}

/* Everything the program lost: ring drops, and calls and syscalls whose
 * state found no room (each counted also under its own name in status). */
static uint64_t drops_read(struct bpf_tracer *t)
{
    return counter_read(t, HB_CNT_RING) + counter_read(t, HB_CNT_THREAD_FULL) +
           counter_read(t, HB_CNT_SYSCALL_FULL);
}

/* New drops become a lost event. */
static int lost_check(struct bpf_tracer *t)
{
    uint64_t sum = drops_read(t);
    int rc = bpf_consume_drops(&t->cons, sum, bpf_now_ns());
    t->lost_seen = t->cons.drops_seen;
    return rc;
}

static int private_sample(struct bpf_tracer *t)
{
    uint64_t now = bpf_now_ns();
    if (now < t->next_sample)
        return 0;
    t->next_sample = now + t->p.sample_ns;
    struct procmem pm;
    if (procmem_read(t->p.pid, &pm))
        return 0;
    /* Sent when it changed, else once per four samples (a heartbeat that
     * moves the session's clock while the target is idle): an idle target
     * makes no stream of identical events. */
    if (t->private_sent && pm.private_bytes == t->last_private &&
        now - t->last_private_t < 4 * t->p.sample_ns)
        return 0;
    t->private_sent = 1;
    t->last_private = pm.private_bytes;
    t->last_private_t = now;
    /* The records the kernel ring holds were taken before now: they go
     * first, or each would follow a sample stamped later than itself and
     * count as time going backwards (49-80 a second on a malloc loop). */
    if (ring_buffer__consume(t->rb) == -ECANCELED)
        return 1;
    struct ht_event ev = {.t = now_rel(t), .kind = HT_EV_PRIVATE_BYTES, .size = pm.private_bytes};
    return put(t, &ev);
}

static void stats_publish(struct bpf_tracer *t)
{
    /* Syscalls: outside the lock. */
    uint64_t orphans = counter_read(t, HB_CNT_NO_ENTRY);
    uint64_t ring = counter_read(t, HB_CNT_RING), thread = counter_read(t, HB_CNT_THREAD_FULL);
    uint64_t sys = counter_read(t, HB_CNT_SYSCALL_FULL), hint = counter_read(t, HB_CNT_HINT_FULL);
    struct unwinder_stats us;
    unwinder_stats(t->cons.uw, &us);
    uv_mutex_lock(&t->stats_lock);
    t->st.records = t->cons.records;
    t->st.events = t->cons.events;
    t->st.malformed = t->cons.malformed;
    t->st.unwind_failures = t->cons.unwind_failures;
    t->st.stacks_outside_exec = t->cons.stacks_outside_exec;
    t->st.stacks_copy_short = t->cons.stacks_copy_short;
    t->st.unwind_fast = us.fast;
    t->st.unwind_fallbacks = us.fallbacks;
    t->st.unwind_rules = us.rules;
    t->st.unwind_rules_evicted = us.rules_evicted;
    t->st.exec_overflows = t->cons.exec.overflows;
    t->st.lost = t->lost_seen;
    t->st.undelivered = t->cons.undelivered;
    t->st.region_drops = t->cons.regions.drops;
    t->st.regions = t->cons.regions.n;
    t->st.returns_without_entry = orphans;
    t->st.ring_full = ring;
    t->st.thread_map_full = thread;
    t->st.syscall_map_full = sys;
    t->st.hint_map_full = hint;
    t->st.thread_map_entries = t->thread_cap;
    uv_mutex_unlock(&t->stats_lock);
}

static int tramp_cb(void *arg, const struct procmaps_entry *e)
{
    struct bpf_tracer *t = arg;
    if (strcmp(e->path, "[uprobes]") != 0)
        return 0;
    t->skel->bss->tramp_lo = e->start;
    t->skel->bss->tramp_hi = e->end;
    t->tramp_found = 1;
    return 1;
}

/* Tell the kernel side where the return probes' trampoline is: the page
 * appears at the first probe hit, so looked for once records come, every
 * 10 ms until found. */
static void tramp_find(struct bpf_tracer *t)
{
    if (t->tramp_found || t->cons.records == 0)
        return;
    procmaps_each(t->p.pid, tramp_cb, t);
}

static void exit_report(struct bpf_tracer *t, char *reason, size_t sz)
{
    int status;
    struct ht_event ev = {.t = now_rel(t), .kind = HT_EV_EXIT};
    if (procwatch_exit_status(t->p.pid, t->pidfd, &status) == 0) {
        if ((status & 0x7f) == 0) {
            ev.size = (uint64_t)((status >> 8) & 0xff);
            snprintf(reason, sz, "target exited (code %d)", (status >> 8) & 0xff);
        } else {
            ev.size = 128u + (uint64_t)(status & 0x7f);
            snprintf(reason, sz, "target killed by signal %d", status & 0x7f);
        }
    } else {
        /* Neither the zombie nor the pidfd told: an older kernel and a parent that reaped it. */
        snprintf(reason, sz, "target exited (exit code unknown)");
    }
    put(t, &ev);
}

/* The modules and name read at attach (a short-lived target may be gone by
 * the time this thread runs): the session's first events. */
static int start_report(struct bpf_tracer *t)
{
    int rc = 0;
    if (t->sink.process) { /* else the caller reported the process itself */
        t->sink.process(t->sink.emit.arg, t->p.pid, t->name);
        struct ht_event ev = {.t = 0, .kind = HT_EV_PROCESS, .size = t->p.pid};
        rc = put(t, &ev);
    }
    for (size_t i = 0; i < t->nmods && !rc; i++)
        rc = module_put(t, &t->mods[i], 1);
    return rc;
}

static int target_exited(struct bpf_tracer *t, const struct epoll_event *evs, int n)
{
    for (int i = 0; i < n; i++)
        if (evs[i].data.fd == t->pidfd)
            return 1;
    return 0;
}

/* Finishing: the programs take nothing any more (bpf_tracer_cut), so the ring
 * holds only records taken before; every one becomes an event (the sink
 * waits for room, the loop keeps draining), then the drops counted until
 * now; the links go at the end (bpf_tracer_end). 1: the consumer ends. */
static int finish_drain(struct bpf_tracer *t)
{
    int n;
    while ((n = ring_buffer__consume(t->rb)) > 0)
        ;
    if (n == 0)
        lost_check(t);
    return 1;
}

void bpf_tracer_thread(void *arg)
{
    struct bpf_tracer *t = arg;
    char reason[128] = "tracing stopped";
    int stop = start_report(t);
    while (!stop && !atomic_load(&t->quit)) {
        if (atomic_load(&t->finish)) {
            stop = finish_drain(t);
            break;
        }
        struct epoll_event evs[4];
        int n = epoll_wait(t->epfd, evs, 4, POLL_MS);
        int exited = n > 0 && target_exited(t, evs, n);
        stop = ring_buffer__consume(t->rb) == -ECANCELED;
        if (t->cons.exec_seen) {
            snprintf(reason, sizeof(reason),
                     "target executed a new program (exec): its earlier heap is gone, the trace "
                     "ends here");
            stop = 1;
        }
        if (!stop && t->cons.exec_mapped) {
            t->cons.exec_mapped = 0;
            stop = modules_scan(t);
        }
        if (!stop)
            stop = lost_check(t) || private_sample(t);
        tramp_find(t);
        stats_publish(t);
        if (exited && !stop) {
            ring_buffer__consume(t->rb);
            lost_check(t);
            exit_report(t, reason, sizeof(reason));
            stop = 1;
        }
        t->sink.idle(t->sink.emit.arg);
    }
    if (!stop) { /* told to quit: what the ring holds still counts */
        ring_buffer__consume(t->rb);
        lost_check(t);
    }
    /* Whatever could not be delivered (the ring to the loop quit at stop)
     * is counted: records left in the kernel ring and drops not reported. */
    t->discarding = 1;
    ring_buffer__consume(t->rb);
    uint64_t drops = drops_read(t);
    if (drops > t->cons.drops_seen) {
        t->cons.undelivered += drops - t->cons.drops_seen;
        t->cons.drops_seen = drops;
    }
    stats_publish(t);
    bpf_tracer_converted(t);
    /* The kernel's side goes here, before done: a session ended has given
     * it back, and the loop never waits for it. */
    bpf_tracer_end(t, reason);
}

int bpf_tracer_run(struct bpf_tracer *t, const struct bpf_tracer_sink *sink, char *err,
                   size_t errsz)
{
    t->sink = *sink;
    t->t0 = bpf_now_ns();
    bpf_consumer_init(&t->cons, &sink->emit, t->t0, t->p.stack_depth);
    exec_read(t);
    int rc = 0;
    if (t->p.stacks == HB_STACKS_DWARF && (rc = unwinder_new(&t->cons.uw, t->p.pid))) {
        snprintf(err, errsz, "cannot set up the DWARF unwinder for process %llu: %s",
                 (unsigned long long)t->p.pid, uv_strerror(rc));
        return rc;
    }
    t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.events), ring_cb, t, NULL);
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!t->rb || t->epfd < 0) {
        snprintf(err, errsz, "cannot set up the ring buffer consumer: %s", strerror(errno));
        return uv_translate_sys_error(errno);
    }
    struct epoll_event e = {.events = EPOLLIN};
    e.data.fd = ring_buffer__epoll_fd(t->rb);
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, e.data.fd, &e);
    e.data.fd = t->pidfd;
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->pidfd, &e);
    rc = uv_thread_create(&t->thread, bpf_tracer_thread, t);
    if (rc) {
        snprintf(err, errsz, "cannot start the consumer thread: %s", uv_strerror(rc));
        return rc;
    }
    t->running = 1;
    return 0;
}
