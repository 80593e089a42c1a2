/*
 * ETW payload decoding (etw-decode.h). Layouts: etw-mechanics.md 2.2
 * (StackWalk), 3.2 (PERFINFO_VIRTUAL_ALLOC), 4.3 (heap events, #pragma
 * pack(1) in ntwmi.h: no padding before a trailing ULONG), restating
 * PerfView's KernelTraceEventParser and ntwmi.h (sources in that document,
 * section 12). Every read checks the payload length first; a payload longer
 * than the layout is a newer version and decodes (length >=, never ==).
 */
#include "etw-decode.h"
#include "ht-text.h"

#include <string.h>

/* {222962ab-6180-4b88-a825-346b75f2a24a}: HeapGuid, the heap logger's
 * Wnode.Guid and its events' ProviderId (etw-mechanics.md 1.2, 4.1). */
const struct etw_guid etw_guid_heap = {{0x22, 0x29, 0x62, 0xab, 0x61, 0x80, 0x4b, 0x88, 0xa8, 0x25,
                                        0x34, 0x6b, 0x75, 0xf2, 0xa2, 0x4a}};
/* {3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c}: PageFault_V2, VirtualAlloc 98 and
 * VirtualFree 99 (etw-mechanics.md 3.2). */
const struct etw_guid etw_guid_pagefault = {{0x3d, 0x6f, 0xa8, 0xd3, 0xfe, 0x05, 0x11, 0xd0, 0x9d,
                                             0xda, 0x00, 0xc0, 0x4f, 0xd7, 0xba, 0x7c}};
/* {def2fe46-7bd6-4b80-bd94-f57fe20d0ce3}: StackWalk, opcode 32 (etw-mechanics.md 2.2). */
const struct etw_guid etw_guid_stackwalk = {{0xde, 0xf2, 0xfe, 0x46, 0x7b, 0xd6, 0x4b, 0x80, 0xbd,
                                             0x94, 0xf5, 0x7f, 0xe2, 0x0d, 0x0c, 0xe3}};

enum {
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
    return memcmp(a->b, b->b, 16) == 0;
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
         * (etw-mechanics.md 2.2). */
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
    else {
        st->unknown_provider++;
        return 0;
    }
    if (rc == 1)
        st->decoded++;
    return rc;
}
