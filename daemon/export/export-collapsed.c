/* collapsed: flamegraph.pl's and speedscope's folded stacks, one line per
 * stack with one value. */
#include "export.h"

#include "query.h"

#include <cjson/cJSON.h>

static int64_t row_value(const cJSON *r, const struct export_value *ev)
{
    if (ev->field)
        return export_field(r, ev->field);
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r, "types");
    int64_t v = 0;
    for (int k = 0; k < 4; k++)
        if (ev->types & (1u << k))
            v += export_field(cJSON_GetObjectItemCaseSensitive(types, ht_type_names[k]), "size");
    return v;
}

/* flamegraph.pl / speedscope: "outer;...;inner value"; 1 made, 0 when the
 * row has no value, or an error. */
static int collapsed_line(const cJSON *r, const struct export_value *ev, struct ht_sbuf *line)
{
    int64_t v = row_value(r, ev);
    if (v <= 0)
        return 0;
    int rc = export_row_label(r, ";", 1, 0, line);
    if (rc == 0 && line->len == 0)
        rc = ht_sbuf_add(line, "[no stack]", 10);
    if (rc == 0)
        rc = export_sbuf_printf(line, " %lld", (long long)v);
    return rc == 0 ? 1 : rc;
}

static int collapsed_row(const struct export_value *v, const cJSON *row, uint32_t rank,
                         struct ht_sbuf *out)
{
    (void)rank;
    return collapsed_line(row, v, out);
}

/* No samples: the timeline has no stacks to fold. */
const struct export_format export_collapsed = {
    .name = "collapsed",
    .extension = ".folded",
    .mime = "text/plain",
    .rows = {NULL, NULL, collapsed_row},
    .has_value = 1,
    .title = "collapsed-stack",
};
