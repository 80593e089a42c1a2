/*
 * Compressed .htevb: the binary stream (htevb.h) cut into zstd frames
 * (RFC 8878). Each frame holds at most HTEVZ_FRAME_BYTES of the stream and
 * is independent of the others, so a reader needs one frame's window at
 * most, a writer that dies loses at most the frame it had open, and files
 * concatenate. The decompressed frames, end to end, are a plain .htevb
 * stream (or .htev text: the reader does not mind).
 *
 * Both sides work in fixed buffers: the writer stages HTEVZ_STAGE bytes and
 * compresses them into a buffer of ZSTD_CStreamOutSize(); the reader
 * decompresses into one of ZSTD_DStreamOutSize() and refuses any frame whose
 * header asks for a window over 2^HTEVZ_WINDOW_LOG_MAX bytes (the zstd
 * command line's -19 uses 2^23: files it made load too).
 *
 * A frame's stream reaches the parser only once the frame is complete and
 * its checksum (when it has one) matched: the reader holds up to
 * HTEVZ_HOLD_MAX bytes of it meanwhile. A corrupted or cut frame then adds
 * no event at all (before, zstd's blocks of 128 KiB were passed on as they
 * decoded and a frame failing its checksum had already been applied). A
 * frame bigger than the hold (another tool's: the zstd command line makes
 * one frame of a whole file) is passed on as it decodes, like a plain
 * stream: if it fails, what came before stays and the error says how much.
 * The hold grows with the frames it sees (64 KiB, doubling) and is charged
 * with the rest of the reader; short of memory or budget, frames stream (a
 * refusal is counted nowhere: no data is lost).
 * Only this file and htevz.c see zstd.h: the dependency stays in the replay
 * source.
 */
#ifndef HTEVZ_H
#define HTEVZ_H

#include "htevb.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct mem_acct;

/* The first four bytes of a zstd frame: 0xFD2FB528 little-endian (RFC 8878
 * section 3.1.1). */
#define HTEVZ_MAGIC "\x28\xb5\x2f\xfd"
#define HTEVZ_MAGIC_LEN 4
#define HTEVZ_FRAME_BYTES (1u << 20) /* stream bytes a frame holds at most */
#define HTEVZ_WINDOW_LOG 20          /* the writer's window: one frame */
#define HTEVZ_WINDOW_LOG_MAX 23      /* the largest window a reader accepts */
#define HTEVZ_STAGE (64u << 10)      /* writer: bytes gathered before each compress call */
#define HTEVZ_LEVEL_DEFAULT 9        /* files (ht-convert) */
#define HTEVZ_LEVEL_FAST 3           /* live recordings */
/* reader: stream bytes of a frame held until its checksum is read (the
 * writer's frame: every frame it makes is checked before use) */
#define HTEVZ_HOLD_MAX HTEVZ_FRAME_BYTES
/* The hold is taken only while a budget keeps this much free after it:
 * the HTEVB2 tables (704 KiB) and the interners' chunks come first. */
#define HTEVZ_HOLD_RESERVE ((uint64_t)2 << 20)

struct htevz_writer {
    void *cctx; /* ZSTD_CCtx */
    htevb_out_fn out;
    void *arg;
    unsigned char *stage, *obuf;
    size_t stage_len, obuf_cap;
    uint64_t frame_in;    /* stream bytes in the open frame */
    uint64_t frame_bytes; /* frame size (HTEVZ_FRAME_BYTES unless a test asks less) */
    uint64_t bytes_in, bytes_out, frames;
    int failed; /* a zstd error: nothing more is written */
};

/* level: zstd's (1..19). 0, or -1 when out of memory. */
int htevz_writer_init(struct htevz_writer *z, int level, htevb_out_fn out, void *arg);
/* An htevb_out_fn: give it to htevb_writer_init with the htevz_writer as arg. */
void htevz_write(void *z, const void *buf, size_t n);
/* End the open frame: everything written so far reaches out(). A live writer
 * calls it on a timer so a reader sees its data promptly. 0, or -1. */
int htevz_flush(struct htevz_writer *z);
/* Flush and free. 0, or -1 if some bytes could not be compressed. */
int htevz_writer_close(struct htevz_writer *z);

typedef void (*htevz_plain_fn)(void *arg, const unsigned char *buf, size_t n);

struct htevz_reader {
    void *dctx;            /* ZSTD_DCtx */
    struct mem_acct *acct; /* charged with the context and the buffer; may be NULL */
    uint64_t charged;
    unsigned char *obuf;
    size_t obuf_cap;
    unsigned char *hold; /* the open frame's stream, until its checksum */
    size_t hold_len, hold_cap;
    int streaming;            /* the open frame outgrew the hold: passed on as it decodes */
    uint64_t frame_out;       /* stream bytes of the open frame so far */
    uint64_t frames_streamed; /* frames over the hold (not checked before use) */
    int in_frame;             /* the last frame is not complete yet */
    /* Set (by another thread) to stop a feed between two output buffers: a
     * few KiB of input can decode to GiBs (a bomb of empty lines: 1 GiB
     * from 33 KB took 15 s in one feed). May be NULL. */
    const _Atomic int *cancel;
    int broken;    /* after an error nothing more is read */
    int too_large; /* a frame asked for a window over the limit */
    uint64_t frames, bytes_out;
    char err[128];
};

/* 0, or -1 when out of memory (or over acct's budget). */
int htevz_reader_init(struct htevz_reader *r, struct mem_acct *acct);
void htevz_reader_close(struct htevz_reader *r);
/* Decompress n bytes (frames may span feeds); the stream comes out through fn
 * in pieces of at most HTEVZ_HOLD_MAX bytes. An error sets broken and err.
 * Returns early, the input not all taken, once *cancel is set: the reader is
 * then only fit to be closed. */
void htevz_feed(struct htevz_reader *r, const unsigned char *buf, size_t n, htevz_plain_fn fn,
                void *arg);
/* End of input: -1 (err set) if it ended inside a frame. */
int htevz_finish(struct htevz_reader *r);
/* Bytes the reader holds now (its zstd context, output buffer and hold). */
size_t htevz_reader_mem(const struct htevz_reader *r);

#endif
