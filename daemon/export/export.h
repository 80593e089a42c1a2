/* Export formats: one table, one file each (export-*.c), used by the export
 * command for live queries, the timeline and snapshots alike. A format turns
 * rows (a query's, as JSON objects) or the timeline's samples into its
 * output; it knows nothing of clients or sessions. */
#ifndef EXPORT_H
#define EXPORT_H

#include "ht-proto.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* What a collapsed line's value is: a sort key's figure (field), or with
 * --type the size each named type measures, summed (types: a mask of
 * 1 << ht_itype): AIFI and AIFO the size allocated in the window, AOFI the
 * size freed in it, AOFO the size still outstanding from before it. */
struct export_value {
    const char *field;
    unsigned types;
};

/* One row (or sample) into out: 1 made, 0 when the row has none (a
 * collapsed stack of value 0), or an error. rank counts from 1. */
typedef int (*export_row_fn)(const struct export_value *v, const struct cJSON *row, uint32_t rank,
                             struct ht_sbuf *out);

/* How a format writes one kind of row: the line before them (begin, NULL for
 * none; begin_item is it as a JSON string, EXPORT_BEGIN makes both), then
 * each row's line. */
struct export_writer {
    const char *begin, *begin_item;
    export_row_fn row;
};
/* A begin line with nothing JSON escapes ('"', '\\', control bytes). */
#define EXPORT_BEGIN(line) line, "\"" line "\""

struct export_format {
    const char *name;      /* --format's value */
    const char *extension; /* of a file holding it */
    const char *mime;
    /* Rows as the query's JSON, the result whole ({"format","result"}); else
     * one text line per row ({"format","lines"}). */
    int json;
    /* The line form (json: unused). A writer without row: the format has no
     * form for that data (the timeline has no collapsed stacks). */
    struct export_writer rows, samples;
    /* The value each line carries (the collapsed stacks' one number). */
    int has_value;
    /* What the format is called in a message ("collapsed-stack"). */
    const char *title;
    /* Bytes, not text: the whole output is made at once (export_pprof_*)
     * and sent as a byte stream; no line or JSON form. */
    int binary;
};

extern const struct export_format export_json, export_csv, export_collapsed;
#ifdef HEAPTRACE_WITH_PPROF
extern const struct export_format export_pprof;
struct module_table;
struct pprof;
struct query_result;
struct stack_intern;
/* pprof (export-pprof.c, into a profile of pprof.h): the engine's modules
 * as mappings (added before any sample); a live query's rows, frames with
 * their addresses (0, or HT_ENOMEM); or a snapshot's rows (JSON: frames are
 * names) as a new profile, 0 and *out (pprof_free frees it), or HT_ENOMEM. */
int export_pprof_modules(struct pprof *p, const struct stack_intern *si,
                         const struct module_table *mt);
int export_pprof_rows(struct pprof *p, const struct stack_intern *si,
                      const struct query_result *res);
int export_pprof_json(const struct cJSON *rows, struct pprof **out);

#endif

/* A format by --format's value, or NULL. */
const struct export_format *export_format_find(const char *name);
/* The table's names for a message: "json, csv or collapsed". */
const char *export_format_names(char *buf, size_t n);
/* The formats with a form for samples, for a message: "csv or json". */
const char *export_sample_format_names(char *buf, size_t n);

/* The value of a collapsed export: --sort's figure when given, else with
 * --type the size those types measure, else the default sort's
 * (outstanding). 0 or HT_EBADARG (a bad --type) with err. */
int export_value_of(const struct cJSON *args, const struct export_value **out, char *err,
                    size_t errsz);
/* The value's name for the reply ("outstanding", "AIFI+AIFO size"). */
void export_value_name(const struct export_value *ev, char *buf, size_t n);

/* One line as a JSON string item of a reply's "lines" array: 1, or an error. */
int export_line_item(const char *line, struct ht_sbuf *out);

/* A value's place among those export_bind keeps a writer for (0: none). */
#define EXPORT_VALUE_SLOTS 32
size_t export_value_slot(const struct export_value *v);
/* A writer and the value its lines carry, bound for a reply that streams
 * after its request is gone: static, one per pair (export_bind). */
struct export_bound {
    const struct export_writer *w;
    const struct export_value *v;
};
/* f's writer of rows (samples: of the timeline's samples) bound to v (from
 * export_value_of, or NULL). */
const struct export_bound *export_bind(const struct export_format *f, int samples,
                                       const struct export_value *v);
/* A reply's row formatter (reply_fmt_fn): arg an export_bound; the row's
 * line as a JSON string item. 1 added, 0 none, or an error. */
int export_bound_item(const void *arg, const struct cJSON *row, uint32_t rank, struct ht_sbuf *out);
/* The lines of rows (a JSON array) added to lines (a JSON array), as a
 * stream of them would carry them. 0, or an error. */
int export_lines_add(const struct export_bound *b, const struct cJSON *rows, struct cJSON *lines);

/* Helpers of the line formats (export.c). */
int64_t export_field(const struct cJSON *row, const char *key);
/* The row's label: its frames (outermost first, joined by sep) or its key,
 * whole. csv doubles '"' inside; otherwise ';' becomes ':'. */
int export_row_label(const struct cJSON *row, const char *sep, int outermost_first, int csv,
                     struct ht_sbuf *out);
int export_sbuf_printf(struct ht_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct module_table;
struct pprof;
struct query_result;
struct stack_intern;
/* pprof (export-pprof.c, into a profile of pprof.h): the engine's modules
 * as mappings (added before any sample); a live query's rows, frames with
 * their addresses (0, or HT_ENOMEM); or a snapshot's rows (JSON: frames are
 * names) as a new profile, 0 and *out (pprof_free frees it), or HT_ENOMEM. */
int export_pprof_modules(struct pprof *p, const struct stack_intern *si,
                         const struct module_table *mt);
int export_pprof_rows(struct pprof *p, const struct stack_intern *si,
                      const struct query_result *res);
int export_pprof_json(const struct cJSON *rows, struct pprof **out);

#endif
