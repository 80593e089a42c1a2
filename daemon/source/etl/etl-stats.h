/* A summary of an .etl file (ht-convert --stats): buffers, record kinds, events by provider
 * and opcode, stack records and keys, losses and errors. */
#ifndef ETL_STATS_H
#define ETL_STATS_H

#include "etl-read.h"

struct cJSON;
struct etl_stats;

/* Caps: max_kinds distinct (provider, opcode, id) rows, max_keys distinct stack keys; more
 * are counted as dropped. 0 picks the defaults (8192 and 1 << 20). NULL on no memory. */
struct etl_stats *etl_stats_new(uint32_t max_kinds, uint32_t max_keys);
void etl_stats_free(struct etl_stats *s);
/* An etl_record_fn: arg is the etl_stats. */
void etl_stats_record(void *arg, const struct etl_record *r);
/* The summary; rd may have failed to open (its counts still say why). NULL on no memory. */
struct cJSON *etl_stats_json(const struct etl_stats *s, const struct etl_reader *rd);

#endif
