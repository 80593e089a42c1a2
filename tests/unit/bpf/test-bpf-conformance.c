/*
 * Source conformance (tests/unit/source-conformance.h) for the eBPF source:
 * random synthetic ring records, laid out as heaptrace.bpf.c writes them
 * (heap calls with frame-pointer stacks, frees, the outer record of nested
 * calls, mmap-family syscalls made inside and outside the allocator, drop
 * counts, malformed records), go through the source's real path
 * (bpf_consume_record, the region table, the event ring, the source's
 * drain) via bpf_source_open_synthetic. The events the harness applies
 * directly are what those records mean, worked out here from the record
 * semantics (heaptrace-bpf.h, docs/linux.md#mmap-family-accounting) with a page model
 * of the mappings, not with the consumer's code.
 */
#include "bpf-source.h"
#include "consume.h"
#include "heaptrace-bpf.h"
#include "ht-test.h"
#include "source-conformance.h"
#include "stack-intern.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096ULL
#define T0 5000000000ULL /* the source's time origin (monotonic ns) */
#define PID 31337

/* Random numbers: splitmix64. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- The synthetic input: records in one arena, and drop readings. ---- */

struct item {
    size_t off, size; /* in the arena; size 0 with drops: a drop reading */
    int drops;
    uint64_t total, now;
};

struct input {
    uint8_t *arena;
    size_t len, cap;
    struct item *items;
    size_t n, alloc, next;
    size_t malformed; /* records the consumer must count as malformed */
    size_t taken_bad; /* of those, with a sound header: still taken as records */
};

static void input_item(struct input *in, const struct item *it)
{
    if (in->n == in->alloc) {
        in->alloc = in->alloc ? in->alloc * 2 : 1024;
        in->items = realloc(in->items, in->alloc * sizeof(*in->items));
        if (!in->items)
            abort();
    }
    in->items[in->n++] = *it;
}

static void input_record(struct input *in, const void *d, size_t n)
{
    if (in->len + n > in->cap) {
        in->cap = (in->cap + n) * 2;
        in->arena = realloc(in->arena, in->cap);
        if (!in->arena)
            abort();
    }
    memcpy(in->arena + in->len, d, n);
    struct item it = {.off = in->len, .size = n};
    in->len += n;
    input_item(in, &it);
}

static int input_next(void *arg, struct bpf_synth_item *out)
{
    struct input *in = arg;
    if (in->next >= in->n)
        return 0;
    const struct item *it = &in->items[in->next++];
    memset(out, 0, sizeof(*out));
    if (it->drops) {
        out->drops = 1;
        out->drops_total = it->total;
        out->now = it->now;
    } else {
        out->rec = in->arena + it->off;
        out->size = it->size;
    }
    return 1;
}

/* ---- The expected events. ---- */

struct expect {
    struct ht_event *ev;
    size_t n, cap;
};

static void expect_put(struct expect *x, const struct ht_event *ev)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 4096;
        x->ev = realloc(x->ev, x->cap * sizeof(*x->ev));
        if (!x->ev)
            abort();
    }
    x->ev[x->n++] = *ev;
}

/* ---- The generator's state. ---- */

#define NPAGES 384
#define MAP_BASE 0x7f1200000000ULL
#define NLIVE 256
#define NPATTERNS 24

/* Page states of the model: 0 unknown, else 1 + 2*heap + committed. */
#define ST(heap, committed) (uint8_t)(1 + 2 * (heap) + (committed))
#define ST_HEAP(s) (((s)-1) >> 1)
#define ST_COMMITTED(s) (((s)-1) & 1)

struct gen {
    uint64_t seed;
    uint64_t t; /* monotonic ns of the next record */
    struct input in;
    struct expect x;
    struct stack_intern *si; /* the reference engine's interner */
    uint8_t page[NPAGES];
    uint64_t live[NLIVE];
    unsigned nlive;
    uint64_t next_addr;
    uint64_t drops;
    uint64_t patterns[NPATTERNS][HB_MAX_FRAMES];
};

/* A stack for a record: nframes return addresses, the frames of one of a
 * few call paths (so stacks repeat) with a random tail. Sets the record's
 * nframes and flags; the frames go to out. The expected stack id and flags
 * into ev. */
