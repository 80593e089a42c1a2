/* Live allocation table: chained buckets over time-ordered entry chunks, compacted incrementally.
 */
#include "alloc-table.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-hash.h"

#include <string.h>
#include <uv.h>

#define INITIAL_BUCKETS 1024u
#define MIGRATE_PER_OP 4  /* non-empty old buckets moved per insert/remove */
#define MIGRATE_VISITS 64 /* empty old buckets skipped per insert/remove */
/*
 * Per insert/remove while compacting: live entries moved, and entries looked
 * at. The slack bounds the live share of the sparsest chunk at
 * SLACK / (SLACK + 1), so moving it reclaims at least one hole per SLACK
 * moves; MOVES > SLACK keeps compaction ahead of the holes even then.
 */
#define COMPACT_MOVES 8
#define COMPACT_VISITS 64
/*
 * Chunks made in the last COMPACT_YOUNG are not compacted: most blocks die
 * young, so a chunk just left behind is still losing entries fast, and
 * moving them now would be wasted (measured on the engine bench's churn:
 * picking the sparsest chunk whatever its age moved ~0.4 entries per event,
 * most of them short-lived blocks that died soon after).
 */
#define COMPACT_YOUNG 4
#define CHUNK_BYTES ((size_t)ALLOC_CHUNK * sizeof(struct alloc_entry))
#define MAX_SLOTS ((1u << (32 - ALLOC_CHUNK_SHIFT)) - 1) /* entry index + 1 fits in a u32 */
#define FREE_SIZE_HEAP ((uint64_t)ALLOC_HEAP_FREE << ALLOC_SIZE_BITS)

static inline struct alloc_entry *entry_at(const struct alloc_table *t, uint32_t idx)
{
    return &t->chunks[idx >> ALLOC_CHUNK_SHIFT].e[idx & (ALLOC_CHUNK - 1)];
}

static inline uint64_t key_hash(unsigned heap, uint64_t addr)
{
    return ht_mix64(addr ^ ((uint64_t)heap << 48) ^ 0x2545f4914f6cdd1dULL);
}

int alloc_table_init(struct alloc_table *t, uint32_t cap)
{
    return alloc_table_init_acct(t, cap, NULL);
}

int alloc_table_init_acct(struct alloc_table *t, uint32_t cap, struct mem_acct *acct)
{
    memset(t, 0, sizeof(*t));
    t->acct = acct;
    t->cap = cap ? cap : 1;
    if (t->cap > 0xfffffff0u)
        t->cap = 0xfffffff0u;
    t->open = t->dest = t->src = ALLOC_NO_CHUNK;
    t->buckets[0] = mem_calloc(acct, MEM_table, INITIAL_BUCKETS, sizeof(uint32_t));
    if (!t->buckets[0])
        return UV_ENOMEM;
    t->mask[0] = INITIAL_BUCKETS - 1;
    t->rehash_idx = -1;
    return 0;
}

void alloc_table_close(struct alloc_table *t)
{
    for (uint32_t i = 0; i < t->nslots; i++)
        ht_free(t->chunks[i].e);
    for (uint32_t i = 0; i < t->nretired; i++)
        ht_free(t->retired[i]);
    ht_free(t->retired);
    ht_free(t->dead);
    ht_free(t->spare);
    ht_free(t->chunks);
    ht_free(t->links);
    ht_free(t->buckets[0]);
    ht_free(t->buckets[1]);
    memset(t, 0, sizeof(*t));
}

/* Move up to MIGRATE_PER_OP non-empty buckets of the old array to the new one. */
static void rehash_step(struct alloc_table *t)
{
    unsigned moved = 0, visits = 0;
    while (t->rehash_idx >= 0 && moved < MIGRATE_PER_OP && visits < MIGRATE_VISITS) {
        uint32_t *b = &t->buckets[0][t->rehash_idx];
        if (*b == 0) {
            visits++;
        } else {
            uint32_t n = *b;
            while (n) {
                const struct alloc_entry *e = entry_at(t, n - 1);
                uint32_t next = t->links[n - 1];
                uint32_t *nb = &t->buckets[1][key_hash(alloc_entry_heap(e), e->addr) & t->mask[1]];
                t->links[n - 1] = *nb;
                *nb = n;
                n = next;
            }
            *b = 0;
            moved++;
        }
        if ((uint64_t)++t->rehash_idx > t->mask[0]) {
            mem_free(t->acct, MEM_table, t->buckets[0], ((size_t)t->mask[0] + 1) * 4);
            t->buckets[0] = t->buckets[1];
            t->mask[0] = t->mask[1];
            t->buckets[1] = NULL;
            t->mask[1] = 0;
            t->rehash_idx = -1;
        }
    }
}

