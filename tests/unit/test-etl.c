/* The .etl reader (daemon/source/etl): XPRESS, the buffer walk, the log-file header, record
 * kinds, the per-processor merge, losses and hostile sizes, on files built here from the
 * layouts (WMI_BUFFER_HEADER, SYSTEM/PERFINFO/EVENT_HEADER records, TRACE_LOGFILE_HEADER). */
#include "ht-test.h"

#include "etl-events.h"
#include "etl-read.h"
#include "etl-stats.h"
#include "etl-xpress.h"
#include "etw-raw.h"
#include "stack-intern.h"

#include "etl-build.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#ifndef _WIN32
#include <unistd.h>
#endif
#include <stdlib.h>
#include <string.h>

static void test_xpress_matches(void)
{
    /* Flags 0x10000000: three literals, then a match (offset 3, length 9: (3-1)<<3 | 9-3). */
    const uint8_t s1[] = {0x00, 0x00, 0x00, 0x10, 'a', 'b', 'c', 0x16, 0x00};
    uint8_t out[64];
    CHECK_EQ(etl_xpress_decode(s1, sizeof(s1), out, sizeof(out)), 12);
    CHECK(!memcmp(out, "abcabcabcabc", 12));
    /* A literal, then a match of 30 at offset 1: field 7, nibble 15, byte 5 (3+7+15+5). */
    const uint8_t s2[] = {0x00, 0x00, 0x00, 0x40, 'a', 0x07, 0x00, 0x0F, 0x05};
    CHECK_EQ(etl_xpress_decode(s2, sizeof(s2), out, sizeof(out)), 31);
    for (int i = 0; i < 31; i++)
        CHECK_EQ(out[i], 'a');
    /* The same with room for 20 bytes: refused, nothing written past the cap. */
    memset(out, 0, sizeof(out));
    CHECK_EQ(etl_xpress_decode(s2, sizeof(s2), out, 20), ETL_XPRESS_EOVERRUN);
    CHECK_EQ(out[20], 0);
    /* A match first: nothing to copy from. */
    const uint8_t s3[] = {0x00, 0x00, 0x00, 0x80, 0x00, 0x00};
    CHECK_EQ(etl_xpress_decode(s3, sizeof(s3), out, sizeof(out)), ETL_XPRESS_EOFFSET);
    /* Cut inside the long length. */
    CHECK_EQ(etl_xpress_decode(s2, sizeof(s2) - 1, out, sizeof(out)), ETL_XPRESS_ETRUNC);
    /* The u32 length form: 0x00100000 bytes from one literal, refused past a 64 KiB cap. */
    const uint8_t s4[] = {0x00, 0x00, 0x00, 0x40, 'a',  0x07, 0x00, 0x0F,
                          0xFF, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00};
    uint8_t *big = malloc(1 << 16);
    CHECK(big != NULL);
    CHECK_EQ(etl_xpress_decode(s4, sizeof(s4), big, 1 << 16), ETL_XPRESS_EOVERRUN);
    free(big);
}

