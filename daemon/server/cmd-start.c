/*
 * start: attach to a running process (--pid) or every new process of an
 * image (--exe); run (cmd-run.c) launches a program. All three go through
 * source_pick: the first source of sources.def serving the mode, or the one
 * --source names. A source that cannot open or start leaves nothing behind:
 * the session is dropped and its message is the answer.
 */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-units.h"
#ifdef HEAPTRACE_WITH_AGENT
#include "agent-ring.h" /* HTA_RATE_MAX */
#endif
#include "log.h"
#include "stack-intern.h"
#include "endpoint.h"
#include "sys/procmem.h"
#include "sys/trace-access.h"
#include "sources.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static const char *mode_flag(unsigned mode)
{
    return mode == SOURCE_PID ? "start --pid" : mode == SOURCE_IMAGE ? "start --exe" : "run";
}

/* --stacks: fp, dwarf or none; auto or absent: the source's default. */
static int parse_stacks(const cJSON *v, enum source_stacks *out)
{
    *out = SOURCE_STACKS_DEFAULT;
    if (!v)
        return 0;
    static const struct {
        const char *name;
        enum source_stacks val;
    } names[] = {{"fp", SOURCE_STACKS_FP},
                 {"dwarf", SOURCE_STACKS_DWARF},
                 {"none", SOURCE_STACKS_NONE},
                 {"auto", SOURCE_STACKS_DEFAULT}};
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(v->valuestring, names[i].name) == 0) {
            *out = names[i].val;
            return 0;
        }
    return HT_EBADARG;
}

/* The NULL-terminated argv of run (strings point into args). */
static char **argv_of(const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    char **argv = ht_calloc((size_t)n + 1, sizeof(char *));
    if (!argv)
        return NULL;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) argv[i++] = it->valuestring;
    return argv;
}

/* The session that traces pid now (its source attached), or NULL. */
static struct session *tracing_session(struct server *srv, uint64_t pid)
{
    for (struct session *s = srv->sessions.head; s; s = session_next(s)) {
        if (!session_taking_input(s))
            continue;
        const struct source_params *lp = session_live_params(s);
        if ((lp->mode == SOURCE_PID && lp->pid == pid) ||
            (lp->mode == SOURCE_LAUNCH && session_engine(s)->pid == pid))
            return s;
    }
    return NULL;
}

static int already_traced(struct cmd_ctx *ctx, const struct session *o, uint64_t pid)
{
    /* Another user's session is not named to whom may not see it. */
    if (!session_visible(o, ctx->c->uid))
        return cmd_error(ctx, HT_EEXIST, "process %llu is already traced by another user's session",
                         (unsigned long long)pid);
    return cmd_error(ctx, HT_EEXIST,
                     "process %llu is already traced by session %u \"%s\" ('heaptracectl stop "
                     "%u' ends it)",
                     (unsigned long long)pid, session_id(o), session_name(o), session_id(o));
}

/* The first private-bytes reading, at the start: until the source's sampler
 * sends its own, status, top and the timeline's first sample would read 0.
 * A process that cannot be read (gone already) keeps 0; the source says why. */
static void first_private_sample(struct session *s, const struct source_params *p)
{
    struct procmem pm;
    if (p->mode == SOURCE_PID && procmem_read(p->pid, &pm) == 0)
        engine_private_bytes(session_engine(s), pm.private_bytes);
}

/* A start that failed gives its id back: the next session gets it (the
 * dropped one is out of the list already, and nobody was told its id). */
static void session_id_unuse(struct server *srv, uint32_t id)
{
    if (srv->sessions.next_id == id)
        srv->sessions.next_id--;
}

static int live_reply(struct cmd_ctx *ctx, struct session *s, const struct source_params *p,
                      const char *choice)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(s));
    cJSON_AddStringToObject(d, "name", session_name(s));
    cJSON_AddStringToObject(d, "source", session_source_name(s));
    if (choice && choice[0])
        cJSON_AddStringToObject(d, "source_choice", choice);
    cJSON_AddStringToObject(d, "state", session_state_name(session_state(s)));
    if (p->mode == SOURCE_PID)
        cJSON_AddNumberToObject(d, "pid", (double)p->pid);
    /* What the source wants said at the start (ETW: only processes started
     * from now on; a heap logger restart other sessions may have lost
     * events to), from its status "notes". */
    cJSON *st = session_source_status(s);
    if (st) {
        cJSON *notes = cJSON_DetachItemFromObjectCaseSensitive(st, "notes");
        if (cJSON_IsArray(notes))
            cJSON_AddItemToObject(d, "notes", notes);
        else
            cJSON_Delete(notes);
        /* run where the client execs the program (the agent source): what
         * it needs to (agent library, socket, token), for this client only. */
        cJSON *launch = cJSON_DetachItemFromObjectCaseSensitive(st, "launch");
        if (cJSON_IsObject(launch))
            cJSON_AddItemToObject(d, "launch", launch);
        else
            cJSON_Delete(launch);
        cJSON_Delete(st);
    }
    return cmd_reply(ctx, d);
}

