/* Fuzz target: compressed .htevb (htevz.h) through replay. The input is a
 * plain stream after the magic (the target adds it; the htevb corpus serves),
 * its first byte picking the frame and piece sizes. The stream is compressed
 * in small frames and read back in pieces: the same events as the plain
 * stream read whole. Then the compressed bytes with one byte changed, and the
 * input itself behind the zstd magic, must be read without harm: at most one
 * malformed count, the decoder's memory within its bound. */
#include "htevz.h"
#include "replay.h"
#include "stack-intern.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The stream's magic: HTEVB1 here, HTEVB2 for the htevb2 / htevz2 targets
 * (tests/fuzz/CMakeLists.txt). */
#ifndef HT_FUZZ_MAGIC
#define HT_FUZZ_MAGIC HTEVB_MAGIC
#endif

struct zbuf {
    unsigned char *p;
    size_t n, cap;
    int full;
};

static void zbuf_out(void *arg, const void *buf, size_t n)
{
    struct zbuf *b = arg;
    if (b->full || b->n + n > b->cap) {
        b->full = 1;
        return;
    }
    memcpy(b->p + b->n, buf, n);
    b->n += n;
}

struct digest {
    uint64_t h;
};

static void digest_ev(void *arg, const struct ht_event *ev)
{
    struct digest *d = arg;
    const uint64_t v[] = {ev->kind, ev->t,        ev->addr,  ev->heap, ev->old_addr,
                          ev->size, ev->old_size, ev->stack, ev->tid,  ev->flags};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        d->h = (d->h ^ v[i]) * 0x100000001b3ULL;
}

struct result {
    uint64_t events, malformed, h;
    size_t mem_max;
};

static struct result read_all(const unsigned char *p, size_t n, size_t piece)
{
    struct result res = {0, 0, 0, 0};
    struct digest d = {0xcbf29ce484222325ULL};
    struct stack_intern si;
    if (stack_intern_init(&si, 1u << 16, 1u << 16) != 0)
        abort();
    struct replay r;
    replay_init(&r, &si, digest_ev, &d);
    for (size_t off = 0; off < n; off += piece) {
        replay_feed(&r, (const char *)p + off, n - off < piece ? n - off : piece);
        if (r.compressed && htevz_reader_mem(&r.z) > res.mem_max)
            res.mem_max = htevz_reader_mem(&r.z);
    }
    replay_finish(&r);
    res.events = r.events;
    res.malformed = r.malformed;
    res.h = d.h;
    replay_close(&r);
    stack_intern_close(&si);
    return res;
}

/* A window of 2^HTEVZ_WINDOW_LOG_MAX, zstd's tables and the output buffer,
 * and the hold of a frame until its checksum (htevz.h). */
#define MEM_BOUND ((1u << HTEVZ_WINDOW_LOG_MAX) + (1u << 20) + HTEVZ_HOLD_MAX)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] % 61 + 1;
    uint64_t frame = 16 + (uint64_t)(data[0] >> 2) * 64;
    size_t plain_n = HTEVB_MAGIC_LEN + size - 1;
    unsigned char *plain = malloc(plain_n);
    struct zbuf z = {malloc(2 * plain_n + 4096), 0, 2 * plain_n + 4096, 0};
    if (!plain || !z.p)
        goto out;
    memcpy(plain, HT_FUZZ_MAGIC, HTEVB_MAGIC_LEN);
    memcpy(plain + HTEVB_MAGIC_LEN, data + 1, size - 1);
    struct htevz_writer w;
    if (htevz_writer_init(&w, 1, zbuf_out, &z) != 0)
        goto out;
    w.frame_bytes = frame;
    htevz_write(&w, plain, plain_n);
    if (htevz_writer_close(&w) != 0 || z.full)
        abort();
    struct result a = read_all(plain, plain_n, plain_n);
    struct result b = read_all(z.p, z.n, piece);
    if (a.events != b.events || a.h != b.h || a.malformed != b.malformed) {
        fprintf(stderr, "compressed reads differently: %llu/%llu events, %llu/%llu malformed\n",
                (unsigned long long)a.events, (unsigned long long)b.events,
                (unsigned long long)a.malformed, (unsigned long long)b.malformed);
        abort();
    }
    /* One byte changed: an error at most, never more events than there were
     * (frames are checksummed) unless the change hit the plain stream's own
     * tolerance, which a checksum rules out. */
    size_t at = (size_t)(a.h % z.n);
    z.p[at] ^= (unsigned char)(data[0] | 1);
    struct result c = read_all(z.p, z.n, piece);
    if (c.malformed > a.malformed + 1 || c.mem_max > MEM_BOUND)
        abort();
    /* The input itself as the frames' bytes. */
    memcpy(plain, HTEVZ_MAGIC, HTEVZ_MAGIC_LEN);
    memcpy(plain + HTEVZ_MAGIC_LEN, data,
           size < plain_n - HTEVZ_MAGIC_LEN ? size : plain_n - HTEVZ_MAGIC_LEN);
    struct result g = read_all(plain, plain_n, piece);
    if (g.malformed > 1 || g.mem_max > MEM_BOUND)
        abort();
out:
    free(plain);
    free(z.p);
    return 0;
}