static uint32_t rd32_test(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

struct seen {
    uint64_t ts[64];
    uint16_t hook[64];
    unsigned ptr[64];
    unsigned n;
};

static void keep(void *arg, const struct etl_record *r)
{
    struct seen *s = arg;
    if (s->n < 64) {
        s->ts[s->n] = r->ts;
        s->hook[s->n] = r->hook;
        s->ptr[s->n++] = r->ptr_size;
    }
}

static struct etl_reader *run(struct file *f, struct seen *s, int *rc)
{
    struct etl_reader *r;
    if (etl_reader_new(&r, mem_read, f, f->n, NULL) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    *rc = etl_reader_open(r);
    if (*rc == 0)
        *rc = etl_reader_run(r, keep, s);
    return r;
}

/* Two processors whose buffers are stored out of sequence order, one compressed, a 32-bit
 * record, an event after SavedOffset in the header buffer, lost flags: all in time order. */
static void build_two_cpus(struct file *f)
{
    struct buf b;
    uint8_t pl[24] = {0};
    buf_init(&b);
    rec_logfile(&b, 2, 3, 1);
    size_t saved = b.pos;
    /* After SavedOffset, before Offset: Windows' relogger puts events here. */
    rec_perfinfo(&b, 0x0F2E, 1500, pl, 16);
    /* State low 16 bits: the compression format of the file (3, XPRESS). */
    w16(b.data + 0x2C, 3);
    put_buffer(f, &b, 0, 1, 0, 4, (uint32_t)saved, 0);
    /* cpu 1, seq 3 (stored first): times 4000, 5000. */
    buf_init(&b);
    rec_system(&b, 1, 0x0301, 7, 8, 4000, pl, 24);
    rec_system(&b, 0, 0x0302, 7, 8, 5000, pl, 12);
    put_buffer(f, &b, 1, 3, 0x02, 0, 0, 0);
    /* cpu 0, seq 2, compressed: times 2000, 4500. */
    buf_init(&b);
    rec_perfinfo(&b, 0x1820, 2000, pl, 24);
    rec_perfinfo(&b, 0x1825, 4500, pl, 24);
    put_buffer(f, &b, 0, 2, 0x04, 0, 0, 1);
    /* cpu 1, seq 2 (stored last, read before seq 3): time 3000. */
    buf_init(&b);
    rec_system(&b, 1, 0x030A, 7, 8, 3000, pl, 24);
    put_buffer(f, &b, 1, 2, 0, 0, 0, 0);
}

static void test_merge_order(void)
{
    struct file f = {0};
    build_two_cpus(&f);
    struct seen s = {.n = 0};
    int rc;
    struct etl_reader *r = run(&f, &s, &rc);
    CHECK_EQ(rc, 0);
    const uint64_t want[] = {1000, 1500, 2000, 3000, 4000, 4500, 5000};
    const uint16_t hooks[] = {0x0000, 0x0F2E, 0x1820, 0x030A, 0x0301, 0x1825, 0x0302};
    CHECK_EQ(s.n, 7);
    for (unsigned i = 0; i < 7; i++) {
        CHECK_EQ(s.ts[i], want[i]);
        CHECK_EQ(s.hook[i], hooks[i]);
    }
    CHECK_EQ(s.ptr[6], 4); /* SYSTEM32 in a 64-bit file: 4-byte pointers */
    const struct etl_counts *c = etl_reader_counts(r);
    const struct etl_header *h = etl_reader_header(r);
    CHECK_EQ(c->buffers, 4);
    CHECK_EQ(c->compressed, 1);
    CHECK_EQ(c->flag_events_lost, 1);
    CHECK_EQ(c->flag_buffer_lost, 1);
    CHECK_EQ(c->ptr32, 1);
    CHECK_EQ(h->perf_freq, 10000000);
    CHECK_EQ(h->clock_type, 1);
    CHECK_EQ(h->events_lost, 3);
    CHECK_EQ(h->buffers_lost, 1);
    CHECK_EQ(h->compression, 3);
    for (int k = 0; k < ETL_ERR_N; k++)
        CHECK_EQ(c->err[k], 0);
    etl_reader_free(r);
    free(f.p);
}

/* Compressed buffers need the format in the header buffer's State: LZNT1 (2) is named. */
static void test_compression_format(void)
{
    struct file f = {0};
    build_two_cpus(&f);
    w16(f.p + 0x2C, 2);
    struct seen s = {.n = 0};
    int rc;
    struct etl_reader *r = run(&f, &s, &rc);
    CHECK_EQ(rc, -1);
    CHECK_EQ(etl_reader_counts(r)->err[ETL_ERR_COMPRESSION_FORMAT], 1);
    CHECK_EQ(etl_reader_header(r)->compression, 2);
    etl_reader_free(r);
    /* With XPRESS (3) stated, the same file reads. */
    w16(f.p + 0x2C, 3);
    s.n = 0;
    r = run(&f, &s, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(s.n, 7);
    etl_reader_free(r);
    free(f.p);
}

/* Lying sizes: each is an error of its own kind, counted with its first offset, and the
 * rest of the file is still read where a stride is known. */
static void test_hostile_sizes(void)
{
    struct file f = {0};
    build_two_cpus(&f);
    size_t b2 = 8192, b3 = 2 * 8192; /* the cpu 1 seq 3 buffer, then the compressed one */
    /* A record of cpu 1 whose size runs past the buffer's end. */
    w16(f.p + b2 + 0x48 + 4, 0x7000);
    /* The compressed buffer says it inflates to more than its stream gives. */
    w32(f.p + b3 + 4, rd32_test(f.p + b3 + 4) + 64);
    struct seen s = {.n = 0};
    int rc;
    struct etl_reader *r = run(&f, &s, &rc);
    CHECK_EQ(rc, 0);
    const struct etl_counts *c = etl_reader_counts(r);
    CHECK_EQ(c->err[ETL_ERR_RECORD_SIZE], 1);
    CHECK_EQ(c->err_first[ETL_ERR_RECORD_SIZE], b2 + 0x48);
    CHECK_EQ(c->err[ETL_ERR_XPRESS_SIZE], 1);
    CHECK_EQ(c->err_first[ETL_ERR_XPRESS_SIZE], b3);
    CHECK_EQ(c->buffers_skipped, 1);
    CHECK_EQ(s.n, 3); /* the header buffer's two and cpu 1's seq 2 */
    etl_reader_free(r);
    /* A buffer size past the end of the file stops the walk there. */
    w32(f.p + b2, 1u << 30);
    s.n = 0;
    r = run(&f, &s, &rc);
    CHECK_EQ(etl_reader_counts(r)->err[ETL_ERR_BUFFER_TRUNCATED], 1);
    CHECK_EQ(etl_reader_counts(r)->err_first[ETL_ERR_BUFFER_TRUNCATED], b2);
    CHECK_EQ(etl_reader_counts(r)->buffers, 1);
    etl_reader_free(r);
    /* No header record: not an .etl. */
    w16(f.p + 0x48 + 6, 0x0501);
    r = run(&f, &s, &rc);
    CHECK_EQ(rc, -1);
    CHECK_EQ(etl_reader_counts(r)->err[ETL_ERR_NO_HEADER], 1);
    etl_reader_free(r);
    free(f.p);
    /* A compressed buffer whose stream inflates past its stated size: refused at the cap. */
    f = (struct file){0};
    build_two_cpus(&f);
    w32(f.p + b3 + 4, rd32_test(f.p + b3 + 4) - 16);
    s.n = 0;
    r = run(&f, &s, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(etl_reader_counts(r)->err[ETL_ERR_XPRESS_OVERRUN], 1);
    CHECK_EQ(s.n, 5);
    etl_reader_free(r);
    free(f.p);
}

/* The reader's buffers stay within max_memory whatever the stated sizes. */
static void test_memory_cap(void)
{
    struct file f = {0};
    build_two_cpus(&f);
    struct etl_limits lim = {.max_memory = 8192 + 4096};
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, &f, f.n, &lim) == 0);
    struct seen s = {.n = 0};
    CHECK_EQ(etl_reader_open(r), 0);
    CHECK_EQ(etl_reader_run(r, keep, &s), 0);
    CHECK(etl_reader_counts(r)->err[ETL_ERR_MEMORY] >= 1);
    CHECK(s.n < 7);
    etl_reader_free(r);
    free(f.p);
}

/* Stack keys: references resolved by definitions that come later, unresolved counted. */
static void test_stats_keys(void)
{
    struct file f = {0};
    struct buf b;
    uint8_t ref[24] = {0}, def[16] = {0};
    buf_init(&b);
    rec_logfile(&b, 1, 0, 0);
    w64(ref + 16, 0xAAAA);
    rec_perfinfo(&b, 0x1825, 2000, ref, 24);
    rec_perfinfo(&b, 0x1826, 2000, ref, 24);
    w64(ref + 16, 0xBBBB);
    rec_perfinfo(&b, 0x1826, 2100, ref, 24);
    w64(def, 0xAAAA);
    rec_perfinfo(&b, 0x1824, 3000, def, 16);
    put_buffer(&f, &b, 0, 1, 0, 4, 0, 0);
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, &f, f.n, NULL) == 0);
    struct etl_stats *st = etl_stats_new(0, 0);
    CHECK_EQ(etl_reader_open(r), 0);
    CHECK_EQ(etl_reader_run(r, etl_stats_record, st), 0);
    cJSON *j = etl_stats_json(st, r);
    cJSON *k = cJSON_GetObjectItem(j, "stacks");
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "key_refs")), 3);
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "key_defs")), 1);
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "distinct_keys")), 2);
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "unresolved_keys")), 1);
    cJSON_Delete(j);
    etl_stats_free(st);
    etl_reader_free(r);
    free(f.p);
}

