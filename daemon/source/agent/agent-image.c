/*
 * start --exe for the agent source (agent-source.c): the exec gate and the
 * connector's notice, each process of the image a session of its own (a kid).
 */
#define _GNU_SOURCE
#include "agent-src.h"

/* The exec gate's marks: the image's path when one was given (a lookup by
 * root's daemon for root's client, the only one --exe admits: the file is
 * never opened or read), else each file of that name in the standard
 * program directories. A path that cannot be watched is an error; a name
 * found nowhere there is not (the connector still sees it run, late). */
static int gate_open(struct agent_source *s, char *err, size_t errsz)
{
    static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                       "/usr/bin",        "/sbin",          "/bin"};
    s->gfd = execgate_open();
    if (s->gfd < 0) {
        int rc = s->gfd;
        s->gfd = -1;
        snprintf(err, errsz, "cannot open the exec gate (fanotify): %s", uv_strerror(rc));
        return rc;
    }
    if (!(s->marked = ht_calloc(GATE_MARKS, PATH_MAX))) {
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    if (strchr(s->image, '/')) {
        int rc = execgate_mark(s->gfd, s->image);
        if (rc) {
            snprintf(err, errsz, "cannot watch %s for execs: %s", s->image, uv_strerror(rc));
            return rc;
        }
        snprintf(s->marked[s->nmarked++], PATH_MAX, "%s", s->image);
        return 0;
    }
    /* One file under several names (/bin is /usr/bin on a merged /usr) is
     * listed once. */
    dev_t devs[GATE_MARKS];
    ino_t inos[GATE_MARKS];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && s->nmarked < GATE_MARKS; i++) {
        char path[PATH_MAX];
        struct stat st;
        unsigned k = 0;
        if (snprintf(path, sizeof(path), "%s/%s", dirs[i], s->image) >= (int)sizeof(path) ||
            stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        while (k < s->nmarked && !(devs[k] == st.st_dev && inos[k] == st.st_ino))
            k++;
        if (k < s->nmarked || execgate_mark(s->gfd, path) != 0)
            continue;
        devs[s->nmarked] = st.st_dev;
        inos[s->nmarked] = st.st_ino;
        snprintf(s->marked[s->nmarked++], PATH_MAX, "%s", path);
    }
    return 0;
}

