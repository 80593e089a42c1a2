/* The processes of a Windows trace (.etl) that have heap or VirtualAlloc events, with their
 * image names from the trace's Process events: one pass over the file, in bounded memory. */
#ifndef ETL_PROCS_H
#define ETL_PROCS_H

#include "etl-read.h"

#include <stdint.h>

#define ETL_PROCS_MAX 4096 /* processes kept (named or with events); past it: dropped */

struct etl_proc {
    uint32_t pid;
    uint32_t nth;    /* 1, or k for the k-th process with this pid in the trace */
    uint64_t events; /* heap and VirtualAlloc events owned by pid */
    uint64_t from, to; /* its records' times: [from, to) (Windows reuses process ids) */
    int ended;         /* its Process End came */
    uint64_t last_start, first_end; /* its latest Process Start's time, its first End's */
    char name[128];  /* ImageFileName of its first named Process event, "" if none */
};

struct etl_procs {
    struct etl_proc *v;
    uint32_t n;
    uint32_t *slot;   /* open addressing, pid -> index + 1 of its latest process */
    uint64_t dropped; /* records of processes past ETL_PROCS_MAX (not listed) */
    uint64_t size, errors; /* the file's size and the reader's errors when scanned (load-etl.c) */
    int ordered;           /* this pass is in time order: a pid's processes told apart */
};

/* The whole file through rd (opened): 0, or a negative code (the reader's counts say why). */
int etl_procs_scan(struct etl_procs *p, struct etl_reader *rd);
void etl_procs_free(struct etl_procs *p);
/* Image names compared as Windows does, without regard to case (ASCII). */
int etl_proc_name_eq(const char *a, const char *b);

#endif
