/*
 * Fuzz target: whole requests through the daemon's own client path. A real
 * server struct runs on a private uv loop with a session holding the demo
 * stream (tests/data/memorytestapp.htev, loaded once per process). Each input
 * is the bytes one client sends: request lines, and after a load its chunked
 * stream. They go down a socketpair into the client's pipe, read by the
 * server's own read callback (client_feed, dispatch_request, the handlers,
 * load framing, the feed thread), while the replies are read back: each
 * line must be a reply of the protocol.
 *
 * Per input: the input is written and read to its end (the loop waits only
 * on the feed's thread, never on a clock), the client disconnects, every
 * load drains, the triggers get a tick, and sessions made by the input are
 * dropped. What a request may change for good (a mark or a drop of the demo
 * session, a shutdown) rebuilds the server, so inputs do not depend on each
 * other.
 */
#include "config.h"
#include "ht-alloc.h"
#include "log.h"
#include "replay.h"
#include "commands.h"
#include "session-int.h" /* the test reads the session's fields */
#include "server.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef HT_FUZZ_DEMO
#error "HT_FUZZ_DEMO (the demo stream's path) is set by tests/fuzz/CMakeLists.txt"
#endif

/* Loop turns one input may take; far more than any seed needs. A request
 * that keeps the loop busy past this is cut short, not reported. */
#define TURNS_MAX 4096

struct world {
    uv_loop_t loop;
    struct ht_config cfg;
    struct server srv;
    struct session *demo;
    uint32_t demo_marks;
    uint32_t demo_next_id;
    int up;
};

static struct world w;

/* The demo stream, read once per process. */
static char *demo_bytes;
static size_t demo_len;

static void demo_read(void)
{
    FILE *f = fopen(HT_FUZZ_DEMO, "rb");
    if (!f) {
        perror(HT_FUZZ_DEMO);
        abort();
    }
    size_t cap = 1u << 20;
    demo_bytes = malloc(cap);
    if (!demo_bytes)
        abort();
    demo_len = fread(demo_bytes, 1, cap, f);
    fclose(f);
}

/* Replayed into the session the way a load applies it: batches through
 * session_apply, the process line through session_process. */
struct demo_loader {
    struct session *s;
    struct replay rp;
    struct ht_event batch[SESSION_BATCH];
    size_t n;
};

static void demo_flush(struct demo_loader *dl)
{
    if (dl->n)
        session_apply(dl->s, dl->batch, dl->n);
    dl->n = 0;
}

static void demo_event(void *arg, const struct ht_event *ev)
{
    struct demo_loader *dl = arg;
    if (ev->kind == HT_EV_PROCESS) {
        struct source_process p = {ev->size, dl->rp.parser.name, dl->rp.parser.wall};
        session_process(dl->s, &p);
    }
    dl->batch[dl->n++] = *ev;
    if (dl->n == SESSION_BATCH)
        demo_flush(dl);
}

static struct session *demo_session(struct server *srv)
{
    char err[256];
    struct session *s = session_new(&srv->sessions, "demo", "replay", err, sizeof(err));
    struct demo_loader *dl = calloc(1, sizeof(*dl));
    if (!s || !dl || replay_init(&dl->rp, &s->eng.si, demo_event, dl) != 0)
        abort();
    dl->s = s;
    replay_feed(&dl->rp, demo_bytes, demo_len);
    replay_finish(&dl->rp);
    demo_flush(dl);
    replay_close(&dl->rp);
    free(dl);
    session_warm(s);
    s->state = SESSION_ENDED;
    snprintf(s->stop_reason, sizeof(s->stop_reason), "end of stream");
    return s;
}

/* The server as server_init leaves it: no endpoint (clients come
 * in over socketpairs) and with its timers stopped (no clock in a fuzz run;
 * the tick's trigger check is called by hand). */
