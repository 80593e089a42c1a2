/*
 * The ETW source (source.h; Windows, HEAPTRACE_WITH_ETW): `start --pid N`
 * and `start --exe app.exe` (etw-mechanics.md 1, 3, 5). Windows allows one
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
 * logger for PID 0 (1.5): processes of that image started afterwards log
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
 * and OpenTraceW fails (windows-build.md 3.5), so start fails there with the
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
#include "etw-decode.h"
#include "etw-hub.h"
#include "etw-props.h"
#include "etw-raw.h"
#include "etw-record-win.h"
#include "etw-stacks.h"
#include "evring.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ifeo.h"
#include "modq.h"
#include "procmem.h"
#include "procmods.h"
#include "procwatch.h"
#include "rawtap.h"
#include "source.h"
#include "stack-intern.h"
#include "sym-snap.h"
#include "symbols.h"

#include <windows.h>
#include <evntcons.h>
#include <evntrace.h>

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define HEAP_SESSION "heaptraced-heap"
#define KERNEL_SESSION "heaptraced-kernel"
#define RING_EVENTS (1u << 16)
#define PROPS_ROOM 2048 /* for the names ControlTraceW writes back */
/* The system logger's own GUID (never SystemTraceControlGuid, 3.1): a fixed
 * one of ours, {c1b4a57e-6e40-4c4c-9d0a-68656170747261}. */
static const struct etw_guid kernel_session_guid = {
    {0xc1, 0xb4, 0xa5, 0x7e, 0x6e, 0x40, 0x4c, 0x4c, 0x9d, 0x0a, 0x68, 0x65, 0x61, 0x70, 0x74, 0x72}};

const struct source_ops source_etw_ops;

/* --exe children (etw_source.kids). */
#define KIDS_MAX 64
enum { KID_PENDING = 1, KID_LIVE, KID_ENDED, KID_REFUSED, KID_STOPPED };
static uv_mutex_t kids_mu;
static uv_once_t kids_once = UV_ONCE_INIT;
static void kids_init(void)
{
    uv_mutex_init(&kids_mu);
}

/* ---- the machine's sessions: the hub and its Windows backend (loop) ---- */

struct consumer {
    TRACEHANDLE h;  /* StartTraceW's (0: not running) */
    TRACEHANDLE ph; /* OpenTraceW's, or INVALID_PROCESSTRACE_HANDLE */
    uv_thread_t thread;
    int running;
    atomic_int stopping; /* ProcessTrace returns because we stopped it */
    int which;           /* ETW_HUB_HEAP or ETW_HUB_KERNEL */
};

static struct etw_hub *hub; /* while any session of this daemon traces */
static struct consumer heap_c = {.which = ETW_HUB_HEAP}, kern_c = {.which = ETW_HUB_KERNEL};
static uint64_t qpc_freq;
static struct etw_dosmap dosmap; /* built when the hub starts, read by the consumers */

/* One daemon with ETW sessions per machine: a Global\ mutex it holds while
 * its hub runs; a crashed holder leaves it abandoned, which the next one
 * takes. A daemon recovers what a crashed run left only when it can take
 * the mutex, so it never stops another daemon's live sessions. */
#define ETW_MUTEX L"Global\\heaptraced-etw"
static HANDLE etw_mutex;

static int etw_mutex_take(void)
{
    HANDLE m = CreateMutexW(NULL, FALSE, ETW_MUTEX);
    if (!m)
        return -1;
    DWORD w = WaitForSingleObject(m, 0);
    if (w != WAIT_OBJECT_0 && w != WAIT_ABANDONED) {
        CloseHandle(m);
        return -1;
    }
    etw_mutex = m;
    return 0;
}

static void etw_mutex_give(void)
{
    if (etw_mutex) {
        ReleaseMutex(etw_mutex);
        CloseHandle(etw_mutex);
        etw_mutex = NULL;
    }
}

static void win_error(char *err, size_t errsz, const char *what, ULONG rc)
{
    char msg[160] = "";
    FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, rc, 0, msg,
                   sizeof(msg), NULL);
    size_t k = strlen(msg);
    while (k > 0 && (msg[k - 1] == '\n' || msg[k - 1] == '\r' || msg[k - 1] == '.'))
        msg[--k] = '\0';
    snprintf(err, errsz, "%s: %s (error %lu)", what, msg[0] ? msg : "failed", (unsigned long)rc);
}

static int map_error(ULONG rc)
{
    return rc == ERROR_ACCESS_DENIED ? HT_EPERM : rc == ERROR_ALREADY_EXISTS ? HT_EEXIST : HT_EINTERNAL;
}


static wchar_t *wide(const char *s, wchar_t *buf, int cap)
{
    if (!MultiByteToWideChar(CP_UTF8, 0, s, -1, buf, cap))
        buf[0] = 0;
    return buf;
}

/* Stop a session of ours by name (a previous run's, 5.5); no error if none. */
static void session_stop_by_name(const char *name)
{
    static uint8_t props[ETW_PROPS_SIZE + PROPS_ROOM] __attribute__((aligned(8)));
    char err[128];
    struct etw_session_spec spec = {.guid = &etw_guid_heap, .name = name};
    if (!etw_props_build(props, sizeof(props), &spec, PROPS_ROOM, err, sizeof(err)))
        return;
    wchar_t w[80];
    ControlTraceW(0, wide(name, w, 80), (EVENT_TRACE_PROPERTIES *)props, EVENT_TRACE_CONTROL_STOP);
}

/* A session's own counters (ControlTraceW QUERY, etw-mechanics.md 5.4):
 * events ETW could not log (all buffers full), buffers written, and
 * buffers it could not deliver to us (a slow consumer). 0, or -1 when the
 * session does not run. */
struct etw_session_counters {
    uint64_t events_lost, buffers_written, log_buffers_lost, realtime_buffers_lost, buffers;
};

