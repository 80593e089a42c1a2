/*
 * The ETW source (source.h; Windows, HEAPTRACE_WITH_ETW): `start --pid N`
 * and `start --exe app.exe` (docs/windows.md). Windows allows one
 * heap logger per machine, so every heaptrace session of this daemon shares
 * the machine's sessions through the hub (etw-hub.h): the heap logger
 * (Wnode.Guid = HeapGuid, the union of the targets' PIDs and the stack-walk
 * hooks in its extension block, etw-props.h; restarted when a target is
 * added, the others' gap counted and said in the start reply) and one
 * system-logger session for VirtualAlloc/VirtualFree, process and image
 * events with stacks on VirtualAlloc. Each ETW session is consumed on its
 * own thread (ProcessTrace takes one real-time handle); the hub routes each
 * record by process to its heaptrace session's correlators (etw-stacks.h),
 * whose events go into that session's event ring, drained on the loop.
 * Private bytes are sampled on a thread per session; the target's exit is
 * noticed by waiting on its process handle (procwatch.h).
 *
 * --exe: IFEO TracingFlags for the image, journaled (ifeo.h), and the heap
 * logger for PID 0 (ifeo.h): processes of that image started afterwards log
 * their heap events, already running ones do not (the start reply says so).
 * The session takes the first of them to log (etw_corr_config.follow_first):
 * its heap, its symbols, its private bytes; each later process gets a
 * session of its own (sink.spawn: "<session>.<pid>", a child source fed by
 * this one's routing, kids[]), so two processes' addresses never share a
 * table (one's frees would pair with the other's allocations). The first
 * process's exit ends only its ring: the --exe session serves the image
 * until stopped, and its stop ends the children. The heap logger for PID 0
 * is not shared with --pid sessions (the hub refuses either while the other
 * runs: EFULL).
 *
 * Modules: the system logger's Image Load events (and its rundown at start)
 * for the target become module events: the engine's module table, and
 * DbgHelp's module list (their NT device paths mapped to drive letters,
 * etw_dos_path), so a DLL loaded after the start resolves too.
 *
 * One daemon runs ETW sessions per machine (a Global\ mutex held while the
 * hub runs); a heap session someone else runs (WPR, xperf, PerfView,
 * UIforETW) is reported by name and left alone.
 *
 * Not run on real Windows: under wine StartTraceW succeeds without a session
 * and OpenTraceW fails (wine 8), so start fails there with the
 * error of OpenTraceW, every session stopped and TracingFlags restored: that
 * path is what the tests exercise. The hub's logic (union, restarts, routing)
 * is tested on every platform (test-etw.hub).
 *
 * Threads: ops on the loop; the consumer threads run record_cb into the hub,
 * which delivers each record to its session outside its own mutex; a
 * sampler thread per session samples private bytes; a finisher thread ends
 * a session's ring after it left the hub. A session's producer side
 * (correlators, the ring's private interner, evring_put) runs under its
 * pmu, which the loop never takes; its rings never wait (evring_nowait: a
 * full ring drops, counted as ring_full_drops and a lost event), so no
 * thread the loop joins ever waits for the loop.
 */
#include "etw-int.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ifeo.h"
#include "modq.h"
#include "procmods.h"
#include "procwatch.h"
#include "rawtap.h"
#include "stack-intern.h"
#include "sym-snap.h"
#include "symbols.h"

#include <stdio.h>
#include <string.h>

/* Leave the hub, end the ring (on the finisher), give back TracingFlags
 * (loop). */
