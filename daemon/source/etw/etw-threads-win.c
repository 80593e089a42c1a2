/* An ETW source's own threads: the private-bytes sampler and the finisher that ends its ring. */
#include "etw-int.h"
#include "procmem.h"

static uint64_t now_ns(struct etw_source *s)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    uint64_t d = (uint64_t)t.QuadPart > s->start_qpc ? (uint64_t)t.QuadPart - s->start_qpc : 0;
    return (uint64_t)((unsigned __int128)d * 1000000000u / etw_qpc_freq);
}

void etw_sampler_main(void *arg)
{
    struct etw_source *s = arg;
    DWORD ms = (DWORD)(s->sample_ns / 1000000);
    if (ms == 0)
        ms = 100;
    while (WaitForSingleObject(s->quit_event, ms) == WAIT_TIMEOUT) {
        struct procmem pm;
        if (procmem_read(s->pid, &pm) != 0)
            continue;
        uv_mutex_lock(&s->pmu);
        struct ht_event ev = {
            .kind = HT_EV_PRIVATE_BYTES, .t = now_ns(s), .size = pm.private_bytes};
        etw_emit_cb(s, &ev, NULL, 0);
        evring_publish(s->ring);
        uv_mutex_unlock(&s->pmu);
    }
}

/* The sampler puts into the ring: it stops before the ring is done. */
void etw_sampler_join(struct etw_source *s)
{
    if (atomic_exchange(&s->sampler_running, 0)) {
        SetEvent(s->quit_event);
        uv_thread_join(&s->sampler);
    }
}

/* After the source left the hub (nothing new routes to it): the last
 * deliver calls end, the sampler stops, what waits for a stack leaves, then
 * the ring's end. A thread of its own: each may wait for the loop to drain. */
static void finisher_main(void *arg)
{
    struct etw_source *s = arg;
    etw_sampler_join(s);
    uv_mutex_lock(&s->pmu); /* a deliver call under way finishes first */
    if (!s->own_done) {
        s->own_done = 1; /* nothing more into the ring (deliver checks) */
        for (int i = 0; i < 2; i++) {
            if (s->corr[i]) {
                etw_corr_flush(s->corr[i]);
                uv_mutex_lock(&s->stmu);
                s->cst[i] = *etw_corr_stats(s->corr[i]);
                uv_mutex_unlock(&s->stmu);
            }
        }
        evring_done(s->ring);
    }
    uv_mutex_unlock(&s->pmu);
}

/* The ring's end on the finisher thread (once). */
void etw_finish_ring(struct etw_source *s)
{
    if (!s->started || !s->ring || s->finisher_running)
        return;
    if (uv_thread_create(&s->finisher, finisher_main, s) == 0) {
        s->finisher_running = 1;
    } else {
        evring_quit(s->ring); /* no thread: on the loop, where a put must not wait */
        finisher_main(s);
    }
}
