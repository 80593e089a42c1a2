/*
 * One eBPF attachment to a process: the checks (privileges, BTF, the
 * process, one tracer per PID), the skeleton and its links, and the
 * consumer thread that turns ring records into events (consume.h). Used by
 * the session's source (bpf-source.c) and by the ht-bpf-dump tool.
 *
 * Threads: bpf_tracer_new/attach/run/detach/free and the stats on the
 * caller's thread (the loop); the sink callbacks run on the consumer thread.
 */
#ifndef HT_BPF_TRACER_H
#define HT_BPF_TRACER_H

#include "consume.h"
#include "heaptrace-bpf.h"

#include <stddef.h>
#include <stdint.h>

struct bpf_tracer;
struct cJSON;
struct procmaps_module;

struct bpf_tracer_params {
    uint64_t pid;
    enum hb_stacks stacks;
    uint32_t stack_depth; /* frames kept */
    uint64_t sample_ns;   /* private bytes sampling period; 0: 1 s */
    uint32_t ring_bytes;  /* a power of two; 0: 16 MiB */
    int no_heap;          /* no allocator probes (mappings only) */
    int no_virtual;       /* no mmap-family tracepoints */
    int force_tp_btf;     /* take the tp_btf fallback even with tracefs (tests) */
    int probe_floor;      /* programs that return at once: the probes' bare cost (benchmarks) */
    int no_multi;         /* one perf-event link per probe even where uprobe_multi exists (tests) */
};

/* Called on the consumer thread. */
struct bpf_tracer_sink {
    struct bpf_emit emit; /* events and stacks; emit.arg is the sink's */
    /* Id of a string (module paths, build ids), 0 when it could not be interned. */
    uint32_t (*str)(void *arg, const char *s, unsigned len);
    /* The process, once at the start, followed by an HT_EV_PROCESS event
     * (NULL: the caller reports it, with bpf_tracer_name). */
    void (*process)(void *arg, uint64_t pid, const char *name);
    /* Everything emitted so far should be made visible (going idle). */
    void (*idle)(void *arg);
    /* The end: the target exited (reason says how), or the tracer was told
     * to quit. Called once, last. */
    void (*done)(void *arg, const char *reason);
};

struct bpf_tracer_stats {
    uint64_t records, events, malformed, unwind_failures;
    /* Stacks cut at a frame outside every executable mapping; executable
     * mappings the check could not keep (the check is then off). */
    uint64_t stacks_outside_exec, exec_overflows;
    uint64_t stacks_copy_short; /* DWARF stacks deeper than the copy: cut */
    /* DWARF stacks unwound from cached CFI rules, and by libdwfl (a frame
     * the rules do not cover); rules cached, and replaced at the cache's cap. */
    uint64_t unwind_fast, unwind_fallbacks, unwind_rules, unwind_rules_evicted;
    uint64_t lost;        /* kernel ring drops, each reported as a lost event */
    uint64_t undelivered; /* records and drops that never became events (at stop) */
    /* Allocator returns whose entry was not seen (called before the attach, or
     * no room for the thread's state at entry): not recorded. */
    uint64_t returns_without_entry;
    /* Parts of lost, by cause: the kernel ring full; allocator entries and
     * mapping syscalls finding no room in the per-thread maps. */
    uint64_t ring_full, thread_map_full, syscall_map_full;
    uint64_t hint_map_full;      /* hints not kept (stacks may start in strdup/new) */
    uint32_t thread_map_entries; /* the per-thread maps' size */
    uint64_t region_drops, regions;
    uint32_t probes, links;
    uint64_t attach_ns; /* resolving + attaching */
    uint64_t load_ns;   /* skeleton open + load */
    uint64_t detach_ns; /* destroying the links */
    int tracepoints;    /* 1: per-syscall tracepoints, 2: tp_btf fallback, 0: none */
    int multi;          /* uprobe_multi links */
};

/* Checks and loads the program; nothing is attached yet. 0, or an error
 * (UV_EPERM, UV_ESRCH, HT_EEXIST, HT_ENOTSUP, ...) with a message in err. */
int bpf_tracer_new(struct bpf_tracer **out, const struct bpf_tracer_params *p, char *err,
                   size_t errsz);
/* Find the allocator, attach every probe and tracepoint. On error nothing stays attached. */
int bpf_tracer_attach(struct bpf_tracer *t, char *err, size_t errsz);
/* Start the consumer thread. */
int bpf_tracer_run(struct bpf_tracer *t, const struct bpf_tracer_sink *sink, char *err,
                   size_t errsz);
/* The programs take nothing more; the links go now when no consumer runs,
 * else at the consumer's end (on its thread: their removal is slow). */
void bpf_tracer_detach(struct bpf_tracer *t);
/* Detach, and have the consumer convert every record the ring still holds
 * (the sink keeps taking them) and the drops counted until now, give the
 * kernel's side back, then end (done); not joined. */
void bpf_tracer_finish(struct bpf_tracer *t);
/* Detach, tell the consumer to quit and wait until it no longer uses the
 * sink (its done callback does not run after this), leave the PID registry.
 * The consumer gives the links, programs and maps back on its own thread
 * (0.5-0.9 s for a jemalloc target): never waited for here. The stats and
 * status stay readable. Idempotent. The caller makes sure a sink callback
 * blocked on room can return (evring_quit). */
void bpf_tracer_stop(struct bpf_tracer *t);
/* Stop, join the consumer, give back everything the kernel holds, free. */
void bpf_tracer_free(struct bpf_tracer *t);
/* Stop, and free without waiting: a consumer still giving the kernel's side
 * back frees the tracer itself when done; the process's exit waits for it. */
void bpf_tracer_abandon(struct bpf_tracer *t);
void bpf_tracer_stats(struct bpf_tracer *t, struct bpf_tracer_stats *st);
/* "probes": [{"fn","module","offset","probe_off"}...] and the settings. */
struct cJSON *bpf_tracer_status_json(struct bpf_tracer *t);

/* The modules as read at attach (valid until the next call on t). */
const struct procmaps_module *bpf_tracer_modules(const struct bpf_tracer *t, size_t *n);
/* The process's name (its comm) as read at attach. */
const char *bpf_tracer_name(const struct bpf_tracer *t);

/* Can the backend run here (privileges, BTF)? 0 or an error with why. */
int bpf_tracer_available(char *err, size_t errsz);

#endif
