/* Replay source: turns a byte stream of .htev (from a file or the control pipe) into events. */
#ifndef REPLAY_H
#define REPLAY_H

#include "htev.h"
#include "htevb.h"
#include "htevz.h"

#include <stddef.h>
#include <stdint.h>

#define REPLAY_LINE_MAX (1u << 20) /* longer lines are malformed and skipped */
#define REPLAY_ERRORS_KEPT 16

typedef void (*replay_event_fn)(void *arg, const struct ht_event *ev);

struct etw_raw;

struct rawtap;

struct replay {
    struct htev_parser parser;
    struct htevb_reader bin; /* the binary twin, chosen by the stream's first byte */
    int binary;
    /* zstd frames around either (htevz.h), chosen by the zstd magic's first
     * byte (no .htev line or .htevb stream starts with it); the context is
     * made only then. */
    struct htevz_reader z;
    int compressed;
    /* A raw ETW record stream (etw-raw.h), chosen by its header line; its
     * records go through the ETW decoder and stack correlator. etw_bad: the
     * header did not parse, every line after it is malformed. */
    struct etw_raw *etw;
    int etw_bad;
    struct rawtap *tap; /* record --raw of a raw ETW stream (set by the owner; may be NULL) */
    uint64_t plain_bytes; /* bytes of .htev or .htevb (after decompression) */
    replay_event_fn on_event;
    void *arg;
    char *line; /* partial line carried between feeds; capped at REPLAY_LINE_MAX */
    size_t len, alloc;
    int skipping; /* inside an over-long line: drop until its newline */
    uint64_t line_no;
    uint64_t events, malformed, bytes;
    struct {
        uint64_t line;
        char msg[160];
    } errors[REPLAY_ERRORS_KEPT]; /* the first malformed lines, for the report */
    uint32_t nerrors;
    /* A feed stops early once it is set (the source is stopping): given to
     * the decompressor, where a small input can take seconds. May be NULL. */
    const _Atomic int *cancel;
};

int replay_init(struct replay *r, struct stack_intern *si, replay_event_fn fn, void *arg);
void replay_close(struct replay *r);
/* Feed bytes: .htev lines, or the binary twin when the stream starts with its
 * magic, either of them plain or in zstd frames. Complete lines/records are
 * parsed and delivered at once. Memory stays bounded by REPLAY_LINE_MAX and
 * the decompressor's cap (htevz.h) whatever the input. */
void replay_feed(struct replay *r, const char *buf, size_t n);
/* End of stream: a last line without newline is parsed; a stream that ends
 * inside a record or a compressed frame is counted malformed. */
void replay_finish(struct replay *r);

#endif