static unsigned stack_make(struct gen *g, struct hb_rec *r, uint64_t *out, struct ht_event *ev)
{
    uint64_t *s = &g->seed;
    unsigned n;
    uint64_t k = rnd(s) % 20;
    if (k == 0)
        n = 0;
    else if (k == 1)
        n = HB_MAX_FRAMES; /* the program's walk filled its buffer */
    else
        n = 1 + (unsigned)(rnd(s) % 12);
    const uint64_t *pat = g->patterns[rnd(s) % NPATTERNS];
    for (unsigned i = 0; i < n; i++)
        out[i] = i < 3 && rnd(s) % 4 == 0 ? 0x55550000 + 8 * (rnd(s) % 32) : pat[i];
    r->nframes = (uint16_t)n;
    if (n == HB_MAX_FRAMES)
        r->flags |= HB_F_TRUNCATED;
    /* What a stack means to the engine: its frames, innermost first, cut
     * flag kept; no frames, no stack. */
    ev->stack = n ? stack_intern_get(g->si, out, n) : 0;
    ev->flags = n == HB_MAX_FRAMES ? HT_EVF_TRUNCATED : 0;
    return n;
}

static void rec_base(struct gen *g, struct hb_rec *r, uint16_t kind, struct ht_event *ev)
{
    memset(r, 0, sizeof(*r));
    g->t += 1 + rnd(&g->seed) % 3000000;
    r->t = g->t;
    r->tid = 100 + (uint32_t)(rnd(&g->seed) % 4);
    r->kind = kind;
    memset(ev, 0, sizeof(*ev));
    ev->t = r->t - T0;
    ev->tid = r->tid;
}

static void emit_record(struct gen *g, const struct hb_rec *r, const uint64_t *frames)
{
    uint8_t buf[sizeof(struct hb_rec) + HB_MAX_FRAMES * 8];
    memcpy(buf, r, sizeof(*r));
    memcpy(buf + sizeof(*r), frames, (size_t)r->nframes * 8);
    input_record(&g->in, buf, sizeof(*r) + (size_t)r->nframes * 8);
}

/* ---- Heap calls. ---- */

static uint64_t heap_addr(struct gen *g)
{
    uint64_t a = g->next_addr;
    g->next_addr += 16 * (1 + rnd(&g->seed) % 256);
    return a;
}

static void live_add(struct gen *g, uint64_t p)
{
    if (g->nlive < NLIVE)
        g->live[g->nlive++] = p;
}

/* One outermost allocator call, as the return probe records it. A nested
 * call (realloc's own malloc, operator new's malloc) is never a record of
 * its own: the program keeps only the outermost one. */
