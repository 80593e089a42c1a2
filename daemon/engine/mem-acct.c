/* Byte budgets and growth accounting (mem-acct.h). */
#include "mem-acct.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <string.h>
#include <uv.h>

const char *const mem_kind_names[MEM_KINDS] = {
#define X(name, doc) #name,
    MEM_KIND_MAP(X)
#undef X
};

void mem_budget_init(struct mem_budget *b, struct mem_budget *parent, uint64_t limit)
{
    b->parent = parent;
    b->limit = limit;
    atomic_init(&b->used, 0);
    atomic_init(&b->outside, 0);
    atomic_init(&b->refusals, 0);
}

int mem_budget_take(struct mem_budget *b, uint64_t n)
{
    for (struct mem_budget *p = b; p; p = p->parent) {
        uint64_t u = atomic_fetch_add(&p->used, n) + n;
        if (p->limit && u + atomic_load_explicit(&p->outside, memory_order_relaxed) > p->limit) {
            /* Undo from b up to and including p: nothing stays charged. */
            for (struct mem_budget *q = b;; q = q->parent) {
                atomic_fetch_sub(&q->used, n);
                if (q == p)
                    break;
            }
            atomic_fetch_add_explicit(&p->refusals, 1, memory_order_relaxed);
            return HT_EFULL;
        }
    }
    return 0;
}

void mem_budget_give(struct mem_budget *b, uint64_t n)
{
    for (struct mem_budget *p = b; p; p = p->parent)
        atomic_fetch_sub(&p->used, n);
}

uint64_t mem_budget_used(const struct mem_budget *b)
{
    return atomic_load(&((struct mem_budget *)b)->used);
}

void mem_acct_init(struct mem_acct *m, struct mem_budget *budget)
{
    memset(m, 0, sizeof(*m));
    m->budget = budget;
}

void mem_acct_close(struct mem_acct *m)
{
    if (m->budget)
        mem_budget_give(m->budget, mem_acct_total(m));
    memset(m->bytes, 0, sizeof(m->bytes));
}

/* May the acct grow by n bytes? Charges the budget when it may. */
static int grow_begin(struct mem_acct *m, int kind, uint64_t n)
{
    if (m->backoff_left) {
        m->backoff_left--;
        m->no_memory[kind]++;
        return UV_ENOMEM;
    }
    if (m->budget && mem_budget_take(m->budget, n) != 0) {
        m->over_budget[kind]++;
        return HT_EFULL;
    }
    m->alloc_attempts++;
    return 0;
}

/* The allocation after grow_begin: account it, or undo the charge and back off. */
static void *grow_end(struct mem_acct *m, int kind, uint64_t n, void *p)
{
    if (p) {
        m->bytes[kind] += n;
        return p;
    }
    if (m->budget)
        mem_budget_give(m->budget, n);
    m->alloc_failures++;
    m->no_memory[kind]++;
    m->backoff_len = m->backoff_len ? m->backoff_len * 2 : MEM_BACKOFF_FIRST;
    if (m->backoff_len > MEM_BACKOFF_MAX)
        m->backoff_len = MEM_BACKOFF_MAX;
    m->backoff_left = m->backoff_len;
    return NULL;
}

void *mem_alloc(struct mem_acct *m, int kind, size_t n)
{
    if (!m)
        return ht_malloc(n);
    if (grow_begin(m, kind, n) != 0)
        return NULL;
    return grow_end(m, kind, n, ht_malloc(n));
}

void *mem_alloc_forced(struct mem_acct *m, int kind, size_t n)
{
    if (!m)
        return ht_malloc(n);
    void *p = ht_malloc(n);
    if (!p) {
        m->alloc_failures++;
        m->no_memory[kind]++;
        return NULL;
    }
    /* Charged whatever the limits say: past one, later growths are refused. */
    int over = 0;
    for (struct mem_budget *b = m->budget; b; b = b->parent) {
        uint64_t u = atomic_fetch_add(&b->used, n) + n;
        over |= b->limit && u > b->limit;
    }
    m->forced += over;
    m->bytes[kind] += n;
    return p;
}

void *mem_calloc(struct mem_acct *m, int kind, size_t n, size_t size)
{
    if (!m)
        return ht_calloc(n, size);
    if (size && n > SIZE_MAX / size)
        return NULL;
    if (grow_begin(m, kind, (uint64_t)n * size) != 0)
        return NULL;
    return grow_end(m, kind, (uint64_t)n * size, ht_calloc(n, size));
}

void *mem_realloc(struct mem_acct *m, int kind, void *p, size_t old, size_t n)
{
    if (!m)
        return ht_realloc(p, n);
    if (n <= old) {
        void *np = ht_realloc(p, n);
        if (np)
            mem_free(m, kind, NULL, old - n);
        return np;
    }
    if (grow_begin(m, kind, n - old) != 0)
        return NULL;
    return grow_end(m, kind, n - old, ht_realloc(p, n));
}

void mem_free(struct mem_acct *m, int kind, void *p, size_t n)
{
    ht_free(p);
    if (!m || n == 0)
        return;
    /* Give back only what was charged under kind: the budget and the
     * per-structure figures must stay equal whatever the caller passes. */
    uint64_t back = n < m->bytes[kind] ? n : m->bytes[kind];
    m->bytes[kind] -= back;
    if (m->budget)
        mem_budget_give(m->budget, back);
    /* Memory came back: the next growth may try the allocator again. */
    m->backoff_left = 0;
}

int mem_acct_charge(struct mem_acct *m, int kind, uint64_t n)
{
    if (!m)
        return 0;
    int rc = grow_begin(m, kind, n);
    if (rc == 0) {
        m->alloc_attempts--; /* nothing was allocated */
        m->bytes[kind] += n;
    }
    return rc;
}

int mem_acct_charge_optional(struct mem_acct *m, int kind, uint64_t n, uint64_t reserve)
{
    if (!m)
        return 0;
    for (struct mem_budget *p = m->budget; p; p = p->parent) {
        uint64_t u = atomic_fetch_add(&p->used, n) + n;
        if (p->limit &&
            (p->limit < reserve ||
             u + atomic_load_explicit(&p->outside, memory_order_relaxed) > p->limit - reserve)) {
            for (struct mem_budget *q = m->budget;; q = q->parent) {
                atomic_fetch_sub(&q->used, n);
                if (q == p)
                    break;
            }
            return HT_EFULL;
        }
    }
    m->bytes[kind] += n;
    return 0;
}

void mem_acct_discharge(struct mem_acct *m, int kind, uint64_t n)
{
    mem_free(m, kind, NULL, n);
}

uint64_t mem_acct_total(const struct mem_acct *m)
{
    uint64_t t = 0;
    for (int k = 0; k < MEM_KINDS; k++)
        t += m->bytes[k];
    return t;
}

uint64_t mem_acct_refusals(const struct mem_acct *m, int budget)
{
    uint64_t t = 0;
    for (int k = 0; k < MEM_KINDS; k++)
        t += budget ? m->over_budget[k] : m->no_memory[k];
    return t;
}
