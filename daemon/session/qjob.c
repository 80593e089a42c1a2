/* Query jobs: made, freed, and what a failure means (qjob.h). */
#include "qjob.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <cjson/cJSON.h>
#include <uv.h>

struct qjob *qjob_new(struct session *s, const char *what)
{
    struct qjob *j = ht_calloc(1, sizeof(*j));
    if (j) {
        j->s = s;
        j->what = what;
    }
    return j;
}

void qjob_free(struct qjob *j)
{
    if (!j)
        return;
    /* Never leave a client waiting for an answer that will not come. */
    if (j->c && j->detach)
        j->detach(j);
    for (unsigned i = 0; i < j->nq; i++) {
        query_result_free(&j->res[i]);
        ht_free(j->qa[i]);
        cJSON_Delete(j->rows[i]);
        ht_free(j->rows_text[i]);
    }
    cJSON_Delete(j->args);
    if (j->release)
        j->release(j->arg);
    ht_free(j);
}

const char *qjob_failure_text(int rc)
{
    switch (rc) {
    case UV_ENOMEM:
    case HT_ENOMEM:
        return "out of memory running the query";
    case HT_ENOSESSION:
        return "the session was dropped before its query ended";
    case UV_ECANCELED:
        return "the daemon is stopping";
    default:
        return "the query failed";
    }
}
