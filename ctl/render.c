/* Human output: WPA-style tables, caller-to-callee trees, status, timeline and the live top view.
 */
#include "ctl.h"
#include "term.h"

#include "ht-proto.h"
#include "ht-text.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

const char *ctl_text(const char *s)
{
    /* A few calls share one printf: a ring of buffers, each kept and grown
     * to its largest use (4 bytes out per byte in at most: "\xNN"). */
    static char *ring[16];
    static size_t caps[16];
    static unsigned next;
    unsigned i = next++ % 16;
    size_t need = strlen(s) * 4 + 1;
    if (caps[i] < need) {
        char *nb = realloc(ring[i], need);
        if (!nb)
            return "(out of memory)";
        ring[i] = nb;
        caps[i] = need;
    }
    ht_text_escape(s, ring[i], caps[i]);
    return ring[i];
}

/* Strings of a reply, escaped: names come from traced programs and streams. */
static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? ctl_text(v->valuestring) : "";
}

static const char *sz(double v, char *buf)
{
    return ht_format_ssize((int64_t)v, buf, 24);
}

static const char *tm(double v, char *buf)
{
    return ht_format_time((uint64_t)v, buf, 32);
}

static const char *commas(double v, char *buf)
{
    char tmp[32];
    snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
    size_t n = strlen(tmp), o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_json(const cJSON *d)
{
    char *s = cJSON_Print(d);
    if (s) {
        puts(s);
        cJSON_free(s);
    }
}

/* Cut s to width columns with "..." at the end, between UTF-8 sequences
 * (a column per character: the escapes of ctl_text are plain ASCII). */
static void cut_to_width(struct ht_sbuf *s, size_t width)
{
    size_t cols = 0, i = 0, keep = 0;
    for (; i < s->len; i++) {
        if (((unsigned char)s->p[i] & 0xc0) == 0x80)
            continue;
        if (cols == width - 3)
            keep = i;
        cols++;
    }
    if (cols <= width || width < 4)
        return;
    memcpy(s->p + keep, "...", 4);
    s->len = keep + 3;
}

/* "leaf <- caller <- ..." whole, or cut to width columns (0: never cut).
 * Kept in one buffer: valid until the next call. */
static const char *stack_label(const cJSON *row, size_t width)
{
    static struct ht_sbuf out;
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(row, "frames");
    out.len = 0;
    ht_sbuf_add(&out, "", 0);
    if (!frames) {
        static const char *const keys[] = {"frame", "image", "heap", "type"};
        for (int k = 0; k < 4; k++)
            if (cJSON_GetObjectItemCaseSensitive(row, keys[k])) {
                const char *v = str(row, keys[k]);
                out.len = 0;
                ht_sbuf_add(&out, v, strlen(v));
            }
    } else if (!frames->child) {
        ht_sbuf_add(&out, "[no stack]", 10);
    }
    const cJSON *f;
    int i = 0;
    cJSON_ArrayForEach(f, frames)
    {
        const char *name = cJSON_IsString(f) ? ctl_text(f->valuestring) : "?";
        if ((i++ && ht_sbuf_add(&out, " <- ", 4) != 0) || ht_sbuf_add(&out, name, strlen(name)))
            break; /* past HT_REPLY_MAX: what fits */
    }
    if (width)
        cut_to_width(&out, width);
    return out.p ? out.p : "";
}

/* Columns left for the stack after a table's fixed columns: the rest of the
 * terminal's width (at least 20), or 0 (no cut) when not on a terminal. */
static size_t label_width(size_t fixed)
{
    size_t cols = (size_t)term_columns();
    if (cols == 0)
        return 0;
    return cols > fixed + 20 ? cols - fixed : 20;
}

/* A sampled session's line: every figure below is an estimate. */
static void render_sampled(const cJSON *q)
{
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(q, "sampled");
    char a[32];
    if (!sm)
        return;
    if (num(sm, "mean_bytes") > 0)
        printf("sampled: mean %s, figures are estimates", sz(num(sm, "mean_bytes"), a));
    else
        printf("sampled: exact now (every block), earlier figures may be estimates");
    if (cJSON_GetObjectItemCaseSensitive(sm, "max_overhead_pct"))
        printf("; agent overhead %.2f%% (budget %.0f%%), rate changed %.0f times",
               num(sm, "overhead_pct"), num(sm, "max_overhead_pct"), num(sm, "rate_changes"));
    printf("\n");
}

static void query_header(const cJSON *d)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "process");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "window");
    char a[32], b[32];
    printf("session %d  %s (pid %d)  %s  window %s .. %s  by %s, sorted by %s\n",
           (int)num(d, "session"), str(p, "name")[0] ? str(p, "name") : "?", (int)num(p, "pid"),
           !strcmp(str(d, "domain"), "heap") ? "heap allocations" : "VirtualAlloc/mmap commits",
           tm(num(w, "t1"), a), tm(num(w, "t2"), b), str(d, "by"), str(d, "sort"));
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "complete")))
        printf("INCOMPLETE: the window needs frees or reallocs from before a ring's horizon "
               "(%s); those are not seen\n",
               tm(num(d, "horizon"), a));
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(d, "quality");
    render_sampled(q);
    double lost = num(q, "lost"), unk = num(q, "unknown_frees"), cap = num(q, "cap_drops");
    double mal = num(q, "malformed_lines");
    if (lost || unk || cap || mal)
        printf("data quality: %.0f lost events, %.0f unknown frees, %.0f untracked at the table "
               "cap, %.0f malformed lines\n",
               lost, unk, cap, mal);
}

