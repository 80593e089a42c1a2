/* The source conformance harness (source-conformance.h). */
#include "source-conformance.h"

#include "frame-match.h"
#include "query.h"
#include "stack-intern.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONF_BUDGET 64 /* records per drain, as small as a session's is large: more turns */

struct conf_run {
    const struct conf_backend *b;
    struct source *src;
    uv_loop_t loop;
    struct engine e;
    int ended, ended_calls;
    size_t over_budget; /* batches larger than the budget */
    uint64_t applied;
    char process[256];
};

static int sink_events(void *arg, struct ht_event *evs, size_t n)
{
    struct conf_run *r = arg;
    if (n > CONF_BUDGET)
        r->over_budget++;
    engine_apply_batch(&r->e, evs, n);
    r->applied += n;
    return 0;
}

static void sink_process(void *arg, const struct source_process *p)
{
    struct conf_run *r = arg;
    snprintf(r->process, sizeof(r->process), "%s", p->name);
}

static void sink_ready(void *arg)
{
    (void)arg; /* the harness drains on every turn anyway */
}

static void sink_ended(void *arg, const char *reason)
{
    struct conf_run *r = arg;
    (void)reason;
    r->ended = 1;
    r->ended_calls++;
}

void conf_pump(struct conf_run *r)
{
    while (!r->ended && r->src->ops->drain(r->src, CONF_BUDGET) > 0)
        ;
    uv_run(&r->loop, UV_RUN_NOWAIT);
}