static int session_query(const char *name, const struct etw_guid *guid,
                         struct etw_session_counters *out)
{
    static uint8_t props[ETW_PROPS_SIZE + PROPS_ROOM] __attribute__((aligned(8)));
    char err[128];
    struct etw_session_spec spec = {.guid = guid, .name = name};
    memset(out, 0, sizeof(*out));
    if (!etw_props_build(props, sizeof(props), &spec, PROPS_ROOM, err, sizeof(err)))
        return -1;
    wchar_t w[80];
    EVENT_TRACE_PROPERTIES *p = (EVENT_TRACE_PROPERTIES *)props;
    if (ControlTraceW(0, wide(name, w, 80), p, EVENT_TRACE_CONTROL_QUERY) != ERROR_SUCCESS)
        return -1;
    out->events_lost = p->EventsLost;
    out->buffers_written = p->BuffersWritten;
    out->log_buffers_lost = p->LogBuffersLost;
    out->realtime_buffers_lost = p->RealTimeBuffersLost;
    out->buffers = p->NumberOfBuffers;
    return 0;
}

/* The name of a running heap session that is not ours, or "" (1.6). */
static void foreign_heap_session(char *name, size_t namesz)
{
    enum { MAXS = 64, ROOM = 1024 };
    static uint8_t bufs[MAXS][ETW_PROPS_SIZE + 2 * ROOM] __attribute__((aligned(8)));
    EVENT_TRACE_PROPERTIES *ps[MAXS];
    name[0] = 0;
    for (int i = 0; i < MAXS; i++) {
        memset(bufs[i], 0, sizeof(bufs[i]));
        ps[i] = (EVENT_TRACE_PROPERTIES *)bufs[i];
        ps[i]->Wnode.BufferSize = sizeof(bufs[i]);
        ps[i]->LoggerNameOffset = ETW_PROPS_SIZE;
        ps[i]->LogFileNameOffset = ETW_PROPS_SIZE + ROOM;
    }
    ULONG n = 0;
    if (QueryAllTracesW(ps, MAXS, &n) != ERROR_SUCCESS)
        return;
    for (ULONG i = 0; i < n && i < MAXS; i++) {
        struct etw_guid g;
        etw_guid_from_struct((const uint8_t *)&ps[i]->Wnode.Guid, &g);
        if (!etw_guid_eq(&g, &etw_guid_heap))
            continue;
        const wchar_t *wn = (const wchar_t *)(bufs[i] + ps[i]->LoggerNameOffset);
        char nm[128];
        if (!WideCharToMultiByte(CP_UTF8, 0, wn, -1, nm, sizeof(nm), NULL, NULL))
            snprintf(nm, sizeof(nm), "?");
        if (strcmp(nm, HEAP_SESSION) != 0) {
            snprintf(name, namesz, "%s", nm);
            return;
        }
    }
}

/* Each drive letter's NT device (QueryDosDeviceW), and %SystemRoot%. */
static void dosmap_build(struct etw_dosmap *m)
{
    memset(m, 0, sizeof(*m));
    DWORD drives = GetLogicalDrives();
    for (int i = 0; i < 26 && m->n < ETW_DOSMAP_MAX; i++) {
        if (!(drives & (1u << i)))
            continue;
        wchar_t dev[3] = {(wchar_t)(L'A' + i), L':', 0}, target[260];
        if (!QueryDosDeviceW(dev, target, 260))
            continue;
        if (!WideCharToMultiByte(CP_UTF8, 0, target, -1, m->v[m->n].device,
                                 sizeof(m->v[0].device), NULL, NULL))
            continue;
        m->v[m->n].drive[0] = (char)('A' + i);
        m->v[m->n].drive[1] = ':';
        m->n++;
    }
    wchar_t root[260];
    UINT k = GetWindowsDirectoryW(root, 260);
    if (k == 0 || k >= 260 ||
        !WideCharToMultiByte(CP_UTF8, 0, root, -1, m->system_root, sizeof(m->system_root), NULL,
                             NULL))
        m->system_root[0] = '\0';
}

static int session_start(const struct etw_session_spec *spec, TRACEHANDLE *h, char *err,
                         size_t errsz)
{
    static uint8_t props[ETW_PROPS_SIZE + 1024 + PROPS_ROOM] __attribute__((aligned(8)));
    if (!etw_props_build(props, sizeof(props), spec, PROPS_ROOM, err, errsz))
        return HT_EBADARG;
    wchar_t w[80];
    ULONG rc = StartTraceW(h, wide(spec->name, w, 80), (EVENT_TRACE_PROPERTIES *)props);
    if (rc == ERROR_SUCCESS)
        return 0;
    char what[160];
    snprintf(what, sizeof(what), "StartTraceW(%s)", spec->name);
    win_error(err, errsz, what, rc);
    *h = 0;
    return map_error(rc);
}



static VOID WINAPI record_cb(PEVENT_RECORD er)
{
    struct consumer *c = er->UserContext;
    struct etw_record r;
    etw_record_from_event(er, &r);
    etw_hub_record(hub, c->which, &r);
}

static void consumer_main(void *arg)
{
    struct consumer *c = arg;
    ULONG rc = ProcessTrace(&c->ph, 1, NULL, NULL);
    if (!atomic_load(&c->stopping)) {
        char why[120];
        snprintf(why, sizeof(why), "the %s session ended (ProcessTrace returned %lu)",
                 c->which == ETW_HUB_HEAP ? "heap logger" : "VirtualAlloc",
                 (unsigned long)rc);
        etw_hub_session_ended(hub, c->which, why);
    }
}

/* Stop a session of ours (StopTrace by name), close its consumer
 * (ProcessTrace returns), join it. */
static void consumer_stop(struct consumer *c, const char *name)
{
    atomic_store(&c->stopping, 1);
    if (c->h)
        session_stop_by_name(name);
    c->h = 0;
    if (c->ph && c->ph != INVALID_PROCESSTRACE_HANDLE)
        CloseTrace(c->ph); /* ERROR_CTX_CLOSE_PENDING is success (5.5) */
    if (c->running)
        uv_thread_join(&c->thread);
    c->running = 0;
    c->ph = 0;
}

