/* The .etl container: the buffers walked by their own sizes, the log-file header, XPRESS
 * buffers, and the per-processor streams merged by timestamp. Layouts: Geoff Chappell,
 * "WMI_BUFFER_HEADER" and "TRACE_LOGFILE_HEADER" (geoffchappell.com/studies/windows/km/
 * ntoskrnl/api/etw/), buffer flags and types from ntwmi.h (System Informer's phnt); the
 * public name of the end of data at 0x30 is ETW_BUFFER_HEADER's FilledBytes (evntrace.h). */
#include "etl-read.h"
#include "etl-xpress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BUF_HDR 0x48 /* WMI_BUFFER_HEADER, the same on 32- and 64-bit Windows since 7 */
#define BUF_FLAG_EVENTS_LOST 0x02
#define BUF_FLAG_BUFFER_LOST 0x04
#define BUF_FLAG_PROC_INDEX 0x20
#define BUF_FLAG_COMPRESSED 0x40
#define MODE_COMPRESSED 0x04000000u /* EVENT_TRACE_COMPRESSED_MODE (evntrace.h) */
#define MODE_CIRCULAR 0x00000002u   /* EVENT_TRACE_FILE_MODE_CIRCULAR (evntrace.h) */
#define MODE_NEWFILE 0x00000008u    /* EVENT_TRACE_FILE_MODE_NEWFILE (evntrace.h) */
#define XPRESS_FORMAT 3             /* COMPRESSION_FORMAT_XPRESS (winnt.h) */

struct etl_buf {
    uint64_t off, seq;
    uint32_t size;
    uint16_t cpu;
    uint8_t compressed; /* BufferFlag COMPRESSED, from the walk: one read per buffer after */
};

struct etl_cpu {
    uint32_t first, next, last; /* the stream's buffers: idx[first..last), next to read */
    uint8_t *data;
    const uint8_t *view; /* the buffer being read: data, or in place in a mapped file */
    uint32_t mapped;     /* bytes of the buffer at off read in place (compressed or not) */
    size_t cap, pos, end;
    uint64_t off; /* file offset of the buffer in data */
    uint64_t ts;  /* the current record's time (the last one's for kinds without a time) */
    struct etl_record rec;
};

struct etl_reader {
    etl_read_fn read;
    void *arg;
    uint64_t size;
    struct etl_limits lim;
    struct etl_header hdr;
    struct etl_counts counts;
    struct etl_counts opened; /* the counts once the file was indexed: a rewind's start */
    struct etl_buf *idx;
    uint32_t nidx, capidx;
    struct etl_cpu *cpus;
    uint32_t ncpus;
    uint32_t *heap, nheap;
    uint8_t *raw; /* a compressed buffer as stored */
    const uint8_t *base; /* the file mapped whole (etl_reader_map), or NULL */
    etl_done_fn done;
    void *done_arg;
    size_t rawcap;
    uint64_t mem; /* bytes of raw and the processors' buffers */
};

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

void etl_reader_error(struct etl_reader *r, int kind, uint64_t off)
{
    if (r->counts.err[kind]++ == 0)
        r->counts.err_first[kind] = off;
}

int etl_reader_new(struct etl_reader **out, etl_read_fn fn, void *arg, uint64_t size,
                   const struct etl_limits *lim)
{
    struct etl_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->read = fn;
    r->arg = arg;
    r->size = size;
    r->lim.max_buffer = 64u << 20;
    r->lim.max_buffers = 1u << 22;
    r->lim.max_cpus = 2048;
    r->lim.max_memory = 256u << 20;
    if (lim) {
        if (lim->max_buffer)
            r->lim.max_buffer = lim->max_buffer;
        if (lim->max_buffers)
            r->lim.max_buffers = lim->max_buffers;
        if (lim->max_cpus)
            r->lim.max_cpus = lim->max_cpus;
        if (lim->max_memory)
            r->lim.max_memory = lim->max_memory;
    }
    *out = r;
    return 0;
}

void etl_reader_free(struct etl_reader *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->ncpus; i++)
        free(r->cpus[i].data);
    free(r->cpus);
    free(r->heap);
    free(r->idx);
    free(r->raw);
    free(r);
}

static int read_exact(struct etl_reader *r, uint64_t off, void *buf, size_t n)
{
    int64_t got = r->read(r->arg, off, buf, n);
    if (got != (int64_t)n) {
        etl_reader_error(r, ETL_ERR_READ, off);
        return -1;
    }
    return 0;
}

