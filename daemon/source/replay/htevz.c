/* zstd framing of .htevb (htevz.h): a writer in frames, a reader in fixed buffers. */
#include "htevz.h"

#include "ht-alloc.h"
#include "mem-acct.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

int htevz_writer_init(struct htevz_writer *z, int level, htevb_out_fn out, void *arg)
{
    memset(z, 0, sizeof(*z));
    z->out = out;
    z->arg = arg;
    z->frame_bytes = HTEVZ_FRAME_BYTES;
    z->obuf_cap = ZSTD_CStreamOutSize();
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    z->cctx = cctx;
    z->stage = ht_malloc(HTEVZ_STAGE);
    z->obuf = ht_malloc(z->obuf_cap);
    if (!cctx || !z->stage || !z->obuf)
        goto fail;
    /* The window is capped at one frame: a frame never refers back past its
     * start anyway, and readers then need 1 MiB, whatever the level picks.
     * The checksum (4 bytes a frame) tells a corrupted frame from a good one. */
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, HTEVZ_WINDOW_LOG)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)))
        goto fail;
    return 0;
fail:
    ZSTD_freeCCtx(cctx);
    ht_free(z->stage);
    ht_free(z->obuf);
    memset(z, 0, sizeof(*z));
    return -1;
}

/* Compress the staged bytes; ZSTD_e_end also closes the frame. */
static int compress_stage(struct htevz_writer *z, ZSTD_EndDirective mode)
{
    if (z->failed)
        return -1;
    ZSTD_inBuffer in = {z->stage, z->stage_len, 0};
    for (;;) {
        ZSTD_outBuffer o = {z->obuf, z->obuf_cap, 0};
        size_t left = ZSTD_compressStream2(z->cctx, &o, &in, mode);
        if (ZSTD_isError(left)) {
            z->failed = 1;
            return -1;
        }
        if (o.pos > 0) {
            z->out(z->arg, z->obuf, o.pos);
            z->bytes_out += o.pos;
        }
        /* e_continue is done once the input is taken; e_end once flushed. */
        if (mode == ZSTD_e_continue ? in.pos == in.size : left == 0)
            break;
    }
    z->frame_in += z->stage_len;
    z->stage_len = 0;
    if (mode == ZSTD_e_end) {
        z->frame_in = 0;
        z->frames++;
    }
    return 0;
}

void htevz_write(void *arg, const void *buf, size_t n)
{
    struct htevz_writer *z = arg;
    const unsigned char *p = buf;
    z->bytes_in += n;
    while (n > 0 && !z->failed) {
        /* Fill the stage, but never past the frame's end. */
        size_t room = HTEVZ_STAGE - z->stage_len;
        uint64_t frame_room = z->frame_bytes - z->frame_in - z->stage_len;
        if (room > frame_room)
            room = (size_t)frame_room;
        size_t take = n < room ? n : room;
        memcpy(z->stage + z->stage_len, p, take);
        z->stage_len += take;
        p += take;
        n -= take;
        if (z->frame_in + z->stage_len == z->frame_bytes)
            compress_stage(z, ZSTD_e_end);
        else if (z->stage_len == HTEVZ_STAGE)
            compress_stage(z, ZSTD_e_continue);
    }
}

int htevz_flush(struct htevz_writer *z)
{
    if (z->stage_len == 0 && z->frame_in == 0)
        return z->failed ? -1 : 0; /* no frame open: no empty frame either */
    return compress_stage(z, ZSTD_e_end);
}

int htevz_writer_close(struct htevz_writer *z)
{
    int rc = z->cctx ? htevz_flush(z) : -1;
    ZSTD_freeCCtx(z->cctx);
    ht_free(z->stage);
    ht_free(z->obuf);
    memset(z, 0, sizeof(*z));
    return rc;
}

/* Reader. */

static void reader_fail(struct htevz_reader *r, const char *why)
{
    r->broken = 1;
    if (r->streaming)
        snprintf(r->err, sizeof(r->err),
                 "compressed stream: %s (frame %llu, over %u KiB: its first %llu bytes were "
                 "applied)",
                 why, (unsigned long long)r->frames + 1, HTEVZ_HOLD_MAX >> 10,
                 (unsigned long long)(r->frame_out - r->hold_len));
    else
        snprintf(r->err, sizeof(r->err), "compressed stream: %s (frame %llu: none of it applied)",
                 why, (unsigned long long)r->frames + 1);
    r->hold_len = 0; /* the held part of a broken frame is never used */
}

/* Keep the charge equal to what the reader holds: the context grows to the
 * window a frame asks for (at most 2^HTEVZ_WINDOW_LOG_MAX). */
static int recharge(struct htevz_reader *r)
{
    uint64_t now = htevz_reader_mem(r);
    if (now > r->charged) {
        if (mem_acct_charge(r->acct, MEM_decoder_buffers, now - r->charged) != 0)
            return -1;
    } else if (now < r->charged) {
        mem_acct_discharge(r->acct, MEM_decoder_buffers, r->charged - now);
    }
    r->charged = now;
    return 0;
}

