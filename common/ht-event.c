/* Names of event kinds, shared by the replay parser, the recorder and the ctl. */
#include "ht-event.h"

#include <string.h>

static const char *const kind_names[HT_EV_KIND_COUNT] = {[HT_EV_NONE] = NULL,
#define X(name, str) [HT_EV_##name] = str,
                                                         HT_EVENT_KIND_MAP(X)
#undef X
};

const char *ht_event_kind_name(int kind)
{
    if (kind <= HT_EV_NONE || kind >= HT_EV_KIND_COUNT)
        return NULL;
    return kind_names[kind];
}

int ht_event_kind_parse(const char *s, unsigned len)
{
    for (int k = HT_EV_NONE + 1; k < HT_EV_KIND_COUNT; k++) {
        if (strlen(kind_names[k]) == len && memcmp(kind_names[k], s, len) == 0)
            return k;
    }
    return HT_EV_NONE;
}