/* The process name for the table's first column (18 wide), escaped and cut
 * between escapes; kept by the caller, as every row prints it. */
static void process_column(const cJSON *d, char *out, size_t outsz)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "process");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
    ht_text_escape(name ? name : "", out, outsz);
}

static const char *const type_names[] = {"AIFI", "AIFO", "AOFI", "AOFO"};
static const char *const type_words[] = {"Transient (AIFI)", "Impacting (AIFO)", "Freed (AOFI)",
                                         "Outstanding (AOFO)"};

/* One group: a line per impacting type it has, WPA's expanded view. */
static void table_header(void)
{
    printf("%-18s %-18s %9s %14s %12s  %s\n", "Process", "Impacting Type", "Count",
           "Impacting Size", "Size", "Stack (allocation site first) / Frame");
}

/* The fixed columns of a table row before its stack. */
#define TABLE_FIXED_COLS 77

static void table_row(const char *process, const cJSON *row)
{
    char c1[32], s1[24], s2[24], s3[24];
    const char *label = stack_label(row, label_width(TABLE_FIXED_COLS));
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(row, "types");
    int first = 1;
    for (int k = 0; k < 4; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(types, type_names[k]);
        if (!t)
            continue;
        double impacting = k == 1 ? num(t, "size") : k == 2 ? -num(t, "size") : 0;
        printf("%-18.18s %-18s %9s %14s %12s  %s\n", first ? process : "", type_words[k],
               commas(num(t, "count"), c1), sz(impacting, s1), sz(num(t, "size"), s2),
               first ? label : "");
        first = 0;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(row, "untracked");
    if (u)
        printf("%-18s %-18s %9s %14s %12s  %s\n", first ? process : "", "Untracked (cap)",
               commas(num(u, "count"), c1), "", sz(num(u, "size"), s3), first ? label : "");
}

/* Caller-to-callee tree (outermost frame first), as WPA expands stacks. */
struct node {
    char *name;
    double count, size, impacting, outstanding;
    struct node *child, *next;
};

static struct node *child_of(struct node *n, const char *name)
{
    for (struct node *c = n->child; c; c = c->next)
        if (!strcmp(c->name, name))
            return c;
    struct node *c = calloc(1, sizeof(*c));
    c->name = strdup(name);
    c->next = n->child;
    n->child = c;
    return c;
}

static double node_key(const struct node *n, const char *sort)
{
    if (!strcmp(sort, "st") || !strcmp(sort, "stc"))
        return n->size;
    if (!strcmp(sort, "impact"))
        return n->impacting;
    return n->outstanding;
}

/* The tree's name column: 70 wide, or the terminal's width less the figures
 * (49 columns); names are cut to it on a terminal only. */
struct tree_fmt {
    const char *sort;
    int namecol, cut;
};

static void print_tree(struct node *n, int depth, const struct tree_fmt *tf)
{
    /* Children by the sort figure, largest first (selection over a short list). */
    for (;;) {
        struct node *best = NULL;
        for (struct node *c = n->child; c; c = c->next)
            if (c->name && (!best || node_key(c, tf->sort) > node_key(best, tf->sort)))
                best = c;
        if (!best)
            break;
        char c1[32], s1[24], s2[24], s3[24];
        int w = tf->namecol - depth * 2 > 20 ? tf->namecol - depth * 2 : 20;
        printf("%*s%-*.*s %9s %12s %12s %12s\n", depth * 2, "", w, tf->cut ? w : INT_MAX,
               ctl_text(best->name), commas(best->count, c1), sz(best->impacting, s1),
               sz(best->size, s2), sz(best->outstanding, s3));
        print_tree(best, depth + 1, tf);
        free(best->name);
        best->name = NULL;
    }
    for (struct node *c = n->child, *next; c; c = next) {
        next = c->next;
        free(c);
    }
}

static void render_tree(const cJSON *d)
{
    struct node root = {0};
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(d, "rows"))
    {
        const cJSON *frames = cJSON_GetObjectItemCaseSensitive(row, "frames");
        if (!frames) {
            fprintf(stderr, "heaptracectl: --tree needs stacks (--by stack)\n");
            return;
        }
        struct node *n = &root;
        int depth = cJSON_GetArraySize(frames);
        for (int i = depth - 1; i >= (depth ? 0 : -1); i--) {
            n = child_of(n, i >= 0 ? cJSON_GetArrayItem(frames, i)->valuestring : "[no stack]");
            n->count += num(row, "count");
            n->size += num(row, "size");
            n->impacting += num(row, "impacting");
            n->outstanding += num(row, "outstanding");
        }
    }
    int cols = term_columns();
    struct tree_fmt tf = {"", cols ? (cols > 69 ? cols - 49 : 20) : 70, cols != 0};
    printf("%-*s %9s %12s %12s %12s\n", tf.namecol, "Stack (caller to callee)", "Count",
           "Impacting", "Size", "Outstanding");
    /* Not str(): its buffers are reused while the tree prints. */
    const char *sort = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "sort"));
    if (sort)
        tf.sort = sort;
    print_tree(&root, 0, &tf);
}

