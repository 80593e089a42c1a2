/* The session's side of the source interface with a live source made for
 * the test (a producer thread over the event ring, as the eBPF consumer
 * will be): it ends with the target's exit, stop detaches and keeps the
 * data, drop closes, a failing open leaves nothing, frames are symbolized
 * through the source, and the source's lost events show in data quality. */
#include "commands.h"
#include "session-int.h" /* the test reads the session's fields */
#include "server.h"
#include "evring.h"
#include "frame-match.h"
#include "ht-error.h"
#include "ht-test.h"
#include "query-args.h"
#include "query-job.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdlib.h>
#ifdef _WIN32
/* The CRT's environment, which getenv reads (SetEnvironmentVariable is not seen by it). */
#define setenv(name, value, overwrite) _putenv_s(name, value)
#define unsetenv(name) _putenv_s(name, "")
#endif

struct fake {
    struct source base;
    struct evring *ring;
    uv_thread_t thread;
    int started;
    int endless; /* keep producing until told to quit */
    int ended;
};

static int n_stops, n_closes, fail_open;
static struct source_params last_open; /* what the last open was given */
static const struct source_ops fake_ops;

static void fake_ready(void *data)
{
    struct fake *f = data;
    f->base.sink.ready(f->base.sink.arg);
}

static void producer(void *arg)
{
    struct fake *f = arg;
    struct stack_intern *si = evring_si(f->ring);
    evring_process(f->ring, 4242, "fakeapp", "");
    struct ht_event ev = {.t = 1, .kind = HT_EV_PROCESS, .size = 4242};
    evring_put(f->ring, &ev);
    const char *path = "/opt/fake.so";
    ev = (struct ht_event){.t = 2, .kind = HT_EV_MODULE_LOAD, .addr = 0x7000, .size = 0x1000};
    ev.heap = stack_intern_str(si, path, (unsigned)strlen(path));
    evring_put(f->ring, &ev);
    for (uint64_t i = 0; f->endless || i < 1000; i++) {
        uint64_t fr[2] = {0x7000 + 16 * (i % 7), 0x7800};
        ev = (struct ht_event){.t = 3 + i,
                               .kind = HT_EV_ALLOC,
                               .addr = 0x100000 + 16 * i,
                               .size = 8,
                               .stack = stack_intern_get(si, fr, 2)};
        if (evring_put(f->ring, &ev) != 0)
            return; /* told to quit */
    }
    ev = (struct ht_event){.t = 5000, .kind = HT_EV_EXIT, .size = 3};
    evring_put(f->ring, &ev);
    evring_done(f->ring);
}

static int fake_open(struct source **out, uv_loop_t *loop, const struct source_params *p,
                     const struct source_sink *sink, char *err, size_t errsz)
{
    *out = NULL;
    last_open = *p;
    if (fail_open) {
        snprintf(err, errsz, "fake: no such process %llu", (unsigned long long)p->pid);
        return HT_EPERM;
    }
    struct fake *f = calloc(1, sizeof(*f));
    f->base.ops = &fake_ops;
    f->base.sink = *sink;
    f->endless = p->pid == 2;
    struct evring_limits lim = {1024, p->max_stacks, p->max_strings, p->max_name_len, p->budget};
    if (evring_new(&f->ring, loop, &lim, fake_ready, f) != 0)
        abort();
    *out = &f->base;
    return 0;
}

static int fake_start(struct source *s, char *err, size_t errsz)
{
    struct fake *f = (struct fake *)s;
    (void)err;
    (void)errsz;
    f->started = uv_thread_create(&f->thread, producer, f) == 0;
    return f->started ? 0 : UV_EAGAIN;
}

static int fake_drain(struct source *s, size_t budget)
{
    struct fake *f = (struct fake *)s;
    int rc = evring_drain(f->ring, &f->base.sink, budget);
    if (rc == 0 && !f->ended && evring_finished(f->ring)) {
        f->ended = 1;
        f->base.sink.ended(f->base.sink.arg, "target exited (code 3)");
    }
    return rc;
}

static void fake_stop(struct source *s)
{
    struct fake *f = (struct fake *)s;
    n_stops++;
    evring_quit(f->ring);
    if (f->started)
        uv_thread_join(&f->thread);
    f->started = 0;
}

static void fake_close(struct source *s)
{
    struct fake *f = (struct fake *)s;
    n_closes++;
    fake_stop(s);
    evring_free(f->ring);
    free(f);
}

