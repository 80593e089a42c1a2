/*
 * The machine's ETW sessions shared by every heaptrace session (issue 12;
 * docs/windows.md): Windows allows one heap logger, so the heap
 * logger's PID list is the union of the targets of every `start --pid`, and
 * one system-logger session serves every session's VirtualAlloc. The hub
 * keeps the subscribers (one per heaptrace session), decides when a session
 * starts, restarts or stops, and routes each record to the subscriber of its
 * process: a heap event by its header's process, a StackWalk by its
 * StackProcess, a VirtualAlloc/Image/Process event by the process in its
 * payload; Lost_Event records go to every subscriber of that session.
 * Portable (no windows.h): the sessions themselves are the backend's
 * (etw-logger-win.c); the tests drive the hub with a backend of their own.
 *
 * Restarts: a target not in the running heap logger's list restarts it with
 * the union (the PID list is fixed at StartTrace: updating it in a running
 * session is not a path we have seen work). Between the stop and the start the other
 * targets' heap events are lost: every other heap subscriber's `restarts`
 * counts it and attach says so. A subscriber that leaves does not restart
 * the logger: its process's records are dropped as `unrouted` until the
 * last subscriber leaves and the sessions stop.
 *
 * --exe (a subscriber with pid 0): the heap logger for PID 0 with IFEO
 * TracingFlags; it takes every heap record of a process no --pid subscriber
 * has, and cannot share the logger with --pid subscribers (whether a PID list
 * {0, N} works is not known): either kind while the other runs gets EFULL.
 *
 * Threads: attach/detach on the loop; etw_hub_record on the backend's
 * consumer threads. Decoding and routing run under the hub's mutex, which
 * never waits for anything else; the record then goes to its subscriber
 * outside it (deliver), so a subscriber whose ring is full holds up only
 * its own records, and the loop taking the mutex (attach, detach, stats)
 * never waits for a consumer that waits for the loop. attach/detach call
 * the backend without the mutex (a restart joins a consumer thread).
 */
#ifndef ETW_HUB_H
#define ETW_HUB_H

#include "etw-decode.h"
#include "etw-stacks.h"

#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <uv.h>

enum { ETW_HUB_HEAP = 0, ETW_HUB_KERNEL = 1 };

#define ETW_HUB_MAX_SUBS 64

/* The sessions, as the platform runs them. Each returns 0 or an error with
 * why in err; stop is idempotent. heap_start is called with the logger
 * stopped (the hub stops it first to restart). Called on the loop, without
 * the hub's mutex. */
struct etw_hub_backend {
    void *arg;
    int (*heap_start)(void *arg, const uint32_t *pids, unsigned npids, int stacks, char *err,
                      size_t errsz);
    void (*heap_stop)(void *arg);
    int (*kernel_start)(void *arg, int stacks, char *err, size_t errsz);
    void (*kernel_stop)(void *arg);
};

/* One heaptrace session's place in the hub (embedded in its source). The
 * owner fills the fields above the line before attach. */
struct etw_hub_sub {
    uint32_t pid;   /* the target; 0: --exe (every traced process, follow_first) */
    int heap, virt; /* which sessions it wants (virt needs a pid) */
    int stacks;     /* stack walks on */
    /* A record routed here, on a consumer thread, outside the hub's mutex
     * (the subscriber may block in it: its event ring full): d is its
     * decoding, NULL when it decoded to nothing (a Lost_Event record, an
     * opcode we do not use, a malformed payload). Calls for one subscriber
     * may come from both consumer threads at once: the subscriber
     * serialises them. */
    void (*deliver)(void *arg, int session, const struct etw_record *r,
                    const struct etw_decoded *d);
    /* Under the hub's mutex: the session this subscriber takes from ended
     * (ProcessTrace returned: an error, or stopped from outside). Must not
     * block. */
    void (*session_ended)(void *arg, int session, const char *why);
    void *arg;
    /* ---- the hub's ---- */
    int attached;
    atomic_int inflight;             /* deliver calls running (detached: waits for 0) */
    atomic_uint_fast64_t records;    /* routed here */
    atomic_uint_fast64_t lost_records; /* Lost_Event records of its sessions */
    atomic_uint_fast64_t restarts;   /* heap logger restarts while attached (each a gap) */
};

struct etw_hub_stats {
    uint64_t records;      /* every record the consumers delivered */
    uint64_t unrouted;     /* of a process no subscriber has */
    uint64_t heap_starts, heap_restarts, kernel_starts;
    uint32_t heap_pids[ETW_HUB_MAX_SUBS]; /* the running heap logger's list */
    unsigned nheap_pids;
    int heap_running, kernel_running, exe_mode;
    struct etw_decode_stats dec;
};

struct etw_hub;

int etw_hub_new(struct etw_hub **out, const struct etw_hub_backend *be);
/* Stops whatever still runs. */
void etw_hub_free(struct etw_hub *h);

/* Join: starts the sessions sub needs, or restarts the heap logger with
 * sub's pid added (*restarted = 1: other subscribers lost heap events).
 * 0, HT_EFULL (--exe against --pid, or ETW_HUB_MAX_SUBS), HT_EEXIST (a
 * subscriber has that pid already), or the backend's error (nothing
 * changed for the others, unless a restart failed: then the heap logger
 * runs with the old list again, or, if that fails too, not at all and every
 * heap subscriber is told through session_ended). */
int etw_hub_attach(struct etw_hub *h, struct etw_hub_sub *sub, int *restarted, char *err,
                   size_t errsz);
/* Leave: nothing more is routed to sub after it returns, but a deliver
 * call that began before may still run (etw_hub_quiesce waits for it); the
 * last one out stops the sessions. */
void etw_hub_detach(struct etw_hub *h, struct etw_hub_sub *sub);
/* Wait (any thread) until no deliver call runs for a detached sub. */
void etw_hub_quiesce(struct etw_hub_sub *sub);
/* Number of subscribers. */
unsigned etw_hub_count(struct etw_hub *h);

/* A record from session's consumer thread (ETW_HUB_HEAP or ETW_HUB_KERNEL). */
void etw_hub_record(struct etw_hub *h, int session, const struct etw_record *r);
/* session's consumer returned (error, or stopped from outside): its
 * subscribers are told, under the mutex. */
void etw_hub_session_ended(struct etw_hub *h, int session, const char *why);

void etw_hub_stats(struct etw_hub *h, struct etw_hub_stats *st);

#endif