/* Open the consumer of a started session and run it on its thread. */
static int consumer_start(struct consumer *c, const char *name, char *err, size_t errsz)
{
    wchar_t w[80];
    EVENT_TRACE_LOGFILEW lf;
    memset(&lf, 0, sizeof(lf));
    lf.LoggerName = wide(name, w, 80);
    lf.ProcessTraceMode =
        PROCESS_TRACE_MODE_REAL_TIME | PROCESS_TRACE_MODE_EVENT_RECORD | PROCESS_TRACE_MODE_RAW_TIMESTAMP;
    lf.EventRecordCallback = record_cb;
    lf.Context = c;
    atomic_store(&c->stopping, 0);
    c->ph = OpenTraceW(&lf);
    if (c->ph == INVALID_PROCESSTRACE_HANDLE) {
        char what[160];
        snprintf(what, sizeof(what), "OpenTraceW(%s)", name);
        win_error(err, errsz, what, GetLastError());
        return HT_EINTERNAL;
    }
    if (uv_thread_create(&c->thread, consumer_main, c) != 0) {
        snprintf(err, errsz, "cannot start a consumer thread");
        return UV_ENOMEM;
    }
    c->running = 1;
    return 0;
}

static int be_heap_start(void *arg, const uint32_t *pids, unsigned npids, int stacks, char *err,
                         size_t errsz)
{
    (void)arg;
    const uint16_t hooks[] = {ETW_HOOK_HEAP_ALLOC, ETW_HOOK_HEAP_REALLOC};
    struct etw_session_spec hs = {.guid = &etw_guid_heap,
                                  .name = HEAP_SESSION,
                                  .log_file_mode = ETW_REAL_TIME_MODE,
                                  .buffer_kb = 1024,
                                  .min_buffers = 64,
                                  .max_buffers = 256,
                                  .flush_timer_s = 1,
                                  .pids = pids,
                                  .npids = npids,
                                  .hooks = hooks,
                                  .nhooks = stacks ? 2 : 0};
    int rc = session_start(&hs, &heap_c.h, err, errsz);
    if (rc == 0 && (rc = consumer_start(&heap_c, HEAP_SESSION, err, errsz)) != 0)
        consumer_stop(&heap_c, HEAP_SESSION);
    return rc;
}

static void be_heap_stop(void *arg)
{
    (void)arg;
    consumer_stop(&heap_c, HEAP_SESSION);
}

