/* Raw ETW streams made from .htev files, for tests: each frame name gets an
 * address, each alloc and commit its StackWalk record (kernel frames first,
 * as a heap stack walk starts in NtTraceEvent), 10 MHz QPC, and another
 * process's records are mixed in. Used by test-etw and ht-etw-synth. */
#ifndef ETW_SYNTH_H
#define ETW_SYNTH_H

#include "etw-decode.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F64 (ETW_HDR_FLAG_64_BIT_HEADER | ETW_HDR_FLAG_CLASSIC_HEADER)
#define F32 (ETW_HDR_FLAG_32_BIT_HEADER | ETW_HDR_FLAG_CLASSIC_HEADER)

/* A payload under construction. */
struct pl {
    uint8_t b[2048];
    uint32_t n;
};

static inline void put(struct pl *p, uint64_t v, unsigned size)
{
    for (unsigned i = 0; i < size; i++)
        p->b[p->n++] = (uint8_t)(v >> (8 * i));
}

struct text {
    char *s;
    size_t n, cap;
};

static inline void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if ((size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        t->cap = t->cap ? 2 * t->cap : 1 << 16;
        t->s = realloc(t->s, t->cap);
    }
}

static inline void hex_of(char *out, const struct pl *p)
{
    static const char hx[] = "0123456789abcdef";
    for (uint32_t i = 0; i < p->n; i++) {
        out[2 * i] = hx[p->b[i] >> 4];
        out[2 * i + 1] = hx[p->b[i] & 15];
    }
    out[2 * p->n] = '\0';
}

static inline void raw_rec_v(struct text *t, const struct etw_guid *g, unsigned op, unsigned ver,
                             unsigned flags, uint32_t pid, uint32_t tid, uint64_t ts,
                             const struct pl *p)
{
    char gs[40], hx[4200];
    etw_guid_format(g, gs);
    hex_of(hx, p);
    add(t, "{\"provider\":\"%s\",\"opcode\":%u,\"version\":%u,\"flags\":%u,\"pid\":%u,"
           "\"tid\":%u,\"cpu\":1,\"ts\":%llu,\"payload\":\"%s\"}\n",
        gs, op, ver, flags, pid, tid, (unsigned long long)ts, hx);
}

static inline void raw_rec(struct text *t, const struct etw_guid *g, unsigned op, unsigned flags,
                           uint32_t pid, uint32_t tid, uint64_t ts, const struct pl *p)
{
    raw_rec_v(t, g, op, 2, flags, pid, tid, ts, p);
}

/* UTF-16LE of an ASCII string, with its terminator. */
static inline void put_wide(struct pl *p, const char *s)
{
    for (; *s; s++)
        put(p, (unsigned char)*s, 2);
    put(p, 0, 2);
}

/* Image Load (v3, 64-bit layout, docs/windows.md#process-and-image-events-symbols) of path
 * at base for pid. */
static inline void image_rec(struct text *t, unsigned op, uint32_t pid, uint64_t ts, uint64_t base,
                             uint64_t size, const char *path)
{
    struct pl p = {0};
    put(&p, base, 8), put(&p, size, 8), put(&p, pid, 4), put(&p, 0x1234, 4), put(&p, 0x5f000000, 4),
        put(&p, 0, 4), put(&p, base, 8);
    for (int k = 0; k < 4; k++)
        put(&p, 0, 4);
    put_wide(&p, path);
    raw_rec_v(t, &etw_guid_image, op, 3, F64, pid, 0, ts, &p);
}

/* Process Start/DCStart/End (v4, 64-bit): a user SID S-1-5-21-a-b-c-d (TOKEN_USER
 * then the SID, 4 sub-authorities), the image name, an empty command line. */
static inline void process_rec(struct text *t, unsigned op, uint32_t pid, uint64_t ts,
                               uint32_t exit_status, const char *name)
{
    struct pl p = {0};
    put(&p, 0xFFFFA00012345678ull, 8), put(&p, pid, 4), put(&p, 4, 4), put(&p, 1, 4),
        put(&p, exit_status, 4), put(&p, 0x1AD000, 8), put(&p, 0, 4);
    put(&p, 0xFFFFA00087654321ull, 8), put(&p, 0, 8); /* TOKEN_USER: Sid pointer, Attributes */
    put(&p, 1, 1), put(&p, 4, 1);                     /* Revision, SubAuthorityCount */
    for (int k = 0; k < 5; k++)
        put(&p, 0, 1); /* IdentifierAuthority 5 (NT), 6 bytes big-endian */
    put(&p, 5, 1);
    for (int k = 0; k < 4; k++)
        put(&p, 21 + (uint64_t)k, 4);
    for (const char *s = name; *s; s++)
        put(&p, (unsigned char)*s, 1);
    put(&p, 0, 1);
    put(&p, 0, 2); /* CommandLine "" */
    raw_rec_v(t, &etw_guid_process, op, 4, F64, pid, 0, ts, &p);
}

/* The .htev of seed 000 as the ETW sessions would have delivered it: each
 * frame name gets an address, each alloc and commit its StackWalk record
 * (kernel frames first, as a heap stack walk starts in NtTraceEvent), 10 MHz
 * QPC. Records of another process are mixed in. */
