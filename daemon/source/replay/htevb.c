/* Binary twin of .htev: reader (with id remapping) and writer. */
#include "htevb.h"

#include "ht-alloc.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>

#define EVENT_MAX 96 /* 3 + 8 varints of at most 10 bytes, rounded up */
enum {
    F_HEAP = 1,
    F_OLD_ADDR = 2,
    F_SIZE = 4,
    F_OLD_SIZE = 8,
    F_STACK = 16,
    F_TID = 32,
    F_TRUNC = 64,
    /* The event had a stack its source could not keep (HT_EVF_STACK_DROPPED): counted as
     * stack_drops, not no_stack. Set only then, so a stream without such events still
     * loads into a daemon older than the bit (which refuses it). */
    F_SDROP = 128
};

/* The format is little-endian: on such hosts a load is a memcpy. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
#else
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif
static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static unsigned char *put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}
static unsigned char *put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}
static unsigned char *put16(unsigned char *p, uint16_t v)
{
    *p++ = (unsigned char)v;
    *p++ = (unsigned char)(v >> 8);
    return p;
}

void htevb_reader_init(struct htevb_reader *r, struct stack_intern *si)
{
    memset(r, 0, sizeof(*r));
    r->si = si;
    r->str_map.acct = r->stack_map.acct = si->acct;
    r->str_map.kind = r->stack_map.kind = MEM_decoder_buffers;
}

void htevb_reader_close(struct htevb_reader *r)
{
    htevb2_close(&r->v2);
    id_map_free(&r->str_map);
    id_map_free(&r->stack_map);
    memset(r, 0, sizeof(*r));
}

/* A stack's map entry carries what happened to it in its top bits (interner
 * ids stay below 2^30: config caps max_stacks). */
#define STACK_TRUNCATED (1u << 31) /* a frame's name was not interned: left out */
#define STACK_DROPPED (1u << 30)   /* the stack was not interned */
#define STACK_ID_MASK (STACK_DROPPED - 1)

static inline void stack_from_map(const struct htevb_reader *r, uint64_t stack, struct ht_event *ev)
{
    uint32_t v = r->stack_map.v[stack];
    ev->stack = v & STACK_ID_MASK;
    if (v & STACK_TRUNCATED)
        ev->flags |= HT_EVF_TRUNCATED;
    if (v & STACK_DROPPED)
        ev->flags |= HT_EVF_STACK_DROPPED;
}

static int map_put(struct id_map *map, uint32_t *n, uint32_t id, uint32_t val)
{
    if (id != *n + 1 || id >= HTEVB_MAX_IDS)
        return -1; /* ids are dense and in order */
    uint32_t *slot = id_map_slot(map, id);
    if (!slot)
        return -1;
    *slot = val;
    *n = id;
    return 0;
}

/* Bytes of a record's fixed part (which holds its length), or 0 for an unknown type. */
static size_t header_len(const struct htevb_reader *r, unsigned char type)
{
    if (r->version == 2 && (type & 0x80))
        return 2;
    if (r->version == 2 && type == 'e')
        return 0;
    switch (type) {
    case 'S':
    case 'K':
        return 7;
    case 'P':
        return 19;
    case 'e':
        return 3;
    }
    return 0;
}

static unsigned popcount6(unsigned v)
{
    unsigned n = 0;
    for (unsigned b = 0; b < 6; b++)
        n += (v >> b) & 1;
    return n;
}

/* Size of the record at p (n bytes available): 0 if its header is not all
 * there yet, -1 if it is bad. */