int htevz_reader_init(struct htevz_reader *r, struct mem_acct *acct)
{
    memset(r, 0, sizeof(*r));
    r->acct = acct;
    r->obuf_cap = ZSTD_DStreamOutSize();
    ZSTD_DCtx *d = ZSTD_createDCtx();
    r->dctx = d;
    r->obuf = ht_malloc(r->obuf_cap);
    if (!d || !r->obuf ||
        ZSTD_isError(ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, HTEVZ_WINDOW_LOG_MAX)) ||
        recharge(r) != 0) {
        htevz_reader_close(r);
        return -1;
    }
    return 0;
}

void htevz_reader_close(struct htevz_reader *r)
{
    if (r->charged)
        mem_acct_discharge(r->acct, MEM_decoder_buffers, r->charged);
    ZSTD_freeDCtx(r->dctx);
    ht_free(r->obuf);
    ht_free(r->hold);
    memset(r, 0, sizeof(*r));
}

size_t htevz_reader_mem(const struct htevz_reader *r)
{
    return (r->dctx ? ZSTD_sizeof_DCtx(r->dctx) : 0) + (r->obuf ? r->obuf_cap : 0) + r->hold_cap;
}

/* Room for n more bytes in the hold (charged first): 0, or -1 when the hold
 * is full, out of memory or over the budget (the frame then streams). */
static int hold_room(struct htevz_reader *r, size_t n)
{
    if (r->hold_len + n <= r->hold_cap)
        return 0;
    if (r->hold_len + n > HTEVZ_HOLD_MAX)
        return -1;
    size_t cap = r->hold_cap ? r->hold_cap : (64u << 10);
    while (cap < r->hold_len + n)
        cap *= 2;
    if (cap > HTEVZ_HOLD_MAX)
        cap = HTEVZ_HOLD_MAX;
    /* Not counted when refused: the frame streams, nothing is lost (a
     * refusal counted as a budget drop said a load lost data that had all
     * its events). */
    if (mem_acct_charge_optional(r->acct, MEM_decoder_buffers, cap - r->hold_cap,
                                 HTEVZ_HOLD_RESERVE) != 0)
        return -1;
    unsigned char *nb = ht_realloc(r->hold, cap);
    if (!nb) {
        mem_acct_discharge(r->acct, MEM_decoder_buffers, cap - r->hold_cap);
        return -1;
    }
    r->charged += cap - r->hold_cap;
    r->hold = nb;
    r->hold_cap = cap;
    return 0;
}

/* Decoded bytes of the open frame: held, or passed on once it streams. */
static void frame_bytes_out(struct htevz_reader *r, const unsigned char *p, size_t n,
                            htevz_plain_fn fn, void *arg)
{
    r->frame_out += n;
    if (!r->streaming && hold_room(r, n) == 0) {
        memcpy(r->hold + r->hold_len, p, n);
        r->hold_len += n;
        return;
    }
    if (!r->streaming) { /* outgrew the hold: what it has goes first */
        r->streaming = 1;
        r->frames_streamed++;
        if (r->hold_len)
            fn(arg, r->hold, r->hold_len);
        r->hold_len = 0;
    }
    fn(arg, p, n);
}

void htevz_feed(struct htevz_reader *r, const unsigned char *buf, size_t n, htevz_plain_fn fn,
                void *arg)
{
    ZSTD_inBuffer in = {buf, n, 0};
    while (!r->broken) {
        if (r->cancel && atomic_load_explicit(r->cancel, memory_order_relaxed))
            return;
        size_t in_before = in.pos;
        ZSTD_outBuffer o = {r->obuf, r->obuf_cap, 0};
        size_t ret = ZSTD_decompressStream(r->dctx, &o, &in);
        if (ZSTD_isError(ret)) {
            if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge) {
                r->too_large = 1;
                reader_fail(r, "a frame asks for a window over 8 MiB (refused)");
            } else {
                reader_fail(r, ZSTD_getErrorName(ret));
            }
            return;
        }
        if (recharge(r) != 0) {
            reader_fail(r, "its window does not fit the memory budget");
            return;
        }
        if (o.pos > 0) {
            r->bytes_out += o.pos;
            frame_bytes_out(r, r->obuf, o.pos, fn, arg);
        }
        /* 0: a frame is complete, flushed and its checksum matched; the next
         * byte starts another. A call that took no byte (flushing only) says
         * nothing new. */
        if (ret == 0) {
            if (r->hold_len)
                fn(arg, r->hold, r->hold_len);
            r->hold_len = 0;
            r->streaming = 0;
            r->frame_out = 0;
            r->frames++;
            r->in_frame = 0;
        } else if (in.pos > in_before) {
            r->in_frame = 1;
        }
        /* Done when the input is taken and the output buffer was not filled
         * (a full one may mean more is waiting inside the context). */
        if (in.pos == in.size && o.pos < o.size)
            break;
    }
}

int htevz_finish(struct htevz_reader *r)
{
    if (r->in_frame && !r->broken) {
        reader_fail(r, "it ends inside a frame");
        return -1;
    }
    return 0;
}
