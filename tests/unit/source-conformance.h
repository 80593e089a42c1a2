/*
 * Source conformance: the same synthetic events through a source give the
 * same engine state as applying them directly (issue 9, "A source
 * conformance test every backend runs").
 *
 * A backend provides a struct conf_backend: how to open its source with the
 * harness's sink, and how to make it produce a given list of events (write
 * them as a stream, push them through its ring consumer, ...). conf_check
 * applies the events to a reference engine directly, runs them through the
 * source into a second engine whose interner may hold ids of its own first
 * (so the source's ids must be remapped), and compares: counters, data
 * quality, live table totals, the rows of a few window queries (frames by
 * text, order-independent) and the module table.
 *
 * Everything runs on the calling thread, which plays the loop; the source
 * may run threads of its own.
 */
#ifndef SOURCE_CONFORMANCE_H
#define SOURCE_CONFORMANCE_H

#include "engine.h"
#include "source.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct conf_run;

/* Let the source make progress: drain what is ready into the engine (the
 * harness's budget per call, as a session does) and run the loop once
 * without blocking. A feeder calls it while it waits for room. */
void conf_pump(struct conf_run *r);

struct conf_backend {
    const char *name;
    /* Open the source under test (p and sink come from the harness). 0 or an error. */
    int (*open)(void *arg, struct source **out, uv_loop_t *loop, const struct source_params *p,
                const struct source_sink *sink, char *err, size_t errsz);
    /* Make the started source produce evs in order (their stack and string
     * ids are those of si), then end: the source calls sink->ended once all
     * was drained. Calls conf_pump while it waits. 0 or an error. */
    int (*feed)(void *arg, struct conf_run *r, struct source *src, const struct ht_event *evs,
                size_t n, const struct stack_intern *si);
    void *arg;
};

/* Up to cap random events from seed, stacks and names interned in si (in an
 * order unlike their first use): a process event first, then allocs, frees,
 * reallocs, commits, decommits, releases, heap destroys, private bytes, lost
 * records, module loads and unloads (also of unknown bases), an exit last.
 * Returns how many. */
size_t conf_make_events(struct stack_intern *si, uint64_t seed, struct ht_event *evs, size_t cap);

/* Apply evs to ref (an engine whose interner holds their ids, nothing
 * applied yet), run them through the backend into a fresh engine (with
 * prefill, holding stacks and names of its own first), and compare. 0 when
 * the two agree, else -1 with what differs in why. */
int conf_check(const struct conf_backend *b, struct engine *ref, const struct ht_event *evs,
               size_t n, int prefill, char *why, size_t whysz);

#endif