static void gen_alloc(struct gen *g)
{
    uint64_t *s = &g->seed;
    struct hb_rec r;
    struct ht_event ev;
    uint64_t frames[HB_MAX_FRAMES];
    rec_base(g, &r, HB_REC_ALLOC, &ev);
    stack_make(g, &r, frames, &ev);
    ev.heap = BPF_HEAP;
    uint64_t k = rnd(s) % 100, size = 1 + rnd(s) % 5000;
    int fails = rnd(s) % 25 == 0;
    uint64_t p = fails ? 0 : heap_addr(g);
    int want = 0; /* 1 alloc, 2 realloc, 3 free */
    uint64_t old = 0;
    if (k < 35) {
        r.fn = HB_FN_MALLOC;
        r.args[0] = size;
        r.ret = p;
        ev.size = size;
        want = 1;
    } else if (k < 45) {
        uint64_t nmemb = 1 + rnd(s) % 16, each = 1 + rnd(s) % 300;
        r.fn = HB_FN_CALLOC;
        r.args[0] = nmemb;
        r.args[1] = each;
        r.ret = p;
        ev.size = nmemb * each;
        want = 1;
    } else if (k < 50) {
        r.fn = HB_FN_MEMALIGN;
        r.args[0] = 64;
        r.args[1] = size;
        r.ret = p;
        ev.size = size;
        want = 1;
    } else if (k < 55) {
        /* posix_memalign(&p, align, size): 0 and the pointer read at return,
         * or an error number and nothing allocated. */
        r.fn = HB_FN_POSIX_MEMALIGN;
        r.args[0] = 0x7ffd0000 + 8 * (rnd(s) % 16);
        r.args[1] = 32;
        r.args[2] = size;
        r.ret = fails ? 12 : 0;
        r.args[3] = fails ? 0 : p;
        ev.size = size;
        want = 1;
    } else if (k < 58) {
        r.fn = HB_FN_PVALLOC;
        r.args[0] = size;
        r.ret = p;
        ev.size = (size + PAGE - 1) / PAGE * PAGE; /* whole pages */
        want = 1;
    } else if (k < 85) {
        /* realloc / reallocarray of a live block, of NULL, or to size 0. */
        int array = rnd(s) % 4 == 0;
        uint64_t nmemb = array ? 1 + rnd(s) % 8 : 1;
        if (g->nlive && rnd(s) % 8)
            old = g->live[rnd(s) % g->nlive];
        int to_zero = old && rnd(s) % 10 == 0;
        if (to_zero) {
            size = 0;
            p = 0; /* glibc frees and returns NULL */
        } else if (old && !fails && rnd(s) % 3 == 0) {
            p = old; /* grown in place */
        }
        r.fn = array ? HB_FN_REALLOCARRAY : HB_FN_REALLOC;
        r.args[0] = old;
        r.args[1] = array ? nmemb : size;
        r.args[2] = array ? size : 0;
        r.ret = p;
        ev.size = nmemb * size;
        if (!old)
            want = 1; /* realloc(NULL, n) is malloc(n) */
        else if (to_zero)
            want = 3;
        else
            want = 2;
    } else {
        /* free, operator delete: entry only, no stack. A free made inside
         * another allocator call is never recorded, so every free record is
         * one of the program's own. Sometimes of a block made before the
         * attach (unknown). */
        struct hb_rec f;
        struct ht_event fe;
        rec_base(g, &f, HB_REC_FREE, &fe);
        f.fn = HB_FN_FREE;
        uint64_t a;
        if (g->nlive && rnd(s) % 6) {
            unsigned i = (unsigned)(rnd(s) % g->nlive);
            a = g->live[i];
            g->live[i] = g->live[--g->nlive];
        } else {
            a = 0x66660000 + 16 * (rnd(s) % 64);
        }
        f.args[0] = a;
        emit_record(g, &f, (const uint64_t[1]){0});
        fe.kind = HT_EV_FREE;
        fe.addr = a;
        fe.heap = BPF_HEAP;
        expect_put(&g->x, &fe);
        return;
    }
    emit_record(g, &r, frames);
    uint64_t got = r.fn == HB_FN_POSIX_MEMALIGN ? r.args[3] : r.ret;
    if (want == 1 && got) {
        ev.kind = HT_EV_ALLOC;
        ev.addr = got;
        expect_put(&g->x, &ev);
        live_add(g, got);
    } else if (want == 2 && got) {
        ev.kind = HT_EV_REALLOC;
        ev.addr = got;
        ev.old_addr = old;
        expect_put(&g->x, &ev);
        for (unsigned i = 0; i < g->nlive; i++)
            if (g->live[i] == old)
                g->live[i] = got;
    } else if (want == 3) {
        struct ht_event fe = {.t = ev.t, .tid = ev.tid, .kind = HT_EV_FREE, .heap = BPF_HEAP};
        fe.addr = old;
        expect_put(&g->x, &fe);
        for (unsigned i = 0; i < g->nlive; i++)
            if (g->live[i] == old) {
                g->live[i] = g->live[--g->nlive];
                break;
            }
    }
}

/* ---- Mappings: a page model of what the record semantics say. ---- */

/* An event about [a, b) pages of the model, time and thread of the record. */
static void range_event(struct gen *g, const struct ht_event *base, uint8_t kind, unsigned a,
                        unsigned b, int with_stack)
{
    struct ht_event ev = *base;
    ev.kind = kind;
    ev.addr = MAP_BASE + a * PAGE;
    ev.size = (uint64_t)(b - a) * PAGE;
    if (!with_stack) {
        ev.stack = 0;
        ev.flags = 0;
    }
    expect_put(&g->x, &ev);
}

/* Pages [a, b) go away: each stretch of like pages that is committed and
 * not the allocator's was a commit of its own, now released. */
static void model_unmap(struct gen *g, const struct ht_event *base, unsigned a, unsigned b,
                        int report)
{
    unsigned i = a;
    while (i < b) {
        uint8_t st = g->page[i];
        unsigned j = i + 1;
        while (j < b && g->page[j] == st)
            j++;
        if (report && st && !ST_HEAP(st) && ST_COMMITTED(st))
            range_event(g, base, HT_EV_RELEASE, i, j, 0);
        i = j;
    }
    memset(&g->page[a], 0, b - a);
}

static void model_map(struct gen *g, const struct ht_event *base, unsigned a, unsigned b, int heap,
                      int committed)
{
    model_unmap(g, base, a, b, 1);
    memset(&g->page[a], ST(heap, committed), b - a);
    if (!heap && committed)
        range_event(g, base, HT_EV_COMMIT, a, b, 1);
}

