/* From a query result to reply JSON. */
#ifndef QUERY_RENDER_H
#define QUERY_RENDER_H

#include "query.h"

struct cJSON;
struct session;
struct stack_intern;

/* Reply data for a query result (rows with symbolized frames, totals,
 * completeness, data quality). */
struct cJSON *query_result_json(struct session *s, const struct query *q,
                                const struct query_result *res);
/* One row of a result as reply JSON (rows are also sent one at a time),
 * its frames named through si: the session's interner on the loop, or a
 * view's (ev_stacks) on the view's thread. */
struct cJSON *query_row_json(const struct stack_intern *si, const struct query *q,
                             const struct query_result *res, const struct query_row *r);
/* All rows of a result as a JSON array (NULL: out of memory). */
struct cJSON *query_rows_json(const struct stack_intern *si, const struct query *q,
                              const struct query_result *res);

#endif
