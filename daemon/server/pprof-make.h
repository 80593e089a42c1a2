/* A pprof profile of a query job's rows (pprof-make.c), made in two parts:
 * its mappings as the view opens (loop), its samples and encoding on the
 * worker. What `export --format pprof` and the HTTP listener's
 * /debug/pprof/heap and /debug/pprof/allocs answer with. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef PPROF_MAKE_H
#define PPROF_MAKE_H

#include <stddef.h>
#include <stdint.h>

struct pprof;
struct qjob;
struct session;

struct pprof_make {
    struct pprof *p;
    uint64_t pid; /* nonzero: the worker reads the process's modules */
    int64_t wall_start;
    int default_type; /* PPROF_* (pprof.h): the profile's default sample type */
    /* The encoded, gzip'd profile (pprof_make_encode) and the locations no
     * mapping holds. */
    uint8_t *bytes;
    size_t n;
    size_t unmapped;
    /* The profile's memory cap (pprof_max_bytes, pprof_budget) and, when
     * it refused the profile, why (for the answer). */
    uint64_t max_bytes;
    char err[256];
};

/* Loop, as j's view opens: the profile and its mappings. */
void pprof_make_opened(struct pprof_make *m, struct session *s);
/* Worker: the samples of j's first query, then the profile encoded over
 * the query's window (pprof_make_encode): 0, UV_ENOMEM, or HT_EFULL with
 * m->err when the profile would pass m->max_bytes. */
int pprof_make_work(struct pprof_make *m, struct qjob *j);
/* m->p encoded over the window [t1, t2] (ns since the session started)
 * into m->bytes, m->p freed: 0, HT_ENOMEM or HT_EFULL (its budget); *used
 * (unless NULL): the bytes the profile counted. */
int pprof_make_encode(struct pprof_make *m, uint64_t t1, uint64_t t2, uint64_t *used);
/* Frees what m holds (not m). */
void pprof_make_free(struct pprof_make *m);

#endif