/* More distinct keys than the cap: the excess counted as dropped, the table no larger. */
static void test_stats_keys_cap(void)
{
    struct file f = {0};
    struct buf b;
    uint8_t ref[24] = {0};
    buf_init(&b);
    rec_logfile(&b, 1, 0, 0);
    for (unsigned i = 0; i < 150; i++) {
        w64(ref + 16, 0x1000 + i);
        rec_perfinfo(&b, 0x1826, 2000 + i, ref, 24);
    }
    put_buffer(&f, &b, 0, 1, 0, 4, 0, 0);
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, &f, f.n, NULL) == 0);
    struct etl_stats *st = etl_stats_new(0, 100);
    CHECK_EQ(etl_reader_open(r), 0);
    CHECK_EQ(etl_reader_run(r, etl_stats_record, st), 0);
    cJSON *j = etl_stats_json(st, r);
    cJSON *k = cJSON_GetObjectItem(j, "stacks");
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "key_refs")), 150);
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "distinct_keys")), 100);
    CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "keys_dropped")), 50);
    cJSON_Delete(j);
    etl_stats_free(st);
    etl_reader_free(r);
    free(f.p);
}

/* ---- the .etl path against the raw-record path (etw-raw.h) ---- */

#define MAXEV 32
struct evs {
    struct ht_event ev[MAXEV];
    unsigned n;
};