static void leave(struct etw_source *s)
{
    if (s->left)
        return;
    s->left = 1;
    uv_mutex_lock(&etw_kids_mu);
    if (s->parent) { /* a child: its parent routes nothing more here */
        struct etw_source *p = s->parent;
        for (unsigned i = 0; i < p->nkids; i++)
            if (p->kids[i].src == s) {
                p->kids[i].src = NULL;
                /* Exited: its pid may be a new process's later. Stopped by
                 * the user: its records are not traced again. */
                p->kids[i].state = s->exited ? KID_ENDED : KID_STOPPED;
            }
        s->parent = NULL;
    }
    for (unsigned i = 0; i < s->nkids; i++) { /* a parent: its children end too */
        struct etw_source *k = s->kids[i].src;
        if (!k)
            continue;
        uv_mutex_lock(&k->stmu);
        if (!k->reason[0])
            snprintf(k->reason, sizeof(k->reason), "the --exe session of its image stopped");
        uv_mutex_unlock(&k->stmu);
        k->parent = NULL;
        atomic_store(&k->hub_gone, 1);
        uv_async_send(k->wake);
        s->kids[i].src = NULL;
        s->kids[i].state = KID_ENDED;
    }
    uv_mutex_unlock(&etw_kids_mu);
    if (s->watch) {
        procwatch_stop(s->watch);
        s->watch = NULL;
    }
    if (s->exit_timer)
        uv_timer_stop(s->exit_timer);
    SetEvent(s->quit_event); /* the sampler stops (joined by the finisher) */
    if (s->sub.attached) {
        etw_hub_detach(etw_machine_hub, &s->sub);
        etw_machine_close_if_idle();
    }
    etw_finish_ring(s);
    if (s->ifeo_set) {
        char err[200];
        if (ifeo_restore(IFEO_JOURNAL_KEY, s->image, err, sizeof(err)) == 0)
            s->ifeo_set = 0; /* else the journal keeps it for the next start */
    }
}

/* ---- loop side ---- */

static void ring_ready(void *data)
{
    struct etw_source *s = data;
    if (s->outer.ready)
        s->outer.ready(s->outer.arg);
}

static void exited_cb(void *arg, uint64_t pid, int known, int code);

/* --exe: the followed process is known: its exit watch, its symbols, its
 * private bytes. */
