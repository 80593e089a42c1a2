/* struct session, read by the files of daemon/session/ only: everything
 * else goes through the functions of session.h. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_INT_H
#define SESSION_INT_H

#include "engine.h"
#include "modnames.h"
#include "query.h"
#include "source.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct cJSON;
struct ht_config;
struct mem_budget;
struct qjob;
struct qworker;
struct session;

#include "session-types.h"

struct session {
    struct session_set *set;
    struct session *next;
    uint32_t id;
    /* The uid of the client that made it (a spawned session: its parent's):
     * only it and root see the session and act on it (session_visible). */
    uint32_t owner;
    char name[64];
    enum session_state state;
    char stop_reason[128];
    const char *source; /* the source's name ("replay", "bpf") */
    int64_t wall_start; /* unix seconds when the session started */
    char process_name[256];
    char stream_wall[64];
    struct engine eng;
    struct skip_cache default_skip; /* default cull list, per stack (query.h) */
    uint32_t warmed;                /* stacks below this id are in default_skip */
    /* The session's source (source.h): drained on the loop by drain_idle, a
     * budget per iteration. Once it is over (ended, or the session stopped)
     * a source without a symbolizer is closed and src is NULL; one with a
     * symbolizer stays for the replies' frames until the session is dropped. */
    struct source *src;
    int src_over;               /* the source ended or was stopped, and that was handled */
    int finishing; /* stopped: the source still delivers what it had taken (source.h finish) */
    uv_idle_t *drain_idle;      /* runs while the source has records to drain */
    struct source_stats ingest; /* what the input held (refreshed from the source) */
    /* The source's own status (status_json) as it was when the source was
     * over and closed, so status keeps showing it; NULL otherwise. */
    struct cJSON *src_status_last;
    uint64_t input_dropped;     /* stream bytes that found no room (never expected) */
    char end_reason[128];       /* why the input ended, while the source still drains */
    /* Set by the command that owns the session's input (load): called after
     * each drain, and once when the source is over. */
    void (*on_drained)(struct session *s);
    void (*on_source_end)(struct session *s);
    /* Called first thing when the session is dropped (the loader is told). */
    void (*on_dropped)(struct session *s);
    struct trigger triggers[SESSION_MAX_TRIGGERS];
    unsigned ntriggers;
    struct snapshot *snaps; /* ring of cfg.max_snapshots */
    uint32_t nsnaps, snap_seq;
    uint64_t snaps_dropped;
    uint64_t snaps_over_budget; /* snapshots not kept: the byte budget was reached */
    struct mem_budget mem;      /* this session's bytes, under the daemon's budget */
    void *loader;               /* load: the connection sending the stream (opaque here) */
    struct session_sub *subs;   /* record and top subscriptions */
    uint32_t nrecorders;        /* subscribers that take the event stream */
    uint32_t nraw;              /* subscribers that take the source's raw records */
    uint64_t recorded_events, recorder_drops;
    /* Events left out of recordings that fell behind, reported as "lost" gaps. */
    uint64_t recorder_lost;
    /* Queries (qjob.h): waiting in order, and the one whose view is open. */
    struct qjob *q_head, *q_tail;
    uint32_t q_waiting;
    struct qjob *q_running;
    uint32_t snap_pending; /* snapshots whose stacks are still being queried */
    struct {
        uint64_t run, rejected, failed;
        uint64_t hold_max_ns;   /* longest loop hold: view open + close + answer */
        uint64_t worker_max_ns; /* longest query on a worker, and all of them */
        uint64_t worker_total_ns;
    } qs;
    int dropped; /* off the list, freed once q_running returns (session_free_dropped) */
    /* The source's symbolizer (source.h symbolize, sym_sync) is used by the
     * loop (replies, recorders) and by the query workers (frame names for
     * cull and require patterns, rows): one at a time. The drain, stats and
     * status never wait for it (the drain takes it only when it is free at
     * once, to apply what it queued). Recursive: a drain's recorder formats
     * frames. */
    uv_mutex_t sym_mu;
    /* Without a symbolizer (replays): frames named by the stream's module
     * events, "module!+0xOFF" (modnames.h). */
    struct modnames modnames;
    /* The parameters its live source began with (image and argv cleared):
     * the sessions it spawns (sink.spawn) take them. */
    struct source_params live_params;
    uint32_t spawned, spawn_failed;
    /* A spawned session: its parent's id (0: none). The parent's ended
     * spawned sessions dropped to free a slot for a new one. */
    uint32_t spawned_by, spawned_dropped;
    int test_sym_delayed; /* HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS done (session_set) */
    /* A recorder needs the symbolizer for the drained events' frames: while
     * a query worker holds it, the drain is put off (not waited for) until
     * the query returns; drains_put_off counts the times. */
    int drain_put_off;
    uint64_t drains_put_off;
};

#endif