static int index_push(struct etl_reader *r, const struct etl_buf *b)
{
    if (r->nidx == r->capidx) {
        uint32_t cap = r->capidx ? r->capidx * 2 : 256;
        struct etl_buf *n = realloc(r->idx, (size_t)cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        r->idx = n;
        r->capidx = cap;
    }
    r->idx[r->nidx++] = *b;
    return 0;
}

/* One buffer header at off into the index; 1 to go on, 0 to stop the walk, or -ENOMEM. */
static int index_buffer(struct etl_reader *r, uint64_t off, uint64_t *next)
{
    uint8_t h[BUF_HDR];
    if (read_exact(r, off, h, sizeof(h)) < 0)
        return 0;
    uint32_t size = rd32(h), flags = rd16(h + 0x34);
    if (size < BUF_HDR) {
        /* No stride to go on with: the rest of the file cannot be walked. */
        etl_reader_error(r, ETL_ERR_BUFFER_SIZE, off);
        return 0;
    }
    if (size > r->size - off) {
        etl_reader_error(r, ETL_ERR_BUFFER_TRUNCATED, off);
        return 0;
    }
    *next = off + size;
    r->counts.buffers++;
    r->counts.compressed += !!(flags & BUF_FLAG_COMPRESSED);
    r->counts.flag_events_lost += !!(flags & BUF_FLAG_EVENTS_LOST);
    r->counts.flag_buffer_lost += !!(flags & BUF_FLAG_BUFFER_LOST);
    /* ClientContext: ProcessorNumber (u8) + Alignment, or an 11-bit ProcessorIndex when
     * the buffer has PROC_INDEX (ntwmi.h ETW_BUFFER_FLAG_PROC_INDEX). */
    uint32_t cpu = flags & BUF_FLAG_PROC_INDEX ? rd16(h + 0x28) & 0x7FF : h[0x28];
    if (cpu >= r->lim.max_cpus) {
        etl_reader_error(r, ETL_ERR_CPU_RANGE, off);
        r->counts.buffers_skipped++;
        return 1;
    }
    if (r->nidx == r->lim.max_buffers) {
        etl_reader_error(r, ETL_ERR_TOO_MANY_BUFFERS, off);
        return 0;
    }
    struct etl_buf b = {off, rd64(h + 0x18), size, (uint16_t)cpu, !!(flags & BUF_FLAG_COMPRESSED)};
    return index_push(r, &b) < 0 ? -ENOMEM : 1;
}

static int index_file(struct etl_reader *r)
{
    uint64_t off = 0;
    while (off < r->size) {
        if (r->size - off < BUF_HDR) {
            etl_reader_error(r, ETL_ERR_BUFFER_TRUNCATED, off);
            break;
        }
        int rc = index_buffer(r, off, &off);
        if (rc <= 0)
            return rc;
    }
    return 0;
}

/* TRACE_LOGFILE_HEADER: its pointer-sized LoggerName and LogFileName, then the 172-byte
 * TIME_ZONE_INFORMATION, then (aligned to 8, the structure's natural alignment) BootTime,
 * PerfFreq, StartTime, ReservedFlags (the clock type) and BuffersLost. */
static int parse_logfile_header(struct etl_reader *r, const struct etl_record *rec)
{
    const uint8_t *p = rec->payload;
    struct etl_header *h = &r->hdr;
    if (rec->len < 56) {
        etl_reader_error(r, ETL_ERR_HEADER_SHORT, rec->off);
        return -1;
    }
    h->buffer_size = rd32(p);
    memcpy(h->version, p + 4, 4);
    h->provider_version = rd32(p + 8);
    h->ncpus = rd32(p + 12);
    h->end_time = rd64(p + 16);
    h->timer_resolution = rd32(p + 24);
    h->log_file_mode = rd32(p + 32);
    h->buffers_written = rd32(p + 36);
    h->pointer_size = rd32(p + 44);
    h->events_lost = rd32(p + 48);
    h->ts0 = rec->ts;
    unsigned ps = h->pointer_size == 4 || h->pointer_size == 8 ? h->pointer_size : rec->ptr_size;
    uint32_t at = (56 + 2 * ps + 172 + 7) & ~7u;
    if (rec->len < at + 32) {
        etl_reader_error(r, ETL_ERR_HEADER_SHORT, rec->off);
        return -1;
    }
    h->boot_time = rd64(p + at);
    h->perf_freq = rd64(p + at + 8);
    h->start_time = rd64(p + at + 16);
    h->clock_type = rd32(p + at + 24);
    h->buffers_lost = rd32(p + at + 28);
    return 0;
}

/* The first buffer (never compressed) holds the header record first. */
static int read_header(struct etl_reader *r)
{
    if (r->nidx == 0 || r->idx[0].off != 0) {
        etl_reader_error(r, ETL_ERR_NO_HEADER, 0);
        return -1;
    }
    uint32_t n = r->idx[0].size < 4096 ? r->idx[0].size : 4096;
    uint8_t *b = malloc(n);
    if (!b)
        return -ENOMEM;
    struct etl_record rec;
    int rc = read_exact(r, 0, b, n) < 0 ? -1 : etl_record_parse(b + BUF_HDR, n - BUF_HDR, &rec);
    if (rc <= 0 || (rec.kind != ETL_HDR_SYSTEM32 && rec.kind != ETL_HDR_SYSTEM64) ||
        rec.hook != 0) {
        etl_reader_error(r, ETL_ERR_NO_HEADER, BUF_HDR);
        free(b);
        return -1;
    }
    rec.off = BUF_HDR;
    rc = parse_logfile_header(r, &rec);
    /* The compression format is the low 16 bits of the first buffer's State (the
     * COMPRESSION_FORMAT_* values of winnt.h; seen: 3, XPRESS). */
    if (r->counts.compressed || (r->hdr.log_file_mode & MODE_COMPRESSED))
        r->hdr.compression = rd16(b + 0x2C);
    free(b);
    return rc;
}

static int buf_cmp(const void *a, const void *b)
{
    const struct etl_buf *x = a, *y = b;
    if (x->cpu != y->cpu)
        return x->cpu < y->cpu ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Each processor's buffers in SequenceNumber order: idx sorted, one cursor per processor. */
static int make_streams(struct etl_reader *r)
{
    qsort(r->idx, r->nidx, sizeof(*r->idx), buf_cmp);
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->nidx; i++) {
        if (i == 0 || r->idx[i].cpu != r->idx[i - 1].cpu)
            n++;
        else if (r->idx[i].seq == r->idx[i - 1].seq)
            etl_reader_error(r, ETL_ERR_SEQUENCE, r->idx[i].off);
    }
    r->cpus = calloc(n ? n : 1, sizeof(*r->cpus));
    r->heap = calloc(n ? n : 1, sizeof(*r->heap));
    if (!r->cpus || !r->heap)
        return -ENOMEM;
    for (uint32_t i = 0; i < r->nidx; i++) {
        if (i == 0 || r->idx[i].cpu != r->idx[i - 1].cpu) {
            r->cpus[r->ncpus].first = r->cpus[r->ncpus].next = i;
            r->ncpus++;
        }
        r->cpus[r->ncpus - 1].last = i + 1;
    }
    return 0;
}

/* A file cut at a buffer's end walks cleanly: the header's BuffersWritten says how many
 * buffers Windows wrote (as many as the file holds in every real trace checked). A circular
 * file overwrote its oldest and a NEWFILE one is a part of the session: they may hold fewer.
 * 0: not said. */
static void check_buffers_written(struct etl_reader *r)
{
    const struct etl_header *h = &r->hdr;
    if (h->buffers_written && !(h->log_file_mode & (MODE_CIRCULAR | MODE_NEWFILE)) &&
        r->counts.buffers < h->buffers_written)
        etl_reader_error(r, ETL_ERR_BUFFERS_MISSING, r->size);
}

int etl_reader_open(struct etl_reader *r)
{
    int rc = index_file(r);
    if (rc < 0)
        return rc;
    if ((rc = read_header(r)) < 0)
        return rc;
    check_buffers_written(r);
    if (r->counts.compressed && r->hdr.compression != XPRESS_FORMAT) {
        etl_reader_error(r, ETL_ERR_COMPRESSION_FORMAT, 0x2C);
        return -1;
    }
    if ((rc = make_streams(r)) == 0)
        r->opened = r->counts;
    return rc;
}

static void leave(struct etl_reader *r, struct etl_cpu *c);

void etl_reader_map(struct etl_reader *r, const uint8_t *base, etl_done_fn done, void *arg)
{
    r->base = base;
    r->done = done;
    r->done_arg = arg;
}

void etl_reader_rewind(struct etl_reader *r)
{
    for (uint32_t i = 0; i < r->ncpus; i++) {
        leave(r, &r->cpus[i]);
        r->cpus[i].next = r->cpus[i].first;
        r->cpus[i].pos = r->cpus[i].end = 0;
        r->cpus[i].ts = 0;
    }
    r->counts = r->opened;
}

const struct etl_header *etl_reader_header(const struct etl_reader *r)
{
    return &r->hdr;
}

const struct etl_counts *etl_reader_counts(const struct etl_reader *r)
{
    return &r->counts;
}

/* Buffers grow to the largest seen, all of them within lim.max_memory: a file cannot make
 * the reader hold more than that, whatever its processor count and stated sizes. */
static int grow(struct etl_reader *r, uint8_t **p, size_t *cap, size_t n, uint64_t off)
{
    if (*cap >= n)
        return 0;
    if (r->mem - *cap + n > r->lim.max_memory) {
        etl_reader_error(r, ETL_ERR_MEMORY, off);
        return -1;
    }
    uint8_t *q = realloc(*p, n);
    if (!q)
        return -ENOMEM;
    r->mem = r->mem - *cap + n;
    *p = q;
    *cap = n;
    return 0;
}

/* A compressed buffer: its header stored as is, then an XPRESS stream that inflates to
 * exactly SavedOffset - 0x48 bytes of records. */
static int load_compressed(struct etl_reader *r, struct etl_cpu *c, const struct etl_buf *b,
                           const uint8_t *raw)
{
    uint32_t saved = rd32(raw + 4);
    if (saved < BUF_HDR || saved > r->lim.max_buffer) {
        etl_reader_error(r, saved < BUF_HDR ? ETL_ERR_FILLED : ETL_ERR_BUFFER_TOO_BIG, b->off);
        return -1;
    }
    int rc = grow(r, &c->data, &c->cap, saved, b->off);
    if (rc < 0)
        return rc;
    c->view = c->data;
    memcpy(c->data, raw, BUF_HDR);
    int64_t n =
        etl_xpress_decode(raw + BUF_HDR, b->size - BUF_HDR, c->data + BUF_HDR, saved - BUF_HDR);
    if (n != (int64_t)(saved - BUF_HDR)) {
        int kind = n == ETL_XPRESS_EOVERRUN ? ETL_ERR_XPRESS_OVERRUN
                   : n < 0                  ? ETL_ERR_XPRESS
                                            : ETL_ERR_XPRESS_SIZE;
        etl_reader_error(r, kind, b->off);
        return -1;
    }
    r->counts.bytes_inflated += (uint64_t)n;
    c->end = saved;
    return 0;
}

/* The end of records of an uncompressed buffer is Offset/FilledBytes (0x30), not
 * SavedOffset: in the header buffer of relogged files events follow SavedOffset. */
static int load_plain(struct etl_reader *r, struct etl_cpu *c, const struct etl_buf *b)
{
    uint32_t filled = rd32(c->view + 0x30);
    if (filled < BUF_HDR || filled > b->size) {
        etl_reader_error(r, ETL_ERR_FILLED, b->off + 0x30);
        return -1;
    }
    c->end = filled;
    /* Windows fills the rest with 0xFF (checked on Windows-written files): anything else
     * past the end is data this reader did not walk, counted so that it is never silent. */
    for (size_t i = filled; i < b->size; i++) {
        if (c->view[i] != 0xFF) {
            r->counts.tail_data++;
            break;
        }
    }
    return 0;
}

/* An uncompressed buffer: in place when the file is mapped, else read into c->data. */
static int load_uncompressed(struct etl_reader *r, struct etl_cpu *c, const struct etl_buf *b)
{
    if (r->base) {
        c->view = r->base + b->off;
        c->mapped = b->size;
        return load_plain(r, c, b);
    }
    int rc = grow(r, &c->data, &c->cap, b->size, b->off);
    c->view = c->data;
    if (rc == 0)
        rc = read_exact(r, b->off, c->data, b->size) < 0 ? -1 : load_plain(r, c, b);
    return rc;
}

/* A compressed buffer read whole, then inflated. Not from the mapped file: compressed
 * buffers do not end on page boundaries, and the pages they share would stay (bench-etl.sh
 * --xpress: the ctl's RSS grew by a third of the file). */
static int load_deflated(struct etl_reader *r, struct etl_cpu *c, const struct etl_buf *b)
{
    int rc = grow(r, &r->raw, &r->rawcap, b->size, b->off);
    if (rc == 0)
        rc = read_exact(r, b->off, r->raw, b->size) < 0 ? -1 : load_compressed(r, c, b, r->raw);
    return rc;
}

/* The buffer c read in place is left: its owner may drop its pages. */
static void leave(struct etl_reader *r, struct etl_cpu *c)
{
    if (r->done && c->mapped)
        r->done(r->done_arg, c->off, c->mapped);
    c->mapped = 0;
    c->view = NULL;
}

/* The next buffer of c's stream into c->view: 1 loaded, 0 none left, -ENOMEM. */
static int load_next(struct etl_reader *r, struct etl_cpu *c)
{
    leave(r, c);
    while (c->next < c->last) {
        const struct etl_buf *b = &r->idx[c->next++];
        if (b->size > r->lim.max_buffer) {
            etl_reader_error(r, ETL_ERR_BUFFER_TOO_BIG, b->off);
            r->counts.buffers_skipped++;
            continue;
        }
        c->off = b->off;
        int rc = b->compressed ? load_deflated(r, c, b) : load_uncompressed(r, c, b);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0) {
            leave(r, c);
            r->counts.buffers_skipped++;
            continue;
        }
        c->pos = BUF_HDR;
        return 1;
    }
    return 0;
}

