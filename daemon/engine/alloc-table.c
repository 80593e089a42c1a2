/* Live allocation table: chained buckets over chunked entries, migrated incrementally. */
#include "alloc-table.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-hash.h"

#include <string.h>
#include <uv.h>

#define CHUNK_SHIFT 16
#define CHUNK_SIZE (1u << CHUNK_SHIFT)
#define INITIAL_BUCKETS 1024u
#define MIGRATE_PER_OP 4  /* non-empty old buckets moved per insert/remove */
#define MIGRATE_VISITS 64 /* empty old buckets skipped per insert/remove */

static inline struct alloc_entry *entry_at(const struct alloc_table *t, uint32_t idx)
{
    return &t->chunks[idx >> CHUNK_SHIFT][idx & (CHUNK_SIZE - 1)];
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
    t->buckets[0] = mem_calloc(acct, MEM_table, INITIAL_BUCKETS, sizeof(uint32_t));
    if (!t->buckets[0])
        return UV_ENOMEM;
    t->mask[0] = INITIAL_BUCKETS - 1;
    t->rehash_idx = -1;
    return 0;
}

void alloc_table_close(struct alloc_table *t)
{
    for (uint32_t i = 0; i < t->nchunks; i++)
        ht_free(t->chunks[i]);
    ht_free(t->chunks);
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
                struct alloc_entry *e = entry_at(t, n - 1);
                uint32_t next = e->next;
                uint32_t *nb = &t->buckets[1][key_hash(alloc_entry_heap(e), e->addr) & t->mask[1]];
                e->next = *nb;
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
            struct alloc_entry *e = entry_at(t, *link - 1);
            if (e->addr == addr && alloc_entry_heap(e) == heap)
                return link;
            link = &e->next;
        }
    }
    return NULL;
}

struct alloc_entry *alloc_table_find(struct alloc_table *t, unsigned heap, uint64_t addr)
{
    uint32_t *link = find_link(t, heap, addr, key_hash(heap, addr));
    return link ? entry_at(t, *link - 1) : NULL;
}

static int entry_new(struct alloc_table *t, uint32_t *idx)
{
    if (t->free_head) {
        *idx = t->free_head - 1;
        t->free_head = entry_at(t, *idx)->next;
        return 0;
    }
    if ((t->high & (CHUNK_SIZE - 1)) == 0 && (t->high >> CHUNK_SHIFT) == t->nchunks) {
        /* The chunk first: a refused chunk leaves the pointer array (and its
         * charge) as it was. */
        size_t bytes = CHUNK_SIZE * sizeof(struct alloc_entry);
        struct alloc_entry *chunk = mem_alloc(t->acct, MEM_table, bytes);
        if (!chunk)
            return UV_ENOMEM;
        struct alloc_entry **nc =
            mem_realloc(t->acct, MEM_table, t->chunks, t->nchunks * sizeof(*nc),
                        (t->nchunks + 1) * sizeof(*nc));
        if (!nc) {
            mem_free(t->acct, MEM_table, chunk, bytes);
            return UV_ENOMEM;
        }
        t->chunks = nc;
        t->chunks[t->nchunks] = chunk;
        t->nchunks++;
    }
    *idx = t->high++;
    return 0;
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
    if (entry_new(t, &idx))
        return UV_ENOMEM;
    struct alloc_entry *e = entry_at(t, idx);
    e->addr = addr;
    e->t_re = time & ALLOC_TIME_MAX;
    e->size_heap = (size & ALLOC_SIZE_MAX) | ((uint64_t)heap << ALLOC_SIZE_BITS);
    e->stack = stack;
    uint32_t *b =
        t->rehash_idx >= 0 ? &t->buckets[1][h & t->mask[1]] : &t->buckets[0][h & t->mask[0]];
    e->next = *b;
    *b = idx + 1;
    t->count++;
    if (out)
        *out = e;
    if (t->rehash_idx < 0 && t->count > t->mask[0])
        maybe_start_rehash(t);
    if (t->rehash_idx >= 0)
        rehash_step(t);
    return 0;
}

static void unlink_entry(struct alloc_table *t, uint32_t *link)
{
    uint32_t idx = *link - 1;
    struct alloc_entry *e = entry_at(t, idx);
    *link = e->next;
    e->size_heap = (uint64_t)ALLOC_HEAP_FREE << ALLOC_SIZE_BITS;
    e->next = t->free_head;
    t->free_head = idx + 1;
    t->count--;
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
    return 0;
}

void alloc_table_foreach(const struct alloc_table *t,
                         void (*fn)(const struct alloc_entry *, void *), void *arg)
{
    for (uint32_t c = 0; c < t->nchunks; c++) {
        uint32_t n = CHUNK_SIZE;
        if ((uint64_t)(c + 1) << CHUNK_SHIFT > t->high)
            n = t->high - (c << CHUNK_SHIFT);
        const struct alloc_entry *e = t->chunks[c];
        for (uint32_t i = 0; i < n; i++) {
            if (alloc_entry_heap(&e[i]) != ALLOC_HEAP_FREE)
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
                struct alloc_entry *e = entry_at(t, *link - 1);
                if (alloc_entry_heap(e) == heap) {
                    if (fn)
                        fn(e, arg);
                    unlink_entry(t, link);
                } else {
                    link = &e->next;
                }
            }
        }
    }
}

uint64_t alloc_table_hash(unsigned heap, uint64_t addr)
{
    return key_hash(heap, addr);
}

static const uint32_t *hint_bucket(const struct alloc_table *t, uint64_t h)
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
    if (head)
        __builtin_prefetch(entry_at(t, head - 1));
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
    uint64_t m = (uint64_t)t->nchunks * CHUNK_SIZE * sizeof(struct alloc_entry);
    m += ((uint64_t)t->mask[0] + 1) * 4;
    if (t->buckets[1])
        m += ((uint64_t)t->mask[1] + 1) * 4;
    return m;
}
