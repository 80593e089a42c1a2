/*
 * The ETW source (source.h; Windows, HEAPTRACE_WITH_ETW): `start --pid N`
 * and `start --exe app.exe` run the heap logger session (Wnode.Guid =
 * HeapGuid, the PID and stack-walk hooks in its extension block,
 * etw-props.h) and, for --pid, a system-logger session for VirtualAlloc and
 * VirtualFree with their stacks (etw-mechanics.md 1, 3, 5). Each session is
 * consumed on its own thread (ProcessTrace takes one real-time handle); the
 * records go through the portable decoder and stack correlator
 * (etw-decode.h, etw-stacks.h) into the event ring, drained by the session
 * on the loop. Private bytes are sampled on a thread of their own; the
 * target's exit is noticed by waiting on its process handle (procwatch.h).
 *
 * --exe: IFEO TracingFlags for the image, journaled (ifeo.h), and the heap
 * logger for PID 0 (1.5): processes of that image started afterwards log
 * their heap events, already running ones do not. One heaptrace session
 * holds them all (each row's events come from any of them); the VirtualAlloc
 * session is not started (it would need the image's pids first).
 *
 * Windows allows one heap logger per machine: one ETW session at a time per
 * daemon (a second start gets EFULL); a heap session someone else runs (WPR,
 * xperf, PerfView, UIforETW) is reported by name and left alone.
 *
 * Not run on real Windows: under wine StartTraceW succeeds without a session
 * and OpenTraceW fails (windows-build.md 3.5), so start fails there with the
 * error of OpenTraceW, every session stopped and TracingFlags restored: that
 * path is what the tests exercise.
 *
 * Threads: ops on the loop; the consumer threads run record_cb; the sampler
 * thread samples private bytes. The producer side (correlators, the ring's
 * private interner, evring_put) is one critical section under s->mu.
 */
#include "etw-decode.h"
#include "etw-props.h"
#include "etw-record-win.h"
#include "etw-stacks.h"
#include "evring.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ifeo.h"
#include "procmem.h"
#include "procmods.h"
#include "procwatch.h"
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
/* Lost_Event, opcodes 32 RTLostEvent, 33 RTLostBuffer, 34 RTLostFile (5.4). */
static const struct etw_guid lost_guid = {
    {0x6a, 0x39, 0x9a, 0xe0, 0x4b, 0xc6, 0x4d, 0xe9, 0x87, 0x0b, 0x36, 0x57, 0xf8, 0x94, 0x7e, 0x7e}};

struct consumer {
    struct etw_source *s;
    struct etw_corr *corr;
    TRACEHANDLE ph; /* OpenTraceW's, or INVALID_PROCESSTRACE_HANDLE */
    uv_thread_t thread;
    int running;
    ULONG result; /* ProcessTrace's */
};

struct etw_source {
    struct source base;
    struct source_sink outer;
    uv_loop_t *loop;
    struct evring *ring;
    struct sym_cache *syms;   /* under the session's symbolizer lock (source.h) */
    struct mem_acct sym_acct; /* the symbol cache's, under the same lock */
    struct sym_snap snap;     /* their counters, for stats */
    int snap_ready;
    struct mem_acct acct; /* the correlators' (under mu) */
    uint64_t pid;
    char image[260];
    int exe_mode, stacks, no_heap, no_virtual;
    uint64_t sample_ns;
    int started, stopped, ended, ifeo_set, active;
    TRACEHANDLE heap_h, kern_h; /* StartTraceW's (0: not running) */
    struct consumer heap, kern;
    uint64_t qpc_freq, start_qpc;
    struct procwatch *watch;
    uv_thread_t sampler;
    atomic_int sampler_running; /* joined once, by whoever takes it to 0 */
    HANDLE quit_event; /* wakes the sampler */
    uv_mutex_t mu;     /* the producer side, the counters, reason */
    struct etw_decode_stats dec;
    uint64_t lost_events, lost_buffers, records;
    int consumers_left;
    char reason[160];
    atomic_uint_fast64_t put;
    uint64_t delivered;
};

const struct source_ops source_etw_ops;

/* Windows allows one heap logger per machine, and the sessions have fixed
 * names: one ETW session at a time in this daemon (etw_active, loop thread),
 * and one daemon with ETW sessions per machine (a Global\ mutex it holds
 * while they run; a crashed holder leaves it abandoned, which the next one
 * takes). A daemon recovers what a crashed run left only when it can take
 * the mutex, so it never stops another daemon's live sessions. */
#define ETW_MUTEX L"Global\\heaptraced-etw"
static int etw_active;
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

