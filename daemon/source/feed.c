/* Threaded replay source: decode on a thread, apply on the loop (see feed.h). */
#include "feed.h"

#include "ht-alloc.h"
#include "stack-intern.h"

#include <stdatomic.h>
#include <string.h>

/* Ring records that are not events: kinds past every event kind. */
#define REC_STR 0xf0   /* stack = private string id, addr = its chars, size = length */
#define REC_STACK 0xf1 /* stack = private stack id, addr = its frames, size = depth */
#define REC_NAME 0xf2  /* the process line: addr, size = private string ids of name, wall */

_Static_assert(HT_EV_KIND_COUNT < REC_STR, "ring record kinds collide with event kinds");

#define SLICE (64 * 1024) /* input bytes decoded between two publications */
#define PUBLISH_EVERY 1024 /* records written before the loop is told */

struct feed {
    uv_loop_t *loop;
    uv_async_t async;
    uv_thread_t thread;
    uv_mutex_t mu;
    uv_cond_t cv;
    feed_ready_cb ready;
    void *data;
    int thread_started;

    /* Input bytes, loop -> decoder. Counters only grow; index = counter & mask. */
    char *in;
    size_t in_cap;
    _Atomic size_t in_head; /* written by the loop */
    _Atomic size_t in_tail; /* written by the decoder */
    _Atomic int in_closed;
    size_t in_head_mine; /* loop's copy of in_head */

    /* Records, decoder -> loop. */
    struct ht_event *out;
    size_t out_cap;
    _Atomic size_t out_head; /* written by the decoder */
    _Atomic size_t out_tail; /* written by the loop */
    size_t out_tail_mine;    /* loop's copy of out_tail */

    /* Where the definition records sit in the output ring, decoder -> loop,
     * as ring counters in order. There are never more of them in flight
     * than records plus the one being pushed, so an array of twice the
     * ring's capacity never fills. The loop hands the runs between them to
     * the engine as they are, without reading the records first. */
    size_t *defpos;
    _Atomic size_t def_head; /* published before out_head */
    size_t def_head_mine;    /* decoder's */
    size_t def_tail;         /* loop's */

    _Atomic int sleeping; /* the decoder waits on cv */
    _Atomic int quit;
    _Atomic int done; /* the decoder finished the stream and published all */

    /* Decoder-only. */
    struct replay rp;
    struct stack_intern psi; /* private interner: ids travel as definitions */
    struct mem_acct acct;    /* the decoder's memory (rings, interner, parser); its thread's */
    uint32_t sent_strs, sent_stacks;
    size_t head_mine, published;
    size_t tail_seen; /* last out_tail read */
    uint32_t stats_errors;

    /* Loop-only: private id -> engine id. The engine's interner gets its
     * stacks from this feed alone, in the same order, so the two ids are
     * normally equal and events need no remapping; identity stays 1 while
     * every definition so far came out that way. */
    struct id_map str_map, stack_map;
    int identity;

    struct feed_stats st; /* under mu */
};

/* Wake the decoder if it sleeps. The caller's seq_cst store of what it waits
 * for, then this seq_cst load of sleeping, pairs with the decoder's store of
 * sleeping then load of its condition: one of the two sees the other. */
static void wake(struct feed *f)
{
    if (atomic_load(&f->sleeping)) {
        uv_mutex_lock(&f->mu);
        uv_cond_signal(&f->cv);
        uv_mutex_unlock(&f->mu);
    }
}

/* Decoder side. */

static void publish_head(struct feed *f)
{
    if (f->head_mine != f->published) {
        atomic_store_explicit(&f->def_head, f->def_head_mine, memory_order_release);
        atomic_store_explicit(&f->out_head, f->head_mine, memory_order_release);
        f->published = f->head_mine;
    }
}

static void publish(struct feed *f)
{
    publish_head(f);
    uv_async_send(&f->async);
}

static int out_has_room(struct feed *f)
{
    return f->head_mine - atomic_load(&f->out_tail) < f->out_cap;
}

static int in_ready(struct feed *f)
{
    return atomic_load(&f->in_head) != atomic_load(&f->in_tail) || atomic_load(&f->in_closed);
}

static void wait_for(struct feed *f, int (*cond)(struct feed *))
{
    uv_mutex_lock(&f->mu);
    atomic_store(&f->sleeping, 1);
    while (!cond(f) && !atomic_load(&f->quit))
        uv_cond_wait(&f->cv, &f->mu);
    atomic_store(&f->sleeping, 0);
    uv_mutex_unlock(&f->mu);
}