static void fake_stats(struct source *s, struct source_stats *st)
{
    struct fake *f = (struct fake *)s;
    memset(st, 0, sizeof(*st));
    evring_producer_stats(f->ring, st);
    st->lost = 5;
}

static const char *fake_symbolize(struct source *s, uint64_t addr, char *buf, size_t bufsz)
{
    (void)s;
    if (addr < 0x7000 || addr >= 0x8000)
        return NULL;
    snprintf(buf, bufsz, "fake.so!fn_%llx", (unsigned long long)(addr - 0x7000));
    return buf;
}

/* A raw tap (record --raw): on or off, and a join that hands what waits to
 * the subscribers first (one line), as the ETW sources do. */
static int tap_on, tap_ons;

static int fake_raw_tap(struct source *s, int on, char *err, size_t errsz)
{
    (void)s, (void)err, (void)errsz;
    tap_on = on;
    tap_ons += on;
    return 0;
}

static size_t fake_raw_join(struct source *s, char *buf, size_t cap)
{
    if (!tap_on)
        return 0;
    s->sink.raw(s->sink.arg, "{\"waiting\":1}\n", 14, 1, 0);
    if (!tap_on || cap < 10)
        return 0;
    memcpy(buf, "{\"hdr\":1}\n", 10);
    return 10;
}

static const struct source_ops fake_ops = {
    .name = "fake",
    .modes = SOURCE_PID,
    .summary = "test source",
    .open = fake_open,
    .start = fake_start,
    .drain = fake_drain,
    .stop = fake_stop,
    .close = fake_close,
    .stats = fake_stats,
    .symbolize = fake_symbolize,
    .raw_tap = fake_raw_tap,
    .raw_join = fake_raw_join,
};

static uv_loop_t loop;
static struct ht_config cfg;
static struct server srv;

/* Jobs answered (query-job.h), in order, with what they got. */
static int n_done, last_rc, done_order[64];
static cJSON *last_top;

static void top_done(struct qjob *j)
{
    if (n_done < 64)
        done_order[n_done] = (int)(intptr_t)j->arg;
    n_done++;
    last_rc = j->rc;
    cJSON_Delete(last_top);
    last_top = j->rc == 0 && !j->s->dropped ? session_top_result(j, 0) : NULL;
}

/* A whole-session top query on the workers: 0 or the submit's error. */
static int top_submit(struct session *s, int tag)
{
    struct qjob *j = session_top_job(s, HT_DOM_HEAP, 5, "test");
    if (!j)
        abort();
    j->arg = (void *)(intptr_t)tag;
    j->done = top_done;
    int rc = session_query_submit(j);
    if (rc != 0)
        qjob_free(j);
    return rc;
}

/* Run the loop until n jobs were answered (or a bound of iterations). */
static void wait_done(int n)
{
    for (int i = 0; i < 1000000 && n_done < n; i++)
        uv_run(&loop, UV_RUN_ONCE);
}

static struct session *up(uint64_t pid, int *rc, char *err, size_t errsz)
{
    n_stops = n_closes = 0;
    uv_loop_init(&loop);
    config_defaults(&cfg);
    server_init(&srv, &loop, &cfg);
    struct session *s = session_new(&srv.sessions, "live", "fake", err, errsz);
    if (!s)
        abort();
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_PID;
    p.pid = pid;
    s->state = SESSION_RUNNING;
    *rc = session_source_begin(s, &fake_ops, &p, err, errsz);
    return s;
}

/* Everything closed: no handle outlives the server. */
static int down(void)
{
    server_stop(&srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&loop);
    config_free(&cfg);
    return rc;
}

static void test_live_ends_with_exit(void)
{
    char err[256];
    int rc;
    struct session *s = up(1, &rc, err, sizeof(err));
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 100000 && s->state == SESSION_RUNNING; i++)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK_EQ(s->state, SESSION_ENDED);
    CHECK_STR(s->stop_reason, "target exited (code 3)");
    CHECK_EQ(s->eng.heap_count, 1000);
    CHECK(s->eng.exited && s->eng.exit_code == 3);
    CHECK_EQ(s->eng.pid, 4242);
    CHECK_STR(s->process_name, "fakeapp");
    CHECK_EQ(s->eng.modules.n, 1);
    CHECK_STR(stack_intern_strget(&s->eng.si, s->eng.modules.v[0].path), "/opt/fake.so");
    CHECK_EQ(n_stops, 1); /* stopped once at the end, kept for its symbols */
    CHECK_EQ(n_closes, 0);
    CHECK(s->src != NULL);
    /* Address frames come back named by the source, in queries too. */
    char buf[FRAME_TEXT_MAX];
    CHECK_STR(frame_text(&s->eng.si, 0x7010, buf, sizeof(buf)), "fake.so!fn_10");
    CHECK_STR(frame_text(&s->eng.si, 0x9000, buf, sizeof(buf)), "0x9000");
    n_done = 0;
    CHECK_EQ(top_submit(s, 1), 0);
    wait_done(1);
    CHECK_EQ(n_done, 1);
    CHECK_EQ(last_rc, 0);
    char *txt = cJSON_PrintUnformatted(last_top);
    CHECK(txt && strstr(txt, "fake.so!fn_") != NULL);
    free(txt);
    cJSON_Delete(last_top);
    last_top = NULL;
    /* The source's own lost events are in data quality. */
    cJSON *q = session_quality_json(s);
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(q, "lost")->valuedouble, 5);
    cJSON_Delete(q);
    session_drop(s);
    CHECK_EQ(n_closes, 1);
    CHECK_EQ(down(), 0);
}