/* ---- producer side (consumer and sampler threads, under s->mu) ---- */

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

static uint64_t now_ns(struct etw_source *s)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    uint64_t d = (uint64_t)t.QuadPart > s->start_qpc ? (uint64_t)t.QuadPart - s->start_qpc : 0;
    return (uint64_t)((unsigned __int128)d * 1000000000u / s->qpc_freq);
}

static VOID WINAPI record_cb(PEVENT_RECORD er)
{
    struct consumer *c = er->UserContext;
    struct etw_source *s = c->s;
    struct etw_record r;
    etw_record_from_event(er, &r);
    uv_mutex_lock(&s->mu);
    s->records++;
    if (etw_guid_eq(&r.provider, &lost_guid)) {
        /* Delivered before the events of the buffer that lost some (5.4):
         * the tables are lossy from here; the engine counts the gap. */
        if (r.opcode == 32)
            s->lost_events++;
        else
            s->lost_buffers++;
        struct ht_event ev = {.kind = HT_EV_LOST, .t = now_ns(s), .size = 1};
        emit_cb(s, &ev, NULL, 0);
    } else {
        struct etw_decoded d;
        if (etw_decode(&r, &d, &s->dec) == 1)
            etw_corr_add(c->corr, &r, &d);
    }
    uv_mutex_unlock(&s->mu);
}

/* The sampler puts into the ring: it stops before the ring is done. */
static void sampler_join(struct etw_source *s)
{
    if (atomic_exchange(&s->sampler_running, 0)) {
        SetEvent(s->quit_event);
        uv_thread_join(&s->sampler);
    }
}

static void consumer_main(void *arg)
{
    struct consumer *c = arg;
    struct etw_source *s = c->s;
    c->result = ProcessTrace(&c->ph, 1, NULL, NULL);
    uv_mutex_lock(&s->mu);
    etw_corr_flush(c->corr);
    int last = --s->consumers_left == 0;
    if (c->result != ERROR_SUCCESS && c->result != ERROR_CANCELLED && !s->reason[0])
        snprintf(s->reason, sizeof(s->reason), "ProcessTrace ended with error %lu",
                 (unsigned long)c->result);
    uv_mutex_unlock(&s->mu);
    if (last) {
        sampler_join(s);
        evring_done(s->ring);
    }
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
        uv_mutex_lock(&s->mu);
        struct ht_event ev = {.kind = HT_EV_PRIVATE_BYTES, .t = now_ns(s), .size = pm.private_bytes};
        emit_cb(s, &ev, NULL, 0);
        evring_publish(s->ring);
        uv_mutex_unlock(&s->mu);
    }
}

/* ---- sessions ---- */

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

static int consumer_open(struct etw_source *s, struct consumer *c, const char *name, char *err,
                         size_t errsz)
{
    wchar_t w[80];
    EVENT_TRACE_LOGFILEW lf;
    memset(&lf, 0, sizeof(lf));
    lf.LoggerName = wide(name, w, 80);
    lf.ProcessTraceMode =
        PROCESS_TRACE_MODE_REAL_TIME | PROCESS_TRACE_MODE_EVENT_RECORD | PROCESS_TRACE_MODE_RAW_TIMESTAMP;
    lf.EventRecordCallback = record_cb;
    lf.Context = c;
    c->s = s;
    c->ph = OpenTraceW(&lf);
    if (c->ph == INVALID_PROCESSTRACE_HANDLE) {
        char what[160];
        snprintf(what, sizeof(what), "OpenTraceW(%s)", name);
        win_error(err, errsz, what, GetLastError());
        return HT_EINTERNAL;
    }
    struct etw_corr_config cfg = {.acct = &s->acct,
                                  .pid = s->exe_mode ? 0 : (uint32_t)s->pid,
                                  .qpc_freq = s->qpc_freq,
                                  .start_qpc = s->start_qpc,
                                  .stack_kinds = s->stacks ? 0 : 1u << 31 /* none waits */};
    int rc = etw_corr_new(&c->corr, &cfg, emit_cb, s);
    if (rc) {
        snprintf(err, errsz, "out of memory for the stack correlator");
        return rc;
    }
    return 0;
}