/* One record into the ring, waiting for room; dropped once told to quit. */
static void push(struct feed *f, const struct ht_event *ev)
{
    if (f->head_mine - f->tail_seen >= f->out_cap) {
        f->tail_seen = atomic_load_explicit(&f->out_tail, memory_order_acquire);
        if (f->head_mine - f->tail_seen >= f->out_cap) {
            publish(f);
            wait_for(f, out_has_room);
            if (atomic_load(&f->quit))
                return;
            f->tail_seen = atomic_load_explicit(&f->out_tail, memory_order_acquire);
        }
    }
    f->out[f->head_mine & (f->out_cap - 1)] = *ev;
    if (++f->head_mine - f->published >= PUBLISH_EVERY)
        publish(f);
}

/* The next record pushed is a definition. Noted before the push, which may
 * publish the head: the loop must never see the record before its note. */
static void push_defpos(struct feed *f)
{
    f->defpos[f->def_head_mine++ & (2 * f->out_cap - 1)] = f->head_mine;
}

static void push_def(struct feed *f, int kind, uint32_t id, const void *p, uint64_t size)
{
    struct ht_event r;
    memset(&r, 0, sizeof(r));
    r.kind = (uint8_t)kind;
    r.stack = id;
    r.addr = (uint64_t)(uintptr_t)p;
    r.size = size;
    push_defpos(f);
    push(f, &r);
}

/* Strings and stacks interned since the last event go out first: the
 * interner's chunks never move, so the loop reads them in place. */
static void push_new_defs(struct feed *f)
{
    for (; f->sent_strs < f->psi.nstrs; f->sent_strs++) {
        const char *s = stack_intern_strget(&f->psi, f->sent_strs);
        push_def(f, REC_STR, f->sent_strs, s, s ? strlen(s) : 0);
    }
    for (; f->sent_stacks < f->psi.nstacks; f->sent_stacks++) {
        unsigned depth;
        const uint64_t *fr = stack_intern_frames(&f->psi, f->sent_stacks, &depth);
        push_def(f, REC_STACK, f->sent_stacks, fr, depth);
    }
}

static void decoded_cb(void *arg, const struct ht_event *ev)
{
    struct feed *f = arg;
    if (ev->kind == HT_EV_PROCESS) {
        const struct htev_parser *p = &f->rp.parser;
        uint32_t name = stack_intern_str(&f->psi, p->name, (unsigned)strlen(p->name));
        uint32_t wall = p->wall[0] ? stack_intern_str(&f->psi, p->wall, (unsigned)strlen(p->wall)) : 0;
        push_new_defs(f);
        struct ht_event r;
        memset(&r, 0, sizeof(r));
        r.kind = REC_NAME;
        r.addr = name;
        r.size = wall;
        push_defpos(f);
        push(f, &r);
    } else if (f->psi.nstacks != f->sent_stacks || f->psi.nstrs != f->sent_strs) {
        push_new_defs(f);
    }
    push(f, ev);
}

static void stats_publish(struct feed *f)
{
    const struct replay *r = &f->rp;
    uv_mutex_lock(&f->mu);
    f->st.bytes = r->bytes;
    f->st.lines = r->line_no;
    f->st.events = r->events;
    f->st.malformed = r->malformed;
    memcpy(f->st.mem, f->acct.bytes, sizeof(f->st.mem));
    memcpy(f->st.over_budget, f->acct.over_budget, sizeof(f->st.over_budget));
    memcpy(f->st.no_memory, f->acct.no_memory, sizeof(f->st.no_memory));
    f->st.alloc_failures = f->acct.alloc_failures;
    f->st.stack_table_drops = f->psi.drops;
    f->st.string_drops = f->psi.str_drops;
    f->st.long_names = f->psi.long_names;
    if (r->nerrors != f->stats_errors) {
        for (uint32_t i = 0; i < r->nerrors; i++) {
            f->st.errors[i].line = r->errors[i].line;
            memcpy(f->st.errors[i].msg, r->errors[i].msg, sizeof(f->st.errors[i].msg));
        }
        f->st.nerrors = r->nerrors;
        f->stats_errors = r->nerrors;
    }
    uv_mutex_unlock(&f->mu);
}

