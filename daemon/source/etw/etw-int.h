/* The ETW source's insides, shared by its files (not for other users):
 * etw-source-win.c (the source ops, the loop side), etw-logger-win.c (the
 * machine's sessions and their consumers), etw-deliver-win.c (the producer
 * side), etw-kids-win.c (--exe's later processes), etw-threads-win.c (the
 * sampler and the finisher), etw-tap-win.c (record --raw) and
 * etw-status-win.c (stats and status). */
#ifndef HT_ETW_INT_H
#define HT_ETW_INT_H

#include "etw-decode.h"
#include "etw-hub.h"
#include "etw-props.h"
#include "etw-stacks.h"
#include "evring.h"
#include "mem-acct.h"
#include "modq.h"
#include "source.h"
#include "sym-snap.h"

#include <windows.h>
#include <evntrace.h>

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <uv.h>

#define HEAP_SESSION "heaptraced-heap"
#define KERNEL_SESSION "heaptraced-kernel"
#define RING_EVENTS (1u << 16)

extern const struct source_ops source_etw_ops;

/* --exe children (etw_source.kids). */
#define KIDS_MAX 64
enum { KID_PENDING = 1, KID_LIVE, KID_ENDED, KID_REFUSED, KID_STOPPED };

struct etw_source {
    struct source base;
    struct source_sink outer;
    uv_loop_t *loop;
    struct evring *ring;
    /* The symbol cache, under the session's symbolizer lock (source.h):
     * module events wait for it in q (the drain never waits for that lock);
     * sym_sync or the next symbolize applies them. Made there too, for an
     * --exe session's process once known (syms_pid). */
    struct sym_cache *syms;
    atomic_uint_fast64_t syms_pid;
    struct mem_acct sym_acct; /* the symbol cache's, under the same lock */
    struct sym_snap snap;     /* its counters, for stats without the lock */
    int snap_ready;
    struct modq q;
    struct mem_acct acct;
    uint64_t pid;
    char image[260];
    int exe_mode, stacks, no_heap, no_virtual;
    uint64_t sample_ns;
    int started, stopped, ended, ifeo_set, restarted, left;
    struct etw_hub_sub sub;
    uint64_t start_qpc;
    struct procwatch *watch;
    uv_timer_t *exit_timer; /* the target exited: the last buffers' records still come */
    uv_async_t *wake;       /* a consumer thread asks the loop to look (hub_gone) */
    uv_thread_t sampler;
    atomic_int sampler_running; /* joined once, by whoever takes it to 0 */
    HANDLE quit_event;          /* wakes the sampler */
    uv_thread_t finisher;
    int finisher_running;
    /* The producer side: the correlators, the ring's private interner,
     * evring_put. Taken by the consumers (deliver), the sampler and the
     * finisher, and briefly by the loop for the correlators' charges: never
     * held while waiting (the ring is nowait, the raw tap drops). */
    uv_mutex_t pmu;
    struct etw_corr *corr[2]; /* by session (ETW_HUB_HEAP, ETW_HUB_KERNEL) */
    uint32_t followed;        /* --exe: the process followed */
    /* What the loop reads: copied under stmu (never held while waiting). */
    uv_mutex_t stmu;
    struct etw_corr_stats cst[2];
    char reason[160];
    char name[260]; /* the target's image name */
    uint32_t followed_pub;
    atomic_int hub_gone; /* the sessions it takes ended: leave on the loop */
    atomic_int sessions_left;
    atomic_uint_fast64_t put;
    uint64_t delivered;
    struct rawtap *tap; /* record --raw */
    /* --exe: the processes of the image after the first, each a session
     * of its own (sink.spawn) taking its records from this one; a child
     * points back at its parent. Both under etw_kids_mu (never held while
     * waiting). */
    struct etw_source *parent;   /* a child while its parent routes to it */
    struct etw_source *child_of; /* a child: its parent at open (loop) */
    struct kid {
        uint32_t pid;
        struct etw_source *src; /* NULL: its session is being made, or it ended */
        int state;              /* KID_PENDING, KID_LIVE, KID_ENDED, KID_REFUSED */
    } kids[KIDS_MAX];
    unsigned nkids;
    uint32_t spawn_q[KIDS_MAX];
    unsigned nspawn_q;
    uint64_t before_session; /* records of a process before its session existed */
    uint64_t kids_overflow;  /* records of processes past KIDS_MAX */
    uint64_t spawn_failed;
    uint64_t refused_records; /* of a process whose session could not be made, or was stopped */
    int own_done;       /* its ring is done (under pmu): an --exe parent's first process exited */
    int exited;         /* its target exited (loop) */
    uint64_t after_end; /* records of its process after its ring ended (under pmu) */
};

/* ---- etw-logger-win.c: the machine's sessions (loop) ---- */

extern struct etw_hub *etw_machine_hub; /* while any session of this daemon traces */
extern uint64_t etw_qpc_freq;
extern struct etw_dosmap etw_drive_map; /* built when the hub starts, read by the consumers */
extern const struct etw_guid etw_kernel_logger_guid;

/* A session's own counters (ControlTraceW QUERY: EVENT_TRACE_PROPERTIES):
 * events ETW could not log (all buffers full), buffers written, and
 * buffers it could not deliver to us (a slow consumer). */
struct etw_logger_counters {
    uint64_t events_lost, buffers_written, log_buffers_lost, realtime_buffers_lost, buffers;
};
/* 0, or -1 when the session does not run. */
int etw_logger_query(const char *name, const struct etw_guid *guid,
                     struct etw_logger_counters *out);
/* The hub for a first session; 0 or a negative code with err set. */
int etw_machine_open(char *err, size_t errsz);
/* The last session left: the hub goes, the machine's heap logger is free. */
void etw_machine_close_if_idle(void);
/* source_ops.recover. */
int etw_recover(char *msg, size_t msgsz);

/* ---- etw-deliver-win.c: the producer side (consumer threads) ---- */

void etw_emit_cb(void *arg, const struct ht_event *ev, const uint64_t *frames, unsigned depth);
void etw_take_record(struct etw_source *s, int session, const struct etw_record *r,
                     const struct etw_decoded *d);
void etw_deliver_cb(void *arg, int session, const struct etw_record *r,
                    const struct etw_decoded *d);
void etw_session_ended_cb(void *arg, int session, const char *why);
int etw_corr_make(struct etw_source *s, int which);

/* ---- etw-kids-win.c: --exe's later processes ---- */

extern uv_mutex_t etw_kids_mu; /* etw_source.kids of every source, and parent */
void etw_kids_setup(void);
void etw_kid_take(struct etw_source *k, int session, const struct etw_record *r,
                  const struct etw_decoded *d);
void etw_to_kid(struct etw_source *s, uint32_t pid, int session, const struct etw_record *r,
                const struct etw_decoded *d);
void etw_wake_cb(uv_async_t *a);
int etw_child_start(struct etw_source *s, char *err, size_t errsz);

/* ---- etw-threads-win.c: the sampler and the finisher ---- */

void etw_sampler_main(void *arg);
void etw_sampler_join(struct etw_source *s);
void etw_finish_ring(struct etw_source *s);

/* ---- etw-source-win.c, etw-tap-win.c, etw-status-win.c ---- */

void etw_announce_process(struct etw_source *s);
void etw_tap_ready(void *arg);
int etw_src_raw_tap(struct source *base, int on, char *err, size_t errsz);
size_t etw_src_raw_join(struct source *base, char *buf, size_t cap);
void etw_stats(struct source *base, struct source_stats *st);
cJSON *etw_status_json(struct source *base);

#endif
