/* Stack interner: chunked append-only arenas, so growth never copies frames. */
#include "stack-intern.h"

#include "ht-text.h"

#include "ht-alloc.h"
#include "ht-hash.h"

#include <string.h>
#include <uv.h>

#define REC_SHIFT 12
#define REC_CHUNK (1u << REC_SHIFT)
#define FRAME_SHIFT 16
#define FRAME_CHUNK (1u << FRAME_SHIFT)
#define CHAR_CHUNK (1u << 16)

struct stack_rec {
    uint32_t ref; /* chunk << 16 | offset into the frames arena */
    uint32_t hash;
    uint16_t depth;
};

struct str_rec {
    uint32_t ref;
    uint32_t hash;
    uint32_t len;
};

/* Room for n more items of size sz in the last chunk (new chunk if needed). */
static void *chunks_reserve(struct si_chunks *c, uint32_t n, uint32_t per_chunk, size_t sz,
                            uint32_t *ref, uint64_t *bytes, struct mem_acct *m, int kind)
{
    if (c->nchunks == 0 || c->used + n > per_chunk) {
        if (c->nchunks >= 0xffff)
            return NULL;
        /* The chunk first: a refused chunk leaves the pointer array as it was,
         * so its size stays nchunks and its charge with it. */
        void *chunk = mem_alloc(m, kind, (size_t)per_chunk * sz);
        if (!chunk)
            return NULL;
        void **nc = mem_realloc(m, kind, c->chunks, c->nchunks * sizeof(*nc),
                                (c->nchunks + 1) * sizeof(*nc));
        if (!nc) {
            mem_free(m, kind, chunk, (size_t)per_chunk * sz);
            return NULL;
        }
        c->chunks = nc;
        c->chunks[c->nchunks] = chunk;
        *bytes += (uint64_t)per_chunk * sz;
        c->nchunks++;
        c->used = 0;
    }
    *ref = ((c->nchunks - 1) << 16) | c->used;
    void *p = (char *)c->chunks[c->nchunks - 1] + (size_t)c->used * sz;
    c->used += n;
    return p;
}

static void chunks_free(struct si_chunks *c)
{
    for (uint32_t i = 0; i < c->nchunks; i++)
        ht_free(c->chunks[i]);
    ht_free(c->chunks);
    memset(c, 0, sizeof(*c));
}

static struct stack_rec *rec_at(const struct stack_intern *si, uint32_t id)
{
    return (struct stack_rec *)si->recs.chunks[id >> REC_SHIFT] + (id & (REC_CHUNK - 1));
}

static struct str_rec *str_rec_at(const struct stack_intern *si, uint32_t id)
{
    return (struct str_rec *)si->str_recs.chunks[id >> REC_SHIFT] + (id & (REC_CHUNK - 1));
}

static const uint64_t *frames_at(const struct stack_intern *si, uint32_t ref)
{
    return (const uint64_t *)si->frames.chunks[ref >> 16] + (ref & 0xffff);
}

static const char *chars_at(const struct stack_intern *si, uint32_t ref)
{
    return (const char *)si->chars.chunks[ref >> 16] + (ref & 0xffff);
}

static int table_init(struct si_table *t, uint32_t size, struct mem_acct *m, int kind)
{
    t->slots = mem_calloc(m, kind, size, sizeof(uint32_t));
    t->mask = size - 1;
    return t->slots ? 0 : -1;
}

/* Rebuild at twice the size from the hashes kept in the records. Interning is
 * capped, so this happens a bounded, logarithmic number of times. */
