/* The event ring: producer thread -> loop, definitions ahead, ids remapped (see evring.h). */
#include "evring.h"

#include "ht-alloc.h"
#include "id-map.h"
#include "stack-intern.h"

#include <stdatomic.h>
#include <string.h>

/* Ring records that are not events: kinds past every event kind. */
#define REC_STR 0xf0   /* stack = private string id, addr = its chars, size = length */
#define REC_STACK 0xf1 /* stack = private stack id, addr = its frames, size = depth */
#define REC_NAME                                                                                   \
    0xf2 /* the process: addr, size = private string ids of name, wall; old_addr = pid */

_Static_assert(HT_EV_KIND_COUNT < REC_STR, "ring record kinds collide with event kinds");

#define PUBLISH_EVERY 1024 /* records written before the loop is told */
/* A ring starts this small and doubles when the producer finds it full, up to
 * the configured size: a short stream or a quiet source never costs the whole
 * ring (64 Ki records, 5 MiB with its notes), a fast one gets it after six
 * doublings. */
#define RING_START 1024

/* The producer's counters, copied under mu for the loop. */
struct producer_stats {
    uint64_t mem[MEM_KINDS], over_budget[MEM_KINDS], no_memory[MEM_KINDS];
    uint64_t alloc_failures, stack_table_drops, string_drops, long_names, bad_utf8;
};

struct evring {
    uv_loop_t *loop;
    uv_async_t async;
    uv_mutex_t mu;
    uv_cond_t cv;
    void (*ready)(void *data);
    void *data;

    /* Records, producer -> loop. Counters only grow; index = counter & mask.
     * The producer replaces out, defpos and cap (grow) only while the ring is
     * empty, so the loop reads none of them (it reads them only for records
     * below the head it acquired, published after the replacement). */
    struct ht_event *out;
    size_t cap;
    size_t max_cap;      /* the configured size: cap doubles up to it */
    int grow_failed;     /* memory refused once: the ring stays as it is */
    _Atomic size_t head; /* written by the producer */
    _Atomic size_t tail; /* written by the loop */
    size_t tail_mine;    /* loop's copy of tail */

    /* Where the noted records (definitions, the process, module events) sit
     * in the ring, producer -> loop, as ring counters in order. There are
     * never more of them in flight than records plus the one being pushed,
     * so an array of twice the ring's capacity never fills. The loop hands
     * the runs between them to the engine as they are, without reading the
     * records first. */
    size_t *defpos;
    _Atomic size_t def_head; /* published before head */
    size_t def_head_mine;    /* producer's */
    size_t def_tail;         /* loop's */

    _Atomic int sleeping; /* the producer waits on cv */
    _Atomic int quit;
    _Atomic int done; /* the producer finished and published all */

    /* Producer-only. */
    struct stack_intern psi; /* private interner: ids travel as definitions */
    struct mem_acct acct;    /* the producer's memory (ring, interner); its thread's */
    uint32_t sent_strs, sent_stacks;
    /* nowait (evring_nowait): a put that finds no room drops its event; the
     * next one that fits goes after a lost record counting them. */
    int nowait, was_full;
    uint64_t nowait_lost;          /* dropped since the last lost record */
    _Atomic uint64_t full_drops;   /* all dropped, for status */
    size_t head_mine, published;
    size_t tail_seen; /* last tail read */

    /* Loop-only: private id -> engine id. The engine's interner normally
     * gets its stacks from this ring alone, in the same order, so the two
     * ids are equal and events need no remapping; identity stays 1 while
     * every stack definition so far came out that way. Module events' string
     * ids are always remapped (they are noted records, few). */
    struct id_map str_map, stack_map;
    int identity;

    struct producer_stats st; /* under mu */
};

/* Wake the producer if it sleeps. The caller's seq_cst store of what it waits
 * for, then this seq_cst load of sleeping, pairs with the producer's store of
 * sleeping then load of its condition: one of the two sees the other. */
static void wake(struct evring *r)
{
    if (atomic_load(&r->sleeping)) {
        uv_mutex_lock(&r->mu);
        uv_cond_signal(&r->cv);
        uv_mutex_unlock(&r->mu);
    }
}

