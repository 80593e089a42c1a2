/* From request arguments to an engine query, and from its result to reply JSON. */
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

/* Reply data for a query result (rows with symbolized frames, totals,
 * completeness, data quality). */
struct cJSON *query_result_json(struct session *s, const struct query *q,
                                const struct query_result *res);
/* One row of a result as reply JSON (rows are also sent one at a time),
 * its frames named through si: the session's interner on the loop, or a
 * view's (ev_stacks) on the view's thread. */
struct stack_intern;
struct cJSON *query_row_json(const struct stack_intern *si, const struct query *q,
                             const struct query_result *res, const struct query_row *r);
/* All rows of a result as a JSON array (NULL: out of memory). */
struct cJSON *query_rows_json(const struct stack_intern *si, const struct query *q,
                              const struct query_result *res);
/* The session's data-quality counters. */
struct cJSON *quality_json(struct session *s);

#endif