/* A listed block has exactly one type: its size is that type's. */
static double block_size(const cJSON *row)
{
    double total = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(row, "types")) total += num(t, "size");
    return total;
}

void render_query(struct ctl *c, const cJSON *d)
{
    query_header(d);
    char process[19];
    process_column(d, process, sizeof(process));
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(d, "rows");
    char c1[32], s1[24], s2[24], s3[24], a[32], b[32];
    if (!strcmp(str(d, "by"), "block")) {
        printf("%-12s %-12s %12s  %s\n", "Commit Time", "Decommit Time", "Size", "Commit Stack");
        const cJSON *row;
        cJSON_ArrayForEach(row, rows)
        {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(row, "free_time");
            printf("%-12s %-12s %12s  %s\n", tm(num(row, "alloc_time"), a),
                   cJSON_IsNumber(f) ? tm(f->valuedouble, b) : "(live)", sz(block_size(row), s1),
                   stack_label(row, label_width(40)));
        }
    } else if (c->tree) {
        render_tree(d);
    } else {
        table_header();
        const cJSON *row;
        cJSON_ArrayForEach(row, rows) table_row(process, row);
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "total");
    printf("total: %s allocated in the window (%s), impacting %s, outstanding %s in %s blocks; "
           "%d of %d groups shown\n",
           sz(num(t, "size"), s1), commas(num(t, "count"), c1), sz(num(t, "impacting"), s2),
           sz(num(t, "outstanding"), s3), commas(num(t, "outstanding_count"), a),
           cJSON_GetArraySize(rows), (int)num(d, "groups"));
}