/* Producer side. */

static void stats_snapshot(struct evring *r)
{
    uv_mutex_lock(&r->mu);
    memcpy(r->st.mem, r->acct.bytes, sizeof(r->st.mem));
    memcpy(r->st.over_budget, r->acct.over_budget, sizeof(r->st.over_budget));
    memcpy(r->st.no_memory, r->acct.no_memory, sizeof(r->st.no_memory));
    r->st.alloc_failures = r->acct.alloc_failures;
    r->st.stack_table_drops = r->psi.drops;
    r->st.string_drops = r->psi.str_drops;
    r->st.long_names = r->psi.long_names;
    r->st.bad_utf8 = r->psi.bad_utf8;
    uv_mutex_unlock(&r->mu);
}

static void publish_head(struct evring *r)
{
    if (r->head_mine != r->published) {
        atomic_store_explicit(&r->def_head, r->def_head_mine, memory_order_release);
        atomic_store_explicit(&r->head, r->head_mine, memory_order_release);
        r->published = r->head_mine;
    }
}

static void publish(struct evring *r)
{
    publish_head(r);
    uv_async_send(&r->async);
}

static int has_room(struct evring *r)
{
    return r->head_mine - atomic_load(&r->tail) < r->cap;
}

static int is_empty(struct evring *r)
{
    return atomic_load(&r->tail) == r->head_mine;
}

/* Wait until cond holds (the loop wakes the producer after every drain) or quit. */
static void wait_until(struct evring *r, int (*cond)(struct evring *))
{
    uv_mutex_lock(&r->mu);
    atomic_store(&r->sleeping, 1);
    while (!cond(r) && !atomic_load(&r->quit))
        uv_cond_wait(&r->cv, &r->mu);
    atomic_store(&r->sleeping, 0);
    uv_mutex_unlock(&r->mu);
}

/* Double the ring; producer only, the ring empty (every record drained: the
 * loop's store of tail came after its last read of the old arrays). The one
 * note that may be in flight, for the record about to be pushed, moves along. */
static void grow(struct evring *r)
{
    size_t ncap = r->cap * 2;
    struct ht_event *out = mem_alloc(&r->acct, MEM_decoder_buffers, ncap * sizeof(*out));
    size_t *defpos = mem_alloc(&r->acct, MEM_decoder_buffers, 2 * ncap * sizeof(*defpos));
    if (!out || !defpos) {
        mem_free(&r->acct, MEM_decoder_buffers, out, ncap * sizeof(*out));
        mem_free(&r->acct, MEM_decoder_buffers, defpos, 2 * ncap * sizeof(*defpos));
        r->grow_failed = 1;
        return;
    }
    if (r->def_head_mine) {
        size_t last = r->def_head_mine - 1;
        defpos[last & (2 * ncap - 1)] = r->defpos[last & (2 * r->cap - 1)];
    }
    mem_free(&r->acct, MEM_decoder_buffers, r->out, r->cap * sizeof(*r->out));
    mem_free(&r->acct, MEM_decoder_buffers, r->defpos, 2 * r->cap * sizeof(*r->defpos));
    r->out = out;
    r->defpos = defpos;
    r->cap = ncap;
}

/* One record into the ring, waiting for room; -1 (dropped) once told to quit. */
static int push(struct evring *r, const struct ht_event *ev)
{
    if (r->head_mine - r->tail_seen >= r->cap) {
        r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (r->head_mine - r->tail_seen >= r->cap) {
            stats_snapshot(r);
            publish(r);
            /* Full: grow once the loop drained it all, while it may. */
            int growing = r->cap < r->max_cap && !r->grow_failed;
            wait_until(r, growing ? is_empty : has_room);
            if (atomic_load(&r->quit))
                return -1;
            if (growing) {
                grow(r);
                stats_snapshot(r);
            }
            r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
        }
    }
    r->out[r->head_mine & (r->cap - 1)] = *ev;
    if (++r->head_mine - r->published >= PUBLISH_EVERY)
        publish(r);
    return 0;
}

/* The next record pushed is noted. Noted before the push, which may publish
 * the head: the loop must never see the record before its note. */
