/*
 * The agent source (source.h, mode SOURCE_LAUNCH): `heaptracectl run` asks
 * for a session, gets the agent's path, this session's socket and a token,
 * and execs the program itself (as the user, in the user's terminal) with
 * the agent preloaded. The agent connects to the socket, presents the
 * token and hands over its shared memory (agent/agent-ring.h); the peer's
 * credentials must be the session owner's uid and the ctl's pid (exec
 * keeps the pid). One agent per session: any other connection is refused
 * and counted.
 *
 * Draining: a timer on the loop looks at the ring; records go to the engine
 * through agent-decode.c (which treats the memory as hostile). The socket
 * closing is the target's end (exit, or an exec: the agent's descriptors
 * are close-on-exec); what it wrote is drained first.
 *
 * Threads: all on the loop, but symbolize and sym_sync (the session's
 * symbolizer lock): they touch only the symbol cache and the frame queue.
 */
#define _GNU_SOURCE
#include "agent-src.h"
#include "agent-source.h"
#include "agent-decode.h"
#include "agent-source.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "execwatch.h"
#include "inject.h"
#include "procmem.h"
#include "source.h"
#include "stack-intern.h"
#include "symbols.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>


static void handle_closed_cb(uv_handle_t *h)
{
    struct agent_handles *hs = h->data;
    if (--hs->open == 0)
        ht_free(hs);
}

static void handle_close(struct agent_handles *hs, uv_handle_t *h)
{
    if (!uv_is_closing(h)) {
        h->data = hs;
        uv_close(h, handle_closed_cb);
    }
}

/* The agent's library: next to the daemon (the build tree), or where
 * `make install` puts it relative to sbin/. Never a name a client gave. */
static int agent_locate(char *out, size_t sz)
{
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return UV_ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return UV_ENOENT;
    *slash = '\0';
    static const char *const rel[] = {"/libheaptrace-agent.so",
                                      "/../lib/heaptrace/libheaptrace-agent.so"};
    for (unsigned i = 0; i < 2; i++) {
        snprintf(out, sz, "%s%s", exe, rel[i]);
        char real[4096];
        if (realpath(out, real) && access(real, R_OK) == 0) {
            snprintf(out, sz, "%s", real);
            return 0;
        }
    }
    return UV_ENOENT;
}

static int agent_available(char *err, size_t errsz)
{
    char path[4096];
    if (agent_locate(path, sizeof(path)) != 0) {
        snprintf(err, errsz,
                 "libheaptrace-agent.so is neither next to heaptraced nor in "
                 "../lib/heaptrace");
        return HT_ENOTSUP;
    }
    return 0;
}

/* start --source auto: the target could take the agent (inject_check). */
static int agent_can_attach(uint64_t pid, char *err, size_t errsz)
{
    char path[4096];
    if (agent_locate(path, sizeof(path)) != 0)
        return agent_available(err, errsz);
    struct inject_req r = {.pid = pid, .lib = path, .socket = "", .token = "", .stacks = ""};
    return inject_check(&r, err, errsz);
}



static void timer_cb(uv_timer_t *t)
{
    struct agent_source *s = t->data;
    if (s->ended)
        return;
    if (s->pend && uv_now(s->loop) - s->pend->since_ms > HELLO_MS) {
        s->refused_slow++;
        asrc_pending_end(s);
    }
    if (!s->connected && !s->eof && uv_now(s->loop) - s->start_ms > CONNECT_MS) {
        s->eof = 1;
        snprintf(s->end_reason, sizeof(s->end_reason),
                 "the program did not connect in %d s (not started, or the agent not loaded)",
                 CONNECT_MS / 1000);
    }
    uv_mutex_lock(&s->qmu);
    unsigned frames_waiting = s->nq;
    uv_mutex_unlock(&s->qmu);
    /* A drain, also for the frames waiting for the symbolizer (sym_sync follows a drain). */
    if (s->eof || frames_waiting || __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) ||
        (s->connected && (agent_dec_ready(&s->dec) || asrc_pending(s))))
        asrc_say_ready(s);
    else if (s->connected && s->sample_ns && asrc_mono_ns() >= s->next_sample)
        asrc_say_ready(s);
}



/* The uid the attached agent connects with (SO_PEERCRED's: the effective
 * one), from /proc/PID/status; UINT32_MAX (nobody's) if it cannot be read. */
static uint32_t target_euid(uint64_t pid)
{
    char path[64], line[256];
    unsigned r, e;
    uint32_t uid = UINT32_MAX;
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
            uid = e;
    if (f)
        fclose(f);
    return uid;
}

