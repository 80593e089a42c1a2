/*
 * The agent source's parts (agent-source.c, agent-conn.c, agent-image.c,
 * agent-syms.c, agent-status.c): its state and what they share.
 */
#ifndef AGENT_SRC_H
#define AGENT_SRC_H

#include "agent-decode.h"
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

/* The ring is looked at this often. */
#define DRAIN_MS 5
/* A reserved record not completed after this many looks is given up on
 * (its thread died, or the target is hostile): 200 ms. */
#define STUCK_TICKS 40
/* The program must connect within this time after the reply. */
#define CONNECT_MS 30000
/* Processes of a followed family whose children are taken. */
#define FAMILY_MAX 256
#define GATE_MARKS 8   /* files an --exe name is found as (the standard bin dirs) */
#define GATE_RECENT 64 /* pids the gate took, not counted again by the connector */
/* After the connection's end, a new program of the same process (an exec)
 * has this long to join (ms): its agent joins from its constructor. */
#define EXEC_JOIN_MS 10000
/* New frames waiting to be symbolized while the process lives, and the
 * frames queued so far, remembered to queue each once. */
#define FRAMEQ 16384
#define QSEEN (1u << 16)
/* A frame in no known module is tried again this long (ns). */
#define FRAME_RETRY_NS 1000000000ull

struct agent_handles; /* the libuv handles: freed in their close callbacks */
struct agent_pending;

struct frameq_ent {
    uint64_t addr, first_ns;
};

struct agent_source {
    struct source base;
    uv_loop_t *loop;
    struct agent_handles *h;
    int lfd, cfd; /* listening socket, the agent's connection */
    int pidfd;    /* the process, from its first connection: readable once it exited */
    /* The connection ended while the process lives: an exec, whose new
     * program may join (exec_switch) until exec_deadline_ms. */
    int exec_wait;
    uint64_t exec_deadline_ms, execs, last_exec_t;
    int keep_mods;    /* the symbolizer keeps the modules it knows (sym_sync) */
    int maps_changed; /* an exec: the symbolizer re-reads the maps at the next miss */
    /* A flush the agent asked for (HTA_FLUSH) before its image goes: 1 until
     * the ring is taken to flush_to, 2 until the symbolizer had the frames,
     * 3 to acknowledge. */
    int flush_stage; /* atomic: sym_sync moves it on from a query worker */
    uint64_t flush_to, flush_ms, flushes, flushes_late;
    /* Frames queued once each (an open-addressing set; 0 is no frame). */
    uint64_t *qseen;
    uint32_t qseen_n;
    char sockname[64], token[HTA_TOKEN_LEN + 1], agent_path[4096];
    uint64_t want_pid;
    uint32_t owner;
    /* run --follow: a connection from a descendant of the program becomes a
     * session of its own (sink.spawn), whose source adopts it. */
    int follow, handoff_fd, adopt_fd;
    uint64_t family[FAMILY_MAX]; /* the program and the descendants followed */
    unsigned nfamily;
    uint64_t spawned, refused_spawn;
    enum source_stacks stacks;
    uint32_t depth;
    uint64_t sample_ns, next_sample;
    uint64_t last_private, last_private_t;
    int private_sent;
    int started, connected, eof, ended, stopped, has_listener;
    int attach;         /* start --pid: the agent is loaded into the running process */
    uint64_t attach_ns; /* how long loading it took */
    /* start --exe: execs watched (xfd), each process of the image a session
     * of its own (sink.spawn) whose source is one of kids; a kid knows its
     * image source while both live. */
    int image_mode, xfd;
    char image[PATH_MAX];
    /* The exec gate (gfd, execwatch.h) on the image's files: a process
     * caught there is held before its first instruction; the connector's
     * notice (xfd) catches the image run from other files, late. gated: the
     * last pids the gate took, which the connector then reports again. */
    int gfd;
    char (*marked)[PATH_MAX]; /* GATE_MARKS of them */
    unsigned nmarked;
    uint64_t gated[GATE_RECENT], gate_taken, gate_missed, gate_lost;
    unsigned ngated;
    struct agent_source *kids[FAMILY_MAX], *image_src;
    unsigned nkids;
    uint64_t exec_lost, execs_seen;
    int entered; /* a process of the image attached at its entry point */
    uint64_t t0, start_ms;
    void *map;
    uint32_t *ids;
    struct agent_dec dec;
    uint64_t eof_end; /* at the end: the ring position past the last record there can be */
    unsigned stuck_ticks;
    uint32_t stack_seen; /* the highest engine stack id queued for the symbolizer */
    uint64_t stuck_tail;
    uint64_t lost_seen[HTA_CNT_MAX]; /* the agent's counters as of the last lost event */
    uint64_t delivered, cut;
    uint64_t refused_peer, refused_token, refused_memfd, refused_extra, refused_slow, socket_bytes;
    struct agent_pending *pend; /* a connection waiting for its hello */
    char end_reason[160];
    struct mem_acct acct, sym_acct; /* the loop's; the symbol cache's (symbolizer lock) */
    /* Symbolizer side (the session's symbolizer lock), frames queued by the loop. */
    struct sym_cache *syms;
    uv_mutex_t qmu;
    struct frameq_ent q[FRAMEQ];
    unsigned nq;
    uint64_t q_drops;
    /* The symbolizer's module counts (symbols.h), copied under its lock for
     * status, which never takes it. */
    uint64_t sym_kept_replaced, sym_kept_dropped, sym_not_added, sym_not_owner;
    /* The counters of the rings of programs before an exec (agent-ring.h):
     * status shows the process's totals. */
    uint64_t agent_before[HTA_CNT_MAX];
    uint64_t sample_bytes, sample_seed; /* run --sample, --sample-seed */
    /* Rate changes marked (rate_mark), and those the engine's mark cap (or a
     * user's mark of the same name) left unmarked. */
    uint64_t rate_marked, rate_marks_dropped;
    uint32_t max_overhead; /* run --max-overhead */
    int child;             /* a followed descendant's session */
};

