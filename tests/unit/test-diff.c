/* Randomized differential test: random event streams and queries, engine vs a naive model. */
#include "engine.h"
#include "ht-test.h"
#include "query.h"

#include <ctype.h>

#ifdef HT_VIEW_DOUBLE
/* test-diff-view: the query files read live chunks and realloc counts through the
 * stand-in of view-double.c (small time-bounded chunks, per-stack counts). */
#include "engine-view.h"
#include "view-double.h"
#endif

/* ---- reproducible randomness (splitmix64) ---- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

/* ---- the naive model: every block ever, in lists, scanned linearly ---- */
#define LIVE UINT64_MAX
#define MAXB 20000

struct mblock {
    int domain;
    uint64_t heap, addr, a, f, size;
    uint32_t stack;
    unsigned created; /* made by a realloc (counted at a) */
    unsigned inplace; /* in-place reallocs, all of them (their times are in M.re) */
    uint64_t order;   /* completion order, for the ring */
};
struct mrange {
    uint64_t start, end, t;
    uint32_t stack;
    int used;
};
/* Every in-place realloc event: its time and its block. */
struct mre {
    uint64_t t;
    unsigned b;
};
#define MAXRE 20000
struct model {
    struct mblock b[MAXB];
    unsigned nb;
    struct mrange r[4096];
    unsigned nr;
    uint64_t now, completions[2];
    uint64_t untracked_count[64], untracked_bytes[64]; /* by stack id (heap) */
    uint64_t commit_untracked[64];
    struct mre re[MAXRE];
    unsigned nre;
    uint32_t table_cap;
    uint64_t life_ring; /* the realloc ring holds as many events as this */
    uint64_t live_count;
    uint64_t unknown_frees, dup_allocs, cap_drops, bad_size, decommit_unknown, backwards;
};

static struct model M;
static int m_split_seen; /* a decommit left part of a range (this case) */
static const char *const vocab[] = {"ntdll.dll!RtlAllocateHeap",
                                    "msvcrt.dll!malloc",
                                    "app.exe!main",
                                    "app.exe!Worker",
                                    "lib.dll!Parse",
                                    "LIB.dll!parse",
                                    "0x4010",
                                    "app.exe!Leak",
                                    "other!Leak",
                                    "0x99"};
#define NVOCAB 10
static uint32_t stacks[24];
static uint64_t frames_of[24][6];
static unsigned depth_of[24];

static struct mblock *m_live(int domain, uint64_t heap, uint64_t addr)
{
    for (unsigned i = 0; i < M.nb; i++)
        if (M.b[i].domain == domain && M.b[i].f == LIVE && M.b[i].heap == heap &&
            M.b[i].addr == addr)
            return &M.b[i];
    return NULL;
}

static uint64_t stat_closed; /* blocks freed at their alloc time after an in-place realloc */

static void m_complete(struct mblock *b, uint64_t t)
{
    stat_closed += b->domain == 0 && b->a == t && b->inplace;
    b->f = t;
    b->order = ++M.completions[b->domain];
    if (b->domain == 0)
        M.live_count--;
}

static struct mblock *m_new(int domain)
{
    if (M.nb >= MAXB)
        return NULL;
    struct mblock *b = &M.b[M.nb++];
    memset(b, 0, sizeof(*b));
    b->domain = domain;
    b->f = LIVE;
    return b;
}

static void m_alloc(uint64_t t, uint64_t heap, uint64_t addr, uint64_t size, uint32_t stack,
                    unsigned created)
{
    struct mblock *old = m_live(0, heap, addr);
    if (old) {
        M.dup_allocs++;
        m_complete(old, t);
    }
    if (M.live_count >= M.table_cap) {
        M.cap_drops++;
        M.untracked_count[stack]++;
        M.untracked_bytes[stack] += size;
        return;
    }
    struct mblock *b = m_new(0);
    b->heap = heap;
    b->addr = addr;
    b->a = t;
    b->size = size;
    b->stack = stack;
    b->created = created;
    M.live_count++;
}

static void m_free(uint64_t t, uint64_t heap, uint64_t addr)
{
    struct mblock *b = m_live(0, heap, addr);
    if (!b)
        M.unknown_frees++;
    else
        m_complete(b, t);
}

static void m_commit(uint64_t t, uint64_t start, uint64_t end, uint32_t stack)
{
    uint64_t pos = start;
    while (pos < end) {
        int inside = -1;
        uint64_t next = end;
        for (unsigned i = 0; i < M.nr; i++) {
            if (!M.r[i].used)
                continue;
            if (M.r[i].start <= pos && pos < M.r[i].end)
                inside = (int)i;
            else if (M.r[i].start > pos && M.r[i].start < next)
                next = M.r[i].start;
        }
        if (inside >= 0) {
            pos = M.r[inside].end;
            continue;
        }
        struct mrange nr = {pos, next, t, stack, 1};
        unsigned k = 0;
        while (k < M.nr && M.r[k].used)
            k++;
        M.r[k] = nr;
        if (k == M.nr)
            M.nr++;
        pos = next;
    }
}

static void m_decommit(uint64_t t, uint64_t start, uint64_t end)
{
    uint64_t covered = 0;
    unsigned n = M.nr;
    for (unsigned i = 0; i < n; i++) {
        struct mrange *r = &M.r[i];
        if (!r->used || r->end <= start || r->start >= end)
            continue;
        uint64_t os = r->start > start ? r->start : start;
        uint64_t oe = r->end < end ? r->end : end;
        covered += oe - os;
        struct mblock *b = m_new(1);
        b->a = r->t;
        b->size = oe - os;
        b->stack = r->stack;
        b->addr = os;
        m_complete(b, t);
        struct mrange left = {r->start, os, r->t, r->stack, 1};
        struct mrange right = {oe, r->end, r->t, r->stack, 1};
        r->used = 0;
        m_split_seen |= left.end > left.start || right.end > right.start;
        if (left.end > left.start)
            M.r[i] = left;
        if (right.end > right.start) {
            unsigned k = 0;
            while (k < M.nr && M.r[k].used)
                k++;
            M.r[k] = right;
            if (k == M.nr)
                M.nr++;
        }
    }
    if (covered < end - start)
        M.decommit_unknown++;
}