static void test_stop_detaches_keeps_data(void)
{
    char err[256];
    int rc;
    struct session *s = up(2, &rc, err, sizeof(err)); /* endless producer */
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 100000 && s->eng.heap_count < 5000; i++)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(s->eng.heap_count >= 5000);
    session_stop(s, "stopped by request");
    CHECK_EQ(n_stops, 1); /* detached at once */
    uint64_t kept = s->eng.heap_count;
    for (int i = 0; i < 10; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_EQ(s->state, SESSION_STOPPED);
    CHECK_EQ(s->eng.heap_count, kept); /* nothing applied after the stop */
    CHECK(s->src_over);
    CHECK_EQ(n_closes, 0);
    CHECK_EQ(down(), 0); /* the daemon's exit drops it: closed */
    CHECK_EQ(n_closes, 1);
}

static void test_open_fails_leaves_nothing(void)
{
    char err[256];
    int rc;
    fail_open = 1;
    struct session *s = up(99, &rc, err, sizeof(err));
    fail_open = 0;
    CHECK_EQ(rc, HT_EPERM);
    CHECK_STR(err, "fake: no such process 99");
    CHECK(s->src == NULL);
    session_drop(s);
    CHECK_EQ(srv.sessions.n, 0);
    CHECK_EQ(down(), 0);
}

/* A query runs on a worker while the loop goes on applying the live
 * source's events (HEAPTRACED_TEST_QUERY_DELAY_MS makes it last). */
static void test_query_off_loop(void)
{
    char err[256];
    int rc;
    setenv("HEAPTRACED_TEST_QUERY_DELAY_MS", "300", 1);
    struct session *s = up(2, &rc, err, sizeof(err)); /* endless producer */
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 100000 && s->eng.heap_count < 1000; i++)
        uv_run(&loop, UV_RUN_ONCE);
    n_done = 0;
    CHECK_EQ(top_submit(s, 1), 0);
    CHECK(s->q_running != NULL);
    uint64_t before = s->eng.heap_count;
    for (int i = 0; i < 1000000 && n_done == 0 && s->eng.heap_count < before + 5000; i++)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK_EQ(n_done, 0);                           /* still running... */
    CHECK(s->eng.heap_count >= before + 5000);     /* ... while events are applied */
    wait_done(1);
    CHECK_EQ(n_done, 1);
    CHECK_EQ(last_rc, 0);
    CHECK(last_top != NULL);
    CHECK_EQ(s->qs.run, 1);
    CHECK(s->qs.worker_max_ns >= 300000000ULL);
    cJSON_Delete(last_top);
    last_top = NULL;
    CHECK_EQ(down(), 0);
    unsetenv("HEAPTRACED_TEST_QUERY_DELAY_MS");
}

/* Dropped while its query runs: waiting queries are answered ENOSESSION at
 * once, the source stays open for the worker's frame names until the query
 * returns, then everything is freed (ASan: nothing used after free, no leak). */
