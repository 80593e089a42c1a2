/*
 * ETW payload decoding (etw-decode.h). Layouts: StackWalk and
 * PERFINFO_VIRTUAL_ALLOC as learn.microsoft.com documents them (StackWalk_Event
 * class, PageFault_VirtualAlloc class), the heap events as PerfView's
 * KernelTraceEventParser reads them (HeapTraceProviderTraceEventParser; the
 * structs are #pragma pack(1) in ntwmi.h: no padding before a trailing
 * ULONG). Every read checks the payload length first; a payload longer than
 * the layout is a newer version and decodes (length >=, never ==).
 */
#include "etw-decode.h"
#include "ht-text.h"

#include <stdio.h>
#include <string.h>

/* {222962ab-6180-4b88-a825-346b75f2a24a}: HeapGuid, the heap logger's
 * Wnode.Guid and its events' ProviderId (PerfView's HeapTraceProviderTraceEventParser). */
const struct etw_guid etw_guid_heap = {{0x22, 0x29, 0x62, 0xab, 0x61, 0x80, 0x4b, 0x88, 0xa8, 0x25,
                                        0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a}};
/* {3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c}: PageFault_V2, VirtualAlloc 98 and
 * VirtualFree 99 (learn.microsoft.com, PageFault_VirtualAlloc class). */
