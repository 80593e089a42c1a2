/*
 * The shared memory between the in-process agent (libheaptrace-agent.so)
 * and the daemon's agent source: one memfd per traced process, made by the
 * agent and handed to the daemon over the session's socket (SCM_RIGHTS).
 *
 * Layout: a header page, a ring of fixed records, a stack table. Producers
 * (every thread of the target) reserve a record by advancing head and
 * publish it by storing its seq last; the daemon takes records in order
 * while a record's seq says it is the next one. Stacks are interned in the
 * process into the table (hash, then frames, then state) and records carry
 * table ids, so a stack crosses once.
 *
 * Everything here can be written by the target's user: the daemon copies a
 * record or a stack out before it looks at it, checks every field and id,
 * and trusts no counter of the agent's for anything but reporting.
 *
 * Fixed-size fields only: the same header is compiled into the agent (no
 * libuv, no cJSON) and into the daemon.
 */
#ifndef AGENT_RING_H
#define AGENT_RING_H

#include <stdint.h>

#define HTA_MAGIC 0x31415448u /* "HTA1" */
#define HTA_VERSION 4u /* 2: the header's clock; 3: a record's sampling mean; 4: modules_late */
#define HTA_RECORDS (1u << 16) /* ring records, a power of two */
#define HTA_STACKS (1u << 14)  /* stack table entries, a power of two */
#define HTA_DEPTH 64u          /* frames kept per stack */
#define HTA_TOKEN_LEN 32u      /* the session token, hex characters */

/* Record kinds (the engine's event kinds are the daemon's business). */
enum hta_kind {
    HTA_ALLOC = 1, /* addr, size, stack */
    HTA_FREE,      /* addr */
    HTA_REALLOC,   /* addr (new), old_addr, size, stack */
    HTA_COMMIT,    /* addr, size, stack: anonymous private writable memory mapped */
    HTA_RELEASE,   /* addr, size: a range unmapped (mremap's old range too) */
    HTA_RATE,      /* rate: the sampling mean now in force; size: measured overhead, ppm */
    HTA_KIND_MAX = HTA_RATE,
};

/* Record flags. */
#define HTA_F_TRUNCATED 0x01 /* the stack was cut at the agent's depth */

struct hta_rec {
    uint64_t seq; /* position + 1 once the record is complete (stored last) */
    uint64_t t;   /* in the header's clock */
    uint64_t addr, old_addr, size;
    uint32_t stack; /* table id + 1, 0: none */
    uint32_t tid;
    uint8_t kind, flags;
    uint8_t pad[6];
    /* HTA_ALLOC: the sampling mean R (bytes) the block was taken under,
     * 0: every block is taken (exact). HTA_RATE: the new mean. */
    uint64_t rate;
};

/* Sampling means the daemon accepts (8 MiB): a block's weight 1/p(s), at
 * most R/s + 1, stays under 2^24, what the daemon's lifetime records keep. */
#define HTA_RATE_MAX (1ull << 23)

struct hta_stack {
    uint64_t hash;  /* 0: free; claimed by the writer with a CAS */
    uint32_t state; /* 1 once depth and frames are written (stored last) */
    uint32_t depth;
    uint64_t frames[HTA_DEPTH];
};

/* What a record's t counts (the header's clock). */
enum hta_clock {
    HTA_CLOCK_MONO, /* CLOCK_MONOTONIC ns */
    /* x86-64's time stamp counter (rdtsc): used only while the kernel's
     * clocksource is "tsc", which the kernel keeps only for a TSC that is
     * constant and synchronized across CPUs (arch/x86/kernel/tsc.c, tsc
     * marked unstable otherwise). The daemon reads the same counter and
     * converts with its own (TSC, CLOCK_MONOTONIC) pairs. */
    HTA_CLOCK_TSC,
};

