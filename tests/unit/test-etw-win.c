/* Windows only: the byte layouts the portable ETW code writes and reads
 * (etw-props.h, etw-decode.h) against the SDK's own structs and constants
 * (mingw-w64's evntrace.h / evntcons.h): built by the cross build, run under
 * wine. */
#include "etw-decode.h"
#include "etw-props.h"
#include "etw-record-win.h"
#include "etw-stacks.h"
#include "ht-test.h"

#include <windows.h>
#include <evntcons.h>
#include <evntrace.h>
#include <stddef.h>

_Static_assert(sizeof(EVENT_TRACE_PROPERTIES) == ETW_PROPS_SIZE, "EVENT_TRACE_PROPERTIES size");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, Wnode.BufferSize) == ETW_PROPS_OFF_BUFFER_SIZE, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, Wnode.Guid) == ETW_PROPS_OFF_GUID, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, Wnode.ClientContext) == ETW_PROPS_OFF_CLIENT_CONTEXT, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, Wnode.Flags) == ETW_PROPS_OFF_WNODE_FLAGS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, BufferSize) == ETW_PROPS_OFF_BUFFER_KB, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, MinimumBuffers) == ETW_PROPS_OFF_MIN_BUFFERS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, MaximumBuffers) == ETW_PROPS_OFF_MAX_BUFFERS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, LogFileMode) == ETW_PROPS_OFF_LOG_FILE_MODE, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, FlushTimer) == ETW_PROPS_OFF_FLUSH_TIMER, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, EnableFlags) == ETW_PROPS_OFF_ENABLE_FLAGS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, NumberOfBuffers) == ETW_PROPS_OFF_NUMBER_OF_BUFFERS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, FreeBuffers) == ETW_PROPS_OFF_FREE_BUFFERS, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, EventsLost) == ETW_PROPS_OFF_EVENTS_LOST, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, LogBuffersLost) == ETW_PROPS_OFF_LOG_BUFFERS_LOST, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, RealTimeBuffersLost) == ETW_PROPS_OFF_RT_BUFFERS_LOST, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, LogFileNameOffset) == ETW_PROPS_OFF_LOG_FILE_NAME, "");
_Static_assert(offsetof(EVENT_TRACE_PROPERTIES, LoggerNameOffset) == ETW_PROPS_OFF_LOGGER_NAME, "");
_Static_assert(EVENT_HEADER_FLAG_64_BIT_HEADER == ETW_HDR_FLAG_64_BIT_HEADER, "");
_Static_assert(EVENT_HEADER_FLAG_32_BIT_HEADER == ETW_HDR_FLAG_32_BIT_HEADER, "");
_Static_assert(EVENT_HEADER_FLAG_CLASSIC_HEADER == ETW_HDR_FLAG_CLASSIC_HEADER, "");
_Static_assert(WNODE_FLAG_TRACED_GUID == ETW_WNODE_FLAG_TRACED_GUID, "");
_Static_assert(EVENT_TRACE_REAL_TIME_MODE == ETW_REAL_TIME_MODE, "");
_Static_assert(EVENT_TRACE_SYSTEM_LOGGER_MODE == ETW_SYSTEM_LOGGER_MODE, "");
_Static_assert(EVENT_TRACE_INDEPENDENT_SESSION_MODE == ETW_INDEPENDENT_SESSION_MODE, "");
_Static_assert(EVENT_TRACE_FLAG_VIRTUAL_ALLOC == ETW_FLAG_VIRTUAL_ALLOC, "");
_Static_assert(EVENT_TRACE_FLAG_IMAGE_LOAD == ETW_FLAG_IMAGE_LOAD, "");
_Static_assert(MEM_COMMIT == ETW_MEM_COMMIT && MEM_RELEASE == ETW_MEM_RELEASE, "");
_Static_assert(MEM_DECOMMIT == ETW_MEM_DECOMMIT && MEM_RESERVE == ETW_MEM_RESERVE, "");

/* The built buffer read through the SDK struct, and a GUID struct's bytes
 * through etw_guid_from_struct. */
static void test_props_as_struct(void)
{
    static uint8_t b[1024] __attribute__((aligned(8)));
    char err[128];
    const uint32_t pid = 4242;
    const uint16_t hooks[] = {ETW_HOOK_HEAP_ALLOC, ETW_HOOK_HEAP_REALLOC};
    struct etw_session_spec s = {.guid = &etw_guid_heap, .name = "heaptraced-heap",
                                 .log_file_mode = ETW_REAL_TIME_MODE, .buffer_kb = 64,
                                 .min_buffers = 8, .max_buffers = 20, .flush_timer_s = 1,
                                 .pids = &pid, .npids = 1, .hooks = hooks, .nhooks = 2};
    size_t n = etw_props_build(b, sizeof(b), &s, 128, err, sizeof(err));
    CHECK(n > 0);
    const EVENT_TRACE_PROPERTIES *p = (const EVENT_TRACE_PROPERTIES *)b;
    CHECK_EQ(p->Wnode.BufferSize, n);
    CHECK_EQ(p->Wnode.ClientContext, 1);
    CHECK_EQ(p->LogFileMode, EVENT_TRACE_REAL_TIME_MODE);
    CHECK_EQ(p->MaximumBuffers, 20);
    CHECK(wcscmp((const wchar_t *)(b + p->LoggerNameOffset), L"heaptraced-heap") == 0);
    /* HeapGuid as the SDK spells it. */
    static const GUID heap = {0x222962ab, 0x6180, 0x4b88, {0xa8, 0x25, 0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a}};
    CHECK(memcmp(&p->Wnode.Guid, &heap, sizeof(GUID)) == 0);
    struct etw_guid g;
    etw_guid_from_struct((const uint8_t *)&heap, &g);
    CHECK(etw_guid_eq(&g, &etw_guid_heap));
    CHECK_EQ(p->EnableFlags & 0xFFFF0000u, 0x80FF0000u);
    CHECK_EQ(p->EnableFlags & 0xFFFF, 152);
}

