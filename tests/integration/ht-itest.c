/*
 * The integration cases that run the same on Linux and on Windows (under
 * wine in CI): the real heaptraced on a private endpoint (a Unix socket in a
 * temporary directory; \\.\pipe\ht-test-PID-N on Windows) and the real
 * heaptracectl, started with libuv (uv_spawn). The bash suite (run.sh,
 * cases-*.sh) covers much more on Unix; these cases are the part Windows must
 * pass too. What differs by platform (the endpoint's name, starting a server
 * as an untrusted account, sending Ctrl-C, a shell's redirection) is in
 * ht-itest-unix.c and ht-itest-win.c (ht-itest.h).
 * usage: ht-itest [CASE]   (CTest runs one case per test: ht-itest.CASE)
 *        ht-itest --serve ENDPOINT DIR   the untrusted server of untrusted_server
 */
#include "ht-itest.h"
#include "ht-test.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#ifdef _WIN32
#include <windows.h> /* the ETW case reads the registry */
#endif

#ifndef HT_ITEST_DAEMON
#error "HT_ITEST_DAEMON (the heaptraced to run) is set by tests/integration/CMakeLists.txt"
#endif

uv_loop_t *loop;
char tmpdir[1024];          /* the case's own directory */
static char endpoint[1100]; /* the daemon's --pipe */
static const char *demo = HT_TEST_DATA "/memorytestapp.htev";

static void buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "ht-itest: out of memory\n");
            exit(1);
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

const char *buf_str(const struct buf *b)
{
    return b->p ? b->p : "";
}

static void close_cb(uv_handle_t *h)
{
    struct child *c = h->data;
    c->open--;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    static char chunk[1 << 16];
    *b = uv_buf_init(chunk, sizeof(chunk));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct child *c = s->data;
    if (n > 0)
        buf_add((uv_pipe_t *)s == &c->err ? &c->err_b : &c->out_b, b->base, (size_t)n);
    else if (n < 0)
        uv_close((uv_handle_t *)s, close_cb);
}

void child_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct child *c = p->data;
    c->exited = 1;
    c->status = status;
    c->term_signal = sig;
    uv_close((uv_handle_t *)p, close_cb);
}

static void stdin_written_cb(uv_write_t *w, int status)
{
    (void)status; /* a child that exits early is seen by its exit code */
    struct child *c = w->data;
    free(w);
    free(c->in_data);
    c->in_data = NULL;
    uv_close((uv_handle_t *)&c->in, close_cb);
}

static void tick_cb(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until done(arg) or ms passed (a 20 ms tick re-checks). 1 if done. */
int run_until(int (*done)(void *), void *arg, uint64_t ms)
{
    uv_timer_t tick;
    uv_timer_init(loop, &tick);
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + ms;
    int ok;
    while (!(ok = done(arg)) && uv_now(loop) < end) {
        uv_timer_start(&tick, tick_cb, 20, 0);
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

static int child_done(void *arg)
{
    struct child *c = arg;
    return c->exited && c->open == 0;
}

int child_on_console;

/* Start argv[0] with argv. stdin: a pipe we write later (child_write), or
 * nothing. 0 or -1. */
static int child_start_once(struct child *c, char **argv, int with_stdin, int *err)
{
    memset(c, 0, sizeof(*c));
    uv_stdio_container_t io[3];
    c->proc.data = c->in.data = c->out.data = c->err.data = c;
    uv_pipe_init(loop, &c->out, 0);
    uv_pipe_init(loop, &c->err, 0);
    io[0].flags = UV_IGNORE;
    if (with_stdin) {
        uv_pipe_init(loop, &c->in, 0);
        io[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
        io[0].data.stream = (uv_stream_t *)&c->in;
    }
    io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[1].data.stream = (uv_stream_t *)&c->out;
    io[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[2].data.stream = (uv_stream_t *)&c->err;
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.file = argv[0];
    o.args = argv;
    o.exit_cb = child_exit_cb;
    o.stdio = io;
    o.stdio_count = 3;
    /* A child that must share our console (for Ctrl-C) is not started hidden:
     * UV_PROCESS_WINDOWS_HIDE_CONSOLE gives it none (CREATE_NO_WINDOW). */
    o.flags = child_on_console ? UV_PROCESS_WINDOWS_HIDE_GUI : UV_PROCESS_WINDOWS_HIDE;
    int rc = uv_spawn(loop, &c->proc, &o);
    c->open = 3 + with_stdin;
    *err = rc;
    if (rc != 0) {
        fprintf(stderr, "ht-itest: cannot start %s: %s\n", argv[0], uv_strerror(rc));
        uv_close((uv_handle_t *)&c->out, close_cb);
        uv_close((uv_handle_t *)&c->err, close_cb);
        if (with_stdin)
            uv_close((uv_handle_t *)&c->in, close_cb);
        c->open--; /* the process handle was never opened */
        c->exited = 1;
        c->status = 127;
        run_until(child_done, c, 1000);
        return -1;
    }
    uv_read_start((uv_stream_t *)&c->out, alloc_cb, read_cb);
    uv_read_start((uv_stream_t *)&c->err, alloc_cb, read_cb);
    return 0;
}

/* Wine 8 now and then fails a CreateProcess (uv_spawn: "unknown error", seen
 * once in 20 runs right after AllocConsole): tried three times, 100 ms apart,
 * unless the program is missing. */
int child_start(struct child *c, char **argv, int with_stdin)
{
    int err = 0;
    for (int i = 0; i < 3; i++) {
        if (child_start_once(c, argv, with_stdin, &err) == 0)
            return 0;
        if (err == UV_ENOENT || err == UV_EACCES)
            break;
        uv_sleep(100);
    }
    return -1;
}

/* Write data (taken over) to the child's stdin, then close it. */
static void child_write(struct child *c, char *data, size_t n)
{
    uv_write_t *w = malloc(sizeof(*w));
    w->data = c;
    c->in_data = data;
    uv_buf_t b = uv_buf_init(data, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&c->in, &b, 1, stdin_written_cb) != 0) {
        free(w);
        free(data);
        c->in_data = NULL;
        uv_close((uv_handle_t *)&c->in, close_cb);
    }
}

static void stdin_part_cb(uv_write_t *w, int status)
{
    (void)status;
    free(w);
}

/* Write n bytes of data (kept by the caller until the loop ran) and keep stdin open. */
static void child_write_part(struct child *c, const char *data, size_t n)
{
    uv_write_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&c->in, &b, 1, stdin_part_cb) != 0)
        free(w);
}

/* Wait for the child's end (killed past ms). Its exit code, or -1 if killed. */
int child_wait(struct child *c, uint64_t ms, const char *what)
{
    if (!run_until(child_done, c, ms)) {
        fprintf(stderr, "ht-itest: %s still running after %llu ms: killed\n", what,
                (unsigned long long)ms);
        if (!c->exited)
            uv_process_kill(&c->proc, SIGKILL);
        run_until(child_done, c, 5000);
        return -1;
    }
    return c->term_signal ? -1 : (int)c->status;
}

void child_free(struct child *c)
{
    free(c->out_b.p);
    free(c->err_b.p);
    memset(c, 0, sizeof(*c));
}

/* The daemon of the case (its log in out_b and err_b). */
static struct child hd; /* heaptraced */
static int daemon_running;

/* One heaptracectl run: its exit code, output and error output. */
struct res {
    int rc;
    char *out, *err;
};

static void res_free(struct res *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* ctl("ping", NULL): run heaptracectl to its end. */
static struct res ctl(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)first;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 38)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    struct child c;
    char *full[44];
    int k = 0;
    full[k++] = HT_ITEST_CTL;
    full[k++] = "--pipe";
    full[k++] = endpoint;
    for (int i = 0; i < n; i++)
        full[k++] = argv[i];
    full[k] = NULL;
    struct res r = {-1, NULL, NULL};
    if (child_start(&c, full, 0) == 0)
        r.rc = child_wait(&c, ITEST_CMD_MS, "heaptracectl");
    r.out = strdup(buf_str(&c.out_b));
    r.err = strdup(buf_str(&c.err_b));
    child_free(&c);
    return r;
}

/* The whole file (malloc'd, NUL-terminated), or NULL. */
static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct buf b = {0};
    char chunk[1 << 16];
    size_t k;
    while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_add(&b, chunk, k);
    fclose(f);
    if (!b.p)
        buf_add(&b, "", 0);
    if (n)
        *n = b.n;
    return b.p;
}

