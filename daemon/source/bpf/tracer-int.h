/* The tracer's insides, shared by tracer.c, attach.c and run.c (not for other users). */
#ifndef HT_BPF_TRACER_INT_H
#define HT_BPF_TRACER_INT_H

#include "procmaps.h"
#include "resolve.h"
#include "base.h"
#include "tracer.h"

#include <stdatomic.h>
#include <uv.h>

struct heaptrace_bpf;
struct bpf_link;
struct ring_buffer;

struct bpf_tracer {
    struct bpf_tracer_params p;
    struct heaptrace_bpf *skel;
    struct bpf_link **links;
    uint32_t nlinks, links_alloc;
    int *link_fds; /* uprobe_multi links, made with the raw syscall */
    uint32_t nfds, fds_alloc;
    int multi; /* the programs were loaded for uprobe_multi */
    struct resolve_point *points;
    size_t npoints;
    int pidfd;
    int registered;
    int tracepoints;     /* 1 per-syscall, 2 tp_btf, 0 none */
    uint32_t thread_cap; /* entries of the per-thread maps */
    uint64_t load_ns, attach_ns, detach_ns;
    /* --stacks auto: what it chose (p.stacks) and why; the modules' check time. */
    int stacks_auto;
    char stacks_why[320];
    uint64_t stacks_check_ns;

    /* Consumer thread. */
    struct bpf_tracer_sink sink;
    struct bpf_consumer cons;
    struct ring_buffer *rb;
    uv_thread_t thread;
    int running;
    atomic_int quit;
    atomic_int finish; /* detached: convert what the ring holds, then end */
    int epfd;
    uint64_t t0;
    uint64_t lost_seen; /* drops already reported */
    uint64_t next_sample;
    uint64_t last_private, last_private_t; /* the last private bytes sent, and when */
    int private_sent;
    int tramp_found;
    char name[64];                /* /proc/PID/comm at attach */
    struct procmaps_module *mods; /* read at attach, then as last reported (module events) */
    size_t nmods;
    int discarding; /* the consumer is done: ring records are only counted */
    /* The consumer's end against the loop letting go (end_lock): the kernel
     * side's release takes 0.5-0.9 s for a jemalloc target, so the loop
     * never joins a consumer that is still at it (bpf_tracer_stop,
     * bpf_tracer_abandon). */
    uv_mutex_t end_lock;
    uv_cond_t end_cond;
    int converted; /* the consumer touches the sink no more, but for done */
    int sink_gone; /* the loop let go of the sink: no done */
    int ended;     /* the consumer thread is returning */
    int orphan;    /* nobody joins it: the consumer frees the tracer */

    /* Copies for stats from other threads. */
    uv_mutex_t stats_lock;
    struct bpf_tracer_stats st;
};

/* The programs take nothing from here on (attach.c). */
void bpf_tracer_cut(struct bpf_tracer *t);
/* Load the skeleton with the tracer's settings (attach.c). */
int bpf_tracer_load(struct bpf_tracer *t, char *err, size_t errsz);
/* Remove the links now (slow: each waits for the kernel): bpf_tracer_detach
 * when no consumer runs, else the consumer's end (bpf_tracer_end). */
void bpf_tracer_links_remove(struct bpf_tracer *t);
/* Consumer thread body (run.c). */
void bpf_tracer_thread(void *arg);
/* The consumer's end (run.c): converted (the sink is let go), then the
 * links, programs, maps and ring given back (slow: here, off the loop),
 * then done unless the loop let go of the sink; an orphan frees itself. */
void bpf_tracer_converted(struct bpf_tracer *t);
void bpf_tracer_end(struct bpf_tracer *t, const char *reason);
/* Everything the kernel holds for the tracer (tracer.c). */
void bpf_tracer_kernel_release(struct bpf_tracer *t);

#endif