/* start --pid: may the client trace pid? 0 with *handle on the process
 * checked (trace_access_open) and who, to confirm once attached. */
static int pid_access(struct cmd_ctx *ctx, uint64_t pid, struct trace_who *who, int *handle,
                      char *err, size_t errsz)
{
    who->ngroups = 0;
    who->gid = 0;
    who->uid = ctx->c->uid;
    if (who->uid != 0) {
        int rc = endpoint_peer_groups(&ctx->c->pipe, &who->gid, who->groups, TRACE_GROUPS_MAX,
                                      &who->ngroups, err, errsz);
        if (rc != 0)
            return rc;
    }
    return trace_access_open(who, pid, handle, err, errsz);
}

/* The session of start or run, its source begun; with who, the access
 * checked on handle is confirmed once attached: the process is still the
 * one checked, and still the client's to trace (no setuid exec meanwhile;
 * from the attach on, an exec ends the trace). */
static int live_session(struct cmd_ctx *ctx, const struct source_ops *ops, struct source_params *p,
                        const struct trace_who *who, int handle, const char *choice)
{
    const cJSON *args = ctx->req->args;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(args, "name");
    const cJSON *depth = cJSON_GetObjectItemCaseSensitive(args, "stack_depth");
    unsigned mode = p->mode;
    char err[512];
    /* After the access check: who may not trace the process is not told who does. */
    const struct session *o = mode == SOURCE_PID ? tracing_session(ctx->srv, p->pid) : NULL;
    if (o)
        return already_traced(ctx, o, p->pid);
    int rc =
        session_admit_for(&ctx->srv->sessions, name ? name->valuestring : NULL, ctx->c->uid, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    p->stack_depth = depth ? (uint32_t)depth->valuedouble : HT_STACK_MAX_DEPTH;
    p->no_heap = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "no_heap"));
    p->no_virtual = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "no_virtual"));
    const cJSON *exe = cJSON_GetObjectItemCaseSensitive(args, "exe");
    if (exe)
        p->image = exe->valuestring;
    char **argv = NULL;
    if (mode == SOURCE_LAUNCH) {
        argv = argv_of(cJSON_GetObjectItemCaseSensitive(args, "argv"));
        if (!argv)
            return cmd_error(ctx, HT_ENOMEM, "out of memory");
        p->argv = argv;
    }
    struct session *s =
        session_new(&ctx->srv->sessions, name ? name->valuestring : NULL, ops->name, err, sizeof(err));
    if (!s) {
        ht_free(argv);
        return cmd_error(ctx, HT_ENOMEM, "%s", err);
    }
    session_set_owner(s, ctx->c->uid);
    rc = session_add_triggers(s, args, err, sizeof(err));
    if (rc == 0) {
        /* Private bytes sampled four times per timeline interval (a read of
         * /proc/PID/status is ~5 us), so a timeline sample and a trigger see
         * a value at most a quarter interval old; at least every 10 ms. */
        uint64_t tl = ctx->srv->cfg->limits.timeline_ns;
        p->sample_ns = (tl ? tl : 1000000000ULL) / 4;
        if (p->sample_ns < 10000000ULL)
            p->sample_ns = 10000000ULL;
        p->ring_bytes = ctx->srv->cfg->bpf_ring_bytes;
        session_set_state(s, SESSION_RUNNING);
        /* Before the source starts: its start may apply its first events
         * (the process), and the timeline's first sample is taken with them. */
        first_private_sample(s, p);
        rc = session_source_begin(s, ops, p, err, sizeof(err));
    }
    if (rc == 0 && who)
        rc = trace_access_confirm(who, p->pid, handle, err, sizeof(err));
    ht_free(argv);
    if (rc != 0) {
        uint32_t id = session_id(s);
        log_info("session %u: %s with source %s failed: %s", id, mode_flag(mode), ops->name, err);
        session_drop(s);
        session_id_unuse(ctx->srv, id);
        return cmd_error(ctx, rc, "%s", err);
    }
    return live_reply(ctx, s, p, choice);
}

/* --source auto with --pid: the agent where it can attach, else the first
 * source serving pid (eBPF); choice says which and why. After the access
 * check: who may not trace the process learns nothing of it. */
static const struct source_ops *pick_auto(uint64_t pid, char *choice, size_t sz)
{
    char why[512] = "";
    const struct source_ops *a = source_pick(SOURCE_PID, "agent", why, sizeof(why));
    int rc = a && a->can_attach ? 0 : HT_ENOTSUP;
    if (rc == 0 && a->available)
        rc = a->available(why, sizeof(why));
    if (rc == 0)
        rc = a->can_attach(pid, why, sizeof(why));
    if (rc == 0) {
        snprintf(choice, sz, "agent: it can attach to process %llu", (unsigned long long)pid);
        return a;
    }
    const struct source_ops *o = source_pick(SOURCE_PID, NULL, why, sizeof(why));
    if (o)
        snprintf(choice, sz, "%s: the agent cannot attach (%.400s)", o->name,
                 why[0] ? why : "not in this build");
    return o;
}