static int table_grow(struct si_table *t, uint32_t n, uint32_t (*hash_of)(const void *, uint32_t),
                      const void *ctx, struct mem_acct *m, int kind)
{
    uint32_t size = (t->mask + 1) * 2;
    uint32_t *slots = mem_calloc(m, kind, size, sizeof(uint32_t));
    if (!slots)
        return -1;
    for (uint32_t id = 1; id < n; id++) {
        uint32_t i = hash_of(ctx, id) & (size - 1);
        while (slots[i])
            i = (i + 1) & (size - 1);
        slots[i] = id;
    }
    mem_free(m, kind, t->slots, ((size_t)t->mask + 1) * sizeof(uint32_t));
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

static uint32_t stack_hash_of(const void *ctx, uint32_t id)
{
    return rec_at(ctx, id)->hash;
}

static uint32_t str_hash_of(const void *ctx, uint32_t id)
{
    return str_rec_at(ctx, id)->hash;
}

int stack_intern_init(struct stack_intern *si, uint32_t max_stacks, uint32_t max_strings)
{
    return stack_intern_init_acct(si, max_stacks, max_strings, 0, NULL, MEM_stacks, MEM_strings);
}

int stack_intern_init_acct(struct stack_intern *si, uint32_t max_stacks, uint32_t max_strings,
                           uint32_t max_name_len, struct mem_acct *acct, int kind_stacks,
                           int kind_strings)
{
    memset(si, 0, sizeof(*si));
    si->max_stacks = max_stacks ? max_stacks : 1;
    si->max_strs = max_strings ? max_strings : 1;
    si->max_name_len =
        max_name_len && max_name_len < HT_STR_MAX_LEN ? max_name_len : HT_STR_MAX_LEN;
    si->acct = acct;
    si->kind_stacks = kind_stacks;
    si->kind_strings = kind_strings;
    if (table_init(&si->stack_tab, 1024, acct, kind_stacks) ||
        table_init(&si->str_tab, 1024, acct, kind_strings)) {
        stack_intern_close(si);
        return -1;
    }
    uint32_t ref;
    /* Reserve id 0 of both tables ("none"). */
    struct stack_rec *r = chunks_reserve(&si->recs, 1, REC_CHUNK, sizeof(struct stack_rec), &ref,
                                         &si->frame_bytes, acct, kind_stacks);
    struct str_rec *s = chunks_reserve(&si->str_recs, 1, REC_CHUNK, sizeof(struct str_rec), &ref,
                                       &si->frame_bytes, acct, kind_strings);
    if (!r || !s) {
        stack_intern_close(si);
        return -1;
    }
    memset(r, 0, sizeof(*r));
    memset(s, 0, sizeof(*s));
    si->nstacks = 1;
    si->nstrs = 1;
    return 0;
}

void stack_intern_close(struct stack_intern *si)
{
    chunks_free(&si->recs);
    chunks_free(&si->frames);
    chunks_free(&si->str_recs);
    chunks_free(&si->chars);
    ht_free(si->stack_tab.slots);
    ht_free(si->str_tab.slots);
    memset(si, 0, sizeof(*si));
}

uint32_t stack_intern_get(struct stack_intern *si, const uint64_t *frames, unsigned depth)
{
    if (depth == 0)
        return 0;
    if (depth > HT_STACK_MAX_DEPTH)
        depth = HT_STACK_MAX_DEPTH;
    uint32_t h = (uint32_t)ht_hash_bytes(frames, depth * sizeof(uint64_t), 0x5eed);
    uint32_t i = h & si->stack_tab.mask;
    for (uint32_t id; (id = si->stack_tab.slots[i]) != 0; i = (i + 1) & si->stack_tab.mask) {
        const struct stack_rec *r = rec_at(si, id);
        if (r->hash == h && r->depth == depth &&
            memcmp(frames_at(si, r->ref), frames, depth * sizeof(uint64_t)) == 0)
            return id;
    }
    /* The table must keep empty slots or probing never ends, even if growing failed. */
    if (si->nstacks >= si->max_stacks || si->nstacks >= si->stack_tab.mask - si->stack_tab.mask / 8)
        goto full;
    uint32_t fref, rref;
    uint64_t *dst = chunks_reserve(&si->frames, depth, FRAME_CHUNK, sizeof(uint64_t), &fref,
                                   &si->frame_bytes, si->acct, si->kind_stacks);
    if (!dst)
        goto no_memory;
    struct stack_rec *r = chunks_reserve(&si->recs, 1, REC_CHUNK, sizeof(*r), &rref,
                                         &si->frame_bytes, si->acct, si->kind_stacks);
    if (!r)
        goto no_memory; /* the reserved frames stay unused: harmless */
    memcpy(dst, frames, depth * sizeof(uint64_t));
    r->ref = fref;
    r->hash = h;
    r->depth = (uint16_t)depth;
    uint32_t id = si->nstacks++;
    si->stack_tab.slots[i] = id;
    if ((uint64_t)si->nstacks * 4 > (uint64_t)(si->stack_tab.mask + 1) * 3)
        table_grow(&si->stack_tab, si->nstacks, stack_hash_of, si, si->acct, si->kind_stacks);
    return id;
full:
    si->drops++;
    return 0;
no_memory:
    si->mem_drops++;
    return 0;
}

const uint64_t *stack_intern_frames(const struct stack_intern *si, uint32_t id, unsigned *depth)
{
    if (id == 0 || id >= si->nstacks) {
        *depth = 0;
        return NULL;
    }
    const struct stack_rec *r = rec_at(si, id);
    *depth = r->depth;
    return frames_at(si, r->ref);
}

uint32_t stack_intern_str(struct stack_intern *si, const char *s, unsigned len)
{
    unsigned full_len = len;
    if (len > si->max_name_len) {
        len = si->max_name_len;
        /* Never end inside a UTF-8 sequence: back up over continuation bytes. */
        while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80)
            len--;
    }
    uint32_t h = (uint32_t)ht_hash_bytes(s, len, 0x57a);
    uint32_t i = h & si->str_tab.mask;
    for (uint32_t id; (id = si->str_tab.slots[i]) != 0; i = (i + 1) & si->str_tab.mask) {
        const struct str_rec *r = str_rec_at(si, id);
        if (r->hash == h && r->len == len && memcmp(chars_at(si, r->ref), s, len) == 0)
            return id;
    }
    /* Not seen: checked once, on the way in (lookups of known names stay
     * a hash and a compare). */
    if (!ht_utf8_valid(s, len)) {
        size_t cap = (size_t)len * 3 + 1;
        char *fixed = ht_malloc(cap);
        if (!fixed) {
            si->mem_drops++;
            return 0;
        }
        size_t k = 0;
        for (size_t j = 0; j < len;) {
            size_t q = ht_utf8_seq((const unsigned char *)s + j, len - j);
            if (q == 0 || (q == 1 && s[j] == '\0')) { /* a NUL would cut the name short too */
                memcpy(fixed + k, "\xEF\xBF\xBD", 3);
                k += 3;
                j++;
            } else {
                memcpy(fixed + k, s + j, q);
                k += q;
                j += q;
            }
        }
        uint32_t n0 = si->nstrs;
        uint32_t id = stack_intern_str(si, fixed, (unsigned)k);
        ht_free(fixed);
        if (id && si->nstrs > n0)
            si->bad_utf8++; /* a repeat finds the repaired name: counted once */
        return id;
    }
    if (si->nstrs >= si->max_strs || si->nstrs >= si->str_tab.mask - si->str_tab.mask / 8) {
        si->str_drops++;
        return 0;
    }
    uint32_t cref, rref;
    char *dst = chunks_reserve(&si->chars, len + 1, CHAR_CHUNK, 1, &cref, &si->frame_bytes,
                               si->acct, si->kind_strings);
    struct str_rec *r = dst ? chunks_reserve(&si->str_recs, 1, REC_CHUNK, sizeof(*r), &rref,
                                             &si->frame_bytes, si->acct, si->kind_strings)
                            : NULL;
    if (!r) {
        si->mem_drops++;
        return 0;
    }
    if (len < full_len)
        si->long_names++;
    memcpy(dst, s, len);
    dst[len] = '\0';
    r->ref = cref;
    r->hash = h;
    r->len = len;
    uint32_t id = si->nstrs++;
    si->str_tab.slots[i] = id;
    if ((uint64_t)si->nstrs * 4 > (uint64_t)(si->str_tab.mask + 1) * 3)
        table_grow(&si->str_tab, si->nstrs, str_hash_of, si, si->acct, si->kind_strings);
    return id;
}

