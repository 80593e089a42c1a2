/*
 * The one interface every event source implements
 * (docs/architecture.md#layers-and-the-rules-between-them): recorded streams (replay), eBPF attach,
 * the LD_PRELOAD shim, ETW. A session owns one source; the source hands events to the session
 * through a sink the session implements, and the session schedules the draining on the loop.
 *
 * Adding a backend is one folder under daemon/source/ and one line in
 * sources.def. Nothing here includes a server or protocol header: a source
 * knows the engine's event record and interner, never a client.
 *
 * Threads: every function here and every sink callback runs on the loop
 * thread, except symbolize and sym_sync: those run under the session's
 * symbolizer lock (one caller at a time), on the loop or on a query worker
 * (frame names for cull and require patterns, rows rendered off the loop).
 * So nothing else may touch what they change without its own short lock:
 * drain, stats and status_json never wait for the symbolizer lock (a worker
 * can hold it for a first symbol table load, hundreds of ms). A source may
 * run threads of its own (decoder, ring consumer); they reach the loop
 * through the event ring (evring.h) and its ready callback.
 */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SOURCE_H
#define SOURCE_H

#include "ht-event.h"
#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct cJSON;
struct source;
struct stack_intern;

/* What a source can do; a backend serves one or more. */
enum source_mode {
    SOURCE_STREAM = 1 << 0, /* a byte stream handed over by the session (load) */
    SOURCE_PID = 1 << 1,    /* attach to a running process (start --pid) */
    SOURCE_IMAGE = 1 << 2,  /* every new process of an image name (start --exe) */
    SOURCE_LAUNCH = 1 << 3, /* start a program under tracing (run) */
};

/* How live sources take stacks. */
enum source_stacks {
    SOURCE_STACKS_DEFAULT = 0, /* the backend's default (eBPF: auto, fp or dwarf by the modules) */
    SOURCE_STACKS_FP,          /* frame-pointer walk */
    SOURCE_STACKS_DWARF,       /* copy of the stack top, unwound with DWARF CFI */
    SOURCE_STACKS_NONE,        /* no stacks */
};

/* The process a source traces (or the stream's "process" line). Strings are
 * valid for the call only. */
struct source_process {
    uint64_t pid;     /* 0 when unknown (a stream without one) */
    const char *name; /* image name ("MemoryTestApp.exe", "memorytestapp"), "" if unknown */
    const char *wall; /* wall time the trace starts, ISO 8601, "" if unknown */
};

/* Implemented by the session. Every callback runs on the loop thread. */
struct source_sink {
    void *arg;
    /* The engine's interner: stack and string ids in events handed to
     * events() are its ids (a threaded source's private ids are remapped by
     * the event ring before they get here). */
    struct stack_intern *si;
    /* Events to apply, in order. Nonzero to stop draining (the session
     * stopped): the rest stays with the source. */
    int (*events)(void *arg, struct ht_event *evs, size_t n);
    /* The process is known (or changed: a stream's later "process" line). */
    void (*process)(void *arg, const struct source_process *p);
    /* The source has more to drain: call source_drain on a later loop
     * iteration (the session schedules it, so no source holds the loop). */
    void (*ready)(void *arg);
    /* Nothing more will come: the target exited, the stream ended, the
     * backend failed. Called once, after the last event was drained. reason
     * is for people ("target exited (code 0)", "end of stream"). */
    void (*ended)(void *arg, const char *reason);
    /* Raw records (record --raw, while the source's raw_tap is on): n bytes
     * of complete lines, and lost lines dropped before them since the last
     * call. */
    void (*raw)(void *arg, const char *buf, size_t n, uint64_t lines, uint64_t lost);
    /* A new process of the traced image (SOURCE_IMAGE): a session of its
     * own, whose source is this backend's opened with mode SOURCE_PID, pid
     * and parent = this source (the session layer names it
     * "<session>.<pid>" and gives it this session's parameters). 0, or an
     * error with why in err (no session slot, the budget). */
    int (*spawn)(void *arg, uint64_t pid, char *err, size_t errsz);
    /* A point in the session's time the source names (the agent: each change
     * of its sampling mean), as `mark` makes: 0, or the engine's error
     * (HT_EEXIST, HT_EFULL: its mark cap). NULL: none taken. */
    int (*mark)(void *arg, const char *name, uint64_t t);
};

