/* heaptrack raw (+ interpreted) data to .htevb (see heaptrack-import.h for the line formats). */
#define _GNU_SOURCE /* getline */
#include "heaptrack-import.h"

#include "ht-alloc.h"
#include "ht-text.h"
#include "ht-event.h"
#include "htevb.h"
#include "stack-intern.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000ull
#define MAX_MODULES 4096

/* A growable array of T: append-only, doubled. */
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }
#define VEC_PUSH(vec, x)                                                                           \
    (((vec).n < (vec).cap || vec_grow((void **)&(vec).v, &(vec).cap, sizeof(*(vec).v)) == 0)       \
         ? ((vec).v[(vec).n++] = (x), 0)                                                           \
         : -1)

static int vec_grow(void **v, size_t *cap, size_t item)
{
    size_t ncap = *cap ? *cap * 2 : 1024;
    void *nv = ht_realloc(*v, ncap * item);
    if (!nv)
        return -1;
    *v = nv;
    *cap = ncap;
    return 0;
}

struct module {
    uint64_t bias, lo, hi;
    uint32_t path; /* string id in si */
    int seen;      /* listed since the last "m 1 -" */
};

/* One input stream: its current line, split into fields as it is read. */
struct input {
    FILE *f;
    char *line;
    size_t cap;
    size_t len;
    const char *p; /* parse position */
    uint64_t lineno;
};

struct importer {
    struct input raw, sym;
    int have_sym;
    FILE *out;
    int out_failed;
    struct stack_intern si;
    struct htevb_writer w;
    uint64_t pid, t;
    char exe[4096];
    /* Trace nodes (index = raw trace number - 1). */
    VEC(uint32_t) parent;
    VEC(uint64_t) ip;    /* its address (frames without names) */
    VEC(uint32_t) ipid;  /* the interpreted ip's number, 0 = none */
    VEC(uint32_t) stack; /* its stack id once built, 0 = not yet */
    /* Interpreted ips: frames[first[k] .. first[k+1]) are ip k+1's names. */
    VEC(uint32_t) first;
    VEC(uint64_t) names;
    VEC(uint32_t) strs; /* interpreted string N -> its id in si (0: none) */
    struct module mods[MAX_MODULES];
    unsigned nmods;
    int listing; /* inside a module list */
    struct heaptrack_import_stats *st;
    char *err;
    size_t errsz;
};

