/* Snapshots of a session (session-snapshot.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_SNAPSHOT_H
#define SESSION_SNAPSHOT_H

#include "session-types.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* The stacks and commits of snapshot seq (hooks.snapshot_query; taken
 * over, either may be NULL) of the engine's time view_now, or why there
 * are none (rc). */
void session_snapshot_done(struct session *s, uint32_t seq, uint64_t view_now, struct cJSON *stacks,
                           struct cJSON *commits, int rc);
/* The ring slot snapshot seq is (or was) in: its seq and data say whether it is still there. */
const struct snapshot *session_snapshot_slot(const struct session *s, uint32_t seq);
/* Whether snapshot seq still waits for its stacks (not overwritten, s not dropped). */
int session_snapshot_wanted(const struct session *s, uint32_t seq);

/* A trigger fired: a snapshot of the session's figures now, its stacks
 * asked of the server (hooks.snapshot_query); the oldest one makes room. */
void session_take_snapshot(struct session *s, const char *reason, uint64_t step_first,
                           uint64_t step_last);

#endif
