/* A pprof profile of a query job (pprof-make.h): mappings on the loop,
 * samples and encoding on the worker. */
#include "pprof-make.h"

#include "engine-view.h"
#include "export.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "log.h"
#include "pprof.h"
#include "procmaps.h"
#include "qjob.h"
#include "query-args.h"
#include "session.h"

#include <stdio.h>
#include <string.h>
#include <uv.h>

/* The engine's module table as mappings when its source fills one (module
 * events); else, the process of a live session still running, the worker
 * reads its ELF modules from /proc/PID/maps (the agent's stacks come with
 * no module events). A process gone leaves locations without a mapping:
 * their addresses and names stay. */
/* The bytes of the profiles being made, on every query worker: pprof_max_bytes is
 * their cap together, so two made at once cannot take twice the cap. */
static _Atomic uint64_t pprof_pool;

void pprof_make_opened(struct pprof_make *m, struct session *s)
{
    struct engine *e = session_engine(s);
    m->wall_start = session_wall_start(s);
    m->max_bytes = session_config(s)->pprof_max_bytes;
    m->p = pprof_new();
    if (!m->p)
        return;
    pprof_budget(m->p, m->max_bytes, &pprof_pool);
    pprof_default_sample(m->p, m->default_type);
    if (e->modules.n || e->exited || !strcmp(session_source_name(s), "replay")) {
        if (export_pprof_modules(m->p, &e->si, &e->modules) != 0) {
            pprof_free(m->p);
            m->p = NULL;
        }
    } else {
        m->pid = e->pid;
    }
}

static int pprof_proc_mappings(struct pprof *p, uint64_t pid)
{
    struct procmaps_module *m = NULL;
    size_t n = 0;
    if (procmaps_modules(pid, &m, &n) != 0)
        return 0; /* gone meanwhile: no mappings */
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = pprof_mapping(p, m[i].start, m[i].end, 0, m[i].path, m[i].build_id);
    ht_free(m);
    return rc;
}

int pprof_make_encode(struct pprof_make *m, uint64_t t1, uint64_t t2, uint64_t *used)
{
    int64_t t0 = m->wall_start * 1000000000LL + (int64_t)t1;
    m->unmapped = pprof_unmapped(m->p);
    int rc = pprof_write(m->p, t0, (int64_t)(t2 > t1 ? t2 - t1 : 0), &m->bytes, &m->n);
    if (used)
        *used = pprof_used(m->p);
    pprof_free(m->p);
    m->p = NULL;
    return rc;
}

/* The answer of a profile past its budget: what it held, the cap, what to do. */
static void over_budget(struct pprof_make *m, const struct query_result *res, uint64_t used)
{
    snprintf(m->err, sizeof(m->err),
             "the pprof profile of %u stacks passed pprof_max_bytes (%llu bytes for the "
             "profiles being made at once, the daemon's configuration) at %llu bytes of its "
             "own: --top N keeps the N largest stacks",
             res->nrows, (unsigned long long)m->max_bytes, (unsigned long long)used);
}

int pprof_make_work(struct pprof_make *m, struct qjob *j)
{
    const struct query *q = &j->qa[0]->q;
    int rc = m->p ? 0 : UV_ENOMEM;
    /* The query's rows are held while the profile is made: they count. */
    if (rc == 0)
        rc = pprof_charge(m->p, (uint64_t)j->res[0].nrows * sizeof(struct query_row));
    if (rc == 0 && m->pid)
        rc = pprof_proc_mappings(m->p, m->pid);
    if (rc == 0)
        rc = export_pprof_rows(m->p, ev_stacks(j->v), &j->res[0]);
    uint64_t t2 = q->t2 > j->view_now ? j->view_now : q->t2;
    uint64_t used = m->p ? pprof_used(m->p) : 0;
    if (rc == 0)
        rc = pprof_make_encode(m, q->t1, t2, &used);
    if (rc == HT_EFULL)
        over_budget(m, &j->res[0], used);
    else if (rc == 0)
        log_debug("pprof profile of %u stacks: %llu bytes counted of pprof_max_bytes %llu, %zu "
                  "gzip'd",
                  j->res[0].nrows, (unsigned long long)used, (unsigned long long)m->max_bytes,
                  m->n);
    pprof_free(m->p);
    m->p = NULL;
    return rc == HT_EFULL ? HT_EFULL : rc ? UV_ENOMEM : 0;
}

void pprof_make_free(struct pprof_make *m)
{
    pprof_free(m->p);
    m->p = NULL;
    ht_free(m->bytes);
    m->bytes = NULL;
}