static int fail(struct importer *im, const struct input *in, const char *fmt, ...)
{
    int n = snprintf(im->err, im->errsz, "%s line %llu: ", in == &im->raw ? "raw" : "interpreted",
                     (unsigned long long)in->lineno);
    if (n > 0 && (size_t)n < im->errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(im->err + n, im->errsz - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The next line (without its newline): 1, 0 at the end. */
static int input_next(struct input *in)
{
    ssize_t n = getline(&in->line, &in->cap, in->f);
    if (n < 0)
        return 0;
    if (n > 0 && in->line[n - 1] == '\n')
        in->line[--n] = 0;
    in->len = (size_t)n;
    in->p = in->line + (n > 1 ? 2 : n); /* past the mode and its space */
    in->lineno++;
    return 1;
}

/* The next hex field: 1 with *v, 0 when the line has no more fields, -1 when
 * it is not hex (or longer than 16 digits). */
static int field_hex(struct input *in, uint64_t *v)
{
    const char *p = in->p;
    while (*p == ' ')
        p++;
    if (!*p) {
        in->p = p;
        return 0;
    }
    uint64_t x = 0;
    int digits = 0, d;
    for (; (d = ht_hexval((unsigned char)*p)) >= 0; p++, digits++)
        x = x << 4 | (uint64_t)d;
    if (digits == 0 || digits > 16 || (*p && *p != ' '))
        return -1;
    in->p = p;
    *v = x;
    return 1;
}

/* A sized string "LEN TEXT" (LEN hex): *s and *len, pointing into the line. */
static int field_str(struct input *in, const char **s, size_t *len)
{
    uint64_t n;
    if (field_hex(in, &n) != 1 || *in->p != ' ')
        return -1;
    const char *start = in->p + 1;
    if (n > (uint64_t)(in->line + in->len - start))
        return -1;
    *s = start;
    *len = (size_t)n;
    in->p = start + n;
    return 0;
}

static void out_cb(void *arg, const void *buf, size_t n)
{
    struct importer *im = arg;
    if (fwrite(buf, 1, n, im->out) != n)
        im->out_failed = 1;
}

static const char *base_name(const char *s, size_t len, size_t *blen)
{
    const char *b = s;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '/')
            b = s + i + 1;
    *blen = len - (size_t)(b - s);
    return b;
}

static int emit(struct importer *im, struct ht_event *ev)
{
    ev->t = im->t;
    if (htevb_write_event(&im->w, ev) != 0)
        return fail(im, &im->raw, "event not written (interner full or out of memory)");
    return 0;
}

/* --- modules ------------------------------------------------------------------------------- */

/* After a module list: those not listed again were unloaded. */
static int modules_end_list(struct importer *im)
{
    unsigned keep = 0;
    for (unsigned k = 0; k < im->nmods; k++) {
        if (im->mods[k].seen) {
            im->mods[keep++] = im->mods[k];
            continue;
        }
        struct ht_event ev = {0};
        ev.kind = HT_EV_MODULE_UNLOAD;
        ev.addr = im->mods[k].lo;
        if (emit(im, &ev) != 0)
            return -1;
    }
    im->nmods = keep;
    im->listing = 0;
    return 0;
}

static int module_line(struct importer *im)
{
    struct input *in = &im->raw;
    const char *name;
    size_t len;
    if (field_str(in, &name, &len) != 0)
        return fail(im, in, "bad module name");
    if (len == 1 && name[0] == '-') { /* the whole list follows again */
        im->listing = 1;
        for (unsigned k = 0; k < im->nmods; k++)
            im->mods[k].seen = 0;
        return 0;
    }
    if (len == 1 && name[0] == 'x') { /* the executable (libheaptrack: empty dlpi_name) */
        name = im->exe;
        len = strlen(im->exe);
    }
    uint64_t bias, va, sz, lo = UINT64_MAX, hi = 0;
    if (field_hex(in, &bias) != 1)
        return fail(im, in, "module without its address");
    int rc;
    while ((rc = field_hex(in, &va)) == 1) {
        if (field_hex(in, &sz) != 1)
            return fail(im, in, "module segment without its size");
        if (bias + va < lo)
            lo = bias + va;
        if (bias + va + sz > hi)
            hi = bias + va + sz;
    }
    if (rc < 0)
        return fail(im, in, "bad module segment");
    if (hi == 0) /* no PT_LOAD segment: nothing to map */
        return 0;
    uint32_t path = stack_intern_str(&im->si, name, (unsigned)len);
    for (unsigned k = 0; k < im->nmods; k++) {
        struct module *m = &im->mods[k];
        if (m->bias == bias && m->lo == lo && m->hi == hi && m->path == path) {
            m->seen = 1;
            return 0;
        }
    }
    if (im->nmods == MAX_MODULES)
        return fail(im, in, "more than %d modules", MAX_MODULES);
    im->mods[im->nmods++] = (struct module){bias, lo, hi, path, 1};
    im->st->modules++;
    struct ht_event ev = {0};
    ev.kind = HT_EV_MODULE_LOAD;
    ev.addr = lo;
    ev.size = hi - lo;
    ev.old_addr = bias;
    ev.heap = path;
    return emit(im, &ev);
}

/* --- the interpreted stream: names of ips ------------------------------------------------- */

static int sym_string(struct importer *im)
{
    const char *s;
    size_t len;
    if (field_str(&im->sym, &s, &len) != 0)
        return fail(im, &im->sym, "bad string");
    uint32_t id = stack_intern_str(&im->si, s, (unsigned)len);
    im->st->strings++;
    return VEC_PUSH(im->strs, id);
}

static const char *sym_text(struct importer *im, uint64_t n)
{
    if (n == 0 || n > im->strs.n)
        return NULL;
    return stack_intern_strget(&im->si, im->strs.v[n - 1]);
}

/* "module!function" as a name frame. */
static int push_name(struct importer *im, const char *mod, uint64_t fn)
{
    const char *f = sym_text(im, fn);
    if (!f)
        return fail(im, &im->sym, "function string %llx not defined", (unsigned long long)fn);
    size_t blen = 0;
    const char *b = mod ? base_name(mod, strlen(mod), &blen) : "";
    char buf[HT_STR_MAX_LEN];
    int n = snprintf(buf, sizeof(buf), "%.*s!%s", (int)blen, b, f);
    if (n < 0)
        return -1;
    unsigned len = (unsigned)n < sizeof(buf) ? (unsigned)n : (unsigned)sizeof(buf) - 1;
    uint32_t id = stack_intern_str(&im->si, buf, len);
    if (!id)
        return fail(im, &im->sym, "name not interned (cap)");
    return VEC_PUSH(im->names, HT_FRAME_SYM | id);
}

static int sym_ip(struct importer *im)
{
    struct input *in = &im->sym;
    uint64_t ip, mod, fn, file, line;
    if (field_hex(in, &ip) != 1 || field_hex(in, &mod) != 1)
        return fail(im, in, "bad ip line");
    if (VEC_PUSH(im->first, (uint32_t)im->names.n) != 0)
        return -1;
    im->st->ips++;
    const char *mtext = sym_text(im, mod);
    int rc = field_hex(in, &fn);
    if (rc == 1 && fn) {
        if (push_name(im, mtext, fn) != 0)
            return -1;
    }
    if (rc == 1 && (rc = field_hex(in, &file)) == 1 && (rc = field_hex(in, &line)) == 1) {
        /* The inlined frames, innermost first after the first. */
        while ((rc = field_hex(in, &fn)) == 1) {
            if (field_hex(in, &file) != 1 || field_hex(in, &line) != 1)
                return fail(im, in, "bad inlined frame");
            if (fn && push_name(im, mtext, fn) != 0)
                return -1;
        }
    }
    if (rc < 0)
        return fail(im, in, "bad ip line");
    return 0;
}

/* Read the interpreted stream up to its next trace node: the ip id of it and
 * its parent (which must be the raw one's). */
static int sym_next_trace(struct importer *im, uint64_t *ipid, uint64_t *parent)
{
    struct input *in = &im->sym;
    while (input_next(in)) {
        int rc = 0;
        switch (in->line[0]) {
        case 's':
            rc = sym_string(im);
            break;
        case 'i':
            rc = sym_ip(im);
            break;
        case 't':
            if (field_hex(in, ipid) != 1 || field_hex(in, parent) != 1)
                return fail(im, in, "bad trace line");
            return 0;
        default:
            break;
        }
        if (rc != 0)
            return -1;
    }
    return fail(im, in, "ended before the raw data's trace %zu", im->parent.n + 1);
}

/* --- traces and stacks --------------------------------------------------------------------- */

static int trace_line(struct importer *im)
{
    struct input *in = &im->raw;
    uint64_t ip, parent, ipid = 0, sparent;
    if (field_hex(in, &ip) != 1 || field_hex(in, &parent) != 1)
        return fail(im, in, "bad trace line");
    if (parent > im->parent.n)
        return fail(im, in, "trace parent %llx not defined", (unsigned long long)parent);
    if (im->have_sym) {
        if (sym_next_trace(im, &ipid, &sparent) != 0)
            return -1;
        if (sparent != parent)
            return fail(im, in,
                        "trace %zu: parent %llx, the interpreted stream says %llx (not the "
                        "same recording?)",
                        im->parent.n + 1, (unsigned long long)parent, (unsigned long long)sparent);
    }
    im->st->traces++;
    if (VEC_PUSH(im->parent, (uint32_t)parent) || VEC_PUSH(im->ip, ip) ||
        VEC_PUSH(im->ipid, (uint32_t)ipid) || VEC_PUSH(im->stack, 0u))
        return fail(im, in, "out of memory");
    return 0;
}

/* The frames of trace node n's ip into frames at depth *d (cut at the maximum). */
static int node_frames(struct importer *im, size_t n, uint64_t *frames, unsigned *d)
{
    uint32_t k = im->ipid.v[n];
    size_t from = 0, to = 0;
    if (k) {
        if (k > im->first.n)
            return fail(im, &im->sym, "ip %x not defined", k);
        from = im->first.v[k - 1];
        to = k < im->first.n ? im->first.v[k] : im->names.n;
    }
    if (from == to) { /* no name: the address */
        if (*d == HT_STACK_MAX_DEPTH)
            return 1;
        frames[(*d)++] = im->ip.v[n];
        return 0;
    }
    for (size_t j = from; j < to; j++) {
        if (*d == HT_STACK_MAX_DEPTH)
            return 1;
        frames[(*d)++] = im->names.v[j];
    }
    return 0;
}

/* The stack id of trace node number tr (from 1), built once; flags gets
 * HT_EVF_TRUNCATED when it was cut. */
static int trace_stack(struct importer *im, uint64_t tr, uint32_t *id, uint8_t *flags)
{
    *id = 0;
    *flags = 0;
    if (tr == 0)
        return 0;
    if (tr > im->parent.n)
        return fail(im, &im->raw, "trace %llx not defined", (unsigned long long)tr);
    uint32_t *cached = &im->stack.v[tr - 1];
    if (*cached) {
        *id = *cached & ~(1u << 31);
        *flags = *cached >> 31 ? HT_EVF_TRUNCATED : 0;
        return 0;
    }
    uint64_t frames[HT_STACK_MAX_DEPTH];
    unsigned d = 0;
    int cut = 0;
    for (size_t n = tr; n && !cut; n = im->parent.v[n - 1]) {
        int rc = node_frames(im, n - 1, frames, &d);
        if (rc < 0)
            return -1;
        cut = rc;
    }
    uint32_t before = im->si.nstacks;
    *id = stack_intern_get(&im->si, frames, d);
    if (!*id)
        return fail(im, &im->raw, "stack not interned (cap)");
    if (im->si.nstacks != before)
        im->st->stacks++;
    if (cut) {
        *flags = HT_EVF_TRUNCATED;
        im->st->truncated++;
    }
    *cached = *id | (cut ? 1u << 31 : 0);
    return 0;
}

/* --- the raw stream ------------------------------------------------------------------------ */

static int alloc_line(struct importer *im)
{
    struct input *in = &im->raw;
    uint64_t size, tr, ptr;
    if (field_hex(in, &size) != 1 || field_hex(in, &tr) != 1 || field_hex(in, &ptr) != 1)
        return fail(im, in, "bad allocation line");
    struct ht_event ev = {0};
    ev.kind = HT_EV_ALLOC;
    ev.addr = ptr;
    ev.size = size;
    if (trace_stack(im, tr, &ev.stack, &ev.flags) != 0)
        return -1;
    im->st->allocs++;
    return emit(im, &ev);
}

static int free_line(struct importer *im)
{
    uint64_t ptr;
    if (field_hex(&im->raw, &ptr) != 1)
        return fail(im, &im->raw, "bad free line");
    struct ht_event ev = {0};
    ev.kind = HT_EV_FREE;
    ev.addr = ptr;
    im->st->frees++;
    return emit(im, &ev);
}

static int exe_line(struct importer *im)
{
    const char *s;
    size_t len;
    if (field_str(&im->raw, &s, &len) != 0 || len >= sizeof(im->exe))
        return fail(im, &im->raw, "bad executable line");
    memcpy(im->exe, s, len);
    im->exe[len] = 0;
    size_t blen;
    const char *b = base_name(s, len, &blen);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)blen, b);
    htevb_write_process(&im->w, im->t, im->pid, name);
    return 0;
}

