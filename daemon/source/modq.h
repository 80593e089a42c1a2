/*
 * The live sources' module queue (bpf-source.c, etw-source-win.c): the module loads and
 * unloads the drains saw, waiting for the symbol cache. The drain runs on
 * the loop and never waits for the session's symbolizer lock (source.h), so
 * it pushes them here; whoever holds that lock (the loop when it was free at
 * once, or a query worker before its next frame) takes them, in order.
 *
 * Bounded: MODQ_ENTRIES events and MODQ_TEXT bytes of paths and build ids,
 * allocated whole by modq_init and charged to the acct given (the source's
 * buffers). An event that does not fit, or whose path and build id take more
 * than MODQ_ENTRY_TEXT bytes, is dropped and counted (drops); the text space
 * is reused once the queue is empty.
 *
 * Threads: push by one thread (the loop), take by one thread at a time (the
 * symbolizer lock's holder), stats from any; the queue's own mutex is held
 * only to copy an entry in or out.
 */
#ifndef MODQ_H
#define MODQ_H

#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define MODQ_ENTRIES 256u
#define MODQ_TEXT (64u << 10)
/* One entry's path and build id, NUL-terminated each, at most. */
#define MODQ_ENTRY_TEXT 4608u

struct modq_entry {
    uint64_t start, end, bias;
    uint32_t text; /* offset of path, then build id, in the text buffer */
    uint16_t path_len, bid_len;
    int load;
};

struct modq {
    uv_mutex_t mu; /* everything below */
    struct modq_entry *e;
    char *text;
    uint32_t head, n, text_used; /* entries [head, n) wait; emptied, all go back to 0 */
    uint64_t queued, applied, drops, max_waiting;
    int ready; /* mu initialised */
};

struct modq_stats {
    uint64_t queued, applied, drops, waiting, max_waiting;
};

/* 0, UV_ENOMEM, or HT_EFULL (acct's budget refused it; counted there).
 * modq_free undoes a failed init too. */
int modq_init(struct modq *q, struct mem_acct *acct);
void modq_free(struct modq *q, struct mem_acct *acct);
/* A load (path, build id "" if none) or an unload (start only) at the end:
 * 0, or HT_EFULL when dropped (counted). */
int modq_push(struct modq *q, int load, uint64_t start, uint64_t end, uint64_t bias,
              const char *path, const char *bid);
/* The oldest waiting event into out, its path and build id copied into
 * text (MODQ_ENTRY_TEXT bytes: path at text, build id at text + path_len +
 * 1). 1, or 0 when none waits. */
int modq_take(struct modq *q, struct modq_entry *out, char *text);
void modq_stats(struct modq *q, struct modq_stats *st);
/* Under the symbolizer lock: every waiting event into the symbol cache c,
 * in order; eager: a load reads its symbol table at once (eBPF: while the
 * process lives its files open through /proc/PID). How many were applied. */
struct sym_cache;
unsigned modq_apply(struct modq *q, struct sym_cache *c, int eager);

#endif
