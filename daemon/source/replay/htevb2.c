/* HTEVB2 event records: predictions, the allocation ring and the varint codec (htevb2.h). */
#include "htevb2.h"

#include "mem-acct.h"

#include <string.h>

enum {
    B0_KIND = 0x0f,
    B0_T = 0x10,
    B0_ADDR = 0x20,
    B0_REF = 0x40,
    B1_OLD = 0x01,
    B1_OREF = 0x02,
    B1_HEAP = 0x04,
    B1_SIZE = 0x08,
    B1_OSIZE = 0x10,
    B1_STACK = 0x20,
    B1_TID = 0x40,
    B1_TRUNC = 0x80,
};

int htevb2_init(struct htevb2 *s, struct mem_acct *acct, int kind, int writer)
{
    memset(s, 0, sizeof(*s));
    s->acct = acct;
    s->kind = kind;
    size_t ring = HTEVB2_RING * sizeof(struct htevb2_entry);
    size_t hash = writer ? HTEVB2_HASH * sizeof(struct htevb2_slot) : 0;
    s->bytes = HTEVB2_SIZES * (sizeof(*s->sizes) + sizeof(*s->next)) + 2 * (ring + hash);
    unsigned char *m = mem_calloc(acct, kind, 1, s->bytes);
    if (!m)
        return -1;
    s->sizes = (struct htevb2_size *)m;
    m += HTEVB2_SIZES * sizeof(*s->sizes);
    s->next = (struct htevb2_next *)m;
    m += HTEVB2_SIZES * sizeof(*s->next);
    s->allocs.e = (struct htevb2_entry *)m;
    s->frees.e = (struct htevb2_entry *)(m + ring);
    if (writer) {
        s->allocs.hash = (struct htevb2_slot *)(m + 2 * ring);
        s->frees.hash = (struct htevb2_slot *)(m + 2 * ring + hash);
    }
    return 0;
}

void htevb2_close(struct htevb2 *s)
{
    if (s->sizes)
        mem_free(s->acct, s->kind, s->sizes, s->bytes);
    memset(s, 0, sizeof(*s));
}

static unsigned nvarints(unsigned b0, unsigned b1)
{
    unsigned m = (b0 & (B0_T | B0_ADDR)) |
                 (b1 & (B1_OLD | B1_HEAP | B1_SIZE | B1_OSIZE | B1_STACK | B1_TID)) << 8;
    return (unsigned)__builtin_popcount(m);
}

long htevb2_record_size(const unsigned char *p, size_t n)
{
    if (n < 2)
        return 0;
    long end = htevb_varints_end(p, n, 2, nvarints(p[0], p[1]));
    return end < 0 ? HTEVB2_EVARINT : end;
}

long htevb_varints_end(const unsigned char *p, size_t n, size_t off, unsigned nvar)
{
    for (unsigned v = 0; v < nvar; v++) {
        size_t start = off;
        do {
            if (off >= n)
                return 0;
            if (off - start >= 10)
                return -1;
        } while (p[off++] & 0x80);
    }
    return (long)off;
}

/* A varint from [*p, end): 1, 0 if it does not end there, or HTEVB2_EVARINT
 * past 10 bytes or 64 bits. */
static int get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    const unsigned char *q = *p;
    uint64_t x = 0;
    for (unsigned shift = 0; q < end; shift += 7) {
        unsigned char b = *q++;
        if (shift == 63 && b > 1)
            return HTEVB2_EVARINT; /* bits past 2^64, or an 11th byte */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            *p = q;
            return 1;
        }
    }
    return 0;
}

static uint64_t unzigzag(uint64_t z)
{
    return (z >> 1) ^ (0 - (z & 1));
}

static uint64_t zigzag(uint64_t d)
{
    return (d << 1) ^ (0 - (d >> 63));
}

static const struct htevb2_entry *ring_ref(const struct htevb2_ring *r, uint64_t ref)
{
    uint64_t held = r->pushed < HTEVB2_RING ? r->pushed : HTEVB2_RING;
    if (ref >= held)
        return NULL;
    return &r->e[(r->pushed - 1 - ref) & (HTEVB2_RING - 1)];
}

/* The ring an address field's ref names. */
static const struct htevb2_ring *ref_ring(const struct htevb2 *s, unsigned kind, int new_addr)
{
    return new_addr && (kind == HT_EV_ALLOC || kind == HT_EV_REALLOC) ? &s->frees : &s->allocs;
}