/* What a session of the agent source must have: a mode it serves, a
 * connection to adopt for a descendant, the launcher's pid for a launch. */
static int open_check(const struct source_params *p, const struct agent_source *parent,
                      int attach, char *err, size_t errsz)
{
    if (p->mode != SOURCE_LAUNCH && !parent && !attach) {
        snprintf(err, errsz,
                 "the agent source launches programs (heaptracectl run) and attaches "
                 "to running ones (start --pid)");
        return HT_ENOTSUP;
    }
    if (parent && parent->handoff_fd < 0) {
        snprintf(err, errsz, "no connection of process %llu to adopt", (unsigned long long)p->pid);
        return HT_EBADARG;
    }
    if (!p->launcher_pid && !attach) {
        snprintf(err, errsz, "the agent source needs the launching client's pid");
        return HT_EBADARG;
    }
    return 0;
}

/* The session's options, and whose the process is. */
static void params_take(struct agent_source *s, const struct source_params *p,
                        const char *agent_path)
{
    s->follow = p->follow;
    s->family[s->nfamily++] = s->want_pid;
    s->owner = s->attach ? target_euid(p->pid) : p->launcher_uid;
    s->stacks = p->stacks;
    s->depth = p->stack_depth;
    s->sample_ns = p->sample_ns;
    s->sample_bytes = p->sample_bytes;
    s->sample_seed = p->sample_seed;
    s->max_overhead = p->max_overhead;
    snprintf(s->agent_path, sizeof(s->agent_path), "%s", agent_path);
}

int agent_open_at(struct source **out, uv_loop_t *loop, const struct source_params *p,
                         const struct source_sink *sink, const char *agent_path, char *err,
                         size_t errsz)
{
    *out = NULL;
    struct agent_source *parent =
        p->mode == SOURCE_PID && p->parent && p->parent->ops == &source_agent_ops
            ? (struct agent_source *)p->parent
            : NULL;
    /* A process of an image (start --exe): attached at its entry point. */
    struct agent_source *image_src = parent && parent->image_mode ? parent : NULL;
    if (image_src)
        parent = NULL;
    int attach = p->mode == SOURCE_PID && (!p->parent || image_src);
    if (p->mode == SOURCE_IMAGE)
        return asrc_image_open(out, &source_agent_ops, loop, p, sink, agent_path, err, errsz);
    int rc = open_check(p, parent, attach, err, errsz);
    if (rc)
        return rc;
    struct agent_source *s = ht_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = &source_agent_ops;
    s->base.sink = *sink;
    s->loop = loop;
    s->lfd = s->cfd = s->handoff_fd = s->adopt_fd = s->pidfd = -1;
    s->want_pid = parent || attach ? p->pid : p->launcher_pid;
    s->attach = attach;
    s->xfd = s->gfd = -1;
    if (image_src && image_src->nkids < FAMILY_MAX) {
        s->image_src = image_src;
        image_src->kids[image_src->nkids++] = s;
    }
    params_take(s, p, agent_path);
    s->child = parent != NULL;
    uv_mutex_init(&s->qmu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    /* The shared memory is mapped into the daemon for the session's life. */
    rc = mem_acct_charge(&s->acct, MEM_source_buffers,
                             HTA_TOTAL_BYTES + (HTA_STACKS + 1) * 4 + QSEEN * 8);
    if (rc) {
        snprintf(err, errsz,
                 "the memory budget cannot hold the agent's %llu KiB ring "
                 "(session_memory_budget, daemon_memory_budget)",
                 (unsigned long long)(HTA_TOTAL_BYTES >> 10));
        goto fail;
    }
    s->ids = ht_calloc(HTA_STACKS + 1, sizeof(*s->ids));
    s->qseen = ht_calloc(QSEEN, sizeof(*s->qseen));
    s->h = ht_calloc(1, sizeof(*s->h));
    if (!s->ids || !s->h || !s->qseen) {
        snprintf(err, errsz, "out of memory");
        rc = UV_ENOMEM;
        goto fail;
    }
    if (parent) {
        /* The descendant's connection, on the parent's socket: adopted. */
        memcpy(s->token, parent->token, sizeof(s->token));
        s->adopt_fd = parent->handoff_fd;
        parent->handoff_fd = -1;
    } else if ((rc = asrc_listen_make(s, err, errsz)) != 0) {
        goto fail;
    }
    *out = &s->base;
    return 0;
fail:
    agent_close(&s->base);
    return rc;
}

static int agent_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                      const struct source_sink *sink, char *err, size_t errsz)
{
    char path[4096];
    *out = NULL;
    if (agent_locate(path, sizeof(path)) != 0)
        return agent_available(err, errsz);
    return agent_open_at(out, loop, p, sink, path, err, errsz);
}