const char *stack_intern_strget(const struct stack_intern *si, uint32_t id)
{
    if (id == 0 || id >= si->nstrs)
        return NULL;
    return chars_at(si, str_rec_at(si, id)->ref);
}

uint64_t stack_intern_memory(const struct stack_intern *si)
{
    return si->frame_bytes + ((uint64_t)si->stack_tab.mask + 1) * 4 +
           ((uint64_t)si->str_tab.mask + 1) * 4;
}

/* The view's own copy of a chunk-pointer array. */
static int chunks_pin(const struct si_chunks *c, struct si_chunks *view)
{
    *view = *c;
    view->chunks = ht_malloc((c->nchunks ? c->nchunks : 1) * sizeof(*view->chunks));
    if (!view->chunks)
        return -1;
    if (c->nchunks)
        memcpy(view->chunks, c->chunks, c->nchunks * sizeof(*view->chunks));
    return 0;
}

int stack_intern_pin(const struct stack_intern *si, struct stack_intern *view)
{
    *view = *si;
    view->recs.chunks = view->frames.chunks = view->str_recs.chunks = view->chars.chunks = NULL;
    view->stack_tab.slots = view->str_tab.slots = NULL; /* never read through a view */
    view->stack_tab.mask = view->str_tab.mask = 0;
    view->acct = NULL;
    if (chunks_pin(&si->recs, &view->recs) || chunks_pin(&si->frames, &view->frames) ||
        chunks_pin(&si->str_recs, &view->str_recs) || chunks_pin(&si->chars, &view->chars)) {
        stack_intern_unpin(view);
        return UV_ENOMEM;
    }
    return 0;
}

void stack_intern_unpin(struct stack_intern *view)
{
    ht_free(view->recs.chunks);
    ht_free(view->frames.chunks);
    ht_free(view->str_recs.chunks);
    ht_free(view->chars.chunks);
    memset(view, 0, sizeof(*view));
}