static void count_record(struct etl_reader *r, const struct etl_record *rec)
{
    r->counts.records++;
    r->counts.by_kind[rec->kind == ETL_HDR_WPP ? 0x16 : rec->kind]++;
    r->counts.ptr32 += rec->ptr_size == 4;
    r->counts.ptr64 += rec->ptr_size == 8;
}

/* Moves c to its next record: 1 there is one (c->rec), 0 the stream ended, -ENOMEM. */
static int cursor_next(struct etl_reader *r, struct etl_cpu *c, uint16_t cpu)
{
    for (;;) {
        if (c->view && c->pos < c->end) {
            int n = etl_record_parse(c->view + c->pos, c->end - c->pos, &c->rec);
            if (n > 0) {
                c->rec.cpu = cpu;
                c->rec.off = c->off + c->pos;
                if (c->rec.ts == 0)
                    c->rec.ts = c->ts; /* kinds without a time keep their place */
                r->counts.backwards += c->rec.ts < c->ts;
                c->ts = c->rec.ts;
                /* Records start on 8-byte boundaries (checked on Windows-written files). */
                c->pos += ((size_t)n + 7) & ~(size_t)7;
                count_record(r, &c->rec);
                return 1;
            }
            if (n < 0)
                etl_reader_error(r, -n - 1, c->off + c->pos);
            c->pos = c->end; /* padding, or a record that cannot be walked past */
        }
        int rc = load_next(r, c);
        if (rc <= 0)
            return rc;
    }
}

