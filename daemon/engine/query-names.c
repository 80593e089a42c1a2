/*
 * A query's vocabulary (query.h): the names of its groupings, sort keys and
 * types, and the query that filters nothing, which every part of the
 * engine's queries starts from.
 */
#include "query.h"

#include <string.h>

const char *const ht_by_names[] = {"stack", "frame", "image", "heap", "type", NULL};
const char *const ht_sort_names[] = {"so", "soc", "st", "stc", "src", "impact", NULL};
const char *const ht_type_names[] = {"AIFI", "AIFO", "AOFI", "AOFO", NULL};

void query_init(struct query *q)
{
    memset(q, 0, sizeof(*q));
    q->t2 = UINT64_MAX;
    q->types = HT_TYPES_ALL;
    q->size_max = UINT64_MAX;
    q->life_max = UINT64_MAX;
}