int agent_source_open_test(struct source **out, uv_loop_t *loop, const struct source_params *p,
                           const struct source_sink *sink, char *err, size_t errsz)
{
    return agent_open_at(out, loop, p, sink, "/nonexistent/libheaptrace-agent.so", err, errsz);
}

void agent_source_set_t0(struct source *base, uint64_t t0)
{
    ((struct agent_source *)base)->t0 = t0;
}

const char *agent_source_socket(struct source *base)
{
    return ((struct agent_source *)base)->sockname;
}

const char *agent_source_token(struct source *base)
{
    return ((struct agent_source *)base)->token;
}


/* start --pid: the running process made to load the agent (inject-linux.c),
 * which connects to the socket listened on now. The loop takes the
 * connection once this returns. */
static int agent_attach(struct agent_source *s, char *err, size_t errsz)
{
    struct inject_req r = {.pid = s->want_pid,
                           .lib = s->agent_path,
                           .socket = s->sockname,
                           .token = s->token,
                           .stacks = asrc_stacks_name(s->stacks),
                           .depth = s->depth < HTA_DEPTH ? s->depth : HTA_DEPTH,
                           .at_entry = s->image_src != NULL};
    uint64_t t = asrc_mono_ns();
    int rc = inject_agent(&r, err, errsz);
    s->attach_ns = asrc_mono_ns() - t;
    s->entered = r.entered;
    return rc;
}

static int agent_start(struct source *base, char *err, size_t errsz)
{
    struct agent_source *s = (struct agent_source *)base;
    if (s->started)
        return 0;
    if (s->image_mode) {
        uv_poll_init(s->loop, &s->h->xpoll, s->xfd);
        s->h->open++;
        s->h->xpoll.data = s;
        uv_poll_start(&s->h->xpoll, UV_READABLE, asrc_exec_cb);
        uv_poll_init(s->loop, &s->h->gpoll, s->gfd);
        s->h->open++;
        s->h->gpoll.data = s;
        uv_poll_start(&s->h->gpoll, UV_READABLE, asrc_gate_cb);
        s->started = 1;
        return 0;
    }
    s->t0 = asrc_mono_ns();
    s->start_ms = uv_now(s->loop);
    s->next_sample = s->t0;
    uv_timer_init(s->loop, &s->h->timer);
    s->h->open++;
    s->h->timer.data = s;
    uv_timer_start(&s->h->timer, timer_cb, DRAIN_MS, DRAIN_MS);
    s->started = 1;
    if (s->adopt_fd >= 0) { /* a asrc_descendant's session: its hello comes on the adopted connection */
        asrc_pending_begin(s, s->adopt_fd);
        s->adopt_fd = -1;
        return 0;
    }
    uv_poll_init(s->loop, &s->h->lpoll, s->lfd);
    s->h->open++;
    s->h->lpoll.data = s;
    uv_poll_start(&s->h->lpoll, UV_READABLE, asrc_listen_cb);
    s->has_listener = 1;
    return s->attach ? agent_attach(s, err, errsz) : 0;
}


static size_t private_event(struct agent_source *s, struct ht_event *ev, uint64_t now)
{
    struct procmem pm;
    if (!s->sample_ns || now < s->next_sample || s->eof)
        return 0;
    s->next_sample = now + s->sample_ns;
    if (procmem_read(s->want_pid, &pm) != 0)
        return 0;
    /* Sent when it changed, else once per four samples (a heartbeat that
     * moves the session's clock while the target is idle), as bpf does. */
    if (s->private_sent && pm.private_bytes == s->last_private &&
        now - s->last_private_t < 4 * s->sample_ns)
        return 0;
    s->private_sent = 1;
    s->last_private = pm.private_bytes;
    s->last_private_t = now;
    memset(ev, 0, sizeof(*ev));
    ev->kind = HT_EV_PRIVATE_BYTES;
    ev->size = pm.private_bytes;
    ev->t = now - s->t0 > s->dec.last_t ? now - s->t0 : s->dec.last_t;
    s->dec.last_t = ev->t;
    return 1;
}

/* Stuck records: a reserved one that stays incomplete, or every one left
 * once the process is gone (nobody will complete them). */