/* Budget lines of status: use against the budgets, the largest structures, what did not fit. */
/* The eBPF probes' sites: how many the kernel emulates, and each one it
 * single-steps (several times dearer) with why. */
static void render_probe_sites(const cJSON *sd)
{
    if (!sd || !cJSON_GetObjectItemCaseSensitive(sd, "probes_emulated"))
        return;
    printf("  probes       %.0f emulated, %.0f single-stepped\n", num(sd, "probes_emulated"),
           num(sd, "probes_single_stepped"));
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(sd, "probes"))
    {
        if (strcmp(str(p, "site"), "single-stepped") != 0)
            continue;
        const char *mod = str(p, "module"), *slash = strrchr(mod, '/');
        printf("    %s in %s at +%.0f, single-stepped: %s\n", str(p, "function"),
               slash ? slash + 1 : mod, num(p, "probe_offset"), str(p, "why"));
    }
}

static void render_budget(const cJSON *m)
{
    char s1[24], s2[24], s3[24], s4[24];
    if (!cJSON_GetObjectItemCaseSensitive(m, "budget"))
        return;
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(m, "daemon");
    /* A budget of 0 is no limit (config). */
    printf("  budget       %s of %s used (daemon-wide %s of %s)\n", sz(num(m, "used"), s1),
           num(m, "budget") ? sz(num(m, "budget"), s2) : "no limit", sz(num(dm, "used"), s3),
           num(dm, "budget") ? sz(num(dm, "budget"), s4) : "no limit");
    printf("  held by     ");
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(m, "by_structure")) if (k->valuedouble)
        printf(" %s=%s", k->string, sz(k->valuedouble, s1));
    printf("\n");
    static const char *const drops[] = {"over_budget", "no_memory"};
    static const char *const labels[] = {"  over budget ", "  no memory   "};
    for (int i = 0; i < 2; i++) {
        const char *lead = labels[i]; /* printed before the first nonzero count only */
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(m, drops[i])) if (k->valuedouble)
        {
            printf("%s %s=%.0f", lead, k->string, k->valuedouble);
            lead = "";
        }
        if (!*lead)
            printf("\n");
    }
}