/* Stop both sessions, close the consumers (ProcessTrace returns), join. */
static void sessions_stop(struct etw_source *s)
{
    if (s->heap_h)
        session_stop_by_name(HEAP_SESSION);
    if (s->kern_h)
        session_stop_by_name(KERNEL_SESSION);
    s->heap_h = s->kern_h = 0;
    struct consumer *cs[2] = {&s->heap, &s->kern};
    for (int i = 0; i < 2; i++) {
        struct consumer *c = cs[i];
        if (c->ph && c->ph != INVALID_PROCESSTRACE_HANDLE)
            CloseTrace(c->ph); /* ERROR_CTX_CLOSE_PENDING is success (5.5) */
    }
    if (s->ring)
        evring_quit(s->ring); /* a put waiting for room returns */
    for (int i = 0; i < 2; i++) {
        struct consumer *c = cs[i];
        if (c->running)
            uv_thread_join(&c->thread);
        c->running = 0;
        c->ph = 0;
    }
    sampler_join(s);
    if (s->ifeo_set) {
        char err[200];
        if (ifeo_restore(IFEO_JOURNAL_KEY, s->image, err, sizeof(err)) == 0)
            s->ifeo_set = 0; /* else the journal keeps it for the next start */
    }
    if (s->active) {
        s->active = etw_active = 0;
        etw_mutex_give();
    }
}

/* ---- loop side ---- */

static void ring_ready(void *data)
{
    struct etw_source *s = data;
    if (s->outer.ready)
        s->outer.ready(s->outer.arg);
}

