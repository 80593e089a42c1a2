/* pprof: a query's rows as a gzip'd profile.proto (pprof.h), the format the
 * pprof tool and continuous profilers read. Live rows keep their frames'
 * addresses and the modules holding them (a backend can symbolize); a
 * snapshot's rows (JSON, names only) give name-only locations. */
#include "export.h"

#include "frame-match.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "modules.h"
#include "pprof.h"
#include "query.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* A binary format: export-pprof.c makes the whole profile (export_pprof_*),
 * no line form. */
const struct export_format export_pprof = {
    .name = "pprof",
    .extension = "pb.gz",
    .mime = "application/octet-stream",
    .binary = 1,
    .title = "pprof",
};

/* The function a frame text names, in place: "module!symbol" without the
 * "+0xOFF" into it (the name stacks --by frame groups by); the whole text
 * when it names none (an address, "module!+0xOFF"). */
static const char *function_name(char *text)
{
    size_t len = frame_function_len(text);
    if (len)
        text[len] = '\0';
    return text;
}

static void row_values(const struct query_row *r, int64_t v[PPROF_NVALUES])
{
    v[PPROF_ALLOC_OBJECTS] = (int64_t)query_row_count(r);
    v[PPROF_ALLOC_SPACE] = (int64_t)query_row_size(r);
    v[PPROF_INUSE_OBJECTS] = (int64_t)query_row_outstanding_count(r);
    v[PPROF_INUSE_SPACE] = (int64_t)query_row_outstanding(r);
}

/* A module's base is its mapping of file offset 0 (the lowest mapping of
 * an ELF object, daemon/sys/procmaps.h; a PE image's base): pprof's
 * file_offset of the mapping's start is then 0, and pprof places the
 * segments from the file's program headers. */
int export_pprof_modules(struct pprof *p, const struct stack_intern *si,
                         const struct module_table *mt)
{
    for (uint32_t i = 0; mt && i < mt->n; i++) {
        const struct module *m = &mt->v[i];
        const char *path = m->path ? stack_intern_strget(si, m->path) : NULL;
        const char *bid = m->build_id ? stack_intern_strget(si, m->build_id) : NULL;
        if (pprof_mapping(p, m->base, m->base + m->size, 0, path, bid) != 0)
            return HT_ENOMEM;
    }
    return 0;
}

/* Every frame name lives in names (FRAME_TEXT_MAX each) while the sample is added. */
static int add_row(struct pprof *p, const struct stack_intern *si, const struct query_row *r,
                   struct pprof_frame *fr, char (*names)[FRAME_TEXT_MAX])
{
    unsigned d;
    const uint64_t *f = stack_intern_frames(si, r->stack, &d);
    unsigned n = 0;
    for (unsigned k = r->skip; f && k < d; k++, n++) {
        const char *text = frame_text(si, f[k], names[n], FRAME_TEXT_MAX);
        if (text != names[n])
            snprintf(names[n], FRAME_TEXT_MAX, "%s", text);
        fr[n].has_addr = !(f[k] & HT_FRAME_SYM);
        fr[n].addr = fr[n].has_addr ? f[k] : 0;
        fr[n].func = function_name(names[n]);
        fr[n].file = NULL;
    }
    int64_t v[PPROF_NVALUES];
    row_values(r, v);
    return pprof_sample(p, fr, n, v);
}

int export_pprof_rows(struct pprof *p, const struct stack_intern *si,
                      const struct query_result *res)
{
    struct pprof_frame *fr = ht_calloc(HT_STACK_MAX_DEPTH, sizeof(*fr));
    char(*names)[FRAME_TEXT_MAX] = ht_malloc(HT_STACK_MAX_DEPTH * FRAME_TEXT_MAX);
    int rc = fr && names ? 0 : HT_ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < res->nrows; i++)
        rc = add_row(p, si, &res->rows[i], fr, names);
    ht_free(fr);
    ht_free(names);
    return rc;
}

int export_pprof_json(const cJSON *rows, struct pprof **out)
{
    struct pprof *p = pprof_new();
    struct pprof_frame *fr = ht_calloc(HT_STACK_MAX_DEPTH, sizeof(*fr));
    char(*names)[FRAME_TEXT_MAX] = ht_malloc(HT_STACK_MAX_DEPTH * FRAME_TEXT_MAX);
    int rc = p && fr && names ? 0 : HT_ENOMEM;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        if (rc != 0)
            break;
        const cJSON *frames = cJSON_GetObjectItemCaseSensitive(r, "frames"), *f;
        unsigned n = 0;
        cJSON_ArrayForEach(f, frames)
        {
            if (n < HT_STACK_MAX_DEPTH && cJSON_IsString(f)) {
                snprintf(names[n], FRAME_TEXT_MAX, "%s", f->valuestring);
                fr[n].has_addr = 0;
                fr[n].func = function_name(names[n]);
                fr[n++].file = NULL;
            }
        }
        int64_t v[PPROF_NVALUES] = {export_field(r, "count"), export_field(r, "size"),
                                    export_field(r, "outstanding_count"),
                                    export_field(r, "outstanding")};
        rc = pprof_sample(p, fr, n, v);
    }
    ht_free(fr);
    ht_free(names);
    if (rc != 0) {
        pprof_free(p);
        return rc;
    }
    *out = p;
    return 0;
}
