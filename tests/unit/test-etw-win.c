/* Windows only: the byte layouts the portable ETW code writes and reads
 * (etw-props.h, etw-decode.h) against the SDK's own structs and constants
 * (mingw-w64's evntrace.h / evntcons.h): built by the cross build, run under
 * wine. */
#include "etw-decode.h"
#include "etw-props.h"
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

HT_TEST_MAIN(T(props_as_struct))