static void decoder_main(void *arg)
{
    struct feed *f = arg;
    size_t tail = 0;
    while (!atomic_load(&f->quit)) {
        size_t head = atomic_load_explicit(&f->in_head, memory_order_acquire);
        if (head == tail) {
            /* Closed is set after the last write: read head again after it. */
            if (atomic_load(&f->in_closed) && atomic_load(&f->in_head) == tail) {
                replay_finish(&f->rp);
                stats_publish(f);
                publish_head(f); /* before done: the loop reads done, then the head */
                atomic_store(&f->done, 1);
                uv_async_send(&f->async);
                return;
            }
            publish(f);
            wait_for(f, in_ready);
            continue;
        }
        size_t off = tail & (f->in_cap - 1), n = head - tail;
        if (n > f->in_cap - off)
            n = f->in_cap - off;
        if (n > SLICE)
            n = SLICE;
        replay_feed(&f->rp, f->in + off, n);
        tail += n;
        atomic_store(&f->in_tail, tail);
        stats_publish(f);
        publish(f); /* also tells the loop there is input space again */
    }
}

/* Loop side. */

static void async_cb(uv_async_t *h)
{
    struct feed *f = h->data;
    f->ready(f, f->data);
}

static void closed_cb(uv_handle_t *h)
{
    ht_free(h->data);
}

static size_t pow2_at_least(size_t n, size_t min)
{
    size_t p = min;
    while (p < n)
        p *= 2;
    return p;
}

int feed_new(struct feed **out, uv_loop_t *loop, const struct feed_limits *lim,
             feed_ready_cb ready, void *data)
{
    *out = NULL;
    struct feed *f = ht_calloc(1, sizeof(*f));
    if (!f)
        return UV_ENOMEM;
    f->loop = loop;
    f->ready = ready;
    f->data = data;
    f->in_cap = pow2_at_least(lim->input_bytes, 1 << 16);
    f->out_cap = pow2_at_least(lim->ring_events, 1 << 10);
    f->sent_strs = f->sent_stacks = 1; /* id 0 is "none" in both tables */
    f->identity = 1;
    int rc = UV_ENOMEM;
    /* Charged before the thread starts, which orders these writes before its own. */
    mem_acct_init(&f->acct, lim->budget);
    f->in = mem_alloc(&f->acct, MEM_decoder_buffers, f->in_cap);
    f->out = mem_alloc(&f->acct, MEM_decoder_buffers, f->out_cap * sizeof(*f->out));
    f->defpos = mem_alloc(&f->acct, MEM_decoder_buffers, 2 * f->out_cap * sizeof(*f->defpos));
    if (!f->in || !f->out || !f->defpos)
        goto fail_buffers;
    if (stack_intern_init_acct(&f->psi, lim->max_stacks, lim->max_strings, lim->max_name_len,
                               &f->acct, MEM_decoder_stacks, MEM_decoder_strings) != 0)
        goto fail_buffers;
    if (replay_init(&f->rp, &f->psi, decoded_cb, f) != 0)
        goto fail_intern;
    if ((rc = uv_mutex_init(&f->mu)) != 0)
        goto fail_replay;
    if ((rc = uv_cond_init(&f->cv)) != 0)
        goto fail_mutex;
    if ((rc = uv_async_init(loop, &f->async, async_cb)) != 0)
        goto fail_cond;
    f->async.data = f;
    if ((rc = uv_thread_create(&f->thread, decoder_main, f)) != 0) {
        /* The async handle is initialized: the feed goes with its close. */
        f->thread_started = 0;
        feed_free(f);
        return rc;
    }
    f->thread_started = 1;
    *out = f;
    return 0;
fail_cond:
    uv_cond_destroy(&f->cv);
fail_mutex:
    uv_mutex_destroy(&f->mu);
fail_replay:
    replay_close(&f->rp);
fail_intern:
    stack_intern_close(&f->psi);
fail_buffers:
    ht_free(f->in);
    ht_free(f->out);
    ht_free(f->defpos);
    mem_acct_close(&f->acct);
    ht_free(f);
    return rc;
}