/* Apply an event to the model with the same documented semantics. */
static void m_apply(const struct ht_event *ev)
{
    uint64_t t = ev->t;
    if (t < M.now) {
        M.backwards++;
        t = M.now;
    }
    M.now = t;
    switch (ev->kind) {
    case HT_EV_ALLOC:
        if (ev->size > ALLOC_SIZE_MAX) {
            M.bad_size++;
            break;
        }
        m_alloc(t, ev->heap, ev->addr, ev->size, ev->stack, 0);
        break;
    case HT_EV_FREE:
        m_free(t, ev->heap, ev->addr);
        break;
    case HT_EV_REALLOC: {
        if (ev->size > ALLOC_SIZE_MAX) {
            M.bad_size++;
            break;
        }
        if (ev->old_addr == 0) {
            m_alloc(t, ev->heap, ev->addr, ev->size, ev->stack, 1);
        } else if (ev->addr == 0) {
            m_free(t, ev->heap, ev->old_addr);
        } else if (ev->addr != ev->old_addr) {
            m_free(t, ev->heap, ev->old_addr);
            m_alloc(t, ev->heap, ev->addr, ev->size, ev->stack, 1);
        } else {
            struct mblock *b = m_live(0, ev->heap, ev->addr);
            if (!b) {
                M.unknown_frees++;
                m_alloc(t, ev->heap, ev->addr, ev->size, ev->stack, 1);
            } else {
                b->size = ev->size;
                b->inplace++;
                if (M.nre < MAXRE)
                    M.re[M.nre] = (struct mre){t, (unsigned)(b - M.b)};
                M.nre++; /* past MAXRE the case fails (run_case) */
            }
        }
        break;
    }
    case HT_EV_HEAP_DESTROY:
        for (unsigned i = 0; i < M.nb; i++)
            if (M.b[i].domain == 0 && M.b[i].f == LIVE && M.b[i].heap == ev->heap)
                m_complete(&M.b[i], t);
        break;
    case HT_EV_COMMIT:
        if (ev->size == 0 || ev->size > ALLOC_SIZE_MAX) {
            M.bad_size++;
            break;
        }
        m_commit(t, ev->addr, ev->addr + ev->size, ev->stack);
        break;
    case HT_EV_DECOMMIT:
    case HT_EV_RELEASE:
        if (ev->size == 0 || ev->size > ALLOC_SIZE_MAX) {
            M.bad_size++;
            break;
        }
        m_decommit(t, ev->addr, ev->addr + ev->size);
        break;
    }
}