/* What the session asks for: the request's arguments, already validated. */
struct source_params {
    enum source_mode mode;
    uint64_t pid;      /* SOURCE_PID */
    const char *image; /* SOURCE_IMAGE */
    char *const *argv; /* SOURCE_LAUNCH: NULL-terminated */
    /* SOURCE_LAUNCH where the client starts the program itself (the agent
     * source): the client's pid (the program's, once it execs) and uid. */
    uint64_t launcher_pid;
    uint32_t launcher_uid;
    int follow; /* run --follow: the program's children as sessions of their own */
    /* run --sample: the mean bytes between samples (0: exact); --sample-seed:
     * the sampler's and the weights' seed (0: random); --max-overhead:
     * percent of the program's CPU time the agent may take (0: no limit). */
    uint64_t sample_bytes, sample_seed;
    uint32_t max_overhead;
    enum source_stacks stacks;
    uint32_t stack_depth; /* frames kept, 1..HT_STACK_MAX_DEPTH */
    int no_heap, no_virtual;
    /* The session's limits and budget: the source's own memory (rings,
     * private interner, symbol caches) is charged to budget. */
    uint32_t max_stacks, max_strings, max_name_len;
    struct mem_budget *budget;
    uint64_t sample_ns;  /* how often a live source samples private bytes */
    uint64_t ring_bytes; /* a live source's kernel ring (eBPF: bpf_ring_bytes); 0: its default */
    /* SOURCE_PID spawned by a SOURCE_IMAGE source (sink.spawn): the source
     * whose records this one takes (it owns the ETW sessions); NULL else. */
    struct source *parent;
};

/* Counters every source keeps; a field a source has no use for stays 0.
 * Reported by status and in every reply's data quality. */
#define SOURCE_ERRORS_KEPT 16
struct source_stats {
    uint64_t bytes, lines, events, malformed; /* input taken (streams) / records decoded */
    uint64_t lost;                   /* events the source knows it lost (kernel ring full, ...) */
    uint64_t mem[MEM_KINDS];         /* the source's own memory, by structure */
    uint64_t over_budget[MEM_KINDS]; /* growths refused at a byte budget */
    uint64_t no_memory[MEM_KINDS];   /* growths refused: allocation failed or backing off */
    uint64_t alloc_failures;
    uint64_t stack_table_drops; /* stacks not interned at max_stacks */
    uint64_t string_drops;      /* names not interned at max_strings */
    uint64_t long_names;        /* distinct names cut at max_name_len */
    uint64_t bad_utf8_names;    /* distinct names that were not UTF-8 (kept with U+FFFD) */
    /* A sampled session (run --sample or --max-overhead): its figures are
     * estimates. The mean now in force (0: every block), the agent's last
     * measured overhead (ppm of its CPU time), the mean's changes, samples
     * not taken for a full set of sampled blocks, allocs taken weighted. */
    int sampling;
    uint32_t sample_max_overhead;
    uint64_t sample_mean, sample_overhead_ppm, sample_rate_changes, sample_set_full;
    uint64_t sampled_allocs;
    uint32_t nerrors;
    struct {
        uint64_t line;
        char msg[160];
    } errors[SOURCE_ERRORS_KEPT]; /* the first malformed records, for the report */
};

