/* The machine's ETW sessions: the heap logger and the system logger, their consumer threads,
 * the hub over them, and what a crashed run left behind. */
#include "etw-int.h"
#include "etw-record-win.h"
#include "ht-error.h"
#include "ifeo.h"

#include <evntcons.h>
#include <evntrace.h>

#include <stdio.h>
#include <string.h>

#define PROPS_ROOM 2048 /* for the names ControlTraceW writes back */
/* The system logger's own GUID: SystemTraceControlGuid names the one "NT
 * Kernel Logger" session, a session with EVENT_TRACE_SYSTEM_LOGGER_MODE gets
 * a GUID of its own (learn.microsoft.com, Configuring and Starting a
 * SystemTraceProvider Session). A fixed one of ours,
 * {c1b4a57e-6e40-4c4c-9d0a-68656170747261}. */
const struct etw_guid etw_kernel_logger_guid = {{0xc1, 0xb4, 0xa5, 0x7e, 0x6e, 0x40, 0x4c, 0x4c,
                                                 0x9d, 0x0a, 0x68, 0x65, 0x61, 0x70, 0x74, 0x72}};

/* ---- the machine's sessions: the hub and its Windows backend (loop) ---- */

struct consumer {
    TRACEHANDLE h;  /* StartTraceW's (0: not running) */
    TRACEHANDLE ph; /* OpenTraceW's, or INVALID_PROCESSTRACE_HANDLE */
    uv_thread_t thread;
    int running;
    atomic_int stopping; /* ProcessTrace returns because we stopped it */
    int which;           /* ETW_HUB_HEAP or ETW_HUB_KERNEL */
};

struct etw_hub *etw_machine_hub; /* while any session of this daemon traces */
static struct consumer heap_c = {.which = ETW_HUB_HEAP}, kern_c = {.which = ETW_HUB_KERNEL};
uint64_t etw_qpc_freq;
struct etw_dosmap etw_drive_map; /* built when the hub starts, read by the consumers */

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
    return rc == ERROR_ACCESS_DENIED    ? HT_EPERM
           : rc == ERROR_ALREADY_EXISTS ? HT_EEXIST
                                        : HT_EINTERNAL;
}

static wchar_t *wide(const char *s, wchar_t *buf, int cap)
{
    if (!MultiByteToWideChar(CP_UTF8, 0, s, -1, buf, cap))
        buf[0] = 0;
    return buf;
}

/* Stop a session of ours by name (a previous run's: a real-time session
 * outlives the process that started it); no error if none. */
static void etw_logger_stop(const char *name)
{
    static uint8_t props[ETW_PROPS_SIZE + PROPS_ROOM] __attribute__((aligned(8)));
    char err[128];
    struct etw_session_spec spec = {.guid = &etw_guid_heap, .name = name};
    if (!etw_props_build(props, sizeof(props), &spec, PROPS_ROOM, err, sizeof(err)))
        return;
    wchar_t w[80];
    ControlTraceW(0, wide(name, w, 80), (EVENT_TRACE_PROPERTIES *)props, EVENT_TRACE_CONTROL_STOP);
}

/* A session's counters (etw-int.h). */
int etw_logger_query(const char *name, const struct etw_guid *guid, struct etw_logger_counters *out)
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

/* The name of a running heap session that is not ours, or "" (Windows runs
 * one session with the heap provider's GUID at a time). */
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
        if (!WideCharToMultiByte(CP_UTF8, 0, target, -1, m->v[m->n].device, sizeof(m->v[0].device),
                                 NULL, NULL))
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

static int etw_logger_start(const struct etw_session_spec *spec, TRACEHANDLE *h, char *err,
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
    etw_hub_record(etw_machine_hub, c->which, &r);
}

static void consumer_main(void *arg)
{
    struct consumer *c = arg;
    ULONG rc = ProcessTrace(&c->ph, 1, NULL, NULL);
    if (!atomic_load(&c->stopping)) {
        char why[120];
        snprintf(why, sizeof(why), "the %s session ended (ProcessTrace returned %lu)",
                 c->which == ETW_HUB_HEAP ? "heap logger" : "VirtualAlloc", (unsigned long)rc);
        etw_hub_session_ended(etw_machine_hub, c->which, why);
    }
}