void feed_free(struct feed *f)
{
    if (!f)
        return;
    atomic_store(&f->quit, 1);
    uv_mutex_lock(&f->mu);
    uv_cond_signal(&f->cv);
    uv_mutex_unlock(&f->mu);
    if (f->thread_started)
        uv_thread_join(&f->thread);
    replay_close(&f->rp);
    stack_intern_close(&f->psi);
    uv_cond_destroy(&f->cv);
    uv_mutex_destroy(&f->mu);
    ht_free(f->in);
    ht_free(f->out);
    ht_free(f->defpos);
    mem_acct_close(&f->acct); /* the thread is joined: what it charged goes back */
    id_map_free(&f->str_map);
    id_map_free(&f->stack_map);
    uv_close((uv_handle_t *)&f->async, closed_cb);
}

size_t feed_space(const struct feed *f)
{
    return f->in_cap - (f->in_head_mine - atomic_load_explicit(&((struct feed *)f)->in_tail,
                                                               memory_order_acquire));
}

size_t feed_write(struct feed *f, const char *buf, size_t n)
{
    size_t space = feed_space(f);
    if (n > space)
        n = space;
    size_t off = f->in_head_mine & (f->in_cap - 1), first = f->in_cap - off;
    if (first > n)
        first = n;
    memcpy(f->in + off, buf, first);
    memcpy(f->in, buf + first, n - first);
    f->in_head_mine += n;
    atomic_store(&f->in_head, f->in_head_mine);
    wake(f);
    return n;
}

void feed_close_input(struct feed *f)
{
    atomic_store(&f->in_closed, 1);
    wake(f);
}

void feed_kick(struct feed *f)
{
    uv_async_send(&f->async);
}

int feed_finished(const struct feed *f)
{
    struct feed *m = (struct feed *)f;
    return atomic_load(&m->done) && atomic_load(&m->out_head) == f->out_tail_mine;
}

void feed_stats_get(struct feed *f, struct feed_stats *st)
{
    uv_mutex_lock(&f->mu);
    *st = f->st;
    uv_mutex_unlock(&f->mu);
}

/* Unmapped ids (out of memory) read as 0: the events keep no stack. */
static void map_set(struct id_map *m, uint32_t id, uint32_t val)
{
    uint32_t *slot = id_map_slot(m, id);
    if (slot)
        *slot = val;
}

/* The engine-side stack map's top bits: what happened to a stack (ids stay
 * below 2^30, config caps max_stacks). */
#define MAP_TRUNCATED (1u << 31) /* a frame's name was not interned: left out */
#define MAP_DROPPED (1u << 30)   /* the stack was not interned */
#define MAP_ID_MASK (MAP_DROPPED - 1)

static void apply_def(struct feed *f, struct stack_intern *si, const struct ht_event *r,
                      feed_process_fn pfn, void *arg)
{
    /* The maps grow on the loop: charged with the engine's memory. */
    f->str_map.acct = f->stack_map.acct = si->acct;
    f->str_map.kind = f->stack_map.kind = MEM_id_maps;
    if (r->kind == REC_STR) {
        const char *s = (const char *)(uintptr_t)r->addr;
        uint32_t id = s ? stack_intern_str(si, s, (unsigned)r->size) : 0;
        map_set(&f->str_map, r->stack, id);
    } else if (r->kind == REC_STACK) {
        const uint64_t *src = (const uint64_t *)(uintptr_t)r->addr;
        uint64_t frames[HT_STACK_MAX_DEPTH];
        frames[0] = 0; /* quiets -Wmaybe-uninitialized: only frames written are read */
        unsigned n = (unsigned)r->size, depth = 0;
        uint32_t flags = 0;
        for (unsigned k = 0; k < n; k++) {
            uint64_t fr = src[k];
            if (fr & HT_FRAME_SYM) {
                uint32_t name = id_map_get(&f->str_map, (uint32_t)fr);
                if (!name) { /* not interned here (counted): left out, never a 0x0 frame */
                    flags |= MAP_TRUNCATED;
                    continue;
                }
                fr = HT_FRAME_SYM | name;
            }
            frames[depth++] = fr;
        }
        uint32_t id = stack_intern_get(si, frames, depth);
        if (n && !id)
            flags |= MAP_DROPPED;
        map_set(&f->stack_map, r->stack, id | flags);
        if ((id | flags) != r->stack)
            f->identity = 0;
    } else if (r->kind == REC_NAME && pfn) {
        const char *name = stack_intern_strget(si, id_map_get(&f->str_map, r->addr));
        const char *wall = stack_intern_strget(si, id_map_get(&f->str_map, r->size));
        pfn(arg, name ? name : "", wall ? wall : "");
    }
}