struct source_ops {
    const char *name;    /* "replay", "bpf", ... as in sources.def */
    unsigned modes;      /* enum source_mode bits */
    const char *summary; /* one line for version and help */
    /* Can this backend work here and now (privileges, kernel support)? 0, or
     * an HT_E* / UV_E* error with why in err. NULL: always. */
    int (*available)(char *err, size_t errsz);
    /* Optional, SOURCE_PID: could this source attach to pid? Checked
     * without touching the process (start --pid --source auto). 0, or an
     * error with why in err. */
    int (*can_attach)(uint64_t pid, char *err, size_t errsz);
    /* Check params and prepare; nothing is attached and no thread runs yet.
     * 0, or an error with a message for people in err (nothing left behind). */
    int (*open)(struct source **out, uv_loop_t *loop, const struct source_params *p,
                const struct source_sink *sink, char *err, size_t errsz);
    /* Begin producing. On error nothing stays attached. */
    int (*start)(struct source *s, char *err, size_t errsz);
    /* Hand up to budget records to the sink. 1: more remain (the source asks
     * again through sink->ready), 0: nothing ready now, -1: the sink asked to stop. */
    int (*drain)(struct source *s, size_t budget);
    /* Stop producing and detach from the target (no probe, link or handle
     * left behind). What was produced may still be drained. Idempotent. */
    void (*stop)(struct source *s);
    /* Optional: stop taking events from the target (detach now) but deliver
     * every one already taken: drain goes on until they are all handed over,
     * then ended comes. 0, or nonzero when it cannot (then call stop). stop
     * and close still stop at once (the rest is counted as lost). */
    int (*finish)(struct source *s);
    /* Free everything (stops first). No callback comes after it. */
    void (*close)(struct source *s);
    /* A copy of the counters (the symbolizer's as of its last use: never
     * waits for the symbolizer lock). */
    void (*stats)(struct source *s, struct source_stats *st);
    /* Backend-specific status ("probes": [...], ring size, stack mode), or
     * NULL (optional). Never waits for the symbolizer lock either. */
    struct cJSON *(*status_json)(struct source *s);
    /* SOURCE_STREAM only (NULL otherwise): input bytes that fit now, copy
     * them in, end of input. */
    size_t (*space)(struct source *s);
    size_t (*write)(struct source *s, const char *buf, size_t n);
    void (*close_input)(struct source *s);
    /* Live sources: text of an address frame, "module!symbol" (or
     * "module!+0xoff" when the module has no symbol there), into buf; NULL
     * when the address is in no known module. Under the session's symbolizer
     * lock, on the loop or a query worker (see Threads above); the source
     * caches what it resolves. It first applies whatever drains queued for
     * the symbolizer (as sym_sync), so no frame is resolved against a module
     * list that misses a module the engine was handed. NULL: addresses stay
     * "0x...". */
    const char *(*symbolize)(struct source *s, uint64_t addr, char *buf, size_t bufsz);
    /* Optional, with symbolize: apply to the symbolizer what drains queued
     * for it (eBPF: module loads and unloads; a drain never waits for the
     * symbolizer lock, so it queues them). Under the session's symbolizer
     * lock: the session calls it after a drain when the lock is free at once
     * (uv_mutex_trylock), so tables load early, while the process is there
     * to open them. NULL: drains queue nothing. */
    void (*sym_sync)(struct source *s);
    /* Undo what this backend changes outside the daemon and a crashed run
     * may have left (ETW: its sessions, IFEO TracingFlags from the journal).
     * Called at daemon start and stop, with no source of it open. Returns
     * how many things were undone, a line for the log in msg. NULL: nothing
     * to undo. */
    int (*recover)(char *msg, size_t msgsz);
    /* Raw records to sink->raw from now on (on), or no more (off: what
     * waits is handed over first): the ETW sources' records as raw ETW
     * stream lines (etw-raw.h), header first.
     * 0, or an error with why in err (this source has no raw records).
     * NULL: none. */
    int (*raw_tap)(struct source *s, int on, char *err, size_t errsz);
    /* Another raw subscriber while the tap is on: what waits is handed to
     * the subscribers there are (sink->raw) first, then the stream's header
     * line (the one the tap opened with) goes to buf for the newcomer, whose
     * recording must open with it too. Its length, or 0 (tap off, no room).
     * NULL with raw_tap NULL. */
    size_t (*raw_join)(struct source *s, char *buf, size_t cap);
};

/* Every source object starts with this. */
struct source {
    const struct source_ops *ops;
    struct source_sink sink;
};

/* Each backend's operations (sources.def; listed in sources.h). */
#define X(name, ops) extern const struct source_ops ops;
#include "sources.def"
#undef X

#endif