/* Random numbers: splitmix64, so a seed gives the same events everywhere. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define NSTACKS 48
#define NLIVE 512
#define NBASES 6

size_t conf_make_events(struct stack_intern *si, uint64_t seed, struct ht_event *evs, size_t cap)
{
    uint64_t s = seed;
    /* Stacks interned in a shuffled order: first use in the stream differs. */
    uint32_t stacks[NSTACKS];
    for (unsigned i = 0; i < NSTACKS; i++) {
        unsigned depth = 1 + (unsigned)(rnd(&s) % 8);
        uint64_t fr[8];
        for (unsigned k = 0; k < depth; k++) {
            if (rnd(&s) % 2) {
                char name[48];
                int n = snprintf(name, sizeof(name), "lib%u.so!fn_%u", (unsigned)(rnd(&s) % 3),
                                 (unsigned)(rnd(&s) % 40));
                fr[k] = HT_FRAME_SYM | stack_intern_str(si, name, (unsigned)n);
            } else {
                fr[k] = 0x400000 + 16 * (rnd(&s) % 200);
            }
        }
        stacks[i] = stack_intern_get(si, fr, depth);
    }
    for (unsigned i = NSTACKS - 1; i > 0; i--) {
        unsigned j = (unsigned)(rnd(&s) % (i + 1));
        uint32_t t = stacks[i];
        stacks[i] = stacks[j];
        stacks[j] = t;
    }
    uint64_t live[NLIVE], live_heap[NLIVE], commits[NLIVE];
    unsigned nlive = 0, ncommits = 0;
    uint64_t next_addr = 0x10000000, next_page = 0x7f0000000000ULL, t = 1000;
    uint64_t bases[NBASES];
    for (unsigned i = 0; i < NBASES; i++)
        bases[i] = 0x7e0000000000ULL + 0x1000000ULL * i;
    size_t n = 0;
    if (cap == 0)
        return 0;
    evs[n++] = (struct ht_event){.t = t, .kind = HT_EV_PROCESS, .size = 4242};
    while (n + 1 < cap) {
        t += 1 + rnd(&s) % 20000000; /* up to 20 ms: a few timeline samples */
        struct ht_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.t = t;
        ev.tid = (uint32_t)(1 + rnd(&s) % 4);
        uint64_t r = rnd(&s) % 100;
        uint32_t stack = rnd(&s) % 16 ? stacks[rnd(&s) % NSTACKS] : 0;
        uint64_t heap = rnd(&s) % 4 ? 0 : 0x1000 * (1 + rnd(&s) % 2);
        if (r < 40 && nlive < NLIVE) {
            ev.kind = HT_EV_ALLOC;
            ev.heap = heap;
            ev.addr = next_addr;
            next_addr += 16 * (1 + rnd(&s) % 64);
            ev.size = 1 + rnd(&s) % 4096;
            ev.stack = stack;
            ev.flags = stack && rnd(&s) % 10 == 0 ? HT_EVF_TRUNCATED : 0;
            live_heap[nlive] = heap;
            live[nlive++] = ev.addr;
        } else if (r < 65 && nlive) {
            unsigned i = (unsigned)(rnd(&s) % nlive);
            ev.kind = HT_EV_FREE;
            ev.heap = live_heap[i];
            ev.addr = live[i];
            live[i] = live[--nlive];
            live_heap[i] = live_heap[nlive];
        } else if (r < 72 && nlive) {
            unsigned i = (unsigned)(rnd(&s) % nlive);
            ev.kind = HT_EV_REALLOC;
            ev.heap = live_heap[i];
            ev.old_addr = live[i];
            ev.old_size = 1 + rnd(&s) % 4096;
            ev.size = 1 + rnd(&s) % 8192;
            ev.stack = stack;
            if (rnd(&s) % 2) {
                ev.addr = next_addr;
                next_addr += 16 * (1 + rnd(&s) % 64);
            } else {
                ev.addr = live[i];
            }
            live[i] = ev.addr;
        } else if (r < 74) {
            ev.kind = HT_EV_FREE; /* of an unknown address */
            ev.addr = 0x900000000ULL + 16 * (rnd(&s) % 100);
        } else if (r < 80 && ncommits < NLIVE) {
            ev.kind = HT_EV_COMMIT;
            ev.addr = next_page;
            ev.size = 4096 * (1 + rnd(&s) % 16);
            next_page += 0x100000;
            ev.stack = stack;
            commits[ncommits++] = ev.addr;
        } else if (r < 85 && ncommits) {
            unsigned i = (unsigned)(rnd(&s) % ncommits);
            ev.kind = rnd(&s) % 2 ? HT_EV_DECOMMIT : HT_EV_RELEASE;
            ev.addr = commits[i] + (ev.kind == HT_EV_DECOMMIT ? 4096 * (rnd(&s) % 2) : 0);
            ev.size = ev.kind == HT_EV_DECOMMIT ? 4096 : 0x100000;
            if (ev.kind == HT_EV_RELEASE)
                commits[i] = commits[--ncommits];
        } else if (r < 89) {
            ev.kind = HT_EV_PRIVATE_BYTES;
            ev.size = 1000000 + rnd(&s) % 100000000;
        } else if (r < 90) {
            ev.kind = HT_EV_LOST;
            ev.size = 1 + rnd(&s) % 10;
        } else if (r < 91 && rnd(&s) % 8 == 0) {
            ev.kind = HT_EV_HEAP_DESTROY;
            ev.heap = 0x2000;
            for (unsigned i = 0; i < nlive;) {
                if (live_heap[i] == 0x2000) {
                    live[i] = live[--nlive];
                    live_heap[i] = live_heap[nlive];
                } else {
                    i++;
                }
            }
        } else if (r < 96) {
            unsigned b = (unsigned)(rnd(&s) % NBASES);
            char path[64], bid[48];
            int pn = snprintf(path, sizeof(path), "/usr/lib/mod-%u \"q\".so", b);
            int bn = snprintf(bid, sizeof(bid), "%016llx%08x", (unsigned long long)rnd(&s), b);
            ev.kind = HT_EV_MODULE_LOAD;
            ev.addr = bases[b];
            ev.size = 0x10000 * (1 + b);
            ev.old_addr = b % 2 ? bases[b] : 0;
            ev.heap = stack_intern_str(si, path, (unsigned)pn);
            ev.old_size = b % 3 ? stack_intern_str(si, bid, (unsigned)bn) : 0;
        } else {
            ev.kind = HT_EV_MODULE_UNLOAD;
            ev.addr = rnd(&s) % 5 ? bases[rnd(&s) % NBASES] : 0x1234000;
        }
        if (ev.kind == HT_EV_NONE)
            continue;
        evs[n++] = ev;
    }
    evs[n++] = (struct ht_event){.t = t + 1, .kind = HT_EV_EXIT, .size = 3};
    return n;
}

/* A state text: one line per figure, rows of queries sorted, so ids and row
 * order do not matter, names and numbers do. */