/* ---- naive pattern matching and culling ---- */
static int ieq(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return 0;
    for (size_t i = 0; i < an; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return 0;
    return 1;
}

static int m_match(const char *pat, const char *frame)
{
    const char *pb = strchr(pat, '!'), *fb = strchr(frame, '!');
    const char *fsym = fb ? fb + 1 : frame;
    if (pb) {
        if (!fb)
            return 0;
        size_t pm = (size_t)(pb - pat), fm = (size_t)(fb - frame);
        int mod_ok = ieq(pat, pm, frame, fm);
        /* "lib" also names "lib.dll" */
        if (!mod_ok && !memchr(pat, '.', pm) && fm > pm && frame[pm] == '.' &&
            !memchr(frame + pm + 1, '.', fm - pm - 1))
            mod_ok = ieq(pat, pm, frame, pm);
        if (!mod_ok)
            return 0;
        if (pb[1] == '\0')
            return 1;
        return ieq(pb + 1, strlen(pb + 1), fsym, strlen(fsym));
    }
    return ieq(pat, strlen(pat), fsym, strlen(fsym));
}

struct mquery {
    const char *require[3], *cull[3];
    unsigned nreq, ncull;
};

static const char *frame_str(struct engine *e, uint64_t f, char *buf)
{
    return frame_text(&e->si, f, buf, 32);
}

static int m_required(struct engine *e, const struct mquery *mq, uint32_t stack)
{
    if (mq->nreq == 0)
        return 1;
    unsigned d;
    const uint64_t *f = stack_intern_frames(&e->si, stack, &d);
    char buf[32];
    for (unsigned k = 0; k < d; k++)
        for (unsigned j = 0; j < mq->nreq; j++)
            if (m_match(mq->require[j], frame_str(e, f[k], buf)))
                return 1;
    return 0;
}

static unsigned m_skip(struct engine *e, const struct mquery *mq, uint32_t stack)
{
    unsigned d;
    const uint64_t *f = stack_intern_frames(&e->si, stack, &d);
    char buf[32];
    unsigned k = 0;
    for (; k < d; k++) {
        int any = 0;
        for (unsigned j = 0; j < mq->ncull; j++)
            any |= m_match(mq->cull[j], frame_str(e, f[k], buf));
        if (!any)
            break;
    }
    return (k == d && d > 0) ? d - 1 : k;
}

/* Canonical text of a group, the same for engine rows and model rows. */
static void group_text(struct engine *e, int by, uint32_t stack, unsigned skip, uint64_t heap,
                       int type, char *out, size_t outsz)
{
    unsigned d;
    const uint64_t *f = stack_intern_frames(&e->si, stack, &d);
    char buf[32];
    out[0] = '\0';
    if (by == HT_BY_HEAP) {
        snprintf(out, outsz, "heap:%llx", (unsigned long long)heap);
    } else if (by == HT_BY_TYPE) {
        snprintf(out, outsz, "type:%d", type);
    } else if (by == HT_BY_FRAME || by == HT_BY_IMAGE) {
        const char *t = d > skip ? frame_str(e, f[skip], buf) : "";
        if (by == HT_BY_IMAGE) {
            const char *bang = strchr(t, '!');
            snprintf(out, outsz, "image:%.*s", bang ? (int)(bang - t) : 0, t);
            /* module names compare case-sensitively as interned */
        } else {
            snprintf(out, outsz, "frame:%s", t);
        }
    } else {
        size_t n = 0;
        for (unsigned k = skip; k < d && n + 40 < outsz; k++)
            n += (size_t)snprintf(out + n, outsz - n, "%s;", frame_str(e, f[k], buf));
    }
}

struct mrow {
    char text[400];
    struct query_row r;
};

static int cmp_text(const void *a, const void *b)
{
    return strcmp(((const struct mrow *)a)->text, ((const struct mrow *)b)->text);
}

static struct mrow mrows[MAXB], erows[MAXB];

static int m_type(const struct query *q, uint64_t a, uint64_t f)
{
    if (a > q->t2 || f < q->t1)
        return -1;
    if (a >= q->t1)
        return f <= q->t2 ? HT_AIFI : HT_AIFO;
    return f <= q->t2 ? HT_AOFI : HT_AOFO;
}

/* Set by model_query: a live AOFO block has reallocs inside the window; a
 * kept block's in-place count saturated the engine's 7 bits. */
static int m_aofo_live_re, m_saturated_kept;

static unsigned model_query(struct engine *e, const struct query *qin, const struct mquery *mq,
                            struct query_row *total)
{
    struct query qc = *qin;
    const struct query *q = &qc;
    if (qc.t2 > M.now)
        qc.t2 = M.now;
    unsigned n = 0;
    memset(total, 0, sizeof(*total));
    /* Live commit ranges join the blocks as live blocks. */
    unsigned nb = M.nb;
    for (unsigned i = 0; i < M.nr && q->domain == 1; i++) {
        if (!M.r[i].used || nb >= MAXB)
            continue;
        struct mblock *b = &M.b[nb++];
        memset(b, 0, sizeof(*b));
        b->domain = 1;
        b->a = M.r[i].t;
        b->f = LIVE;
        b->size = M.r[i].end - M.r[i].start;
        b->stack = M.r[i].stack;
    }
    /* Realloc events inside the window, per block: the one that made it (at
     * its alloc time) and the in-place ones at their own times. */
    static unsigned re_in[MAXB];
    memset(re_in, 0, sizeof(re_in));
    for (unsigned i = 0; i < M.nre; i++)
        if (M.re[i].t >= q->t1 && M.re[i].t <= q->t2)
            re_in[M.re[i].b]++;
    for (unsigned i = 0; i < nb; i++)
        if (M.b[i].created && M.b[i].a >= q->t1 && M.b[i].a <= q->t2)
            re_in[i]++;
    m_aofo_live_re = m_saturated_kept = 0;
    for (unsigned i = 0; i < nb; i++) {
        const struct mblock *b = &M.b[i];
        if (b->domain != q->domain)
            continue;
        if (b->size < q->size_min || (q->size_max != UINT64_MAX && b->size >= q->size_max))
            continue;
        uint64_t life = b->f == LIVE ? UINT64_MAX : b->f - b->a;
        if (life < q->life_min || (q->life_max != UINT64_MAX && life >= q->life_max))
            continue;
        int type = m_type(q, b->a, b->f);
        if (type < 0 || !(q->types & (1u << type)) || !m_required(e, mq, b->stack))
            continue;
        char text[400];
        group_text(e, q->by, b->stack, m_skip(e, mq, b->stack), b->heap, type, text, sizeof(text));
        unsigned k = 0;
        while (k < n && strcmp(mrows[k].text, text) != 0)
            k++;
        if (k == n) {
            memset(&mrows[n], 0, sizeof(mrows[n]));
            snprintf(mrows[n].text, sizeof(mrows[n].text), "%s", text);
            n++;
        }
        m_aofo_live_re |= type == HT_AOFO && b->f == LIVE && re_in[i] > 0;
        m_saturated_kept |= b->domain == 0 && b->inplace >= 127;
        mrows[k].r.count[type] += 1;
        mrows[k].r.bytes[type] += b->size;
        mrows[k].r.reallocs += re_in[i];
        total->count[type] += 1;
        total->bytes[type] += b->size;
        total->reallocs += re_in[i];
    }
    int whole = q->t1 == 0 && q->t2 >= M.now && q->size_min == 0 && q->size_max == UINT64_MAX &&
                q->life_min == 0 && q->life_max == UINT64_MAX;
    if (whole && q->domain == 0) {
        for (uint32_t id = 0; id < 64; id++) {
            if (!M.untracked_count[id] || !m_required(e, mq, id))
                continue;
            total->untracked_count += M.untracked_count[id];
            total->untracked_bytes += M.untracked_bytes[id];
            if (q->by == HT_BY_HEAP || q->by == HT_BY_TYPE)
                continue;
            char text[400];
            group_text(e, q->by, id, m_skip(e, mq, id), 0, 0, text, sizeof(text));
            unsigned k = 0;
            while (k < n && strcmp(mrows[k].text, text) != 0)
                k++;
            if (k == n) {
                memset(&mrows[n], 0, sizeof(mrows[n]));
                snprintf(mrows[n].text, sizeof(mrows[n].text), "%s", text);
                n++;
            }
            mrows[k].r.untracked_count += M.untracked_count[id];
            mrows[k].r.untracked_bytes += M.untracked_bytes[id];
        }
    }
    return n;
}

static uint64_t stat_re_evicted, stat_re_window, stat_pieces;

/* The realloc ring holds the last life_ring in-place realloc events: does it
 * still hold every one at or after t? */
static int m_re_kept_from(uint64_t t)
{
    if (M.nre <= M.life_ring)
        return 1;
    return M.re[M.nre - M.life_ring - 1].t < t; /* the latest evicted is older */
}

/* Does the engine need the realloc ring's times for this block (docs/queries.md: a
 * block answers from its own count when its whole life is inside the window
 * and it has fewer than 127 in-place reallocs), and are they all still kept? */
static int m_re_ok(const struct query *q, const struct mblock *b)
{
    if (b->domain != 0 || b->inplace == 0)
        return 1;
    if (b->a >= q->t1 && (b->f == LIVE ? q->t2 >= M.now : b->f <= q->t2) && b->inplace < 127)
        return 1;
    return m_re_kept_from(b->a > q->t1 ? b->a : q->t1);
}

static int m_kept(struct engine *e, const struct query *q, const struct mquery *mq,
                  const struct mblock *b)
{
    if (b->domain != q->domain)
        return 0;
    if (b->size < q->size_min || (q->size_max != UINT64_MAX && b->size >= q->size_max))
        return 0;
    uint64_t life = b->f == LIVE ? UINT64_MAX : b->f - b->a;
    if (life < q->life_min || (q->life_max != UINT64_MAX && life >= q->life_max))
        return 0;
    int type = m_type(q, b->a, b->f);
    return type >= 0 && (q->types & (1u << type)) && m_required(e, mq, b->stack);
}

static int m_complete_flag(struct engine *e, const struct query *qin, const struct mquery *mq)
{
    struct query qc = *qin;
    const struct query *q = &qc;
    if (qc.t2 > M.now)
        qc.t2 = M.now;
    int whole = q->t1 == 0 && q->t2 >= M.now && q->size_min == 0 && q->size_max == UINT64_MAX &&
                q->life_min == 0 && q->life_max == UINT64_MAX;
    if (whole && !q->list && q->by != HT_BY_HEAP) {
        /* Exact per-stack totals; splitting reallocs by type needs the live
         * blocks' counts. */
        if (q->domain != 0 || (q->types == HT_TYPES_ALL && q->by != HT_BY_TYPE))
            return 1;
        for (unsigned i = 0; i < M.nb; i++)
            if (M.b[i].domain == 0 && M.b[i].f == LIVE && m_required(e, mq, M.b[i].stack) &&
                !m_re_ok(q, &M.b[i])) {
                stat_re_evicted++;
                return 0;
            }
        return 1;
    }
    for (unsigned i = 0; i < M.nb; i++)
        if (m_kept(e, q, mq, &M.b[i]) && !m_re_ok(q, &M.b[i])) {
            stat_re_evicted++;
            return 0;
        }
    if (q->t2 >= M.now && !(q->types & ((1u << HT_AIFI) | (1u << HT_AOFI))))
        return 1;
    uint64_t cap = q->domain == 0 ? e->lim.life_ring : e->lim.commit_ring;
    uint64_t done = M.completions[q->domain];
    if (done <= cap)
        return 1;
    /* Horizon: the latest free time among the evicted (the oldest done - cap). */
    uint64_t horizon = 0;
    for (unsigned i = 0; i < M.nb; i++)
        if (M.b[i].domain == q->domain && M.b[i].f != LIVE && M.b[i].order <= done - cap &&
            M.b[i].f > horizon)
            horizon = M.b[i].f;
    return horizon < q->t1;
}

static int rows_equal(const struct query_row *a, const struct query_row *b)
{
    for (int k = 0; k < 4; k++)
        if (a->count[k] != b->count[k] || a->bytes[k] != b->bytes[k])
            return 0;
    return a->reallocs == b->reallocs && a->untracked_count == b->untracked_count &&
           a->untracked_bytes == b->untracked_bytes;
}

static void dump_row(const char *who, const char *text, const struct query_row *r)
{
    fprintf(stderr, "  %s %-40s", who, text);
    for (int k = 0; k < 4; k++)
        fprintf(stderr, " %s=%llu/%llu", ht_type_names[k], (unsigned long long)r->count[k],
                (unsigned long long)r->bytes[k]);
    fprintf(stderr, " re=%llu un=%llu/%llu\n", (unsigned long long)r->reallocs,
            (unsigned long long)r->untracked_count, (unsigned long long)r->untracked_bytes);
}

static uint64_t seed_of_case;

static int cmp_figures(const void *pa, const void *pb)
{
    const struct query_row *a = pa, *b = pb;
    int c = memcmp(a->count, b->count, sizeof(a->count));
    if (!c)
        c = memcmp(a->bytes, b->bytes, sizeof(a->bytes));
    if (!c)
        c = a->reallocs < b->reallocs ? -1 : a->reallocs > b->reallocs;
    if (!c)
        c = a->untracked_bytes < b->untracked_bytes ? -1 : a->untracked_bytes > b->untracked_bytes;
    return c ? c : (int)a->skip - (int)b->skip;
}
static uint64_t stat_queries, stat_incomplete, stat_exact, stat_topn, stat_cached;

static int64_t row_key(int sort, const struct query_row *r)
{
    switch (sort) {
    case HT_SORT_IMPACT:
        return query_row_impacting(r);
    case HT_SORT_ST:
        return (int64_t)query_row_size(r);
    case HT_SORT_STC:
        return (int64_t)query_row_count(r);
    case HT_SORT_SRC:
        return (int64_t)r->reallocs;
    case HT_SORT_SOC:
        return (int64_t)query_row_outstanding_count(r);
    default:
        return (int64_t)query_row_outstanding(r);
    }
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* How often each of query.c's ways of answering was checked (QP_* bits),
 * and the cases the fast paths must get right. */
#define NPATHS 10
static const char *const path_names[NPATHS] = {
    "exact",     "live_reallocs_from_view", "live_reallocs_counted", "dense", "canon",
    "aofo_subtraction", "chunks_skipped", "no_live_scan", "no_ring_walk", "full_live_scan"};
static uint64_t stat_path[NPATHS], stat_sub_re, stat_sat, stat_exact_typed, stat_exact_typed_sat,
    stat_image, stat_filtered_window, stat_chunk_edge, stat_past_window;
static int g_edge; /* this query's t1 is a live chunk's bound */

static int m_live_saturated(void)
{
    for (unsigned i = 0; i < M.nb; i++)
        if (M.b[i].domain == 0 && M.b[i].f == LIVE && M.b[i].inplace >= 127)
            return 1;
    return 0;
}

static void path_stats(struct engine *e, const struct query *q, const struct query_result *res)
{
    for (int b = 0; b < NPATHS; b++)
        stat_path[b] += (res->paths >> b) & 1;
    int whole = q->t1 == 0 && q->t2 >= e->now;
    stat_sub_re += (res->paths & QP_AOFO_SUB) && res->complete && m_aofo_live_re;
    stat_sat += res->complete && m_saturated_kept;
    if ((res->paths & QP_EXACT) && q->types != HT_TYPES_ALL && q->domain == HT_DOM_HEAP) {
        stat_exact_typed++;
        stat_exact_typed_sat += m_live_saturated();
    }
    stat_image += q->by == HT_BY_IMAGE && res->complete && res->nrows > 0;
    stat_filtered_window += !whole && res->complete && (res->paths & QP_DENSE) &&
                            (q->size_min || q->size_max != UINT64_MAX || q->life_min ||
                             q->life_max != UINT64_MAX);
    stat_past_window += q->t1 > 0 && q->t2 < e->now && res->complete;
    stat_chunk_edge += g_edge && res->complete;
}

/* Run one query both ways; returns 0 if they agree. */
static int compare_query(struct engine *e, struct query *q, const struct mquery *mq)
{
    struct frame_pat req[3], cull[3];
    for (unsigned i = 0; i < mq->nreq; i++)
        frame_pat_parse(mq->require[i], strlen(mq->require[i]), &req[i]);
    for (unsigned i = 0; i < mq->ncull; i++)
        frame_pat_parse(mq->cull[i], strlen(mq->cull[i]), &cull[i]);
    q->require = req;
    q->nrequire = mq->nreq;
    q->cull = cull;
    q->ncull = mq->ncull;
    struct query_result res;
    if (engine_query(e, q, &res) != 0)
        return -1;
    int bad = 0;
    int mc = m_complete_flag(e, q, mq);
    if (mc != res.complete) {
        fprintf(stderr, "seed %llu: complete engine=%d model=%d\n",
                (unsigned long long)seed_of_case, res.complete, mc);
        bad = 1;
    }
    if (res.complete && !bad) {
        struct query_row mt;
        unsigned mn = model_query(e, q, mq, &mt);
        unsigned en = 0;
        for (uint32_t i = 0; i < res.nrows; i++) {
            const struct query_row *r = &res.rows[i];
            int type = q->by == HT_BY_TYPE ? (int)r->key : 0;
            group_text(e, q->by, r->stack, r->skip, r->key, type, erows[en].text,
                       sizeof(erows[en].text));
            if (q->by == HT_BY_IMAGE && !q->list) {
                /* The row's name (the result's list) is its stack's module. */
                const char *name = query_result_image(&res, r->key);
                if (strcmp(erows[en].text + 6, name ? name : "") != 0) {
                    fprintf(stderr, "seed %llu: image row named %s, its stack says %s\n",
                            (unsigned long long)seed_of_case, name ? name : "(none)",
                            erows[en].text);
                    bad = 1;
                }
            }
            erows[en].r = *r;
            en++;
        }
        if (q->top && q->top < mn) {
            /* Ties may pick different groups: compare the sort keys in order. */
            int64_t mk[MAXB];
            for (unsigned i = 0; i < mn; i++)
                mk[i] = row_key(q->sort, &mrows[i].r);
            qsort(mk, mn, sizeof(mk[0]), cmp_desc);
            if (res.nrows != q->top || res.ngroups != mn)
                bad = 1;
            for (uint32_t i = 0; i < res.nrows && !bad; i++)
                if (row_key(q->sort, &res.rows[i]) != mk[i])
                    bad = 1;
            stat_topn++;
        } else {
            qsort(mrows, mn, sizeof(mrows[0]), cmp_text);
            qsort(erows, en, sizeof(erows[0]), cmp_text);
            if (mn != en || (!q->list && res.ngroups != en))
                bad = 1;
            for (unsigned i = 0; i < mn && i < en && !bad; i++)
                if (strcmp(mrows[i].text, erows[i].text) != 0 ||
                    !rows_equal(&mrows[i].r, &erows[i].r))
                    bad = 1;
        }
        if (!rows_equal(&mt, &res.total))
            bad = 1;
        if (bad) {
            fprintf(stderr,
                    "seed %llu: query by=%d t=[%llu,%llu] types=%x size=[%llu,%llu) "
                    "life=[%llu,%llu) req=%u cull=%u top=%u: engine %u rows, model %u\n",
                    (unsigned long long)seed_of_case, q->by, (unsigned long long)q->t1,
                    (unsigned long long)q->t2, q->types, (unsigned long long)q->size_min,
                    (unsigned long long)q->size_max, (unsigned long long)q->life_min,
                    (unsigned long long)q->life_max, mq->nreq, mq->ncull, q->top, en, mn);
            for (unsigned i = 0; i < en && i < 12; i++)
                dump_row("E", erows[i].text, &erows[i].r);
            for (unsigned i = 0; i < mn && i < 12; i++)
                dump_row("M", mrows[i].text, &mrows[i].r);
            dump_row("E", "TOTAL", &res.total);
            dump_row("M", "TOTAL", &mt);
        }
    }
    if (!bad && mq->ncull) {
        /* The same query through a skip cache, cold then warm: identical rows. */
        struct skip_cache sc = {0};
        for (int pass = 0; pass < 2 && !bad; pass++) {
            q->skip_cache = &sc;
            struct query_result r2;
            if (engine_query(e, q, &r2) != 0) {
                bad = 1;
                break;
            }
            bad = r2.nrows != res.nrows || r2.complete != res.complete;
            /* Tied rows may come in another order (their keys differ): compare
             * both lists sorted by their figures. */
            static struct query_row orig[HT_QUERY_TOP_MAX];
            memcpy(orig, res.rows, res.nrows * sizeof(orig[0]));
            qsort(r2.rows, r2.nrows, sizeof(r2.rows[0]), cmp_figures);
            qsort(orig, res.nrows, sizeof(orig[0]), cmp_figures);
            for (uint32_t i = 0; i < r2.nrows && !bad; i++)
                bad = !rows_equal(&r2.rows[i], &orig[i]) || r2.rows[i].skip != orig[i].skip;
            if (bad)
                fprintf(stderr, "seed %llu: skip cache pass %d differs\n",
                        (unsigned long long)seed_of_case, pass);
            query_result_free(&r2);
            stat_cached++;
        }
        q->skip_cache = NULL;
        skip_cache_free(&sc);
    }
    stat_queries++;
    stat_incomplete += !res.complete;
    stat_re_window += res.complete && res.total.reallocs && !res.exact_totals;
    stat_pieces += res.complete && q->domain == HT_DOM_COMMIT && m_split_seen;
    stat_exact += res.exact_totals;
    if (!bad)
        path_stats(e, q, &res);
    /* Rows come sorted by the requested key, best first. */
    for (uint32_t i = 1; i < res.nrows && !bad; i++) {
        if (row_key(q->sort, &res.rows[i - 1]) < row_key(q->sort, &res.rows[i])) {
            fprintf(stderr, "seed %llu: rows not sorted\n", (unsigned long long)seed_of_case);
            bad = 1;
        }
    }
    query_result_free(&res);
    return bad;
}

static const char *const req_pool[] = {"app.exe!main", "lib!", "parse", "0x4010", "APP.EXE!Leak"};
static const char *const cull_pool[] = {"ntdll.dll!", "msvcrt!malloc", "lib.dll!", "0x99", "leak"};

static struct engine *g_eng; /* the case's engine */

#ifdef HT_VIEW_DOUBLE
/* A window start at a bound of a random live chunk (or one off it). */
static uint64_t chunk_edge(void)
{
    struct engine_view *v;
    uint64_t t = 0;
    if (engine_view_open(g_eng, &v) != 0)
        return 0;
    uint32_t n = tv_live_nchunks(v);
    if (n > 0) {
        uint32_t k;
        uint64_t lo, hi;
        tv_live_chunk(v, (uint32_t)below(n), &k, &lo, &hi);
        uint64_t pick[4] = {lo, hi, hi + 1, lo ? lo - 1 : 0};
        t = pick[below(4)];
    }
    engine_view_close(g_eng, v);
    return t;
}
#endif

static void random_query(struct query *q, struct mquery *mq, int domain)
{
    query_init(q);
    memset(mq, 0, sizeof(*mq));
    q->domain = domain;
    q->by = (int)below(5);
    q->sort = (int)below(6);
    uint64_t span = M.now + 20;
    g_edge = 0;
    if (below(3)) {
        q->t1 = below(span);
        q->t2 = q->t1 + below(span);
        if (below(2))
            q->t2 = UINT64_MAX; /* up to now: the common window (-5s:) */
#ifdef HT_VIEW_DOUBLE
        if (below(2)) {
            q->t1 = chunk_edge();
            g_edge = 1;
        }
#endif
    } else if (below(3)) {
        q->t1 = 0; /* whole session */
    }
    if (below(3) == 0)
        q->types = (unsigned)(1 + below(15));
    if (below(5) == 0) {
        q->size_min = below(64);
        q->size_max = below(2) ? UINT64_MAX : q->size_min + below(200);
    }
    if (below(5) == 0) {
        q->life_min = below(50);
        q->life_max = below(2) ? UINT64_MAX : q->life_min + below(100);
    }
    if (below(4) == 0)
        mq->nreq = (unsigned)(1 + below(2));
    for (unsigned i = 0; i < mq->nreq; i++)
        mq->require[i] = req_pool[below(5)];
    if (below(3) == 0)
        mq->ncull = (unsigned)(1 + below(3));
    for (unsigned i = 0; i < mq->ncull; i++)
        mq->cull[i] = cull_pool[below(5)];
    if (below(4) == 0)
        q->top = (uint32_t)(1 + below(4));
}

static int g_heavy;    /* this case reallocs in place often (fills the realloc ring) */
static int g_saturate; /* this case has blocks with 127+ in-place reallocs */

/* Events queued by a burst (random_event), given out first. */
static struct ht_event g_pend[140];
static unsigned g_npend, g_next;

/* A block reallocated in place and freed at its alloc time, then a new
 * block at the same address and time: its reallocs must stay its own. */
static void queue_same_time_burst(const struct ht_event *base)
{
    static const int kinds[4] = {HT_EV_ALLOC, HT_EV_REALLOC, HT_EV_FREE, HT_EV_ALLOC};
    for (unsigned i = 0; i < 4; i++) {
        g_pend[i] = *base;
        g_pend[i].kind = (uint8_t)kinds[i];
        g_pend[i].old_addr = kinds[i] == HT_EV_REALLOC ? base->addr : 0;
        g_pend[i].size = 1 + below(100);
    }
    g_npend = 4;
    g_next = 0;
}

/* A block reallocated in place more times than its 7-bit count holds, the
 * events spread over time so windows cut through them. */
static void queue_saturating_burst(const struct ht_event *base, uint64_t *t)
{
    unsigned n = 127 + (unsigned)below(10);
    g_pend[0] = *base;
    g_pend[0].kind = HT_EV_ALLOC;
    g_pend[0].size = 1 + below(100);
    for (unsigned i = 1; i <= n; i++) {
        *t += below(8) == 0;
        g_pend[i] = *base;
        g_pend[i].t = *t;
        g_pend[i].kind = HT_EV_REALLOC;
        g_pend[i].old_addr = base->addr;
        g_pend[i].size = 1 + below(120);
    }
    g_npend = n + 1;
    g_next = 0;
}

static void random_event(struct engine *e, struct ht_event *ev, uint64_t *t)
{
    (void)e;
    if (g_next < g_npend) {
        *ev = g_pend[g_next++];
        return;
    }
    memset(ev, 0, sizeof(*ev));
    *t += g_heavy ? below(2) : below(4);                     /* heavy: many events at one time */
    ev->t = below(40) == 0 && *t > 10 ? *t - below(10) : *t; /* sometimes backwards */
    ev->heap = 0x1000 * (1 + below(3));
    ev->addr = 0x100 + 16 * below(g_heavy ? 6 : 48); /* heavy: addresses reused at once */
    ev->stack = stacks[below(24)];
    if (g_heavy && below(20) == 0) {
        ev->t = *t;
        queue_same_time_burst(ev);
        *ev = g_pend[g_next++];
        return;
    }
    if (g_saturate && below(300) == 0) {
        ev->t = *t;
        queue_saturating_burst(ev, t);
        *ev = g_pend[g_next++];
        return;
    }
    uint64_t r = below(100);
    if (g_heavy && r >= 35 && r < 60 && below(2))
        r = 60; /* half the frees become reallocs */
    if (r < 35) {
        ev->kind = HT_EV_ALLOC;
        ev->size = below(50) == 0 ? (1ULL << 63) : below(30) == 0 ? 0 : 1 + below(100);
    } else if (r < 60) {
        ev->kind = HT_EV_FREE;
    } else if (r < 72) {
        ev->kind = HT_EV_REALLOC;
        ev->old_addr = below(8) == 0 ? 0 : g_heavy || below(2) ? ev->addr : 0x100 + 16 * below(48);
        if (below(10) == 0)
            ev->addr = 0;
        ev->size = 1 + below(120);
    } else if (r < 74) {
        ev->kind = HT_EV_HEAP_DESTROY;
    } else if (r < 86) {
        ev->kind = HT_EV_COMMIT;
        ev->addr = 0x10000 + 0x1000 * below(32);
        ev->size = below(30) == 0 ? 0 : 0x1000 * (1 + below(6));
    } else if (r < 98) {
        ev->kind = below(2) ? HT_EV_DECOMMIT : HT_EV_RELEASE;
        ev->addr = 0x10000 + 0x800 * below(64);
        ev->size = 0x800 * (1 + below(8));
    } else {
        ev->kind = HT_EV_PRIVATE_BYTES;
        ev->size = below(1 << 20);
    }
}

static int run_case(uint64_t seed, unsigned nevents, unsigned nqueries)
{
    rng_state = seed;
    seed_of_case = seed;
    memset(&M, 0, sizeof(M));
    m_split_seen = 0;
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = below(3) == 0 ? (uint32_t)(5 + below(40)) : 1000000;
    lim.life_ring = below(3) == 0 ? 1 + below(200) : 1000000;
    lim.commit_ring = below(3) == 0 ? 1 + below(50) : 1000000;
    lim.timeline_ns = 1 + below(20);
    lim.timeline_ring = 1 + below(30);
    g_heavy = below(4) == 0;
    g_saturate = below(4) == 0;
    g_npend = g_next = 0;
#ifdef HT_VIEW_DOUBLE
    tv_chunk_entries = (uint32_t)(1 + below(16));
    tv_loose = below(2) ? 0 : below(8);
    tv_refuse_mod = below(3) == 0 ? 0 : (uint32_t)(2 + below(3));
#endif
    if (g_heavy && below(2))
        lim.life_ring = 1 + below(60); /* and the realloc ring evicts */
    M.table_cap = lim.table_cap;
    M.life_ring = lim.life_ring;
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        return -1;
    g_eng = &e;
    for (unsigned s = 0; s < 24; s++) {
        depth_of[s] = s == 0 ? 0 : (unsigned)(1 + below(5));
        for (unsigned k = 0; k < depth_of[s]; k++) {
            const char *v = vocab[below(NVOCAB)];
            if (v[0] == '0')
                frames_of[s][k] = strtoull(v, NULL, 16);
            else
                frames_of[s][k] = HT_FRAME_SYM | stack_intern_str(&e.si, v, (unsigned)strlen(v));
        }
        stacks[s] = stack_intern_get(&e.si, frames_of[s], depth_of[s]);
    }
    int bad = 0;
    uint64_t t = 0;
    for (unsigned i = 0; i < nevents && !bad; i++) {
        struct ht_event ev;
        random_event(&e, &ev, &t);
        if (getenv("HT_TRACE"))
            fprintf(stderr, "ev %s t=%llu heap=%llx addr=%llx old=%llx size=%llu stack=%u\n",
                    ht_event_kind_name(ev.kind), (unsigned long long)ev.t,
                    (unsigned long long)ev.heap, (unsigned long long)ev.addr,
                    (unsigned long long)ev.old_addr, (unsigned long long)ev.size, ev.stack);
        engine_apply(&e, &ev);
        m_apply(&ev);
        if (i % (nevents / 4 + 1) == 0 || i + 1 == nevents) {
            for (unsigned j = 0; j < nqueries && !bad; j++) {
                struct query q;
                struct mquery mq;
                random_query(&q, &mq, (int)below(2));
                bad = compare_query(&e, &q, &mq);
            }
        }
    }
    if (getenv("HT_TRACE")) {
        for (unsigned i = 0; i < M.nr; i++)
            fprintf(stderr, "mr %u used=%d [%llx,%llx) t=%llu stack=%u\n", i, M.r[i].used,
                    (unsigned long long)M.r[i].start, (unsigned long long)M.r[i].end,
                    (unsigned long long)M.r[i].t, M.r[i].stack);
        for (unsigned i = 0; i < e.commits.n; i++)
            fprintf(stderr, "er [%llx,%llx) t=%llu stack=%u\n",
                    (unsigned long long)e.commits.r[i].start,
                    (unsigned long long)e.commits.r[i].end, (unsigned long long)e.commits.r[i].t,
                    e.commits.r[i].stack);
    }
    if (M.nre > MAXRE) {
        fprintf(stderr, "seed %llu: the model's realloc list is full\n", (unsigned long long)seed);
        bad = 1;
    }
    /* Counters and invariants. */
    if (!bad) {
        bad = e.q.unknown_frees != M.unknown_frees || e.q.dup_allocs != M.dup_allocs ||
              e.q.cap_drops != M.cap_drops || e.q.bad_size != M.bad_size ||
              e.q.decommit_unknown != M.decommit_unknown || e.q.time_backwards != M.backwards ||
              e.table.count != M.live_count;
        if (bad)
            fprintf(
                stderr,
                "seed %llu: counters engine/model unknown %llu/%llu dup %llu/%llu cap %llu/%llu "
                "bad_size %llu/%llu decommit %llu/%llu back %llu/%llu live %u/%llu\n",
                (unsigned long long)seed, (unsigned long long)e.q.unknown_frees,
                (unsigned long long)M.unknown_frees, (unsigned long long)e.q.dup_allocs,
                (unsigned long long)M.dup_allocs, (unsigned long long)e.q.cap_drops,
                (unsigned long long)M.cap_drops, (unsigned long long)e.q.bad_size,
                (unsigned long long)M.bad_size, (unsigned long long)e.q.decommit_unknown,
                (unsigned long long)M.decommit_unknown, (unsigned long long)e.q.time_backwards,
                (unsigned long long)M.backwards, e.table.count, (unsigned long long)M.live_count);
        uint64_t committed = 0;
        for (unsigned i = 0; i < M.nr; i++)
            if (M.r[i].used)
                committed += M.r[i].end - M.r[i].start;
        if (committed != e.commits.bytes) {
            fprintf(stderr, "seed %llu: committed %llu vs model %llu\n", (unsigned long long)seed,
                    (unsigned long long)e.commits.bytes, (unsigned long long)committed);
            bad = 1;
        }
    }
    engine_close(&e);
    return bad;
}

static uint64_t base_seed(void)
{
    const char *s = getenv("HT_SEED");
    return s ? strtoull(s, NULL, 0) : 20261122;
}

static void run_many(unsigned cases, unsigned nevents, unsigned nqueries)
{
    uint64_t base = base_seed();
    unsigned failed = 0;
    for (unsigned i = 0; i < cases; i++) {
        if (run_case(base + i, nevents, nqueries)) {
            failed++;
            if (failed >= 3)
                break;
        }
    }
    printf("%u cases, %llu queries compared: %llu incomplete (horizon), %llu of them for "
           "evicted realloc times, %llu from exact totals, %llu top-N, %llu through a skip "
           "cache, %llu windows with reallocs, %llu commit queries after a split, %llu blocks "
           "freed at their alloc time after an in-place realloc\n",
           cases, (unsigned long long)stat_queries, (unsigned long long)stat_incomplete,
           (unsigned long long)stat_re_evicted, (unsigned long long)stat_exact,
           (unsigned long long)stat_topn, (unsigned long long)stat_cached,
           (unsigned long long)stat_re_window, (unsigned long long)stat_pieces,
           (unsigned long long)stat_closed);
    printf("paths checked:");
    for (int b = 0; b < NPATHS; b++)
        printf(" %s %llu", path_names[b], (unsigned long long)stat_path[b]);
    printf("\nfast-path cases checked: aofo_subtraction with window reallocs on live AOFO blocks "
           "%llu, saturated in-place counts %llu, whole-session typed %llu (%llu with a "
           "saturated live block), by image %llu, filtered windows %llu, past windows %llu, "
           "windows starting at a live chunk's bound %llu\n",
           (unsigned long long)stat_sub_re, (unsigned long long)stat_sat,
           (unsigned long long)stat_exact_typed, (unsigned long long)stat_exact_typed_sat,
           (unsigned long long)stat_image, (unsigned long long)stat_filtered_window,
           (unsigned long long)stat_past_window, (unsigned long long)stat_chunk_edge);
    if (failed)
        fprintf(stderr, "rerun one case: HT_SEED=<seed> HT_CASES=1 ./test-diff <case>\n");
    CHECK_EQ(failed, 0);
    /* Every way of answering was checked (the long streams, default cases). */
    if (!getenv("HT_CASES") && cases >= 300 && nevents >= 1000) {
        static const unsigned must = QP_EXACT | QP_LIVE_RE_SCAN | QP_DENSE | QP_CANON |
                                     QP_AOFO_SUB | QP_NO_LIVE | QP_NO_RING | QP_FULL_SCAN
#ifdef HT_VIEW_DOUBLE
                                     | QP_LIVE_RE_VIEW | QP_CHUNKS_SKIPPED
#endif
            ;
        for (int b = 0; b < NPATHS; b++)
            if ((must >> b) & 1)
                CHECK(stat_path[b] > 0);
        CHECK(stat_sub_re > 0 && stat_sat > 0 && stat_exact_typed_sat > 0 && stat_image > 0 &&
              stat_filtered_window > 0 && stat_past_window > 0);
#ifdef HT_VIEW_DOUBLE
        CHECK(stat_chunk_edge > 0);
#endif
    }
}

static unsigned env_cases(unsigned dflt)
{
    const char *s = getenv("HT_CASES");
    return s ? (unsigned)strtoul(s, NULL, 0) : dflt;
}

static void test_short_streams(void)
{
    run_many(env_cases(3000), 60, 6);
}

static void test_long_streams(void)
{
    run_many(env_cases(300), 1500, 8);
}

HT_TEST_MAIN(T(short_streams), T(long_streams))
