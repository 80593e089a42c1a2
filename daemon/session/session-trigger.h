/* Triggers of a session (session-trigger.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_TRIGGER_H
#define SESSION_TRIGGER_H

#include "session-types.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* cond is "metric>value"; every (NULL, a string or a number) is checked in
 * the metric's unit. 0, or HT_EBADARG/HT_EFULL with a message in err. */
int session_add_trigger(struct session *s, const char *cond, int snapshot,
                        const struct cJSON *every, char *err, size_t errsz);
/* Every stop_when / snapshot_when of a request's args (with its every). */
int session_add_triggers(struct session *s, const struct cJSON *args, char *err, size_t errsz);
/* A snapshot trigger's next threshold after the value reached v: the first
 * step of every past v, computed in one division; UINT64_MAX (done) when
 * every is 0 or the step passes 64 bits. */
uint64_t trigger_next_after(uint64_t next, uint64_t every, uint64_t v);
/* How many steps (next, next + every, ...) v has reached: 1 without every. */
uint64_t trigger_steps(uint64_t next, uint64_t every, uint64_t v);

#endif