static void world_up(void)
{
    memset(&w, 0, sizeof(w));
    if (uv_loop_init(&w.loop) != 0)
        abort();
    config_defaults(&w.cfg);
    struct server *srv = &w.srv;
    server_init(srv, &w.loop, &w.cfg);
    w.demo = demo_session(srv);
    w.demo_marks = w.demo->eng.nmarks;
    w.demo_next_id = srv->sessions.next_id;
    w.up = 1;
}

static void world_down(void)
{
    server_stop(&w.srv);             /* no-op when a shutdown request stopped it */
    uv_run(&w.loop, UV_RUN_DEFAULT); /* close callbacks, shutdown's timer */
    if (uv_loop_close(&w.loop) != 0) {
        fprintf(stderr, "fuzz-dispatch: a handle outlived the server\n");
        abort();
    }
    config_free(&w.cfg);
    w.up = 0;
}

static int session_alive(const struct session *s)
{
    for (const struct session *o = w.srv.sessions.head; o; o = o->next)
        if (o == s)
            return 1;
    return 0;
}

static int client_alive(const struct client *c)
{
    for (const struct client *o = w.srv.clients; o; o = o->next)
        if (o == c)
            return 1;
    return 0;
}

static int any_feed(void)
{
    for (const struct session *s = w.srv.sessions.head; s; s = s->next)
        if (s->src && !s->src_over)
            return 1;
    return 0;
}

/* A handle still open that belongs to no client and no session: the timer a
 * shutdown request starts. */
static void count_foreign(uv_handle_t *h, void *arg)
{
    struct server *srv = &w.srv;
    if (uv_is_closing(h) || h == (uv_handle_t *)&srv->tick || h == (uv_handle_t *)&srv->idle)
        return;
    for (const struct session *s = srv->sessions.head; s; s = s->next)
        if (h == (uv_handle_t *)s->drain_idle)
            return; /* a session's drain scheduler, closed with it */
    (*(int *)arg)++;
}

/* A client as the server makes one, on our end of a socketpair. */
static struct client *client_open(int fd)
{
    struct client *c = client_new(&w.srv);
    if (!c || uv_pipe_open(&c->pipe, fd) != 0)
        abort();
    client_start(c); /* reading with the server's own callbacks */
    return c;
}

/* Every reply line must be a JSON object of the protocol: {"v":1,"id":N,
 * "ok":true,...} or {"v":1,"id":N,"ok":false,"err":"E...","msg":"..."}. A
 * line longer than REPLY_CHECK_MAX is not checked. */
#define REPLY_CHECK_MAX (32u << 20)

static char *reply_line;
static size_t reply_len;
static int reply_skip; /* inside a line too long to check */

static void reply_check(const char *line, size_t len)
{
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "ok");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    int good = cJSON_IsObject(o) && cJSON_IsNumber(v) && v->valuedouble == HT_PROTO_VERSION &&
               cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "id")) && cJSON_IsBool(ok) &&
               (cJSON_IsTrue(ok) || (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "err")) &&
                                     cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "msg"))));
    cJSON_Delete(o);
    if (!good) {
        fprintf(stderr, "fuzz-dispatch: not a protocol reply: %.*s\n", (int)(len < 400 ? len : 400),
                line);
        abort();
    }
}

static void reply_bytes(const char *buf, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) + 1 : n;
        if (!reply_skip && reply_len + take > REPLY_CHECK_MAX)
            reply_skip = 1;
        if (!reply_skip) {
            memcpy(reply_line + reply_len, buf, take);
            reply_len += take;
        }
        if (nl) {
            if (!reply_skip)
                reply_check(reply_line, reply_len - 1);
            reply_len = 0;
            reply_skip = 0;
        }
        buf += take;
        n -= take;
    }
}

/* HT_FUZZ_ECHO=1 also shows the replies on stderr (to check that a seed
 * does what it should). */
static void drain_replies(int fd)
{
    static int echo = -1;
    if (echo < 0)
        echo = getenv("HT_FUZZ_ECHO") != NULL;
    char buf[65536];
    ssize_t k;
    while ((k = read(fd, buf, sizeof(buf))) > 0) {
        if (echo)
            fwrite(buf, 1, (size_t)k, stderr);
        reply_bytes(buf, (size_t)k);
    }
}