static long record_size(const struct htevb_reader *r, const unsigned char *p, size_t n)
{
    size_t h = header_len(r, p[0]);
    if (h == 0)
        return -1;
    if (n < h)
        return 0;
    if (p[0] & 0x80) {
        long sz = htevb2_record_size(p, n);
        return sz < 0 ? -1 : sz;
    }
    switch (p[0]) {
    case 'S':
        return 7 + (long)get16(p + 5);
    case 'K': {
        uint16_t d = get16(p + 5);
        return d > HT_STACK_MAX_DEPTH ? -1 : 7 + 8L * d;
    }
    case 'P':
        return 19 + (long)get16(p + 17);
    default: {
        /* 'e': walk the varints to find the end. */
        return htevb_varints_end(p, n, 3, 2 + popcount6(p[2]));
    }
    }
}

/* The time of the next event: times never go backwards, so a step past
 * 2^64-1 ns stays at the end of time rather than wrapping to the start. */
static uint64_t time_step(uint64_t last, uint64_t dt)
{
    return dt > UINT64_MAX - last ? UINT64_MAX : last + dt;
}

static const unsigned char *get_varint(const unsigned char *p, uint64_t *v)
{
    uint64_t x = 0;
    unsigned shift = 0;
    do {
        x |= (uint64_t)(*p & 0x7f) << shift;
        shift += 7;
    } while (*p++ & 0x80 && shift < 70);
    *v = x;
    return p;
}

/* A varint from [p, end): the byte after it, or NULL if it does not end there
 * (incomplete) or runs over 10 bytes (*bad set). */
static const unsigned char *get_varint_n(const unsigned char *p, const unsigned char *end,
                                         uint64_t *v, int *bad)
{
    uint64_t x = 0;
    for (unsigned shift = 0; p < end; shift += 7) {
        if (shift >= 70) {
            *bad = 1;
            return NULL;
        }
        unsigned char b = *p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return p;
        }
    }
    return NULL;
}

/* A module event's string ids (path in heap, build id in old_size) are the
 * file's: map them to ours. -1 for an id not defined before. */
static int module_ids(const struct htevb_reader *r, struct ht_event *ev)
{
    if (ev->kind != HT_EV_MODULE_LOAD && ev->kind != HT_EV_MODULE_UNLOAD)
        return 0;
    if (ev->heap > r->nstr || ev->old_size > r->nstr)
        return -1;
    ev->heap = ev->heap ? r->str_map.v[ev->heap] : 0;
    ev->old_size = ev->old_size ? r->str_map.v[ev->old_size] : 0;
    return 0;
}

/* Decode and deliver an event record straight from the feed: bytes used,
 * 0 if it is incomplete (nothing delivered), -1 if it is bad. One pass: the
 * common path does not walk the varints twice. */
static long direct_event(struct htevb_reader *r, const unsigned char *p, size_t n,
                         htevb_event_fn fn, void *arg)
{
    if (n < 3)
        return 0;
    const unsigned char *end = p + n, *q = p + 3;
    unsigned f = p[2];
    uint64_t vals[8] = {0};
    unsigned nvar = 2 + popcount6(f);
    int bad = 0;
    for (unsigned v = 0, k = 0; v < nvar; v++) {
        /* Slots: dt, addr, then the optional fields in bit order. */
        while (v >= 2 && !(f & (1u << k)))
            k++;
        unsigned slot = v < 2 ? v : 2 + k++;
        q = get_varint_n(q, end, &vals[slot], &bad);
        if (!q)
            return bad ? -1 : 0;
    }
    struct ht_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = p[1];
    ev.addr = vals[1];
    ev.heap = vals[2];
    ev.old_addr = vals[3];
    ev.size = vals[4];
    ev.old_size = vals[5];
    uint64_t stack = vals[6];
    ev.tid = (uint32_t)vals[7];
    ev.flags = (f & F_TRUNC ? HT_EVF_TRUNCATED : 0) | (f & F_SDROP ? HT_EVF_STACK_DROPPED : 0);
    if (stack > r->nstack || ev.kind <= HT_EV_NONE || ev.kind >= HT_EV_KIND_COUNT)
        return -1;
    if (module_ids(r, &ev) != 0)
        return -1;
    ev.t = r->last_t = time_step(r->last_t, vals[0]);
    if (stack)
        stack_from_map(r, stack, &ev);
    fn(arg, &ev);
    r->events++;
    return q - p;
}

