/* One .etl record header, decoded or skipped by its own size. Layouts: Geoff Chappell,
 * "SYSTEM_TRACE_HEADER", "PERFINFO_TRACE_HEADER", "EVENT_TRACE_HEADER", "EVENT_HEADER",
 * "EVENT_INSTANCE_GUID_HEADER" (geoffchappell.com/studies/windows/km/ntoskrnl/api/etw/);
 * header types, marker bits and extended-item masks: ntwmi.h (System Informer's phnt). */
#include "etl-read.h"

#include <string.h>

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

#define BAD(kind) (-(1 + ETL_ERR_##kind))

/* SYSTEM (0x20 bytes) and COMPACT (0x18): Version u16, type, flags, Size u16 (header
 * included), HookId u16, ThreadId, ProcessId, SystemTime; COMPACT lacks the CPU times. */
static int parse_system(const uint8_t *p, size_t avail, struct etl_record *r, unsigned hlen)
{
    unsigned size = rd16(p + 4);
    if (size < hlen || size > avail)
        return BAD(RECORD_SIZE);
    r->version = rd16(p);
    r->hook = rd16(p + 6);
    r->opcode = (uint8_t)r->hook;
    r->tid = rd32(p + 8);
    r->pid = rd32(p + 12);
    r->ts = rd64(p + 16);
    r->payload = p + hlen;
    r->len = size - hlen;
    return (int)size;
}

/* PERFINFO (0x10 bytes): Version u16, type, flags, Size, HookId, SystemTime; no ids. Version
 * bit 0x8000 announces a PEBS index and bits 0x0700 a count of PMC counters, 8 bytes each,
 * before the payload (ntwmi.h TRACE_HEADER_PEBS_INDEX_FLAG, TRACE_HEADER_PMC_COUNTERS_MASK). */
static int parse_perfinfo(const uint8_t *p, size_t avail, struct etl_record *r)
{
    unsigned size = rd16(p + 4), v = rd16(p);
    unsigned hlen = 16 + (v & 0x8000 ? 8 : 0) + ((v >> 8) & 7) * 8;
    if (size < hlen || size > avail)
        return BAD(RECORD_SIZE);
    r->version = (uint16_t)(v & ~0x8700u);
    r->hook = rd16(p + 6);
    r->opcode = (uint8_t)r->hook;
    r->ts = rd64(p + 8);
    r->payload = p + hlen;
    r->len = size - hlen;
    return (int)size;
}

/* EVENT_TRACE_HEADER (0x30) and EVENT_INSTANCE_GUID_HEADER (0x48): Size u16, type, flags,
 * Class {Type, Level, Version u16}, ThreadId, ProcessId, TimeStamp, Guid. */
static int parse_classic(const uint8_t *p, size_t avail, struct etl_record *r, unsigned hlen)
{
    unsigned size = rd16(p);
    if (size < hlen || size > avail)
        return BAD(RECORD_SIZE);
    r->has_guid = 1;
    r->opcode = p[4];
    r->version = rd16(p + 6);
    r->tid = rd32(p + 8);
    r->pid = rd32(p + 12);
    r->ts = rd64(p + 16);
    memcpy(r->guid, p + 24, 16);
    r->payload = p + hlen;
    r->len = size - hlen;
    return (int)size;
}

/* EVENT_HEADER extended items at +0x50 (flag 0x0001 EXTENDED_INFO): each {u16 reserved,
 * u16 ExtType, u16 Linkage (bit 0: another follows), u16 DataSize}, its data padded to 8. */
static int skip_ext_items(const uint8_t *p, unsigned size, unsigned *at)
{
    unsigned o = *at;
    for (;;) {
        if (o + 8 > size)
            return BAD(EXT_ITEMS);
        unsigned link = rd16(p + o + 4), n = rd16(p + o + 6);
        o += 8 + ((n + 7u) & ~7u);
        if (o > size)
            return BAD(EXT_ITEMS);
        if (!(link & 1))
            break;
    }
    *at = o;
    return 0;
}

/* EVENT_HEADER (0x50): Size, type, flags, Flags u16, EventProperty, ThreadId, ProcessId,
 * TimeStamp, ProviderId, EVENT_DESCRIPTOR {Id u16, Version, Channel, Level, Opcode, Task,
 * Keyword}, ProcessorTime, ActivityId. */
static int parse_event(const uint8_t *p, size_t avail, struct etl_record *r)
{
    unsigned size = rd16(p), hlen = 0x50;
    if (size < hlen || size > avail)
        return BAD(RECORD_SIZE);
    r->has_guid = 1;
    r->tid = rd32(p + 8);
    r->pid = rd32(p + 12);
    r->ts = rd64(p + 16);
    memcpy(r->guid, p + 24, 16);
    r->id = rd16(p + 40);
    r->version = p[42];
    r->opcode = p[45];
    if (rd16(p + 4) & 0x0001) {
        unsigned at = hlen;
        int rc = skip_ext_items(p, size, &at);
        if (rc < 0)
            return rc;
        r->ext = p + hlen;
        r->ext_len = at - hlen;
        hlen = at;
    }
    r->payload = p + hlen;
    r->len = size - hlen;
    return (int)size;
}

