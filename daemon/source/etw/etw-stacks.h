/*
 * From decoded ETW records to heaptrace events: filtering by process, the
 * heap and VirtualAlloc semantics of the outstanding tables, and the
 * correlation of StackWalk events with the events they belong to (the
 * rule PerfView's TraceLog uses, etw-stacks.c). Portable (no windows.h).
 *
 * A StackWalk event carries the raw timestamp of its event and its thread; it
 * normally follows its event (the walk runs inside the logging call), but
 * either order is accepted. Events of the kinds that get stacks wait in
 * arrival order until their stack comes, for at most ttl of stream time
 * from their arrival and max_pending events, so the events leave in the
 * order they came (a free never overtakes its alloc). Stacks that find no
 * event wait in a small table for ttl too. A stack of only kernel frames
 * waits for the user fragment with the same timestamp (a walk that crosses
 * into user mode is logged as two StackWalk events); kernel
 * frames are dropped from what is kept (counted), user frames are kept
 * innermost first.
 */
#ifndef ETW_STACKS_H
#define ETW_STACKS_H

#include "etw-decode.h"
#include "ht-event.h"

#include <stdint.h>

#define ETW_MAX_FRAMES 192 /* ETW_STACK_SW_ARRAY_SIZE: deeper stacks arrive truncated */

/* Kinds that get stack walks (bits 1 << enum etw_kind). The live sessions ask
 * for HeapAlloc, HeapReAlloc and VirtualAlloc (etw-logger-win.c). */
#define ETW_STACK_KINDS_DEFAULT                                                                    \
    ((1u << ETW_HEAP_ALLOC) | (1u << ETW_HEAP_REALLOC) | (1u << ETW_VIRTUAL_ALLOC))

struct mem_acct;

/* A module path (UTF-8, the payload's NT device path) to a string id of the
 * emitter's interner, 0 when it could not be kept. The caller may rewrite
 * the path first (the live source maps \Device\HarddiskVolumeN to C:). */
typedef uint32_t (*etw_path_fn)(void *arg, const char *path);
/* The traced process is known: its Start or rundown event (name = its image
 * file name), or, following the first process, its first heap event (name
 * ""). */
typedef void (*etw_process_fn)(void *arg, uint32_t pid, const char *name);

struct etw_corr_config {
    struct mem_acct *acct; /* charged under MEM_decoder_buffers (may be NULL) */
    uint32_t pid;          /* the traced process (0: every process) */
    uint64_t qpc_freq;     /* QPC ticks per second (> 0) */
    uint64_t start_qpc;    /* time 0 of the session */
    uint32_t stack_kinds;  /* which kinds wait for a stack (0: the default) */
    uint32_t max_pending;  /* events waiting for a stack (0: 4096) */
    uint32_t max_held;     /* stacks waiting for their event (0: 256) */
    uint64_t ttl_ns;       /* how long either waits, in stream time (0: 100 ms) */
    /* pid 0 with follow_first: the first process whose heap event comes
     * becomes the traced one (start --exe: every process of the image logs;
     * one session keeps one process's tables, never two processes'
     * addresses in one table). */
    int follow_first;
    etw_path_fn path;       /* NULL: image events are not turned into module events */
    etw_process_fn process; /* may be NULL */
};

/* Each under its own name for the session's data quality. */
struct etw_corr_stats {
    uint64_t events_in;           /* decoded events of the traced process */
    uint64_t other_process;       /* events and stacks of other processes, skipped */
    uint64_t stacks_in;
    uint64_t stacks_matched;      /* attached to their event */
    uint64_t stacks_merged;       /* a user fragment appended to a kernel fragment */
    uint64_t stacks_early;        /* came before their event (and then matched) */
    uint64_t stacks_unmatched;    /* no event with their timestamp and thread within ttl */
    uint64_t events_no_stack;     /* of a stack kind, left without one (ttl or max_pending) */
    uint64_t pending_overflow;    /* of those, pushed out by max_pending before ttl */
    uint64_t kernel_frames;       /* kernel frames dropped */
    uint64_t truncated_stacks;    /* more than ETW_MAX_FRAMES user frames */
    uint64_t realloc_in_place;
    uint64_t realloc_moved;       /* left to their Alloc and Free events */
    uint64_t realloc_moved_unpaired; /* self-check: no Alloc of the new address beside it */
    uint64_t heaps_created;
    uint64_t reserve_only;        /* VirtualAlloc without MEM_COMMIT: not a commit */
    uint64_t free_other;          /* VirtualFree with neither DECOMMIT nor RELEASE */
    uint64_t before_start;        /* timestamps before start_qpc: taken as time 0 */
    uint64_t modules_loaded;      /* image loads and rundowns of the traced process */
    uint64_t modules_unloaded;
    uint64_t module_names_dropped; /* a module's path not kept (the string cap): loaded unnamed */
    uint64_t process_exits;       /* the traced process's End event */
    uint64_t process_ends_repeated; /* a later End of its PID (a new process that reused
                                     * it): the first exit holds */
    uint64_t before_follow;       /* follow_first: system-logger records (VirtualAlloc,
                                   * image, process) before the followed process is
                                   * known: nobody's yet, skipped */
    uint32_t followed_pid;        /* follow_first: the process taken (0: none yet) */
};

struct etw_corr;

/* ev is ready for the engine but for its stack id: frames (innermost first,
 * depth of them, user frames only) are to be interned by the callee; depth 0
 * means no stack. */
typedef void (*etw_emit_fn)(void *arg, const struct ht_event *ev, const uint64_t *frames,
                            unsigned depth);

/* 0, HT_EBADARG (qpc_freq 0) or UV_ENOMEM (refused by the budget too). A
 * stack's frames are allocated when it attaches: refused, the event goes
 * without it, flagged HT_EVF_STACK_DROPPED. */
int etw_corr_new(struct etw_corr **out, const struct etw_corr_config *cfg, etw_emit_fn emit,
                 void *arg);
void etw_corr_free(struct etw_corr *c);
/* One decoded record with its header (r: pid, tid, cpu, ts). Events come out
 * through emit, from inside this call or a later one. */
void etw_corr_add(struct etw_corr *c, const struct etw_record *r, const struct etw_decoded *d);
/* End of the stream: every waiting event leaves, waiting stacks are unmatched. */
void etw_corr_flush(struct etw_corr *c);
const struct etw_corr_stats *etw_corr_stats(const struct etw_corr *c);
/* n events lost here (a recording's gap, Lost_Event): a lost event in line
 * with the others, at the newest stream time. */
void etw_corr_lost(struct etw_corr *c, uint64_t n);
/* follow_first: pid is the process followed, as another correlator found it
 * (--exe's system-logger records carry no heap event to follow by). Nothing
 * when one is followed already. */
void etw_corr_follow(struct etw_corr *c, uint32_t pid);
/* Raw QPC timestamp to session nanoseconds (0 before start). */
uint64_t etw_corr_ns(const struct etw_corr *c, uint64_t ts);

#endif