static void test_drop_while_query_runs(void)
{
    char err[256];
    int rc;
    setenv("HEAPTRACED_TEST_QUERY_DELAY_MS", "200", 1);
    struct session *s = up(2, &rc, err, sizeof(err));
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 100000 && s->eng.heap_count < 1000; i++)
        uv_run(&loop, UV_RUN_ONCE);
    n_done = 0;
    CHECK_EQ(top_submit(s, 1), 0);
    CHECK_EQ(top_submit(s, 2), 0); /* waits behind the first */
    CHECK_EQ(s->q_waiting, 1);
    session_drop(s);
    CHECK_EQ(srv.sessions.n, 0);
    CHECK_EQ(n_done, 1); /* the waiting one, at once */
    CHECK_EQ(done_order[0], 2);
    CHECK_EQ(last_rc, HT_ENOSESSION);
    CHECK_EQ(n_stops, 1);  /* the source stopped producing... */
    CHECK_EQ(n_closes, 0); /* ... but is kept for the running query */
    wait_done(2);
    CHECK_EQ(n_done, 2);
    CHECK_EQ(done_order[1], 1);
    CHECK_EQ(last_rc, HT_ENOSESSION);
    CHECK_EQ(n_closes, 1); /* freed once the query returned */
    CHECK_EQ(down(), 0);
    unsetenv("HEAPTRACED_TEST_QUERY_DELAY_MS");
}

/* Past max_queued_queries waiting queries one more is refused (HT_EFULL,
 * counted); snapshots' jobs (urgent) are never refused and go first. */
static void test_queue_full(void)
{
    char err[256];
    int rc;
    setenv("HEAPTRACED_TEST_QUERY_DELAY_MS", "100", 1);
    struct session *s = up(1, &rc, err, sizeof(err));
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 100000 && s->state == SESSION_RUNNING; i++)
        uv_run(&loop, UV_RUN_ONCE);
    cfg.max_queued_queries = 2;
    n_done = 0;
    CHECK_EQ(top_submit(s, 1), 0); /* runs */
    CHECK_EQ(top_submit(s, 2), 0); /* waits */
    CHECK_EQ(top_submit(s, 3), 0); /* waits */
    CHECK_EQ(top_submit(s, 4), HT_EFULL);
    CHECK_EQ(s->qs.rejected, 1);
    struct qjob *j = session_top_job(s, HT_DOM_HEAP, 5, "test");
    j->arg = (void *)(intptr_t)5;
    j->done = top_done;
    j->urgent = 1;
    CHECK_EQ(session_query_submit(j), 0);
    wait_done(4);
    CHECK_EQ(n_done, 4);
    CHECK_EQ(done_order[0], 1);
    CHECK_EQ(done_order[1], 5); /* ahead of the waiting ones */
    CHECK_EQ(done_order[2], 2);
    CHECK_EQ(done_order[3], 3);
    CHECK_EQ(s->qs.run, 4);
    cJSON_Delete(last_top);
    last_top = NULL;
    session_drop(s);
    CHECK_EQ(down(), 0);
    unsetenv("HEAPTRACED_TEST_QUERY_DELAY_MS");
}


/* A source serving an image asks for a session per later process
 * (sink.spawn): "<name>.<pid>", the parent's parameters, mode pid, the
 * parent source; refused with why when the name is taken, the sessions are
 * all taken, or the parent is stopped, and counted. */
static void test_spawn(void)
{
    char err[256];
    n_stops = n_closes = 0;
    uv_loop_init(&loop);
    config_defaults(&cfg);
    cfg.max_sessions = 3;
    server_init(&srv, &loop, &cfg);
    struct session *s = session_new(&srv.sessions, "app", "fake", err, sizeof(err));
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_IMAGE;
    p.image = "app.exe";
    p.stacks = SOURCE_STACKS_NONE;
    p.stack_depth = 33;
    p.sample_ns = 123456789;
    p.pid = 2; /* the fake's endless producer */
    s->state = SESSION_RUNNING;
    CHECK_EQ(session_source_begin(s, &fake_ops, &p, err, sizeof(err)), 0);
    struct source *parent = s->src;
    CHECK_EQ(parent->sink.spawn(parent->sink.arg, 77, err, sizeof(err)), 0);
    CHECK_EQ(srv.sessions.n, 2);
    CHECK_EQ(last_open.mode, SOURCE_PID);
    CHECK_EQ(last_open.pid, 77);
    CHECK(last_open.parent == parent);
    CHECK(last_open.image == NULL);
    CHECK_EQ(last_open.stacks, SOURCE_STACKS_NONE);
    CHECK_EQ(last_open.stack_depth, 33);
    CHECK_EQ(last_open.sample_ns, 123456789);
    CHECK(last_open.budget != NULL && last_open.budget != p.budget);
    struct session *c = srv.sessions.head; /* the newest first */
    CHECK_STR(c->name, "app.77");
    CHECK_EQ(c->state, SESSION_RUNNING);
    CHECK(c->src != NULL);
    CHECK_EQ(s->spawned, 1);
    /* The same name again: refused, counted. */
    CHECK(parent->sink.spawn(parent->sink.arg, 77, err, sizeof(err)) != 0);
    CHECK(strstr(err, "exists") != NULL);
    CHECK_EQ(s->spawn_failed, 1);
    /* The last slot, then none. */
    CHECK_EQ(parent->sink.spawn(parent->sink.arg, 78, err, sizeof(err)), 0);
    CHECK_EQ(parent->sink.spawn(parent->sink.arg, 79, err, sizeof(err)), HT_EFULL);
    CHECK_EQ(s->spawn_failed, 2);
    CHECK_EQ(srv.sessions.n, 3);
    /* A failing open leaves no session behind. */
    fail_open = 1;
    session_drop(srv.sessions.head); /* app.78: a slot again */
    CHECK(parent->sink.spawn(parent->sink.arg, 80, err, sizeof(err)) != 0);
    fail_open = 0;
    CHECK_EQ(srv.sessions.n, 2);
    CHECK_EQ(s->spawn_failed, 3);
    /* A stopped parent spawns nothing. */
    session_stop(s, "stopped by request");
    CHECK_EQ(parent->sink.spawn(parent->sink.arg, 81, err, sizeof(err)), HT_ESTATE);
    CHECK_EQ(srv.sessions.n, 2);
    CHECK_EQ(down(), 0);
}