static void follow_start(struct etw_source *s, uint64_t pid)
{
    if (s->watch || s->stopped || s->left)
        return;
    s->pid = pid;
    if (procwatch_start(s->loop, pid, exited_cb, s, &s->watch) != 0)
        s->watch = NULL; /* gone already: a stop ends the session */
    atomic_store(&s->syms_pid, pid); /* its cache is made under the symbolizer lock */
    if (!atomic_load(&s->sampler_running) &&
        uv_thread_create(&s->sampler, etw_sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
}

/* Module events wait in the queue for DbgHelp (applied under the
 * symbolizer lock by sym_sync or the next symbolize), so a DLL loaded after
 * the start resolves (its path mapped to a drive letter). */
static int events_cb(void *arg, struct ht_event *evs, size_t n)
{
    struct etw_source *s = arg;
    for (size_t i = 0; i < n; i++) {
        const struct ht_event *ev = &evs[i];
        if (ev->kind == HT_EV_PROCESS && s->exe_mode && ev->size)
            follow_start(s, ev->size);
        if (!s->q.ready)
            continue;
        if (ev->kind == HT_EV_MODULE_LOAD) {
            const char *path = stack_intern_strget(s->outer.si, (uint32_t)ev->heap);
            modq_push(&s->q, 1, ev->addr, ev->addr + ev->size, ev->addr, path ? path : "", "");
        } else if (ev->kind == HT_EV_MODULE_UNLOAD) {
            modq_push(&s->q, 0, ev->addr, 0, 0, "", "");
        }
    }
    int rc = s->outer.events(s->outer.arg, evs, n);
    if (rc == 0)
        s->delivered += n;
    return rc;
}

static void process_fwd(void *arg, const struct source_process *p)
{
    struct etw_source *s = arg;
    if (s->outer.process)
        s->outer.process(s->outer.arg, p);
}

/* The target exited: its last records may still be in ETW's buffers
 * (flushed every second: FlushTimer 1, etw-logger-win.c): the session leaves the hub
 * two seconds later; what comes for that process after is unrouted. */
#define EXIT_GRACE_MS 2000

static void exit_over(struct etw_source *s)
{
    if (s->exe_mode)
        etw_finish_ring(s); /* its process is over; the image's later ones still come (kids) */
    else
        leave(s);
}

static void exit_timer_cb(uv_timer_t *t)
{
    exit_over(t->data);
}

static void exited_cb(void *arg, uint64_t pid, int known, int code)
{
    struct etw_source *s = arg;
    (void)pid;
    uv_mutex_lock(&s->stmu);
    if (known)
        snprintf(s->reason, sizeof(s->reason), "target exited (code %d)", code);
    else
        snprintf(s->reason, sizeof(s->reason), "target exited");
    uv_mutex_unlock(&s->stmu);
    procwatch_stop(s->watch); /* safe from within its callback */
    s->watch = NULL;
    s->exited = 1;
    if (!s->exit_timer || uv_timer_start(s->exit_timer, exit_timer_cb, EXIT_GRACE_MS, 0) != 0)
        exit_over(s);
}

static void handle_free_cb(uv_handle_t *h)
{
    ht_free(h);
}

static int etw_available(char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    return 0; /* privileges are checked by StartTraceW itself (access denied: EPERM) */
}

static void etw_close(struct source *base);

/* What start asks of the ETW source: 0, or a negative code with err set. */
static int open_check(const struct source_params *p, char *err, size_t errsz)
{
    if (p->mode != SOURCE_PID && p->mode != SOURCE_IMAGE) {
        snprintf(err, errsz, "the ETW source traces a running process (start --pid) or an image "
                             "name (start --exe)");
        return HT_ENOTSUP;
    }
    if (p->mode == SOURCE_IMAGE) {
        int rc = ifeo_check_name(p->image, err, errsz);
        if (rc)
            return rc;
    }
    if (p->no_heap && (p->no_virtual || p->mode == SOURCE_IMAGE)) {
        snprintf(err, errsz, "nothing to trace: no heap, and no VirtualAlloc (--exe traces the heap "
                             "only)");
        return HT_EBADARG;
    }
    if (p->mode == SOURCE_PID && (p->pid == 0 || p->pid > UINT32_MAX)) {
        snprintf(err, errsz, "no such process: %llu", (unsigned long long)p->pid);
        return UV_ESRCH;
    }
    const struct etw_source *par = (const struct etw_source *)p->parent;
    if (par && (p->mode != SOURCE_PID || par->base.ops != &source_etw_ops || !par->exe_mode)) {
        snprintf(err, errsz, "an ETW child session takes a process of a start --exe session");
        return HT_EBADARG;
    }
    return 0;
}

/* Its handles on the loop, its event ring, raw tap and module queue: 0 or a
 * negative code. */
static int open_handles(struct etw_source *s, uv_loop_t *loop, const struct source_params *p)
{
    s->quit_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->exit_timer = ht_calloc(1, sizeof(*s->exit_timer));
    s->wake = ht_calloc(1, sizeof(*s->wake));
    if (s->exit_timer && uv_timer_init(loop, s->exit_timer) == 0) {
        s->exit_timer->data = s;
    } else {
        ht_free(s->exit_timer);
        s->exit_timer = NULL;
    }
    if (s->wake && uv_async_init(loop, s->wake, etw_wake_cb) == 0) {
        s->wake->data = s;
    } else {
        ht_free(s->wake);
        s->wake = NULL;
    }
    struct evring_limits lim = {RING_EVENTS, p->max_stacks, p->max_strings, p->max_name_len,
                                p->budget};
    int rc = evring_new(&s->ring, loop, &lim, ring_ready, s);
    if (rc == 0)
        evring_nowait(s->ring); /* a consumer never waits for the loop (evring.h) */
    if (rc == 0)
        rc = rawtap_new(&s->tap, loop, RAWTAP_BYTES_DEFAULT, &s->acct, etw_tap_ready, s);
    if (rc == 0)
        rc = modq_init(&s->q, &s->acct);
    return rc;
}

static int etw_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                    const struct source_sink *sink, char *err, size_t errsz)
{
    *out = NULL;
    int rc = open_check(p, err, errsz);
    if (rc)
        return rc;
    const struct etw_source *par = (const struct etw_source *)p->parent;
    etw_kids_setup();
    struct etw_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_etw_ops;
    s->outer = *sink;
    s->base.sink = *sink;
    s->base.sink.arg = s;
    s->base.sink.events = events_cb;
    s->base.sink.process = process_fwd;
    s->loop = loop;
    s->pid = p->mode == SOURCE_PID ? p->pid : 0;
    s->exe_mode = p->mode == SOURCE_IMAGE;
    if (s->exe_mode)
        snprintf(s->image, sizeof(s->image), "%s", p->image);
    s->child_of = (struct etw_source *)p->parent;
    if (s->child_of)
        snprintf(s->image, sizeof(s->image), "%s", par->image);
    s->stacks = p->stacks != SOURCE_STACKS_NONE;
    s->no_heap = p->no_heap;
    s->no_virtual = p->no_virtual || s->exe_mode || s->child_of; /* --exe: heap only */
    s->sample_ns = p->sample_ns;
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    s->snap_ready = sym_snap_init(&s->snap) == 0;
    uv_mutex_init(&s->pmu);
    uv_mutex_init(&s->stmu);
    rc = open_handles(s, loop, p);
    if (rc || !s->quit_event || !s->wake) {
        snprintf(err, errsz, "cannot set up the event ring");
        etw_close(&s->base);
        return rc ? rc : UV_ENOMEM;
    }
    if (s->pid) {
        rc = procwatch_start(loop, s->pid, exited_cb, s, &s->watch);
        if (rc) {
            snprintf(err, errsz, "process %llu: %s", (unsigned long long)s->pid,
                     rc == UV_ENOENT ? "no such process" : uv_strerror(rc));
            etw_close(&s->base);
            return rc == UV_ENOENT ? UV_ESRCH : rc;
        }
        if (!s->snap_ready || sym_cache_new(&s->syms, s->pid, &s->sym_acct, MEM_symbols) != 0)
            s->syms = NULL;
    }
    *out = &s->base;
    return 0;
}

/* The process, before any event (start's reply shows it): its name and
 * its modules for DbgHelp. */
void etw_announce_process(struct etw_source *s)
{
    struct procmods_module *mods;
    size_t n;
    char name[260] = "";
    if (procmods_list(s->pid, &mods, &n) == 0 && n > 0) {
        snprintf(name, sizeof(name), "%s", procmods_basename(mods[0].path));
        for (size_t i = 0; s->syms && i < n; i++)
            sym_cache_add_module(s->syms, mods[i].base, mods[i].base + mods[i].size, mods[i].base,
                                 mods[i].path, NULL);
        if (s->syms && s->snap_ready) /* no worker has the cache yet: before start's reply */
            sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
    } else {
        mods = NULL;
    }
    uv_mutex_lock(&s->stmu);
    snprintf(s->name, sizeof(s->name), "%s", name[0] ? name : s->image);
    uv_mutex_unlock(&s->stmu);
    struct source_process sp = {.pid = s->pid, .name = s->name, .wall = ""};
    if (s->outer.process)
        s->outer.process(s->outer.arg, &sp);
    ht_free(mods);
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = s->pid};
    s->outer.events(s->outer.arg, &ev, 1);
}

