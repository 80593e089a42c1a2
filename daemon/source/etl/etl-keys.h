/* StackWalk stack keys in .etl files (Windows 8 and later "stack caching"): references
 * (0x1825 kernel, 0x1826 user) name a key whose frames come in a definition (0x1822 create,
 * 0x1823 delete when the key leaves the cache, 0x1824 rundown at the end), usually after
 * them. A first pass over the file collects the definitions; the second resolves each
 * reference to the definition that was current at its time. */
#ifndef ETL_KEYS_H
#define ETL_KEYS_H

#include "etl-read.h"

struct etl_keys;

/* At most max_frames frames kept in all (0: 1 << 22); more definitions are dropped and
 * counted. NULL on no memory. */
struct etl_keys *etl_keys_new(uint64_t max_frames);
void etl_keys_free(struct etl_keys *k);
/* Pass 1, an etl_record_fn (arg: the etl_keys): keeps StackWalk key definitions. */
void etl_keys_collect(void *arg, const struct etl_record *r);
/* End of pass 1. */
void etl_keys_seal(struct etl_keys *k);
/* The frames of key for a reference at time ts: the key's first definition at or after ts
 * (its delete or rundown), else its last one before (a create). NULL when none. */
const uint64_t *etl_keys_find(const struct etl_keys *k, uint64_t key, uint64_t ts, uint32_t *n);

struct etl_keys_stats {
    uint64_t defs, defs_dropped, short_records, frames;
};
void etl_keys_stats(const struct etl_keys *k, struct etl_keys_stats *out);

#endif
