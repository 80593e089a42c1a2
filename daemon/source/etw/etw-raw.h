/*
 * Raw ETW record streams (JSON Lines), as `heaptracectl record --raw` writes
 * them on Windows from what the sessions received, replayed on any platform
 * through the same decoder (etw-decode.h) and stack correlator
 * (etw-stacks.h). The format (issue 12, README "Raw ETW streams"):
 *   first line: {"etw_raw":1,"qpc_freq":N,"start_qpc":N} and optionally
 *               "process":{"pid":N,"name":"app.exe"} (the traced process:
 *               only its events are kept; without it every process's are)
 *   then one line per record:
 *     {"provider":"GUID","opcode":N,"version":N,"flags":N,"pid":N,"tid":N,
 *      "cpu":N,"ts":N,"payload":"HEX"}
 *   provider: the lowercase GUID of EventHeader.ProviderId; flags:
 *   EventHeader.Flags (0x40 64-bit, 0x20 32-bit); ts: the raw QPC timestamp
 *   (a number up to 2^53, or a decimal string for larger ones); cpu: the
 *   processor number; payload: UserData in hex (at most 64 KiB, ETW's
 *   largest event). Unknown providers and opcodes are counted and skipped.
 *   A line {"etw_raw_lost":N} marks N records a recording lost (record --raw
 *   fell behind): replayed as a lost event.
 */
#ifndef ETW_RAW_H
#define ETW_RAW_H

#include "etw-decode.h"
#include "etw-stacks.h"
#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>

#define ETW_RAW_PAYLOAD_MAX 65536

struct stack_intern;
struct etw_raw;

/* Events ready for the engine (stacks interned). */
typedef void (*etw_raw_event_fn)(void *arg, const struct ht_event *ev);

/* Is this first line a raw ETW stream's header? */
int etw_raw_is_header(const char *line, size_t len);
/* A parser for a stream whose header is line; frames are interned in si.
 * 0, HT_EBADJSON (a bad header, err says why) or UV_ENOMEM. */
int etw_raw_new(struct etw_raw **out, struct stack_intern *si, const char *line, size_t len,
                etw_raw_event_fn fn, void *arg, char *err, size_t errsz);
void etw_raw_free(struct etw_raw *x);
/* One record line. 1 taken, 0 blank, -1 malformed (err says why: bad JSON, a
 * field missing or out of range, a payload shorter than its layout). */
int etw_raw_line(struct etw_raw *x, const char *line, size_t len, char *err, size_t errsz);
/* End of stream: the events still waiting for a stack leave. */
void etw_raw_finish(struct etw_raw *x);

/* One record as a raw stream line with its '\n' into buf: the length, or 0
 * when cap is too small (ETW_RAW_LINE_MAX always fits). */
#define ETW_RAW_LINE_MAX (2 * ETW_RAW_PAYLOAD_MAX + 512)
size_t etw_raw_format(const struct etw_record *r, char *buf, size_t cap);
/* The header line (name may be NULL; pid 0: no "process"), or 0. */
size_t etw_raw_header(uint64_t qpc_freq, uint64_t start_qpc, uint32_t pid, const char *name,
                      char *buf, size_t cap);
/* Raw records of the stream from now on to tap (off: NULL); the header
 * goes first. Decoder thread (the replay's). */
struct rawtap;
void etw_raw_tap(struct etw_raw *x, struct rawtap *tap);
/* Tests: every record line through cJSON, not the fast path for lines in
 * etw_raw_format's exact form. */
void etw_raw_slow_only(struct etw_raw *x, int on);

struct etw_raw_stats {
    uint64_t qpc_freq, start_qpc; /* from the header */
    uint32_t pid; /* from the header, 0 if none */
    char name[256];
    struct etw_decode_stats dec;
    struct etw_corr_stats corr;
    uint64_t lost_records; /* {"etw_raw_lost":N} lines: a recording's gaps */
};
void etw_raw_stats(const struct etw_raw *x, struct etw_raw_stats *out);
/* The counters as a JSON object (the session's data quality), or NULL. */
struct cJSON *etw_raw_stats_json(const struct etw_raw_stats *st);

#endif
