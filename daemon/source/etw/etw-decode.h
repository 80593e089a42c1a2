/*
 * ETW records decoded without windows.h: the heap provider's events, the
 * system logger's VirtualAlloc/VirtualFree and StackWalk events, from their
 * documented payload layouts (etw-decode.c names the sources). Portable C
 * over byte buffers: the same code runs in the Windows ETW consumer and on
 * any platform for raw streams recorded there (etw-raw.h).
 */
#ifndef ETW_DECODE_H
#define ETW_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* A GUID in the byte order of its text form ("222962ab-6180-...": the first
 * byte is 0x22), so constants read as written; the Windows consumer converts
 * from the GUID struct (little-endian Data1..Data3) with etw_guid_from_struct. */
struct etw_guid {
    uint8_t b[16];
};

/* EVENT_HEADER.Flags bits (evntcons.h). */
#define ETW_HDR_FLAG_32_BIT_HEADER 0x0020
#define ETW_HDR_FLAG_64_BIT_HEADER 0x0040
#define ETW_HDR_FLAG_CLASSIC_HEADER 0x0100

/* One record as a consumer sees it: EVENT_RECORD's header fields and its
 * UserData. ts is the raw QPC timestamp (PROCESS_TRACE_MODE_RAW_TIMESTAMP). */
struct etw_record {
    struct etw_guid provider;
    uint8_t opcode;
    uint8_t version;
    uint16_t flags;
    uint32_t pid, tid, cpu; /* 0xFFFFFFFF when the header has none (VirtualAlloc, StackWalk) */
    uint64_t ts;
    const uint8_t *payload;
    uint32_t len;
};

enum etw_kind {
    ETW_HEAP_CREATE = 1,
    ETW_HEAP_ALLOC,
    ETW_HEAP_REALLOC,
    ETW_HEAP_FREE,
    ETW_HEAP_DESTROY,
    ETW_VIRTUAL_ALLOC, /* opcode 98 */
    ETW_VIRTUAL_FREE,  /* opcode 99 */
    ETW_STACK,         /* StackWalk opcode 32 */
    ETW_IMAGE_LOAD,    /* Image Load 10 and rundown DCStart 3 */
    ETW_IMAGE_UNLOAD,  /* Image Unload 2 (DCEnd 4 is ignored: the end of a rundown) */
    ETW_PROCESS_START, /* Process Start 1 and rundown DCStart 3 */
    ETW_PROCESS_END,   /* Process End 2 (DCEnd 4 is ignored) */
};

/* The fields of a decoded record; which ones mean something depends on kind:
 *   heap create:  heap, vflags = HEAP_* creation flags
 *   heap alloc:   heap, addr, size
 *   heap realloc: heap, addr (new), old_addr, size (new), old_size
 *   heap free:    heap, addr
 *   heap destroy: heap
 *   virtual alloc/free: addr, size, owner_pid (the process owning the
 *                 memory, from the payload: the header has none), vflags =
 *                 MEM_COMMIT / MEM_RESERVE / MEM_DECOMMIT / MEM_RELEASE bits
 *   stack:        stack_ts (the event's raw timestamp), owner_pid, stack_tid,
 *                 nframes frames of ptr_size bytes at frames (innermost first)
 *   image load/unload: addr = ImageBase, size = ImageSize, owner_pid, name =
 *                 FileName (UTF-16LE, name_len bytes, no terminator; an NT
 *                 device path, \Device\HarddiskVolume3\...), name_wide = 1
 *   process start/end: owner_pid = ProcessId, old_addr = ParentId, vflags =
 *                 ExitStatus (end), name = ImageFileName (8-bit, name_len
 *                 bytes, no terminator), name_wide = 0 */
struct etw_decoded {
    int kind;
    unsigned ptr_size; /* 8 or 4: this record's pointers */
    uint64_t heap, addr, old_addr, size, old_size;
    uint32_t vflags;
    uint32_t owner_pid;
    uint64_t stack_ts;
    uint32_t stack_tid;
    uint32_t nframes;
    const uint8_t *frames;
    const uint8_t *name; /* into the payload */
    uint32_t name_len;
    int name_wide;
};