/* Protection of [a, b) changed: stretches not the allocator's whose
 * accessibility flips are decommitted or committed. */
static void model_protect(struct gen *g, const struct ht_event *base, unsigned a, unsigned b,
                          int committed)
{
    unsigned i = a;
    while (i < b) {
        uint8_t st = g->page[i];
        unsigned j = i + 1;
        while (j < b && g->page[j] == st)
            j++;
        if (st && !ST_HEAP(st) && ST_COMMITTED(st) != committed) {
            range_event(g, base, committed ? HT_EV_COMMIT : HT_EV_DECOMMIT, i, j, committed);
            memset(&g->page[i], ST(0, committed), j - i);
        }
        i = j;
    }
}

/* A page range [a, b) inside the model, of 1..24 pages. */
static void page_range(struct gen *g, unsigned *a, unsigned *b)
{
    unsigned len = 1 + (unsigned)(rnd(&g->seed) % 24);
    *a = (unsigned)(rnd(&g->seed) % (NPAGES - len));
    *b = *a + len;
}

/* A length that rounds up to (b - a) pages. */
static uint64_t len_of(struct gen *g, unsigned a, unsigned b)
{
    uint64_t len = (uint64_t)(b - a) * PAGE;
    return rnd(&g->seed) % 3 == 0 ? len - rnd(&g->seed) % (PAGE - 1) : len;
}

static void gen_syscall(struct gen *g)
{
    uint64_t *s = &g->seed;
    struct hb_rec r;
    struct ht_event ev;
    uint64_t frames[HB_MAX_FRAMES];
    uint64_t k = rnd(s) % 100;
    unsigned a, b;
    page_range(g, &a, &b);
    /* Made inside an allocator call (an arena, a large block): no stack
     * taken, and never counted as a commit of its own. */
    int in_alloc = rnd(s) % 3 == 0;
    int failed = rnd(s) % 20 == 0;
    uint64_t err = (uint64_t) - (int64_t)(1 + rnd(s) % 30);
    if (k < 40) {
        rec_base(g, &r, HB_REC_MMAP, &ev);
        int anon = rnd(s) % 6 != 0, shared = anon && rnd(s) % 10 == 0;
        unsigned prot = rnd(s) % 4 == 0 ? PROT_NONE : PROT_READ | PROT_WRITE;
        if (!anon && rnd(s) % 2)
            prot = PROT_READ | PROT_EXEC;
        unsigned flags = (anon ? MAP_ANONYMOUS : 0) | (shared ? MAP_SHARED : MAP_PRIVATE);
        if (rnd(s) % 3 == 0)
            flags |= MAP_FIXED;
        r.args[0] = flags & MAP_FIXED ? MAP_BASE + a * PAGE : 0;
        r.args[1] = len_of(g, a, b);
        r.args[2] = prot;
        r.args[3] = flags;
        r.args[4] = anon ? (uint64_t)-1 : 3;
        r.ret = failed ? err : MAP_BASE + a * PAGE;
        if (in_alloc)
            r.flags |= HB_F_IN_ALLOC;
        else
            stack_make(g, &r, frames, &ev);
        emit_record(g, &r, frames);
        if (failed)
            return;
        if (anon && !shared)
            model_map(g, &ev, a, b, in_alloc, (prot & PROT_WRITE) != 0);
        else
            model_unmap(g, &ev, a, b, 1); /* file or shared: no private commit */
    } else if (k < 65) {
        rec_base(g, &r, HB_REC_MUNMAP, &ev);
        if (in_alloc)
            r.flags |= HB_F_IN_ALLOC;
        r.args[0] = MAP_BASE + a * PAGE;
        r.args[1] = len_of(g, a, b);
        r.ret = failed ? err : 0;
        emit_record(g, &r, frames);
        if (!failed)
            model_unmap(g, &ev, a, b, 1);
    } else if (k < 85) {
        rec_base(g, &r, HB_REC_MPROTECT, &ev);
        int writable = rnd(s) % 2;
        r.args[0] = MAP_BASE + a * PAGE;
        r.args[1] = len_of(g, a, b);
        r.args[2] = writable ? PROT_READ | PROT_WRITE : PROT_NONE;
        r.ret = failed ? err : 0;
        if (in_alloc)
            r.flags |= HB_F_IN_ALLOC;
        else
            stack_make(g, &r, frames, &ev);
        emit_record(g, &r, frames);
        if (!failed)
            model_protect(g, &ev, a, b, writable);
    } else if (k < 95) {
        /* mremap(old, old_len, new_len, MREMAP_MAYMOVE): the pages keep
         * their kind; the old ones go (released unless the allocator's),
         * the new ones come (a commit unless the allocator's). */
        rec_base(g, &r, HB_REC_MREMAP, &ev);
        unsigned na, nb;
        page_range(g, &na, &nb);
        r.args[0] = MAP_BASE + a * PAGE;
        r.args[1] = len_of(g, a, b);
        r.args[2] = len_of(g, na, nb);
        r.args[3] = 1; /* MREMAP_MAYMOVE */
        r.ret = failed ? err : MAP_BASE + na * PAGE;
        if (in_alloc)
            r.flags |= HB_F_IN_ALLOC;
        else
            stack_make(g, &r, frames, &ev);
        emit_record(g, &r, frames);
        uint8_t st = g->page[a];
        if (failed || !st)
            return; /* unknown mapping (made before the attach): nothing known */
        model_unmap(g, &ev, a, b, !ST_HEAP(st));
        model_map(g, &ev, na, nb, ST_HEAP(st), ST_COMMITTED(st));
    } else {
        rec_base(g, &r, HB_REC_BRK, &ev);
        r.args[0] = 0x5555a000 + PAGE * (rnd(s) % 100);
        r.ret = r.args[0];
        r.flags |= HB_F_IN_ALLOC;
        emit_record(g, &r, frames); /* the main arena's break: its blocks are heap events */
    }
}