struct agent_handles {
    uv_timer_t timer;
    uv_poll_t lpoll, xpoll; /* xpoll: start --exe's exec watch */
    uv_poll_t gpoll;        /* start --exe's exec gate */
    uv_poll_t *cpoll;       /* the connection's: one per program the process ran (exec) */
    int open;
};

/* A connection from the right process, waiting for its hello: read when
 * it comes (never waited for on the loop), refused after 2 s. Its handle
 * is freed, and its descriptor closed, in the close callback. */
struct agent_pending {
    uv_poll_t poll;
    int fd;
    uint64_t since_ms;
    struct agent_source *s;
};

#define HELLO_MS 2000

/* Small helpers every part uses. */
static inline uint64_t asrc_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void asrc_say_ready(struct agent_source *s)
{
    if (s->base.sink.ready)
        s->base.sink.ready(s->base.sink.arg);
}

/* Records reserved, not taken yet. Once the process is gone no more can
 * come: bounded by what was reserved then (the head is the target's word,
 * and a hostile one never lets the tail reach it). */
static inline uint64_t asrc_pending(struct agent_source *s)
{
    if (!s->eof)
        return agent_dec_pending(&s->dec);
    return s->eof_end > s->dec.tail ? s->eof_end - s->dec.tail : 0;
}

/* agent-conn.c */
void asrc_cpoll_close(struct agent_source *s);
size_t asrc_lost_event(struct agent_source *s, struct ht_event *ev);
void asrc_descendant(struct agent_source *s, int fd, uint64_t pid);
void asrc_listen_cb(uv_poll_t *p, int status, int events);
int asrc_listen_make(struct agent_source *s, char *err, size_t errsz);
void asrc_pending_begin(struct agent_source *s, int fd);
void asrc_pending_end(struct agent_source *s);
int asrc_process_gone(const struct agent_source *s);

/* agent-image.c */
void asrc_exec_cb(uv_poll_t *p, int status, int events);
void asrc_gate_cb(uv_poll_t *p, int status, int events);
int asrc_image_open(struct source **out, const struct source_ops *ops, uv_loop_t *loop,
                    const struct source_params *p, const struct source_sink *sink,
                    const char *agent_path, char *err, size_t errsz);
void asrc_kid_end(struct agent_source *k);
void asrc_kids_forget(struct agent_source *s);

/* agent-source.c */
void agent_close(struct source *base);
int agent_open_at(struct source **out, uv_loop_t *loop, const struct source_params *p,
                  const struct source_sink *sink, const char *agent_path, char *err, size_t errsz);

/* agent-status.c */
struct cJSON *agent_status_json(struct source *base);
const char *asrc_stacks_name(enum source_stacks st);

/* agent-syms.c */
void agent_sym_sync(struct source *base);
const char *agent_symbolize(struct source *base, uint64_t addr, char *buf, size_t bufsz);
void asrc_frames_queue(struct agent_source *s, const struct ht_event *evs, size_t n);

#endif