static void keep_ev(void *arg, const struct ht_event *ev)
{
    struct evs *e = arg;
    if (e->n < MAXEV)
        e->ev[e->n++] = *ev;
}

/* The records of both paths: kernel records as Windows writes them in files (header kind,
 * HookId), and as a consumer delivers them (provider GUID, opcode, pointer-size flag). */
struct rec {
    int perfinfo, p64;
    uint16_t hook;
    const struct etw_guid *guid;
    uint32_t tid, pid, cpu;
    uint64_t ts;
    uint8_t pl[64];
    uint16_t len;
};

static uint16_t put_ptr(uint8_t *p, uint64_t v, int p64)
{
    if (p64)
        w64(p, v);
    else
        w32(p, (uint32_t)v);
    return p64 ? 8 : 4;
}

static void heap_rec(struct rec *r, uint16_t hook, int p64, uint32_t pid, uint32_t tid, uint64_t ts,
                     const uint64_t *ptrs, unsigned nptrs, uint32_t last)
{
    memset(r, 0, sizeof(*r));
    r->p64 = p64, r->hook = hook, r->guid = &etw_guid_heap;
    r->pid = pid, r->tid = tid, r->ts = ts;
    for (unsigned i = 0; i < nptrs; i++)
        r->len += put_ptr(r->pl + r->len, ptrs[i], p64);
    w32(r->pl + r->len, last);
    r->len += 4;
}

static void stack_rec(struct rec *r, uint32_t pid, uint32_t tid, uint64_t ts, uint64_t f0,
                      uint64_t f1)
{
    memset(r, 0, sizeof(*r));
    r->perfinfo = 1, r->p64 = 1, r->hook = 0x1820, r->guid = &etw_guid_stackwalk;
    r->pid = r->tid = ETL_NONE, r->ts = ts;
    w64(r->pl, ts);
    w32(r->pl + 8, pid);
    w32(r->pl + 12, tid);
    w64(r->pl + 16, f0);
    w64(r->pl + 24, f1);
    r->len = 32;
}

