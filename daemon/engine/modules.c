/* The module table (modules.h): a sorted array, binary-searched by base. */
#include "modules.h"

#include "mem-acct.h"

#include <string.h>

void module_table_init(struct module_table *mt, uint32_t cap, struct mem_acct *acct)
{
    memset(mt, 0, sizeof(*mt));
    mt->cap = cap ? cap : MODULES_MAX_DEFAULT;
    mt->acct = acct;
}

void module_table_close(struct module_table *mt)
{
    mem_free(mt->acct, MEM_modules, mt->v, (size_t)mt->alloc * sizeof(*mt->v));
    mt->v = NULL;
    mt->n = mt->alloc = 0;
}

/* Index of the first module whose base is >= base. */
static uint32_t lower_bound(const struct module_table *mt, uint64_t base)
{
    uint32_t lo = 0, hi = mt->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (mt->v[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int grow(struct module_table *mt)
{
    uint32_t na = mt->alloc ? mt->alloc * 2 : 16;
    if (na > mt->cap)
        na = mt->cap;
    struct module *nv = mem_realloc(mt->acct, MEM_modules, mt->v,
                                    (size_t)mt->alloc * sizeof(*mt->v), (size_t)na * sizeof(*nv));
    if (!nv)
        return -1;
    mt->v = nv;
    mt->alloc = na;
    return 0;
}

void module_table_load(struct module_table *mt, const struct ht_event *ev)
{
    mt->loads++;
    struct module m = {ev->addr, ev->size,           ev->old_addr,
                       ev->t,    (uint32_t)ev->heap, (uint32_t)ev->old_size};
    uint32_t i = lower_bound(mt, m.base);
    if (i < mt->n && mt->v[i].base == m.base) {
        mt->v[i] = m; /* loaded again at the same place: the newer one holds */
        return;
    }
    if (mt->n == mt->cap || (mt->n == mt->alloc && grow(mt) != 0)) {
        mt->drops++;
        return;
    }
    memmove(&mt->v[i + 1], &mt->v[i], (size_t)(mt->n - i) * sizeof(*mt->v));
    mt->v[i] = m;
    mt->n++;
}

void module_table_unload(struct module_table *mt, uint64_t base)
{
    mt->unloads++;
    uint32_t i = lower_bound(mt, base);
    if (i == mt->n || mt->v[i].base != base) {
        mt->unknown_unloads++;
        return;
    }
    memmove(&mt->v[i], &mt->v[i + 1], (size_t)(mt->n - i - 1) * sizeof(*mt->v));
    mt->n--;
}

const struct module *module_table_find(const struct module_table *mt, uint64_t addr)
{
    uint32_t i = lower_bound(mt, addr + 1); /* first base > addr */
    if (i == 0)
        return NULL;
    const struct module *m = &mt->v[i - 1];
    return addr - m->base < m->size ? m : NULL;
}
