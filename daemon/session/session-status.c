/* What a session shows of itself: its input's figures, its process line
 * (session.h). */
#include "session.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

size_t session_process_line(struct session *s, uint64_t t, char *buf, size_t cap)
{
    /* The name lives in the session, not in the fixed-size event. */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "t", (double)t);
    cJSON_AddStringToObject(o, "ev", "process");
    cJSON_AddNumberToObject(o, "pid", (double)s->eng.pid);
    cJSON_AddStringToObject(o, "name", s->process_name);
    if (s->stream_wall[0])
        cJSON_AddStringToObject(o, "wall", s->stream_wall);
    int ok = cJSON_PrintPreallocated(o, buf, (int)cap - 1, 0);
    cJSON_Delete(o);
    if (!ok)
        return 0;
    size_t n = strlen(buf);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    return n + 1;
}

cJSON *session_ingest_json(struct session *s)
{
    session_stats_refresh(s);
    const struct source_stats *in = &s->ingest;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bytes", (double)in->bytes);
    cJSON_AddNumberToObject(o, "lines", (double)in->lines);
    cJSON_AddNumberToObject(o, "events", (double)in->events);
    cJSON_AddNumberToObject(o, "malformed", (double)in->malformed);
    cJSON_AddNumberToObject(o, "lost", (double)in->lost); /* what the source knows it lost */
    if (s->input_dropped)
        cJSON_AddNumberToObject(o, "dropped_bytes", (double)s->input_dropped);
    cJSON *errs = cJSON_AddArrayToObject(o, "errors");
    for (uint32_t i = 0; i < in->nerrors; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "line", (double)in->errors[i].line);
        cJSON_AddStringToObject(e, "msg", in->errors[i].msg);
        cJSON_AddItemToArray(errs, e);
    }
    return o;
}