static int etw_start(struct source *base, char *err, size_t errsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->started)
        return 0;
    if (s->child_of)
        return etw_child_start(s, err, errsz);
    int rc = etw_machine_open(err, errsz);
    if (rc)
        return rc;
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    s->start_qpc = (uint64_t)t.QuadPart;
    if ((!s->no_heap && etw_corr_make(s, ETW_HUB_HEAP) != 0) ||
        (!s->no_virtual && etw_corr_make(s, ETW_HUB_KERNEL) != 0)) {
        snprintf(err, errsz, "out of memory for the stack correlators");
        etw_machine_close_if_idle();
        return UV_ENOMEM;
    }
    if (s->exe_mode) {
        /* Refused by the hub before anything changes when --pid sessions
         * run: checked here too, so TracingFlags are not set for nothing. */
        if (etw_hub_count(etw_machine_hub) > 0) {
            snprintf(err, errsz, "other sessions trace running processes: the heap logger traces "
                                 "every new process of an image (start --exe) or a list of "
                                 "running processes (start --pid), not both at once");
            return HT_EFULL;
        }
        rc = ifeo_enable(IFEO_JOURNAL_KEY, s->image, err, errsz);
        if (rc) {
            etw_machine_close_if_idle();
            return rc;
        }
        s->ifeo_set = 1;
    }
    if (s->pid)
        etw_announce_process(s);
    s->sub.pid = (uint32_t)s->pid;
    s->sub.heap = !s->no_heap;
    s->sub.virt = !s->no_virtual;
    s->sub.stacks = s->stacks;
    s->sub.deliver = etw_deliver_cb;
    s->sub.session_ended = etw_session_ended_cb;
    s->sub.arg = s;
    atomic_store(&s->sessions_left, s->sub.heap + s->sub.virt);
    rc = etw_hub_attach(etw_machine_hub, &s->sub, &s->restarted, err, errsz);
    if (rc) {
        if (s->ifeo_set) {
            char e2[200];
            if (ifeo_restore(IFEO_JOURNAL_KEY, s->image, e2, sizeof(e2)) == 0)
                s->ifeo_set = 0;
        }
        etw_machine_close_if_idle();
        return rc;
    }
    s->started = 1;
    if (s->pid && uv_thread_create(&s->sampler, etw_sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
    return 0;
}

static int etw_drain(struct source *base, size_t budget)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->ended || !s->ring)
        return 0;
    if (atomic_exchange(&s->hub_gone, 0))
        leave(s); /* the sessions it takes ended */
    int rc = evring_drain(s->ring, &s->base.sink, budget);
    if (rc < 0)
        return -1;
    rawtap_flush(s->tap, &s->outer);
    /* An --exe session whose first process exited goes on serving the
     * image's later processes until it is stopped. */
    if (rc == 0 && evring_finished(s->ring) && (!s->exe_mode || s->left)) {
        rawtap_flush(s->tap, &s->outer);
        char reason[160];
        s->ended = 1;
        uv_mutex_lock(&s->stmu);
        snprintf(reason, sizeof(reason), "%s", s->reason[0] ? s->reason : "tracing stopped");
        uv_mutex_unlock(&s->stmu);
        if (s->outer.ended)
            s->outer.ended(s->outer.arg, reason);
        return 0;
    }
    return rc;
}