static inline int htev_to_raw(const char *path, struct text *raw, uint64_t *t_end)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    enum { MAXF = 512 };
    static char *names[MAXF];
    unsigned nnames = 0;
    const uint64_t freq = 10000000, start = 123456789;
    char line[1 << 14];
    uint32_t pid = 0;
    while (fgets(line, sizeof(line), f)) {
        cJSON *o = cJSON_Parse(line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(o, "ev"));
        if (!ev) {
            cJSON_Delete(o);
            continue;
        }
        if (!strcmp(ev, "process")) {
            pid = (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid"));
            add(raw, "{\"etw_raw\":1,\"qpc_freq\":%llu,\"start_qpc\":%llu,\"process\":{\"pid\":%u,"
                     "\"name\":\"%s\"}}\n",
                (unsigned long long)freq, (unsigned long long)start, pid,
                cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")));
            /* The system logger's rundown: the process, its image and a
             * DLL; another process's image at the same base. */
            process_rec(raw, 3, pid, start, 0, "MemoryTestApp.exe");
            image_rec(raw, 3, pid, start, 0x00007FF600000000ull, 0x100000,
                      "\\Device\\HarddiskVolume3\\apps\\MemoryTestApp.exe");
            image_rec(raw, 3, pid, start, 0x00007FFA10000000ull, 0x200000,
                      "\\Device\\HarddiskVolume3\\Windows\\System32\\ntdll.dll");
            image_rec(raw, 3, pid + 1, start, 0x00007FF600000000ull, 0x100000,
                      "\\Device\\HarddiskVolume3\\other.exe");
            cJSON_Delete(o);
            continue;
        }
        uint64_t t = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "t"));
        if (t % 100) { /* 10 MHz: 100 ns ticks */
            cJSON_Delete(o);
            fclose(f);
            return -2;
        }
        *t_end = t;
        uint64_t ts = start + t / 100;
        uint32_t tid = (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tid"));
        const char *hs = cJSON_GetStringValue(cJSON_GetObjectItem(o, "heap"));
        const char *as = cJSON_GetStringValue(cJSON_GetObjectItem(o, "addr"));
        uint64_t heap = hs ? strtoull(hs, NULL, 16) : 0, addr = as ? strtoull(as, NULL, 16) : 0;
        uint64_t size = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "size"));
        struct pl p = {0};
        int with_stack = 0;
        if (!strcmp(ev, "alloc")) {
            put(&p, heap, 8), put(&p, size, 8), put(&p, addr, 8), put(&p, 2, 4);
            raw_rec(raw, &etw_guid_heap, 33, F64, pid, tid, ts, &p);
            with_stack = 1;
        } else if (!strcmp(ev, "free")) {
            put(&p, heap, 8), put(&p, addr, 8), put(&p, 2, 4);
            raw_rec(raw, &etw_guid_heap, 36, F64, pid, tid, ts, &p);
        } else if (!strcmp(ev, "commit")) {
            put(&p, addr, 8), put(&p, size, 8), put(&p, pid, 4),
                put(&p, ETW_MEM_COMMIT | ETW_MEM_RESERVE, 4);
            raw_rec(raw, &etw_guid_pagefault, 98, F64, 0xFFFFFFFF, 0xFFFFFFFF, ts, &p);
            with_stack = 1;
        } else if (!strcmp(ev, "release")) {
            put(&p, addr, 8), put(&p, size, 8), put(&p, pid, 4), put(&p, ETW_MEM_RELEASE, 4);
            raw_rec(raw, &etw_guid_pagefault, 99, F64, 0xFFFFFFFF, 0xFFFFFFFF, ts, &p);
        }
        if (with_stack) {
            struct pl sp = {0};
            put(&sp, ts, 8), put(&sp, pid, 4), put(&sp, tid, 4);
            for (int k = 0; k < 3; k++)
                put(&sp, 0xFFFFF80312340000ull + 0x100 * (uint64_t)k, 8);
            cJSON *fr;
            cJSON_ArrayForEach(fr, cJSON_GetObjectItem(o, "stack"))
            {
                unsigned i = 0;
                while (i < nnames && strcmp(names[i], fr->valuestring))
                    i++;
                if (i == nnames && nnames < MAXF)
                    names[nnames++] = strdup(fr->valuestring);
                put(&sp, 0x00007FF600001000ull + 0x40 * (uint64_t)i, 8);
            }
            raw_rec(raw, &etw_guid_stackwalk, 32, F64, 0xFFFFFFFF, 0xFFFFFFFF, ts + 1, &sp);
            /* Another process's alloc at the same time, with its stack. */
            struct pl op = {0};
            put(&op, 0x10000, 8), put(&op, 64, 8), put(&op, addr, 8), put(&op, 2, 4);
            raw_rec(raw, &etw_guid_heap, 33, F64, pid + 1, tid, ts, &op);
        }
        cJSON_Delete(o);
    }
    fclose(f);
    process_rec(raw, 2, pid, start + *t_end / 100 + 1, 0, "MemoryTestApp.exe");
    for (unsigned i = 0; i < nnames; i++)
        free(names[i]);
    return pid ? 0 : -3;
}

#endif