static void unstick(struct agent_source *s)
{
    if (agent_dec_ready(&s->dec) || !asrc_pending(s)) {
        s->stuck_ticks = 0;
        return;
    }
    if (s->dec.tail != s->stuck_tail) {
        s->stuck_tail = s->dec.tail;
        s->stuck_ticks = 0;
    }
    if (s->eof || ++s->stuck_ticks >= STUCK_TICKS) {
        agent_dec_skip(&s->dec);
        s->stuck_ticks = 0;
    }
}

/* After the connection's end: is the wait for an exec'd program over (the
 * process exited, the time is up, or the session stops)? The reason is said. */
static int exec_waited(struct agent_source *s)
{
    if (!s->exec_wait || s->stopped) {
        s->exec_wait = 0;
        return 1;
    }
    if (asrc_process_gone(s)) {
        s->exec_wait = 0;
        snprintf(s->end_reason, sizeof(s->end_reason), "target exited");
        return 1;
    }
    if (uv_now(s->loop) < s->exec_deadline_ms)
        return 0;
    s->exec_wait = 0;
    snprintf(s->end_reason, sizeof(s->end_reason),
             "the program closed the agent's connection, or exec'd a program that did not load "
             "the agent in %d s (static, setuid, or LD_PRELOAD dropped): it runs on untraced",
             EXEC_JOIN_MS / 1000);
    return 1;
}

static int end_now(struct agent_source *s)
{
    s->ended = 1;
    if (s->base.sink.ended)
        s->base.sink.ended(s->base.sink.arg, s->end_reason[0] ? s->end_reason : "tracing stopped");
    return 0;
}

/* The flush: taken to where the agent asked (or past what will never come),
 * then the symbolizer's turn (sym_sync), then the answer. Late: after the
 * agent stopped waiting (HTA_FLUSH_MS). */
static void flush_step(struct agent_source *s)
{
    int st = __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE);
    if (st == 1 && (s->dec.tail >= s->flush_to || s->eof))
        __atomic_store_n(&s->flush_stage, 2, __ATOMIC_RELEASE);
    if (st != 3)
        return;
    char a = HTA_FLUSH_ACK;
    if (s->cfd >= 0 && !s->eof)
        (void)!send(s->cfd, &a, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    s->flushes++;
    s->flushes_late += uv_now(s->loop) - s->flush_ms > HTA_FLUSH_MS;
    __atomic_store_n(&s->flush_stage, 0, __ATOMIC_RELEASE);
}

/* Each change of the sampling mean the agent made (run --max-overhead) is
 * a mark, rate.N at the change's time: a window can start or end there.
 * Changes closer than a drain apart make one mark, the latest's. */
static void rate_mark(struct agent_source *s)
{
    uint64_t n = s->dec.st.rate_changes; /* kept across an exec */
    if (n == s->rate_marked || !s->base.sink.mark)
        return;
    s->rate_marked = n;
    char name[32];
    snprintf(name, sizeof(name), "rate.%llu", (unsigned long long)n);
    if (s->base.sink.mark(s->base.sink.arg, name, s->dec.rate_t) != 0)
        s->rate_marks_dropped++;
}

static int agent_drain(struct source *base, size_t budget)
{
    struct agent_source *s = (struct agent_source *)base;
    struct ht_event evs[256];
    if (s->ended)
        return 0;
    if (!s->connected)
        return s->eof ? end_now(s) : 0;
    if (s->exec_wait && s->pend)
        return 0; /* the next program's hello is on its way */
    uint64_t now = asrc_mono_ns();
    while (budget > 0) {
        size_t cap = budget < 254 ? budget : 254;
        if (s->eof && asrc_pending(s) < cap)
            cap = (size_t)asrc_pending(s); /* another process may hold the memfd and write on */
        size_t n = cap ? agent_dec_take(&s->dec, evs, cap, now) : 0;
        size_t skipped = 0;
        if (n == 0 && asrc_pending(s)) {
            uint64_t before = s->dec.st.stuck;
            unstick(s);
            skipped = (size_t)(s->dec.st.stuck - before);
        }
        n += asrc_lost_event(s, &evs[n]);
        n += private_event(s, &evs[n], now);
        if (n == 0 && !skipped)
            break;
        if (n) {
            asrc_frames_queue(s, evs, n);
            if (s->base.sink.events(s->base.sink.arg, evs, n) != 0)
                return -1;
            s->delivered += n;
        }
        rate_mark(s);
        n += skipped; /* a skip is work too: the budget bounds a hostile ring's cost */
        budget = budget > n ? budget - n : 0;
    }
    flush_step(s);
    if (s->eof)
        return asrc_pending(s) ? 1 : exec_waited(s) ? end_now(s) : 0;
    return agent_dec_ready(&s->dec) || __atomic_load_n(&s->flush_stage, __ATOMIC_ACQUIRE) ? 1 : 0;
}