static int heap_less(const struct etl_reader *r, uint32_t a, uint32_t b)
{
    uint64_t x = r->cpus[a].rec.ts, y = r->cpus[b].rec.ts;
    return x != y ? x < y : a < b;
}

static void heap_down(struct etl_reader *r, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < r->nheap && heap_less(r, r->heap[l], r->heap[m]))
            m = l;
        if (l + 1 < r->nheap && heap_less(r, r->heap[l + 1], r->heap[m]))
            m = l + 1;
        if (m == i)
            return;
        uint32_t t = r->heap[i];
        r->heap[i] = r->heap[m];
        r->heap[m] = t;
        i = m;
    }
}

static void heap_up(struct etl_reader *r, uint32_t i)
{
    while (i > 0 && heap_less(r, r->heap[i], r->heap[(i - 1) / 2])) {
        uint32_t p = (i - 1) / 2, t = r->heap[i];
        r->heap[i] = r->heap[p];
        r->heap[p] = t;
        i = p;
    }
}

int etl_reader_scan(struct etl_reader *r, etl_record_fn fn, void *arg)
{
    for (uint32_t i = 0; i < r->ncpus; i++) {
        struct etl_cpu *c = &r->cpus[i];
        int rc;
        while ((rc = cursor_next(r, c, r->idx[c->first].cpu)) > 0)
            fn(arg, &c->rec);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int etl_reader_run(struct etl_reader *r, etl_record_fn fn, void *arg)
{
    r->nheap = 0;
    for (uint32_t i = 0; i < r->ncpus; i++) {
        int rc = cursor_next(r, &r->cpus[i], r->idx[r->cpus[i].first].cpu);
        if (rc < 0)
            return rc;
        if (rc > 0) {
            r->heap[r->nheap++] = i;
            heap_up(r, r->nheap - 1);
        }
    }
    while (r->nheap > 0) {
        uint32_t i = r->heap[0];
        struct etl_cpu *c = &r->cpus[i];
        fn(arg, &c->rec);
        int rc = cursor_next(r, c, c->rec.cpu);
        if (rc < 0)
            return rc;
        if (rc == 0)
            r->heap[0] = r->heap[--r->nheap];
        heap_down(r, 0);
    }
    return 0;
}