static int raw_line(struct importer *im)
{
    struct input *in = &im->raw;
    char mode = in->len ? in->line[0] : 0;
    if (im->listing && mode != 'm' && modules_end_list(im) != 0)
        return -1;
    switch (mode) {
    case '+':
        return alloc_line(im);
    case '-':
        return free_line(im);
    case 't':
        return trace_line(im);
    case 'c': {
        uint64_t ms;
        if (field_hex(in, &ms) != 1)
            return fail(im, in, "bad time line");
        im->t = ms * NS_PER_MS;
        im->st->last_ms = ms;
        return 0;
    }
    case 'm':
        return module_line(im);
    case 'x':
        return exe_line(im);
    case 'v': {
        uint64_t version, format;
        if (field_hex(in, &version) != 1 || field_hex(in, &format) != 1 || format < 3)
            return fail(im, in, "file format before 3 (no sized strings): not read");
        return 0;
    }
    default: /* X I R A S: nothing the events carry */
        im->st->skipped++;
        return 0;
    }
}

int heaptrack_import(FILE *raw, FILE *sym, FILE *out, uint64_t pid,
                     struct heaptrack_import_stats *st, char *err, size_t errsz)
{
    struct importer *im = ht_calloc(1, sizeof(*im));
    if (!im) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    memset(st, 0, sizeof(*st));
    im->raw.f = raw;
    im->sym.f = sym;
    im->have_sym = sym != NULL;
    im->out = out;
    im->pid = pid;
    im->st = st;
    im->err = err;
    im->errsz = errsz;
    int rc = -1;
    if (stack_intern_init(&im->si, 1u << 26, 1u << 26) != 0) {
        snprintf(err, errsz, "out of memory");
        goto done_free;
    }
    rc = htevb_writer_init(&im->w, &im->si, out_cb, im);
    if (rc != 0)
        snprintf(err, errsz, "out of memory for the .htevb writer");
    while (rc == 0 && input_next(&im->raw)) {
        st->lines++;
        rc = raw_line(im);
    }
    if (rc == 0 && im->listing)
        rc = modules_end_list(im);
    if (rc == 0 && (im->out_failed || ferror(out)))
        rc = fail(im, &im->raw, "write failed");
    if (rc == 0 && ferror(raw))
        rc = fail(im, &im->raw, "read failed");
    htevb_writer_close(&im->w);
    stack_intern_close(&im->si);
done_free:
    ht_free(im->parent.v);
    ht_free(im->ip.v);
    ht_free(im->ipid.v);
    ht_free(im->stack.v);
    ht_free(im->first.v);
    ht_free(im->names.v);
    ht_free(im->strs.v);
    free(im->raw.line);
    free(im->sym.line);
    ht_free(im);
    return rc;
}