static void etw_stop(struct source *base)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->stopped)
        return;
    s->stopped = 1;
    leave(s);
}

static void etw_close(struct source *base)
{
    if (!base)
        return;
    struct etw_source *s = (struct etw_source *)base;
    etw_stop(base);
    if (s->ring)
        evring_quit(s->ring); /* a finisher or sampler waiting for room returns */
    if (s->finisher_running) {
        uv_thread_join(&s->finisher);
        s->finisher_running = 0;
    }
    etw_sampler_join(s);          /* when no finisher ran (start failed) */
    etw_hub_quiesce(&s->sub);     /* no deliver call still holds it (the hub's or a parent's) */
    etw_corr_free(s->corr[0]);
    etw_corr_free(s->corr[1]);
    rawtap_free(s->tap); /* before the accounting closes: its buffer is charged there */
    if (s->ring)
        evring_free(s->ring);
    if (s->syms)
        sym_cache_free(s->syms);
    mem_acct_close(&s->sym_acct);
    if (s->snap_ready)
        sym_snap_destroy(&s->snap);
    modq_free(&s->q, &s->acct);
    if (s->quit_event)
        CloseHandle(s->quit_event);
    if (s->exit_timer)
        uv_close((uv_handle_t *)s->exit_timer, handle_free_cb);
    if (s->wake)
        uv_close((uv_handle_t *)s->wake, handle_free_cb);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->pmu);
    uv_mutex_destroy(&s->stmu);
    ht_free(s);
}

/* Under the symbolizer lock: the cache made once the process is known
 * (--exe), the queued module events applied in order, its counters into
 * the snapshot. */
static void etw_sym_sync(struct source *base)
{
    struct etw_source *s = (struct etw_source *)base;
    uint64_t pid = atomic_load(&s->syms_pid);
    if (!s->syms && pid && s->snap_ready &&
        sym_cache_new(&s->syms, pid, &s->sym_acct, MEM_symbols) != 0)
        s->syms = NULL;
    if (!s->syms)
        return;
    if (modq_apply(&s->q, s->syms, 0) && s->snap_ready)
        sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
}

/* Stack frames are return addresses: looked up as addr - 1. */
static const char *etw_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz)
{
    struct etw_source *s = (struct etw_source *)base;
    etw_sym_sync(base);
    if (!s->syms)
        return NULL;
    const char *r = sym_cache_resolve(s->syms, addr, 1, buf, bufsz);
    if (s->snap_ready)
        sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
    return r;
}

const struct source_ops source_etw_ops = {
    .name = "etw",
    .modes = SOURCE_PID | SOURCE_IMAGE,
    .summary = "ETW heap logger (shared: the union of the targets) and VirtualAlloc "
               "system-logger sessions with stack walks (Windows, administrator)",
    .available = etw_available,
    .open = etw_open,
    .start = etw_start,
    .drain = etw_drain,
    .stop = etw_stop,
    .close = etw_close,
    .stats = etw_stats,
    .status_json = etw_status_json,
    .space = NULL,
    .write = NULL,
    .close_input = NULL,
    .symbolize = etw_symbolize,
    .sym_sync = etw_sym_sync,
    .recover = etw_recover,
    .raw_tap = etw_src_raw_tap,
    .raw_join = etw_src_raw_join,
};