static void maybe_start_rehash(struct alloc_table *t)
{
    if (t->rehash_idx >= 0 || t->count <= t->mask[0])
        return;
    uint64_t size = ((uint64_t)t->mask[0] + 1) * 2;
    if (size > (1ULL << 31))
        return;
    uint32_t *nb = mem_calloc(t->acct, MEM_table, (size_t)size, sizeof(uint32_t));
    if (!nb)
        return; /* Keep working with longer chains; retried at the next insert. */
    t->buckets[1] = nb;
    t->mask[1] = (uint32_t)(size - 1);
    t->rehash_idx = 0;
}

/* Bucket slot that holds the key's chain in table i, or NULL if table i's bucket migrated. */
static uint32_t *bucket_of(struct alloc_table *t, int i, uint64_t h)
{
    if (i == 0) {
        uint64_t bi = h & t->mask[0];
        if (t->rehash_idx >= 0 && (int64_t)bi < t->rehash_idx)
            return NULL;
        return &t->buckets[0][bi];
    }
    if (t->rehash_idx < 0)
        return NULL;
    return &t->buckets[1][h & t->mask[1]];
}

/* Pointer to the link that refers to the key's entry, or NULL. */
static uint32_t *find_link(struct alloc_table *t, unsigned heap, uint64_t addr, uint64_t h)
{
    for (int i = 0; i < 2; i++) {
        uint32_t *link = bucket_of(t, i, h);
        if (!link)
            continue;
        while (*link) {
            const struct alloc_entry *e = entry_at(t, *link - 1);
            if (e->addr == addr && alloc_entry_heap(e) == heap)
                return link;
            link = &t->links[*link - 1];
        }
    }
    return NULL;
}

/* Pointer to the link that refers to entry idx, whose key hashes to h. */
static uint32_t *link_to(struct alloc_table *t, uint64_t h, uint32_t idx)
{
    for (int i = 0; i < 2; i++) {
        uint32_t *link = bucket_of(t, i, h);
        if (!link)
            continue;
        while (*link) {
            if (*link == idx + 1)
                return link;
            link = &t->links[*link - 1];
        }
    }
    return NULL;
}

struct alloc_entry *alloc_table_find(struct alloc_table *t, unsigned heap, uint64_t addr)
{
    uint32_t *link = find_link(t, heap, addr, key_hash(heap, addr));
    return link ? entry_at(t, *link - 1) : NULL;
}

/* Room in the slot arrays for slot s: chunks grow by an eighth, links with them. */
static int slots_cover(struct alloc_table *t, uint32_t s)
{
    if (s >= MAX_SLOTS)
        return UV_ENOMEM;
    uint32_t want = t->slots + t->slots / 8 > s + 8 ? t->slots + t->slots / 8 : s + 8;
    if (want > MAX_SLOTS)
        want = MAX_SLOTS;
    if (s >= t->slots) {
        struct alloc_chunk *nc = mem_realloc(t->acct, MEM_table, t->chunks,
                                             (size_t)t->slots * sizeof(*nc), want * sizeof(*nc));
        if (!nc)
            return UV_ENOMEM;
        memset(nc + t->slots, 0, (size_t)(want - t->slots) * sizeof(*nc));
        t->chunks = nc;
        t->slots = want;
    }
    if (s >= t->link_slots) {
        size_t per = (size_t)ALLOC_CHUNK * sizeof(uint32_t);
        uint32_t *nl = mem_realloc(t->acct, MEM_table, t->links, t->link_slots * per, want * per);
        if (!nl)
            return UV_ENOMEM;
        t->links = nl;
        t->link_slots = want;
    }
    return 0;
}

/* A new, empty chunk in a free slot: its slot in *slot. */
static int chunk_new(struct alloc_table *t, uint32_t *slot)
{
    uint32_t s = 0;
    while (s < t->nslots && t->chunks[s].e)
        s++;
    if (slots_cover(t, s) != 0)
        return UV_ENOMEM;
    struct alloc_entry *e = t->spare;
    if (e)
        t->spare = NULL;
    else if (!(e = mem_alloc(t->acct, MEM_table, CHUNK_BYTES)))
        return UV_ENOMEM;
    t->chunks[s] = (struct alloc_chunk){.e = e, .min_a = UINT64_MAX, .born = t->born};
    t->nchunks++;
    if (s == t->nslots)
        t->nslots++;
    *slot = s;
    return 0;
}

