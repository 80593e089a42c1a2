/* Synthetic .etl files for the unit tests, built from the layouts (WMI_BUFFER_HEADER,
 * SYSTEM/PERFINFO records, TRACE_LOGFILE_HEADER): moved out of test-etl.c so that
 * test-etl-keys.c builds its files the same way. */
#ifndef ETL_BUILD_H
#define ETL_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a synthetic .etl, built from the layouts ---- */

struct file {
    uint8_t *p;
    size_t n, cap;
};

static inline uint8_t *grow(struct file *f, size_t n)
{
    if (f->n + n > f->cap) {
        f->cap = (f->n + n) * 2;
        f->p = realloc(f->p, f->cap);
    }
    memset(f->p + f->n, 0, n);
    f->n += n;
    return f->p + f->n - n;
}

static inline void w16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void w32(uint8_t *p, uint32_t v)
{
    w16(p, (uint16_t)v);
    w16(p + 2, (uint16_t)(v >> 16));
}

static inline void w64(uint8_t *p, uint64_t v)
{
    w32(p, (uint32_t)v);
    w32(p + 4, (uint32_t)(v >> 32));
}

/* A buffer's records area being built (size bytes, header 0x48 included). */
struct buf {
    uint8_t data[8192];
    size_t pos;
};

static inline void buf_init(struct buf *b)
{
    memset(b->data, 0xFF, sizeof(b->data)); /* unused space is 0xFF, as Windows leaves it */
    memset(b->data, 0, 0x48);
    b->pos = 0x48;
}

/* SYSTEM32/64 record: header 0x20, payload. */
static inline void rec_system(struct buf *b, int p64, uint16_t hook, uint32_t tid, uint32_t pid,
                              uint64_t ts, const uint8_t *payload, uint16_t len)
{
    uint8_t *r = b->data + b->pos;
    memset(r, 0, 0x20);
    w16(r, 2);
    r[2] = p64 ? 0x02 : 0x01;
    r[3] = 0xC0;
    w16(r + 4, (uint16_t)(0x20 + len));
    w16(r + 6, hook);
    w32(r + 8, tid);
    w32(r + 12, pid);
    w64(r + 16, ts);
    memcpy(r + 0x20, payload, len);
    b->pos += (0x20u + len + 7) & ~7u;
}

/* PERFINFO64 record: header 0x10. */
static inline void rec_perfinfo(struct buf *b, uint16_t hook, uint64_t ts, const uint8_t *payload,
                                uint16_t len)
{
    uint8_t *r = b->data + b->pos;
    memset(r, 0, 0x10);
    w16(r, 2);
    r[2] = 0x11;
    r[3] = 0xC0;
    w16(r + 4, (uint16_t)(0x10 + len));
    w16(r + 6, hook);
    w64(r + 8, ts);
    memcpy(r + 0x10, payload, len);
    b->pos += (0x10u + len + 7) & ~7u;
}

/* The log-file header record: TRACE_LOGFILE_HEADER with 64-bit pointers (BootTime at 248). */
static inline void rec_logfile(struct buf *b, uint32_t ncpu, uint32_t events_lost,
                               uint32_t buffers_lost)
{
    uint8_t h[300];
    memset(h, 0, sizeof(h));
    w32(h, 8192);
    h[4] = 10, h[5] = 0, h[6] = 1, h[7] = 5;
    w32(h + 8, 19041);
    w32(h + 12, ncpu);
    w32(h + 44, 8);
    w32(h + 48, events_lost);
    w64(h + 256, 10000000);
    w64(h + 264, 132000000000000000ull);
    w32(h + 272, 1);
    w32(h + 276, buffers_lost);
    rec_system(b, 1, 0x0000, 0, 0, 1000, h, sizeof(h));
}

/* Appends b as a buffer of processor cpu, sequence seq; SavedOffset and Offset as given
 * (0: the end of the records). compress: an XPRESS stream of literals only ([MS-XCA] 2.4:
 * a zero flag word before each 32 literals), which is a valid stream. */
static inline void put_buffer(struct file *f, struct buf *b, uint8_t cpu, uint64_t seq,
                              uint16_t flags, uint16_t type, uint32_t saved, int compress)
{
    size_t end = b->pos;
    w32(b->data + 4, saved ? saved : (uint32_t)end);
    w64(b->data + 0x18, seq);
    b->data[0x28] = cpu;
    w32(b->data + 0x30, (uint32_t)end);
    w16(b->data + 0x34, (uint16_t)(flags | (compress ? 0x40 : 0)));
    w16(b->data + 0x36, type);
    if (!compress) {
        w32(b->data, sizeof(b->data));
        memcpy(grow(f, sizeof(b->data)), b->data, sizeof(b->data));
        return;
    }
    w32(b->data + 4, (uint32_t)end);
    size_t n = end - 0x48, z = n + 4 * ((n + 31) / 32);
    uint32_t size = (uint32_t)(0x48 + z);
    w32(b->data, size);
    uint8_t *o = grow(f, size);
    memcpy(o, b->data, 0x48);
    o += 0x48;
    for (size_t i = 0; i < n; i += 32) {
        w32(o, 0);
        o += 4;
        size_t k = n - i < 32 ? n - i : 32;
        memcpy(o, b->data + 0x48 + i, k);
        o += k;
    }
}

static inline int64_t mem_read(void *arg, uint64_t off, void *buf, size_t n)
{
    const struct file *f = arg;
    if (off > f->n)
        return -1;
    size_t k = f->n - off < n ? f->n - off : n;
    memcpy(buf, f->p + off, k);
    return (int64_t)k;
}

#endif
