/* Converting eBPF ring records into heaptrace events. */
#include "consume.h"

#include "heaptrace-bpf.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "stack-intern.h"
#include "unwind.h"

#include <string.h>
#include <sys/mman.h>

/* Regions tracked by the consumer: bounded, a glibc thread arena is one region. */
#define REGIONS_CAP (1u << 20)

/* Executable mappings kept: a process has a few per module, a JIT more. */
#define EXEC_CAP 65536

/* -errno results of syscalls are in [-4095, -1] (include/linux/err.h MAX_ERRNO). */
#define SYS_FAILED(ret) ((ret) >= (uint64_t)-4095)

void bpf_consumer_init(struct bpf_consumer *c, const struct bpf_emit *emit, uint64_t t0,
                       uint32_t stack_depth)
{
    memset(c, 0, sizeof(*c));
    c->emit = *emit;
    c->t0 = t0;
    c->stack_depth =
        stack_depth && stack_depth <= HT_STACK_MAX_DEPTH ? stack_depth : HT_STACK_MAX_DEPTH;
    c->page_size = 4096;
    regions_init(&c->regions, REGIONS_CAP);
}

void bpf_consumer_close(struct bpf_consumer *c)
{
    regions_close(&c->regions);
    ht_free(c->exec.r);
    c->exec.r = NULL;
    c->exec.n = c->exec.cap = 0;
}

void bpf_consumer_exec_reset(struct bpf_consumer *c)
{
    c->exec.n = 0;
}

