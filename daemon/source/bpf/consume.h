/*
 * Records of the eBPF ring (heaptrace-bpf.h) into heaptrace events: the
 * allocator calls as heap events, the mmap family through the region table
 * as commits (docs/linux.md#mmap-family-accounting), stacks interned through the emit
 * callbacks. Independent of the ring and the kernel, so tests feed it
 * synthetic records.
 *
 * Threads: one owner (the consumer thread).
 */
#ifndef HT_BPF_CONSUME_H
#define HT_BPF_CONSUME_H

#include "ht-event.h"
#include "regions.h"

#include <stddef.h>
#include <stdint.h>

struct unwinder;

/* Where converted events go (the event ring, or a test's arrays). */
struct bpf_emit {
    void *arg;
    /* One event; nonzero to stop (the ring was told to quit). */
    int (*event)(void *arg, const struct ht_event *ev);
    /* Id of a stack (innermost first), 0 when it could not be interned. */
    uint32_t (*stack)(void *arg, const uint64_t *frames, unsigned n);
};

/* The target's executable mappings, sorted and disjoint: a frame outside
 * them is not code (a frame-pointer walk through code that uses rbp as a
 * general register reads data as return addresses), so a stack is cut
 * there. Bounded: past the cap, mappings are not added (counted). */
struct exec_ranges {
    uint64_t (*r)[2];
    size_t n, cap;
    int known;          /* set once the process's mappings were read: until then no check */
    uint64_t overflows; /* executable mappings not kept (cap reached, or out of memory) */
};

/* The heap handle of every heap event: a Linux process has one C heap. */
#define BPF_HEAP 1

struct bpf_consumer {
    struct bpf_emit emit;
    uint64_t t0;          /* monotonic ns the session's time counts from */
    uint32_t stack_depth; /* frames kept, 1..HT_STACK_MAX_DEPTH */
    uint64_t page_size;
    struct regions regions;
    struct unwinder *uw; /* --stacks dwarf; NULL otherwise */
    int exec_mapped;     /* an executable file mapping appeared: rescan the modules */
    int exec_seen;       /* the target executed a new program: the trace is over */
    struct exec_ranges exec;
    uint64_t records, events, malformed, brk_calls, unwind_failures;
    /* Stacks cut at a frame outside every executable mapping (their events
     * carry HT_EVF_TRUNCATED too). */
    uint64_t stacks_outside_exec;
    /* DWARF stacks cut where the 8 KiB copy ended (deeper than the copy). */
    uint64_t stacks_copy_short;
    uint64_t drops_seen; /* the kernel's drop total already reported as lost */
    /* Records (and drops) that never became events: taken while the sink
     * refused (the ring quitting at stop), or discarded by the consumer at
     * stop. Reported as the source's own lost count (source_stats.lost), on
     * top of the lost events the engine got. */
    uint64_t undelivered;
};

void bpf_consumer_init(struct bpf_consumer *c, const struct bpf_emit *emit, uint64_t t0,
                       uint32_t stack_depth);
void bpf_consumer_close(struct bpf_consumer *c);
/* Forget the executable mappings (a full read of the maps follows). */
void bpf_consumer_exec_reset(struct bpf_consumer *c);
/* [start, end) is executable in the target, from a read of its maps (marks
 * the set known: mappings from records alone do not). 0, HT_EFULL or HT_ENOMEM. */
int bpf_consumer_exec_add(struct bpf_consumer *c, uint64_t start, uint64_t end);
/* Is addr inside an executable mapping (always 1 while none is known)? */
int bpf_consumer_exec_has(const struct bpf_consumer *c, uint64_t addr);
/* Convert one record of size bytes. 0; -1 when emit->event asked to stop or
 * the record says the target executed a new program (exec_seen set);
 * a record too short for what it claims is counted in malformed and skipped (0). */
int bpf_consume_record(struct bpf_consumer *c, const void *data, size_t size);
/* The kernel's count of records the ring had no room for (summed over CPUs),
 * read at monotonic time now: what it grew by since the last call becomes
 * one HT_EV_LOST event. 0; -1 when emit->event asked to stop. */
int bpf_consume_drops(struct bpf_consumer *c, uint64_t total, uint64_t now);

#endif