/* Out of the table: a chunk with no live entry left. A view may still read it. */
static void chunk_recycle(struct alloc_table *t, uint32_t s)
{
    struct alloc_chunk *c = &t->chunks[s];
    if (s == t->src)
        t->src = ALLOC_NO_CHUNK;
    if (s == t->open)
        t->open = ALLOC_NO_CHUNK;
    if (s == t->dest)
        t->dest = ALLOC_NO_CHUNK;
    t->filled -= c->fill;
    if (t->pinned && s < t->dead_slots) /* a new chunk may take the slot: not dead */
        memset(&t->dead[(size_t)s * (ALLOC_CHUNK / 64)], 0, ALLOC_CHUNK / 8);
    if (c->shared)
        t->retired[t->nretired++] = c->e; /* room for every shared chunk: alloc_table_pin */
    else if (!t->spare)
        t->spare = c->e;
    else
        mem_free(t->acct, MEM_table, c->e, CHUNK_BYTES);
    memset(c, 0, sizeof(*c));
    t->nchunks--;
}

/* Entry idx died while a view shares its chunk: marked a hole at unpin,
 * so the view keeps reading it as it was at the pin. */
static inline void dead_set(struct alloc_table *t, uint32_t idx)
{
    t->dead[idx >> 6] |= 1ULL << (idx & 63);
    t->deferred++;
}

static inline int dead_test(const struct alloc_table *t, uint32_t idx)
{
    return (t->dead[idx >> 6] >> (idx & 63)) & 1;
}

static inline void chunk_time(struct alloc_chunk *c, uint64_t a)
{
    if (a < c->min_a)
        c->min_a = a;
    if (a > c->max_a)
        c->max_a = a;
}

/* The next entry of chunk slot *s (a new chunk in *s when it is full or none). */
static int chunk_take(struct alloc_table *t, uint32_t *s, uint32_t *idx)
{
    if (*s == ALLOC_NO_CHUNK || t->chunks[*s].fill == ALLOC_CHUNK) {
        uint32_t old = *s, ns;
        if (chunk_new(t, &ns) != 0)
            return UV_ENOMEM;
        if (s == &t->open)
            t->born++; /* ages count appended chunks: the allocations since */
        *s = ns;
        if (old != ALLOC_NO_CHUNK && t->chunks[old].live == 0)
            chunk_recycle(t, old);
    }
    /* No copy even when shared: the view reads only the entries below its fill. */
    struct alloc_chunk *c = &t->chunks[*s];
    *idx = *s << ALLOC_CHUNK_SHIFT | c->fill;
    c->fill++;
    c->live++;
    t->filled++;
    return 0;
}

/* The sparsest chunk that is not young, appended to or moved into (the
 * older of two), or ALLOC_NO_CHUNK. O(chunks), once per chunk compacted. */
static uint32_t pick_source(const struct alloc_table *t)
{
    uint32_t best = ALLOC_NO_CHUNK;
    for (uint32_t s = 0; s < t->nslots; s++) {
        const struct alloc_chunk *c = &t->chunks[s];
        if (!c->e || s == t->open || s == t->dest || c->live == c->fill ||
            (uint32_t)(t->born - c->born) <= COMPACT_YOUNG)
            continue;
        if (best == ALLOC_NO_CHUNK || c->live < t->chunks[best].live ||
            (c->live == t->chunks[best].live && c->min_a < t->chunks[best].min_a))
            best = s;
    }
    return best;
}

/* Move live entry idx of the source chunk into the destination chunk. */
static int relocate(struct alloc_table *t, uint32_t idx)
{
    uint32_t nidx;
    if (chunk_take(t, &t->dest, &nidx) != 0)
        return UV_ENOMEM;
    struct alloc_entry *from = entry_at(t, idx), *to = entry_at(t, nidx);
    *to = *from;
    chunk_time(&t->chunks[t->dest], alloc_entry_time(to));
    t->links[nidx] = t->links[idx];
    *link_to(t, key_hash(alloc_entry_heap(to), to->addr), idx) = nidx + 1;
    from->size_heap = FREE_SIZE_HEAP;
    t->moved++;
    if (--t->chunks[idx >> ALLOC_CHUNK_SHIFT].live == 0)
        chunk_recycle(t, idx >> ALLOC_CHUNK_SHIFT);
    return 0;
}