/* Runs of at least this many events between two definitions go to the
 * engine where they lie. Shorter ones (a stream still defining its stacks)
 * are packed together past the definitions between them, so the engine
 * still gets long batches: its prefetching needs them. */
#define LONG_RUN 256

/* An event's stack as the engine's id (only when some definition did not map to itself). */
static void remap(struct feed *f, struct ht_event *ev)
{
    if (!ev->stack)
        return;
    uint32_t v = id_map_get(&f->stack_map, ev->stack);
    ev->stack = v & MAP_ID_MASK;
    if (v & MAP_TRUNCATED)
        ev->flags |= HT_EVF_TRUNCATED;
    if ((v & MAP_DROPPED) || !v)
        ev->flags |= HT_EVF_STACK_DROPPED;
}

/* The drain's position: records from tail up to head, budget left. */
struct drain {
    size_t tail, head, def_head, budget;
};

/* Position of the next definition, or the head when none lies before it.
 * def_head may be newer than head (the decoder can publish both again
 * between the loop's two loads), so a noted position can be past the head:
 * that is no definition of this drain. */
static size_t next_def(const struct feed *f, const struct drain *d)
{
    if (f->def_tail == d->def_head)
        return d->head;
    size_t at = f->defpos[f->def_tail & (2 * f->out_cap - 1)];
    return at < d->head ? at : d->head;
}

/* The records from d->tail up to upto, the ring's end or the budget,
 * whichever comes first: where they lie, and *n of them. */
static struct ht_event *span(struct feed *f, const struct drain *d, size_t upto, size_t *n)
{
    size_t off = d->tail & (f->out_cap - 1);
    *n = upto - d->tail;
    if (*n > f->out_cap - off)
        *n = f->out_cap - off;
    if (*n > d->budget)
        *n = d->budget;
    return f->out + off;
}

/* Records from d->tail to the ring's end, the head or the budget: definitions
 * applied, events packed down over them and handed over as one batch; stops
 * early where a long run begins. */
static int apply_packed(struct feed *f, struct stack_intern *si, struct drain *d,
                        feed_apply_fn fn, feed_process_fn pfn, void *arg)
{
    size_t n;
    struct ht_event *r = span(f, d, d->head, &n);
    size_t nd = next_def(f, d), w = 0, i = 0;
    for (; i < n; i++) {
        size_t at = d->tail + i;
        if (at == nd) {
            apply_def(f, si, &r[i], pfn, arg);
            f->def_tail++;
            nd = next_def(f, d);
            continue;
        }
        if (nd - at >= LONG_RUN)
            break;
        r[w] = r[i];
        if (!f->identity)
            remap(f, &r[w]);
        w++;
    }
    d->tail += i;
    d->budget -= i;
    return w > 0 && fn(arg, r, w) ? -1 : 0;
}

/* A long run of events from d->tail, in place, up to the next definition,
 * the ring's end or the budget. */
static int apply_in_place(struct feed *f, struct drain *d, size_t upto, feed_apply_fn fn,
                          void *arg)
{
    size_t n;
    struct ht_event *r = span(f, d, upto, &n);
    if (!f->identity)
        for (size_t i = 0; i < n; i++)
            remap(f, &r[i]);
    d->tail += n;
    d->budget -= n;
    return fn(arg, r, n) ? -1 : 0;
}

int feed_drain(struct feed *f, struct stack_intern *si, size_t budget, feed_apply_fn fn,
               feed_process_fn pfn, void *arg)
{
    struct drain d;
    d.head = atomic_load_explicit(&f->out_head, memory_order_acquire);
    /* Read after out_head: every definition below head is in it (and
     * perhaps later ones: next_def stops at the head). */
    d.def_head = atomic_load_explicit(&f->def_head, memory_order_acquire);
    d.tail = f->out_tail_mine;
    d.budget = budget;
    int rc = 0;
    while (d.tail != d.head && d.budget > 0 && rc == 0) {
        size_t nd = next_def(f, &d);
        /* nd == head: no definition before the head (and tail != head). */
        if (nd - d.tail >= LONG_RUN || nd == d.head)
            rc = apply_in_place(f, &d, nd, fn, arg);
        else
            rc = apply_packed(f, si, &d, fn, pfn, arg);
    }
    f->out_tail_mine = d.tail;
    atomic_store(&f->out_tail, d.tail);
    wake(f);
    if (rc)
        return -1;
    return d.tail != atomic_load_explicit(&f->out_head, memory_order_acquire);
}