/* Records of kinds not decoded (TIMED, ERROR, WNODE, MESSAGE, WPP): skipped by the u16 size
 * at +0 when it covers at least the marker and a size. */
static int parse_skipped(const uint8_t *p, size_t avail, struct etl_record *r)
{
    unsigned size = rd16(p);
    if (size < 8 || size > avail)
        return BAD(RECORD_SIZE);
    r->payload = p + 8;
    r->len = size - 8;
    return (int)size;
}

static int parse_typed(const uint8_t *p, size_t avail, struct etl_record *r)
{
    switch (r->kind) {
    case ETL_HDR_SYSTEM32:
    case ETL_HDR_SYSTEM64:
        return parse_system(p, avail, r, 0x20);
    case ETL_HDR_COMPACT32:
    case ETL_HDR_COMPACT64:
        return parse_system(p, avail, r, 0x18);
    case ETL_HDR_PERFINFO32:
    case ETL_HDR_PERFINFO64:
        return parse_perfinfo(p, avail, r);
    case ETL_HDR_FULL32:
    case ETL_HDR_FULL64:
        return parse_classic(p, avail, r, 0x30);
    case ETL_HDR_INSTANCE32:
    case ETL_HDR_INSTANCE64:
        return parse_classic(p, avail, r, 0x48);
    case ETL_HDR_EVENT32:
    case ETL_HDR_EVENT64:
        return parse_event(p, avail, r);
    case ETL_HDR_TIMED:
    case ETL_HDR_ERROR:
    case ETL_HDR_WNODE:
    case ETL_HDR_MESSAGE:
        return parse_skipped(p, avail, r);
    default:
        return BAD(MARKER);
    }
}

static unsigned ptr_size_of(unsigned kind)
{
    switch (kind) {
    case ETL_HDR_SYSTEM32:
    case ETL_HDR_COMPACT32:
    case ETL_HDR_PERFINFO32:
    case ETL_HDR_FULL32:
    case ETL_HDR_INSTANCE32:
    case ETL_HDR_EVENT32:
        return 4;
    case ETL_HDR_SYSTEM64:
    case ETL_HDR_COMPACT64:
    case ETL_HDR_PERFINFO64:
    case ETL_HDR_FULL64:
    case ETL_HDR_INSTANCE64:
    case ETL_HDR_EVENT64:
        return 8;
    default:
        return 0;
    }
}

int etl_record_parse(const uint8_t *p, size_t avail, struct etl_record *r)
{
    if (avail < 8)
        return 0;
    uint32_t marker = rd32(p);
    /* Unused space is 0xFF-filled after the last record (checked on Windows-written files);
     * a zero dword is no record either. */
    if (marker == 0xFFFFFFFFu || marker == 0)
        return 0;
    memset(r, 0, sizeof(*r));
    r->tid = r->pid = ETL_NONE;
    /* Byte 3: TRACE_HEADER_FLAG (0x80) | TRACE_HEADER_EVENT_TRACE (0x40) for typed headers,
     * 0x80 alone for TraceMessage (WPP) records (ntwmi.h). */
    switch (p[3] & 0xC0) {
    case 0xC0:
        r->kind = p[2];
        r->ptr_size = ptr_size_of(r->kind);
        return parse_typed(p, avail, r);
    case 0x80:
        r->kind = ETL_HDR_WPP;
        return parse_skipped(p, avail, r);
    default:
        return BAD(MARKER);
    }
}

const char *etl_hdr_name(unsigned kind)
{
    static const char *const names[] = {
        [ETL_HDR_SYSTEM32] = "system32",
        [ETL_HDR_SYSTEM64] = "system64",
        [ETL_HDR_COMPACT32] = "compact32",
        [ETL_HDR_COMPACT64] = "compact64",
        [ETL_HDR_FULL32] = "full32",
        [ETL_HDR_INSTANCE32] = "instance32",
        [ETL_HDR_TIMED] = "timed",
        [ETL_HDR_ERROR] = "error",
        [ETL_HDR_WNODE] = "wnode",
        [ETL_HDR_MESSAGE] = "message",
        [ETL_HDR_PERFINFO32] = "perfinfo32",
        [ETL_HDR_PERFINFO64] = "perfinfo64",
        [ETL_HDR_EVENT32] = "event_header32",
        [ETL_HDR_EVENT64] = "event_header64",
        [ETL_HDR_FULL64] = "full64",
        [ETL_HDR_INSTANCE64] = "instance64",
    };
    if (kind == ETL_HDR_WPP)
        return "wpp";
    if (kind < sizeof(names) / sizeof(names[0]) && names[kind])
        return names[kind];
    return NULL;
}

const char *etl_err_name(int kind)
{
    static const char *const names[] = {
#define X(name, msg) #name,
        ETL_ERRORS(X)
#undef X
    };
    return kind >= 0 && kind < ETL_ERR_N ? names[kind] : "?";
}

const char *etl_err_msg(int kind)
{
    static const char *const msgs[] = {
#define X(name, msg) msg,
        ETL_ERRORS(X)
#undef X
    };
    return kind >= 0 && kind < ETL_ERR_N ? msgs[kind] : "?";
}
