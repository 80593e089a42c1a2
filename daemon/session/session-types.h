/* The session layer's public types (session.h): states, triggers,
 * snapshots, subscriptions, the hooks and the set the server holds. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_TYPES_H
#define SESSION_TYPES_H

#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct cJSON;
struct ht_config;
struct mem_budget;
struct qworker;
struct session;

enum session_state { SESSION_LOADING, SESSION_RUNNING, SESSION_STOPPED, SESSION_ENDED };

enum trigger_metric { TRIG_PRIVATE_BYTES, TRIG_OUTSTANDING, TRIG_COMMITTED, TRIG_DURATION };

struct trigger {
    char text[64];
    int snapshot; /* 0: stop-when, 1: snapshot-when */
    int metric;
    uint64_t threshold;
    uint64_t every; /* snapshot-when: fire again each time the value grows by this */
    uint64_t next;  /* value at which it fires next; UINT64_MAX = done */
    uint32_t fired;
    uint64_t steps; /* snapshot-when: steps crossed (a jump crosses several in one snapshot) */
    uint64_t first_t, last_t; /* session times of the first and last firing */
};

#define SESSION_MAX_TRIGGERS 16
#define SESSION_BATCH 256

struct snapshot {
    uint32_t seq;
    uint64_t t;
    char reason[96];
    struct cJSON *data; /* stacks + commits + counters at that time */
    uint64_t bytes;     /* its estimated size, charged to the session's budget */
};

/* A subscription to a session (record, top), implemented on the server side:
 * the session calls these instead of writing protocol frames itself. */
struct session_sub;
struct session_sub_ops {
    /* Events just applied (NULL: the subscriber does not take the stream). */
    void (*events)(struct session_sub *sub, const struct ht_event *evs, size_t n);
    /* The session stopped or is dropped: sub was taken off the list (sub->s
     * still names the session for the call). */
    void (*ended)(struct session_sub *sub, const char *why);
    /* Raw source records (record --raw): complete lines, lost lines before
     * them (NULL: the subscriber does not take them). */
    void (*raw)(struct session_sub *sub, const char *buf, size_t n, uint64_t lines, uint64_t lost);
};
struct session_sub {
    const struct session_sub_ops *ops;
    struct session_sub *next;
    struct session *s; /* NULL while not subscribed */
};

/* What the session layer hears from the server, which registers it. */
struct session_hooks {
    /* A snapshot seq of s was taken: query its stacks and commits (top
     * rows), and hand them to session_snapshot_done. 0 when under way,
     * HT_ENOMEM (logged here), or another error (no stacks). */
    int (*snapshot_query)(struct session *s, uint32_t seq, uint32_t top);
};

/* The daemon's sessions and what they share (the server holds one). */
struct session_set {
    uv_loop_t *loop;
    const struct ht_config *cfg;
    struct mem_budget *mem; /* daemon-wide budget: sessions charge it */
    const struct session_hooks *hooks;
    /* Patterns of the default cull list a query uses (its request's room). */
    unsigned cull_max;
    struct session *head;
    uint32_t n, next_id;
    int stopping;       /* no query is taken any more */
    struct qworker *qw; /* query workers (qworker.h), started with the first query */
    /* Test builds: HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS holds the symbolizer
     * lock that long more at the first frame a query worker resolves for
     * each session (a first symbol table load, slow under the sanitizers);
     * loop_thread tells the workers from the loop. */
    uint64_t test_sym_delay_ms;
    uv_thread_t loop_thread;
};

#endif
