/* From request arguments to an engine query (query-render.h: from its result to reply JSON). */
#ifndef QUERY_ARGS_H
#define QUERY_ARGS_H

#include "config.h"
#include "query.h"

#include <stddef.h>

struct cJSON;
struct session;
struct ht_config;

/* Patterns a request may give: --require, and --cull with --cull-list
 * together (a request is at most HT_REQUEST_MAX bytes besides). More is
 * refused, never cut. */
#define QARGS_MAX_PATTERNS 1024

/* A query with the patterns it points to (they point into args, which must
 * outlive the query). The default cull list has room of its own. */
struct qargs {
    struct query q;
    struct frame_pat require[QARGS_MAX_PATTERNS];
    struct frame_pat cull[QARGS_MAX_PATTERNS + HT_CULL_DEFAULT_MAX];
    int has_range;
};

/* Fill qa from args for the session. 0 or HT_EBADARG/HT_ENOMARK with err. */
int qargs_parse(struct qargs *qa, struct session *s, const struct ht_config *cfg,
                const struct cJSON *args, int domain, char *err, size_t errsz);
/* A --type list ("AIFI", "AIFO,AOFO", ...) as a mask of 1 << ht_itype.
 * 0 or HT_EBADARG with err. */
int qargs_types(const struct cJSON *v, unsigned *types, char *err, size_t errsz);
/* "A:B" into [t1, t2]: bounds are durations from the start ("10s"), "start",
 * "now", marks, or "-60s" from now. */
int range_parse(struct session *s, const char *text, uint64_t *t1, uint64_t *t2, char *err,
                size_t errsz);

/* Most callers of the parser render its result too: they include this header alone. */
#include "query-render.h"

#endif