/* A literal addr is a delta from the previous one of its kind; for an alloc
 * from where the next fresh block goes by the better guess for the previous
 * alloc: the end of the previous block, or the previous step again; for a
 * realloc from its old_addr (it grows in place). */
/* Where the next fresh block goes: 0 the end of the last alloc whose addr was
 * a delta, 1 the end of the last alloc, 2 the last step between two of the
 * first kind again, 3 the last alloc with this stack plus its last step (a
 * loop allocates at the same place of each round), else as 0. */
static uint64_t fresh_guess(const struct htevb2 *s, int which, uint32_t stack)
{
    const struct htevb2_size *c = &s->sizes[stack & (HTEVB2_SIZES - 1)];
    if (which == 1)
        return s->addr[HT_EV_ALLOC] + s->size[HT_EV_ALLOC];
    if (which == 2)
        return s->fresh + s->stride;
    if (which == 3 && stack && c->stack == stack)
        return c->addr + c->astep;
    return s->fresh + s->fresh_size;
}

static uint64_t addr_base(const struct htevb2 *s, unsigned kind, uint64_t old_addr, uint32_t stack)
{
    if (kind == HT_EV_ALLOC)
        return fresh_guess(s, s->guess, stack);
    if (kind == HT_EV_REALLOC)
        return old_addr;
    return s->addr[kind];
}