/* start --exe: traces every user's processes of the image, so root's. */
int asrc_image_open(struct source **out, const struct source_ops *ops, uv_loop_t *loop,
                    const struct source_params *p, const struct source_sink *sink,
                    const char *agent_path, char *err, size_t errsz)
{
    if (p->launcher_uid != 0) {
        snprintf(err, errsz, "start --exe traces every user's processes of an image: root only");
        return HT_EPERM;
    }
    if (!p->image || !p->image[0] || strlen(p->image) >= PATH_MAX) {
        snprintf(err, errsz, "start --exe needs an image name or path");
        return HT_EBADARG;
    }
    struct agent_source *s = ht_calloc(1, sizeof(*s));
    if (!s || !(s->h = ht_calloc(1, sizeof(*s->h)))) {
        ht_free(s);
        snprintf(err, errsz, "out of memory");
        return UV_ENOMEM;
    }
    s->base.ops = ops;
    s->base.sink = *sink;
    s->loop = loop;
    s->lfd = s->cfd = s->handoff_fd = s->adopt_fd = s->pidfd = s->gfd = -1;
    s->image_mode = 1;
    s->stacks = p->stacks;
    s->depth = p->stack_depth;
    snprintf(s->image, sizeof(s->image), "%s", p->image);
    snprintf(s->agent_path, sizeof(s->agent_path), "%s", agent_path);
    uv_mutex_init(&s->qmu);
    mem_acct_init(&s->acct, p->budget);
    mem_acct_init(&s->sym_acct, p->budget);
    s->xfd = execwatch_open();
    if (s->xfd < 0) {
        int rc = s->xfd;
        snprintf(err, errsz, "cannot watch execs (the process events connector): %s",
                 uv_strerror(rc));
        s->xfd = -1;
        s->base.ops->close(&s->base);
        return rc;
    }
    int rc = gate_open(s, err, errsz);
    if (rc) {
        s->base.ops->close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}

/* Is pid's executable the image: the same path when one was given, else
 * the same file name. */
static int image_is(const struct agent_source *s, uint64_t pid)
{
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%llu/exe", (unsigned long long)pid);
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    if (strchr(s->image, '/'))
        return strcmp(exe, s->image) == 0;
    const char *b = strrchr(exe, '/');
    return strcmp(b ? b + 1 : exe, s->image) == 0;
}

/* A process of the image, its session made (sink.spawn); held: stopped by
 * inject_*, let go here when no session takes it. */
static void image_spawn(struct agent_source *s, uint64_t pid, int held)
{
    char err[512];
    if (s->base.sink.spawn && s->base.sink.spawn(s->base.sink.arg, pid, err, sizeof(err)) == 0) {
        s->spawned++;
        return;
    }
    s->refused_spawn++;
    if (held)
        inject_unhold(pid);
}

static int gate_took(const struct agent_source *s, uint64_t pid)
{
    for (unsigned i = 0; i < s->ngated && i < GATE_RECENT; i++)
        if (s->gated[i] == pid)
            return 1;
    return 0;
}

void asrc_exec_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    uint64_t pids[256];
    (void)events;
    int n = status < 0 ? 0 : execwatch_read(s->xfd, pids, 256, &s->exec_lost);
    for (int i = 0; i < n && !s->stopped; i++) {
        if (gate_took(s, pids[i]))
            continue; /* the gate's, and already a session */
        s->execs_seen++;
        if (!image_is(s, pids[i]) || !s->base.sink.spawn)
            continue;
        /* Stopped first, while the loader may still be at work: its
         * session's source takes it at the entry point. */
        image_spawn(s, pids[i], inject_hold(pids[i]) == 0);
    }
}

/* Execs of the image waiting at the gate: each process seized, the exec let
 * go on, its end waited for (a few ms: the loop is held that long, as by an
 * attach), then its session made with the process still before its first
 * instruction. Every event is answered, whatever happens to its process. */
void asrc_gate_cb(uv_poll_t *p, int status, int events)
{
    struct agent_source *s = p->data;
    struct execgate_ev evs[32];
    (void)events;
    int n = status < 0 ? 0 : execgate_read(s->gfd, evs, 32, &s->gate_lost);
    for (int i = 0; i < n; i++) {
        uint64_t pid = evs[i].pid;
        int seized = !s->stopped && pid && inject_exec_seize(pid) == 0;
        execgate_answer(s->gfd, &evs[i]);
        if (!seized || inject_exec_wait(pid) != 0) {
            s->gate_missed++;
            continue;
        }
        s->execs_seen++;
        s->gate_taken++;
        s->gated[s->ngated++ % GATE_RECENT] = pid;
        image_spawn(s, pid, 1);
    }
}

/* A process of the image whose session the image's stop ends: its agent
 * told (the connection shut), what it wrote drained, then ended. */
void asrc_kid_end(struct agent_source *k)
{
    k->image_src = NULL;
    if (k->eof || k->stopped)
        return;
    if (k->connected && k->h && k->h->cpoll) {
        uv_poll_stop(k->h->cpoll);
        shutdown(k->cfd, SHUT_RDWR);
        k->eof_end = k->dec.tail + agent_dec_pending(&k->dec);
    }
    k->eof = 1;
    snprintf(k->end_reason, sizeof(k->end_reason), "the start --exe session stopped");
    asrc_say_ready(k);
}

/* A kid leaving: out of its image source's list. */
void asrc_kids_forget(struct agent_source *s)
{
    struct agent_source *img = s->image_src;
    for (unsigned i = 0; img && i < img->nkids; i++)
        if (img->kids[i] == s) {
            img->kids[i] = img->kids[--img->nkids];
            break;
        }
    s->image_src = NULL;
}
