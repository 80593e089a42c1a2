/* A session's subscribers (record, top): on and off its list, and told
 * when it is over (session-sub.h). */
#include "session-sub.h"

#include "session-int.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

void session_subscribe(struct session *s, struct session_sub *sub)
{
    sub->s = s;
    sub->next = s->subs;
    s->subs = sub;
    if (sub->ops->events)
        s->nrecorders++;
}

int session_subscribe_raw(struct session *s, struct session_sub *sub, char *header, size_t hcap,
                          size_t *hn, char *err, size_t errsz)
{
    *hn = 0;
    if (!s->src || s->src_over || !s->src->ops->raw_tap) {
        snprintf(err, errsz, "session %u's source (%s) has no raw records: record --raw takes a "
                             "live ETW session (Windows) or a raw ETW stream being loaded",
                 s->id, s->source ? s->source : "none");
        return HT_ENOTSUP;
    }
    /* A later subscriber gets the header the tap opened with (*hn bytes,
     * sent by the caller after its acknowledgement): its recording is a raw
     * ETW stream on its own too. */
    if (s->nraw > 0 && s->src->ops->raw_join) {
        /* What waits goes to the others first: a send that fails at once
         * closes its client, and when that was the last one the tap went off. */
        *hn = s->src->ops->raw_join(s->src, header, hcap);
    }
    if (s->nraw == 0) {
        *hn = 0; /* the tap puts the header itself */
        int rc = s->src->ops->raw_tap(s->src, 1, err, errsz);
        if (rc)
            return rc;
    }
    s->nraw++;
    session_subscribe(s, sub);
    return 0;
}

void session_unsubscribe(struct session_sub *sub)
{
    struct session *s = sub->s;
    if (!s)
        return;
    for (struct session_sub **p = &s->subs; *p; p = &(*p)->next) {
        if (*p == sub) {
            *p = sub->next;
            if (sub->ops->raw && --s->nraw == 0 && s->src && s->src->ops->raw_tap) {
                char err[64];
                s->src->ops->raw_tap(s->src, 0, err, sizeof(err));
            }
            if (sub->ops->events)
                s->nrecorders--;
            break;
        }
    }
    sub->next = NULL;
    sub->s = NULL;
}

void session_subs_end(struct session *s, const char *why)
{
    if (s->nraw && s->src && s->src->ops->raw_tap) {
        char err[64];
        s->src->ops->raw_tap(s->src, 0, err, sizeof(err)); /* what waits goes out first */
    }
    s->nraw = 0;
    while (s->subs) {
        struct session_sub *sub = s->subs;
        s->subs = sub->next;
        if (sub->ops->events)
            s->nrecorders--;
        sub->next = NULL;
        sub->ops->ended(sub, why); /* sub->s is cleared by the subscriber */
        sub->s = NULL;
    }
}
