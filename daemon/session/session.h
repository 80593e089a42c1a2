/* Sessions: an engine fed by a source, with triggers, snapshots and subscribers (session.c).
 * It knows no client and writes no protocol frame: subscribers and the
 * input's owner are told through callbacks. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_H
#define SESSION_H

#include "engine.h"
#include "session-types.h"
#include "source.h"
#include "session-snapshot.h"
#include "session-sub.h"
#include "session-trigger.h"

struct qjob;

/* Sessions (session.c). */
/* An empty set on loop (hooks and cfg kept, not copied). */
void session_set_init(struct session_set *set, uv_loop_t *loop, const struct ht_config *cfg,
                      struct mem_budget *mem, const struct session_hooks *hooks);
/* Drop every session, then shut the query workers down (joined). */
void session_set_close(struct session_set *set);
/* Whether a session named name (NULL or "": a generated one) may be created:
 * 0, HT_EFULL (every slot taken; err lists the sessions and how to free
 * one), HT_EBADARG (bad name) or HT_EEXIST. */
int session_admit(struct session_set *set, const char *name, char *err, size_t errsz);
/* The same for a client admitted as uid: HT_EFULL names only the sessions
 * it may see (session_visible), and counts the others. */
int session_admit_for(struct session_set *set, const char *name, uint32_t uid, char *err,
                      size_t errsz);
struct session *session_new(struct session_set *set, const char *name, const char *source,
                            char *err, size_t errsz);
/* Off the session list at once; freed now, or when its running query
 * returns (then the queue calls session_free_dropped). */
void session_drop(struct session *s);
void session_free_dropped(struct session *s);
/* Hold the source's symbolizer (and what it charges) against the query
 * workers: a loop caller may wait behind a worker's symbol table load. */
/* The session's query returned: a drain put off for the symbolizer goes on. */
void session_sym_released(struct session *s);
void session_src_lock(struct session *s);
void session_src_unlock(struct session *s);
void session_stop(struct session *s, const char *reason);
struct session *session_find(struct session_set *set, const struct cJSON *ref);
/* May a client admitted as uid see and act on s? Its owner and root (uid 0) may. */
int session_visible(const struct session *s, uint32_t uid);
/* Apply a source's events (source_sink.events); nonzero once the session stopped. */
int session_apply(void *arg, struct ht_event *evs, size_t n);
/* Open and start the session's source ops with p (its budget and limits are
 * filled in here): 0, or an error with a message in err and no source left. */
int session_source_begin(struct session *s, const struct source_ops *ops, struct source_params *p,
                         char *err, size_t errsz);
/* 1 while the source takes input (a stream being loaded). */
int session_taking_input(const struct session *s);
/* Refresh s->ingest from the source (no-op once it is closed). */
void session_stats_refresh(struct session *s);
/* Compute the default cull of stacks interned since the last call, off the query path. */
void session_warm(struct session *s);
/* The source's process name and wall time (source_sink.process). */
void session_process(void *arg, const struct source_process *p);
/* The .htev "process" line of the session (with its name) into buf; 0 if too small. */
size_t session_process_line(struct session *s, uint64_t t, char *buf, size_t cap);
void session_check_triggers(struct session *s);
/* Session queries (qjob.h): one view per engine, so a session's queries run
 * one after the other, at most cfg max_queued_queries waiting; their view
 * opens when their turn comes, a worker (qworker.h) runs them, and back on
 * the loop the view is closed and the job's done callback answers.
 * Different sessions' queries run in parallel. */
/* Queue j on its session (taken over, freed after done): 0, or HT_EFULL
 * (counted as rejected) / HT_ENOSESSION, j left to the caller to free. */
int session_query_submit(struct qjob *j);
/* The session is dropped: its waiting jobs are answered ENOSESSION; 1 when
 * a query still runs (the session is freed once it returns). */
int session_queries_cancel(struct session *s);
/* What a session is (session-status.c): read by the server and commands
 * instead of the struct's fields. */
uint32_t session_id(const struct session *s);
/* The set's sessions: set->head, then each one's next (NULL at the end). */
struct session *session_next(const struct session *s);
const char *session_name(const struct session *s);
enum session_state session_state(const struct session *s);
/* Its engine (engine.h: the figures, tables and rings the queries read). */
struct engine *session_engine(struct session *s);
/* The source's name ("replay", "bpf", ...) and the traced process's name. */
const char *session_source_name(const struct session *s);
const char *session_process_name(const struct session *s);
/* Unix seconds when it started. */
int64_t session_wall_start(const struct session *s);
/* 1 once dropped: off the list, kept until its running query returns. */
int session_dropped(const struct session *s);
/* The source's own status (source.h status_json; NULL without a source or
 * one): the caller frees it. */
struct cJSON *session_source_status(struct session *s);
/* The uid of the client that made it (session_visible). */
void session_set_owner(struct session *s, uint32_t uid);
/* A stream being loaded (session_taking_input): room in the source's feed,
 * bytes written to it (what finds no room is counted as dropped input),
 * and its end. */
size_t session_input_space(const struct session *s);
void session_input_write(struct session *s, const char *buf, size_t n);
void session_input_close(struct session *s);
/* The command that starts a session sets its first state (loading, running). */
void session_set_state(struct session *s, enum session_state st);
/* Why it stopped ("" while it runs); why its input ended, said when the
 * source has drained (a load cut short). */
const char *session_stop_reason(const struct session *s);
void session_set_end_reason(struct session *s, const char *why);
/* The daemon's configuration it was made with. */
const struct ht_config *session_config(const struct session *s);
/* What its input held (refreshed by session_stats_refresh). */
const struct source_stats *session_ingest(const struct session *s);
/* The parameters its live source began with (session_source_begin). */
const struct source_params *session_live_params(const struct session *s);
/* Snapshots whose stacks are still being queried; queries waiting. */
uint32_t session_snapshots_pending(const struct session *s);
uint32_t session_queries_waiting(const struct session *s);
/* The owner of its input (load: the loading connection, opaque here), and
 * what it is told: after each drain, once the source is over (and its
 * snapshots complete), and first thing when the session is dropped. */
void *session_loader(const struct session *s);
void session_set_loader(struct session *s, void *loader);
void session_set_input_hooks(struct session *s, void (*drained)(struct session *s),
                             void (*source_end)(struct session *s),
                             void (*dropped)(struct session *s));
/* Recorders' events: recorded, and left out (lost: in a gap of a recorder
 * behind; drops: never expected). */
uint64_t session_recorded_events(const struct session *s);
void session_recorder_lost(struct session *s, uint64_t n);
void session_recorder_drops(struct session *s, uint64_t n);

/* What status needs from outside the session layer. */
struct session_status_ctx {
    /* The daemon-wide budget, and the output queued to clients counted in it. */
    const struct mem_budget *daemon_mem;
    uint64_t out_queued;
    /* Bytes queued to sub's client while it records s (0 otherwise). */
    uint64_t (*sub_queued)(struct session_sub *sub, const struct session *s);
    /* The data-quality counters (query-args.h quality_json). */
    struct cJSON *(*quality)(struct session *s);
};
/* The status reply's data: state, process, ingest, heap, memory, rings,
 * quality, triggers, snapshots, marks, queries (NULL: out of memory). */
struct cJSON *session_status_json(struct session *s, const struct session_status_ctx *x);
/* Bytes, lines, events and the first malformed lines of the session's input. */
struct cJSON *session_ingest_json(struct session *s);
const char *session_state_name(enum session_state st);

#endif