static void push_noted(struct evring *r)
{
    r->defpos[r->def_head_mine++ & (2 * r->cap - 1)] = r->head_mine;
}

static int push_def(struct evring *r, int kind, uint32_t id, const void *p, uint64_t size)
{
    struct ht_event rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = (uint8_t)kind;
    rec.stack = id;
    rec.addr = (uint64_t)(uintptr_t)p;
    rec.size = size;
    push_noted(r);
    return push(r, &rec);
}

/* Strings and stacks interned since the last put go out first: the
 * interner's chunks never move, so the loop reads them in place. */
static int push_new_defs(struct evring *r)
{
    for (; r->sent_strs < r->psi.nstrs; r->sent_strs++) {
        const char *s = stack_intern_strget(&r->psi, r->sent_strs);
        if (push_def(r, REC_STR, r->sent_strs, s, s ? strlen(s) : 0) != 0)
            return -1;
    }
    for (; r->sent_stacks < r->psi.nstacks; r->sent_stacks++) {
        unsigned depth;
        const uint64_t *fr = stack_intern_frames(&r->psi, r->sent_stacks, &depth);
        if (push_def(r, REC_STACK, r->sent_stacks, fr, depth) != 0)
            return -1;
    }
    return 0;
}

struct stack_intern *evring_si(struct evring *r)
{
    return &r->psi;
}

/* Free records (the tail read again). */
static size_t room(struct evring *r)
{
    r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
    return r->cap - (r->head_mine - r->tail_seen);
}

/* nowait: make room for need records, without waiting: grow when the loop
 * drained it all after it was found full; else the definitions that fit
 * go (so a backlog larger than the ring still drains) and 0 is returned. */
static int nowait_room(struct evring *r, size_t need)
{
    if (r->was_full && r->cap < r->max_cap && !r->grow_failed && room(r) == r->cap) {
        grow(r); /* empty: the loop reads none of the old arrays */
        stats_snapshot(r);
        r->was_full = 0;
    }
    size_t free_now = room(r);
    if (free_now >= need)
        return 1;
    size_t defs = (r->psi.nstrs - r->sent_strs) + (r->psi.nstacks - r->sent_stacks);
    for (; defs > 0 && free_now > 0 && r->sent_strs < r->psi.nstrs; r->sent_strs++, defs--, free_now--) {
        const char *s = stack_intern_strget(&r->psi, r->sent_strs);
        push_def(r, REC_STR, r->sent_strs, s, s ? strlen(s) : 0);
    }
    for (; defs > 0 && free_now > 0 && r->sent_stacks < r->psi.nstacks;
         r->sent_stacks++, defs--, free_now--) {
        unsigned depth;
        const uint64_t *fr = stack_intern_frames(&r->psi, r->sent_stacks, &depth);
        push_def(r, REC_STACK, r->sent_stacks, fr, depth);
    }
    r->was_full = 1;
    publish(r); /* the loop drains what is there */
    return 0;
}

static int put_nowait(struct evring *r, const struct ht_event *ev)
{
    size_t defs = (r->psi.nstrs - r->sent_strs) + (r->psi.nstacks - r->sent_stacks);
    if (!nowait_room(r, defs + 1 + (r->nowait_lost ? 1 : 0))) {
        r->nowait_lost++;
        atomic_fetch_add_explicit(&r->full_drops, 1, memory_order_relaxed);
        return 1;
    }
    if (defs && push_new_defs(r) != 0)
        return -1;
    if (r->nowait_lost) {
        struct ht_event lost = {.t = ev->t, .kind = HT_EV_LOST, .size = r->nowait_lost};
        r->nowait_lost = 0;
        if (push(r, &lost) != 0)
            return -1;
    }
    if (ev->kind == HT_EV_MODULE_LOAD || ev->kind == HT_EV_MODULE_UNLOAD)
        push_noted(r);
    return push(r, ev);
}

void evring_nowait(struct evring *r)
{
    r->nowait = 1;
}

uint64_t evring_full_drops(struct evring *r)
{
    return atomic_load_explicit(&r->full_drops, memory_order_relaxed);
}

