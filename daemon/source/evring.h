/*
 * The event ring: how a source's producer thread (replay decoder, eBPF ring
 * consumer, preload reader, ETW consumer) hands events to the loop, which
 * owns the engine (docs/architecture.md#data-flow). Split out of feed.c.
 *
 * The producer interns stacks and strings into the ring's private interner
 * and puts events carrying those private ids; the ring sends the definitions
 * of new ids ahead of the first event that uses them, and evring_drain
 * re-interns them into the engine's interner on the loop, remapping ids (an
 * identity map while both interners agree, the usual case). Ids remapped:
 * ev->stack, and for HT_EV_MODULE_LOAD/UNLOAD the string ids in ev->heap
 * (path) and ev->old_size (build id).
 *
 * Threads: evring_new/evring_drain/evring_finished/evring_kick/evring_free
 * and evring_stats on the loop; evring_si/evring_put/evring_process/
 * evring_publish/evring_done/evring_quitting on the one producer thread.
 */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef EVRING_H
#define EVRING_H

#include "ht-event.h"
#include "mem-acct.h"
#include "source.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct evring;
struct stack_intern;

struct evring_limits {
    uint32_t ring_events; /* records in flight, a power of two */
    uint32_t max_stacks, max_strings;
    uint32_t max_name_len;     /* 0: HT_STR_MAX_LEN */
    struct mem_budget *budget; /* the producer's memory is charged to it (may be NULL) */
};

/* ready runs on the loop (uv_async) when records were published or the
 * producer finished. */
int evring_new(struct evring **out, uv_loop_t *loop, const struct evring_limits *lim,
               void (*ready)(void *data), void *data);
/* Tell the producer to quit (evring_put returns -1 from now on, a waiting
 * put wakes). The caller joins its producer thread, then calls evring_free. */
void evring_quit(struct evring *r);
/* Free the ring (its async handle closes on the loop). The producer thread
 * must have been joined. */
void evring_free(struct evring *r);

/* Producer side. */
/* The private interner: stack_intern_get / stack_intern_str on it give the
 * ids events carry. */
struct stack_intern *evring_si(struct evring *r);
/* One event (definitions of ids new since the last put go first). Waits for
 * room; -1 once told to quit (the event is dropped), else 0. In nowait mode
 * it never waits: 1 when there was no room (the event is dropped, and the
 * next event that fits goes after a lost event counting the dropped ones). */
int evring_put(struct evring *r, const struct ht_event *ev);
/* Producers that must never wait for the loop (an ETW consumer thread: a
 * slow callback loses ETW buffers, and a waiting one could hold up a thread
 * the loop joins): puts drop instead, counted. Before the first put. */
void evring_nowait(struct evring *r);
/* Events nowait puts dropped (any thread). */
uint64_t evring_full_drops(struct evring *r);
/* The process (name, wall time may be ""), delivered to sink->process in order. */
int evring_process(struct evring *r, uint64_t pid, const char *name, const char *wall);
/* Make everything put so far visible to the loop and wake it. Puts publish
 * by themselves every so often; call this when going idle. */
void evring_publish(struct evring *r);
/* No more events: publish and tell the loop (evring_finished turns 1 once drained). */
void evring_done(struct evring *r);
int evring_quitting(struct evring *r);
/* The producer's memory (private interner, buffers) and interner drops into st. */
void evring_producer_stats(struct evring *r, struct source_stats *st);

/* Loop side. */
/* Apply up to budget records through sink (events, process). 1 when records
 * remain, 0 when empty, -1 when sink->events asked to stop. */
int evring_drain(struct evring *r, const struct source_sink *sink, size_t budget);
/* 1 once the producer called evring_done and every record is drained. */
int evring_finished(struct evring *r);
/* Ask for the ready callback on the next loop iteration. */
void evring_kick(struct evring *r);

#endif
