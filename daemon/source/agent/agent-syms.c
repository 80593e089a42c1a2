/*
 * The agent source's symbolizer side (agent-source.c): frames queued by the
 * loop, resolved under the session's symbolizer lock while the process is there.
 */
#define _GNU_SOURCE
#include "agent-src.h"

/* Is addr new to the queue? (Remembered; once the set is three quarters
 * full every frame counts as new: queued again, never lost.) */
static int qseen_add(struct agent_source *s, uint64_t addr)
{
    if (!s->qseen || !addr || s->qseen_n >= QSEEN / 4 * 3)
        return 1;
    uint64_t h = addr * 0x9e3779b97f4a7c15ull;
    for (uint32_t i = (uint32_t)(h >> 40);; i++) {
        uint64_t *e = &s->qseen[i & (QSEEN - 1)];
        if (*e == addr)
            return 0;
        if (!*e) {
            *e = addr;
            s->qseen_n++;
            return 1;
        }
    }
}

/* New frames, for the symbolizer while the process is there to read. */
void asrc_frames_queue(struct agent_source *s, const struct ht_event *evs, size_t n)
{
    uint64_t now = asrc_mono_ns();
    uv_mutex_lock(&s->qmu);
    for (size_t i = 0; i < n; i++) {
        /* Engine ids grow: a stack past the highest seen is new. */
        if (!evs[i].stack || evs[i].stack <= s->stack_seen)
            continue;
        s->stack_seen = evs[i].stack;
        unsigned depth;
        const uint64_t *f = stack_intern_frames(s->base.sink.si, evs[i].stack, &depth);
        for (unsigned k = 0; f && k < depth; k++) {
            if (!qseen_add(s, f[k]))
                continue;
            if (s->nq < FRAMEQ)
                s->q[s->nq++] = (struct frameq_ent){f[k], now};
            else
                s->q_drops++;
        }
    }
    uv_mutex_unlock(&s->qmu);
}

/* Under the symbolizer lock: the queued frames resolved while the process
 * lives (its files are read through /proc/PID). A frame in no module the
 * cache knows yet is tried again for a while: the cache re-reads the maps
 * at most every 100 ms (symbols-linux.c), and a library dlopen'd since may
 * be unloaded soon. */
void agent_sym_sync(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    struct frameq_ent q[256], again[256];
    unsigned nagain = 0;
    char buf[256];
    uint64_t now = asrc_mono_ns();
    if (sc && __atomic_exchange_n(&s->keep_mods, 0, __ATOMIC_ACQ_REL))
        sym_cache_keep_modules(sc);
    /* A flush: the program's modules are read now, whatever the last read's
     * age, while it waits (a program that lives less than the rescan
     * interval, such as one a wrapper execs, would have none). */
    if (sc && (__atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) == 2 ||
               __atomic_exchange_n(&s->maps_changed, 0, __ATOMIC_ACQ_REL)))
        sym_cache_maps_changed(sc);
    for (;;) {
        uv_mutex_lock(&s->qmu);
        unsigned n = s->nq < 256 ? s->nq : 256;
        s->nq -= n;
        memcpy(q, s->q + s->nq, n * sizeof(q[0]));
        uv_mutex_unlock(&s->qmu);
        if (!n || !sc)
            break;
        for (unsigned i = 0; i < n; i++)
            if (!sym_cache_resolve(sc, q[i].addr, 1, buf, sizeof(buf)) &&
                now - q[i].first_ns < FRAME_RETRY_NS && nagain < 256)
                again[nagain++] = q[i];
    }
    uv_mutex_lock(&s->qmu);
    for (unsigned i = 0; i < nagain && s->nq < FRAMEQ; i++)
        s->q[s->nq++] = again[i];
    uv_mutex_unlock(&s->qmu);
    if (sc) {
        struct sym_stats ss;
        sym_cache_stats(sc, &ss);
        __atomic_store_n(&s->sym_kept_replaced, ss.kept_replaced, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_kept_dropped, ss.kept_dropped, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_not_added, ss.modules_not_added, __ATOMIC_RELAXED);
        __atomic_store_n(&s->sym_not_owner, ss.not_owner, __ATOMIC_RELAXED);
    }
    /* Every frame queued by the flush's drain had its turn. */
    int two = 2;
    __atomic_compare_exchange_n(&s->flush_stage, &two, 3, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Frames are return addresses: looked up as addr - 1. */
const char *agent_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz)
{
    struct agent_source *s = (struct agent_source *)base;
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    if (!sc)
        return NULL;
    agent_sym_sync(base);
    return sym_cache_resolve(sc, addr, 1, buf, bufsz);
}