struct text {
    char *p;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (size_t)n + 64;
        t->p = realloc(t->p, t->cap);
        if (!t->p)
            abort();
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void stack_text(struct engine *e, uint32_t stack, unsigned skip, struct text *t)
{
    unsigned d;
    const uint64_t *f = stack_intern_frames(&e->si, stack, &d);
    char buf[FRAME_TEXT_MAX];
    for (unsigned k = skip; k < d; k++)
        put(t, "%s;", frame_text(&e->si, f[k], buf, sizeof(buf)));
}

static void query_text(struct engine *e, const char *label, const struct query *q, struct text *t)
{
    struct query_result res;
    if (engine_query(e, q, &res) != 0) {
        put(t, "%s: query failed\n", label);
        return;
    }
    char **lines = calloc(res.nrows + 1, sizeof(char *));
    for (uint32_t i = 0; i < res.nrows; i++) {
        const struct query_row *r = &res.rows[i];
        struct text l = {0};
        l.cap = 256;
        l.p = malloc(l.cap);
        put(&l, "%s row ", label);
        char buf[FRAME_TEXT_MAX];
        if (q->by == HT_BY_STACK)
            stack_text(e, r->stack, r->skip, &l);
        else if (q->by == HT_BY_FRAME)
            put(&l, "%s", frame_text(&e->si, r->key, buf, sizeof(buf)));
        else if (q->by == HT_BY_IMAGE)
            put(&l, "%s", query_result_image(&res, r->key) ? query_result_image(&res, r->key) : "?");
        else
            put(&l, "%llu", (unsigned long long)r->key);
        for (int k = 0; k < 4; k++)
            put(&l, " %llu/%llu", (unsigned long long)r->count[k], (unsigned long long)r->bytes[k]);
        put(&l, " re %llu\n", (unsigned long long)r->reallocs);
        lines[i] = l.p;
    }
    qsort(lines, res.nrows, sizeof(char *), cmp_str);
    put(t, "%s: %u rows of %llu, complete %d, total %llu/%llu %llu/%llu\n", label, res.nrows,
        (unsigned long long)res.ngroups, res.complete, (unsigned long long)res.total.count[HT_AIFO],
        (unsigned long long)res.total.bytes[HT_AIFO], (unsigned long long)res.total.count[HT_AIFI],
        (unsigned long long)res.total.bytes[HT_AIFI]);
    for (uint32_t i = 0; i < res.nrows; i++) {
        put(t, "%s", lines[i]);
        free(lines[i]);
    }
    free(lines);
    query_result_free(&res);
}

static char *state_text(struct engine *e)
{
    struct text t = {0};
    t.cap = 1 << 16;
    t.p = malloc(t.cap);
    put(&t, "now %llu pid %llu exited %d code %lld\n", (unsigned long long)e->now,
        (unsigned long long)e->pid, e->exited, (long long)e->exit_code);
    put(&t, "heap %llu/%llu peak %llu table %u\n", (unsigned long long)e->heap_bytes,
        (unsigned long long)e->heap_count, (unsigned long long)e->peak_heap_bytes, e->table.count);
    put(&t, "commits %llu ranges %u peak %llu\n", (unsigned long long)e->commits.bytes,
        e->commits.n, (unsigned long long)e->peak_commit_bytes);
    put(&t, "private %llu peak %llu heaps %u\n", (unsigned long long)e->private_bytes,
        (unsigned long long)e->peak_private_bytes, e->nheaps);
#define X(name, doc) put(&t, "quality " #name " %llu\n", (unsigned long long)e->q.name);
    HT_QUALITY_MAP(X)
#undef X
    put(&t, "modules %u loads %llu unloads %llu drops %llu unknown %llu\n", e->modules.n,
        (unsigned long long)e->modules.loads, (unsigned long long)e->modules.unloads,
        (unsigned long long)e->modules.drops, (unsigned long long)e->modules.unknown_unloads);
    for (uint32_t i = 0; i < e->modules.n; i++) {
        const struct module *m = &e->modules.v[i];
        const char *path = stack_intern_strget(&e->si, m->path);
        const char *bid = stack_intern_strget(&e->si, m->build_id);
        put(&t, "module 0x%llx +%llu bias 0x%llx t %llu %s [%s]\n", (unsigned long long)m->base,
            (unsigned long long)m->size, (unsigned long long)m->bias, (unsigned long long)m->t_load,
            path ? path : "-", bid ? bid : "-");
    }
    struct query q;
    query_init(&q);
    query_text(e, "heap by stack", &q, &t);
    q.by = HT_BY_FRAME;
    query_text(e, "heap by frame", &q, &t);
    q.by = HT_BY_IMAGE;
    query_text(e, "heap by image", &q, &t);
    query_init(&q);
    q.domain = HT_DOM_COMMIT;
    query_text(e, "commits by stack", &q, &t);
    query_init(&q);
    q.t1 = e->now / 4;
    q.t2 = e->now / 2;
    query_text(e, "window heap", &q, &t);
    q.domain = HT_DOM_COMMIT;
    query_text(e, "window commits", &q, &t);
    return t.p;
}

/* The first line where a and b differ, into why. */
static void first_difference(const char *a, const char *b, char *why, size_t whysz)
{
    unsigned line = 1;
    const char *la = a, *lb = b;
    while (*a && *a == *b) {
        if (*a == '\n') {
            line++;
            la = a + 1;
            lb = b + 1;
        }
        a++;
        b++;
    }
    int na = (int)strcspn(la, "\n"), nb = (int)strcspn(lb, "\n");
    snprintf(why, whysz, "line %u: direct \"%.*s\" vs source \"%.*s\"", line, na < 200 ? na : 200,
             la, nb < 200 ? nb : 200, lb);
}

int conf_check(const struct conf_backend *b, struct engine *ref, const struct ht_event *evs,
               size_t n, int prefill, char *why, size_t whysz)
{
    for (size_t i = 0; i < n; i++)
        engine_apply(ref, &evs[i]);
    struct conf_run *r = calloc(1, sizeof(*r));
    if (!r || uv_loop_init(&r->loop) != 0)
        abort();
    r->b = b;
    if (engine_init(&r->e, &ref->lim) != 0)
        abort();
    if (prefill) {
        /* Ids of its own: the source's private ids cannot be the engine's. */
        uint64_t fr[2] = {0x1234, HT_FRAME_SYM | stack_intern_str(&r->e.si, "pre!fill", 8)};
        stack_intern_get(&r->e.si, fr, 2);
        stack_intern_get(&r->e.si, fr, 1);
        stack_intern_str(&r->e.si, "another", 7);
    }
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_STREAM;
    p.stack_depth = HT_STACK_MAX_DEPTH;
    p.max_stacks = ref->lim.max_stacks;
    p.max_strings = ref->lim.max_strings;
    p.max_name_len = ref->lim.max_name_len;
    p.sample_ns = 1000000000ULL;
    struct source_sink sink = {r, &r->e.si, sink_events, sink_process, sink_ready, sink_ended, NULL, NULL,
                               NULL};
    char err[256] = "";
    int rc = b->open(b->arg, &r->src, &r->loop, &p, &sink, err, sizeof(err));
    if (rc == 0 && (rc = r->src->ops->start(r->src, err, sizeof(err))) != 0)
        r->src->ops->close(r->src);
    if (rc != 0) {
        snprintf(why, whysz, "%s: open/start failed: %s", b->name, err);
        engine_close(&r->e);
        uv_loop_close(&r->loop);
        free(r);
        return -1;
    }
    int result = -1;
    if (b->feed(b->arg, r, r->src, evs, n, &ref->si) != 0) {
        snprintf(why, whysz, "%s: feeding failed", b->name);
        goto out;
    }
    for (unsigned turn = 0; !r->ended && turn < 1000000; turn++) {
        if (r->src->ops->drain(r->src, CONF_BUDGET) > 0) {
            uv_run(&r->loop, UV_RUN_NOWAIT);
            continue;
        }
        if (!r->ended)
            uv_run(&r->loop, UV_RUN_ONCE); /* the producer's wake-up */
    }
    if (!r->ended) {
        snprintf(why, whysz, "%s: the source never ended", b->name);
        goto out;
    }
    for (int i = 0; i < 3; i++)
        r->src->ops->drain(r->src, CONF_BUDGET); /* nothing more, no second end */
    if (r->ended_calls != 1) {
        snprintf(why, whysz, "%s: ended called %d times", b->name, r->ended_calls);
        goto out;
    }
    if (r->over_budget) {
        snprintf(why, whysz, "%s: %zu batches over the drain budget", b->name, r->over_budget);
        goto out;
    }
    if (r->applied != n) {
        snprintf(why, whysz, "%s: %llu events applied of %zu", b->name,
                 (unsigned long long)r->applied, n);
        goto out;
    }
    char *want = state_text(ref), *got = state_text(&r->e);
    if (strcmp(want, got) != 0)
        first_difference(want, got, why, whysz);
    else
        result = 0;
    free(want);
    free(got);
out:
    r->src->ops->close(r->src);
    uv_run(&r->loop, UV_RUN_DEFAULT); /* close callbacks */
    if (uv_loop_close(&r->loop) != 0 && result == 0) {
        snprintf(why, whysz, "%s: a handle outlived close", b->name);
        result = -1;
    }
    engine_close(&r->e);
    free(r);
    return result;
}