static inline const uint32_t *hint_bucket(const struct alloc_table *t, uint64_t h);

/* The buckets the next slice of compaction will re-link: fetched a step
 * ahead, the moves do not wait for them one by one. */
static void compact_prefetch(const struct alloc_table *t)
{
    if (t->src == ALLOC_NO_CHUNK)
        return;
    const struct alloc_chunk *c = &t->chunks[t->src];
    uint32_t end = t->src_pos + COMPACT_VISITS < c->fill ? t->src_pos + COMPACT_VISITS : c->fill;
    for (uint32_t i = t->src_pos, moves = 0; i < end && moves < COMPACT_MOVES; i++) {
        const struct alloc_entry *e = &c->e[i];
        if (alloc_entry_heap(e) != ALLOC_HEAP_FREE) {
            __builtin_prefetch(hint_bucket(t, key_hash(alloc_entry_heap(e), e->addr)));
            moves++;
        }
    }
}

/* A slice of compaction, started when the holes pass the slack. */
static void compact_step(struct alloc_table *t)
{
    if (t->pinned)
        return; /* it would copy the chunks the view shares; the next op after unpin resumes */
    if (t->src == ALLOC_NO_CHUNK) {
        uint64_t holes = t->filled - t->count;
        if (holes <= t->count / ALLOC_COMPACT_SLACK + 2 * ALLOC_CHUNK)
            return;
        if ((t->src = pick_source(t)) == ALLOC_NO_CHUNK)
            return;
        t->src_pos = 0;
        t->compactions++;
    }
    for (unsigned moves = 0, visits = 0;
         t->src != ALLOC_NO_CHUNK && moves < COMPACT_MOVES && visits < COMPACT_VISITS; visits++) {
        if (t->src_pos >= t->chunks[t->src].fill) {
            t->src = ALLOC_NO_CHUNK; /* not reached: its last live entry's move recycles it */
            break;
        }
        uint32_t idx = t->src << ALLOC_CHUNK_SHIFT | t->src_pos;
        if (alloc_entry_heap(entry_at(t, idx)) != ALLOC_HEAP_FREE) {
            if (relocate(t, idx) != 0)
                return; /* no memory for a chunk: retried at the next op */
            moves++;
        }
        t->src_pos++; /* relocate may recycle src (its last live entry moved): the loop ends */
    }
    compact_prefetch(t);
}

int alloc_table_insert(struct alloc_table *t, unsigned heap, uint64_t addr, uint64_t time,
                       uint64_t size, uint32_t stack, struct alloc_entry **out)
{
    uint64_t h = key_hash(heap, addr);
    uint32_t *link = find_link(t, heap, addr, h);
    if (link) {
        if (out)
            *out = entry_at(t, *link - 1);
        return HT_EEXIST;
    }
    if (t->count >= t->cap)
        return HT_EFULL;
    uint32_t idx;
    if (chunk_take(t, &t->open, &idx) != 0)
        return UV_ENOMEM;
    struct alloc_entry *e = entry_at(t, idx);
    e->addr = addr;
    e->t_re = time & ALLOC_TIME_MAX;
    e->size_heap = (size & ALLOC_SIZE_MAX) | ((uint64_t)heap << ALLOC_SIZE_BITS);
    e->stack = stack;
    e->mult = 0;
    chunk_time(&t->chunks[t->open], time & ALLOC_TIME_MAX);
    uint32_t *b =
        t->rehash_idx >= 0 ? &t->buckets[1][h & t->mask[1]] : &t->buckets[0][h & t->mask[0]];
    t->links[idx] = *b;
    *b = idx + 1;
    t->count++;
    if (out)
        *out = e; /* compaction below never moves entries of the open chunk */
    if (t->rehash_idx < 0 && t->count > t->mask[0])
        maybe_start_rehash(t);
    if (t->rehash_idx >= 0)
        rehash_step(t);
    compact_step(t);
    return 0;
}

