/*
 * The raw record tap of a source (record --raw): while a subscriber wants
 * them, a producer thread appends complete lines (the raw ETW stream format,
 * etw-raw.h) to a bounded buffer; the loop takes them in its drain and hands
 * them to the session (source_sink.raw). A full buffer drops whole lines,
 * counted, and the taker learns how many it lost since its last take (the
 * recording marks the gap). Off, a put costs one relaxed load.
 *
 * Threads: rawtap_new/_free/_enable/_take on the loop; rawtap_on/_put on
 * any thread (one producer at a time, or several under the caller's lock).
 */
#ifndef RAWTAP_H
#define RAWTAP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct mem_acct;
struct rawtap;

#define RAWTAP_BYTES_DEFAULT (8u << 20)
#define RAWTAP_HEADER_MAX 1024 /* a longer header is put, not kept for rawtap_header */

/* cap bytes of lines at most (charged to acct, MEM_decoder_buffers, while
 * enabled); ready(arg) runs on the loop when lines wait. 0, or UV_ENOMEM. */
int rawtap_new(struct rawtap **out, uv_loop_t *loop, size_t cap, struct mem_acct *acct,
               void (*ready)(void *arg), void *arg);
/* Closes the wake-up handle; the memory goes when libuv is done with it. */
void rawtap_free(struct rawtap *t);
/* On: header (a complete line) goes first, then every put; 0, or UV_ENOMEM
 * (the buffer refused by the budget). Off: what waits is dropped, not counted. */
int rawtap_enable(struct rawtap *t, int on, const char *header, size_t hlen);
int rawtap_on(struct rawtap *t);
/* The header line the tap was turned on with (a raw subscriber who joins
 * later opens its recording with it): its length, or 0 (off, no header, or
 * more than cap). Loop only. */
size_t rawtap_header(struct rawtap *t, char *buf, size_t cap);
/* One line (with its '\n'). */
void rawtap_put(struct rawtap *t, const char *line, size_t n);
/* What waits, as one ht_malloc'd block the caller frees (*n bytes, *lines
 * lines), and the lines dropped since the last take; NULL when nothing. */
char *rawtap_take(struct rawtap *t, size_t *n, uint64_t *lines, uint64_t *lost);

/* Loop: what waits to sink->raw (source.h), and, when off, the tap off
 * after that (record --raw's last subscriber left, or the session ends). */
struct source_sink;
void rawtap_flush(struct rawtap *t, const struct source_sink *sink);
void rawtap_off(struct rawtap *t, const struct source_sink *sink);

struct rawtap_stats {
    uint64_t lines, bytes, lost; /* put, and dropped at the cap, since the start */
};
void rawtap_stats(struct rawtap *t, struct rawtap_stats *st);

#endif