/* The kernel's drop counter read: what it grew by is lost. */
static void gen_drops(struct gen *g)
{
    uint64_t grow = rnd(&g->seed) % 3 == 0 ? 0 : 1 + rnd(&g->seed) % 500;
    g->drops += grow;
    g->t += 1000;
    struct item it = {.drops = 1, .total = g->drops, .now = g->t};
    input_item(&g->in, &it);
    if (grow) {
        struct ht_event ev = {.t = g->t - T0, .kind = HT_EV_LOST, .size = grow};
        expect_put(&g->x, &ev);
    }
}

/* Records the consumer must refuse and count, with no event. */
static void gen_malformed(struct gen *g)
{
    struct hb_rec r;
    struct ht_event ev;
    uint64_t frames[HB_MAX_FRAMES] = {0};
    rec_base(g, &r, HB_REC_ALLOC, &ev);
    switch (rnd(&g->seed) % 4) {
    case 0: /* shorter than the header */
        input_record(&g->in, &r, sizeof(r) - 1 - rnd(&g->seed) % 8);
        break;
    case 1: /* claims frames it does not carry */
        r.fn = HB_FN_MALLOC;
        r.nframes = 5; /* 5 frames claimed, 2 carried */
        {
            unsigned char buf[sizeof(r) + 16] = {0};
            memcpy(buf, &r, sizeof(r));
            input_record(&g->in, buf, sizeof(buf));
        }
        break;
    case 2: /* an unknown kind */
        r.kind = 77;
        emit_record(g, &r, frames);
        break;
    default: /* an allocation record of a function that does not allocate */
        r.fn = HB_FN_HINT;
        r.args[0] = 64;
        r.ret = 0x12340;
        emit_record(g, &r, frames);
        g->in.taken_bad++;
        break;
    }
    g->in.malformed++;
}

static void gen_init(struct gen *g, uint64_t seed, struct stack_intern *si)
{
    memset(g, 0, sizeof(*g));
    g->seed = seed;
    g->si = si;
    g->t = T0 + 1000;
    g->next_addr = 0x5600000010ULL;
    for (unsigned p = 0; p < NPATTERNS; p++)
        for (unsigned i = 0; i < HB_MAX_FRAMES; i++)
            g->patterns[p][i] = 0x401000 + 0x10000 * i + 0x40 * (rnd(&g->seed) % 16);
    /* What start reports before any record: the process. */
    struct ht_event ev = {.kind = HT_EV_PROCESS, .size = PID};
    expect_put(&g->x, &ev);
}

static void gen_run(struct gen *g, size_t nrecords)
{
    for (size_t i = 0; i < nrecords; i++) {
        uint64_t k = rnd(&g->seed) % 1000;
        if (k < 640)
            gen_alloc(g);
        else if (k < 970)
            gen_syscall(g);
        else if (k < 990)
            gen_drops(g);
        else
            gen_malformed(g);
    }
}