int alloc_table_find_mut(struct alloc_table *t, unsigned heap, uint64_t addr,
                         struct alloc_entry **out)
{
    uint64_t h = key_hash(heap, addr);
    uint32_t *link = find_link(t, heap, addr, h);
    if (!link)
        return UV_ENOENT;
    uint32_t idx = *link - 1, s = idx >> ALLOC_CHUNK_SHIFT;
    if (t->chunks[s].shared) {
        /* A view reads it: the entry moves to the open chunk (whose bytes
         * past the view's fill are the table's own), the old one dies. */
        uint32_t nidx;
        if (chunk_take(t, &t->open, &nidx) != 0)
            return UV_ENOMEM;
        *entry_at(t, nidx) = *entry_at(t, idx);
        chunk_time(&t->chunks[t->open], alloc_entry_time(entry_at(t, nidx)));
        t->links[nidx] = t->links[idx];
        *link_to(t, h, idx) = nidx + 1; /* chunk_take may have moved the links array */
        dead_set(t, idx);
        t->pinned_moves++;
        if (--t->chunks[s].live == 0 && s != t->open && s != t->dest)
            chunk_recycle(t, s);
        idx = nidx;
    }
    *out = entry_at(t, idx);
    return 0;
}

/* Unlink the entry *link refers to and make it a hole; its chunk is writable. */
static void unlink_entry(struct alloc_table *t, uint32_t *link)
{
    uint32_t idx = *link - 1, s = idx >> ALLOC_CHUNK_SHIFT;
    *link = t->links[idx];
    if (t->chunks[s].shared)
        dead_set(t, idx);
    else
        entry_at(t, idx)->size_heap = FREE_SIZE_HEAP;
    t->count--;
    if (--t->chunks[s].live == 0 && s != t->open && s != t->dest)
        chunk_recycle(t, s);
}

int alloc_table_remove(struct alloc_table *t, unsigned heap, uint64_t addr, struct alloc_entry *out)
{
    uint32_t *link = find_link(t, heap, addr, key_hash(heap, addr));
    if (!link)
        return UV_ENOENT;
    if (out)
        *out = *entry_at(t, *link - 1);
    unlink_entry(t, link);
    if (t->rehash_idx >= 0)
        rehash_step(t);
    compact_step(t);
    return 0;
}

void alloc_table_foreach(const struct alloc_table *t,
                         void (*fn)(const struct alloc_entry *, void *), void *arg)
{
    for (uint32_t s = 0; s < t->nslots; s++) {
        const struct alloc_entry *e = t->chunks[s].e;
        for (uint32_t i = 0, n = e ? t->chunks[s].fill : 0; i < n; i++) {
            if (alloc_entry_heap(&e[i]) != ALLOC_HEAP_FREE &&
                !(t->pinned && dead_test(t, s << ALLOC_CHUNK_SHIFT | i)))
                fn(&e[i], arg);
        }
    }
}

void alloc_table_remove_heap(struct alloc_table *t, unsigned heap,
                             void (*fn)(const struct alloc_entry *, void *), void *arg)
{
    /* Walk the chains (not the chunks) so unlinking is O(1) per entry. */
    for (int i = 0; i < 2; i++) {
        if (!t->buckets[i])
            continue;
        uint64_t first = (i == 0 && t->rehash_idx > 0) ? (uint64_t)t->rehash_idx : 0;
        for (uint64_t b = first; b <= t->mask[i]; b++) {
            uint32_t *link = &t->buckets[i][b];
            while (*link) {
                const struct alloc_entry *e = entry_at(t, *link - 1);
                if (alloc_entry_heap(e) == heap) {
                    if (fn)
                        fn(e, arg);
                    unlink_entry(t, link);
                } else {
                    link = &t->links[*link - 1];
                }
            }
        }
    }
}

uint64_t alloc_table_hash(unsigned heap, uint64_t addr)
{
    return key_hash(heap, addr);
}

static inline const uint32_t *hint_bucket(const struct alloc_table *t, uint64_t h)
{
    if (t->rehash_idx >= 0 && (int64_t)(h & t->mask[0]) < t->rehash_idx)
        return &t->buckets[1][h & t->mask[1]];
    return &t->buckets[0][h & t->mask[0]];
}

void alloc_table_prefetch_bucket(const struct alloc_table *t, uint64_t h)
{
    __builtin_prefetch(hint_bucket(t, h));
}

void alloc_table_prefetch_entry(const struct alloc_table *t, uint64_t h)
{
    uint32_t head = *hint_bucket(t, h);
    if (head) {
        __builtin_prefetch(entry_at(t, head - 1));
        __builtin_prefetch(&t->links[head - 1]); /* a remove reads it to unlink */
    }
}

