/* Fuzz target: an agent's shared memory (agent-ring.h) as the target's user
 * may write it, through the daemon's reader (agent-decode.h) into a small
 * engine. The input's first part is records (64 bytes each, laid into the
 * ring in order; a record's seq is set to its position when the low bit of
 * its first byte is set, so records are taken), the rest stack table
 * entries (struct hta_stack each, from the first). The reader must take only sound
 * events, never read outside the mapping, and end. */
#include "agent-decode.h"
#include "engine.h"
#include "stack-intern.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RECS 4096u
#define MAX_STACKS 256u

static uint8_t *ring;
static uint32_t ids[HTA_STACKS + 1];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ring && !(ring = calloc(1, HTA_TOTAL_BYTES)))
        return 0;
    size_t nrec = size / 2 / sizeof(struct hta_rec);
    if (nrec > MAX_RECS)
        nrec = MAX_RECS;
    struct hta_rec *recs = (struct hta_rec *)(ring + HTA_RECS_OFFSET);
    struct hta_stack *st = (struct hta_stack *)(ring + HTA_STACKS_OFFSET);
    memset(recs, 0, MAX_RECS * sizeof(*recs));
    memset(st, 0, MAX_STACKS * sizeof(*st));
    memset(ids, 0, sizeof(ids));
    memcpy(recs, data, nrec * sizeof(*recs));
    for (size_t i = 0; i < nrec; i++)
        if (data[i * sizeof(*recs)] & 1)
            recs[i].seq = i + 1;
    size_t off = nrec * sizeof(*recs), nst = (size - off) / sizeof(*st);
    memcpy(st, data + off, (nst < MAX_STACKS ? nst : MAX_STACKS) * sizeof(*st));
    struct hta_header *h = (struct hta_header *)ring;
    h->head = nrec + (size & 7); /* some reserved, never complete */
    h->tail = 0;

    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        return 0;
    struct agent_dec d;
    agent_dec_init(&d, ring, ids, &e.si, 1000, 32);
    struct ht_event ev[64];
    for (unsigned turn = 0; turn < 2 * MAX_RECS; turn++) {
        size_t n = agent_dec_take(&d, ev, 64, 1ull << 40);
        for (size_t i = 0; i < n; i++)
            engine_apply(&e, &ev[i]);
        if (!n && !agent_dec_pending(&d))
            break;
        if (!n)
            agent_dec_skip(&d);
    }
    engine_close(&e);
    return 0;
}