static void render_status(struct ctl *c, const cJSON *d)
{
    (void)c;
    char s1[24], s2[24], a[32];
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "process");
    printf("session %d \"%s\": %s (%s)%s%s\n", (int)num(d, "id"), str(d, "name"), str(d, "state"),
           str(d, "source"), cJSON_GetObjectItemCaseSensitive(d, "stop_reason") ? ": " : "",
           str(d, "stop_reason"));
    printf("  process      %s (pid %d)%s\n", str(p, "name"), (int)num(p, "pid"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "exited")) ? ", exited" : "");
    printf("  time         %s\n", tm(num(d, "now"), a));
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(d, "heap");
    printf("  heap         %s outstanding in %.0f blocks (peak %s)\n",
           sz(num(h, "outstanding"), s1), num(h, "outstanding_count"), sz(num(h, "peak"), s2));
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(d, "commits");
    printf("  committed    %s in %.0f ranges (peak %s)\n", sz(num(cm, "committed"), s1),
           num(cm, "ranges"), sz(num(cm, "peak"), s2));
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(d, "private_bytes");
    printf("  private      %s (peak %s)\n", sz(num(pb, "now"), s1), sz(num(pb, "peak"), s2));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "memory");
    printf("  memory       engine %s, stacks %s (%.0f distinct)\n", sz(num(m, "engine"), s1),
           sz(num(m, "stacks"), s2), num(m, "distinct_stacks"));
    render_budget(m);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(d, "ingest");
    /* Lines for a text stream only (.htevb has records; a live source neither). */
    printf("  ingest       %.0f events", num(in, "events"));
    if (num(in, "lines") > 0)
        printf(" from %.0f lines", num(in, "lines"));
    if (num(in, "lines") > 0 || num(in, "malformed") > 0)
        printf(", %.0f malformed", num(in, "malformed"));
    printf("\n");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(d, "source_status");
    if (sd)
        printf(
            "  source       %s stacks, %d probes in %.0f links, ring %s, %.0f records, %.0f lost, "
            "attached in %.0f ms\n",
            str(sd, "stacks"), cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sd, "probes")),
            num(sd, "links"), sz(num(sd, "ring_bytes"), s1), num(sd, "records"), num(sd, "lost"),
            num(sd, "attach_ms"));
    if (sd && cJSON_GetObjectItemCaseSensitive(sd, "stacks_why"))
        printf("  stacks       %s; %.0f cut at a frame outside the executable mappings\n",
               str(sd, "stacks_why"), num(sd, "stacks_outside_exec"));
    const cJSON *sy = sd ? cJSON_GetObjectItemCaseSensitive(sd, "symbols") : NULL;
    if (sy && num(sy, "unsymbolized") > 0)
        printf("  symbols      %.0f of %.0f frame lookups found no symbol: %s\n",
               num(sy, "unsymbolized"), num(sy, "lookups"), str(sy, "unsymbolized_hint"));
    render_probe_sites(sd);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(in, "errors"))
        printf("    line %.0f: %s\n", num(e, "line"), str(e, "msg"));
    render_sampled(cJSON_GetObjectItemCaseSensitive(d, "quality"));
    printf("  quality     ");
    const cJSON *q;
    int losses = 0; /* counters besides "events" that are not zero */
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(d, "quality")) if (q->valuedouble != 0)
    {
        printf(" %s=%.0f", q->string, q->valuedouble);
        losses += strcmp(q->string, "events") != 0;
    }
    printf(losses ? "  ('heaptracectl help status' explains each)\n" : "\n");
    const cJSON *qs = cJSON_GetObjectItemCaseSensitive(d, "queries");
    if (qs)
        printf("  queries      %.0f run, %.0f waiting, %.0f running, %.0f refused (busy), %.0f "
               "failed; longest loop hold %.2f ms, longest on a worker %.1f ms\n",
               num(qs, "run"), num(qs, "waiting"), num(qs, "in_flight"), num(qs, "rejected_busy"),
               num(qs, "failed"), num(qs, "longest_loop_hold_ms"), num(qs, "longest_worker_ms"));
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(d, "triggers"))
        printf("  trigger      %s-when %s: fired %.0f times\n", str(q, "action"), str(q, "when"),
               num(q, "fired"));
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(d, "snapshots")) printf(
        "  snapshot %-3.0f at %s: %s\n", num(q, "seq"), tm(num(q, "t"), a), str(q, "reason"));
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(d, "marks"))
        printf("  mark         %s at %s\n", str(q, "name"), tm(num(q, "t"), a));
}

static void render_timeline(struct ctl *c, const cJSON *d)
{
    (void)c;
    char a[32], s1[24], s2[24], s3[24];
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "complete")))
        printf("INCOMPLETE: samples before %s were overwritten\n", tm(num(d, "horizon"), a));
    printf("%-12s %14s %12s %14s\n", "Time", "Heap", "Committed", "Private");
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "samples"))
        printf("%-12s %14s %12s %14s\n", tm(num(x, "t"), a), sz(num(x, "heap"), s1),
               sz(num(x, "committed"), s2), sz(num(x, "private_bytes"), s3));
}

