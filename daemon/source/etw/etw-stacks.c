/*
 * ETW records to heaptrace events, with stack correlation (etw-stacks.h).
 * The match rule is PerfView's (TraceLog GetBestEventForQPC): the StackWalk's
 * EventTimeStamp equals its event's raw timestamp, on the StackWalk's
 * StackThread; an event whose header has no thread (VirtualAlloc) matches on
 * timestamp and processor.
 */
#include "etw-stacks.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "mem-acct.h"

#include <string.h>
#include <uv.h>

#define NO_TID 0xFFFFFFFFu
#define TID_SLOTS 1024
#define FRAMES_BYTES (ETW_MAX_FRAMES * sizeof(uint64_t)) /* one waiting event's frames, kept per slot */

struct pend {
    struct ht_event ev;
    uint64_t ts, seq, chain; /* chain: seq + 1 of the next older entry in its bucket, 0 = end */
    uint64_t arrived;        /* stream time (newest_ns) when it came: its ttl runs from there */
    uint32_t tid, cpu;
    uint8_t wants; /* of a stack kind */
    uint8_t have;  /* 0 no stack yet, 1 kernel fragment only, 2 user frames */
    uint32_t depth;
    uint64_t *frames; /* user frames, ht_malloc'd when a stack attaches */
};

struct held {
    uint64_t ts, ns; /* ns: stream time (newest_ns) when it came */
    uint32_t tid, cpu;
    uint32_t depth; /* user frames; 0 with kernel_only for a kernel fragment */
    uint8_t used, kernel_only, truncated;
    uint64_t frames[ETW_MAX_FRAMES];
};

struct tid_slot {
    uint32_t tid;
    uint64_t last_alloc;  /* address of its last Alloc */
    uint64_t awaiting;    /* a moved ReAlloc's new address waiting for its Alloc (0 none) */
};

struct etw_corr {
    struct etw_corr_config cfg;
    etw_emit_fn emit;
    void *arg;
    struct etw_corr_stats st;
    struct pend *ring;
    uint64_t head_seq, next_seq; /* entries [head_seq, next_seq) wait */
    uint64_t *bucket;            /* seq + 1 of the newest entry per hash of ts */
    uint32_t nbuckets;           /* power of two */
    struct held *held;
    uint32_t nheld_live;
    uint64_t newest_ns;
    struct tid_slot tids[TID_SLOTS];
    uint64_t scratch[ETW_MAX_FRAMES];
};

uint64_t etw_corr_ns(const struct etw_corr *c, uint64_t ts)
{
    if (ts <= c->cfg.start_qpc)
        return 0;
    unsigned __int128 d = (unsigned __int128)(ts - c->cfg.start_qpc) * 1000000000u;
    d /= c->cfg.qpc_freq;
    /* Past 2^64-1 ns the time stays at the end of time (the engine counts
     * such an event malformed) rather than wrapping to the start. */
    return d > UINT64_MAX ? UINT64_MAX : (uint64_t)d;
}

int etw_corr_new(struct etw_corr **out, const struct etw_corr_config *cfg, etw_emit_fn emit,
                 void *arg)
{
    *out = NULL;
    if (!cfg->qpc_freq)
        return HT_EBADARG;
    struct etw_corr *c = mem_calloc(cfg->acct, MEM_decoder_buffers, 1, sizeof(*c));
    if (!c)
        return UV_ENOMEM;
    c->cfg = *cfg;
    if (!c->cfg.stack_kinds)
        c->cfg.stack_kinds = ETW_STACK_KINDS_DEFAULT;
    if (!c->cfg.max_pending)
        c->cfg.max_pending = 4096;
    if (!c->cfg.max_held)
        c->cfg.max_held = 256;
    if (!c->cfg.ttl_ns)
        c->cfg.ttl_ns = 100000000ull;
    c->emit = emit;
    c->arg = arg;
    c->nbuckets = 1;
    while (c->nbuckets < 2 * c->cfg.max_pending)
        c->nbuckets <<= 1;
    c->ring = mem_calloc(c->cfg.acct, MEM_decoder_buffers, c->cfg.max_pending, sizeof(*c->ring));
    c->bucket = mem_calloc(c->cfg.acct, MEM_decoder_buffers, c->nbuckets, sizeof(*c->bucket));
    c->held = mem_calloc(c->cfg.acct, MEM_decoder_buffers, c->cfg.max_held, sizeof(*c->held));
    if (!c->ring || !c->bucket || !c->held) {
        etw_corr_free(c);
        return UV_ENOMEM;
    }
    *out = c;
    return 0;
}