static uint64_t distance(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

static uint64_t addr_hash(uint64_t addr)
{
    return (addr * 0x9E3779B97F4A7C15ull) >> 40;
}

static void ring_push(struct htevb2_ring *r, uint64_t addr, uint64_t size)
{
    uint64_t seq = r->pushed++;
    r->e[seq & (HTEVB2_RING - 1)] = (struct htevb2_entry){addr, size};
    if (!r->hash)
        return;
    /* Linear probing over 8 slots: the same address, else the empty or
     * oldest of them is replaced. */
    uint64_t h = addr_hash(addr);
    struct htevb2_slot *best = NULL;
    for (unsigned i = 0; i < 8; i++) {
        struct htevb2_slot *sl = &r->hash[(h + i) & (HTEVB2_HASH - 1)];
        if (sl->seq1 && sl->addr == addr) {
            best = sl;
            break;
        }
        if (!best || sl->seq1 < best->seq1)
            best = sl;
    }
    best->addr = addr;
    best->seq1 = seq + 1;
}

/* The stack that followed the previous one the last time, else the previous one. */
static uint32_t predict_stack(const struct htevb2 *s, unsigned kind)
{
    uint32_t prev = s->stack[kind];
    const struct htevb2_next *c = &s->next[prev & (HTEVB2_SIZES - 1)];
    return c->prev == prev ? c->next : prev;
}

static uint64_t predict_size(const struct htevb2 *s, unsigned kind, uint32_t stack)
{
    const struct htevb2_size *c = &s->sizes[stack & (HTEVB2_SIZES - 1)];
    return stack && c->stack == stack ? c->size + c->step : s->size[kind];
}

/* An address field: a delta from last, or with its ref bit a ring entry. */
static inline __attribute__((always_inline)) int
get_addr(const struct htevb2_ring *ring, const unsigned char **q, const unsigned char *end,
         int present, int ref, uint64_t last, uint64_t base, uint64_t *out,
         const struct htevb2_entry **e)
{
    *e = NULL;
    if (!present) {
        *out = last;
        return ref ? HTEVB2_EREFBIT : 1;
    }
    uint64_t v;
    int rc = get_varint(q, end, &v);
    if (rc <= 0)
        return rc;
    if (!ref) {
        *out = base + unzigzag(v);
        return 1;
    }
    if (!(*e = ring_ref(ring, v)))
        return HTEVB2_EREF;
    *out = (*e)->addr;
    return 1;
}

static int get_opt(const unsigned char **q, const unsigned char *end, int present, uint64_t dflt,
                   uint64_t *out)
{
    if (!present) {
        *out = dflt;
        return 1;
    }
    return get_varint(q, end, out);
}

static void commit(struct htevb2 *s, const struct ht_event *ev, int literal)
{
    unsigned k = ev->kind;
    s->dt = ev->t - s->t;
    s->t = ev->t;
    if (k == HT_EV_ALLOC && literal) {
        /* Only blocks not taken from the free ring: where fresh ones go. */
        uint64_t best = distance(ev->addr, fresh_guess(s, 0, ev->stack));
        s->guess = 0;
        for (int g = 1; g < 4; g++)
            if (distance(ev->addr, fresh_guess(s, g, ev->stack)) < best) {
                best = distance(ev->addr, fresh_guess(s, g, ev->stack));
                s->guess = g;
            }
        s->stride = ev->addr - s->fresh;
        s->fresh = ev->addr;
        s->fresh_size = ev->size;
    }
    s->addr[k] = ev->addr;
    s->old[k] = ev->old_addr;
    s->heap[k] = ev->heap;
    s->size[k] = ev->size;
    s->old_size[k] = ev->old_size;
    struct htevb2_next *nx = &s->next[s->stack[k] & (HTEVB2_SIZES - 1)];
    nx->prev = s->stack[k];
    nx->next = ev->stack;
    s->stack[k] = ev->stack;
    s->tid = ev->tid;
    if (ev->stack) {
        struct htevb2_size *c = &s->sizes[ev->stack & (HTEVB2_SIZES - 1)];
        int same = c->stack == ev->stack;
        c->step = same ? ev->size - c->size : 0;
        if (k == HT_EV_ALLOC) {
            c->astep = same ? ev->addr - c->addr : 0;
            c->addr = ev->addr;
        } else if (!same) {
            c->addr = c->astep = 0;
        }
        c->stack = ev->stack;
        c->size = ev->size;
    }
    if (k == HT_EV_FREE)
        ring_push(&s->frees, ev->addr, 0);
    if (k == HT_EV_REALLOC)
        ring_push(&s->frees, ev->old_addr, ev->old_size);
    if (k == HT_EV_ALLOC || k == HT_EV_REALLOC)
        ring_push(&s->allocs, ev->addr, ev->size);
}

long htevb2_decode(struct htevb2 *s, const unsigned char *p, size_t n, struct ht_event *ev)
{
    if (n < 2)
        return 0;
    unsigned b0 = p[0], b1 = p[1], k = b0 & B0_KIND;
    if (k <= HT_EV_NONE || k >= HT_EV_KIND_COUNT)
        return HTEVB2_EKIND;
    const unsigned char *q = p + 2, *end = p + n;
    const struct htevb2_entry *e, *oe;
    uint64_t dt, stack = 0, tid;
    memset(ev, 0, sizeof(*ev));
    ev->kind = (uint8_t)k;
    int rc;
    /* Each step returns 0 (incomplete) or an error before anything is kept. */
    if ((rc = get_opt(&q, end, b0 & B0_T, s->dt, &dt)) <= 0 ||
        (rc = get_addr(ref_ring(s, k, 0), &q, end, b1 & B1_OLD, b1 & B1_OREF, s->old[k], s->old[k],
                       &ev->old_addr, &oe)) <= 0 ||
        (rc = get_addr(ref_ring(s, k, 1), &q, end, b0 & B0_ADDR, b0 & B0_REF, s->addr[k],
                       k == HT_EV_ALLOC ? 0 : addr_base(s, k, ev->old_addr, 0), &ev->addr, &e)) <=
            0 ||
        (rc = get_opt(&q, end, b1 & B1_HEAP, s->heap[k], &ev->heap)) <= 0)
        return rc;
    /* The size's prediction needs the stack, which comes after it. */
    uint64_t size_v = 0;
    if ((b1 & B1_SIZE) && (rc = get_varint(&q, end, &size_v)) <= 0)
        return rc;
    if ((rc = get_opt(&q, end, b1 & B1_OSIZE, oe ? oe->size : s->old_size[k], &ev->old_size)) <=
            0 ||
        ((b1 & B1_STACK) && (rc = get_varint(&q, end, &stack)) <= 0) ||
        (rc = get_opt(&q, end, b1 & B1_TID, s->tid, &tid)) <= 0)
        return rc;
    if (!(b1 & B1_STACK))
        stack = predict_stack(s, k); /* only when needed: a table lookup */
    if (stack > UINT32_MAX || tid > UINT32_MAX)
        return HTEVB2_ERANGE;
    ev->stack = (uint32_t)stack;
    ev->tid = (uint32_t)tid;
    int literal = (b0 & (B0_ADDR | B0_REF)) == B0_ADDR;
    if (k == HT_EV_ALLOC && literal)
        ev->addr += addr_base(s, k, 0, ev->stack); /* its base needs the stack */
    ev->size = b1 & B1_SIZE ? size_v : predict_size(s, k, ev->stack);
    ev->flags = b1 & B1_TRUNC ? HT_EVF_TRUNCATED : 0;
    ev->t = dt > UINT64_MAX - s->t ? UINT64_MAX : s->t + dt;
    commit(s, ev, literal);
    return q - p;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static unsigned varint_len(uint64_t v)
{
    unsigned n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The ring distance of addr, or UINT64_MAX when the ring does not hold it. */
static uint64_t find_ref(const struct htevb2_ring *r, uint64_t addr)
{
    uint64_t h = addr_hash(addr);
    for (unsigned i = 0; i < 8; i++) {
        const struct htevb2_slot *sl = &r->hash[(h + i) & (HTEVB2_HASH - 1)];
        if (sl->seq1 && sl->addr == addr) {
            uint64_t ref = r->pushed - sl->seq1;
            const struct htevb2_entry *e = ring_ref(r, ref);
            return e && e->addr == addr ? ref : UINT64_MAX;
        }
    }
    return UINT64_MAX;
}

/* An address field: its bits (present, ref) and its varint. */
static unsigned addr_field(const struct htevb2_ring *r, uint64_t addr, uint64_t last, uint64_t base,
                           int try_ref, uint64_t *v, const struct htevb2_entry **e)
{
    *e = NULL;
    if (addr == last)
        return 0;
    *v = zigzag(addr - base);
    if (try_ref && r->hash) {
        uint64_t ref = find_ref(r, addr);
        if (ref != UINT64_MAX && varint_len(ref) <= varint_len(*v)) {
            *v = ref;
            *e = ring_ref(r, ref);
            return 3;
        }
    }
    return 1;
}

size_t htevb2_encode(struct htevb2 *s, const struct ht_event *ev_in, unsigned char *buf)
{
    struct ht_event ev = *ev_in;
    unsigned k = ev.kind;
    if (ev.t < s->t)
        ev.t = s->t;
    ev.flags &= HT_EVF_TRUNCATED;
    uint64_t av = 0, ov = 0;
    const struct htevb2_entry *e, *oe;
    int heap_kind = k == HT_EV_ALLOC || k == HT_EV_REALLOC || k == HT_EV_FREE;
    unsigned a = addr_field(ref_ring(s, k, 1), ev.addr, s->addr[k],
                            addr_base(s, k, ev.old_addr, ev.stack), heap_kind, &av, &e);
    unsigned o = addr_field(ref_ring(s, k, 0), ev.old_addr, s->old[k], s->old[k],
                            k == HT_EV_REALLOC, &ov, &oe);
    unsigned b0 =
        0x80 | k | (ev.t - s->t != s->dt ? B0_T : 0) | (a & 1 ? B0_ADDR : 0) | (a & 2 ? B0_REF : 0);
    unsigned b1 = (o & 1 ? B1_OLD : 0) | (o & 2 ? B1_OREF : 0) |
                  (ev.heap != s->heap[k] ? B1_HEAP : 0) |
                  (ev.size != predict_size(s, k, ev.stack) ? B1_SIZE : 0) |
                  (ev.old_size != (oe ? oe->size : s->old_size[k]) ? B1_OSIZE : 0) |
                  (ev.stack != predict_stack(s, k) ? B1_STACK : 0) |
                  (ev.tid != s->tid ? B1_TID : 0) | (ev.flags ? B1_TRUNC : 0);
    unsigned char *p = buf;
    *p++ = (unsigned char)b0;
    *p++ = (unsigned char)b1;
    if (b0 & B0_T)
        p = put_varint(p, ev.t - s->t);
    if (b1 & B1_OLD)
        p = put_varint(p, ov);
    if (b0 & B0_ADDR)
        p = put_varint(p, av);
    if (b1 & B1_HEAP)
        p = put_varint(p, ev.heap);
    if (b1 & B1_SIZE)
        p = put_varint(p, ev.size);
    if (b1 & B1_OSIZE)
        p = put_varint(p, ev.old_size);
    if (b1 & B1_STACK)
        p = put_varint(p, ev.stack);
    if (b1 & B1_TID)
        p = put_varint(p, ev.tid);
    commit(s, &ev, a == 1);
    return (size_t)(p - buf);
}

const char *htevb2_strerror(long err)
{
    switch (err) {
    case HTEVB2_EKIND:
        return "bad event kind";
    case HTEVB2_EREF:
        return "reference to an empty allocation-ring slot";
    case HTEVB2_EREFBIT:
        return "reference bit without its field";
    case HTEVB2_EVARINT:
        return "oversized varint";
    case HTEVB2_ERANGE:
        return "stack id or tid over 32 bits";
    }
    return "bad record";
}