static void gen_free(struct gen *g)
{
    free(g->in.arena);
    free(g->in.items);
    free(g->x.ev);
}

/* ---- The backend for the harness. ---- */

struct backend_arg {
    struct input *in;
    uint32_t ring_events;
    int stats_ok; /* the source's counters matched the input */
};

static int bpf_open(void *arg, struct source **out, uv_loop_t *loop, const struct source_params *p,
                    const struct source_sink *sink, char *err, size_t errsz)
{
    struct backend_arg *b = arg;
    b->in->next = 0;
    struct bpf_synth gen = {
        .arg = b->in, .next = input_next, .pid = PID, .t0 = T0, .ring_events = b->ring_events};
    return bpf_source_open_synthetic(out, loop, p, sink, &gen, err, errsz);
}

/* The records flow on start; wait until the source's counters show every
 * record taken, every bad one counted as malformed and nothing undelivered
 * (its own lost count: drops went to the engine as lost events). A
 * miscount never gets there: feeding fails after 20 s. */
static int bpf_feed(void *arg, struct conf_run *r, struct source *src, const struct ht_event *evs,
                    size_t n, const struct stack_intern *si)
{
    (void)evs, (void)n, (void)si;
    struct backend_arg *b = arg;
    uint64_t records = 0;
    for (size_t i = 0; i < b->in->n; i++)
        records += !b->in->items[i].drops;
    uint64_t want_taken = records - b->in->malformed + b->in->taken_bad;
    uint64_t deadline = uv_hrtime() + 20000000000ULL;
    struct source_stats st;
    for (;;) {
        src->ops->stats(src, &st);
        if (st.lines == want_taken && st.malformed == b->in->malformed && st.lost == 0)
            break;
        if (uv_hrtime() > deadline) {
            fprintf(stderr, "records taken %llu of %llu, malformed %llu of %zu, undelivered %llu\n",
                    (unsigned long long)st.lines, (unsigned long long)want_taken,
                    (unsigned long long)st.malformed, b->in->malformed,
                    (unsigned long long)st.lost);
            return -1;
        }
        conf_pump(r);
    }
    b->stats_ok = 1;
    return 0;
}

#define NRECORDS 6000

/* seeds x {identity ids, remapped ids} x {a roomy ring, a tiny one that
 * wraps and makes the producer wait}. */
static void run(int prefill, uint32_t ring_events)
{
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct engine_limits lim;
        engine_limits_default(&lim);
        struct engine ref;
        CHECK(engine_init(&ref, &lim) == 0);
        struct gen *g = calloc(1, sizeof(*g));
        CHECK(g != NULL);
        gen_init(g, seed * 7919 + (uint64_t)prefill, &ref.si);
        gen_run(g, NRECORDS);
        struct backend_arg b = {.in = &g->in, .ring_events = ring_events};
        struct conf_backend be = {"bpf", bpf_open, bpf_feed, &b};
        char why[1024] = "";
        int rc = conf_check(&be, &ref, g->x.ev, g->x.n, prefill, why, sizeof(why));
        if (rc != 0)
            fprintf(stderr, "seed %llu prefill %d ring %u: %s\n", (unsigned long long)seed, prefill,
                    ring_events, why);
        /* The input exercised what it claims: commits, releases, decommits,
         * lost records, heap blocks, truncated stacks. */
        CHECK(ref.q.lost > 0 && ref.q.truncated_stacks > 0 && ref.q.unknown_frees > 0);
        CHECK(ref.peak_commit_bytes > 0 && ref.heap_count > 0);
        size_t kinds[HT_EV_EXIT + 16] = {0};
        for (size_t i = 0; i < g->x.n; i++)
            if (g->x.ev[i].kind < sizeof(kinds) / sizeof(kinds[0]))
                kinds[g->x.ev[i].kind]++;
        CHECK(kinds[HT_EV_DECOMMIT] > 0 && kinds[HT_EV_RELEASE] > 0 && kinds[HT_EV_REALLOC] > 0);
        CHECK(b.stats_ok);
        engine_close(&ref);
        gen_free(g);
        free(g);
        CHECK_EQ(rc, 0);
    }
}

static void test_identity(void)
{
    run(0, 0);
}

static void test_remapped(void)
{
    run(1, 0);
}

static void test_remapped_tiny_ring(void)
{
    run(1, 64);
}

HT_TEST_MAIN(T(identity), T(remapped), T(remapped_tiny_ring))