static unsigned same_records(struct rec *v)
{
    unsigned n = 0;
    const uint64_t create[] = {0x10000};
    heap_rec(&v[n++], 0x1020, 1, 8, 7, 1100, create, 1, 0);
    const uint64_t a1[] = {0x10000, 64, 0x20000};
    heap_rec(&v[n++], 0x1021, 1, 8, 7, 2000, a1, 3, 3);
    stack_rec(&v[n++], 8, 7, 2000, 0x7ff000001000ull, 0x7ff000002000ull);
    /* A WOW64 thread's Alloc: 4-byte pointers in a 64-bit file. */
    const uint64_t a2[] = {0x3000, 16, 0x5000};
    heap_rec(&v[n++], 0x1021, 0, 8, 9, 3000, a2, 3, 3);
    stack_rec(&v[n++], 8, 9, 3000, 0x401000, 0x402000);
    v[n - 2].cpu = v[n - 1].cpu = 1;
    const uint64_t f1[] = {0x10000, 0x20000};
    heap_rec(&v[n++], 0x1024, 1, 8, 7, 4000, f1, 2, 3);
    /* VirtualAlloc: PERFINFO, no ids in the header; the owner in the payload. */
    struct rec *va = &v[n++];
    memset(va, 0, sizeof(*va));
    va->perfinfo = 1, va->p64 = 1, va->hook = 0x0262, va->guid = &etw_guid_pagefault;
    va->pid = va->tid = ETL_NONE, va->ts = 4500;
    w64(va->pl, 0x100000);
    w64(va->pl + 8, 0x10000);
    w32(va->pl + 16, 8);
    w32(va->pl + 20, 0x1000);
    va->len = 24;
    /* Another process's Alloc: not the traced one. */
    const uint64_t a3[] = {0x10000, 32, 0x30000};
    heap_rec(&v[n++], 0x1021, 1, 99, 5, 5000, a3, 3, 3);
    return n;
}

static void raw_path(const struct rec *v, unsigned n, struct stack_intern *si, struct evs *out)
{
    char line[ETW_RAW_LINE_MAX], err[256];
    size_t len = etw_raw_header(10000000, 1000, 8, NULL, line, sizeof(line));
    struct etw_raw *x;
    CHECK(etw_raw_new(&x, si, line, len, keep_ev, out, err, sizeof(err)) == 0);
    for (unsigned i = 0; i < n; i++) {
        struct etw_record r = {.provider = *v[i].guid,
                               .opcode = (uint8_t)v[i].hook,
                               .version = 2,
                               .flags = v[i].p64 ? ETW_HDR_FLAG_64_BIT_HEADER
                                                 : ETW_HDR_FLAG_32_BIT_HEADER,
                               .pid = v[i].pid,
                               .tid = v[i].tid,
                               .cpu = v[i].cpu,
                               .ts = v[i].ts,
                               .payload = v[i].pl,
                               .len = v[i].len};
        len = etw_raw_format(&r, line, sizeof(line));
        CHECK(len > 0);
        CHECK_EQ(etw_raw_line(x, line, len - 1, err, sizeof(err)), 1);
    }
    etw_raw_finish(x);
    etw_raw_free(x);
}

