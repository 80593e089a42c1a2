/* ht-bpf-dump: attach the eBPF tracer to a PID and print its events (development and tests). */
#include "ht-alloc.h"
#include "stack-intern.h"
#include "tracer.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dump {
    struct stack_intern si;
    int quiet;
    uint64_t counts[HT_EV_KIND_COUNT];
    uint64_t lost;
    atomic_int done;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void print_stack(struct dump *d, uint32_t id)
{
    unsigned depth;
    const uint64_t *f = stack_intern_frames(&d->si, id, &depth);
    for (unsigned i = 0; f && i < depth; i++)
        printf("%s0x%" PRIx64, i ? "," : " stack=", f[i]);
}

static int event_cb(void *arg, const struct ht_event *ev)
{
    struct dump *d = arg;
    if (ev->kind < HT_EV_KIND_COUNT)
        d->counts[ev->kind]++;
    if (ev->kind == HT_EV_LOST)
        d->lost += ev->size;
    if (d->quiet)
        return 0;
    printf("%s t=%" PRIu64 " tid=%u", ht_event_kind_name(ev->kind), ev->t, ev->tid);
    if (ev->kind == HT_EV_MODULE_LOAD)
        printf(" addr=0x%" PRIx64 " size=%" PRIu64 " bias=0x%" PRIx64 " path=%s build_id=%s",
               ev->addr, ev->size, ev->old_addr, stack_intern_strget(&d->si, (uint32_t)ev->heap),
               ev->old_size ? stack_intern_strget(&d->si, (uint32_t)ev->old_size) : "");
    else
        printf(" addr=0x%" PRIx64 " size=%" PRIu64, ev->addr, ev->size);
    if (ev->kind == HT_EV_REALLOC)
        printf(" old_addr=0x%" PRIx64, ev->old_addr);
    if (ev->stack)
        print_stack(d, ev->stack);
    printf("\n");
    return 0;
}

static uint32_t stack_cb(void *arg, const uint64_t *frames, unsigned n)
{
    struct dump *d = arg;
    return stack_intern_get(&d->si, frames, n);
}

static uint32_t str_cb(void *arg, const char *s, unsigned len)
{
    struct dump *d = arg;
    return stack_intern_str(&d->si, s, len);
}

static void process_cb(void *arg, uint64_t pid, const char *name)
{
    struct dump *d = arg;
    if (!d->quiet)
        printf("process pid=%" PRIu64 " name=%s\n", pid, name);
}

static void idle_cb(void *arg)
{
    (void)arg;
    fflush(stdout);
}

static void done_cb(void *arg, const char *reason)
{
    struct dump *d = arg;
    printf("done: %s\n", reason);
    atomic_store(&d->done, 1);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: ht-bpf-dump --pid PID [--stacks fp|dwarf|none] [--depth N] "
            "[--seconds S] [--ring-mb N] [--quiet] [--status] [--floor] [--single-links]\n");
    exit(2);
}

static void summary(struct dump *d, struct bpf_tracer *t)
{
    struct bpf_tracer_stats st;
    bpf_tracer_stats(t, &st);
    printf("summary");
    for (int k = 1; k < HT_EV_KIND_COUNT; k++)
        printf(" %s=%" PRIu64, ht_event_kind_name(k), d->counts[k]);
    printf(" lost=%" PRIu64 " records=%" PRIu64 " malformed=%" PRIu64 " probes=%u links=%u"
           " load_ms=%.1f attach_ms=%.1f detach_ms=%.1f unwind_failures=%" PRIu64
           " unwind_fast=%" PRIu64 " unwind_fallbacks=%" PRIu64 "\n",
           st.lost, st.records, st.malformed, st.probes, st.links, st.load_ns / 1e6,
           st.attach_ns / 1e6, st.detach_ns / 1e6, st.unwind_failures, st.unwind_fast,
           st.unwind_fallbacks);
}

int main(int argc, char **argv)
{
    struct bpf_tracer_params p = {.stacks = HB_STACKS_FP, .stack_depth = 64};
    double seconds = 0;
    int show_status = 0;
    static struct dump d;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--pid") && v)
            p.pid = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--stacks") && v) {
            i++;
            p.stacks = !strcmp(v, "dwarf")  ? HB_STACKS_DWARF
                       : !strcmp(v, "none") ? HB_STACKS_NONE
                                            : HB_STACKS_FP;
        } else if (!strcmp(a, "--depth") && v)
            p.stack_depth = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--seconds") && v)
            seconds = atof(argv[++i]);
        else if (!strcmp(a, "--ring-mb") && v)
            p.ring_bytes = (uint32_t)atoi(argv[++i]) << 20;
        else if (!strcmp(a, "--quiet"))
            d.quiet = 1;
        else if (!strcmp(a, "--single-links"))
            p.no_multi = 1;
        else if (!strcmp(a, "--floor"))
            p.probe_floor = 1;
        else if (!strcmp(a, "--status"))
            show_status = 1;
        else
            usage();
    }
    if (!p.pid)
        usage();
    char err[512];
    struct bpf_tracer *t;
    int rc = bpf_tracer_new(&t, &p, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "ht-bpf-dump: %s\n", err);
        return 1;
    }
    rc = bpf_tracer_attach(t, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "ht-bpf-dump: %s\n", err);
        bpf_tracer_free(t);
        return 1;
    }
    stack_intern_init(&d.si, 1u << 20, 1u << 16);
    struct bpf_tracer_sink sink = {
        .emit = {.arg = &d, .event = event_cb, .stack = stack_cb},
        .str = str_cb,
        .process = process_cb,
        .idle = idle_cb,
        .done = done_cb,
    };
    if (show_status) {
        char *s = cJSON_PrintUnformatted(bpf_tracer_status_json(t));
        printf("status %s\n", s ? s : "{}");
        free(s);
    }
    printf("attached\n");
    fflush(stdout);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    rc = bpf_tracer_run(t, &sink, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "ht-bpf-dump: %s\n", err);
        bpf_tracer_free(t);
        return 1;
    }
    for (double waited = 0;
         !interrupted && !atomic_load(&d.done) && (seconds <= 0 || waited < seconds);
         waited += 0.02)
        usleep(20000);
    bpf_tracer_detach(t);
    summary(&d, t);
    bpf_tracer_free(t);
    stack_intern_close(&d.si);
    return 0;
}