int evring_put(struct evring *r, const struct ht_event *ev)
{
    if (atomic_load_explicit(&r->quit, memory_order_relaxed))
        return -1;
    if (r->nowait)
        return put_nowait(r, ev);
    if ((r->psi.nstacks != r->sent_stacks || r->psi.nstrs != r->sent_strs) && push_new_defs(r) != 0)
        return -1;
    if (ev->kind == HT_EV_MODULE_LOAD || ev->kind == HT_EV_MODULE_UNLOAD)
        push_noted(r); /* its string ids are remapped one by one */
    return push(r, ev);
}

int evring_process(struct evring *r, uint64_t pid, const char *name, const char *wall)
{
    uint32_t nid = stack_intern_str(&r->psi, name ? name : "", (unsigned)strlen(name ? name : ""));
    uint32_t wid = wall && wall[0] ? stack_intern_str(&r->psi, wall, (unsigned)strlen(wall)) : 0;
    if (r->nowait &&
        !nowait_room(r, (r->psi.nstrs - r->sent_strs) + (r->psi.nstacks - r->sent_stacks) + 1))
        return -1; /* the name waits for the next one (the events still come) */
    if (push_new_defs(r) != 0)
        return -1;
    struct ht_event rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = REC_NAME;
    rec.addr = nid;
    rec.size = wid;
    rec.old_addr = pid;
    push_noted(r);
    return push(r, &rec);
}

void evring_publish(struct evring *r)
{
    stats_snapshot(r);
    publish(r);
}

void evring_done(struct evring *r)
{
    stats_snapshot(r);
    publish_head(r); /* before done: the loop reads done, then the head */
    atomic_store(&r->done, 1);
    uv_async_send(&r->async);
}

int evring_quitting(struct evring *r)
{
    return atomic_load(&r->quit);
}

void evring_producer_stats(struct evring *r, struct source_stats *st)
{
    uv_mutex_lock(&r->mu);
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] += r->st.mem[k];
        st->over_budget[k] += r->st.over_budget[k];
        st->no_memory[k] += r->st.no_memory[k];
    }
    st->alloc_failures += r->st.alloc_failures;
    st->stack_table_drops += r->st.stack_table_drops;
    st->string_drops += r->st.string_drops;
    st->long_names += r->st.long_names;
    st->bad_utf8_names += r->st.bad_utf8;
    uv_mutex_unlock(&r->mu);
}

/* Loop side. */