static void etl_path(const struct rec *v, unsigned n, struct stack_intern *si, struct evs *out)
{
    struct file f = {0};
    struct buf b[2];
    buf_init(&b[0]);
    rec_logfile(&b[0], 2, 0, 0);
    buf_init(&b[1]);
    for (unsigned i = 0; i < n; i++) {
        struct buf *d = &b[v[i].cpu];
        if (v[i].perfinfo)
            rec_perfinfo(d, v[i].hook, v[i].ts, v[i].pl, v[i].len);
        else
            rec_system(d, v[i].p64, v[i].hook, v[i].tid, v[i].pid, v[i].ts, v[i].pl, v[i].len);
    }
    put_buffer(&f, &b[0], 0, 1, 0, 4, 0, 0);
    put_buffer(&f, &b[1], 1, 2, 0, 0, 0, 0);
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, &f, f.n, NULL) == 0);
    CHECK_EQ(etl_reader_open(r), 0);
    struct etl_events *x;
    CHECK(etl_events_new(&x, si, etl_reader_header(r), 8, keep_ev, out) == 0);
    CHECK_EQ(etl_reader_run(r, etl_events_record, x), 0);
    etl_events_finish(x);
    struct etl_events_stats st;
    etl_events_stats(x, &st);
    CHECK_EQ(st.malformed, 0);
    CHECK_EQ(st.corr.stacks_matched, 2);
    CHECK_EQ(st.corr.other_process, 1);
    etl_events_free(x);
    etl_reader_free(r);
    free(f.p);
}

/* The same records as an .etl file and as a raw stream: the same events, field by field. */
static void test_same_as_raw(void)
{
    struct rec v[16];
    unsigned n = same_records(v);
    struct stack_intern si1, si2;
    CHECK(stack_intern_init(&si1, 1024, 1024) == 0);
    CHECK(stack_intern_init(&si2, 1024, 1024) == 0);
    static struct evs raw, etl;
    raw_path(v, n, &si1, &raw);
    etl_path(v, n, &si2, &etl);
    CHECK_EQ(raw.n, 4); /* alloc, alloc, free, virtual alloc (a heap's creation is counted) */
    /* The .etl path announces the named process first, as replay.c does for a raw
     * stream's header (test_convert_same_as_raw compares whole streams). */
    CHECK_EQ(etl.n, raw.n + 1);
    CHECK_EQ(etl.ev[0].kind, HT_EV_PROCESS);
    CHECK_EQ(etl.ev[0].size, 8);
    for (unsigned i = 0; i < raw.n; i++) {
        const struct ht_event *a = &raw.ev[i], *b = &etl.ev[i + 1];
        CHECK_EQ(a->kind, b->kind);
        CHECK_EQ(a->t, b->t);
        CHECK_EQ(a->addr, b->addr);
        CHECK_EQ(a->size, b->size);
        CHECK_EQ(a->heap, b->heap);
        CHECK_EQ(a->tid, b->tid);
        CHECK_EQ(a->stack, b->stack);
        CHECK_EQ(a->flags, b->flags);
    }
    /* The WOW64 alloc read with 4-byte pointers, and its stack attached. */
    CHECK_EQ(etl.ev[2].addr, 0x5000);
    CHECK_EQ(etl.ev[2].size, 16);
    CHECK_EQ(etl.ev[2].tid, 9);
    CHECK(etl.ev[1].stack != 0 && etl.ev[2].stack != 0);
    stack_intern_close(&si1);
    stack_intern_close(&si2);
}

/* ---- ht-convert on files: FILE.etl against the raw stream of the same records ---- */

#ifndef _WIN32

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int same_file(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y, cx, cy;
    long n = 0;
    while (same) {
        cx = fgetc(x), cy = fgetc(y);
        same = cx == cy;
        if (cx == EOF || cy == EOF)
            break;
        n++;
    }
    if (x)
        fclose(x);
    if (y)
        fclose(y);
    return same && n > 16;
}

/* The .etl: processor 1's buffer compressed and flagged as having lost a buffer; the
 * header's EventsLost is 2. */
static void write_etl(const struct rec *v, unsigned n, const char *path)
{
    struct file f = {0};
    struct buf b[2];
    buf_init(&b[0]);
    rec_logfile(&b[0], 2, 2, 1);
    w16(b[0].data + 0x2C, 3);
    buf_init(&b[1]);
    for (unsigned i = 0; i < n; i++) {
        struct buf *d = &b[v[i].cpu];
        if (v[i].perfinfo)
            rec_perfinfo(d, v[i].hook, v[i].ts, v[i].pl, v[i].len);
        else
            rec_system(d, v[i].p64, v[i].hook, v[i].tid, v[i].pid, v[i].ts, v[i].pl, v[i].len);
    }
    put_buffer(&f, &b[0], 0, 1, 0, 4, 0, 0);
    put_buffer(&f, &b[1], 1, 2, 0x04, 0, 0, 1);
    CHECK(write_file(path, f.p, f.n) == 0);
    free(f.p);
}

