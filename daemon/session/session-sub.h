/* A session's subscribers (session-sub.c). */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef SESSION_SUB_H
#define SESSION_SUB_H

#include "session-types.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* Add / remove a subscription (sub->ops set by the caller). */
void session_subscribe(struct session *s, struct session_sub *sub);
/* A raw subscriber (ops->raw): the source's raw tap goes on with the first
 * (whose first line is the stream's header); a later one gets that header
 * in header (*hn bytes, hcap: RAWTAP_HEADER_MAX) to send before what comes.
 * 0, or the source's error (nothing subscribed). */
int session_subscribe_raw(struct session *s, struct session_sub *sub, char *header, size_t hcap,
                          size_t *hn, char *err, size_t errsz);
void session_unsubscribe(struct session_sub *sub);
/* Subscribers learn that the session is over (they send their final frame). */
void session_subs_end(struct session *s, const char *why);

#endif
