/* Who may make a session and who sees one (session.h): the slots a uid
 * may take, the names a session may have, a session's owner. */
#include "session.h"
#include "session-int.h"

#include "config.h"

#include "ht-error.h"
#include "ht-text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *session_state_name(enum session_state st)
{
    static const char *const names[] = {"loading", "running", "stopped", "ended"};
    return names[st];
}

int session_visible(const struct session *s, uint32_t uid)
{
    return uid == 0 || s->owner == uid;
}

/* Every slot taken: say which sessions hold them (loads that failed or were
 * cut keep theirs) and how to free one. */
static int slots_full(struct session_set *set, uint32_t uid, char *err, size_t errsz)
{
    size_t n = (size_t)snprintf(err, errsz,
                                "all %u session slots are taken (max_sessions); free one with "
                                "'heaptracectl drop NAME'. Sessions:",
                                set->cfg->max_sessions);
    unsigned listed = 0, visible = 0;
    for (const struct session *o = set->head; o; o = o->next)
        visible += (unsigned)session_visible(o, uid);
    for (const struct session *o = set->head; o && n < errsz; o = o->next) {
        if (!session_visible(o, uid))
            continue; /* another user's: not named to this client */
        char item[192];
        int k = snprintf(item, sizeof(item), "%s %u \"%s\" %s%s%.60s%s", listed ? "," : "", o->id,
                         o->name, session_state_name(o->state), o->stop_reason[0] ? " (" : "",
                         o->stop_reason, o->stop_reason[0] ? ")" : "");
        if (k < 0)
            break;
        if ((size_t)k >= sizeof(item))
            k = (int)sizeof(item) - 1;
        /* Keep room to say how many did not fit. */
        if (n + (size_t)k + 24 >= errsz) {
            n += (size_t)snprintf(err + n, errsz - n, " and %u more", visible - listed);
            break;
        }
        memcpy(err + n, item, (size_t)k + 1);
        n += (size_t)k;
        listed++;
    }
    if (visible < set->n && n < errsz)
        snprintf(err + n, errsz - n, "%s%u of other users", visible ? ", and " : " ",
                 set->n - visible);
    return HT_EFULL;
}

/* Would session_find take name for an id? strtoul reads "12", but also
 * " 12", "+12" and "-0": such a name would name another session. */
static int reads_as_id(const char *name)
{
    char *end;
    (void)strtoul(name, &end, 10);
    return end != name && *end == '\0';
}

int session_admit_for(struct session_set *set, const char *name, uint32_t uid, char *err,
                      size_t errsz)
{
    if (set->n >= set->cfg->max_sessions)
        return slots_full(set, uid, err, errsz);
    if (!name || !*name)
        return 0;
    size_t len = strlen(name);
    if (len >= sizeof(((struct session *)0)->name) || reads_as_id(name) ||
        !ht_utf8_valid(name, len)) {
        snprintf(err, errsz, "session name must be 1-63 bytes of UTF-8 and not a number");
        return HT_EBADARG;
    }
    for (struct session *o = set->head; o; o = o->next)
        if (strcmp(o->name, name) == 0) {
            snprintf(err, errsz, "a session named \"%s\" exists already", name);
            return HT_EEXIST;
        }
    return 0;
}

int session_admit(struct session_set *set, const char *name, char *err, size_t errsz)
{
    return session_admit_for(set, name, 0, err, errsz);
}