static void render_ls(struct ctl *c, const cJSON *d)
{
    (void)c;
    char a[32], s1[24], s2[24];
    printf("%-4s %-16s %-8s %-8s %-22s %10s %12s %12s\n", "Id", "Name", "State", "Source",
           "Process", "Time", "Heap", "Committed");
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(d, "sessions"))
    {
        char process[23]; /* the column, cut between escapes */
        const char *raw = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "process"));
        ht_text_escape(raw ? raw : "", process, sizeof(process));
        printf("%-4.0f %-16s %-8s %-8s %-22s %10s %12s %12s\n", num(s, "id"), str(s, "name"),
               str(s, "state"), str(s, "source"), process, tm(num(s, "now"), a),
               sz(num(s, "outstanding"), s1), sz(num(s, "committed"), s2));
    }
}

void render_top(struct ctl *c, const cJSON *d, int tty)
{
    if (c->json) {
        char *s = cJSON_PrintUnformatted(d);
        if (s) {
            puts(s);
            cJSON_free(s);
        }
        return;
    }
    char a[32], s1[24], s2[24], s3[24];
    if (tty)
        term_refresh();
    printf("heaptrace top  %s  %s  heap %s (%.0f blocks)  committed %s  private %s  %.0f events\n",
           str(d, "state"), tm(num(d, "now"), a), sz(num(d, "outstanding"), s1),
           num(d, "outstanding_count"), sz(num(d, "committed"), s2),
           sz(num(d, "private_bytes"), s3), num(d, "events"));
    char process[19];
    process_column(d, process, sizeof(process));
    table_header();
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(d, "rows")) table_row(process, row);
    if (!tty)
        printf("\n");
}

/* Nonzero members of o as " name=N", after lead (nothing when all are 0). */
static void nonzero_counts(const char *lead, const cJSON *o)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, o) if (cJSON_IsNumber(k) && k->valuedouble != 0)
    {
        printf("%s %s=%.0f", lead, k->string, k->valuedouble);
        lead = "";
    }
    if (!*lead)
        printf("\n");
}

static void render_version(struct ctl *c, const cJSON *d)
{
    (void)c;
    char s1[24], s2[24], s3[24];
    printf("heaptraced %s, protocol %.0f, %s (libuv %s, cJSON %s)\n", str(d, "daemon"),
           num(d, "protocol"), str(d, "platform"), str(d, "libuv"), str(d, "cjson"));
    printf("sources, in order of preference:\n");
    const cJSON *x, *m;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "sources"))
    {
        char modes[64] = "";
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(x, "modes"))
        {
            size_t n = strlen(modes);
            snprintf(modes + n, sizeof(modes) - n, "%s%s", n ? "," : "",
                     cJSON_IsString(m) ? ctl_text(m->valuestring) : "?");
        }
        int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "available"));
        printf("  %-8s %-20s %s%s%s\n", str(x, "name"), modes,
               ok ? "" : "NOT AVAILABLE: ", ok ? "" : str(x, "why"), ok ? str(x, "summary") : "");
    }
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "privileges"))
    {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "enabled")))
            printf("privilege %s enabled\n", str(x, "name"));
        else
            printf("privilege %s missing (error %.0f): needed to %s\n", str(x, "name"),
                   num(x, "error"), str(x, "needed_to"));
    }
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(d, "clients");
    printf("clients: %.0f connected, at most %.0f (%.0f kept for root, %.0f per user)\n",
           num(cl, "connected"), num(cl, "max"), num(cl, "root_reserved"), num(cl, "max_per_uid"));
    cJSON *counts = cJSON_Duplicate(cl, 1);
    static const char *const limits[] = {"connected", "max", "root_reserved", "max_per_uid",
                                         "idle_timeout_ns"};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
        cJSON_DeleteItemFromObjectCaseSensitive(counts, limits[i]);
    nonzero_counts("  refused or closed:", counts);
    cJSON_Delete(counts);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(d, "memory");
    /* A budget of 0 is no limit (config). */
    printf("memory: %s used of %s (at most %s per session); %.0f refusals\n",
           sz(num(mem, "used"), s1), num(mem, "budget") ? sz(num(mem, "budget"), s2) : "no limit",
           num(mem, "session_budget") ? sz(num(mem, "session_budget"), s3) : "no limit",
           num(mem, "refusals"));
}

