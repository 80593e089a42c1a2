/* Triggers of a session: their conditions and steps (session-trigger.h);
 * session.c checks them as events come. */
#include "session-trigger.h"

#include "session-int.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

uint64_t trigger_steps(uint64_t next, uint64_t every, uint64_t v)
{
    if (v < next)
        return 0;
    return every ? (v - next) / every + 1 : 1;
}

uint64_t trigger_next_after(uint64_t next, uint64_t every, uint64_t v)
{
    if (every == 0)
        return UINT64_MAX;
    if (v < next)
        return next;
    uint64_t k = (v - next) / every + 1;
    if (k > (UINT64_MAX - next) / every)
        return UINT64_MAX;
    return next + k * every;
}

/* --every in the unit of the trigger's metric: a duration for duration, a
 * size otherwise; a bare number counts seconds or bytes, as on the command
 * line. At least 1 s or 1 MiB, or the threshold when that is smaller, and
 * never under 1 ms or 4 KiB: each step may cost a snapshot, so a tiny step
 * would take one on every event. */
static int parse_every(const struct trigger *t, const cJSON *every, uint64_t *out, char *err,
                       size_t errsz)
{
    int dur = t->metric == TRIG_DURATION;
    char shown[40];
    if (cJSON_IsNumber(every)) {
        if (dur && every->valuedouble > 18e9) /* seconds that fit in 64-bit nanoseconds */
            goto bad;
        *out = (uint64_t)every->valuedouble * (dur ? 1000000000ULL : 1);
        snprintf(shown, sizeof(shown), "%.0f", every->valuedouble);
    } else {
        snprintf(shown, sizeof(shown), "%.32s", every->valuestring);
        if ((dur ? ht_parse_duration(every->valuestring, out)
                 : ht_parse_size(every->valuestring, out)) != 0)
            goto bad;
    }
    uint64_t lo = dur ? 1000000ULL : 4096, hi = dur ? 1000000000ULL : 1048576;
    uint64_t min = t->threshold < lo ? lo : t->threshold > hi ? hi : t->threshold;
    if (*out >= min)
        return 0;
    char a[32];
    if (dur)
        snprintf(a, sizeof(a), "%.3f s", (double)min / 1e9);
    else
        ht_format_size(min, a, sizeof(a));
    snprintf(err, errsz,
             "--every %s is too small for %s: at least %s (1 s or 1 MiB, or the threshold when "
             "smaller, and never under 1 ms or 4 KiB)",
             shown, t->text, a);
    return HT_EBADARG;
bad:
    snprintf(err, errsz, "--every %s is not a %s, as %s needs (like %s)", shown,
             dur ? "duration" : "size", t->text, dur ? "10s" : "64MiB");
    return HT_EBADARG;
}

int session_add_trigger(struct session *s, const char *cond, int snapshot, const cJSON *every,
                        char *err, size_t errsz)
{
    static const struct {
        const char *name;
        int metric;
    } metrics[] = {{"private-bytes", TRIG_PRIVATE_BYTES},
                   {"outstanding", TRIG_OUTSTANDING},
                   {"committed", TRIG_COMMITTED},
                   {"duration", TRIG_DURATION}};
    if (s->ntriggers >= SESSION_MAX_TRIGGERS) {
        snprintf(err, errsz, "at most %d triggers per session", SESSION_MAX_TRIGGERS);
        return HT_EFULL;
    }
    const char *op = strchr(cond, '>');
    if (!op || strlen(cond) >= sizeof(s->triggers[0].text))
        goto bad;
    size_t nlen = (size_t)(op - cond);
    const char *val = op[1] == '=' ? op + 2 : op + 1;
    struct trigger *t = &s->triggers[s->ntriggers];
    memset(t, 0, sizeof(*t));
    t->metric = -1;
    for (unsigned i = 0; i < 4; i++)
        if (strlen(metrics[i].name) == nlen && strncasecmp(cond, metrics[i].name, nlen) == 0)
            t->metric = metrics[i].metric;
    if (t->metric < 0)
        goto bad;
    int rc = t->metric == TRIG_DURATION ? ht_parse_duration(val, &t->threshold)
                                        : ht_parse_size(val, &t->threshold);
    if (rc != 0)
        goto bad;
    /* "x>N" fires when the value passes N; "x>=N" when it reaches it. */
    t->next = op[1] == '=' ? t->threshold : t->threshold + 1;
    if (t->threshold == UINT64_MAX)
        t->next = UINT64_MAX; /* nothing passes it */
    snprintf(t->text, sizeof(t->text), "%s", cond);
    t->snapshot = snapshot;
    if (snapshot && every && (rc = parse_every(t, every, &t->every, err, errsz)) != 0)
        return rc;
    s->ntriggers++;
    return 0;
bad:
    snprintf(err, errsz,
             "bad condition \"%s\": expected private-bytes>SIZE, outstanding>SIZE, committed>SIZE "
             "or duration>TIME",
             cond);
    return HT_EBADARG;
}

int session_add_triggers(struct session *s, const cJSON *args, char *err, size_t errsz)
{
    const cJSON *every = cJSON_GetObjectItemCaseSensitive(args, "every");
    static const char *const keys[] = {"stop_when", "snapshot_when"};
    for (int k = 0; k < 2; k++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(args, keys[k]))
        {
            int rc = session_add_trigger(s, it->valuestring, k, every, err, errsz);
            if (rc)
                return rc;
        }
    }
    return 0;
}