static void async_cb(uv_async_t *h)
{
    struct evring *r = h->data;
    r->ready(r->data);
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

int evring_new(struct evring **out, uv_loop_t *loop, const struct evring_limits *lim,
               void (*ready)(void *data), void *data)
{
    *out = NULL;
    struct evring *r = ht_calloc(1, sizeof(*r));
    if (!r)
        return UV_ENOMEM;
    r->loop = loop;
    r->ready = ready;
    r->data = data;
    r->max_cap = pow2_at_least(lim->ring_events, RING_START);
    r->cap = RING_START;
    r->sent_strs = r->sent_stacks = 1; /* id 0 is "none" in both tables */
    r->identity = 1;
    int rc = UV_ENOMEM;
    /* Charged before the producer starts, which orders these writes before its own. */
    mem_acct_init(&r->acct, lim->budget);
    r->out = mem_alloc(&r->acct, MEM_decoder_buffers, r->cap * sizeof(*r->out));
    r->defpos = mem_alloc(&r->acct, MEM_decoder_buffers, 2 * r->cap * sizeof(*r->defpos));
    if (!r->out || !r->defpos)
        goto fail_buffers;
    if (stack_intern_init_acct(&r->psi, lim->max_stacks, lim->max_strings, lim->max_name_len,
                               &r->acct, MEM_decoder_stacks, MEM_decoder_strings) != 0)
        goto fail_buffers;
    if ((rc = uv_mutex_init(&r->mu)) != 0)
        goto fail_intern;
    if ((rc = uv_cond_init(&r->cv)) != 0)
        goto fail_mutex;
    if ((rc = uv_async_init(loop, &r->async, async_cb)) != 0)
        goto fail_cond;
    r->async.data = r;
    stats_snapshot(r);
    *out = r;
    return 0;
fail_cond:
    uv_cond_destroy(&r->cv);
fail_mutex:
    uv_mutex_destroy(&r->mu);
fail_intern:
    stack_intern_close(&r->psi);
fail_buffers:
    mem_free(&r->acct, MEM_decoder_buffers, r->out, r->cap * sizeof(*r->out));
    mem_free(&r->acct, MEM_decoder_buffers, r->defpos, 2 * r->cap * sizeof(*r->defpos));
    mem_acct_close(&r->acct);
    ht_free(r);
    return rc;
}

void evring_quit(struct evring *r)
{
    atomic_store(&r->quit, 1);
    uv_mutex_lock(&r->mu);
    uv_cond_signal(&r->cv);
    uv_mutex_unlock(&r->mu);
}

void evring_free(struct evring *r)
{
    if (!r)
        return;
    stack_intern_close(&r->psi);
    uv_cond_destroy(&r->cv);
    uv_mutex_destroy(&r->mu);
    mem_free(&r->acct, MEM_decoder_buffers, r->out, r->cap * sizeof(*r->out));
    mem_free(&r->acct, MEM_decoder_buffers, r->defpos, 2 * r->cap * sizeof(*r->defpos));
    mem_acct_close(&r->acct); /* the producer is joined: what it charged goes back */
    id_map_free(&r->str_map);
    id_map_free(&r->stack_map);
    uv_close((uv_handle_t *)&r->async, closed_cb);
}

void evring_kick(struct evring *r)
{
    uv_async_send(&r->async);
}

int evring_finished(struct evring *r)
{
    return atomic_load(&r->done) && atomic_load(&r->head) == r->tail_mine;
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

static void def_stack(struct evring *r, struct stack_intern *si, const struct ht_event *rec)
{
    const uint64_t *src = (const uint64_t *)(uintptr_t)rec->addr;
    uint64_t frames[HT_STACK_MAX_DEPTH];
    frames[0] = 0; /* quiets -Wmaybe-uninitialized: only frames written are read */
    unsigned n = (unsigned)rec->size, depth = 0;
    uint32_t flags = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t fr = src[k];
        if (fr & HT_FRAME_SYM) {
            uint32_t name = id_map_get(&r->str_map, (uint32_t)fr);
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
    map_set(&r->stack_map, rec->stack, id | flags);
    if ((id | flags) != rec->stack)
        r->identity = 0;
}

static void apply_def(struct evring *r, const struct source_sink *sink, const struct ht_event *rec)
{
    struct stack_intern *si = sink->si;
    /* The maps grow on the loop: charged with the engine's memory. */
    r->str_map.acct = r->stack_map.acct = si->acct;
    r->str_map.kind = r->stack_map.kind = MEM_id_maps;
    if (rec->kind == REC_STR) {
        const char *s = (const char *)(uintptr_t)rec->addr;
        uint32_t id = s ? stack_intern_str(si, s, (unsigned)rec->size) : 0;
        map_set(&r->str_map, rec->stack, id);
    } else if (rec->kind == REC_STACK) {
        def_stack(r, si, rec);
    } else if (rec->kind == REC_NAME && sink->process) {
        const char *name = stack_intern_strget(si, id_map_get(&r->str_map, rec->addr));
        const char *wall = stack_intern_strget(si, id_map_get(&r->str_map, rec->size));
        struct source_process p = {rec->old_addr, name ? name : "", wall ? wall : ""};
        sink->process(sink->arg, &p);
    }
}

/* Runs of at least this many events between two noted records go to the
 * engine where they lie. Shorter ones (a stream still defining its stacks)
 * are packed together past the definitions between them, so the engine
 * still gets long batches: its prefetching needs them. */
#define LONG_RUN 256

/* An event's stack as the engine's id (only when some definition did not map to itself). */
static void remap(struct evring *r, struct ht_event *ev)
{
    if (!ev->stack)
        return;
    uint32_t v = id_map_get(&r->stack_map, ev->stack);
    ev->stack = v & MAP_ID_MASK;
    if (v & MAP_TRUNCATED)
        ev->flags |= HT_EVF_TRUNCATED;
    if ((v & MAP_DROPPED) || !v)
        ev->flags |= HT_EVF_STACK_DROPPED;
}

/* A module event's path and build-id string ids as the engine's (0 when not interned). */
static void remap_module(struct evring *r, struct ht_event *ev)
{
    if (ev->heap)
        ev->heap = id_map_get(&r->str_map, ev->heap);
    if (ev->old_size)
        ev->old_size = id_map_get(&r->str_map, ev->old_size);
}

/* The drain's position: records from tail up to head, budget left. */
struct drain {
    size_t tail, head, def_head, budget;
};

/* Position of the next noted record, or the head when none lies before it.
 * def_head may be newer than head (the producer can publish both again
 * between the loop's two loads), so a noted position can be past the head:
 * that is none of this drain's. */
static size_t next_def(const struct evring *r, const struct drain *d)
{
    if (r->def_tail == d->def_head)
        return d->head;
    size_t at = r->defpos[r->def_tail & (2 * r->cap - 1)];
    return at < d->head ? at : d->head;
}

/* The records from d->tail up to upto, the ring's end or the budget,
 * whichever comes first: where they lie, and *n of them. */
static struct ht_event *span(struct evring *r, const struct drain *d, size_t upto, size_t *n)
{
    size_t off = d->tail & (r->cap - 1);
    *n = upto - d->tail;
    if (*n > r->cap - off)
        *n = r->cap - off;
    if (*n > d->budget)
        *n = d->budget;
    return r->out + off;
}

/* Records from d->tail to the ring's end, the head or the budget: definitions
 * applied, events packed down over them and handed over as one batch; stops
 * early where a long run begins. */
static int apply_packed(struct evring *r, const struct source_sink *sink, struct drain *d)
{
    size_t n;
    struct ht_event *rec = span(r, d, d->head, &n);
    size_t nd = next_def(r, d), w = 0, i = 0;
    for (; i < n; i++) {
        size_t at = d->tail + i;
        int module = 0;
        if (at == nd) {
            r->def_tail++;
            nd = next_def(r, d);
            if (rec[i].kind >= REC_STR) {
                apply_def(r, sink, &rec[i]);
                continue;
            }
            module = 1; /* a noted event: a module load or unload */
        } else if (nd - at >= LONG_RUN) {
            break;
        }
        rec[w] = rec[i];
        if (module)
            remap_module(r, &rec[w]);
        if (!r->identity)
            remap(r, &rec[w]);
        w++;
    }
    d->tail += i;
    d->budget -= i;
    return w > 0 && sink->events(sink->arg, rec, w) ? -1 : 0;
}

/* A long run of events from d->tail, in place, up to the next noted record,
 * the ring's end or the budget. */
static int apply_in_place(struct evring *r, const struct source_sink *sink, struct drain *d,
                          size_t upto)
{
    size_t n;
    struct ht_event *rec = span(r, d, upto, &n);
    if (!r->identity)
        for (size_t i = 0; i < n; i++)
            remap(r, &rec[i]);
    d->tail += n;
    d->budget -= n;
    return sink->events(sink->arg, rec, n) ? -1 : 0;
}

int evring_drain(struct evring *r, const struct source_sink *sink, size_t budget)
{
    struct drain d;
    d.head = atomic_load_explicit(&r->head, memory_order_acquire);
    /* Read after head: every noted record below head is in it (and perhaps
     * later ones: next_def stops at the head). */
    d.def_head = atomic_load_explicit(&r->def_head, memory_order_acquire);
    d.tail = r->tail_mine;
    d.budget = budget;
    int rc = 0;
    while (d.tail != d.head && d.budget > 0 && rc == 0) {
        size_t nd = next_def(r, &d);
        /* nd == head: nothing noted before the head (and tail != head). */
        if (nd - d.tail >= LONG_RUN || nd == d.head)
            rc = apply_in_place(r, sink, &d, nd);
        else
            rc = apply_packed(r, sink, &d);
    }
    r->tail_mine = d.tail;
    atomic_store(&r->tail, d.tail);
    wake(r);
    if (rc)
        return -1;
    return d.tail != atomic_load_explicit(&r->head, memory_order_acquire);
}
