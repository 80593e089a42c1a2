/* The export formats' table: every format by name, for the export command
 * and its messages. It names the formats; they use export.c, never it. */
#include "export.h"

#include <stdio.h>
#include <string.h>

/* Every format, in the order messages list them. */
static const struct export_format *const formats[] = {&export_json, &export_csv, &export_collapsed
#ifdef HEAPTRACE_WITH_PPROF
                                                      ,
                                                      &export_pprof
#endif
};
#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

const struct export_format *export_format_find(const char *name)
{
    for (size_t i = 0; i < NFORMATS; i++)
        if (!strcmp(formats[i]->name, name))
            return formats[i];
    return NULL;
}

/* Names of the formats (with samples: those that have a form for them), as
 * "a, b or c". */
static const char *names_of(char *buf, size_t n, int samples)
{
    const struct export_format *pick[NFORMATS];
    size_t k = 0, len = 0;
    for (size_t i = 0; i < NFORMATS; i++)
        if (!samples || formats[i]->json || formats[i]->samples.row)
            pick[k++] = formats[i];
    buf[0] = '\0';
    for (size_t i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s",
                                i == 0       ? ""
                                : i + 1 == k ? " or "
                                             : ", ",
                                pick[i]->name);
    return buf;
}

const char *export_format_names(char *buf, size_t n)
{
    return names_of(buf, n, 0);
}

const char *export_sample_format_names(char *buf, size_t n)
{
    return names_of(buf, n, 1);
}

/* Every pair export_bind can give: [format][rows, samples][no value, a
 * sort's figure, a type mask]. Filled on the loop thread only. */
static struct export_bound bound[NFORMATS][2][EXPORT_VALUE_SLOTS];

const struct export_bound *export_bind(const struct export_format *f, int samples,
                                       const struct export_value *v)
{
    size_t fi = 0, vi = export_value_slot(v);
    while (fi + 1 < NFORMATS && formats[fi] != f)
        fi++;
    struct export_bound *b = &bound[fi][samples != 0][vi];
    b->w = samples ? &f->samples : &f->rows;
    b->v = vi ? v : NULL;
    return b;
}