/* Raw subscribers: the first turns the tap on and gets no header to send
 * (the tap puts it); a later one gets the header. When the lines handed to
 * the others at its join close the last of them (a send that fails at once
 * closes its client, which unsubscribes), the tap went off: it is turned on
 * again for the newcomer, which would otherwise wait for lines forever. */
static int raw_lines;

static void sub_raw_closes(struct session_sub *sub, const char *buf, size_t n, uint64_t lines,
                           uint64_t lost)
{
    (void)buf, (void)n, (void)lost;
    raw_lines += (int)lines;
    session_unsubscribe(sub); /* its client's write failed */
}

static void sub_raw_keeps(struct session_sub *sub, const char *buf, size_t n, uint64_t lines,
                          uint64_t lost)
{
    (void)sub, (void)buf, (void)n, (void)lost;
    raw_lines += (int)lines;
}

static void sub_ended(struct session_sub *sub, const char *why)
{
    (void)why;
    sub->s = NULL;
}

static void test_raw_join_last_closes(void)
{
    char err[256], hdr[64];
    int rc;
    size_t hn = 99;
    tap_on = tap_ons = raw_lines = 0;
    struct session *s = up(1, &rc, err, sizeof(err));
    CHECK_EQ(rc, 0);
    static const struct session_sub_ops closes = {NULL, sub_ended, sub_raw_closes};
    static const struct session_sub_ops keeps = {NULL, sub_ended, sub_raw_keeps};
    struct session_sub a = {&closes, NULL, NULL}, b = {&keeps, NULL, NULL},
                       c = {&keeps, NULL, NULL};
    CHECK_EQ(session_subscribe_raw(s, &b, hdr, sizeof(hdr), &hn, err, sizeof(err)), 0);
    CHECK_EQ(hn, 0);
    CHECK_EQ(tap_ons, 1);
    CHECK_EQ(session_subscribe_raw(s, &c, hdr, sizeof(hdr), &hn, err, sizeof(err)), 0);
    CHECK_EQ(hn, 10); /* the header for the newcomer */
    CHECK_EQ(raw_lines, 1); /* what waited went to b only */
    session_unsubscribe(&b);
    session_unsubscribe(&c);
    CHECK_EQ(tap_on, 0);
    /* a alone, then d joins and the flush closes a: the tap goes on again. */
    CHECK_EQ(session_subscribe_raw(s, &a, hdr, sizeof(hdr), &hn, err, sizeof(err)), 0);
    CHECK_EQ(tap_ons, 2);
    struct session_sub d = {&keeps, NULL, NULL};
    CHECK_EQ(session_subscribe_raw(s, &d, hdr, sizeof(hdr), &hn, err, sizeof(err)), 0);
    CHECK(a.s == NULL);
    CHECK(tap_on);
    CHECK_EQ(tap_ons, 3);
    CHECK_EQ(hn, 0); /* the tap opens with the header itself */
    session_unsubscribe(&d);
    CHECK_EQ(tap_on, 0);
    session_drop(s);
    CHECK_EQ(down(), 0);
}

HT_TEST_MAIN(T(spawn), T(live_ends_with_exit), T(stop_detaches_keeps_data), T(open_fails_leaves_nothing),
             T(query_off_loop), T(drop_while_query_runs), T(queue_full), T(raw_join_last_closes))