/* start and run: the new session, and what its source wants said. */
static void render_started(struct ctl *c, const cJSON *d)
{
    (void)c;
    printf("session %.0f \"%s\": %s (%s)", num(d, "session"), str(d, "name"), str(d, "state"),
           str(d, "source"));
    if (cJSON_GetObjectItemCaseSensitive(d, "pid"))
        printf(", pid %.0f", num(d, "pid"));
    printf("\n");
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "source_choice")))
        printf("  source: %s\n", ctl_text(str(d, "source_choice")));
    const cJSON *n;
    cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(d, "notes")) if (cJSON_IsString(n))
        printf("  note: %s\n", ctl_text(n->valuestring));
}

/* What the other commands' replies say, one renderer each (the table names them). */
static void render_ping(struct ctl *c, const cJSON *d)
{
    (void)d;
    printf("heaptraced answers at %s\n", c->endpoint);
}

static void render_mark(struct ctl *c, const cJSON *d)
{
    char a[32];
    (void)c;
    printf("mark \"%s\" at %s in session %.0f\n", str(d, "mark"), tm(num(d, "t"), a),
           num(d, "session"));
}

static void render_load(struct ctl *c, const cJSON *d)
{
    (void)c;
    /* A binary stream (.htevb) has records, not lines: its line count is 0. */
    char lines[48] = "";
    if (num(d, "lines") > 0)
        snprintf(lines, sizeof(lines), " from %.0f lines", num(d, "lines"));
    printf("session %.0f \"%s\": %.0f events%s (%.0f bytes), %.0f malformed; %s\n",
           num(d, "session"), str(d, "name"), num(d, "events"), lines, num(d, "bytes"),
           num(d, "malformed"), str(d, "state"));
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "errors"))
        printf("  line %.0f: %s\n", num(e, "line"), str(e, "msg"));
}

static void render_stop(struct ctl *c, const cJSON *d)
{
    (void)c;
    printf("session %.0f %s\n", num(d, "session"), str(d, "state"));
}

static void render_drop(struct ctl *c, const cJSON *d)
{
    (void)c;
    printf("session %.0f dropped\n", num(d, "dropped"));
}

static void render_shutdown(struct ctl *c, const cJSON *d)
{
    (void)c;
    printf("heaptraced is shutting down (%.0f sessions dropped)\n", num(d, "sessions"));
}

/* metrics: the exposition as the daemon made it, a line each (for a
 * textfile collector). */
static void render_metrics(struct ctl *c, const cJSON *d)
{
    (void)c;
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(d, "lines")) if (cJSON_IsString(l))
        printf("%s\n", l->valuestring);
}

/* record, export and top write their data themselves (stream.c): a reply
 * of theirs that reaches here is printed as it came. */
static void render_json(struct ctl *c, const cJSON *d)
{
    (void)c;
    print_json(d);
}

typedef void (*render_fn)(struct ctl *c, const cJSON *d);

/* Every command's renderer, from the table: one without does not build. */
static const render_fn renderers[HT_CMD_COUNT] = {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer) [HT_CMD_##id] = renderer,
#define HT_ARG(id, name, type, flags, meta, help)
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
};

void render_reply(struct ctl *c, const cJSON *d)
{
    if (c->json) {
        print_json(d);
        return;
    }
    renderers[c->cmd->id](c, d);
}
