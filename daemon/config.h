/* heaptraced configuration: built-in defaults, overridden by a JSON file. */
#ifndef CONFIG_H
#define CONFIG_H

#include "engine.h"
#include "frame-match.h"

#include <stdint.h>
#include <stdio.h>

enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Patterns in the default cull list (cull_list_file): every query applies
 * all of them besides its own, so they have room of their own. */
#define HT_CULL_DEFAULT_MAX 1024
/* The least client_output_cap: one reply frame (HT_FRAME_TARGET, 64 KiB);
 * below, ordinary replies cut off a client that reads (0 was accepted: the
 * daemon ran and closed every connection unanswered). */
#define CONFIG_OUTPUT_CAP_MIN (64u << 10)
/* bpf_ring_bytes: the eBPF source's kernel ring buffer (a power of two):
 * past 1 GiB it is memory locked for nothing, below 64 KiB a few stacks
 * fill it. */
#define CONFIG_BPF_RING_MIN (64u << 10)
#define CONFIG_BPF_RING_MAX (1u << 30)
#define CONFIG_BPF_RING_DEFAULT (16u << 20)
/* timeline_interval and timeline_ring: the engine takes every due sample on
 * the loop when an event arrives (take_due_samples: up to timeline_ring of
 * them per event); with 1ns and a ring of 1e8, a 30 s stream froze the loop
 * for minutes. */
#define CONFIG_TIMELINE_NS_MIN 1000000ULL
#define CONFIG_TIMELINE_RING_MAX (16u << 20)

struct ht_config {
    char endpoint[512];
    /* Windows: a group whose members may use the pipe besides the
     * administrators (endpoint.h); "" for none. */
    char pipe_operators_group[256];
    /* Windows: DbgHelp's symbol search path ("srv*C:\\symbols*https://..." or a
     * folder of .pdb files), before _NT_SYMBOL_PATH (sys/symbols.h). Linux:
     * must stay empty (separate debug files come from /usr/lib/debug). */
    char symbol_path[2048];
    /* Linux: let libdw fetch missing debug files from the debuginfod servers
     * in the daemon's DEBUGINFOD_URLS. Off (the default): the daemon drops
     * that variable at start, so no lookup ever makes a network call. */
    int debuginfod;
    int log_level;
    char log_file[512];
    char cull_list_file[512]; /* read at the end of config_load ("": the built-in list) */
    uint32_t max_sessions;
    uint32_t max_clients;
    uint64_t client_output_cap;
    uint64_t client_idle_ns;      /* a client with no complete request for this long is closed */
    uint32_t max_clients_per_uid; /* for each uid but root */
    uint32_t root_clients;        /* of max_clients, slots only root may take */
    /* Unread bytes past which a recorder's events become a "lost" gap (the
     * smaller of this and client_output_cap applies). */
    uint64_t recorder_cap;
    uint64_t output_cap_total; /* every client's unread output together */
    uint32_t max_snapshots;
    uint32_t snapshot_top;
    /* Queries of one session waiting behind its running one (query-job.h):
     * one more is refused with EFULL. */
    uint32_t max_queued_queries;
    uint64_t session_memory_budget; /* bytes one session may hold (0: no limit) */
    uint64_t daemon_memory_budget; /* bytes all sessions and queued output may hold (0: no limit) */
    uint64_t bpf_ring_bytes;       /* the eBPF source's kernel ring, per session */
    /* The HTTP listener's address (daemon/http; "HOST:PORT", "[V6]:PORT"), "" for none: off. */
    char metrics_listen[128];
    uint32_t metrics_top_sites; /* sites per session in the metrics (metrics.c) */
    uint64_t pprof_max_bytes;   /* a pprof profile's memory while made (pprof-make.h) */
    struct engine_limits limits;
    /* Default cull list: pattern texts owned here, and each parsed once. */
    char **cull;
    struct frame_pat *cull_pats;
    unsigned ncull;
};

/* The defaults of every key (config.def) and the built-in cull list. */
void config_defaults(struct ht_config *cfg);
/* Overlay a JSON config file: every key checked against config.def (an
 * unknown one, a bad value or one out of range is refused, naming it). 0, or
 * HT_EBADARG with a message in err; cfg may be partly set then. */
int config_load(struct ht_config *cfg, const char *path, char *err, size_t errsz);
/* Read a cull list (one pattern per line, '#' comments) into cfg. */
int config_load_cull_file(struct ht_config *cfg, const char *path, char *err, size_t errsz);
void config_free(struct ht_config *cfg);
int config_log_level(const char *s);
/* Every key with its type, default, range and meaning: text, or the
 * markdown of docs/configuration.md. */
void config_help(FILE *f, int markdown);

#endif
