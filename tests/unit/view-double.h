/* The test stand-in for the engine view's incremental readers (view-double.c). */
#ifndef VIEW_DOUBLE_H
#define VIEW_DOUBLE_H

#include <stdint.h>

struct engine_view;
struct alloc_entry;

extern uint32_t tv_chunk_entries; /* entries per live chunk */
extern uint64_t tv_loose;         /* bounds loosened by up to this much */
extern uint32_t tv_refuse_mod;    /* stacks % this == 0 get no realloc count (0: none) */
extern uint64_t tv_calls_chunk, tv_calls_reallocs;

uint32_t tv_live_nchunks(const struct engine_view *v);
const struct alloc_entry *tv_live_chunk(const struct engine_view *v, uint32_t i, uint32_t *n,
                                        uint64_t *min_a, uint64_t *max_a);
int tv_live_reallocs(const struct engine_view *v, uint32_t stack, uint64_t *out);

#endif