static int be_kernel_start(void *arg, int stacks, char *err, size_t errsz)
{
    (void)arg;
    struct etw_session_spec ks = {.guid = &kernel_session_guid,
                                  .name = KERNEL_SESSION,
                                  .log_file_mode = ETW_REAL_TIME_MODE | ETW_SYSTEM_LOGGER_MODE,
                                  .buffer_kb = 256,
                                  .min_buffers = 16,
                                  .max_buffers = 64,
                                  .flush_timer_s = 1,
                                  .enable_flags = ETW_FLAG_PROCESS | ETW_FLAG_THREAD |
                                                  ETW_FLAG_IMAGE_LOAD | ETW_FLAG_VIRTUAL_ALLOC};
    int rc = session_start(&ks, &kern_c.h, err, errsz);
    if (rc)
        return rc;
    if (stacks) {
        /* Stacks on VirtualAlloc: {PageFault GUID, 98} (2.1). */
        CLASSIC_EVENT_ID id;
        memset(&id, 0, sizeof(id));
        static const GUID pagefault = {0x3d6fa8d3, 0xfe05, 0x11d0,
                                       {0x9d, 0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
        id.EventGuid = pagefault;
        id.Type = 98;
        ULONG r = TraceSetInformation(kern_c.h, TraceStackTracingInfo, &id, sizeof(id));
        if (r != ERROR_SUCCESS) {
            win_error(err, errsz, "TraceSetInformation(TraceStackTracingInfo)", r);
            consumer_stop(&kern_c, KERNEL_SESSION);
            return map_error(r);
        }
    }
    if ((rc = consumer_start(&kern_c, KERNEL_SESSION, err, errsz)) != 0)
        consumer_stop(&kern_c, KERNEL_SESSION);
    return rc;
}

static void be_kernel_stop(void *arg)
{
    (void)arg;
    consumer_stop(&kern_c, KERNEL_SESSION);
}

/* The hub for a first session: this daemon's turn at the machine's ETW
 * sessions, a previous run's sessions stopped, no foreign heap logger. */
static int hub_open(char *err, size_t errsz)
{
    if (hub)
        return 0;
    if (etw_mutex_take() != 0) {
        snprintf(err, errsz, "another heaptraced runs ETW sessions on this machine (Windows allows "
                             "one heap logger)");
        return HT_EFULL;
    }
    /* A previous run's sessions (a crash leaves them running, 5.5). */
    session_stop_by_name(HEAP_SESSION);
    session_stop_by_name(KERNEL_SESSION);
    char foreign[128];
    foreign_heap_session(foreign, sizeof(foreign));
    if (foreign[0]) {
        snprintf(err, errsz,
                 "the heap session \"%s\" is running (WPR, xperf, PerfView or UIforETW?): Windows "
                 "allows one heap logger; stop it first (heaptrace does not stop it)",
                 foreign);
        etw_mutex_give();
        return HT_ESTATE;
    }
    LARGE_INTEGER f;
    QueryPerformanceFrequency(&f);
    qpc_freq = (uint64_t)f.QuadPart;
    dosmap_build(&dosmap);
    struct etw_hub_backend be = {NULL, be_heap_start, be_heap_stop, be_kernel_start, be_kernel_stop};
    if (etw_hub_new(&hub, &be) != 0) {
        etw_mutex_give();
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    return 0;
}

/* The last session left: the sessions are stopped (by the hub), the
 * machine's heap logger free for others. */
static void hub_close_if_idle(void)
{
    if (hub && etw_hub_count(hub) == 0) {
        etw_hub_free(hub);
        hub = NULL;
        etw_mutex_give();
    }
}

/* ---- one heaptrace session ---- */

struct etw_source {
    struct source base;
    struct source_sink outer;
    uv_loop_t *loop;
    struct evring *ring;
    /* The symbol cache, under the session's symbolizer lock (source.h):
     * module events wait for it in q (the drain never waits for that lock);
     * sym_sync or the next symbolize applies them. Made there too, for an
     * --exe session's process once known (syms_pid). */
    struct sym_cache *syms;
    atomic_uint_fast64_t syms_pid;
    struct mem_acct sym_acct; /* the symbol cache's, under the same lock */
    struct sym_snap snap;     /* its counters, for stats without the lock */
    int snap_ready;
    struct modq q;
    struct mem_acct acct;
    uint64_t pid;
    char image[260];
    int exe_mode, stacks, no_heap, no_virtual;
    uint64_t sample_ns;
    int started, stopped, ended, ifeo_set, restarted, left;
    struct etw_hub_sub sub;
    uint64_t start_qpc;
    struct procwatch *watch;
    uv_timer_t *exit_timer; /* the target exited: the last buffers' records still come */
    uv_async_t *wake;       /* a consumer thread asks the loop to look (hub_gone) */
    uv_thread_t sampler;
    atomic_int sampler_running; /* joined once, by whoever takes it to 0 */
    HANDLE quit_event;          /* wakes the sampler */
    uv_thread_t finisher;
    int finisher_running;
    /* The producer side: the correlators, the ring's private interner,
     * evring_put. Taken by the consumers (deliver), the sampler and the
     * finisher, and briefly by the loop for the correlators' charges: never
     * held while waiting (the ring is nowait, the raw tap drops). */
    uv_mutex_t pmu;
    struct etw_corr *corr[2]; /* by session (ETW_HUB_HEAP, ETW_HUB_KERNEL) */
    uint32_t followed;        /* --exe: the process followed */
    /* What the loop reads: copied under stmu (never held while waiting). */
    uv_mutex_t stmu;
    struct etw_corr_stats cst[2];
    char reason[160];
    char name[260]; /* the target's image name */
    uint32_t followed_pub;
    atomic_int hub_gone; /* the sessions it takes ended: leave on the loop */
    atomic_int sessions_left;
    atomic_uint_fast64_t put;
    uint64_t delivered;
    struct rawtap *tap; /* record --raw */
    /* --exe: the processes of the image after the first, each a session
     * of its own (sink.spawn) taking its records from this one; a child
     * points back at its parent. Both under kids_mu (never held while
     * waiting). */
    struct etw_source *parent;   /* a child while its parent routes to it */
    struct etw_source *child_of; /* a child: its parent at open (loop) */
    struct kid {
        uint32_t pid;
        struct etw_source *src; /* NULL: its session is being made, or it ended */
        int state;              /* KID_PENDING, KID_LIVE, KID_ENDED, KID_REFUSED */
    } kids[KIDS_MAX];
    unsigned nkids;
    uint32_t spawn_q[KIDS_MAX];
    unsigned nspawn_q;
    uint64_t before_session; /* records of a process before its session existed */
    uint64_t kids_overflow;  /* records of processes past KIDS_MAX */
    uint64_t spawn_failed;
    uint64_t refused_records; /* of a process whose session could not be made, or was stopped */
    int own_done; /* its ring is done (under pmu): an --exe parent's first process exited */
    int exited;   /* its target exited (loop) */
    uint64_t after_end; /* records of its process after its ring ended (under pmu) */
};

/* ---- producer side (consumer threads under the hub's mutex) ---- */

static void emit_cb(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    struct etw_source *s = arg;
    struct ht_event e = *ev;
    if (depth) {
        e.stack = stack_intern_get(evring_si(s->ring), frames, depth);
        if (!e.stack)
            e.flags |= HT_EVF_STACK_DROPPED;
    }
    if (evring_put(s->ring, &e) == 0)
        atomic_fetch_add_explicit(&s->put, 1, memory_order_relaxed);
}

/* Module paths into the ring's interner, as DOS paths. */
static uint32_t path_cb(void *arg, const char *path)
{
    struct etw_source *s = arg;
    char dos[1024];
    etw_dos_path(&dosmap, path, dos, sizeof(dos));
    return stack_intern_str(evring_si(s->ring), dos, (unsigned)strlen(dos));
}

/* The traced process named by the kernel session's Process rundown, or
 * --exe's first process to log: to the loop in event order (under pmu). */
static void process_cb(void *arg, uint32_t pid, const char *name)
{
    struct etw_source *s = arg;
    if (s->exe_mode) {
        if (s->followed && s->followed != pid)
            return;
        s->followed = pid;
        name = s->image;
        /* The system logger's correlator has no heap event to follow by:
         * told here (under pmu, as every correlator call is). */
        for (int i = 0; i < 2; i++)
            if (s->corr[i])
                etw_corr_follow(s->corr[i], pid);
    } else if (!name[0]) {
        return;
    }
    uv_mutex_lock(&s->stmu);
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->followed_pub = s->followed;
    uv_mutex_unlock(&s->stmu);
    evring_process(s->ring, pid, name, "");
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = pid};
    emit_cb(s, &ev, NULL, 0);
}

/* A record of this session, from a consumer thread (etw-hub.h deliver):
 * record --raw sees it as it came; a Lost_Event is a lost event in line; an
 * event goes through the correlator into the ring. */
/* A record into this source (under its pmu): record --raw sees it as it
 * came; a Lost_Event is a lost event in line; an event goes through the
 * correlator into the ring. */
static void take_record(struct etw_source *s, int session, const struct etw_record *r,
                        const struct etw_decoded *d)
{
    if (rawtap_on(s->tap)) {
        static _Thread_local char line[ETW_RAW_LINE_MAX];
        size_t n = etw_raw_format(r, line, sizeof(line));
        if (n)
            rawtap_put(s->tap, line, n);
    }
    struct etw_corr *c = s->corr[session];
    if (c) {
        if (etw_guid_eq(&r->provider, &etw_guid_lost))
            etw_corr_lost(c, 1);
        else if (d)
            etw_corr_add(c, r, d);
        const struct etw_corr_stats *cs = etw_corr_stats(c);
        uv_mutex_lock(&s->stmu);
        s->cst[session] = *cs;
        uv_mutex_unlock(&s->stmu);
    }
}

/* A record for a child (its inflight held). */
static void kid_take(struct etw_source *k, int session, const struct etw_record *r,
                     const struct etw_decoded *d)
{
    atomic_fetch_add_explicit(&k->sub.records, 1, memory_order_relaxed);
    uv_mutex_lock(&k->pmu);
    if (k->own_done)
        k->after_end++;
    else
        take_record(k, session, r, d);
    uv_mutex_unlock(&k->pmu);
    atomic_fetch_sub(&k->sub.inflight, 1);
}

/* --exe: a record of another process than the one followed goes to its
 * session; the first one of a process asks the loop for that session. */
static void to_kid(struct etw_source *s, uint32_t pid, int session, const struct etw_record *r,
                   const struct etw_decoded *d)
{
    struct etw_source *k = NULL;
    int wake = 0;
    uv_mutex_lock(&kids_mu);
    struct kid *e = NULL, *free_slot = NULL;
    for (unsigned i = 0; i < s->nkids && !e; i++) {
        if (s->kids[i].pid == pid)
            e = &s->kids[i];
        else if (!free_slot && s->kids[i].state == KID_ENDED)
            free_slot = &s->kids[i];
    }
    if (e && e->state == KID_ENDED)
        free_slot = e; /* its session ended: the pid is a new process's now */
    if (!e || e->state == KID_ENDED) {
        if (!free_slot && s->nkids < KIDS_MAX)
            free_slot = &s->kids[s->nkids++];
        if (free_slot && s->nspawn_q < KIDS_MAX) {
            free_slot->pid = pid;
            free_slot->src = NULL;
            free_slot->state = KID_PENDING;
            s->spawn_q[s->nspawn_q++] = pid;
            s->before_session++;
            wake = 1;
        } else {
            s->kids_overflow++;
        }
    } else if (e->state == KID_LIVE && e->src) {
        k = e->src;
        atomic_fetch_add(&k->sub.inflight, 1);
    } else if (e->state == KID_PENDING) {
        s->before_session++;
    } else {
        s->refused_records++; /* refused, or stopped by the user */
    }
    uv_mutex_unlock(&kids_mu);
    if (k)
        kid_take(k, session, r, d);
    if (wake)
        uv_async_send(s->wake);
}

/* A record of this session, from a consumer thread (etw-hub.h deliver). */
static void deliver_cb(void *arg, int session, const struct etw_record *r,
                       const struct etw_decoded *d)
{
    struct etw_source *s = arg;
    uv_mutex_lock(&s->pmu);
    if (s->exe_mode && s->followed) {
        uint32_t pid = r->pid;
        if (d && (d->kind == ETW_STACK || d->kind >= ETW_VIRTUAL_ALLOC))
            pid = d->owner_pid;
        if (etw_guid_eq(&r->provider, &etw_guid_lost)) {
            /* Every process of the image may have lost some. */
            uv_mutex_lock(&kids_mu);
            struct etw_source *ks[KIDS_MAX];
            unsigned nk = 0;
            for (unsigned i = 0; i < s->nkids; i++)
                if (s->kids[i].state == KID_LIVE && s->kids[i].src) {
                    ks[nk] = s->kids[i].src;
                    atomic_fetch_add(&ks[nk++]->sub.inflight, 1);
                }
            uv_mutex_unlock(&kids_mu);
            for (unsigned i = 0; i < nk; i++)
                kid_take(ks[i], session, r, d);
        } else if (pid != s->followed && pid != 0 && pid != 0xFFFFFFFFu) {
            uv_mutex_unlock(&s->pmu);
            to_kid(s, pid, session, r, d);
            return;
        }
    }
    if (s->own_done)
        s->after_end++;
    else
        take_record(s, session, r, d);
    uv_mutex_unlock(&s->pmu);
}

/* A session this one takes ended (under the hub's mutex: no waiting): it
 * leaves the hub on the loop. */
static void session_ended_cb(void *arg, int session, const char *why)
{
    struct etw_source *s = arg;
    (void)session;
    uv_mutex_lock(&s->stmu);
    if (!s->reason[0])
        snprintf(s->reason, sizeof(s->reason), "%s", why);
    uv_mutex_unlock(&s->stmu);
    if (atomic_fetch_sub(&s->sessions_left, 1) <= 1) {
        atomic_store(&s->hub_gone, 1);
        uv_async_send(s->wake);
    }
}

static uint64_t now_ns(struct etw_source *s)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    uint64_t d = (uint64_t)t.QuadPart > s->start_qpc ? (uint64_t)t.QuadPart - s->start_qpc : 0;
    return (uint64_t)((unsigned __int128)d * 1000000000u / qpc_freq);
}

static void sampler_main(void *arg)
{
    struct etw_source *s = arg;
    DWORD ms = (DWORD)(s->sample_ns / 1000000);
    if (ms == 0)
        ms = 100;
    while (WaitForSingleObject(s->quit_event, ms) == WAIT_TIMEOUT) {
        struct procmem pm;
        if (procmem_read(s->pid, &pm) != 0)
            continue;
        uv_mutex_lock(&s->pmu);
        struct ht_event ev = {.kind = HT_EV_PRIVATE_BYTES, .t = now_ns(s), .size = pm.private_bytes};
        emit_cb(s, &ev, NULL, 0);
        evring_publish(s->ring);
        uv_mutex_unlock(&s->pmu);
    }
}

/* The sampler puts into the ring: it stops before the ring is done. */
static void sampler_join(struct etw_source *s)
{
    if (atomic_exchange(&s->sampler_running, 0)) {
        SetEvent(s->quit_event);
        uv_thread_join(&s->sampler);
    }
}

/* After the source left the hub (nothing new routes to it): the last
 * deliver calls end, the sampler stops, what waits for a stack leaves, then
 * the ring's end. A thread of its own: each may wait for the loop to drain. */
static void finisher_main(void *arg)
{
    struct etw_source *s = arg;
    sampler_join(s);
    uv_mutex_lock(&s->pmu); /* a deliver call under way finishes first */
    if (!s->own_done) {
        s->own_done = 1; /* nothing more into the ring (deliver checks) */
        for (int i = 0; i < 2; i++) {
            if (s->corr[i]) {
                etw_corr_flush(s->corr[i]);
                uv_mutex_lock(&s->stmu);
                s->cst[i] = *etw_corr_stats(s->corr[i]);
                uv_mutex_unlock(&s->stmu);
            }
        }
        evring_done(s->ring);
    }
    uv_mutex_unlock(&s->pmu);
}

/* The ring's end on the finisher thread (once). */
static void finish_ring(struct etw_source *s)
{
    if (!s->started || !s->ring || s->finisher_running)
        return;
    if (uv_thread_create(&s->finisher, finisher_main, s) == 0) {
        s->finisher_running = 1;
    } else {
        evring_quit(s->ring); /* no thread: on the loop, where a put must not wait */
        finisher_main(s);
    }
}

/* Leave the hub, end the ring (on the finisher), give back TracingFlags
 * (loop). */
static void leave(struct etw_source *s)
{
    if (s->left)
        return;
    s->left = 1;
    uv_mutex_lock(&kids_mu);
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
    uv_mutex_unlock(&kids_mu);
    if (s->watch) {
        procwatch_stop(s->watch);
        s->watch = NULL;
    }
    if (s->exit_timer)
        uv_timer_stop(s->exit_timer);
    SetEvent(s->quit_event); /* the sampler stops (joined by the finisher) */
    if (s->sub.attached) {
        etw_hub_detach(hub, &s->sub);
        hub_close_if_idle();
    }
    finish_ring(s);
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
    if (!atomic_load(&s->sampler_running) && uv_thread_create(&s->sampler, sampler_main, s) == 0)
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
 * (flushed every second, etw-mechanics.md 5.3): the session leaves the hub
 * two seconds later; what comes for that process after is unrouted. */
#define EXIT_GRACE_MS 2000

static void exit_over(struct etw_source *s)
{
    if (s->exe_mode)
        finish_ring(s); /* its process is over; the image's later ones still come (kids) */
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

static void wake_cb(uv_async_t *a)
{
    struct etw_source *s = a->data;
    /* --exe: sessions for the new processes of the image. */
    uint32_t q[KIDS_MAX];
    unsigned nq;
    uv_mutex_lock(&kids_mu);
    nq = s->nspawn_q;
    memcpy(q, s->spawn_q, nq * sizeof(q[0]));
    s->nspawn_q = 0;
    uv_mutex_unlock(&kids_mu);
    for (unsigned i = 0; i < nq; i++) {
        char err[200] = "";
        int rc = s->left || !s->outer.spawn ? HT_ESTATE
                                            : s->outer.spawn(s->outer.arg, q[i], err, sizeof(err));
        if (rc == 0)
            continue; /* the child registered itself (kid_register) */
        uv_mutex_lock(&kids_mu);
        for (unsigned k = 0; k < s->nkids; k++)
            if (s->kids[k].pid == q[i] && s->kids[k].state == KID_PENDING)
                s->kids[k].state = KID_REFUSED;
        s->spawn_failed++;
        uv_mutex_unlock(&kids_mu);
    }
    if (!s->ended && s->outer.ready)
        s->outer.ready(s->outer.arg); /* the drain sees hub_gone */
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
static void tap_ready(void *arg);

static int etw_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                    const struct source_sink *sink, char *err, size_t errsz)
{
    *out = NULL;
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
    uv_once(&kids_once, kids_init);
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
    s->quit_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->exit_timer = ht_calloc(1, sizeof(*s->exit_timer));
    s->wake = ht_calloc(1, sizeof(*s->wake));
    if (s->exit_timer && uv_timer_init(loop, s->exit_timer) == 0) {
        s->exit_timer->data = s;
    } else {
        ht_free(s->exit_timer);
        s->exit_timer = NULL;
    }
    if (s->wake && uv_async_init(loop, s->wake, wake_cb) == 0) {
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
        rc = rawtap_new(&s->tap, loop, RAWTAP_BYTES_DEFAULT, &s->acct, tap_ready, s);
    if (rc == 0)
        rc = modq_init(&s->q, &s->acct);
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

static int corr_make(struct etw_source *s, int which)
{
    struct etw_corr_config cfg = {.acct = &s->acct,
                                  .pid = s->exe_mode ? 0 : (uint32_t)s->pid,
                                  .qpc_freq = qpc_freq,
                                  .start_qpc = s->start_qpc,
                                  .stack_kinds = s->stacks ? 0 : 1u << 31 /* none waits */,
                                  .follow_first = s->exe_mode,
                                  .path = path_cb,
                                  .process = process_cb};
    return etw_corr_new(&s->corr[which], &cfg, emit_cb, s);
}

/* The process, before any event (start's reply shows it): its name and
 * its modules for DbgHelp. */
static void announce_process(struct etw_source *s)
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

/* A child of an --exe session: its records come from the parent's routing,
 * from the moment it is registered there (the ones before are counted by
 * the parent as before_session). */
static int child_start(struct etw_source *s, char *err, size_t errsz)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    s->start_qpc = (uint64_t)t.QuadPart;
    if (corr_make(s, ETW_HUB_HEAP) != 0) {
        snprintf(err, errsz, "out of memory for the stack correlator");
        return UV_ENOMEM;
    }
    announce_process(s);
    int found = 0;
    uv_mutex_lock(&kids_mu);
    struct etw_source *p = s->child_of;
    for (unsigned i = 0; !p->left && i < p->nkids; i++) {
        if (p->kids[i].pid == (uint32_t)s->pid && p->kids[i].state == KID_PENDING) {
            p->kids[i].src = s;
            p->kids[i].state = KID_LIVE;
            s->parent = p;
            found = 1;
            break;
        }
    }
    uv_mutex_unlock(&kids_mu);
    if (!found) {
        snprintf(err, errsz, "the --exe session of process %llu is over",
                 (unsigned long long)s->pid);
        return HT_ESTATE;
    }
    s->started = 1;
    if (uv_thread_create(&s->sampler, sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
    return 0;
}

static int etw_start(struct source *base, char *err, size_t errsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->started)
        return 0;
    if (s->child_of)
        return child_start(s, err, errsz);
    int rc = hub_open(err, errsz);
    if (rc)
        return rc;
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    s->start_qpc = (uint64_t)t.QuadPart;
    if ((!s->no_heap && corr_make(s, ETW_HUB_HEAP) != 0) ||
        (!s->no_virtual && corr_make(s, ETW_HUB_KERNEL) != 0)) {
        snprintf(err, errsz, "out of memory for the stack correlators");
        hub_close_if_idle();
        return UV_ENOMEM;
    }
    if (s->exe_mode) {
        /* Refused by the hub before anything changes when --pid sessions
         * run: checked here too, so TracingFlags are not set for nothing. */
        if (etw_hub_count(hub) > 0) {
            snprintf(err, errsz, "other sessions trace running processes: the heap logger traces "
                                 "every new process of an image (start --exe) or a list of "
                                 "running processes (start --pid), not both at once");
            return HT_EFULL;
        }
        rc = ifeo_enable(IFEO_JOURNAL_KEY, s->image, err, errsz);
        if (rc) {
            hub_close_if_idle();
            return rc;
        }
        s->ifeo_set = 1;
    }
    if (s->pid)
        announce_process(s);
    s->sub.pid = (uint32_t)s->pid;
    s->sub.heap = !s->no_heap;
    s->sub.virt = !s->no_virtual;
    s->sub.stacks = s->stacks;
    s->sub.deliver = deliver_cb;
    s->sub.session_ended = session_ended_cb;
    s->sub.arg = s;
    atomic_store(&s->sessions_left, s->sub.heap + s->sub.virt);
    rc = etw_hub_attach(hub, &s->sub, &s->restarted, err, errsz);
    if (rc) {
        if (s->ifeo_set) {
            char e2[200];
            if (ifeo_restore(IFEO_JOURNAL_KEY, s->image, e2, sizeof(e2)) == 0)
                s->ifeo_set = 0;
        }
        hub_close_if_idle();
        return rc;
    }
    s->started = 1;
    if (s->pid && uv_thread_create(&s->sampler, sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
    return 0;
}

static void tap_ready(void *arg)
{
    struct etw_source *s = arg;
    if (!s->ended && s->outer.ready)
        s->outer.ready(s->outer.arg);
}

static int etw_src_raw_tap(struct source *base, int on, char *err, size_t errsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (!on) {
        rawtap_off(s->tap, &s->outer);
        return 0;
    }
    if (!s->tap || !s->started || s->left) { /* attached to the hub, or a child fed by its parent */
        snprintf(err, errsz, "this session's ETW sessions are not running: no raw records to come");
        return HT_ESTATE;
    }
    char header[512];
    uv_mutex_lock(&s->stmu);
    uint32_t pid = s->exe_mode ? s->followed_pub : (uint32_t)s->pid;
    size_t hn = etw_raw_header(qpc_freq, s->start_qpc, pid, s->name, header, sizeof(header));
    uv_mutex_unlock(&s->stmu);
    int rc = rawtap_enable(s->tap, 1, header, hn);
    if (rc)
        snprintf(err, errsz, "no memory for the raw record buffer");
    return rc;
}

static size_t etw_src_raw_join(struct source *base, char *buf, size_t cap)
{
    struct etw_source *s = (struct etw_source *)base;
    if (!rawtap_on(s->tap))
        return 0;
    rawtap_flush(s->tap, &s->outer); /* the lines from before the newcomer go to the others only */
    return rawtap_header(s->tap, buf, cap);
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
    sampler_join(s);              /* when no finisher ran (start failed) */
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

static void etw_stats(struct source *base, struct source_stats *st)
{
    struct etw_source *s = (struct etw_source *)base;
    memset(st, 0, sizeof(*st));
    if (s->ring)
        evring_producer_stats(s->ring, st);
    uv_mutex_lock(&s->stmu);
    st->events = s->cst[0].events_in + s->cst[1].events_in;
    uv_mutex_unlock(&s->stmu);
    st->lost = atomic_load(&s->sub.lost_records);
    uint64_t put = atomic_load_explicit(&s->put, memory_order_relaxed);
    if (s->stopped && put > s->delivered)
        st->lost += put - s->delivered;
    /* The correlators charge under pmu, which is never held while waiting
     * (the rings are nowait): a short wait at most. */
    uv_mutex_lock(&s->pmu);
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] += s->acct.bytes[k];
        st->over_budget[k] += s->acct.over_budget[k];
        st->no_memory[k] += s->acct.no_memory[k];
    }
    uv_mutex_unlock(&s->pmu);
    /* The symbol cache's as of its last use: never waits for the symbolizer lock. */
    if (s->snap_ready)
        sym_snap_add(&s->snap, st, MEM_symbols);
}

static cJSON *etw_status_json(struct source *base)
{
    struct etw_source *s = (struct etw_source *)base;
    struct etw_corr_stats cst[2];
    memset(cst, 0, sizeof(cst));
    struct etw_hub_stats hs;
    memset(&hs, 0, sizeof(hs));
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uv_mutex_lock(&s->stmu);
    memcpy(cst, s->cst, sizeof(cst));
    uv_mutex_unlock(&s->stmu);
    cJSON_AddNumberToObject(o, "records", (double)atomic_load(&s->sub.records));
    cJSON_AddNumberToObject(o, "lost_records", (double)atomic_load(&s->sub.lost_records));
    cJSON_AddNumberToObject(o, "heap_restarts", (double)atomic_load(&s->sub.restarts));
    /* Events dropped because its ring was full (the loop behind): each gap
     * is a lost event in the stream too. */
    cJSON_AddNumberToObject(o, "ring_full_drops", s->ring ? (double)evring_full_drops(s->ring) : 0);
    if (hub)
        etw_hub_stats(hub, &hs);
    cJSON_AddStringToObject(o, "mode", s->exe_mode ? "exe" : s->child_of ? "exe-process" : "pid");
    if (s->exe_mode) {
        cJSON_AddStringToObject(o, "image", s->image);
        cJSON_AddNumberToObject(o, "followed_pid", (double)cst[0].followed_pid);
        uv_mutex_lock(&kids_mu);
        cJSON *kp = cJSON_AddArrayToObject(o, "later_processes");
        for (unsigned i = 0; kp && i < s->nkids; i++) {
            cJSON *k = cJSON_CreateObject();
            cJSON_AddNumberToObject(k, "pid", s->kids[i].pid);
            static const char *st[] = {"", "pending", "traced", "ended", "refused", "stopped"};
            int ks = s->kids[i].state;
            cJSON_AddStringToObject(k, "session", st[ks >= 0 && ks <= KID_STOPPED ? ks : 0]);
            cJSON_AddItemToArray(kp, k);
        }
        cJSON_AddNumberToObject(o, "records_before_session", (double)s->before_session);
        cJSON_AddNumberToObject(o, "processes_past_cap", (double)s->kids_overflow);
        cJSON_AddNumberToObject(o, "sessions_refused", (double)s->spawn_failed);
        cJSON_AddNumberToObject(o, "records_not_traced", (double)s->refused_records);
        uv_mutex_unlock(&kids_mu);
    } else if (s->child_of) {
        cJSON_AddStringToObject(o, "image", s->image);
    }
    /* The machine's sessions, shared with this daemon's other sessions. */
    cJSON *m = cJSON_AddObjectToObject(o, "machine");
    if (m) {
        cJSON_AddBoolToObject(m, "heap_logger_running", hs.heap_running);
        cJSON *pl = cJSON_AddArrayToObject(m, "heap_logger_pids");
        for (unsigned i = 0; pl && i < hs.nheap_pids; i++)
            cJSON_AddItemToArray(pl, cJSON_CreateNumber(hs.heap_pids[i]));
        cJSON_AddBoolToObject(m, "virtual_alloc_running", hs.kernel_running);
        cJSON_AddNumberToObject(m, "records", (double)hs.records);
        cJSON_AddNumberToObject(m, "unrouted", (double)hs.unrouted);
        cJSON_AddNumberToObject(m, "heap_restarts", (double)hs.heap_restarts);
        cJSON_AddNumberToObject(m, "decoded", (double)hs.dec.decoded);
        cJSON_AddNumberToObject(m, "malformed", (double)hs.dec.malformed);
        cJSON_AddNumberToObject(m, "unknown_provider", (double)hs.dec.unknown_provider);
        cJSON_AddNumberToObject(m, "ignored_opcode", (double)hs.dec.ignored_opcode);
        cJSON_AddNumberToObject(m, "old_versions", (double)hs.dec.old_versions);
        /* The ETW sessions' own counters (loop: one ControlTraceW each). */
        struct {
            const char *key, *name;
            const struct etw_guid *guid;
            int running;
        } q[2] = {{"heap_logger", HEAP_SESSION, &etw_guid_heap, hs.heap_running},
                  {"virtual_alloc_session", KERNEL_SESSION, &kernel_session_guid,
                   hs.kernel_running}};
        for (int i = 0; i < 2; i++) {
            struct etw_session_counters c;
            if (!q[i].running || session_query(q[i].name, q[i].guid, &c) != 0)
                continue;
            cJSON *e = cJSON_AddObjectToObject(m, q[i].key);
            if (!e)
                continue;
            cJSON_AddNumberToObject(e, "events_lost", (double)c.events_lost);
            cJSON_AddNumberToObject(e, "realtime_buffers_lost", (double)c.realtime_buffers_lost);
            cJSON_AddNumberToObject(e, "log_buffers_lost", (double)c.log_buffers_lost);
            cJSON_AddNumberToObject(e, "buffers_written", (double)c.buffers_written);
            cJSON_AddNumberToObject(e, "buffers", (double)c.buffers);
        }
    }
    const char *names[2] = {"heap_session", "virtual_alloc_session"};
    for (int i = 0; i < 2; i++) {
        const struct etw_corr_stats *cs = &cst[i];
        cJSON *c = cJSON_AddObjectToObject(o, names[i]);
        if (!c)
            continue;
        cJSON_AddNumberToObject(c, "events", (double)cs->events_in);
        cJSON_AddNumberToObject(c, "stacks_matched", (double)cs->stacks_matched);
        cJSON_AddNumberToObject(c, "stacks_unmatched", (double)cs->stacks_unmatched);
        cJSON_AddNumberToObject(c, "events_no_stack", (double)cs->events_no_stack);
        cJSON_AddNumberToObject(c, "other_process", (double)cs->other_process);
        cJSON_AddNumberToObject(c, "realloc_moved_unpaired", (double)cs->realloc_moved_unpaired);
        cJSON_AddNumberToObject(c, "modules_loaded", (double)cs->modules_loaded);
        cJSON_AddNumberToObject(c, "modules_unloaded", (double)cs->modules_unloaded);
        cJSON_AddNumberToObject(c, "module_names_dropped", (double)cs->module_names_dropped);
        cJSON_AddNumberToObject(c, "process_exits", (double)cs->process_exits);
        cJSON_AddNumberToObject(c, "process_ends_repeated", (double)cs->process_ends_repeated);
        cJSON_AddNumberToObject(c, "before_follow", (double)cs->before_follow);
    }
    /* Said in the start reply (cmd-start.c). */
    cJSON *notes = cJSON_AddArrayToObject(o, "notes");
    char note[300];
    if (notes && s->exe_mode) {
        snprintf(note, sizeof(note),
                 "only processes of %s started from now on are traced (running ones are not); "
                 "this session takes the first of them to allocate, each later one gets a "
                 "session of its own named after this one and its pid",
                 s->image);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    }
    if (notes && s->restarted) {
        snprintf(note, sizeof(note),
                 "the heap logger was restarted to add process %llu: the other sessions' heap "
                 "events between its stop and its start are lost (their status counts "
                 "heap_restarts)",
                 (unsigned long long)s->pid);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    }
    return o;
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

/* A previous run's sessions and IFEO changes (etw-mechanics.md 1.5, 5.5):
 * at daemon start after a crash, and at daemon stop. */
static int etw_recover(char *msg, size_t msgsz)
{
    if (hub || etw_mutex_take() != 0)
        return 0; /* ours, or another daemon's: live, not left over */
    session_stop_by_name(HEAP_SESSION);
    session_stop_by_name(KERNEL_SESSION);
    unsigned failed = 0, done = ifeo_restore_all(IFEO_JOURNAL_KEY, &failed);
    if (done || failed)
        snprintf(msg, msgsz, "ETW: TracingFlags of %u image(s) restored from the journal%s", done,
                 failed ? " (some could not be: they stay journaled)" : "");
    etw_mutex_give();
    return (int)(done + failed);
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