const struct alloc_entry *alloc_table_peek_head(const struct alloc_table *t, unsigned heap,
                                                uint64_t addr, uint64_t h)
{
    uint32_t head = *hint_bucket(t, h);
    if (!head)
        return NULL;
    const struct alloc_entry *e = entry_at(t, head - 1);
    return e->addr == addr && alloc_entry_heap(e) == heap ? e : NULL;
}

uint64_t alloc_table_memory(const struct alloc_table *t)
{
    uint64_t chunks = (uint64_t)t->nchunks + t->nretired + (t->spare != NULL);
    uint64_t m = chunks * CHUNK_BYTES;
    m += (uint64_t)t->link_slots * ALLOC_CHUNK * sizeof(uint32_t);
    m += (uint64_t)t->slots * sizeof(struct alloc_chunk);
    m += (uint64_t)t->retired_cap * sizeof(void *);
    if (t->dead)
        m += (uint64_t)t->dead_slots * (ALLOC_CHUNK / 8);
    m += ((uint64_t)t->mask[0] + 1) * 4;
    if (t->buckets[1])
        m += ((uint64_t)t->mask[1] + 1) * 4;
    return m;
}

int alloc_table_pin(struct alloc_table *t, struct alloc_view_chunk **out, uint32_t *n)
{
    if (t->pinned)
        return UV_EBUSY;
    /* Each shared chunk is retired at most once: room for all of them now,
     * so no write while pinned has to grow the list. Deaths in shared
     * chunks go to a bitmap of their entries, allocated now for the same
     * reason. */
    size_t cap = t->nchunks ? t->nchunks : 1, dead = (size_t)t->nslots * (ALLOC_CHUNK / 8);
    struct alloc_view_chunk *v = ht_malloc(cap * sizeof(*v));
    t->retired = mem_alloc(t->acct, MEM_table, cap * sizeof(*t->retired));
    t->dead = mem_calloc(t->acct, MEM_table, dead ? dead : 8, 1);
    if (!v || !t->retired || !t->dead) {
        ht_free(v);
        if (t->retired)
            mem_free(t->acct, MEM_table, t->retired, cap * sizeof(*t->retired));
        if (t->dead)
            mem_free(t->acct, MEM_table, t->dead, dead ? dead : 8);
        t->retired = NULL;
        t->dead = NULL;
        return UV_ENOMEM;
    }
    t->retired_cap = (uint32_t)cap;
    t->nretired = 0;
    t->dead_slots = t->nslots;
    uint32_t k = 0;
    for (uint32_t s = 0; s < t->nslots; s++) {
        struct alloc_chunk *c = &t->chunks[s];
        if (!c->e)
            continue;
        c->shared = 1;
        v[k++] = (struct alloc_view_chunk){c->e, c->min_a, c->max_a, c->fill};
    }
    t->pinned = 1;
    *out = v;
    *n = k;
    return 0;
}

/* The entries that died while shared become holes now that no view reads them. */
static void dead_apply(struct alloc_table *t)
{
    for (uint32_t s = 0; s < t->dead_slots; s++) {
        const uint64_t *w = &t->dead[(size_t)s * (ALLOC_CHUNK / 64)];
        for (uint32_t i = 0; i < ALLOC_CHUNK / 64; i++) {
            for (uint64_t bits = w[i]; bits; bits &= bits - 1) {
                uint32_t off = i * 64 + (uint32_t)__builtin_ctzll(bits);
                t->chunks[s].e[off].size_heap = FREE_SIZE_HEAP;
            }
        }
    }
}

void alloc_table_unpin(struct alloc_table *t)
{
    if (!t->pinned)
        return;
    dead_apply(t);
    mem_free(t->acct, MEM_table, t->dead,
             t->dead_slots ? (size_t)t->dead_slots * (ALLOC_CHUNK / 8) : 8);
    t->dead = NULL;
    t->dead_slots = 0;
    for (uint32_t i = 0; i < t->nretired; i++)
        mem_free(t->acct, MEM_table, t->retired[i], CHUNK_BYTES);
    mem_free(t->acct, MEM_table, t->retired, (size_t)t->retired_cap * sizeof(*t->retired));
    t->retired = NULL;
    t->nretired = t->retired_cap = 0;
    for (uint32_t s = 0; s < t->nslots; s++)
        t->chunks[s].shared = 0;
    t->pinned = 0;
}