static void write_raw(const struct rec *v, unsigned n, uint32_t pid, const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    char line[ETW_RAW_LINE_MAX];
    size_t len = etw_raw_header(10000000, 1000, pid, NULL, line, sizeof(line));
    fwrite(line, 1, len, f);
    for (unsigned i = 0; i < n; i++) {
        struct etw_record r = {.provider = *v[i].guid,
                               .opcode = (uint8_t)v[i].hook,
                               .version = 2,
                               .flags = v[i].p64 ? ETW_HDR_FLAG_64_BIT_HEADER
                                                 : ETW_HDR_FLAG_32_BIT_HEADER,
                               .pid = v[i].pid,
                               .tid = v[i].tid,
                               .cpu = v[i].cpu,
                               .ts = v[i].ts,
                               .payload = v[i].pl,
                               .len = v[i].len};
        len = etw_raw_format(&r, line, sizeof(line));
        fwrite(line, 1, len, f);
    }
    /* The .etl header's EventsLost (2), as a recording's gap. */
    fputs("{\"etw_raw_lost\":2}\n", f);
    CHECK(fclose(f) == 0);
}

#endif

/* ht-convert FILE.etl writes the .htevb that the raw stream of the same records gives,
 * byte for byte, for each of the two processes (--pid), from a file with a compressed
 * buffer, a WOW64 record and a lost-buffer flag. */
static void test_convert_same_as_raw(void)
{
#ifdef _WIN32
    exit(HT_TEST_SKIP); /* the paths and system() below are POSIX */
#else
    struct rec v[16];
    unsigned n = same_records(v);
    /* A stack for the other process's alloc too. */
    stack_rec(&v[n++], 99, 5, 5000, 0x7ff000003000ull, 0x7ff000004000ull);
    char dir[] = "/tmp/test-etl.XXXXXX", etl[64], raw[64], o1[64], o2[64], cmd[512];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(etl, sizeof(etl), "%s/t.etl", dir);
    write_etl(v, n, etl);
    const uint32_t pids[] = {8, 99};
    for (int i = 0; i < 2; i++) {
        snprintf(raw, sizeof(raw), "%s/t%u.etwraw", dir, pids[i]);
        snprintf(o1, sizeof(o1), "%s/etl%u.htevb", dir, pids[i]);
        snprintf(o2, sizeof(o2), "%s/raw%u.htevb", dir, pids[i]);
        write_raw(v, n, pids[i], raw);
        snprintf(cmd, sizeof(cmd), "%s --plain --pid %u %s %s && %s --plain %s %s", HT_CONVERT,
                 pids[i], etl, o1, HT_CONVERT, raw, o2);
        CHECK_EQ(system(cmd), 0);
        if (getenv("HT_KEEP"))
            fprintf(stderr, "kept %s %s\n", o1, o2);
        CHECK(same_file(o1, o2));
        remove(raw);
        remove(o1);
        remove(o2);
    }
    remove(etl);
    rmdir(dir);
#endif
}

/* ---- stack keys: references resolved by definitions that come later ---- */

static void run_events(struct file *f, struct stack_intern *si, struct evs *out,
                       struct etl_events_stats *st)
{
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, f, f->n, NULL) == 0);
    CHECK_EQ(etl_reader_open(r), 0);
    struct etl_events *x;
    CHECK(etl_events_new(&x, si, etl_reader_header(r), 8, keep_ev, out) == 0);
    CHECK_EQ(etl_events_run(x, r), 0);
    etl_events_stats(x, st);
    etl_events_free(x);
    etl_reader_free(r);
}

/* The same allocations with their stacks inline (0x1820) and by stack key (0x1826 references,
 * the key's 0x1823 definition after them): the same events, stacks included; a key never
 * defined is counted and its event goes without a stack, as without a stack record. */
