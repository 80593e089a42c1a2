/*
 * Threaded replay source: a byte stream (.htev or its binary twin) is decoded
 * on a thread of its own and the events come back to the loop over an SPSC
 * ring (ARCHITECTURE.md "Data flow": producer threads hand fixed-size events
 * to the loop, which owns the engine).
 *
 * The decoder interns stacks into a private interner; the ring carries the
 * definitions of new strings and stacks ahead of the first event that uses
 * them, and feed_drain() re-interns them into the engine's interner on the
 * loop, so no engine data is ever touched by two threads. The decoder also
 * notes where each definition sits in the ring, so the loop hands the runs
 * of events between them to the engine where they lie, without reading each
 * record first (that read, of lines the other core wrote, was ~5% of the
 * loop's time).
 *
 * Threads: feed_write/feed_close_input/feed_drain/feed_free run on the loop
 * thread only. The ready callback runs on the loop (uv_async) whenever the
 * decoder has published events, freed input space or finished.
 */
#ifndef FEED_H
#define FEED_H

#include "ht-event.h"
#include "mem-acct.h"
#include "replay.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct feed;
struct stack_intern;

typedef void (*feed_ready_cb)(struct feed *f, void *data);
/* Events ready to apply (stack ids already the engine's). Return nonzero to
 * stop draining (the session stopped): the rest is left in the ring. */
typedef int (*feed_apply_fn)(void *arg, struct ht_event *evs, size_t n);
/* The stream's "process" line: its name and wall time (strings of the engine's interner). */
typedef void (*feed_process_fn)(void *arg, const char *name, const char *wall);

/* What the decoder has taken in so far, as struct replay counts it. */
struct feed_stats {
    uint64_t bytes, lines, events, malformed;
    /* The decoder's own memory and its private interner's drops. */
    uint64_t mem[MEM_KINDS];         /* bytes held, by structure */
    uint64_t over_budget[MEM_KINDS]; /* growths refused at a byte budget */
    uint64_t no_memory[MEM_KINDS];   /* growths refused: allocation failed or backing off */
    uint64_t alloc_failures;         /* allocator calls that failed (then backed off) */
    uint64_t stack_table_drops;      /* stacks not interned at max_stacks */
    uint64_t string_drops;           /* names not interned at max_strings */
    uint64_t long_names;             /* distinct names cut at max_name_len */
    uint32_t nerrors;
    struct {
        uint64_t line;
        char msg[160];
    } errors[REPLAY_ERRORS_KEPT];
};

struct feed_limits {
    size_t input_bytes;   /* input ring, a power of two */
    uint32_t ring_events; /* output ring, a power of two */
    uint32_t max_stacks, max_strings;
    uint32_t max_name_len; /* 0: HT_STR_MAX_LEN */
    struct mem_budget
        *budget; /* the session's: the decoder's memory is charged to it (may be NULL) */
};

/* Start a decoder thread. 0, or UV_ENOMEM / a libuv thread error. The feed is
 * freed by feed_free (which stops and joins the thread first). */
int feed_new(struct feed **out, uv_loop_t *loop, const struct feed_limits *lim,
             feed_ready_cb ready, void *data);
/* Stop the decoder (whatever it still holds is dropped), join it and free the
 * feed once its async handle is closed. */
void feed_free(struct feed *f);

/* Input bytes that fit now; feed_write copies at most that many. */
size_t feed_space(const struct feed *f);
size_t feed_write(struct feed *f, const char *buf, size_t n);
/* No more input: the decoder finishes the stream (a last line without its
 * newline is parsed, a binary record cut short is reported). */
void feed_close_input(struct feed *f);

/* Apply up to budget ring records. Returns 1 when records remain (call again
 * on a later loop iteration), 0 when the ring is empty, -1 when fn asked to stop. */
int feed_drain(struct feed *f, struct stack_intern *si, size_t budget, feed_apply_fn fn,
               feed_process_fn pfn, void *arg);
/* 1 once the input is closed, the decoder is done and every record is drained. */
int feed_finished(const struct feed *f);
/* A copy of the decoder's counters (taken under its lock). */
void feed_stats_get(struct feed *f, struct feed_stats *st);
/* Ask for the ready callback on the next loop iteration. */
void feed_kick(struct feed *f);

#endif