int write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fputs(s, f) < 0;
    return fclose(f) != 0 || rc ? -1 : 0;
}

static char *tpath(const char *name)
{
    static char p[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", tmpdir, name);
    return p[k];
}

/* The value at a dotted path ("rows.0.frame"), or NULL. */
static const cJSON *jget(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *tok = buf, *dot; o && tok; tok = dot) {
        dot = strchr(tok, '.');
        if (dot)
            *dot++ = '\0';
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(tok))
                             : cJSON_GetObjectItemCaseSensitive(o, tok);
    }
    return o;
}

static double jnum(const cJSON *o, const char *path)
{
    const cJSON *v = jget(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *jstr(const cJSON *o, const char *path)
{
    const cJSON *v = jget(o, path);
    return cJSON_IsString(v) ? v->valuestring : "(missing)";
}

/* Wall-clock fields removed, as ht-testtool norm does for the bash suite's goldens. */
static void strip(cJSON *o)
{
    static const char *const volatile_keys[] = {"wall_start", "libuv", "cjson", NULL};
    for (int i = 0; volatile_keys[i]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(o, volatile_keys[i]);
    cJSON *c;
    cJSON_ArrayForEach(c, o)
    {
        if (cJSON_IsObject(c) || cJSON_IsArray(c))
            strip(c);
    }
}

/* text normalized (printed with a newline, like puts), or NULL if not JSON. */
static char *norm(const char *text, int drop_session)
{
    cJSON *o = cJSON_Parse(text);
    if (!o)
        return NULL;
    strip(o);
    if (drop_session)
        cJSON_DeleteItemFromObjectCaseSensitive(o, "session");
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    size_t n = strlen(s);
    char *r = malloc(n + 2);
    memcpy(r, s, n);
    r[n] = '\n';
    r[n + 1] = '\0';
    cJSON_free(s);
    return r;
}

/* --- The daemon --- */

static int ping_ok(void)
{
    struct res r = ctl("ping", NULL);
    int ok = r.rc == 0;
    res_free(&r);
    return ok;
}

static void daemon_dump(void)
{
    const struct buf *b[2] = {&hd.out_b, &hd.err_b};
    for (int i = 0; i < 2; i++) {
        const char *log = buf_str(b[i]);
        size_t n = strlen(log);
        /* A crash under wine: winedbg's backtrace, before its module list. */
        const char *bt = strstr(log, "Backtrace:");
        if (bt)
            fprintf(stderr, "--- daemon %s: crashed\n%.4000s\n", i ? "stderr" : "stdout", bt);
        fprintf(stderr, "--- daemon %s (tail)\n%s\n", i ? "stderr" : "stdout",
                n > 3000 ? log + n - 3000 : log);
    }
}

/* heaptraced --foreground on the case's endpoint, answering pings. 0 or -1. */
static int daemon_start(void)
{
    char *argv[] = {HT_ITEST_DAEMON, "--foreground", "--log-level", "debug",
                    "--pipe",        endpoint,       NULL};
    if (child_start(&hd, argv, 0) != 0)
        return -1;
    daemon_running = 1;
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + ITEST_START_MS;
    while (uv_now(loop) < end) {
        if (ping_ok())
            return 0;
        if (hd.exited) {
            fprintf(stderr, "ht-itest: the daemon exited at start (status %lld)\n",
                    (long long)hd.status);
            daemon_dump();
            return -1;
        }
        uv_sleep(50);
        uv_update_time(loop);
    }
    fprintf(stderr, "ht-itest: the daemon did not answer within %d ms\n", ITEST_START_MS);
    daemon_dump();
    return -1;
}

static int log_has(void *needle)
{
    return strstr(buf_str(&hd.out_b), needle) != NULL || strstr(buf_str(&hd.err_b), needle) != NULL;
}

/* The daemon's log (stdout and stderr) holds needle within ms. */
static int daemon_logged(const char *needle, uint64_t ms)
{
    return run_until(log_has, (void *)needle, ms);
}

/* --- Raw requests: a client of our own, for what heaptracectl never sends --- */

struct raw {
    uv_pipe_t pipe;
    uv_connect_t conn;
    uv_write_t w;
    struct buf in;
    const char *send;
    int status; /* 1 connected, <0 failed */
    int closed;
};

static void raw_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct raw *r = s->data;
    if (n > 0)
        buf_add(&r->in, b->base, (size_t)n);
    else if (n < 0 && !r->closed) {
        r->closed = 1;
        uv_read_stop(s);
    }
}

static void raw_connect_cb(uv_connect_t *req, int status)
{
    struct raw *r = req->data;
    r->status = status == 0 ? 1 : status;
    if (status != 0)
        return;
    uv_buf_t b = uv_buf_init((char *)r->send, (unsigned)strlen(r->send));
    uv_write(&r->w, (uv_stream_t *)&r->pipe, &b, 1, NULL);
    uv_read_start((uv_stream_t *)&r->pipe, alloc_cb, raw_read_cb);
}

struct raw_wait {
    struct raw *r;
    int lines;
};

static int raw_done(void *arg)
{
    struct raw_wait *w = arg;
    int n = 0;
    for (const char *p = buf_str(&w->r->in); *p; p++)
        n += *p == '\n';
    return w->r->status < 0 || w->r->closed || n >= w->lines;
}

static void raw_close_cb(uv_handle_t *h)
{
    struct raw *r = h->data;
    r->closed = 2;
}

static int raw_closed_done(void *arg)
{
    return ((struct raw *)arg)->closed == 2;
}

/* Send text over a fresh connection; the reply lines (malloc'd) once `lines` came. */
static char *raw_request(const char *text, int lines)
{
    struct raw r;
    memset(&r, 0, sizeof(r));
    r.send = text;
    r.pipe.data = r.conn.data = &r;
    uv_pipe_init(loop, &r.pipe, 0);
    uv_pipe_connect(&r.conn, &r.pipe, endpoint, raw_connect_cb);
    struct raw_wait w = {&r, lines};
    run_until(raw_done, &w, 10000);
    r.closed = 1;
    uv_close((uv_handle_t *)&r.pipe, raw_close_cb);
    run_until(raw_closed_done, &r, 5000);
    char *out = strdup(buf_str(&r.in));
    free(r.in.p);
    return out;
}

/* --- Set-up and tear-down of a case --- */

static unsigned case_counter;

static void rm_tree(const char *dir)
{
    uv_fs_t req;
    if (uv_fs_scandir(NULL, &req, dir, 0, NULL) >= 0) {
        uv_dirent_t ent;
        while (uv_fs_scandir_next(&req, &ent) != UV_EOF) {
            char p[1200];
            snprintf(p, sizeof(p), "%s/%s", dir, ent.name);
            uv_fs_t u;
            uv_fs_unlink(NULL, &u, p, NULL);
            uv_fs_req_cleanup(&u);
        }
    }
    uv_fs_req_cleanup(&req);
    uv_fs_rmdir(NULL, &req, dir, NULL);
    uv_fs_req_cleanup(&req);
}

static int setup(void)
{
    static uv_loop_t l;
    if (!loop) {
        uv_loop_init(&l);
        loop = &l;
        setvbuf(stdout, NULL, _IONBF, 0); /* wine: a pipe's buffered lines die with a crash */
    }
    char base[900];
    size_t n = sizeof(base);
    if (uv_os_tmpdir(base, &n) != 0)
        snprintf(base, sizeof(base), ".");
    char tmpl[1000];
    snprintf(tmpl, sizeof(tmpl), "%s/ht-itest-XXXXXX", base);
    uv_fs_t req;
    if (uv_fs_mkdtemp(NULL, &req, tmpl, NULL) != 0) {
        fprintf(stderr, "ht-itest: cannot make a directory from %s\n", tmpl);
        uv_fs_req_cleanup(&req);
        return -1;
    }
    snprintf(tmpdir, sizeof(tmpdir), "%s", req.path);
    uv_fs_req_cleanup(&req);
    itest_endpoint(endpoint, sizeof(endpoint), tmpdir, ++case_counter);
    return 0;
}

static void teardown(void)
{
    if (daemon_running) {
        if (!hd.exited) {
            struct res r = ctl("shutdown", NULL);
            res_free(&r);
        }
        if (child_wait(&hd, 10000, "heaptraced") != 0 && ht_test_failed == 0)
            fprintf(stderr, "ht-itest: the daemon did not stop by itself\n");
        if (ht_test_failed)
            daemon_dump();
        child_free(&hd);
        daemon_running = 0;
    }
    rm_tree(tmpdir);
}

/* A case: its own directory and endpoint; a daemon when with_daemon. */
#define ITEST(name, with_daemon)                                                                   \
    static void body_##name(void);                                                                 \
    static void test_##name(void)                                                                  \
    {                                                                                              \
        if (setup() != 0) {                                                                        \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
        if (!(with_daemon) || daemon_start() == 0)                                                 \
            body_##name();                                                                         \
        else                                                                                       \
            ht_test_failed = 1;                                                                    \
        teardown();                                                                                \
    }                                                                                              \
    static void body_##name(void)

#define CHECK_RC(r, want)                                                                          \
    do {                                                                                           \
        if ((r).rc != (want)) {                                                                    \
            fprintf(stderr, "%s:%d: exit code %d, expected %d\nstdout: %s\nstderr: %s\n",          \
                    __FILE__, __LINE__, (r).rc, (want), (r).out, (r).err);                         \
            res_free(&(r));                                                                        \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_HAS(s, needle)                                                                       \
    do {                                                                                           \
        if (!strstr((s), (needle))) {                                                              \
            fprintf(stderr, "%s:%d: no \"%s\" in:\n%s\n", __FILE__, __LINE__, (needle), (s));      \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* load the demo recording as session "demo". */
static int load_demo(void)
{
    struct res r = ctl("load", demo, "--name", "demo", NULL);
    if (r.rc != 0)
        fprintf(stderr, "load failed (%d): %s%s\n", r.rc, r.out, r.err);
    int rc = r.rc;
    res_free(&r);
    return rc;
}

/* ctl --json ARGS parsed (NULL, reported, if it failed or is not JSON). */
static cJSON *ctl_json(const char *a1, const char *a2, const char *a3, const char *a4,
                       const char *a5, const char *a6)
{
    struct res r = ctl("--json", a1, a2, a3, a4, a5, a6, NULL);
    cJSON *o = r.rc == 0 ? cJSON_Parse(r.out) : NULL;
    if (!o)
        fprintf(stderr, "heaptracectl --json %s %s: exit %d: %s%s\n", a1, a2 ? a2 : "", r.rc, r.out,
                r.err);
    res_free(&r);
    return o;
}

/* --- The cases --- */

ITEST(ping, 1)
{
    struct res r = ctl("ping", NULL);
    CHECK_RC(r, 0);
    CHECK_HAS(r.out, "answers");
    res_free(&r);
}

ITEST(version, 1)
{
    cJSON *v = ctl_json("version", NULL, NULL, NULL, NULL, NULL);
    CHECK(v);
    double proto = jnum(v, "protocol");
    char *name = strdup(jstr(v, "sources.0.name"));
    const cJSON *modes = jget(v, "sources.0.modes");
    int stream_only = cJSON_GetArraySize(modes) == 1 &&
                      !strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(modes, 0)), "stream");
    int avail = cJSON_IsTrue(jget(v, "sources.0.available"));
    cJSON_Delete(v);
    CHECK_EQ(proto, 1);
    CHECK_STR(name, "replay");
    free(name);
    CHECK(stream_only);
    CHECK(avail);
}

/* The bash suite's golden replies (expected/), from the same load. */
ITEST(golden, 1)
{
    CHECK_EQ(load_demo(), 0);
    static const struct {
        const char *name;
        const char *args[8];
    } g[] = {
        {"ls", {"ls"}},
        {"status", {"status", "demo"}},
        {"stacks_by_frame", {"stacks", "--by", "frame"}},
        {"stacks_aifo_tree", {"stacks", "--type", "AIFO", "--top", "5"}},
        {"commits_halfway", {"commits", "--range", "14s:16s", "--sort", "impact"}},
        {"commits_list", {"commits", "--range", "19s:29s", "--type", "AIFI", "--list"}},
        {"timeline", {"timeline", "--step", "5s"}},
        {"stacks_by_heap", {"stacks", "--by", "heap"}},
        {"stacks_by_type", {"stacks", "--by", "type"}},
        {"stacks_by_image", {"stacks", "--by", "image", "--no-default-cull"}},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
        const char *const *a = g[i].args;
        struct res r = ctl("--json", a[0], a[1], a[2], a[3], a[4], a[5], a[6], NULL);
        char *got = r.rc == 0 ? norm(r.out, 0) : NULL;
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s.json", HT_ITEST_EXPECTED, g[i].name);
        char *want = read_file(path, NULL);
        if (!got || !want || strcmp(got, want) != 0) {
            fprintf(stderr, "golden %s: exit %d, differs from %s\n--- got\n%s\n--- stderr\n%s\n",
                    g[i].name, r.rc, path, got ? got : r.out, r.err);
            write_file(tpath("got.json"), got ? got : "");
            bad++;
        }
        free(got);
        free(want);
        res_free(&r);
    }
    CHECK_EQ(bad, 0);
}

/* The figures the bash case seed000 checks, from the replay. */
ITEST(figures, 1)
{
    CHECK_EQ(load_demo(), 0);
    cJSON *j = ctl_json("commits", "--range", "14s:16s", "--by", "frame", NULL);
    CHECK(j);
    CHECK_STR(jstr(j, "rows.0.frame"), "MemoryTestApp.exe!main");
    CHECK_EQ(jnum(j, "rows.0.impacting"), 10485760);
    CHECK_EQ(jnum(j, "total.impacting"), 10485760);
    cJSON_Delete(j);
    j = ctl_json("commits", "--range", "19s:29s", "--type", "AIFI", NULL);
    CHECK(j);
    CHECK_EQ(jnum(j, "total.count"), 4);
    CHECK_EQ(jnum(j, "total.size"), 41943040);
    CHECK_EQ(jnum(j, "total.impacting"), 0);
    CHECK_STR(jstr(j, "rows.0.frames.0"), "MemoryTestApp.exe!ManipulateTemporaryBuffer");
    cJSON_Delete(j);
    j = ctl_json("stacks", "--type", "AIFO", "--by", "frame", NULL);
    CHECK(j);
    CHECK_STR(jstr(j, "rows.0.frame"), "MemoryTestApp.exe!InnerLoopOperation");
    CHECK_EQ(jnum(j, "rows.0.count"), 1200);
    CHECK_EQ(jnum(j, "rows.0.size"), 48000);
    cJSON_Delete(j);
    j = ctl_json("commits", NULL, NULL, NULL, NULL, NULL);
    CHECK(j);
    CHECK_EQ(jnum(j, "total.size"), 125829120);
    cJSON_Delete(j);
    /* The human rendering too: the leak's frame in the tree. */
    struct res r = ctl("stacks", "--tree", "--type", "AIFO", NULL);
    CHECK_RC(r, 0);
    CHECK_HAS(r.out, "      MemoryTestApp.exe!InnerLoopOperation");
    res_free(&r);
}

/* Requests heaptracectl would never send, over a connection of our own:
 * each gets its error and the connection survives (the bash case
 * bad_requests, in part). */
ITEST(bad_requests, 1)
{
    CHECK_EQ(load_demo(), 0);
    char *r = raw_request("not json\n"
                          "{\"v\":1,\"id\":3}\n"
                          "{\"v\":1,\"id\":4,\"cmd\":\"frobnicate\"}\n"
                          "{\"v\":1,\"id\":5,\"cmd\":\"stacks\",\"args\":{\"session\":\"nope\"}}\n"
                          "{\"v\":1,\"id\":6,\"cmd\":\"stacks\",\"args\":{\"top\":\"ten\"}}\n"
                          "{\"v\":2,\"id\":10,\"cmd\":\"ping\"}\n"
                          "[1,2]\n"
                          "{\"v\":1,\"id\":13,\"cmd\":\"ping\"}\n",
                          8);
    int ebadjson = 0;
    for (const char *p = r; (p = strstr(p, "\"EBADJSON\"")) != NULL; p++)
        ebadjson++;
    if (ebadjson != 3)
        fprintf(stderr, "replies:\n%s\n", r);
    CHECK_EQ(ebadjson, 3);
    CHECK_HAS(r, "\"id\":4,\"ok\":false,\"err\":\"EUNKNOWNCMD\"");
    CHECK_HAS(r, "\"id\":5,\"ok\":false,\"err\":\"ENOSESSION\"");
    CHECK_HAS(r, "\"id\":6,\"ok\":false,\"err\":\"EBADARG\",\"msg\":\"argument \\\"top\\\" must "
                 "be a non-negative integer\"");
    CHECK_HAS(r, "\"id\":10,\"ok\":false,\"err\":\"EVERSION\"");
    CHECK_HAS(r, "\"id\":13,\"ok\":true");
    free(r);
    CHECK(ping_ok());
}

/* A session that does not exist: ENOSESSION, exit 1, and -o files untouched. */
ITEST(unknown_session, 1)
{
    CHECK_EQ(load_demo(), 0);
    struct res r = ctl("stacks", "nosuch", NULL);
    CHECK_RC(r, 1);
    CHECK_HAS(r.err, "ENOSESSION");
    res_free(&r);
    char *keep = tpath("keep.htev");
    CHECK_EQ(write_file(keep, "previous\n"), 0);
    r = ctl("record", "nosuch", "-o", keep, NULL);
    CHECK_RC(r, 1);
    CHECK_HAS(r.err, "ENOSESSION");
    res_free(&r);
    r = ctl("export", "nosuch", "--format", "csv", "-o", keep, NULL);
    CHECK_RC(r, 1);
    res_free(&r);
    char *k = read_file(keep, NULL);
    CHECK_STR(k, "previous\n");
    free(k);
}

/* Stacks and commits of a session (wall-clock fields and the session's id left out). */
static char *answers(const char *session)
{
    struct buf b = {0};
    struct res r = ctl("--json", "stacks", session, "--by", "stack", NULL);
    char *s = r.rc == 0 ? norm(r.out, 1) : NULL;
    buf_add(&b, s ? s : "(stacks failed)", strlen(s ? s : "(stacks failed)"));
    free(s);
    res_free(&r);
    r = ctl("--json", "commits", session, "--range", "14s:16s", NULL);
    s = r.rc == 0 ? norm(r.out, 1) : NULL;
    buf_add(&b, s ? s : "(commits failed)", strlen(s ? s : "(commits failed)"));
    free(s);
    res_free(&r);
    return b.p;
}

static int session_listed(void *name)
{
    struct res r = ctl("ls", "--json", NULL);
    int ok = r.rc == 0 && strstr(r.out, name);
    res_free(&r);
    return ok;
}

/* record -o FILE of a session fed through load's standard input, the file
 * loaded back: the same answers. FILE .htevb: compressed (a zstd frame). */
static void record_roundtrip(const char *file)
{
    size_t n;
    char *data = read_file(demo, &n);
    CHECK(data);
    /* load - as "live": its standard input held open, nothing sent yet. */
    struct child load, rec;
    char *largv[] = {HT_ITEST_CTL, "--pipe", endpoint, "load", "-", "--name", "live", NULL};
    CHECK_EQ(child_start(&load, largv, 1), 0);
    int listed = run_until(session_listed, "\"live\"", 20000);
    if (!listed) {
        uv_close((uv_handle_t *)&load.in, close_cb);
        child_wait(&load, ITEST_CMD_MS, "load");
        child_free(&load);
        free(data);
    }
    CHECK(listed);
    /* The recorder subscribes before the first event is sent (the daemon logs each
     * request once handled). */
    char *out = tpath(file);
    char *rargv[] = {HT_ITEST_CTL, "--pipe", endpoint, "record", "live", "-o", out, NULL};
    CHECK_EQ(child_start(&rec, rargv, 0), 0);
    int subscribed = daemon_logged(": record (", 20000);
    child_write(&load, data, n); /* closes its stdin once written: the load ends */
    int lrc = child_wait(&load, ITEST_CMD_MS, "load");
    int rrc = child_wait(&rec, ITEST_CMD_MS, "record");
    if (lrc != 0 || rrc != 0 || !subscribed)
        fprintf(stderr, "load %d: %s%s\nrecord %d: %s%s\nsubscribed %d\n", lrc,
                buf_str(&load.out_b), buf_str(&load.err_b), rrc, buf_str(&rec.out_b),
                buf_str(&rec.err_b), subscribed);
    child_free(&load);
    child_free(&rec);
    CHECK(subscribed);
    CHECK_EQ(lrc, 0);
    CHECK_EQ(rrc, 0);
    size_t rn;
    char *recorded = read_file(out, &rn);
    CHECK(recorded);
    int zstd = rn >= 4 && (unsigned char)recorded[0] == 0x28 &&
               (unsigned char)recorded[1] == 0xb5 && (unsigned char)recorded[2] == 0x2f &&
               (unsigned char)recorded[3] == 0xfd;
    int lines = 0;
    for (size_t i = 0; i < rn; i++)
        lines += recorded[i] == '\n';
    int crlf = memchr(recorded, '\r', rn) != NULL;
    free(recorded);
    if (strstr(file, ".htevb")) {
        CHECK(zstd);
        CHECK(rn < n / 5);
    } else {
        CHECK(!crlf); /* binary mode: the .htev lines as the daemon sent them */
        CHECK(lines >= 1383);
    }
    /* The .htevb comes back through load's standard input redirected from
     * the file as a shell does it: read in binary there too. A C runtime in
     * text mode ends it at the first 0x1A byte and drops each "\r" before
     * "\n" (seen under wine: 166 of 1309 bytes read). */
    cJSON *j = NULL;
    if (strstr(file, ".htevb")) {
        char *bin = read_file(out, &rn);
        CHECK(bin);
        int sensitive = memchr(bin, 0x1a, rn) != NULL || strstr(bin, "\r\n") != NULL;
        free(bin);
        if (!sensitive)
            fprintf(stderr, "the recording has no 0x1A byte and no CR LF: text mode would pass\n");
        CHECK(sensitive);
        char *argv[] = {HT_ITEST_CTL, "--pipe", endpoint,   "--json", "load",
                        "-",          "--name", "replayed", NULL};
        char *reply = tpath("load.out");
        int rc = itest_run_redirected(argv, out, reply);
        char *text = read_file(reply, NULL);
        j = rc == 0 && text ? cJSON_Parse(text) : NULL;
        if (!j)
            fprintf(stderr, "load < FILE: exit %d: %s\n", rc, text ? text : "");
        free(text);
    } else {
        j = ctl_json("load", out, "--name", "replayed", NULL, NULL);
    }
    CHECK(j);
    double malformed = jnum(j, "malformed"), events = jnum(j, "events");
    cJSON_Delete(j);
    CHECK_EQ(malformed, 0);
    CHECK(events >= 1383);
    char *a = answers("live"), *b = answers("replayed");
    int same = !strcmp(a, b);
    if (!same)
        fprintf(stderr, "--- live\n%s\n--- replayed\n%s\n", a, b);
    free(a);
    free(b);
    CHECK(same);
}

ITEST(record_htev, 1)
{
    record_roundtrip("rec.htev");
}

ITEST(record_htevb, 1)
{
    record_roundtrip("rec.htevb");
}

static int no_temp_files(const char *prefix)
{
    uv_fs_t req;
    int left = 0;
    if (uv_fs_scandir(NULL, &req, tmpdir, 0, NULL) >= 0) {
        uv_dirent_t ent;
        while (uv_fs_scandir_next(&req, &ent) != UV_EOF)
            if (!strncmp(ent.name, prefix, strlen(prefix))) {
                fprintf(stderr, "left behind: %s\n", ent.name);
                left++;
            }
    }
    uv_fs_req_cleanup(&req);
    return left == 0;
}

/* export -o replaces an existing file whole, leaves no temporary file. */
ITEST(export_file, 1)
{
    CHECK_EQ(load_demo(), 0);
    char *c = tpath("c.txt");
    CHECK_EQ(write_file(c, "previous\n"), 0);
    struct res r = ctl("export", "--format", "collapsed", "-o", c, NULL);
    CHECK_RC(r, 0);
    res_free(&r);
    char *t = read_file(c, NULL);
    CHECK(t);
    int has =
        strstr(t, "MemoryTestApp.exe!main;MemoryTestApp.exe!InnerLoopOperation 48000\n") != NULL;
    int old = strstr(t, "previous") != NULL;
    free(t);
    CHECK(has);
    CHECK(!old);
    char *csv = tpath("c.csv");
    r = ctl("export", "--format", "csv", "--what", "commits", "-o", csv, NULL);
    CHECK_RC(r, 0);
    res_free(&r);
    size_t n;
    t = read_file(csv, &n);
    CHECK(t);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += t[i] == '\n';
    free(t);
    CHECK_EQ(lines, 3);
    CHECK(no_temp_files(".c."));
    /* Standard output redirected to a file as a shell does it: "\n" stays
     * "\n" (a C runtime in text mode writes "\r\n"). */
    char *argv[] = {HT_ITEST_CTL, "--pipe", endpoint, "export", "--format", "collapsed", NULL};
    CHECK_EQ(itest_run_redirected(argv, demo, tpath("stdout.txt")), 0);
    t = read_file(tpath("stdout.txt"), &n);
    CHECK(t);
    has = strstr(t, "MemoryTestApp.exe!main;MemoryTestApp.exe!InnerLoopOperation 48000\n") != NULL;
    int cr = memchr(t, '\r', n) != NULL;
    free(t);
    CHECK(has);
    CHECK(!cr);
}

/* drop: the session is gone, a second drop says so. */
ITEST(drop, 1)
{
    CHECK_EQ(load_demo(), 0);
    struct res r = ctl("drop", "demo", NULL);
    CHECK_RC(r, 0);
    res_free(&r);
    cJSON *j = ctl_json("ls", NULL, NULL, NULL, NULL, NULL);
    CHECK(j);
    int empty = cJSON_GetArraySize(jget(j, "sessions")) == 0 && cJSON_IsArray(jget(j, "sessions"));
    cJSON_Delete(j);
    CHECK(empty);
    r = ctl("drop", "demo", NULL);
    CHECK_RC(r, 1);
    CHECK_HAS(r.err, "ENOSESSION");
    res_free(&r);
}

/* shutdown: the daemon exits 0 having closed every handle, and is unreachable after. */
ITEST(shutdown, 1)
{
    CHECK_EQ(load_demo(), 0);
    struct res r = ctl("shutdown", NULL);
    CHECK_RC(r, 0);
    res_free(&r);
    int rc = child_wait(&hd, 20000, "heaptraced");
    CHECK_EQ(rc, 0);
    CHECK(log_has("stopped cleanly"));
    r = ctl("ping", NULL);
    CHECK_RC(r, 3);
    res_free(&r);
}

/* --- A server that is not a genuine heaptraced --- */

/* --serve ENDPOINT DIR: listen on ENDPOINT, write DIR/ready, take one client,
 * and when it leaves (or after 15 s) write "received N" (the bytes it sent)
 * to DIR/received. */
static uv_pipe_t serve_srv, serve_cli;
static long serve_bytes;

static void serve_file(const char *dir, const char *name, const char *text)
{
    char p[1200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    write_file(p, text);
}

static void serve_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n > 0)
        serve_bytes += (long)n;
    else if (n < 0)
        uv_stop(s->loop);
}

static void serve_conn_cb(uv_stream_t *s, int status)
{
    if (status != 0 || serve_cli.loop)
        return;
    uv_pipe_init(s->loop, &serve_cli, 0);
    if (uv_accept(s, (uv_stream_t *)&serve_cli) == 0)
        uv_read_start((uv_stream_t *)&serve_cli, alloc_cb, serve_read_cb);
}

static void serve_timeout_cb(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static int serve_main(const char *ep, const char *dir)
{
    uv_loop_t l;
    uv_timer_t t;
    uv_loop_init(&l);
    uv_pipe_init(&l, &serve_srv, 0);
    int rc = uv_pipe_bind(&serve_srv, ep);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&serve_srv, 4, serve_conn_cb);
    if (rc != 0) {
        fprintf(stderr, "serve: %s: %s\n", ep, uv_strerror(rc));
        return 1;
    }
    serve_file(dir, "ready", "ready\n");
    uv_timer_init(&l, &t);
    uv_timer_start(&t, serve_timeout_cb, 15000, 0);
    uv_run(&l, UV_RUN_DEFAULT);
    char msg[64];
    snprintf(msg, sizeof(msg), "received %ld\n", serve_bytes);
    serve_file(dir, "received", msg);
    return 0; /* the process ends: its handles go with it */
}

static int file_exists(void *path)
{
    uv_fs_t req;
    int rc = uv_fs_stat(NULL, &req, path, NULL);
    uv_fs_req_cleanup(&req);
    return rc == 0;
}

/* A server that runs as neither SYSTEM/root nor an (elevated) administrator
 * or us is refused before anything is sent: exit 3, the reason, 0 bytes. */
ITEST(untrusted_server, 0)
{
    int rc = itest_untrusted_start(endpoint, tmpdir);
    if (rc == 77) {
        teardown();
        exit(HT_TEST_SKIP);
    }
    CHECK_EQ(rc, 0);
    int ready = run_until(file_exists, tpath("ready"), 20000);
    struct res r = {-1, NULL, NULL};
    if (ready)
        r = ctl("ping", NULL);
    itest_untrusted_wait();
    CHECK(ready);
    CHECK_RC(r, 3);
    CHECK_HAS(r.err, "refusing to talk to the server at");
    res_free(&r);
    /* The server got nothing from us: read once it saw us go. */
    CHECK(file_exists(tpath("received")));
    char *got = read_file(tpath("received"), NULL);
    int none = got && !strcmp(got, "received 0\n");
    if (!none)
        fprintf(stderr, "the server says: %s\n", got ? got : "(nothing)");
    free(got);
    CHECK(none);
}

/* The fallback when the server's token cannot be read (an operator facing a
 * LocalSystem service): the pipe's owner must be SYSTEM or Administrators
 * (the daemon sets O:BA). The genuine daemon passes it; the untrusted server
 * (started with Administrators deny-only) is refused. The test knob makes the
 * ctl take the fallback (wine lets everyone read every token). Windows only:
 * Unix has SO_PEERCRED. */
ITEST(owner_check, 1)
{
#ifndef _WIN32
    teardown();
    fprintf(stderr, "SKIP: the pipe-owner fallback is Windows only\n");
    exit(HT_TEST_SKIP);
#else
    uv_os_setenv("HEAPTRACECTL_TEST_OWNER_CHECK", "1");
    struct res r = ctl("ping", NULL);
    CHECK_RC(r, 0);
    res_free(&r);
    r = ctl("shutdown", NULL);
    res_free(&r);
    CHECK_EQ(child_wait(&hd, 10000, "heaptraced"), 0);
    child_free(&hd);
    daemon_running = 0;
    int rc = itest_untrusted_start(endpoint, tmpdir);
    CHECK_EQ(rc, 0);
    int ready = run_until(file_exists, tpath("ready"), 20000);
    if (ready)
        r = ctl("ping", NULL);
    itest_untrusted_wait();
    uv_os_unsetenv("HEAPTRACECTL_TEST_OWNER_CHECK");
    CHECK(ready);
    CHECK_RC(r, 3);
    /* Under wine the untrusted server's pipe does not let us read its owner
     * ("cannot check"): refused all the same; on Windows its owner (its user)
     * is named. */
    CHECK_HAS(r.err, "refusing to");
    res_free(&r);
#endif
}

/* The ETW source's start on Windows: under wine (StartTraceW succeeds without
 * a session, OpenTraceW and TraceSetInformation fail:
 * docs/windows.md#what-wine-does-and-does-not-do)
 * start --pid and --exe fail with the API that failed named, leave no
 * session, and --exe leaves TracingFlags as it was (restored from the
 * journal). Elevated on real Windows they succeed: the session is then
 * stopped and dropped, and TracingFlags is restored at stop. */
#ifdef _WIN32
static int ifeo_flags_present(const char *exe)
{
    char key[400];
    snprintf(key, sizeof(key),
             "SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Image File Execution Options\\%s", exe);
    HKEY k;
    if (RegOpenKeyExA(HKEY_LOCAL_MACHINE, key, 0, KEY_QUERY_VALUE | KEY_WOW64_64KEY, &k) != 0)
        return 0;
    int present = RegQueryValueExA(k, "TracingFlags", NULL, NULL, NULL, NULL) == 0;
    RegCloseKey(k);
    return present;
}
#endif

ITEST(etw_start, 1)
{
#ifndef _WIN32
    teardown();
    fprintf(stderr, "SKIP: ETW is Windows only\n");
    exit(HT_TEST_SKIP);
#else
    char pid[32], exe[64];
    snprintf(pid, sizeof(pid), "%lu", (unsigned long)GetCurrentProcessId());
    snprintf(exe, sizeof(exe), "ht-itest-etw-%lu.exe", (unsigned long)GetCurrentProcessId());
    struct res r = ctl("start", "--pid", pid, "--name", "live", NULL);
    if (r.rc == 0) {
        res_free(&r);
        r = ctl("stop", "live", NULL);
        CHECK_RC(r, 0);
        res_free(&r);
    } else {
        CHECK(strstr(r.err, "StartTraceW") || strstr(r.err, "OpenTraceW") ||
              strstr(r.err, "TraceSetInformation"));
        res_free(&r);
        r = ctl("ls", NULL);
        CHECK_RC(r, 0);
        CHECK(!strstr(r.out, "live"));
        res_free(&r);
    }
    r = ctl("start", "--exe", exe, "--name", "byexe", NULL);
    if (r.rc == 0) {
        CHECK(ifeo_flags_present(exe));
        res_free(&r);
        r = ctl("stop", "byexe", NULL);
        CHECK_RC(r, 0);
    } else {
        CHECK_HAS(r.err, "OpenTraceW");
    }
    res_free(&r);
    CHECK(!ifeo_flags_present(exe));
    /* Bad arguments are refused before anything starts. */
    r = ctl("start", "--exe", "dir\\app.exe", NULL);
    CHECK_RC(r, 1);
    CHECK_HAS(r.err, "without a directory");
    res_free(&r);
    r = ctl("start", "--pid", "4000000000", NULL);
    CHECK(r.rc != 0);
    res_free(&r);
#endif
}

/* --- Ctrl-C ends a recording, not the ctl --- */

static int session_has_events(void *name)
{
    struct res r = ctl("--json", "status", (const char *)name, NULL);
    cJSON *o = r.rc == 0 ? cJSON_Parse(r.out) : NULL;
    double n = jnum(o, "ingest.events");
    cJSON_Delete(o);
    res_free(&r);
    return n > 0;
}

/* An interrupt (Ctrl-C; SIGINT on Unix) ends a recording, not the ctl: it exits
 * 0, says how many events it recorded, and -o FILE holds exactly those (the
 * bash case record_interrupt, with SIGTERM). */
ITEST(record_interrupt, 1)
{
    int prep = itest_interrupt_prepare();
    if (prep == 77) {
        teardown();
        exit(HT_TEST_SKIP);
    }
    size_t n;
    char *data = read_file(demo, &n);
    CHECK(data);
    struct child load, rec;
    char *largv[] = {HT_ITEST_CTL, "--pipe", endpoint, "load", "-", "--name", "live", NULL};
    int started = child_start(&load, largv, 1) == 0;
    if (!started)
        free(data);
    CHECK(started);
    int listed = run_until(session_listed, "\"live\"", 20000);
    char *out = tpath("rec.htev");
    char *rargv[] = {HT_ITEST_CTL, "--pipe", endpoint, "record", "live", "-o", out, NULL};
    /* Only the recorder shares our console: a Ctrl-C to the console's group
     * would end the load (no handler of its own) and with it the session. */
    child_on_console = 1;
    int rstarted = listed && child_start(&rec, rargv, 0) == 0;
    child_on_console = 0;
    int subscribed = rstarted && daemon_logged(": record (", 20000);
    /* The first half of the stream only: the session stays live. */
    size_t half = n / 2;
    while (half < n && data[half - 1] != '\n')
        half++;
    if (subscribed)
        child_write_part(&load, data, half);
    int flowing = subscribed && run_until(session_has_events, "live", 20000);
    if (flowing) {
        uv_sleep(300); /* the recorder receives some of them */
        uv_update_time(loop);
    }
    int sent = flowing ? itest_interrupt_send(&rec) : -1;
    int rrc = rstarted ? child_wait(&rec, ITEST_CMD_MS, "record") : -1;
    /* The rest, then the load ends. */
    char *rest = malloc(n - half + 1);
    memcpy(rest, data + half, n - half);
    free(data);
    child_write(&load, rest, n - half);
    int lrc = child_wait(&load, ITEST_CMD_MS, "load");
    char *err = strdup(rstarted ? buf_str(&rec.err_b) : "");
    if (rstarted)
        child_free(&rec);
    child_free(&load);
    CHECK(listed);
    CHECK(subscribed);
    CHECK(flowing);
    CHECK_EQ(sent, 0);
    CHECK_EQ(lrc, 0);
    if (rrc != 0)
        fprintf(stderr, "record: exit %d: %s\n", rrc, err);
    CHECK_EQ(rrc, 0);
    const char *m = strstr(err, "interrupted: ");
    long recorded = m ? atol(m + 13) : -1;
    if (!m)
        fprintf(stderr, "no interrupt message: %s\n", err);
    free(err);
    CHECK(m);
    CHECK(recorded > 0);
    size_t fn;
    char *f = read_file(out, &fn);
    CHECK(f);
    long evs = 0;
    for (const char *p = f; (p = strstr(p, "\"ev\"")) != NULL; p++)
        evs++;
    free(f);
    CHECK_EQ(evs, recorded);
}

/* No daemon on the endpoint: exit 3 and a message saying so. */
ITEST(unreachable, 0)
{
    struct res r = ctl("ping", NULL);
    CHECK_RC(r, 3);
    CHECK_HAS(r.err, "cannot reach heaptraced at");
    CHECK_HAS(r.err, "is the daemon running?");
    res_free(&r);
}

int ht_test_failed;

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--serve"))
        return serve_main(argv[2], argv[3]);
    static const struct ht_test_case cases[] = {
        T(ping),
        T(version),
        T(golden),
        T(figures),
        T(bad_requests),
        T(unknown_session),
        T(record_htev),
        T(record_htevb),
        T(export_file),
        T(drop),
        T(shutdown),
        T(untrusted_server),
        T(owner_check),
        T(etw_start),
        T(record_interrupt),
        T(unreachable),
    };
    return ht_test_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