/* Counters the agent keeps (reported, never trusted). */
enum hta_counter {
    HTA_CNT_RING_FULL,       /* records dropped: the ring was full */
    HTA_CNT_STACKS_FULL,     /* stacks not interned: the table was full */
    HTA_CNT_REENTRANT,       /* calls made while the agent itself was running (a signal handler) */
    HTA_CNT_UNWIND_FAILED,   /* stacks the unwinder could not take */
    HTA_CNT_SAMPLE_SET_FULL, /* samples not taken: the set of sampled live blocks was full */
    /* Not losses: where the default stacks' fast path gave way. */
    HTA_CNT_UNWIND_SLOW,   /* stacks left to libunwind (a signal frame, CFI of another shape) */
    HTA_CNT_RULES_EVICTED, /* unwind rules dropped at the table's cap (learned again) */
    HTA_CNT_MODULES_FULL,  /* rule lookups past the unwinder's cap of modules (to libunwind) */
    /* Attached: modules the loader mapped other than through the program's
     * dlopen (glibc's own loads: NSS, iconv, libgcc_s), whose slots were
     * rewritten up to a watcher tick later; their calls before then unseen. */
    HTA_CNT_MODULES_LATE,
    HTA_CNT_MAX,
};

struct hta_header {
    uint32_t magic, version;
    uint32_t records, stacks, depth; /* as compiled: the daemon checks they match */
    uint32_t pid;
    uint32_t clock; /* enum hta_clock */
    uint64_t head __attribute__((aligned(64))); /* producers: next position to reserve */
    uint64_t tail __attribute__((aligned(64))); /* the daemon: next position to take */
    uint64_t counters[HTA_CNT_MAX] __attribute__((aligned(64)));
    uint32_t stop __attribute__((aligned(64))); /* the daemon: write no more */
    /* run --max-overhead: the agent's last measurement (its time in its
     * hooks over the process's CPU time, ppm) and the sampling mean in
     * force, written by the agent's watch thread every tick. */
    uint64_t gov_ppm __attribute__((aligned(64)));
    uint64_t gov_rate;
};

#define HTA_HEADER_BYTES 4096u
#define HTA_RECS_OFFSET HTA_HEADER_BYTES
#define HTA_STACKS_OFFSET (HTA_RECS_OFFSET + (uint64_t)HTA_RECORDS * sizeof(struct hta_rec))
#define HTA_TOTAL_BYTES (HTA_STACKS_OFFSET + (uint64_t)HTA_STACKS * sizeof(struct hta_stack))

/* The agent's first message on the socket, with the memfd as SCM_RIGHTS. */
struct hta_hello {
    uint32_t magic, version;
    char token[HTA_TOKEN_LEN];
    uint64_t bytes; /* the memfd's size */
};

/* The daemon's answer: one byte, HTA_ACCEPT or a refusal. */
#define HTA_ACCEPT 'y'
#define HTA_REFUSE 'n'

/* After the answer, on the same socket: the agent asks for a flush before
 * its image goes (exit, exec); the daemon acknowledges once it took every
 * record written before the ask and named their frames. */
#define HTA_FLUSH 'F'
#define HTA_FLUSH_ACK 'A'
#define HTA_FLUSH_MS 1000u /* the agent waits this long at most */

/* The environment `heaptracectl run` gives the program. */
#define HTA_ENV_SOCKET "HEAPTRACE_AGENT_SOCKET" /* abstract socket name, without the NUL */
#define HTA_ENV_TOKEN "HEAPTRACE_AGENT_TOKEN"
#define HTA_ENV_STACKS "HEAPTRACE_AGENT_STACKS" /* fp, dwarf (default) or none */
#define HTA_ENV_DEPTH "HEAPTRACE_AGENT_DEPTH"
#define HTA_ENV_FOLLOW "HEAPTRACE_AGENT_FOLLOW" /* "1": children too (run --follow) */
#define HTA_ENV_SAMPLE "HEAPTRACE_AGENT_SAMPLE" /* mean bytes between samples (run --sample) */
#define HTA_ENV_SEED "HEAPTRACE_AGENT_SEED"     /* the sampler's seed (tests), else tid ^ time */
#define HTA_ENV_MAX_OVERHEAD "HEAPTRACE_AGENT_MAX_OVERHEAD" /* percent (run --max-overhead) */

_Static_assert(sizeof(struct hta_rec) == 64, "one record per cache line");
_Static_assert(sizeof(struct hta_header) <= HTA_HEADER_BYTES, "header fits its page");

#endif
