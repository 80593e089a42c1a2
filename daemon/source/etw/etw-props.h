/*
 * The EVENT_TRACE_PROPERTIES buffer StartTraceW and ControlTraceW take, built
 * as bytes in the x64 layout (no windows.h; the Windows build checks the
 * offsets against the SDK's struct in test-etw-win): the heap logger's
 * extension block (ETW_EXT_PIDS, ETW_EXT_STACKWALK_FILTER) byte for byte as
 * Geoff Chappell's TRACE_ENABLE_FLAG_EXTENSION page and PerfView's
 * ETWKernelControl SaveExtensions give it (ntwmi.h names), and the system
 * logger's fields (EVENT_TRACE_SYSTEM_LOGGER_MODE, learn.microsoft.com).
 */
#ifndef ETW_PROPS_H
#define ETW_PROPS_H

#include "etw-decode.h"

#include <stddef.h>
#include <stdint.h>

/* x64 EVENT_TRACE_PROPERTIES (evntrace.h): 48 bytes of WNODE_HEADER, then
 * the session fields; the names follow it. */
#define ETW_PROPS_SIZE 120
#define ETW_PROPS_OFF_BUFFER_SIZE 0     /* Wnode.BufferSize */
#define ETW_PROPS_OFF_GUID 24           /* Wnode.Guid */
#define ETW_PROPS_OFF_CLIENT_CONTEXT 40 /* Wnode.ClientContext */
#define ETW_PROPS_OFF_WNODE_FLAGS 44    /* Wnode.Flags */
#define ETW_PROPS_OFF_BUFFER_KB 48
#define ETW_PROPS_OFF_MIN_BUFFERS 52
#define ETW_PROPS_OFF_MAX_BUFFERS 56
#define ETW_PROPS_OFF_LOG_FILE_MODE 64
#define ETW_PROPS_OFF_FLUSH_TIMER 68
#define ETW_PROPS_OFF_ENABLE_FLAGS 72
#define ETW_PROPS_OFF_NUMBER_OF_BUFFERS 80
#define ETW_PROPS_OFF_FREE_BUFFERS 84
#define ETW_PROPS_OFF_EVENTS_LOST 88
#define ETW_PROPS_OFF_LOG_BUFFERS_LOST 96
#define ETW_PROPS_OFF_RT_BUFFERS_LOST 100
#define ETW_PROPS_OFF_LOG_FILE_NAME 112 /* LogFileNameOffset */
#define ETW_PROPS_OFF_LOGGER_NAME 116   /* LoggerNameOffset */

#define ETW_WNODE_FLAG_TRACED_GUID 0x00020000u
#define ETW_REAL_TIME_MODE 0x00000100u
#define ETW_INDEPENDENT_SESSION_MODE 0x08000000u
#define ETW_SYSTEM_LOGGER_MODE 0x02000000u
/* EnableFlags for the system logger (evntrace.h EVENT_TRACE_FLAG_*). */
#define ETW_FLAG_PROCESS 0x00000001u
#define ETW_FLAG_THREAD 0x00000002u
#define ETW_FLAG_IMAGE_LOAD 0x00000004u
#define ETW_FLAG_VIRTUAL_ALLOC 0x00004000u
/* Stack-walk hook ids (group | type: the heap group 0x10 with the HeapAlloc
 * and HeapReAlloc opcodes 33 and 34, etw-decode.c). */
#define ETW_HOOK_HEAP_ALLOC 0x1021u
#define ETW_HOOK_HEAP_REALLOC 0x1022u
#define ETW_HOOK_HEAP_FREE 0x1024u
#define ETW_EXT_MAX_PIDS 64
#define ETW_EXT_MAX_HOOKS 256 /* ETW_MAX_STACKWALK_FILTER */
#define ETW_NAME_MAX 64       /* session names are ASCII, at most this long */

struct etw_session_spec {
    const struct etw_guid *guid; /* Wnode.Guid */
    const char *name;            /* ASCII, 1..ETW_NAME_MAX characters */
    uint32_t log_file_mode;
    uint32_t buffer_kb, min_buffers, max_buffers, flush_timer_s;
    uint32_t enable_flags;       /* ignored when the extension block is used */
    /* The heap logger's extension block: present when npids > 0. */
    const uint32_t *pids;
    unsigned npids;
    const uint16_t *hooks;
    unsigned nhooks;
};

/* Build the buffer into buf (zeroed first): struct, the UTF-16 session name
 * at LoggerNameOffset, then the extension block (8-byte aligned), then
 * `room` spare bytes for what ETW writes back (ControlTraceW copies names
 * there). Returns the size (Wnode.BufferSize), or 0 when the spec is invalid
 * (err says why) or cap is too small. */
size_t etw_props_build(uint8_t *buf, size_t cap, const struct etw_session_spec *s, size_t room,
                       char *err, size_t errsz);

/* Little-endian DWORD at off (tests, and the counters ControlTraceW fills). */
uint32_t etw_props_u32(const uint8_t *buf, size_t off);

#endif
