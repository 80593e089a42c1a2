/* Growable dense id map (id-map.h). */
#include "id-map.h"

#include "ht-alloc.h"
#include "mem-acct.h"

#include <string.h>

uint32_t *id_map_slot(struct id_map *m, uint32_t id)
{
    if (id >= m->alloc) {
        uint64_t na = m->alloc ? m->alloc : 1024;
        while (na <= id)
            na *= 2;
        if (na > UINT32_MAX)
            return NULL;
        uint32_t *nv = mem_realloc(m->acct, m->kind, m->v, (size_t)m->alloc * sizeof(uint32_t),
                                   (size_t)na * sizeof(uint32_t));
        if (!nv)
            return NULL;
        memset(nv + m->alloc, 0, (size_t)(na - m->alloc) * sizeof(uint32_t));
        m->v = nv;
        m->alloc = (uint32_t)na;
    }
    return &m->v[id];
}

void id_map_free(struct id_map *m)
{
    mem_free(m->acct, m->kind, m->v, (size_t)m->alloc * sizeof(uint32_t));
    m->v = NULL;
    m->alloc = 0;
}
