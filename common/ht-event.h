/* The one fixed-size event record every source produces and the engine consumes. */
#ifndef HT_EVENT_H
#define HT_EVENT_H

#include <stdint.h>

/* Kinds mirror the "ev" values of the .htev format (docs/formats.md#htev-json-lines). */
#define HT_EVENT_KIND_MAP(X)                                                                       \
    X(ALLOC, "alloc")                                                                              \
    X(REALLOC, "realloc")                                                                          \
    X(FREE, "free")                                                                                \
    X(HEAP_DESTROY, "heap_destroy")                                                                \
    X(COMMIT, "commit")                                                                            \
    X(DECOMMIT, "decommit")                                                                        \
    X(RELEASE, "release")                                                                          \
    X(PRIVATE_BYTES, "private_bytes")                                                              \
    X(LOST, "lost")                                                                                \
    X(PROCESS, "process")                                                                          \
    X(EXIT, "exit")                                                                                \
    X(MODULE_LOAD, "module_load")                                                                  \
    X(MODULE_UNLOAD, "module_unload")

enum ht_event_kind {
    HT_EV_NONE = 0,
#define X(name, str) HT_EV_##name,
    HT_EVENT_KIND_MAP(X)
#undef X
        HT_EV_KIND_COUNT
};

/* Event flags. */
#define HT_EVF_TRUNCATED 0x01 /* the source cut the stack at its depth limit */
/* The event had a stack that could not be interned (a stack or name cap, or
 * the memory budget): stack is 0, counted as stack_drops, not no_stack. */
#define HT_EVF_STACK_DROPPED 0x02
/* A release of every mapping in the range, whatever is there (the process
 * exec'd): the range's bytes that were not committed are not unknown. */
#define HT_EVF_WHOLE_SPACE 0x04

/*
 * One event. Which fields mean something depends on kind:
 *   alloc:         heap, addr, size, stack
 *   realloc:       heap, addr (new), old_addr, size (new), old_size, stack
 *   free:          heap, addr
 *   heap_destroy:  heap
 *   commit/decommit/release: addr, size, stack (commit only)
 *   private_bytes: size = bytes
 *   lost:          size = number of events lost
 *   process:       size = pid
 *   exit:          size = exit code
 *   module_load:   addr = start of the module's lowest mapping, size = bytes
 *                  up to the end of its highest, old_addr = load bias (address
 *                  minus ELF/PE virtual address), heap = string id of its path,
 *                  old_size = string id of its build id in hex (0 = none)
 *   module_unload: addr = start, as at its load
 * t is nanoseconds since the session started. stack is an id of the
 * session's stack interner (0 = no stack); module events' string ids are ids
 * of the same interner.
 */
struct ht_event {
    uint64_t t;
    uint64_t heap;
    uint64_t addr;
    uint64_t old_addr;
    uint64_t size;
    uint64_t old_size;
    uint32_t stack;
    uint32_t tid;
    uint8_t kind;
    uint8_t flags;
    /* alloc of a sampled session: the blocks this one stands for (an
     * unbiased estimate of 1/p, agent-decode.c); 0 means 1 (exact). */
    uint32_t mult;
};

/* Name of a kind as written in .htev, or NULL. */
const char *ht_event_kind_name(int kind);
/* Kind for an .htev name of length len, or HT_EV_NONE. */
int ht_event_kind_parse(const char *s, unsigned len);

#endif