/* run --sample, --sample-seed, --max-overhead: 0, or -1 for a mean the
 * agent's records cannot carry (HTA_RATE_MAX). */
static int sample_args(const cJSON *args, struct source_params *p)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "sample");
    if (cJSON_IsString(v) && ht_parse_size(v->valuestring, &p->sample_bytes) != 0)
        return -1;
    if (cJSON_IsNumber(v))
        p->sample_bytes = (uint64_t)v->valuedouble;
#ifdef HEAPTRACE_WITH_AGENT
    if (v && (p->sample_bytes == 0 || p->sample_bytes > HTA_RATE_MAX))
#else
    if (v && p->sample_bytes == 0) /* no agent in this build: run is refused anyway */
#endif
        return -1;
    v = cJSON_GetObjectItemCaseSensitive(args, "sample_seed");
    p->sample_seed = cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
    v = cJSON_GetObjectItemCaseSensitive(args, "max_overhead");
    p->max_overhead = cJSON_IsNumber(v) ? (uint32_t)v->valuedouble : 0;
    return 0;
}

int cmd_start_live(struct cmd_ctx *ctx, unsigned mode)
{
    const cJSON *args = ctx->req->args;
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(args, "source");
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = (enum source_mode)mode;
    if (parse_stacks(cJSON_GetObjectItemCaseSensitive(args, "stacks"), &p.stacks) != 0)
        return cmd_error(ctx, HT_EBADARG, "--stacks takes fp, dwarf or none");
    char err[512], choice[600] = "";
    /* --pid picks the agent where it can attach, eBPF otherwise, unless
     * --source says (builds with the agent; elsewhere the one source serving
     * pid). The reply and status say which and why. */
#ifdef HEAPTRACE_WITH_AGENT
    int autopick = mode == SOURCE_PID && (!want || strcmp(want->valuestring, "auto") == 0);
#else
    int autopick = want && mode == SOURCE_PID && strcmp(want->valuestring, "auto") == 0;
#endif
    if (autopick)
        want = NULL; /* chosen once the access is checked */
    const struct source_ops *ops =
        source_pick(mode, want ? want->valuestring : NULL, err, sizeof(err));
    if (!ops)
        return cmd_error(ctx, HT_ENOTSUP,
                         "%s is not supported by this build: %s (recorded "
                         "streams work: heaptracectl load FILE)",
                         mode_flag(mode), err);
    if (ops->available) {
        int rc = ops->available(err, sizeof(err));
        if (rc != 0)
            return cmd_error(ctx, rc, "source %s cannot trace here: %s", ops->name, err);
    }
    if (mode == SOURCE_IMAGE)
        p.launcher_uid = ctx->c->uid; /* whose the image's processes may be (a source's rule) */
    if (mode == SOURCE_LAUNCH) {
        p.launcher_uid = ctx->c->uid;
        p.follow = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "follow"));
        if (sample_args(args, &p) != 0)
            return cmd_error(ctx, HT_EBADARG, "--sample takes a size from 1 byte to 8 MiB");
        endpoint_peer_pid(&ctx->c->pipe, &p.launcher_pid);
    }
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(args, "pid");
    struct trace_who *who = NULL;
    int handle = -1;
    if (mode == SOURCE_PID && pid) {
        who = ht_malloc(sizeof(*who));
        if (!who)
            return cmd_error(ctx, HT_ENOMEM, "out of memory");
        p.pid = (uint64_t)pid->valuedouble;
        int prc = pid_access(ctx, p.pid, who, &handle, err, sizeof(err));
        if (prc != 0) {
            ht_free(who);
            return cmd_error(ctx, prc, "%s", err);
        }
    }
    if (autopick && (ops = pick_auto(p.pid, choice, sizeof(choice))) == NULL) {
        trace_access_close(handle);
        ht_free(who);
        return cmd_error(ctx, HT_ENOTSUP, "no source can attach to process %llu",
                         (unsigned long long)p.pid);
    }
    int rc = live_session(ctx, ops, &p, handle >= 0 ? who : NULL, handle, choice);
    trace_access_close(handle);
    ht_free(who);
    return rc;
}

int cmd_start(struct cmd_ctx *ctx)
{
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "pid");
    const cJSON *exe = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "exe");
    if (!pid == !exe)
        return cmd_error(ctx, HT_EBADARG, "start needs exactly one of --pid PID or --exe NAME");
    return cmd_start_live(ctx, pid ? SOURCE_PID : SOURCE_IMAGE);
}