/* Synthetic EVENT_RECORDs (docs/windows.md#what-wine-does-and-does-not-do) through the
 * conversion the
 * consumers use, the decoder and the correlator: a 64-bit HeapAlloc and its
 * StackWalk, a 32-bit (WOW64) one, a processor index. */
static int n_out;
static struct ht_event last_ev;
static uint64_t last_top;
static unsigned last_depth;

static void out_cb(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth)
{
    (void)arg;
    n_out++;
    last_ev = *ev;
    last_depth = depth;
    last_top = depth ? frames[0] : 0;
}

static void test_event_records(void)
{
    static const GUID heap = {0x222962ab, 0x6180, 0x4b88, {0xa8, 0x25, 0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a}};
    static const GUID stackwalk = {0xdef2fe46, 0x7bd6, 0x4b80, {0xbd, 0x94, 0xf5, 0x7f, 0xe2, 0x0d, 0x0c, 0xe3}};
    uint8_t alloc[28];
    uint64_t h = 0x1d2a5b40000ull, size = 40, addr = 0x1d2a5b4c0d0ull;
    uint32_t src = 2;
    memcpy(alloc, &h, 8), memcpy(alloc + 8, &size, 8), memcpy(alloc + 16, &addr, 8),
        memcpy(alloc + 24, &src, 4);
    EVENT_RECORD er;
    memset(&er, 0, sizeof(er));
    er.EventHeader.ProviderId = heap;
    er.EventHeader.EventDescriptor.Opcode = 33;
    er.EventHeader.EventDescriptor.Version = 2;
    er.EventHeader.Flags = EVENT_HEADER_FLAG_64_BIT_HEADER | EVENT_HEADER_FLAG_CLASSIC_HEADER;
    er.EventHeader.ProcessId = 4242;
    er.EventHeader.ThreadId = 7;
    er.EventHeader.TimeStamp.QuadPart = 1000000;
    er.BufferContext.ProcessorNumber = 3;
    er.UserData = alloc;
    er.UserDataLength = sizeof(alloc);
    struct etw_record r;
    etw_record_from_event(&er, &r);
    CHECK(etw_guid_eq(&r.provider, &etw_guid_heap));
    CHECK(r.opcode == 33 && r.version == 2 && r.pid == 4242 && r.tid == 7 && r.cpu == 3);
    CHECK(r.ts == 1000000 && r.len == 28);
    struct etw_decode_stats st = {0};
    struct etw_decoded d;
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.kind == ETW_HEAP_ALLOC && d.addr == addr && d.size == 40 && d.heap == h);
    struct etw_corr *c;
    struct etw_corr_config cfg = {.pid = 4242, .qpc_freq = 10000000, .start_qpc = 0};
    CHECK(etw_corr_new(&c, &cfg, out_cb, NULL) == 0);
    etw_corr_add(c, &r, &d);
    CHECK_EQ(n_out, 0);
    /* Its StackWalk: header without pid/tid, EventTimeStamp = the event's. */
    uint8_t sw[16 + 3 * 8];
    uint64_t ets = 1000000, f[3] = {0xFFFFF80100001000ull, 0x7FF6A0001234ull, 0x7FF6A0005678ull};
    uint32_t spid = 4242, stid = 7;
    memcpy(sw, &ets, 8), memcpy(sw + 8, &spid, 4), memcpy(sw + 12, &stid, 4), memcpy(sw + 16, f, 24);
    memset(&er, 0, sizeof(er));
    er.EventHeader.ProviderId = stackwalk;
    er.EventHeader.EventDescriptor.Opcode = 32;
    er.EventHeader.Flags = EVENT_HEADER_FLAG_64_BIT_HEADER | EVENT_HEADER_FLAG_CLASSIC_HEADER;
    er.EventHeader.ProcessId = 0xFFFFFFFF;
    er.EventHeader.ThreadId = 0xFFFFFFFF;
    er.EventHeader.TimeStamp.QuadPart = 1000001;
    er.BufferContext.ProcessorNumber = 3;
    er.UserData = sw;
    er.UserDataLength = sizeof(sw);
    etw_record_from_event(&er, &r);
    CHECK(etw_decode(&r, &d, &st) == 1);
    CHECK(d.kind == ETW_STACK && d.nframes == 3);
    etw_corr_add(c, &r, &d);
    CHECK_EQ(n_out, 1);
    CHECK(last_ev.kind == HT_EV_ALLOC && last_ev.addr == addr && last_ev.tid == 7);
    CHECK_EQ(last_depth, 2); /* the kernel frame dropped */
    CHECK_EQ(last_top, 0x7FF6A0001234ull);
    CHECK_EQ(last_ev.t, 100000000); /* 10^6 ticks at 10 MHz */
    /* With EVENT_HEADER_FLAG_PROCESSOR_INDEX the processor is ProcessorIndex. */
    er.EventHeader.Flags |= EVENT_HEADER_FLAG_PROCESSOR_INDEX;
    er.BufferContext.ProcessorIndex = 70;
    etw_record_from_event(&er, &r);
    CHECK_EQ(r.cpu, 70);
    etw_corr_free(c);
}

HT_TEST_MAIN(T(props_as_struct), T(event_records))