static void agent_stop(struct source *base)
{
    struct agent_source *s = (struct agent_source *)base;
    if (s->stopped)
        return;
    s->stopped = 1;
    asrc_pending_end(s);
    if (s->map) {
        agent_dec_stop(&s->dec);
        s->cut = asrc_pending(s);
    }
    for (unsigned i = 0; i < s->nkids; i++)
        asrc_kid_end(s->kids[i]);
    s->nkids = 0;
    asrc_kids_forget(s);
    if (s->h) {
        if (s->started && s->image_mode) {
            handle_close(s->h, (uv_handle_t *)&s->h->xpoll);
            handle_close(s->h, (uv_handle_t *)&s->h->gpoll);
        }
        else if (s->started)
            handle_close(s->h, (uv_handle_t *)&s->h->timer);
        if (s->has_listener)
            handle_close(s->h, (uv_handle_t *)&s->h->lpoll);
        asrc_cpoll_close(s);
        if (!s->h->open)
            ht_free(s->h);
        s->h = NULL; /* freed by the last close callback */
    }
    /* Closing the socket tells the agent (its watcher thread) to stop. */
    if (s->cfd >= 0)
        close(s->cfd);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->adopt_fd >= 0)
        close(s->adopt_fd);
    s->adopt_fd = -1;
    execwatch_close(s->xfd);
    s->xfd = -1;
    if (s->gfd >= 0)
        close(s->gfd); /* lets any exec still waiting at the gate go on */
    s->gfd = -1;
    s->cfd = s->lfd = -1;
}

void agent_close(struct source *base)
{
    if (!base)
        return;
    struct agent_source *s = (struct agent_source *)base;
    agent_stop(base);
    if (s->map)
        munmap(s->map, HTA_TOTAL_BYTES);
    if (s->pidfd >= 0)
        close(s->pidfd);
    struct sym_cache *sc = __atomic_load_n(&s->syms, __ATOMIC_ACQUIRE);
    if (sc)
        sym_cache_free(sc);
    ht_free(s->ids);
    ht_free(s->qseen);
    ht_free(s->marked);
    mem_acct_close(&s->sym_acct);
    mem_acct_close(&s->acct);
    uv_mutex_destroy(&s->qmu);
    ht_free(s);
}

static void agent_stats(struct source *base, struct source_stats *st)
{
    struct agent_source *s = (struct agent_source *)base;
    memset(st, 0, sizeof(*st));
    st->events = s->delivered;
    st->lines = s->dec.st.records;
    st->malformed = s->dec.st.malformed + s->dec.st.bad_stacks;
    st->lost = s->cut; /* the rest went to the engine as lost events */
    st->stack_table_drops = s->dec.st.stack_drops;
    st->sampling = s->sample_bytes || s->max_overhead;
    if (st->sampling) {
        st->sample_max_overhead = s->max_overhead;
        st->sample_mean = s->map ? s->dec.rate : s->sample_bytes;
        st->sample_overhead_ppm = s->map ? agent_dec_overhead_ppm(&s->dec) : 0;
        st->sample_rate_changes = s->dec.st.rate_changes;
        st->sampled_allocs = s->dec.st.sampled;
        /* The process's total: programs before an exec counted too (status's way). */
        st->sample_set_full = s->agent_before[HTA_CNT_SAMPLE_SET_FULL] +
                              (s->map ? agent_dec_counter(&s->dec, HTA_CNT_SAMPLE_SET_FULL) : 0);
    }
    for (int k = 0; k < MEM_KINDS; k++) {
        st->mem[k] = s->acct.bytes[k];
        st->over_budget[k] = s->acct.over_budget[k];
        st->no_memory[k] = s->acct.no_memory[k];
    }
}

const struct source_ops source_agent_ops = {
    .name = "agent",
    .modes = SOURCE_LAUNCH | SOURCE_PID | SOURCE_IMAGE,
    .summary = "an in-process agent preloaded into a program heaptracectl run starts, or "
               "loaded into a running one (start --pid N --source agent; Linux x86-64)",
    .available = agent_available,
    .can_attach = agent_can_attach,
    .open = agent_open,
    .start = agent_start,
    .drain = agent_drain,
    .stop = agent_stop,
    .close = agent_close,
    .stats = agent_stats,
    .status_json = agent_status_json,
    .symbolize = agent_symbolize,
    .sym_sync = agent_sym_sync,
};
