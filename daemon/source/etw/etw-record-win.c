/* EVENT_RECORD -> etw_record (etw-record-win.h). */
#include "etw-record-win.h"

void etw_record_from_event(const EVENT_RECORD *er, struct etw_record *r)
{
    etw_guid_from_struct((const uint8_t *)&er->EventHeader.ProviderId, &r->provider);
    r->opcode = er->EventHeader.EventDescriptor.Opcode;
    r->version = er->EventHeader.EventDescriptor.Version;
    r->flags = er->EventHeader.Flags;
    r->pid = er->EventHeader.ProcessId;
    r->tid = er->EventHeader.ThreadId;
    r->cpu = GetEventProcessorIndex((PEVENT_RECORD)er);
    r->ts = (uint64_t)er->EventHeader.TimeStamp.QuadPart;
    r->payload = er->UserData;
    r->len = er->UserDataLength;
}