static size_t unread_bytes(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? (size_t)n : 0;
}

/* Write the input and turn the loop until the server read all of it: a
 * paused loader waits on its feed's thread, which wakes the loop. */
static void run_input(struct client *c, int us, int them, const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (int turn = 0; turn < TURNS_MAX && client_alive(c); turn++) {
        while (off < size) {
            ssize_t k = write(them, data + off, size - off);
            if (k <= 0)
                break;
            off += (size_t)k;
        }
        drain_replies(them);
        int waiting = c->paused && any_feed();
        if (off == size && !waiting && unread_bytes(us) == 0)
            break;
        uv_run(&w.loop, waiting ? UV_RUN_ONCE : UV_RUN_NOWAIT);
    }
}

/* A top subscription's first frame is due at once; a short interval (at
 * most TOP_WAIT_MS) gets TOP_FRAMES more, each waited for. */
#define TOP_FRAMES 2
#define TOP_WAIT_MS 20

static void top_frames(struct client *c, int them)
{
    uv_run(&w.loop, UV_RUN_NOWAIT);
    for (int i = 0; i < TOP_FRAMES; i++) {
        if (!client_alive(c) || !c->topping || uv_timer_get_due_in(&c->timer) > TOP_WAIT_MS)
            return;
        uint64_t seq = c->top_seq;
        for (int turn = 0; turn < 64 && client_alive(c) && c->topping && c->top_seq == seq;
             turn++) {
            drain_replies(them);
            uv_run(&w.loop, UV_RUN_ONCE);
        }
    }
}

/* Every load ends (its client is gone), is applied, and gets a tick. */
static void settle(int them)
{
    for (int turn = 0; turn < TURNS_MAX && any_feed(); turn++) {
        drain_replies(them);
        uv_run(&w.loop, UV_RUN_ONCE);
    }
    for (struct session *s = w.srv.sessions.head; s; s = s->next)
        session_check_triggers(s);
    uv_run(&w.loop, UV_RUN_NOWAIT); /* close callbacks */
}

static int world_dirty(void)
{
    int foreign = 0;
    uv_walk(&w.loop, count_foreign, &foreign);
    return w.srv.stopping || foreign || !session_alive(w.demo) ||
           w.demo->eng.nmarks != w.demo_marks || w.demo->state != SESSION_ENDED;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!demo_bytes) {
        log_open(-1, NULL); /* below LOG_ERROR: the log stays quiet */
        demo_read();
        reply_line = malloc(REPLY_CHECK_MAX);
        if (!reply_line)
            abort();
    }
    if (!w.up)
        world_up();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || fcntl(sv[1], F_SETFL, O_NONBLOCK) != 0)
        abort();
    struct client *c = client_open(sv[0]);
    run_input(c, sv[0], sv[1], data, size);
    top_frames(c, sv[1]);
    if (client_alive(c))
        client_close(c);
    settle(sv[1]);
    drain_replies(sv[1]);
    close(sv[1]);
    /* A reply cut short by the close is not checked. */
    reply_len = 0;
    reply_skip = 0;
    /* Sessions the input made go; the demo session stays unless it changed. */
    for (struct session *s = w.srv.sessions.head, *next; s; s = next) {
        next = s->next;
        if (s != w.demo)
            session_drop(s);
    }
    uv_run(&w.loop, UV_RUN_NOWAIT);
    /* The next input's sessions get the same ids (2, 3, ...). */
    w.srv.sessions.next_id = w.demo_next_id;
    w.srv.next_client_id = 0;
    if (world_dirty())
        world_down();
    return 0;
}

/* LeakSanitizer runs at exit: the server goes first. */
__attribute__((destructor)) static void world_exit(void)
{
    if (w.up)
        world_down();
    free(demo_bytes);
    demo_bytes = NULL;
    free(reply_line);
    reply_line = NULL;
}
