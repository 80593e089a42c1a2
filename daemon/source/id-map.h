/* A growable map over dense u32 ids (0 = unmapped): a stream's ids to an interner's, and back. */
#ifndef ID_MAP_H
#define ID_MAP_H

#include <stdint.h>

struct mem_acct;

struct id_map {
    uint32_t *v;
    uint32_t alloc;
    struct mem_acct *acct; /* growth charged here under kind (NULL: unaccounted) */
    int kind;
};

/* The slot of id, zero until set; NULL when out of memory (the map is unchanged). */
uint32_t *id_map_slot(struct id_map *m, uint32_t id);
void id_map_free(struct id_map *m);

static inline uint32_t id_map_get(const struct id_map *m, uint64_t id)
{
    return id < m->alloc ? m->v[id] : 0;
}

#endif
