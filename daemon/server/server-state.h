/* heaptraced's server state: the loop, the listener, the lists of clients
 * and sessions, the daemon-wide limits, budget and counters. Read by the
 * commands and the client's output side; server.h has what starts and
 * stops it (server.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SERVER_STATE_H
#define SERVER_STATE_H

#include "config.h"
#include "mem-acct.h"
#include "session.h"

#include <stdint.h>
#include <uv.h>

struct client;
struct endpoint;
struct stop_watch;

struct server {
    uv_loop_t *loop;
    struct ht_config *cfg;
    struct endpoint *ep;     /* listening (endpoint.h), NULL otherwise */
    struct stop_watch *stop; /* stop requests (sys/stop.h) while listening, NULL otherwise */
    uv_timer_t tick;
    uv_timer_t idle; /* closes clients idle past cfg->client_idle_ns */
    int stopping;
    struct client *clients;
    uint32_t nclients;
    uint64_t next_client_id;
    struct session_set sessions; /* the session layer (session.h) */
    uint64_t clients_refused, clients_dropped_slow, requests, request_errors;
    /* Connection limits (each refusal under its own name; clients_refused is EPERM). */
    uint64_t clients_refused_full, clients_refused_uid, clients_refused_nofd, accept_errors,
        clients_idle_closed;
    /* Clients closed for making no progress with replies unread (server.c
     * client_stalled), the reply bytes they were not sent, and the requests
     * read from them that were never answered. */
    uint64_t clients_closed_stalled, stalled_unread_bytes, stalled_requests;
    /* A connection that came while no client could be allocated is accepted
     * into this spare handle and closed (libuv stops watching a listener whose
     * waiting connection is never accepted: the daemon would go deaf). */
    uv_pipe_t nomem_pipe;
    int nomem_pipe_busy, nomem_waiting;
    uint64_t clients_refused_nomem;
    /* Test builds: HEAPTRACED_TEST_FAIL_CLIENTS makes so many client_new calls
     * fail (always 0 in a Release build; unconditional here so every file
     * including this header sees one layout). */
    uint64_t test_fail_clients;
    uint64_t out_queued;                   /* every client's unread output bytes */
    uint64_t clients_dropped_output_total; /* dropped at cfg->output_cap_total */
    uint64_t top_frames_skipped; /* top refreshes not sent: the client had not read the last */
    uint64_t top_frames_failed;  /* top refreshes not sent: out of memory making them */
    uint64_t pprof_refused;      /* pprof profiles refused past pprof_max_bytes (export and HTTP) */
    /* The HTTP listener's counters (daemon/http/http.c; all 0 while it is off). */
    struct {
        uint64_t requests, refused_full, bad, too_large, idle_closed, not_found, bad_method,
            unavailable;
        uint64_t refused_nofd;   /* connections closed for want of descriptors (http.c) */
        uint64_t kept_alive;     /* connections kept for another request after an answer */
        uint64_t metrics_reused; /* scrapes answered with the last exposition (routes.c) */
        uint64_t profiles;       /* pprof profiles answered (route-pprof.c) */
        uint64_t profiles_cut;   /* of them, the top of more stacks than they kept */
        uint64_t gone_pending;   /* connections closed while their profile was being made */
        uint64_t hold_max_ns; /* longest a request held the loop: parsed, routed, answer queued */
        uint32_t conns;
    } http;
    /* The metrics' top allocation sites per session (metrics.c), and its
     * refreshes refused or failed. */
    struct metrics_sites *sites;
    uint64_t sites_refresh_failed;
    struct mem_budget mem; /* daemon-wide budget: sessions charge it, queued output counts in it */
    /* The output side (client.c) calls back into the server (server.c): a
     * client to close (a failed write, a cap passed), and output that moved
     * on (held requests go on, a client done closes). Set by server_init. */
    void (*close_client)(struct client *c);
    void (*output_moved)(struct client *c);
    /* The input side (server.c), for the load stream (cmd-load.c), which
     * the server feeds and which hands the connection back: feed bytes read
     * (requests again), stop and restart reading. */
    void (*feed_client)(struct client *c, const char *buf, size_t n);
    void (*pause_client)(struct client *c);
    void (*resume_client)(struct client *c);
    /* Called by server_stop, for what the daemon started beside the server
     * (the HTTP listener); NULL for none. */
    void (*stop_hook)(void *arg);
    void *stop_hook_arg;
    /* server_stop, for the shutdown command (which the server dispatches). */
    void (*stop_server)(struct server *srv);
};

#endif