const struct etw_guid etw_guid_pagefault = {{0x3d, 0x6f, 0xa8, 0xd3, 0xfe, 0x05, 0x11, 0xd0, 0x9d,
                                             0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
/* {def2fe46-7bd6-4b80-bd94-f57fe20d0ce3}: StackWalk, opcode 32 (StackWalk_Event class). */
const struct etw_guid etw_guid_stackwalk = {{0xde, 0xf2, 0xfe, 0x46, 0x7b, 0xd6, 0x4b, 0x80, 0xbd,
                                             0x94, 0xf5, 0x7f, 0xe2, 0x0d, 0x0c, 0xe3}};

/* {3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c}: Process (learn.microsoft.com,
 * Process class; group 0x03); Image Load also arrives as its opcode 10 in .etl files. */
const struct etw_guid etw_guid_process = {{0x3d, 0x6f, 0xa8, 0xd0, 0xfe, 0x05, 0x11, 0xd0, 0x9d,
                                           0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
/* {2cb15d1d-5fc1-11d2-abe1-00a0c911f518}: Image, opcodes 10 Load, 2 Unload,
 * 3/4 DCStart/DCEnd (learn.microsoft.com, Image_Load class). */
const struct etw_guid etw_guid_image = {{0x2c, 0xb1, 0x5d, 0x1d, 0x5f, 0xc1, 0x11, 0xd2, 0xab, 0xe1,
                                         0x00, 0xa0, 0xc9, 0x11, 0xf5, 0x18}};

/* {6a399ae0-4bc6-4de9-870b-3657f8947e7e}: Lost_Event, opcodes 32
 * RTLostEvent, 33 RTLostBuffer, 34 RTLostFile (learn.microsoft.com, RT_LostEvent class). */
const struct etw_guid etw_guid_lost = {{0x6a, 0x39, 0x9a, 0xe0, 0x4b, 0xc6, 0x4d, 0xe9, 0x87, 0x0b,
                                        0x36, 0x57, 0xf8, 0x94, 0x7e, 0x7e}};

enum {
    OP_PROCESS_START = 1,
    OP_PROCESS_END = 2,
    OP_DC_START = 3,
    OP_DC_END = 4,
    OP_IMAGE_LOAD = 10,
    OP_IMAGE_UNLOAD = 2,
    OP_HEAP_CREATE = 32,
    OP_HEAP_ALLOC = 33,
    OP_HEAP_REALLOC = 34,
    OP_HEAP_DESTROY = 35,
    OP_HEAP_FREE = 36,
    OP_VIRTUAL_ALLOC = 98,
    OP_VIRTUAL_FREE = 99,
    OP_STACKWALK = 32,
};

int etw_guid_parse(const char *s, size_t len, struct etw_guid *out)
{
    if (len == 38 && s[0] == '{' && s[37] == '}') {
        s++;
        len -= 2;
    }
    if (len != 36)
        return -1;
    unsigned nb = 0;
    for (size_t i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return -1;
            i++;
            continue;
        }
        int hi = ht_hexval(s[i]), lo = ht_hexval(s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out->b[nb++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    return nb == 16 ? 0 : -1;
}

void etw_guid_format(const struct etw_guid *g, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    char *p = buf;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[g->b[i] >> 4];
        *p++ = hex[g->b[i] & 15];
    }
    *p = '\0';
}

void etw_guid_from_struct(const uint8_t raw[16], struct etw_guid *out)
{
    /* Data1 (4 bytes), Data2, Data3 (2 each) are little-endian in memory;
     * Data4's 8 bytes are in text order. */
    static const uint8_t order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int i = 0; i < 16; i++)
        out->b[i] = raw[order[i]];
}

int etw_guid_eq(const struct etw_guid *a, const struct etw_guid *b)
{
    /* Two word compares the compiler inlines into etw_decode's dispatch (memcmp stayed a
     * call: 3% of an .etl load, perf), up to five of them a record. */
    uint64_t x[2], y[2];
    memcpy(x, a->b, 16);
    memcpy(y, b->b, 16);
    return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

unsigned etw_ptr_size(uint16_t flags)
{
    return (flags & ETW_HDR_FLAG_64_BIT_HEADER) ? 8 : 4;
}

static uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64_at(const uint8_t *p)
{
    return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32;
}

uint64_t etw_ptr_at(const uint8_t *p, unsigned ptr_size)
{
    return ptr_size == 8 ? u64_at(p) : u32_at(p);
}

/* The layout's length: pointers then ULONGs, as ntwmi.h packs them. */
static uint32_t layout_len(unsigned ptrs, unsigned ulongs, unsigned P)
{
    return ptrs * P + ulongs * 4;
}

static int check_len(const struct etw_record *r, uint32_t need, struct etw_decode_stats *st)
{
    if (r->len < need) {
        st->malformed++;
        return -1;
    }
    if (r->len > need)
        st->longer_payloads++;
    return 0;
}

static int decode_heap(const struct etw_record *r, struct etw_decoded *d,
                       struct etw_decode_stats *st)
{
    const unsigned P = d->ptr_size;
    const uint8_t *p = r->payload;
    switch (r->opcode) {
    case OP_HEAP_CREATE: /* HeapHandle P, Flags u32 (v0; later versions add sizes) */
        if (check_len(r, layout_len(1, 1, P), st) != 0)
            return -1;
        d->kind = ETW_HEAP_CREATE;
        d->heap = etw_ptr_at(p, P);
        d->vflags = u32_at(p + P);
        return 1;
    case OP_HEAP_ALLOC: /* HeapHandle P, Size P, Address P, Source u32: 28 / 16 */
        if (check_len(r, layout_len(3, 1, P), st) != 0)
            return -1;
        d->kind = ETW_HEAP_ALLOC;
        d->heap = etw_ptr_at(p, P);
        d->size = etw_ptr_at(p + P, P);
        d->addr = etw_ptr_at(p + 2 * P, P);
        return 1;
    case OP_HEAP_REALLOC: /* HeapHandle, NewAddress, OldAddress, NewSize, OldSize P; Source u32: 44 / 24 */
        if (check_len(r, layout_len(5, 1, P), st) != 0)
            return -1;
        d->kind = ETW_HEAP_REALLOC;
        d->heap = etw_ptr_at(p, P);
        d->addr = etw_ptr_at(p + P, P);
        d->old_addr = etw_ptr_at(p + 2 * P, P);
        d->size = etw_ptr_at(p + 3 * P, P);
        d->old_size = etw_ptr_at(p + 4 * P, P);
        return 1;
    case OP_HEAP_DESTROY: /* HeapHandle P */
        if (check_len(r, layout_len(1, 0, P), st) != 0)
            return -1;
        d->kind = ETW_HEAP_DESTROY;
        d->heap = etw_ptr_at(p, P);
        return 1;
    case OP_HEAP_FREE: /* HeapHandle P, Address P, Source u32: 20 / 12 */
        if (check_len(r, layout_len(2, 1, P), st) != 0)
            return -1;
        d->kind = ETW_HEAP_FREE;
        d->heap = etw_ptr_at(p, P);
        d->addr = etw_ptr_at(p + P, P);
        return 1;
    default:
        st->ignored_opcode++;
        return 0;
    }
}

static int decode_virtual(const struct etw_record *r, struct etw_decoded *d,
                          struct etw_decode_stats *st)
{
    if (r->opcode != OP_VIRTUAL_ALLOC && r->opcode != OP_VIRTUAL_FREE) {
        st->ignored_opcode++; /* page faults, VirtualAllocDCStart/Stop rundown markers */
        return 0;
    }
    const unsigned P = d->ptr_size;
    const uint8_t *p = r->payload;
    /* BaseAddress P, RegionSize P, ProcessId u32, Flags u32: 24 / 16 */
    if (check_len(r, layout_len(2, 2, P), st) != 0)
        return -1;
    d->kind = r->opcode == OP_VIRTUAL_ALLOC ? ETW_VIRTUAL_ALLOC : ETW_VIRTUAL_FREE;
    d->addr = etw_ptr_at(p, P);
    d->size = etw_ptr_at(p + P, P);
    d->owner_pid = u32_at(p + 2 * P);
    d->vflags = u32_at(p + 2 * P + 4);
    return 1;
}

static int decode_stack(const struct etw_record *r, struct etw_decoded *d,
                        struct etw_decode_stats *st)
{
    if (r->opcode != OP_STACKWALK) {
        /* 34-38: stack caching (key) records, which we never enable
         * (learn.microsoft.com, StackWalk_Event class). */
        st->ignored_opcode++;
        return 0;
    }
    /* EventTimeStamp u64, StackProcess u32, StackThread u32, then frames of
     * the record's pointer size; a partial trailing frame is malformed. */
    const unsigned P = d->ptr_size;
    if (r->len < 16 || (r->len - 16) % P != 0) {
        st->malformed++;
        return -1;
    }
    d->kind = ETW_STACK;
    d->stack_ts = u64_at(r->payload);
    d->owner_pid = u32_at(r->payload + 8);
    d->stack_tid = u32_at(r->payload + 12);
    d->nframes = (r->len - 16) / P;
    d->frames = r->payload + 16;
    return 1;
}

/* A NUL-terminated string of unit-byte characters (1 or 2) at off: its
 * bytes without the terminator in *len. -1 when the payload ends first. */
static int string_at(const struct etw_record *r, uint32_t off, unsigned unit, uint32_t *len)
{
    for (uint32_t i = off; i + unit <= r->len; i += unit) {
        if (r->payload[i] == 0 && (unit == 1 || r->payload[i + 1] == 0)) {
            *len = i - off;
            return 0;
        }
    }
    return -1;
}

/* Image Load/Unload/DCStart/DCEnd, version 2 and later (Vista on):
 * ImageBase P, ImageSize P, ProcessId u32, ImageCheckSum u32, TimeDateStamp
 * u32, Reserved0 u32, DefaultBase P, Reserved1-4 u32, FileName UTF-16 from
 * 3 P + 32 (56 / 44). Image_Load class, and PerfView's
 * ImageLoadTraceData (KernelTraceEventParser.cs: FileName at HostOffset(44, 3)). */
static int decode_image(const struct etw_record *r, struct etw_decoded *d,
                        struct etw_decode_stats *st)
{
    int load = r->opcode == OP_IMAGE_LOAD || r->opcode == OP_DC_START;
    if (!load && r->opcode != OP_IMAGE_UNLOAD) {
        st->ignored_opcode++; /* DCEnd: the rundown at the session's end */
        return 0;
    }
    if (r->version < 2) {
        st->old_versions++;
        return 0;
    }
    const unsigned P = d->ptr_size;
    const uint32_t name_off = 3 * P + 32;
    uint32_t nl;
    if (r->len < name_off + 2 || string_at(r, name_off, 2, &nl) != 0) {
        st->malformed++;
        return -1;
    }
    d->kind = load ? ETW_IMAGE_LOAD : ETW_IMAGE_UNLOAD;
    d->addr = etw_ptr_at(r->payload, P);
    d->size = etw_ptr_at(r->payload + P, P);
    d->owner_pid = u32_at(r->payload + 2 * P);
    d->name = r->payload + name_off;
    d->name_len = nl;
    d->name_wide = 1;
    return 1;
}

/* Process Start/End/DCStart, versions 2-4 and later: UniqueProcessKey P,
 * ProcessId u32, ParentId u32, SessionId u32, ExitStatus i32, then from
 * version 3 DirectoryTableBase P, from version 4 Flags u32; then UserSID
 * (a u32 0 when absent, else TOKEN_USER (2 P) and a SID of 8 + 4 x
 * SubAuthorityCount bytes, that count being the SID's second byte), then
 * ImageFileName (8-bit, NUL-terminated), CommandLine and later fields we do
 * not read. PerfView's ProcessTraceData (KernelTraceEventParser.cs: SkipSID,
 * the SID at HostOffset(20, 1) / (24, 2) / (28, 2) by version). */
static int decode_process(const struct etw_record *r, struct etw_decoded *d,
                          struct etw_decode_stats *st)
{
    if (r->opcode == OP_IMAGE_LOAD)
        return decode_image(r, d, st); /* the group 0x03 hook of Image Load */
    if (r->opcode != OP_PROCESS_START && r->opcode != OP_PROCESS_END && r->opcode != OP_DC_START) {
        st->ignored_opcode++; /* DCEnd, Terminate, counters, defunct */
        return 0;
    }
    if (r->version < 2) {
        st->old_versions++;
        return 0;
    }
    const unsigned P = d->ptr_size;
    const uint8_t *p = r->payload;
    uint32_t sid = r->version >= 4 ? 2 * P + 20 : r->version == 3 ? 2 * P + 16 : P + 16;
    if (r->len < sid + 4) {
        st->malformed++;
        return -1;
    }
    uint32_t name_off;
    if (u32_at(p + sid) == 0) {
        name_off = sid + 4;
    } else {
        if (r->len < sid + 2 * P + 2) {
            st->malformed++;
            return -1;
        }
        name_off = sid + 2 * P + 8 + 4 * (uint32_t)p[sid + 2 * P + 1];
    }
    uint32_t nl;
    if (name_off >= r->len || string_at(r, name_off, 1, &nl) != 0) {
        st->malformed++;
        return -1;
    }
    d->kind = r->opcode == OP_PROCESS_END ? ETW_PROCESS_END : ETW_PROCESS_START;
    d->owner_pid = u32_at(p + P);
    d->old_addr = u32_at(p + P + 4);
    d->vflags = u32_at(p + P + 12);
    d->name = p + name_off;
    d->name_len = nl;
    d->name_wide = 0;
    return 1;
}

static size_t put_utf8(char *out, size_t outsz, size_t k, uint32_t c)
{
    char b[4];
    size_t n;
    if (c < 0x80) {
        b[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (char)(0xC0 | c >> 6);
        b[1] = (char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12);
        b[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | c >> 18);
        b[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((c >> 6) & 0x3F));
        b[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    }
    if (k + n >= outsz)
        return k; /* cut on a character boundary */
    memcpy(out + k, b, n);
    return k + n;
}

size_t etw_name_utf8(const struct etw_decoded *d, char *out, size_t outsz)
{
    size_t k = 0;
    const uint8_t *s = d->name;
    if (!d->name_wide) {
        for (uint32_t i = 0; s && i < d->name_len; i++) {
            size_t nk = put_utf8(out, outsz, k, s[i] < 0x80 ? s[i] : 0xFFFD);
            if (nk == k)
                break;
            k = nk;
        }
    } else {
        for (uint32_t i = 0; s && i + 2 <= d->name_len; i += 2) {
            uint32_t c = (uint32_t)s[i] | (uint32_t)s[i + 1] << 8;
            if (c >= 0xD800 && c < 0xDC00 && i + 4 <= d->name_len) {
                uint32_t lo = (uint32_t)s[i + 2] | (uint32_t)s[i + 3] << 8;
                if (lo >= 0xDC00 && lo < 0xE000) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                    i += 2;
                } else {
                    c = 0xFFFD;
                }
            } else if (c >= 0xD800 && c < 0xE000) {
                c = 0xFFFD;
            }
            size_t nk = put_utf8(out, outsz, k, c);
            if (nk == k)
                break;
            k = nk;
        }
    }
    out[k] = '\0';
    return k;
}

static int ascii_prefix_ci(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++) {
        char a = *s, b = *prefix;
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (b >= 'A' && b <= 'Z')
            b = (char)(b - 'A' + 'a');
        if (a != b)
            return 0;
    }
    return 1;
}

int etw_dos_path(const struct etw_dosmap *m, const char *path, char *out, size_t outsz)
{
    const char *head = "", *rest = path;
    /* Device names compare without case (the object manager's are not
     * case-sensitive), and only whole: "\Device\HarddiskVolume1" is no
     * prefix of "\Device\HarddiskVolume10\x". */
    for (unsigned i = 0; m && i < m->n && !head[0]; i++) {
        size_t k = strlen(m->v[i].device);
        if (k && ascii_prefix_ci(path, m->v[i].device) && path[k] == '\\') {
            head = m->v[i].drive;
            rest = path + k;
        }
    }
    if (!head[0] && m && m->system_root[0] && ascii_prefix_ci(path, "\\SystemRoot\\")) {
        head = m->system_root;
        rest = path + strlen("\\SystemRoot");
    }
    int n = snprintf(out, outsz, "%s%s", head, rest);
    if (n < 0 || (size_t)n >= outsz) {
        snprintf(out, outsz, "%s", path);
        return -1;
    }
    return n;
}

int etw_decode(const struct etw_record *r, struct etw_decoded *d, struct etw_decode_stats *st)
{
    memset(d, 0, sizeof(*d));
    d->ptr_size = etw_ptr_size(r->flags);
    if (!r->payload && r->len > 0) {
        st->malformed++;
        return -1;
    }
    int rc;
    if (etw_guid_eq(&r->provider, &etw_guid_heap))
        rc = decode_heap(r, d, st);
    else if (etw_guid_eq(&r->provider, &etw_guid_pagefault))
        rc = decode_virtual(r, d, st);
    else if (etw_guid_eq(&r->provider, &etw_guid_stackwalk))
        rc = decode_stack(r, d, st);
    else if (etw_guid_eq(&r->provider, &etw_guid_image))
        rc = decode_image(r, d, st);
    else if (etw_guid_eq(&r->provider, &etw_guid_process))
        rc = decode_process(r, d, st);
    else {
        st->unknown_provider++;
        return 0;
    }
    if (rc == 1)
        st->decoded++;
    return rc;
}