static void test_keys_same_as_inline(void)
{
    struct rec v[16];
    const uint64_t a1[] = {0x10000, 64, 0x20000}, a2[] = {0x10000, 32, 0x20100};
    struct file fi = {0}, fk = {0};
    struct buf b;
    uint8_t ref[24], def[24];
    /* Inline: alloc + stack, then an alloc with no stack record. */
    buf_init(&b);
    rec_logfile(&b, 1, 0, 0);
    heap_rec(&v[0], 0x1021, 1, 8, 7, 2000, a1, 3, 3);
    stack_rec(&v[1], 8, 7, 2000, 0x7ff000001000ull, 0x7ff000002000ull);
    heap_rec(&v[2], 0x1021, 1, 8, 7, 2500, a2, 3, 3);
    rec_system(&b, 1, v[0].hook, 7, 8, 2000, v[0].pl, v[0].len);
    rec_perfinfo(&b, 0x1820, 2000, v[1].pl, v[1].len);
    rec_system(&b, 1, v[2].hook, 7, 8, 2500, v[2].pl, v[2].len);
    put_buffer(&fi, &b, 0, 1, 0, 4, 0, 0);
    /* Keys: the same allocs, each followed by a user key reference; only the first key is
     * defined, by a KeyDelete after both. */
    buf_init(&b);
    rec_logfile(&b, 1, 0, 0);
    rec_system(&b, 1, v[0].hook, 7, 8, 2000, v[0].pl, v[0].len);
    w64(ref, 2000), w32(ref + 8, 8), w32(ref + 12, 7), w64(ref + 16, 0xABC0);
    rec_perfinfo(&b, 0x1826, 2000, ref, 24);
    rec_system(&b, 1, v[2].hook, 7, 8, 2500, v[2].pl, v[2].len);
    w64(ref, 2500), w64(ref + 16, 0xDEF0);
    rec_perfinfo(&b, 0x1826, 2500, ref, 24);
    w64(def, 0xABC0), w64(def + 8, 0x7ff000001000ull), w64(def + 16, 0x7ff000002000ull);
    rec_perfinfo(&b, 0x1823, 3000, def, 24);
    put_buffer(&fk, &b, 0, 1, 0, 4, 0, 0);
    struct stack_intern si1, si2;
    CHECK(stack_intern_init(&si1, 1024, 1024) == 0);
    CHECK(stack_intern_init(&si2, 1024, 1024) == 0);
    static struct evs ei, ek;
    struct etl_events_stats sti, stk;
    run_events(&fi, &si1, &ei, &sti);
    run_events(&fk, &si2, &ek, &stk);
    CHECK_EQ(ei.n, 3); /* the process, two allocs */
    CHECK_EQ(ek.n, ei.n);
    for (unsigned i = 0; i < ei.n; i++) {
        CHECK_EQ(ei.ev[i].kind, ek.ev[i].kind);
        CHECK_EQ(ei.ev[i].t, ek.ev[i].t);
        CHECK_EQ(ei.ev[i].addr, ek.ev[i].addr);
        CHECK_EQ(ei.ev[i].stack, ek.ev[i].stack);
        CHECK_EQ(ei.ev[i].flags, ek.ev[i].flags);
    }
    CHECK(ek.ev[1].stack != 0);
    CHECK_EQ(ek.ev[2].stack, 0);
    CHECK_EQ(stk.key_refs, 2);
    CHECK_EQ(stk.key_unresolved, 1);
    /* Read in one pass, a reference is matched to its event before its definition comes
     * (the unresolved one too: it then leaves without a stack). */
    CHECK_EQ(stk.corr.stacks_matched, 2);
    stack_intern_close(&si1);
    stack_intern_close(&si2);
    free(fi.p);
    free(fk.p);
}

HT_TEST_MAIN(T(xpress_matches), T(merge_order), T(compression_format), T(hostile_sizes),
             T(memory_cap), T(stats_keys), T(stats_keys_cap), T(same_as_raw),
             T(convert_same_as_raw), T(keys_same_as_inline))