/* Index of the first range ending above addr. */
static size_t exec_find(const struct exec_ranges *x, uint64_t addr)
{
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->r[mid][1] <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int exec_grow(struct exec_ranges *x)
{
    if (x->n < x->cap)
        return 0;
    size_t cap = x->cap ? x->cap * 2 : 64;
    if (cap > EXEC_CAP)
        return HT_EFULL;
    void *r = ht_realloc(x->r, cap * sizeof(*x->r));
    if (!r)
        return HT_ENOMEM;
    x->r = r;
    x->cap = cap;
    return 0;
}

/* [start, end) into the set, merged with what it touches. */
static int exec_insert(struct bpf_consumer *c, uint64_t start, uint64_t end)
{
    struct exec_ranges *x = &c->exec;
    if (start >= end)
        return 0;
    /* Merge with every range it touches or overlaps. */
    size_t i = exec_find(x, start ? start - 1 : 0), j = i;
    while (j < x->n && x->r[j][0] <= end) {
        start = x->r[j][0] < start ? x->r[j][0] : start;
        end = x->r[j][1] > end ? x->r[j][1] : end;
        j++;
    }
    if (j > i) {
        x->r[i][0] = start;
        x->r[i][1] = end;
        memmove(&x->r[i + 1], &x->r[j], (x->n - j) * sizeof(*x->r));
        x->n -= j - i - 1;
        return 0;
    }
    int rc = exec_grow(x);
    if (rc) {
        x->overflows++;
        return rc;
    }
    memmove(&x->r[i + 1], &x->r[i], (x->n - i) * sizeof(*x->r));
    x->r[i][0] = start;
    x->r[i][1] = end;
    x->n++;
    return 0;
}

int bpf_consumer_exec_add(struct bpf_consumer *c, uint64_t start, uint64_t end)
{
    c->exec.known = 1;
    return exec_insert(c, start, end);
}

int bpf_consumer_exec_has(const struct bpf_consumer *c, uint64_t addr)
{
    const struct exec_ranges *x = &c->exec;
    if (!x->known || x->overflows)
        return 1; /* not all known: a frame cannot be told to be outside */
    size_t i = exec_find(x, addr);
    return i < x->n && x->r[i][0] <= addr;
}

/* Frames up to the first one outside every executable mapping: the rest
 * of a walk past data is data too. */
static unsigned frames_in_exec(struct bpf_consumer *c, const uint64_t *frames, unsigned n,
                               struct ht_event *ev)
{
    for (unsigned i = 0; i < n; i++)
        if (!bpf_consumer_exec_has(c, frames[i])) {
            c->stacks_outside_exec++;
            ev->flags |= HT_EVF_TRUNCATED;
            return i;
        }
    return n;
}

/* The record being converted: its event template and stack. */
struct cur {
    struct bpf_consumer *c;
    const struct hb_rec *rec;
    struct ht_event base;
    int stopped;
};

static void stack_set(struct bpf_consumer *c, struct ht_event *ev, const struct hb_rec *rec,
                      const void *tail, size_t tail_len)
{
    uint64_t frames[HB_MAX_FRAMES];
    unsigned n = 0;
    if (rec->flags & HB_F_DWARF) {
        if (!c->uw || tail_len < sizeof(struct hb_regs))
            return;
        struct hb_regs regs;
        memcpy(&regs, tail, sizeof(regs));
        n = unwinder_run(c->uw, rec->tid, &regs, (const uint8_t *)tail + sizeof(regs),
                         tail_len - sizeof(regs), frames, HB_MAX_FRAMES);
        if (n == 0)
            c->unwind_failures++;
        if (n && unwinder_cut(c->uw)) {
            c->stacks_copy_short++;
            ev->flags |= HT_EVF_TRUNCATED;
        }
    } else {
        n = rec->nframes;
        memcpy(frames, tail, (size_t)n * sizeof(uint64_t));
        if (rec->flags & HB_F_TRUNCATED)
            ev->flags |= HT_EVF_TRUNCATED;
    }
    n = frames_in_exec(c, frames, n, ev);
    if (n > c->stack_depth) {
        n = c->stack_depth;
        ev->flags |= HT_EVF_TRUNCATED;
    }
    if (n == 0)
        return;
    ev->stack = c->emit.stack(c->emit.arg, frames, n);
    if (ev->stack == 0)
        ev->flags |= HT_EVF_STACK_DROPPED;
}

static int emit(struct cur *k, uint8_t kind, uint64_t addr, uint64_t size, int with_stack)
{
    struct ht_event ev = k->base;
    ev.kind = kind;
    ev.addr = addr;
    ev.size = size;
    if (!with_stack) {
        ev.stack = 0;
        ev.flags &= (uint8_t) ~(HT_EVF_TRUNCATED | HT_EVF_STACK_DROPPED);
    }
    if (k->stopped || k->c->emit.event(k->c->emit.arg, &ev)) {
        k->stopped = 1;
        return -1;
    }
    k->c->events++;
    return 0;
}

static int alloc_record(struct cur *k)
{
    const struct hb_rec *r = k->rec;
    uint64_t ptr = r->ret, size = r->args[0], old = 0;
    int realloc_like = 0;
    switch (r->fn) {
    case HB_FN_MALLOC:
        break;
    case HB_FN_PVALLOC:
        size = (size + k->c->page_size - 1) & ~(k->c->page_size - 1);
        break;
    case HB_FN_CALLOC:
        if (__builtin_mul_overflow(r->args[0], r->args[1], &size))
            return 0; /* refused by the allocator (ENOMEM), whatever it returned */
        break;
    case HB_FN_MEMALIGN:
        size = r->args[1];
        break;
    case HB_FN_POSIX_MEMALIGN:
        ptr = r->ret == 0 ? r->args[3] : 0;
        size = r->args[2];
        break;
    case HB_FN_REALLOC:
        old = r->args[0];
        size = r->args[1];
        realloc_like = 1;
        break;
    case HB_FN_REALLOCARRAY:
        /* An overflowing n * m fails with ENOMEM and leaves the old block
         * alone: a wrapped product of 0 is not realloc(p, 0). */
        if (__builtin_mul_overflow(r->args[1], r->args[2], &size))
            return 0;
        old = r->args[0];
        realloc_like = 1;
        break;
    default:
        k->c->malformed++;
        return 0;
    }
    if (realloc_like && old) {
        if (ptr == 0) /* failed, or realloc(p, 0) freed p (glibc) */
            return size == 0 ? emit(k, HT_EV_FREE, old, 0, 0) : 0;
        struct ht_event ev = k->base;
        ev.kind = HT_EV_REALLOC;
        ev.addr = ptr;
        ev.old_addr = old;
        ev.size = size;
        if (k->c->emit.event(k->c->emit.arg, &ev))
            return -1;
        k->c->events++;
        return 0;
    }
    return ptr ? emit(k, HT_EV_ALLOC, ptr, size, 1) : 0;
}

/* A piece of a mapping that went away or was replaced. */
static void piece_gone(void *arg, const struct region *old)
{
    struct cur *k = arg;
    if (!old->heap && old->committed)
        emit(k, HT_EV_RELEASE, old->start, old->end - old->start, 0);
}

/* A piece whose protection flipped between PROT_NONE and accessible. */
static void piece_flipped(void *arg, const struct region *old)
{
    struct cur *k = arg;
    if (old->committed)
        emit(k, HT_EV_DECOMMIT, old->start, old->end - old->start, 0);
    else
        emit(k, HT_EV_COMMIT, old->start, old->end - old->start, 1);
}

static uint64_t page_up(struct bpf_consumer *c, uint64_t len)
{
    return (len + c->page_size - 1) & ~(c->page_size - 1);
}

static void mmap_record(struct cur *k)
{
    struct bpf_consumer *c = k->c;
    const struct hb_rec *r = k->rec;
    uint64_t addr = r->ret, len = page_up(c, r->args[1]);
    unsigned prot = (unsigned)r->args[2], flags = (unsigned)r->args[3];
    if (SYS_FAILED(addr))
        return;
    int anon_private = (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE;
    if ((prot & PROT_EXEC) && !(flags & MAP_ANONYMOUS))
        c->exec_mapped = 1;
    /* Code the next records' frames may be in, before the maps are read
     * again (known only once the maps were read whole: bpf_consumer_exec_add). */
    if (prot & PROT_EXEC)
        exec_insert(c, addr, addr + len);
    if (!anon_private) {
        /* File or shared mappings are not private commit; one placed over a
         * known region ends that region. */
        regions_unmap(&c->regions, addr, addr + len, piece_gone, k);
        return;
    }
    int heap = (r->flags & HB_F_IN_ALLOC) != 0;
    int committed = (prot & PROT_WRITE) != 0;
    regions_map(&c->regions, addr, addr + len, heap, committed, piece_gone, k);
    if (!heap && committed)
        emit(k, HT_EV_COMMIT, addr, len, 1);
}

static void mremap_record(struct cur *k)
{
    struct bpf_consumer *c = k->c;
    const struct hb_rec *r = k->rec;
    uint64_t old = r->args[0], old_len = page_up(c, r->args[1]);
    uint64_t new_len = page_up(c, r->args[2]), addr = r->ret;
    if (SYS_FAILED(addr))
        return;
    const struct region *g = regions_find(&c->regions, old);
    if (!g)
        return; /* mapped before we attached: unknown */
    int heap = g->heap, committed = g->committed;
    regions_unmap(&c->regions, old, old + old_len, heap ? NULL : piece_gone, k);
    regions_map(&c->regions, addr, addr + new_len, heap, committed, piece_gone, k);
    if (!heap && committed)
        emit(k, HT_EV_COMMIT, addr, new_len, 1);
}

static void syscall_record(struct cur *k)
{
    struct bpf_consumer *c = k->c;
    const struct hb_rec *r = k->rec;
    switch (r->kind) {
    case HB_REC_MMAP:
        mmap_record(k);
        break;
    case HB_REC_MUNMAP:
        if (r->ret == 0)
            regions_unmap(&c->regions, r->args[0], r->args[0] + page_up(c, r->args[1]), piece_gone,
                          k);
        break;
    case HB_REC_MPROTECT:
        if (r->ret == 0 && (r->args[2] & PROT_EXEC))
            exec_insert(c, r->args[0], r->args[0] + page_up(c, r->args[1]));
        if (r->ret == 0)
            regions_protect(&c->regions, r->args[0], r->args[0] + page_up(c, r->args[1]),
                            (r->args[2] & PROT_WRITE) != 0, piece_flipped, k);
        break;
    case HB_REC_MREMAP:
        mremap_record(k);
        break;
    case HB_REC_BRK:
        /* The main heap's break: glibc's own, its blocks are heap events. */
        c->brk_calls++;
        break;
    }
}

static size_t tail_size(const struct hb_rec *r)
{
    if (r->flags & HB_F_DWARF)
        return sizeof(struct hb_regs) + r->stack_len;
    return (size_t)r->nframes * sizeof(uint64_t);
}

static int consume_one(struct bpf_consumer *c, const void *data, size_t size);

int bpf_consume_record(struct bpf_consumer *c, const void *data, size_t size)
{
    int rc = consume_one(c, data, size);
    if (rc)
        c->undelivered++; /* the sink refused it: not an event, not a lost event either */
    return rc;
}

static int consume_one(struct bpf_consumer *c, const void *data, size_t size)
{
    struct hb_rec rec;
    if (size < sizeof(rec)) {
        c->malformed++;
        return 0;
    }
    memcpy(&rec, data, sizeof(rec));
    size_t tail = tail_size(&rec);
    if (size - sizeof(rec) < tail || rec.nframes > HB_MAX_FRAMES || rec.stack_len > HB_STACK_COPY ||
        rec.kind < HB_REC_ALLOC || rec.kind > HB_REC_EXEC) {
        c->malformed++;
        return 0;
    }
    c->records++;
    if (rec.kind == HB_REC_EXEC) {
        /* Whatever follows belongs to another program: stop here. */
        c->exec_seen = 1;
        return -1;
    }
    struct cur k = {.c = c, .rec = &rec};
    k.base.t = rec.t > c->t0 ? rec.t - c->t0 : 0;
    k.base.tid = rec.tid;
    k.base.heap = BPF_HEAP;
    int wants_stack = rec.kind == HB_REC_ALLOC || rec.kind == HB_REC_MMAP ||
                      rec.kind == HB_REC_MPROTECT || rec.kind == HB_REC_MREMAP;
    if (wants_stack && tail)
        stack_set(c, &k.base, &rec, (const uint8_t *)data + sizeof(rec), tail);
    if (rec.kind == HB_REC_ALLOC)
        return alloc_record(&k);
    if (rec.kind == HB_REC_FREE)
        return rec.args[0] ? emit(&k, HT_EV_FREE, rec.args[0], 0, 0) : 0;
    syscall_record(&k);
    return k.stopped ? -1 : 0;
}

int bpf_consume_drops(struct bpf_consumer *c, uint64_t total, uint64_t now)
{
    if (total <= c->drops_seen)
        return 0;
    struct ht_event ev = {.kind = HT_EV_LOST, .size = total - c->drops_seen};
    ev.t = now > c->t0 ? now - c->t0 : 0;
    c->drops_seen = total;
    if (c->emit.event(c->emit.arg, &ev)) {
        c->undelivered += ev.size;
        return -1;
    }
    c->events++;
    return 0;
}