/* Stop a session of ours (StopTrace by name), close its consumer
 * (ProcessTrace returns), join it. */
static void consumer_stop(struct consumer *c, const char *name)
{
    atomic_store(&c->stopping, 1);
    if (c->h)
        etw_logger_stop(name);
    c->h = 0;
    /* ERROR_CTX_CLOSE_PENDING is success (learn.microsoft.com, CloseTrace). */
    if (c->ph && c->ph != INVALID_PROCESSTRACE_HANDLE)
        CloseTrace(c->ph);
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
    lf.ProcessTraceMode = PROCESS_TRACE_MODE_REAL_TIME | PROCESS_TRACE_MODE_EVENT_RECORD |
                          PROCESS_TRACE_MODE_RAW_TIMESTAMP;
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
    int rc = etw_logger_start(&hs, &heap_c.h, err, errsz);
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
    struct etw_session_spec ks = {.guid = &etw_kernel_logger_guid,
                                  .name = KERNEL_SESSION,
                                  .log_file_mode = ETW_REAL_TIME_MODE | ETW_SYSTEM_LOGGER_MODE,
                                  .buffer_kb = 256,
                                  .min_buffers = 16,
                                  .max_buffers = 64,
                                  .flush_timer_s = 1,
                                  .enable_flags = ETW_FLAG_PROCESS | ETW_FLAG_THREAD |
                                                  ETW_FLAG_IMAGE_LOAD | ETW_FLAG_VIRTUAL_ALLOC};
    int rc = etw_logger_start(&ks, &kern_c.h, err, errsz);
    if (rc)
        return rc;
    if (stacks) {
        /* Stacks on VirtualAlloc: {PageFault GUID, 98} (learn.microsoft.com,
         * TraceSetInformation and CLASSIC_EVENT_ID). */
        CLASSIC_EVENT_ID id;
        memset(&id, 0, sizeof(id));
        static const GUID pagefault = {
            0x3d6fa8d3, 0xfe05, 0x11d0, {0x9d, 0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
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
int etw_machine_open(char *err, size_t errsz)
{
    if (etw_machine_hub)
        return 0;
    if (etw_mutex_take() != 0) {
        snprintf(err, errsz,
                 "another heaptraced runs ETW sessions on this machine (Windows allows "
                 "one heap logger)");
        return HT_EFULL;
    }
    /* A previous run's sessions (a crash leaves them running). */
    etw_logger_stop(HEAP_SESSION);
    etw_logger_stop(KERNEL_SESSION);
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
    etw_qpc_freq = (uint64_t)f.QuadPart;
    dosmap_build(&etw_drive_map);
    struct etw_hub_backend be = {NULL, be_heap_start, be_heap_stop, be_kernel_start,
                                 be_kernel_stop};
    if (etw_hub_new(&etw_machine_hub, &be) != 0) {
        etw_mutex_give();
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    return 0;
}

/* The last session left: the sessions are stopped (by the hub), the
 * machine's heap logger free for others. */
void etw_machine_close_if_idle(void)
{
    if (etw_machine_hub && etw_hub_count(etw_machine_hub) == 0) {
        etw_hub_free(etw_machine_hub);
        etw_machine_hub = NULL;
        etw_mutex_give();
    }
}

/* A previous run's sessions and IFEO changes (ifeo.h): at daemon start
 * after a crash, and at daemon stop. */
int etw_recover(char *msg, size_t msgsz)
{
    if (etw_machine_hub || etw_mutex_take() != 0)
        return 0; /* ours, or another daemon's: live, not left over */
    etw_logger_stop(HEAP_SESSION);
    etw_logger_stop(KERNEL_SESSION);
    unsigned failed = 0, done = ifeo_restore_all(IFEO_JOURNAL_KEY, &failed);
    if (done || failed)
        snprintf(msg, msgsz, "ETW: TracingFlags of %u image(s) restored from the journal%s", done,
                 failed ? " (some could not be: they stay journaled)" : "");
    etw_mutex_give();
    return (int)(done + failed);
}
