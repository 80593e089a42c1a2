/* What the line formats share: labels, values, lines (the table: export-table.c). */
#include "export.h"

#include "ht-error.h"
#include "query-args.h"
#include "query.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int64_t export_field(const cJSON *row, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* The value of --type's mask with no --sort, one per mask (a reply's
 * formatter keeps a pointer to it while the rows stream). */
static const struct export_value type_values[16] = {
    {NULL, 0}, {NULL, 1}, {NULL, 2},  {NULL, 3},  {NULL, 4},  {NULL, 5},  {NULL, 6},  {NULL, 7},
    {NULL, 8}, {NULL, 9}, {NULL, 10}, {NULL, 11}, {NULL, 12}, {NULL, 13}, {NULL, 14}, {NULL, 15}};

/* The figure each sort key sorts by. */
static const struct export_value sort_values[] = {{"outstanding", 0}, {"outstanding_count", 0},
                                                  {"size", 0},        {"count", 0},
                                                  {"reallocs", 0},    {"impacting", 0}};

static const struct export_value *sort_value(const char *sort)
{
    static const char *const keys[] = {"so", "soc", "st", "stc", "src", "impact"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (!strcmp(sort, keys[k]))
            return &sort_values[k];
    return &sort_values[0];
}

int export_value_of(const cJSON *args, const struct export_value **out, char *err, size_t errsz)
{
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(args, "sort");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(args, "type");
    unsigned mask;
    *out = sort_value(so ? so->valuestring : "so");
    if (so || !ty)
        return 0;
    int rc = qargs_types(ty, &mask, err, errsz);
    if (rc == 0)
        *out = &type_values[mask & 15];
    return rc;
}

/* One frame into a label: ';' separates frames in collapsed stacks, '"' is
 * doubled inside a CSV field. */
static int label_frame(struct ht_sbuf *out, const char *f, int csv)
{
    int rc = 0;
    for (const char *p = f, *q; rc == 0 && *p; p = q) {
        q = p + strcspn(p, csv ? "\"" : ";");
        rc = ht_sbuf_add(out, p, (size_t)(q - p));
        if (rc == 0 && *q)
            rc = ht_sbuf_add(out, csv ? "\"\"" : ":", csv ? 2 : 1);
        q += *q != '\0';
    }
    return rc;
}

/* A buffer grows up to HT_REPLY_MAX: nothing is cut silently. */
int export_row_label(const cJSON *row, const char *sep, int outermost_first, int csv,
                     struct ht_sbuf *out)
{
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(row, "frames");
    if (!frames) {
        static const char *const keys[] = {"frame", "image", "heap", "type"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, keys[k]);
            if (cJSON_IsString(v))
                return label_frame(out, v->valuestring, csv);
        }
        return 0;
    }
    /* cJSON keeps the last item in child->prev: walk either way in one pass. */
    const cJSON *first = frames->child;
    const cJSON *f = outermost_first && first ? first->prev : first;
    int rc = 0;
    for (int i = 0; f && rc == 0; i++) {
        if (i)
            rc = ht_sbuf_add(out, sep, strlen(sep));
        if (rc == 0 && cJSON_IsString(f))
            rc = label_frame(out, f->valuestring, csv);
        f = outermost_first ? (f == first ? NULL : f->prev) : f->next;
    }
    return rc;
}

int export_sbuf_printf(struct ht_sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    return n < 0 ? HT_ENOMEM
                 : ht_sbuf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

void export_value_name(const struct export_value *ev, char *buf, size_t n)
{
    if (ev->field) {
        snprintf(buf, n, "%s", ev->field);
        return;
    }
    size_t len = 0;
    for (int k = 0; k < 4 && len < n; k++)
        if (ev->types & (1u << k))
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "+" : "", ht_type_names[k]);
    if (len < n)
        snprintf(buf + len, n - len, " size");
}

int export_line_item(const char *line, struct ht_sbuf *out)
{
    cJSON *s = cJSON_CreateString(line);
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    int rc = text ? ht_sbuf_add(out, text, strlen(text)) : HT_ENOMEM;
    cJSON_free(text);
    return rc == 0 ? 1 : rc;
}

#define NSORTS (sizeof(sort_values) / sizeof(sort_values[0]))
#define NTYPES (sizeof(type_values) / sizeof(type_values[0]))
_Static_assert(1 + NSORTS + NTYPES <= EXPORT_VALUE_SLOTS, "export.h: EXPORT_VALUE_SLOTS too small");

size_t export_value_slot(const struct export_value *v)
{
    if (v >= sort_values && v < sort_values + NSORTS)
        return 1 + (size_t)(v - sort_values);
    if (v >= type_values && v < type_values + NTYPES)
        return 1 + NSORTS + (size_t)(v - type_values);
    return 0;
}

int export_bound_item(const void *arg, const cJSON *row, uint32_t rank, struct ht_sbuf *out)
{
    const struct export_bound *b = arg;
    struct ht_sbuf line = {0};
    int rc = b->w->row(b->v, row, rank, &line);
    if (rc == 1)
        rc = export_line_item(line.p, out);
    ht_sbuf_free(&line);
    return rc;
}

int export_lines_add(const struct export_bound *b, const cJSON *rows, cJSON *lines)
{
    if (b->w->begin)
        cJSON_AddItemToArray(lines, cJSON_CreateString(b->w->begin));
    struct ht_sbuf line = {0};
    uint32_t rank = 0;
    int rc = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        line.len = 0;
        rc = b->w->row(b->v, r, ++rank, &line);
        if (rc < 0)
            break;
        if (rc == 1)
            cJSON_AddItemToArray(lines, cJSON_CreateString(line.p));
    }
    ht_sbuf_free(&line);
    return rc < 0 ? rc : 0;
}