static int events_cb(void *arg, struct ht_event *evs, size_t n)
{
    struct etw_source *s = arg;
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

static void exited_cb(void *arg, uint64_t pid, int known, int code)
{
    struct etw_source *s = arg;
    (void)pid;
    uv_mutex_lock(&s->mu);
    if (known)
        snprintf(s->reason, sizeof(s->reason), "target exited (code %d)", code);
    else
        snprintf(s->reason, sizeof(s->reason), "target exited");
    uv_mutex_unlock(&s->mu);
    /* The sessions stop; ProcessTrace returns after the queued events. */
    if (s->heap_h)
        session_stop_by_name(HEAP_SESSION);
    if (s->kern_h)
        session_stop_by_name(KERNEL_SESSION);
    s->heap_h = s->kern_h = 0;
}

static int etw_available(char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    return 0; /* privileges are checked by StartTraceW itself (access denied: EPERM) */
}

static void etw_close(struct source *base);

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
    s->stacks = p->stacks != SOURCE_STACKS_NONE;
    s->no_heap = p->no_heap;
    s->no_virtual = p->no_virtual || s->exe_mode;
    s->sample_ns = p->sample_ns;
    uv_mutex_init(&s->mu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    s->snap_ready = sym_snap_init(&s->snap) == 0;
    s->quit_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    struct evring_limits lim = {RING_EVENTS, p->max_stacks, p->max_strings, p->max_name_len,
                                p->budget};
    int rc = evring_new(&s->ring, loop, &lim, ring_ready, s);
    if (rc || !s->quit_event) {
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

static int etw_start(struct source *base, char *err, size_t errsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->started)
        return 0;
    if (etw_active) {
        snprintf(err, errsz, "another session of this daemon runs the ETW sessions: one at a time "
                             "(Windows allows one heap logger)");
        return HT_EFULL;
    }
    if (etw_mutex_take() != 0) {
        snprintf(err, errsz, "another heaptraced runs ETW sessions on this machine (Windows allows "
                             "one heap logger)");
        return HT_EFULL;
    }
    etw_active = s->active = 1;
    LARGE_INTEGER f, t;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&t);
    s->qpc_freq = (uint64_t)f.QuadPart;
    s->start_qpc = (uint64_t)t.QuadPart;
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
        return HT_ESTATE;
    }
    int rc = 0;
    if (s->exe_mode) {
        rc = ifeo_enable(IFEO_JOURNAL_KEY, s->image, err, errsz);
        if (rc)
            return rc;
        s->ifeo_set = 1;
    }
    if (!s->no_heap) {
        const uint32_t pid = (uint32_t)s->pid; /* 0 in --exe mode (1.5) */
        const uint16_t hooks[] = {ETW_HOOK_HEAP_ALLOC, ETW_HOOK_HEAP_REALLOC};
        struct etw_session_spec hs = {.guid = &etw_guid_heap,
                                      .name = HEAP_SESSION,
                                      .log_file_mode = ETW_REAL_TIME_MODE,
                                      .buffer_kb = 1024,
                                      .min_buffers = 64,
                                      .max_buffers = 256,
                                      .flush_timer_s = 1,
                                      .pids = &pid,
                                      .npids = 1,
                                      .hooks = hooks,
                                      .nhooks = s->stacks ? 2 : 0};
        if ((rc = session_start(&hs, &s->heap_h, err, errsz)) != 0)
            goto fail;
    }
    if (!s->no_virtual) {
        struct etw_session_spec ks = {.guid = &kernel_session_guid,
                                      .name = KERNEL_SESSION,
                                      .log_file_mode = ETW_REAL_TIME_MODE | ETW_SYSTEM_LOGGER_MODE,
                                      .buffer_kb = 256,
                                      .min_buffers = 16,
                                      .max_buffers = 64,
                                      .flush_timer_s = 1,
                                      .enable_flags = ETW_FLAG_PROCESS | ETW_FLAG_THREAD |
                                                      ETW_FLAG_IMAGE_LOAD | ETW_FLAG_VIRTUAL_ALLOC};
        if ((rc = session_start(&ks, &s->kern_h, err, errsz)) != 0)
            goto fail;
        if (s->stacks) {
            /* Stacks on VirtualAlloc: {PageFault GUID, 98} (2.1). */
            CLASSIC_EVENT_ID id;
            memset(&id, 0, sizeof(id));
            static const GUID pagefault = {0x3d6fa8d3, 0xfe05, 0x11d0,
                                           {0x9d, 0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
            id.EventGuid = pagefault;
            id.Type = 98;
            ULONG r = TraceSetInformation(s->kern_h, TraceStackTracingInfo, &id, sizeof(id));
            if (r != ERROR_SUCCESS) {
                win_error(err, errsz, "TraceSetInformation(TraceStackTracingInfo)", r);
                rc = map_error(r);
                goto fail;
            }
        }
    }
    s->heap.ph = s->kern.ph = 0;
    if (s->heap_h && (rc = consumer_open(s, &s->heap, HEAP_SESSION, err, errsz)) != 0)
        goto fail;
    if (s->kern_h && (rc = consumer_open(s, &s->kern, KERNEL_SESSION, err, errsz)) != 0)
        goto fail;
    /* The process, before any event (start's reply shows it). */
    if (s->pid) {
        struct procmods_module *mods;
        size_t n;
        char name[260] = "";
        if (procmods_list(s->pid, &mods, &n) == 0 && n > 0) {
            snprintf(name, sizeof(name), "%s", procmods_basename(mods[0].path));
            for (size_t i = 0; s->syms && i < n; i++)
                sym_cache_add_module(s->syms, mods[i].base, mods[i].base + mods[i].size,
                                     mods[i].base, mods[i].path, NULL);
            if (s->syms) /* no worker has the cache yet: before start's reply */
                sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
        } else {
            mods = NULL;
        }
        struct source_process sp = {.pid = s->pid, .name = name, .wall = ""};
        if (s->outer.process)
            s->outer.process(s->outer.arg, &sp);
        ht_free(mods);
        struct ht_event ev = {.kind = HT_EV_PROCESS, .size = s->pid};
        s->outer.events(s->outer.arg, &ev, 1);
    }
    s->consumers_left = (s->heap_h ? 1 : 0) + (s->kern_h ? 1 : 0);
    struct consumer *cs[2] = {&s->heap, &s->kern};
    for (int i = 0; i < 2; i++) {
        if (!cs[i]->corr)
            continue;
        if (uv_thread_create(&cs[i]->thread, consumer_main, cs[i]) != 0) {
            snprintf(err, errsz, "cannot start a consumer thread");
            rc = UV_ENOMEM;
            goto fail;
        }
        cs[i]->running = 1;
    }
    if (s->pid && uv_thread_create(&s->sampler, sampler_main, s) == 0)
        atomic_store(&s->sampler_running, 1);
    s->started = 1;
    return 0;
fail:
    sessions_stop(s);
    return rc;
}

static int etw_drain(struct source *base, size_t budget)
{
    struct etw_source *s = (struct etw_source *)base;
    if (s->ended || !s->ring)
        return 0;
    int rc = evring_drain(s->ring, &s->base.sink, budget);
    if (rc < 0)
        return -1;
    if (rc == 0 && evring_finished(s->ring)) {
        char reason[160];
        s->ended = 1;
        uv_mutex_lock(&s->mu);
        snprintf(reason, sizeof(reason), "%s", s->reason[0] ? s->reason : "tracing stopped");
        uv_mutex_unlock(&s->mu);
        /* The consumers are done: TracingFlags back, the machine's heap
         * logger free for the next start (the source stays for its symbols). */
        sessions_stop(s);
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
    if (s->watch) {
        procwatch_stop(s->watch);
        s->watch = NULL;
    }
    sessions_stop(s);
}

static void etw_close(struct source *base)
{
    if (!base)
        return;
    struct etw_source *s = (struct etw_source *)base;
    etw_stop(base);
    etw_corr_free(s->heap.corr);
    etw_corr_free(s->kern.corr);
    if (s->ring)
        evring_free(s->ring);
    if (s->syms)
        sym_cache_free(s->syms);
    mem_acct_close(&s->sym_acct);
    if (s->snap_ready)
        sym_snap_destroy(&s->snap);
    if (s->quit_event)
        CloseHandle(s->quit_event);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->mu);
    ht_free(s);
}

static void etw_stats(struct source *base, struct source_stats *st)
{
    struct etw_source *s = (struct etw_source *)base;
    memset(st, 0, sizeof(*st));
    if (s->ring)
        evring_producer_stats(s->ring, st);
    uv_mutex_lock(&s->mu);
    st->events = s->dec.decoded;
    st->malformed = s->dec.malformed;
    st->lost = s->lost_events;
    for (int k = 0; k < MEM_KINDS; k++) { /* the correlators charge under mu */
        st->mem[k] += s->acct.bytes[k];
        st->over_budget[k] += s->acct.over_budget[k];
        st->no_memory[k] += s->acct.no_memory[k];
    }
    uv_mutex_unlock(&s->mu);
    uint64_t put = atomic_load_explicit(&s->put, memory_order_relaxed);
    if (s->stopped && put > s->delivered)
        st->lost += put - s->delivered;
    /* The symbol cache's as of its last use: never waits for the symbolizer lock. */
    if (s->snap_ready)
        sym_snap_add(&s->snap, st, MEM_symbols);
}

static cJSON *etw_status_json(struct source *base)
{
    struct etw_source *s = (struct etw_source *)base;
    struct {
        struct etw_decode_stats dec;
        struct etw_corr_stats heap, kern;
    } st;
    memset(&st, 0, sizeof(st));
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uv_mutex_lock(&s->mu);
    st.dec = s->dec;
    if (s->heap.corr)
        st.heap = *etw_corr_stats(s->heap.corr);
    if (s->kern.corr)
        st.kern = *etw_corr_stats(s->kern.corr);
    cJSON_AddNumberToObject(o, "records", (double)s->records);
    cJSON_AddNumberToObject(o, "lost_events", (double)s->lost_events);
    cJSON_AddNumberToObject(o, "lost_buffers", (double)s->lost_buffers);
    uv_mutex_unlock(&s->mu);
    cJSON_AddStringToObject(o, "mode", s->exe_mode ? "exe" : "pid");
    if (s->exe_mode)
        cJSON_AddStringToObject(o, "image", s->image);
    cJSON_AddNumberToObject(o, "decoded", (double)st.dec.decoded);
    cJSON_AddNumberToObject(o, "malformed", (double)st.dec.malformed);
    cJSON_AddNumberToObject(o, "unknown_provider", (double)st.dec.unknown_provider);
    cJSON_AddNumberToObject(o, "ignored_opcode", (double)st.dec.ignored_opcode);
    const struct etw_corr_stats *cs[2] = {&st.heap, &st.kern};
    const char *names[2] = {"heap_session", "virtual_alloc_session"};
    for (int i = 0; i < 2; i++) {
        cJSON *c = cJSON_AddObjectToObject(o, names[i]);
        if (!c)
            continue;
        cJSON_AddNumberToObject(c, "events", (double)cs[i]->events_in);
        cJSON_AddNumberToObject(c, "stacks_matched", (double)cs[i]->stacks_matched);
        cJSON_AddNumberToObject(c, "stacks_unmatched", (double)cs[i]->stacks_unmatched);
        cJSON_AddNumberToObject(c, "events_no_stack", (double)cs[i]->events_no_stack);
        cJSON_AddNumberToObject(c, "other_process", (double)cs[i]->other_process);
        cJSON_AddNumberToObject(c, "realloc_moved_unpaired", (double)cs[i]->realloc_moved_unpaired);
    }
    return o;
}

/* Stack frames are return addresses: looked up as addr - 1. The drain
 * queues nothing for the cache (modules come from start's list, and a miss
 * reads the target's module list), so there is no sym_sync. */
static const char *etw_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (!s->syms)
        return NULL;
    const char *r = sym_cache_resolve(s->syms, addr, 1, buf, bufsz);
    sym_snap_take(&s->snap, s->syms, &s->sym_acct, MEM_symbols);
    return r;
}

/* A previous run's sessions and IFEO changes (etw-mechanics.md 1.5, 5.5):
 * at daemon start after a crash, and at daemon stop. */
static int etw_recover(char *msg, size_t msgsz)
{
    if (etw_active || etw_mutex_take() != 0)
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
    .summary = "ETW heap logger and VirtualAlloc system-logger sessions with stack walks "
               "(Windows, administrator)",
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
    .recover = etw_recover,
};