void etw_corr_free(struct etw_corr *c)
{
    if (!c)
        return;
    struct mem_acct *m = c->cfg.acct;
    if (c->ring)
        for (uint32_t i = 0; i < c->cfg.max_pending; i++)
            mem_free(m, MEM_decoder_buffers, c->ring[i].frames, c->ring[i].frames ? FRAMES_BYTES : 0);
    mem_free(m, MEM_decoder_buffers, c->ring, c->ring ? c->cfg.max_pending * sizeof(*c->ring) : 0);
    mem_free(m, MEM_decoder_buffers, c->bucket, c->bucket ? c->nbuckets * sizeof(*c->bucket) : 0);
    mem_free(m, MEM_decoder_buffers, c->held, c->held ? c->cfg.max_held * sizeof(*c->held) : 0);
    mem_free(m, MEM_decoder_buffers, c, sizeof(*c));
}

const struct etw_corr_stats *etw_corr_stats(const struct etw_corr *c)
{
    return &c->st;
}

/* The bucket of a waiting event: by timestamp and thread, or timestamp and
 * processor for an event without a thread (what a stack matches on), so
 * events with one timestamp on many threads or processors do not all share
 * a chain that every stack of that timestamp would walk. */
static uint32_t ts_bucket(const struct etw_corr *c, uint64_t ts, uint32_t tid, uint32_t cpu)
{
    uint64_t k = tid == NO_TID ? ((uint64_t)cpu << 32 | NO_TID) : tid;
    uint64_t h = (ts ^ (k * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (c->nbuckets - 1);
}

static struct pend *pend_at(struct etw_corr *c, uint64_t seq)
{
    return &c->ring[seq % c->cfg.max_pending];
}

static void emit_pend(struct etw_corr *c, struct pend *p)
{
    if (p->wants && p->have < 2)
        c->st.events_no_stack++;
    c->emit(c->arg, &p->ev, p->have == 2 ? p->frames : NULL, p->have == 2 ? p->depth : 0);
}

/* Whether what came when the stream's time was ns has waited ttl of stream
 * time since (without wrapping at the end of time). From its arrival, not
 * its own timestamp: ETW delivers each processor's buffers whole, so a
 * processor's events can come after another's newer ones, each with its
 * stack right behind it (our sessions flush every second: FlushTimer 1). */
static int waited(const struct etw_corr *c, uint64_t ns)
{
    return c->newest_ns > ns && c->newest_ns - ns > c->cfg.ttl_ns;
}

/* Events leave in arrival order: the oldest leaves once it has its stack (or
 * wants none), once it waited ttl, or when room is needed (force). */
static void drain(struct etw_corr *c, int force_one)
{
    while (c->head_seq < c->next_seq) {
        struct pend *p = pend_at(c, c->head_seq);
        int ready = !p->wants || p->have == 2 || waited(c, p->arrived);
        if (!ready && !force_one)
            break;
        if (!ready) {
            c->st.pending_overflow++;
            force_one = 0;
        }
        emit_pend(c, p);
        c->head_seq++;
    }
}

/* The user frames of a stack record, innermost first, into out; kernel
 * frames (the walk starts inside NtTraceEvent) are counted and dropped. x64
 * kernel addresses are the upper canonical half (Intel SDM vol. 1, 3.3.7.1). */
static uint32_t user_frames(struct etw_corr *c, const struct etw_decoded *d, uint64_t *out,
                            uint8_t *truncated)
{
    uint32_t n = 0;
    *truncated = 0;
    for (uint32_t i = 0; i < d->nframes; i++) {
        uint64_t a = etw_ptr_at(d->frames + (size_t)i * d->ptr_size, d->ptr_size);
        if (d->ptr_size == 8 && a >= 0xFFFF800000000000ull) {
            c->st.kernel_frames++;
            continue;
        }
        if (n == ETW_MAX_FRAMES) {
            *truncated = 1;
            break;
        }
        out[n++] = a;
    }
    return n;
}

/* Attach a stack (n user frames; n == 0: a kernel fragment) to p. */
static void attach(struct etw_corr *c, struct pend *p, const uint64_t *frames, uint32_t n,
                   int truncated)
{
    if (n == 0) {
        if (p->have == 0)
            p->have = 1;
        return;
    }
    if (p->have == 1)
        c->st.stacks_merged++;
    if (!p->frames) {
        p->frames = mem_alloc(c->cfg.acct, MEM_decoder_buffers, FRAMES_BYTES);
        if (!p->frames) {
            /* No room for the frames: the event goes without its stack. */
            p->ev.flags |= HT_EVF_STACK_DROPPED;
            p->have = 2;
            p->depth = 0;
            return;
        }
    }
    memcpy(p->frames, frames, n * sizeof(uint64_t));
    p->depth = n;
    p->have = 2;
    if (truncated) {
        c->st.truncated_stacks++;
        p->ev.flags |= HT_EVF_TRUNCATED;
    }
}

/* The waiting event of a stack in one bucket. */
static struct pend *find_in(struct etw_corr *c, uint32_t b, uint64_t ts, uint32_t tid,
                            uint32_t cpu)
{
    for (uint64_t s = c->bucket[b]; s;) {
        uint64_t seq = s - 1;
        if (seq < c->head_seq)
            break; /* older ones have left */
        struct pend *p = pend_at(c, seq);
        if (p->seq != seq)
            break;
        if (p->ts == ts && p->wants && p->have < 2 &&
            (p->tid == tid || (p->tid == NO_TID && p->cpu == cpu)))
            return p;
        s = p->chain;
    }
    return NULL;
}

/* A stack's event: on its thread, or (an event without a thread) on its processor. */
static struct pend *find_pending(struct etw_corr *c, uint64_t ts, uint32_t tid, uint32_t cpu)
{
    struct pend *p = find_in(c, ts_bucket(c, ts, tid, 0), ts, tid, cpu);
    return p ? p : find_in(c, ts_bucket(c, ts, NO_TID, cpu), ts, tid, cpu);
}

static void expire_held(struct etw_corr *c, int all)
{
    if (!c->nheld_live)
        return;
    for (uint32_t i = 0; i < c->cfg.max_held; i++) {
        struct held *h = &c->held[i];
        if (h->used && (all || waited(c, h->ns))) {
            h->used = 0;
            c->nheld_live--;
            c->st.stacks_unmatched++;
        }
    }
}

static void hold_stack(struct etw_corr *c, uint64_t ts, uint64_t ns, uint32_t tid, uint32_t cpu,
                       const uint64_t *frames, uint32_t n, int truncated)
{
    struct held *h = NULL, *oldest = NULL;
    for (uint32_t i = 0; i < c->cfg.max_held && !h; i++) {
        if (!c->held[i].used)
            h = &c->held[i];
        else if (!oldest || c->held[i].ns < oldest->ns)
            oldest = &c->held[i];
    }
    if (!h) { /* full: the oldest held stack gives up */
        h = oldest;
        c->st.stacks_unmatched++;
        c->nheld_live--;
    }
    h->used = 1;
    c->nheld_live++;
    h->ts = ts;
    h->ns = ns;
    h->tid = tid;
    h->cpu = cpu;
    h->depth = n;
    h->kernel_only = n == 0;
    h->truncated = (uint8_t)truncated;
    memcpy(h->frames, frames, n * sizeof(uint64_t));
}

static void on_stack(struct etw_corr *c, const struct etw_record *r, const struct etw_decoded *d)
{
    if (c->cfg.pid && d->owner_pid != c->cfg.pid) {
        c->st.other_process++;
        return;
    }
    c->st.stacks_in++;
    uint8_t truncated;
    uint32_t n = user_frames(c, d, c->scratch, &truncated);
    struct pend *p = find_pending(c, d->stack_ts, d->stack_tid, r->cpu);
    if (p) {
        if (p->tid == NO_TID)
            p->ev.tid = d->stack_tid; /* VirtualAlloc: the thread is the stack's */
        c->st.stacks_matched++;
        attach(c, p, c->scratch, n, truncated);
        return;
    }
    hold_stack(c, d->stack_ts, c->newest_ns, d->stack_tid, r->cpu, c->scratch, n, truncated);
}

/* A stack that came first: take it (and a user fragment after a kernel one). */
static void take_held(struct etw_corr *c, struct pend *p)
{
    for (uint32_t i = 0; i < c->cfg.max_held && c->nheld_live; i++) {
        struct held *h = &c->held[i];
        if (!h->used || h->ts != p->ts ||
            !(h->tid == p->tid || (p->tid == NO_TID && h->cpu == p->cpu)))
            continue;
        h->used = 0;
        c->nheld_live--;
        if (p->tid == NO_TID)
            p->ev.tid = h->tid;
        c->st.stacks_matched++;
        c->st.stacks_early++;
        attach(c, p, h->frames, h->depth, h->truncated);
        if (p->have == 2)
            return;
    }
}

static struct tid_slot *tid_slot(struct etw_corr *c, uint32_t tid)
{
    struct tid_slot *t = &c->tids[(tid * 2654435761u) % TID_SLOTS];
    if (t->tid != tid) {
        if (t->awaiting)
            c->st.realloc_moved_unpaired++; /* evicted while it waited */
        memset(t, 0, sizeof(*t));
        t->tid = tid;
    }
    return t;
}

/* 4.4's self-check: a moved ReAlloc comes with an Alloc of its new address
 * on the same thread, before or after it. */
static void check_alloc(struct etw_corr *c, uint32_t tid, uint64_t addr)
{
    struct tid_slot *t = tid_slot(c, tid);
    if (t->awaiting) {
        if (t->awaiting != addr)
            c->st.realloc_moved_unpaired++;
        t->awaiting = 0;
        t->last_alloc = 0; /* used by that ReAlloc */
        return;
    }
    t->last_alloc = addr;
}

static void check_moved(struct etw_corr *c, uint32_t tid, uint64_t new_addr)
{
    struct tid_slot *t = tid_slot(c, tid);
    if (t->awaiting)
        c->st.realloc_moved_unpaired++;
    t->awaiting = 0;
    if (t->last_alloc == new_addr)
        t->last_alloc = 0;
    else
        t->awaiting = new_addr;
}

/* Fill ev from d; 0 when the record makes no event. Long: one case per
 * decoded kind, each a few lines, read best side by side. */
static int make_event(struct etw_corr *c, const struct etw_record *r, const struct etw_decoded *d,
                      struct ht_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->tid = r->tid == NO_TID ? 0 : r->tid;
    ev->heap = d->heap;
    ev->addr = d->addr;
    ev->size = d->size;
    switch (d->kind) {
    case ETW_HEAP_CREATE:
        c->st.heaps_created++;
        return 0;
    case ETW_HEAP_ALLOC:
        ev->kind = HT_EV_ALLOC;
        check_alloc(c, r->tid, d->addr);
        return 1;
    case ETW_HEAP_REALLOC:
        if (d->addr != d->old_addr) {
            /* A moving ReAlloc arrives with its own Alloc and Free: never
             * counted twice (PerfView's HeapTracker pairs them so). */
            c->st.realloc_moved++;
            check_moved(c, r->tid, d->addr);
            return 0;
        }
        c->st.realloc_in_place++;
        ev->kind = HT_EV_REALLOC;
        ev->old_addr = d->old_addr;
        ev->old_size = d->old_size;
        return 1;
    case ETW_HEAP_FREE:
        ev->kind = HT_EV_FREE;
        ev->size = 0;
        return 1;
    case ETW_HEAP_DESTROY:
        ev->kind = HT_EV_HEAP_DESTROY;
        return 1;
    case ETW_VIRTUAL_ALLOC:
        ev->heap = 0;
        if (!(d->vflags & ETW_MEM_COMMIT)) {
            c->st.reserve_only++;
            return 0;
        }
        ev->kind = HT_EV_COMMIT;
        return 1;
    case ETW_IMAGE_LOAD: {
        if (!c->cfg.path)
            return 0;
        char path[1024];
        etw_name_utf8(d, path, sizeof(path));
        ev->kind = HT_EV_MODULE_LOAD;
        ev->heap = c->cfg.path(c->arg, path);
        if (!ev->heap)
            c->st.module_names_dropped++;
        ev->old_addr = d->addr; /* a PE image's bias is its base: offsets are RVAs */
        c->st.modules_loaded++;
        return 1;
    }
    case ETW_IMAGE_UNLOAD:
        if (!c->cfg.path)
            return 0;
        ev->kind = HT_EV_MODULE_UNLOAD;
        ev->heap = ev->size = 0;
        c->st.modules_unloaded++;
        return 1;
    case ETW_PROCESS_START:
        if (c->cfg.process && c->cfg.pid) {
            char name[260];
            etw_name_utf8(d, name, sizeof(name));
            c->cfg.process(c->arg, d->owner_pid, name);
        }
        return 0;
    case ETW_PROCESS_END:
        if (!c->cfg.pid)
            return 0; /* every process: whose exit would it be */
        if (c->st.process_exits) {
            /* Windows reuses PIDs: a second End is another process's. */
            c->st.process_ends_repeated++;
            return 0;
        }
        ev->kind = HT_EV_EXIT;
        ev->heap = ev->addr = 0;
        ev->size = d->vflags; /* ExitStatus */
        c->st.process_exits++;
        return 1;
    case ETW_VIRTUAL_FREE:
        ev->heap = 0;
        if (d->vflags & ETW_MEM_RELEASE)
            ev->kind = HT_EV_RELEASE;
        else if (d->vflags & ETW_MEM_DECOMMIT)
            ev->kind = HT_EV_DECOMMIT;
        else {
            c->st.free_other++;
            return 0;
        }
        return 1;
    default:
        return 0;
    }
}

/* An event out now when nothing waits before it (and it wants no stack),
 * else in line behind the waiting ones. */
static void enqueue(struct etw_corr *c, const struct ht_event *ev, uint64_t ts, uint32_t tid,
                    uint32_t cpu, int wants)
{
    if (!wants && c->head_seq == c->next_seq) {
        c->emit(c->arg, ev, NULL, 0);
        return;
    }
    if (c->next_seq - c->head_seq == c->cfg.max_pending)
        drain(c, 1);
    uint64_t seq = c->next_seq++;
    struct pend *p = pend_at(c, seq);
    uint64_t *keep = p->frames;
    memset(p, 0, sizeof(*p));
    p->frames = keep;
    p->ev = *ev;
    p->ts = ts;
    p->arrived = c->newest_ns;
    p->seq = seq;
    p->tid = tid;
    p->cpu = cpu;
    p->wants = (uint8_t)wants;
    if (wants) {
        uint32_t b = ts_bucket(c, ts, tid, tid == NO_TID ? cpu : 0);
        p->chain = c->bucket[b];
        c->bucket[b] = seq + 1;
        take_held(c, p);
    }
}

void etw_corr_lost(struct etw_corr *c, uint64_t n)
{
    struct ht_event ev = {.kind = HT_EV_LOST, .size = n, .t = c->newest_ns};
    enqueue(c, &ev, 0, NO_TID, 0, 0);
}

void etw_corr_add(struct etw_corr *c, const struct etw_record *r, const struct etw_decoded *d)
{
    uint64_t ns = etw_corr_ns(c, d->kind == ETW_STACK ? d->stack_ts : r->ts);
    if ((d->kind == ETW_STACK ? d->stack_ts : r->ts) < c->cfg.start_qpc)
        c->st.before_start++;
    if (ns > c->newest_ns)
        c->newest_ns = ns;
    if (d->kind == ETW_STACK) {
        on_stack(c, r, d);
    } else {
        /* The system logger's events name their process in the payload:
         * the header's is the thread's that logged them (PageFault_VirtualAlloc
         * class: ProcessId). */
        int sys = d->kind >= ETW_VIRTUAL_ALLOC && d->kind != ETW_STACK;
        uint32_t owner = sys ? d->owner_pid : r->pid;
        if (c->cfg.follow_first && !c->cfg.pid && !sys && owner) {
            c->cfg.pid = c->st.followed_pid = owner;
            if (c->cfg.process)
                c->cfg.process(c->arg, owner, "");
        }
        if (c->cfg.follow_first && !c->cfg.pid && sys) {
            /* The system logger logs every process of the machine (its
             * rundown at the start, their VirtualAllocs): none is the
             * traced one before a heap event says which. */
            c->st.before_follow++;
        } else if (c->cfg.pid && owner != c->cfg.pid) {
            c->st.other_process++;
        } else {
            struct ht_event ev;
            if (make_event(c, r, d, &ev)) {
                c->st.events_in++;
                ev.t = ns;
                int wants = (c->cfg.stack_kinds >> d->kind) & 1;
                enqueue(c, &ev, r->ts, r->tid, r->cpu, wants);
            }
        }
    }
    expire_held(c, 0);
    drain(c, 0);
}

void etw_corr_follow(struct etw_corr *c, uint32_t pid)
{
    if (c->cfg.follow_first && !c->cfg.pid && pid)
        c->cfg.pid = c->st.followed_pid = pid;
}

void etw_corr_flush(struct etw_corr *c)
{
    c->newest_ns = UINT64_MAX - c->cfg.ttl_ns; /* everything has waited long enough */
    while (c->head_seq < c->next_seq) {
        emit_pend(c, pend_at(c, c->head_seq));
        c->head_seq++;
    }
    expire_held(c, 1);
    for (uint32_t i = 0; i < TID_SLOTS; i++)
        if (c->tids[i].awaiting) {
            c->st.realloc_moved_unpaired++;
            c->tids[i].awaiting = 0;
        }
    c->newest_ns = 0;
}
