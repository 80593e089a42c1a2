/* Which processes a Windows trace holds: each record as the ETW consumer delivers it
 * (etl_to_etw), decoded by the same decoder the sessions use, so that a process is listed
 * exactly when a session of it would get events. */
#include "etl-procs.h"

#include "etl-events.h"
#include "etw-decode.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define SLOTS (2 * ETL_PROCS_MAX) /* a power of two, half full at most */

static struct etl_proc *add(struct etl_procs *p, uint32_t pid)
{
    if (p->n == ETL_PROCS_MAX) {
        p->dropped++;
        return NULL;
    }
    struct etl_proc *e = &p->v[p->n++];
    memset(e, 0, sizeof(*e));
    e->pid = pid;
    e->nth = 1;
    e->to = UINT64_MAX;
    return e;
}

/* The latest process with this pid, made when none was seen. */
static struct etl_proc *find(struct etl_procs *p, uint32_t pid)
{
    uint32_t h = (pid * 2654435761u) & (SLOTS - 1);
    for (;; h = (h + 1) & (SLOTS - 1)) {
        uint32_t i = p->slot[h];
        if (i == 0)
            break;
        if (p->v[i - 1].pid == pid)
            return &p->v[i - 1];
    }
    struct etl_proc *e = add(p, pid);
    if (e)
        p->slot[h] = p->n;
    return e;
}

/* A Process Start of a pid whose process ended: Windows gave the pid to a new process, its
 * own session from this time on (only after an End: a Start alone, or a rundown's DCStart,
 * may repeat for the same process). The slot points to the newest. */
static struct etl_proc *next_process(struct etl_procs *p, struct etl_proc *x, uint64_t ts)
{
    uint32_t nth = x->nth, i = (uint32_t)(x - p->v);
    x->to = ts; /* even when the next one cannot be listed: its records are not x's */
    struct etl_proc *e = add(p, x->pid);
    if (!e)
        return NULL;
    e->nth = nth + 1;
    e->from = ts;
    for (uint32_t h = (e->pid * 2654435761u) & (SLOTS - 1);; h = (h + 1) & (SLOTS - 1))
        if (p->slot[h] == i + 1) {
            p->slot[h] = p->n;
            return e;
        }
}

/* The owner as the correlator takes it (etw-stacks.c etw_corr_add): the system logger's
 * VirtualAlloc/VirtualFree name it in the payload, heap events in the header. */
static void record(void *arg, const struct etl_record *r)
{
    struct etl_procs *p = arg;
    struct etw_record e;
    struct etw_decoded d;
    struct etw_decode_stats st;
    /* Only three kernel groups can list a process (ntwmi.h EVENT_TRACE_GROUP_*): PageFault
     * (VirtualAlloc), Process, Heap; the others (StackWalk: a record in three in a heap
     * trace) are not worth a decode. */
    unsigned group = r->hook >> 8;
    if (!r->has_guid && group != 0x02 && group != 0x03 && group != 0x10)
        return;
    memset(&st, 0, sizeof(st));
    if (!etl_to_etw(r, &e) || etw_decode(&e, &d, &st) != 1)
        return;
    int heap = d.kind >= ETW_HEAP_CREATE && d.kind <= ETW_HEAP_DESTROY;
    int virt = d.kind == ETW_VIRTUAL_ALLOC || d.kind == ETW_VIRTUAL_FREE;
    int proc = d.kind == ETW_PROCESS_START || d.kind == ETW_PROCESS_END;
    uint32_t owner = heap ? e.pid : d.owner_pid;
    if ((!heap && !virt && !proc) || owner == 0 || owner == 0xFFFFFFFFu)
        return;
    struct etl_proc *x = find(p, owner);
    if (p->ordered && x && x->ended && d.kind == ETW_PROCESS_START)
        x = next_process(p, x, r->ts);
    if (x && x->to != UINT64_MAX && r->ts >= x->to) {
        p->dropped++; /* a later process of the pid, past ETL_PROCS_MAX */
        return;
    }
    if (!x)
        return;
    if (d.kind == ETW_PROCESS_START) {
        if (!x->name[0])
            etw_name_utf8(&d, x->name, sizeof(x->name));
        if (r->ts > x->last_start)
            x->last_start = r->ts;
    } else if (d.kind == ETW_PROCESS_END) {
        if (!x->ended || r->ts < x->first_end)
            x->first_end = r->ts;
        x->ended = 1;
    } else {
        x->events++;
    }
}

/* A pid that started again after its End: another process had it (Windows reuses them). */
static int pid_reused(const struct etl_procs *p)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->v[i].ended && p->v[i].last_start > p->v[i].first_end)
            return 1;
    return 0;
}

int etl_procs_scan(struct etl_procs *p, struct etl_reader *rd)
{
    memset(p, 0, sizeof(*p));
    p->v = malloc(ETL_PROCS_MAX * sizeof(*p->v));
    p->slot = calloc(SLOTS, sizeof(*p->slot));
    if (!p->v || !p->slot)
        return UV_ENOMEM;
    int rc = etl_reader_scan(rd, record, p); /* counts: the order does not matter */
    if (rc != 0 || !pid_reused(p))
        return rc;
    /* Which process had the pid at each time needs the records in time order: the
     * processors' streams merged, a second pass (only for files with a pid reused). */
    p->n = 0;
    p->dropped = 0;
    memset(p->slot, 0, SLOTS * sizeof(*p->slot));
    p->ordered = 1;
    etl_reader_rewind(rd);
    return etl_reader_run(rd, record, p);
}

void etl_procs_free(struct etl_procs *p)
{
    free(p->v);
    free(p->slot);
    memset(p, 0, sizeof(*p));
}

int etl_proc_name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}
