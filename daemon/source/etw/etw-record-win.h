/* An EVENT_RECORD as the portable decoder's record (etw-decode.h); Windows only. */
#ifndef ETW_RECORD_WIN_H
#define ETW_RECORD_WIN_H

#include "etw-decode.h"

#include <windows.h>
#include <evntcons.h>

/* Header fields and UserData of er (the payload stays er's). The processor
 * is GetEventProcessorIndex's (BufferContext, or ProcessorIndex when
 * EVENT_HEADER_FLAG_PROCESSOR_INDEX is set; learn.microsoft.com,
 * GetEventProcessorIndex);
 * the timestamp is raw (PROCESS_TRACE_MODE_RAW_TIMESTAMP). */
void etw_record_from_event(const EVENT_RECORD *er, struct etw_record *r);

#endif