/* An HTEVB2 event record from p (n bytes): bytes used, 0 if incomplete
 * (nothing delivered), or -1 with the error counted and named in err. */
static long direct_event2(struct htevb_reader *r, const unsigned char *p, size_t n,
                          htevb_event_fn fn, void *arg)
{
    struct ht_event ev;
    long used = htevb2_decode(&r->v2, p, n, &ev);
    const char *why = NULL;
    if (used < 0)
        why = htevb2_strerror(used);
    else if (used > 0 && ev.stack > r->nstack)
        why = "stack id not defined before";
    else if (used > 0 && ev.kind >= HT_EV_MODULE_LOAD && module_ids(r, &ev) != 0)
        why = "string id not defined before";
    if (why) {
        /* The state moved on with a decoded event: the stream stops here anyway. */
        if (used < 0 && -used < (long)(sizeof(r->v2_errors) / sizeof(r->v2_errors[0])))
            r->v2_errors[-used]++;
        snprintf(r->err, sizeof(r->err), "binary stream: %s after %llu records", why,
                 (unsigned long long)r->records);
        return -1;
    }
    if (used == 0)
        return 0;
    uint32_t stack = ev.stack;
    ev.stack = 0;
    if (stack)
        stack_from_map(r, stack, &ev);
    r->last_t = ev.t;
    fn(arg, &ev);
    r->events++;
    return used;
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

/* Long: one case per record kind of the format, each a few lines. */
static int apply_record(struct htevb_reader *r, const unsigned char *p, size_t n, htevb_event_fn fn,
                        htevb_process_fn pfn, void *arg)
{
    if (p[0] & 0x80)
        return direct_event2(r, p, n, fn, arg) > 0 ? 0 : -2;
    switch (p[0]) {
    case 'S': {
        uint16_t len = get16(p + 5);
        if (len > HT_STR_MAX_LEN)
            return -1;
        uint32_t ours = stack_intern_str(r->si, (const char *)p + 7, len);
        return map_put(&r->str_map, &r->nstr, get32(p + 1), ours);
    }
    case 'K': {
        uint16_t d = get16(p + 5);
        uint64_t frames[HT_STACK_MAX_DEPTH];
        frames[0] = 0; /* quiets -Wmaybe-uninitialized: only frames written are read */
        unsigned depth = 0;
        uint32_t flags = 0;
        for (unsigned k = 0; k < d; k++) {
            uint64_t f = get64(p + 7 + 8 * k);
            if (f & HT_FRAME_SYM) {
                uint32_t id = (uint32_t)f;
                if (id == 0 || id > r->nstr)
                    return -1;
                if (r->str_map.v[id] == 0) {
                    /* The name was not interned (counted there): leave the
                     * frame out, as the text path does, never a made-up 0x0. */
                    flags |= STACK_TRUNCATED;
                    continue;
                }
                f = HT_FRAME_SYM | r->str_map.v[id];
            }
            frames[depth++] = f;
        }
        uint32_t ours = stack_intern_get(r->si, frames, depth);
        if (d && !ours)
            flags |= STACK_DROPPED; /* counted by the interner */
        return map_put(&r->stack_map, &r->nstack, get32(p + 1), ours | flags);
    }
    case 'P': {
        struct ht_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = HT_EV_PROCESS;
        ev.t = get64(p + 1);
        ev.size = get64(p + 9);
        r->last_t = r->v2.t = ev.t;
        if (pfn)
            pfn(arg, (const char *)p + 19, get16(p + 17));
        fn(arg, &ev);
        r->events++;
        return 0;
    }
    case 'e': {
        struct ht_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = p[1];
        unsigned f = p[2];
        uint64_t dt, stack = 0, tid = 0;
        const unsigned char *q = get_varint(p + 3, &dt);
        q = get_varint(q, &ev.addr);
        if (f & F_HEAP)
            q = get_varint(q, &ev.heap);
        if (f & F_OLD_ADDR)
            q = get_varint(q, &ev.old_addr);
        if (f & F_SIZE)
            q = get_varint(q, &ev.size);
        if (f & F_OLD_SIZE)
            q = get_varint(q, &ev.old_size);
        if (f & F_STACK)
            q = get_varint(q, &stack);
        if (f & F_TID)
            get_varint(q, &tid);
        ev.t = r->last_t = time_step(r->last_t, dt);
        ev.tid = (uint32_t)tid;
        ev.flags = (f & F_TRUNC ? HT_EVF_TRUNCATED : 0) | (f & F_SDROP ? HT_EVF_STACK_DROPPED : 0);
        if (stack > r->nstack || ev.kind <= HT_EV_NONE || ev.kind >= HT_EV_KIND_COUNT)
            return -1;
        if (module_ids(r, &ev) != 0)
            return -1;
        if (stack)
            stack_from_map(r, stack, &ev);
        fn(arg, &ev);
        r->events++;
        return 0;
    }
    }
    return -1;
}

static void broken(struct htevb_reader *r, const char *why)
{
    r->broken = 1;
    r->malformed++;
    if (!why)
        return; /* err already says it */
    snprintf(r->err, sizeof(r->err), "binary stream: %s after %llu records", why,
             (unsigned long long)r->records);
}

/* The record gathered in carry cannot be framed. */
static void bad_carry(struct htevb_reader *r)
{
    if (r->version == 2 && (r->carry[0] & 0x80)) {
        /* The only way an event record's size goes bad. */
        r->v2_errors[-HTEVB2_EVARINT]++;
        broken(r, htevb2_strerror(HTEVB2_EVARINT));
    } else {
        broken(r, "bad record");
    }
}

/* Long: the decoder's inner loop (10 M events/s): gathering a record that
 * spans feeds and dispatching it in one pass over the bytes. */
void htevb_feed(struct htevb_reader *r, const unsigned char *buf, size_t n, htevb_event_fn fn,
                htevb_process_fn pfn, void *arg)
{
    while (n > 0 && !r->broken) {
        /* Gather a whole record (or the magic) in carry when it spans feeds. */
        const unsigned char *p = buf;
        size_t avail = n;
        if (r->carry_len > 0 || !r->magic_seen) {
            /* Want the magic, else the record's header, else the whole record
             * (one more byte at a time while its varints are incomplete). */
            size_t want = HTEVB_MAGIC_LEN;
            if (r->magic_seen) {
                long sz = record_size(r, r->carry, r->carry_len);
                if (sz < 0) {
                    bad_carry(r);
                    return;
                }
                size_t h = header_len(r, r->carry[0]);
                want = sz > 0 ? (size_t)sz : r->carry_len < h ? h : r->carry_len + 1;
            }
            if (want > sizeof(r->carry)) {
                broken(r, "record too large");
                return;
            }
            size_t take = want > r->carry_len ? want - r->carry_len : 0;
            if (take > n)
                take = n;
            memcpy(r->carry + r->carry_len, buf, take);
            r->carry_len += take;
            buf += take;
            n -= take;
            if (r->carry_len < want)
                continue;
            if (!r->magic_seen) {
                if (memcmp(r->carry, HTEVB2_MAGIC, HTEVB_MAGIC_LEN) == 0) {
                    if (htevb2_init(&r->v2, r->si->acct, MEM_decoder_buffers, 0) != 0) {
                        broken(r, "no memory for the HTEVB2 tables (or over the budget)");
                        return;
                    }
                    r->version = 2;
                } else if (memcmp(r->carry, HTEVB_MAGIC, HTEVB_MAGIC_LEN) == 0) {
                    r->version = 1;
                } else {
                    broken(r, "bad magic");
                    return;
                }
                r->magic_seen = 1;
                r->carry_len = 0;
                continue;
            }
            long sz = record_size(r, r->carry, r->carry_len);
            if (sz < 0) {
                bad_carry(r);
                return;
            }
            if (sz == 0 || (size_t)sz > r->carry_len)
                continue; /* header read: now the whole record */
            int rc = apply_record(r, r->carry, r->carry_len, fn, pfn, arg);
            if (rc != 0) {
                broken(r, rc == -2 ? NULL : "bad record");
                return;
            }
            r->records++;
            r->carry_len = 0;
            continue;
        }
        int v2 = r->version == 2 && (p[0] & 0x80);
        if (v2 || (p[0] == 'e' && r->version == 1)) {
            long used =
                v2 ? direct_event2(r, p, avail, fn, arg) : direct_event(r, p, avail, fn, arg);
            if (used < 0) { /* an HTEVB2 record's error was set by its decoder */
                broken(r, v2 ? NULL : "bad record");
                return;
            }
            if (used > 0) {
                r->records++;
                buf += used;
                n -= (size_t)used;
                continue;
            }
            /* Incomplete: falls through to the carry below. */
        }
        long sz = record_size(r, p, avail);
        if (sz < 0) {
            broken(r, "unknown record type");
            return;
        }
        if (sz == 0 || (size_t)sz > avail) {
            /* The rest of this feed is a partial record: keep it for the next. */
            if (sz > (long)sizeof(r->carry)) {
                broken(r, "record too large");
                return;
            }
            memcpy(r->carry, p, avail);
            r->carry_len = avail;
            return;
        }
        int rc = apply_record(r, p, (size_t)sz, fn, pfn, arg);
        if (rc != 0) {
            broken(r, rc == -2 ? NULL : "bad record");
            return;
        }
        r->records++;
        buf += sz;
        n -= (size_t)sz;
    }
}

int htevb_writer_init_version(struct htevb_writer *w, const struct stack_intern *si, int version,
                              htevb_out_fn out, void *arg)
{
    memset(w, 0, sizeof(*w));
    w->si = si;
    w->out = out;
    w->arg = arg;
    w->version = version == 1 ? 1 : 2;
    if (w->version == 2 && htevb2_init(&w->v2, NULL, MEM_decoder_buffers, 1) != 0) {
        w->version = 0; /* every write fails */
        return -1;
    }
    out(arg, w->version == 2 ? HTEVB2_MAGIC : HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    return 0;
}

int htevb_writer_init(struct htevb_writer *w, const struct stack_intern *si, htevb_out_fn out,
                      void *arg)
{
    return htevb_writer_init_version(w, si, 2, out, arg);
}

void htevb_writer_close(struct htevb_writer *w)
{
    htevb2_close(&w->v2);
    id_map_free(&w->str_file_id);
    id_map_free(&w->stack_file_id);
    memset(w, 0, sizeof(*w));
}

static uint32_t define_str(struct htevb_writer *w, uint32_t id)
{
    uint32_t *slot = id_map_slot(&w->str_file_id, id);
    if (!slot)
        return 0;
    if (*slot)
        return *slot;
    const char *s = stack_intern_strget(w->si, id);
    size_t len = s ? strlen(s) : 0;
    unsigned char hdr[7], *p = hdr;
    *p++ = 'S';
    p = put32(p, ++w->next_str);
    put16(p, (uint16_t)len);
    w->out(w->arg, hdr, sizeof(hdr));
    w->out(w->arg, s ? s : "", len);
    return *slot = w->next_str;
}

static uint32_t define_stack(struct htevb_writer *w, uint32_t id)
{
    uint32_t *slot = id_map_slot(&w->stack_file_id, id);
    if (!slot)
        return 0;
    if (*slot)
        return *slot;
    unsigned d;
    const uint64_t *f = stack_intern_frames(w->si, id, &d);
    unsigned char rec[7 + 8 * HT_STACK_MAX_DEPTH], *p = rec;
    uint64_t frames[HT_STACK_MAX_DEPTH];
    for (unsigned k = 0; k < d; k++)
        frames[k] = f[k] & HT_FRAME_SYM ? HT_FRAME_SYM | define_str(w, (uint32_t)f[k]) : f[k];
    *p++ = 'K';
    p = put32(p, ++w->next_stack);
    p = put16(p, (uint16_t)d);
    for (unsigned k = 0; k < d; k++)
        p = put64(p, frames[k]);
    w->out(w->arg, rec, (size_t)(p - rec));
    /* Re-read the slot: define_str may have moved nothing, but keep it simple. */
    slot = id_map_slot(&w->stack_file_id, id);
    return *slot = w->next_stack;
}

void htevb_write_process(struct htevb_writer *w, uint64_t t, uint64_t pid, const char *name)
{
    size_t len = strlen(name);
    if (len > 4096)
        len = 4096;
    unsigned char hdr[19], *p = hdr;
    *p++ = 'P';
    p = put64(p, t);
    p = put64(p, pid);
    put16(p, (uint16_t)len);
    w->out(w->arg, hdr, sizeof(hdr));
    w->out(w->arg, name, len);
    w->last_t = w->v2.t = t;
}

int htevb_write_event(struct htevb_writer *w, const struct ht_event *ev_in)
{
    struct ht_event mod;
    const struct ht_event *ev = ev_in;
    if (w->version == 0 || ev->kind <= HT_EV_NONE || ev->kind >= HT_EV_KIND_COUNT)
        return -1;
    if (ev->kind == HT_EV_MODULE_LOAD || ev->kind == HT_EV_MODULE_UNLOAD) {
        /* Path and build id are names: defined first, written as file ids. */
        mod = *ev_in;
        mod.heap = ev->heap ? define_str(w, (uint32_t)ev->heap) : 0;
        mod.old_size = ev->old_size ? define_str(w, (uint32_t)ev->old_size) : 0;
        if ((ev->heap && !mod.heap) || (ev->old_size && !mod.old_size))
            return -1;
        ev = &mod;
    }
    uint32_t stack = ev->stack ? define_stack(w, ev->stack) : 0;
    if (ev->stack && !stack)
        return -1;
    if (w->version == 2) {
        unsigned char rec[HTEVB2_EVENT_MAX];
        mod = *ev;
        mod.stack = stack;
        w->out(w->arg, rec, htevb2_encode(&w->v2, &mod, rec));
        return 0;
    }
    unsigned f = (ev->heap ? F_HEAP : 0) | (ev->old_addr ? F_OLD_ADDR : 0) |
                 (ev->size ? F_SIZE : 0) | (ev->old_size ? F_OLD_SIZE : 0) | (stack ? F_STACK : 0) |
                 (ev->tid ? F_TID : 0) | (ev->flags & HT_EVF_TRUNCATED ? F_TRUNC : 0) |
                 (ev->flags & HT_EVF_STACK_DROPPED ? F_SDROP : 0);
    unsigned char rec[EVENT_MAX], *p = rec;
    *p++ = 'e';
    *p++ = ev->kind;
    *p++ = (unsigned char)f;
    p = put_varint(p, ev->t > w->last_t ? ev->t - w->last_t : 0);
    if (ev->t > w->last_t)
        w->last_t = ev->t;
    p = put_varint(p, ev->addr);
    if (f & F_HEAP)
        p = put_varint(p, ev->heap);
    if (f & F_OLD_ADDR)
        p = put_varint(p, ev->old_addr);
    if (f & F_SIZE)
        p = put_varint(p, ev->size);
    if (f & F_OLD_SIZE)
        p = put_varint(p, ev->old_size);
    if (f & F_STACK)
        p = put_varint(p, stack);
    if (f & F_TID)
        p = put_varint(p, ev->tid);
    w->out(w->arg, rec, (size_t)(p - rec));
    return 0;
}