/* VirtualAlloc flags (winnt.h). */
#define ETW_MEM_COMMIT 0x1000u
#define ETW_MEM_RESERVE 0x2000u
#define ETW_MEM_DECOMMIT 0x4000u
#define ETW_MEM_RELEASE 0x8000u

/* What the decoder met that it did not turn into an event, each under its
 * own name (reported in the session's data quality). */
struct etw_decode_stats {
    uint64_t decoded;
    uint64_t unknown_provider;  /* a provider none of our sessions asks for */
    uint64_t ignored_opcode;    /* a known provider's opcode we do not use (heap Lock, ...) */
    uint64_t malformed;         /* a payload shorter than its layout */
    uint64_t longer_payloads;   /* longer than the layout we know (a newer version): decoded */
    uint64_t old_versions;      /* process/image events older than version 2 (before Vista) */
};

extern const struct etw_guid etw_guid_heap;      /* 222962ab-6180-4b88-a825-346b75f2a24a */
extern const struct etw_guid etw_guid_pagefault; /* 3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c */
extern const struct etw_guid etw_guid_stackwalk; /* def2fe46-7bd6-4b80-bd94-f57fe20d0ce3 */
extern const struct etw_guid etw_guid_process;   /* 3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c */
extern const struct etw_guid etw_guid_image;     /* 2cb15d1d-5fc1-11d2-abe1-00a0c911f518 */
extern const struct etw_guid etw_guid_lost;      /* 6a399ae0-4bc6-4de9-870b-3657f8947e7e */

/* Parse "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (either case, optional braces).
 * 0, or -1 if it is not one. */
int etw_guid_parse(const char *s, size_t len, struct etw_guid *out);
/* Lowercase text form into buf (37 bytes at least). */
void etw_guid_format(const struct etw_guid *g, char *buf);
/* From the bytes of a Windows GUID struct as it lies in memory (Data1..Data3 little-endian). */
void etw_guid_from_struct(const uint8_t raw[16], struct etw_guid *out);
int etw_guid_eq(const struct etw_guid *a, const struct etw_guid *b);

/* The pointer size of a record's payload: 8 when its header says 64-bit,
 * else 4 (TraceEvent's TraceEvent.PointerSize reads the same flag). */
unsigned etw_ptr_size(uint16_t flags);

/* Decode r into d. 1: d holds an event; 0: nothing we use (counted in st as
 * unknown_provider or ignored_opcode); -1: malformed (counted). d->frames
 * points into r->payload. */
int etw_decode(const struct etw_record *r, struct etw_decoded *d, struct etw_decode_stats *st);

/* The UTF-8 text of a decoded name (d->name, d->name_len, d->name_wide) into
 * out (outsz > 0, always terminated): UTF-16 surrogate pairs joined, lone
 * surrogates and bytes above 0x7F of an 8-bit name as U+FFFD, cut at outsz.
 * The length written. */
size_t etw_name_utf8(const struct etw_decoded *d, char *out, size_t outsz);

/* NT device paths to DOS paths: Image events name files by device
 * ("\\Device\\HarddiskVolume3\\Windows\\System32\\ntdll.dll"), DbgHelp wants
 * "C:\\Windows\\...". The pairs come from QueryDosDeviceW for each drive
 * letter; "\\SystemRoot\\" maps to system_root. */
#define ETW_DOSMAP_MAX 26
struct etw_dosmap {
    struct {
        char device[128]; /* "\\Device\\HarddiskVolume3" */
        char drive[4];    /* "C:" */
    } v[ETW_DOSMAP_MAX];
    unsigned n;
    char system_root[128]; /* "C:\\Windows", "" if unknown */
};
/* path mapped into out (outsz > 0, always terminated); a path no pair
 * matches is copied as it is. The length, or -1 when it did not fit (out
 * then holds the path as it is, cut). */
int etw_dos_path(const struct etw_dosmap *m, const char *path, char *out, size_t outsz);

/* A pointer-sized little-endian value at p. */
uint64_t etw_ptr_at(const uint8_t *p, unsigned ptr_size);

#endif
