/* .etl records into heaptrace events through the same ETW decoder (etw-decode.h) and stack
 * correlator (etw-stacks.h) as the live Windows source and raw-record streams (etw-raw.h). */
#ifndef ETL_EVENTS_H
#define ETL_EVENTS_H

#include "etl-keys.h"
#include "etl-read.h"
#include "etw-decode.h"
#include "etw-stacks.h"
#include "ht-event.h"

struct stack_intern;
struct etl_events;

/* Events ready for the engine (stacks interned in si). */
typedef void (*etl_event_fn)(void *arg, const struct ht_event *ev);

/* Events of process pid of a file whose header is h; pid 0: the first process whose heap
 * event comes (one session never mixes two processes' addresses). 0, or UV_ENOMEM. */
int etl_events_new(struct etl_events **out, struct stack_intern *si, const struct etl_header *h,
                   uint32_t pid, etl_event_fn fn, void *arg);
void etl_events_free(struct etl_events *x);
/* Only the records of times in [from, to): one of several processes that had the traced pid
 * in the file (Windows reuses process ids; the ctl's etl-procs.c tells them apart). */
void etl_events_window(struct etl_events *x, uint64_t from, uint64_t to);
/* The bounds of the stack-key references waiting for their definitions, and of the events
 * waiting with them (etl-keys.h; NULL: defaults). Before the first record. 0, or UV_ENOMEM. */
int etl_events_limits(struct etl_events *x, const struct etl_keys_limits *lim);
/* An etl_record_fn: arg is the etl_events. */
void etl_events_record(void *arg, const struct etl_record *r);
/* The whole file in one pass: the records through etl_events_record, then
 * etl_events_finish. 0, or a negative code. */
int etl_events_run(struct etl_events *x, struct etl_reader *rd);
/* End of the file: the header's EventsLost as a lost event, then the events still waiting
 * for a stack (or a stack key's definition) leave. */
void etl_events_finish(struct etl_events *x);
/* The record as the ETW consumer would have delivered it: 1, or 0 when a kernel record's
 * group has no provider the decoder knows (counted by the decoder as unknown). */
int etl_to_etw(const struct etl_record *r, struct etw_record *out);

struct etl_events_stats {
    struct etw_decode_stats dec;
    struct etw_corr_stats corr;
    uint64_t malformed;        /* payloads shorter than their layout */
    uint64_t key_refs;         /* stack-key references (0x1825/0x1826) */
    uint64_t outside_window;   /* records outside etl_events_window's times */
    uint64_t key_waited;       /* of the traced process's, waited for a later definition */
    uint64_t key_unresolved;   /* no definition of their key in the whole file */
    uint64_t key_dropped;      /* gave up waiting (the bound of etl_events_limits): their
                                * events left without their stacks */
    uint64_t key_evicted;      /* resolved, pushed out before their event took the stack */
    uint64_t key_defs_dropped; /* definitions of new keys past the keys cap (etl-keys.h) */
    uint64_t key_waiting_max;  /* the most references waiting at once */
    uint64_t waiting_max;      /* the most events waiting at once (behind a reference) */
    char name[256];            /* the traced process's image name, from its Process event */
};
void etl_events_stats(const struct etl_events *x, struct etl_events_stats *out);

#endif
