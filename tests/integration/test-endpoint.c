/* The daemon's control endpoint end to end: the real heaptraced on a private pipe (a unix
 * socket on Linux), raw clients, a second daemon, a squatter, the pipe's DACL (Windows). */
#ifdef _WIN32
#include <windows.h>

#include <aclapi.h>
#include <sddl.h>
#else
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#endif

#include "ht-test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <uv.h>

static char daemon_path[1024];
static char pipe_name[256];
static char tmp_dir[512];
static const char *case_name = "";

/* ---- a synchronous raw client, one per platform ---- */
#ifdef _WIN32
typedef HANDLE conn_t;
#define CONN_NONE INVALID_HANDLE_VALUE

static void widen(const char *s, WCHAR *w, int n)
{
    MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n);
}

/* access: what the client asks for (GENERIC_READ | GENERIC_WRITE, plus READ_CONTROL to read
 * the DACL). CONN_NONE with *werr set when the open fails. */
static conn_t conn_open_access(DWORD access, DWORD *werr)
{
    WCHAR w[256];
    widen(pipe_name, w, 256);
    for (int tries = 0; tries < 50; tries++) {
        HANDLE h = CreateFileW(w, access, 0, NULL, OPEN_EXISTING, 0, NULL);
        if (h != INVALID_HANDLE_VALUE)
            return h;
        *werr = GetLastError();
        if (*werr == ERROR_PIPE_BUSY)
            WaitNamedPipeW(w, 200);
        else if (*werr == ERROR_FILE_NOT_FOUND)
            Sleep(50);
        else
            return CONN_NONE;
    }
    return CONN_NONE;
}

static conn_t conn_open(void)
{
    DWORD e;
    return conn_open_access(GENERIC_READ | GENERIC_WRITE, &e);
}

static int conn_write(conn_t c, const char *s, size_t n)
{
    DWORD w;
    return WriteFile(c, s, (DWORD)n, &w, NULL) && w == n ? 0 : -1;
}

static long conn_read(conn_t c, char *buf, size_t n)
{
    DWORD r;
    if (!ReadFile(c, buf, (DWORD)n, &r, NULL))
        return GetLastError() == ERROR_BROKEN_PIPE ? 0 : -1;
    return (long)r;
}

static void conn_close(conn_t c)
{
    CloseHandle(c);
}
#else
typedef int conn_t;
#define CONN_NONE (-1)

static conn_t conn_open(void)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", pipe_name) >= (int)sizeof(sa.sun_path))
        return CONN_NONE;
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        uv_sleep(50);
    }
    return CONN_NONE;
}

static int conn_write(conn_t c, const char *s, size_t n)
{
    return write(c, s, n) == (ssize_t)n ? 0 : -1;
}

static long conn_read(conn_t c, char *buf, size_t n)
{
    return (long)read(c, buf, n);
}

static void conn_close(conn_t c)
{
    close(c);
}
#endif

/* Sends req and reads until nlines reply lines came (or the daemon closed): 0 or -1. */
static int exchange(const char *req, int nlines, char *out, size_t outsz)
{
    conn_t c = conn_open();
    if (c == CONN_NONE)
        return -1;
    size_t len = 0;
    int lines = 0, rc = conn_write(c, req, strlen(req));
    while (rc == 0 && lines < nlines && len + 1 < outsz) {
        long r = conn_read(c, out + len, outsz - len - 1);
        if (r <= 0)
            break;
        for (long i = 0; i < r; i++)
            lines += out[len + i] == '\n';
        len += (size_t)r;
    }
    out[len] = '\0';
    conn_close(c);
    return rc == 0 && lines >= nlines ? 0 : -1;
}

/* ---- the daemon ---- */
struct daemon {
    uv_process_t proc;
    int exited;
    int64_t status;
    char err_path[600]; /* its stderr */
};

static uv_loop_t loop;
/* Every daemon started, so that a failed case leaves none running (a daemon left behind
 * would hold ctest's output pipe, inherited, and the case would end as a timeout). */
static struct daemon *started[16];
static int nstarted;

static void exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct daemon *d = p->data;
    (void)sig;
    d->exited = 1;
    d->status = status;
    uv_close((uv_handle_t *)p, NULL);
}

/* Starts heaptraced --foreground --pipe pipe_name [--config config]. 0 or -1. */
static int daemon_start(struct daemon *d, const char *config, const char *tag)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->err_path, sizeof(d->err_path), "%s/ht-ep-%d-%s-%s.err", tmp_dir,
             (int)uv_os_getpid(), case_name, tag);
    uv_fs_t req;
    int fd = uv_fs_open(NULL, &req, d->err_path, UV_FS_O_CREAT | UV_FS_O_TRUNC | UV_FS_O_WRONLY,
                        0600, NULL);
    uv_fs_req_cleanup(&req);
    if (fd < 0)
        return -1;
    char *args[] = {daemon_path, "--foreground", "--pipe", pipe_name,
                    "--config",  (char *)config, NULL};
    if (!config)
        args[4] = NULL;
    uv_stdio_container_t stdio[3] = {
        {UV_IGNORE, {0}}, {UV_INHERIT_FD, {.fd = fd}}, {UV_INHERIT_FD, {.fd = fd}}};
    uv_process_options_t o = {
        .exit_cb = exit_cb, .file = daemon_path, .args = args, .stdio_count = 3, .stdio = stdio};
    d->proc.data = d;
    int rc = uv_spawn(&loop, &d->proc, &o);
    if (rc == 0 && nstarted < 16)
        started[nstarted++] = d;
    uv_fs_close(NULL, &req, fd, NULL);
    uv_fs_req_cleanup(&req);
    if (rc != 0)
        fprintf(stderr, "cannot start %s: %s\n", daemon_path, uv_strerror(rc));
    return rc == 0 ? 0 : -1;
}

static void timeout_cb(uv_timer_t *t)
{
    (void)t;
}

/* Waits up to ms for the daemon to exit: 1 if it did. */
static int daemon_wait(struct daemon *d, unsigned ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000;
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    while (!d->exited && uv_hrtime() < end) {
        uv_timer_start(&t, timeout_cb, 20, 0);
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    return d->exited;
}

/* Asks the daemon to shut down and waits: its exit status, or -1. */
static int daemon_stop(struct daemon *d)
{
    char out[4096];
    if (!d->exited)
        exchange("{\"v\":1,\"id\":1,\"cmd\":\"shutdown\"}\n", 1, out, sizeof(out));
    if (!daemon_wait(d, 10000)) {
        uv_process_kill(&d->proc, SIGTERM);
        daemon_wait(d, 5000);
        return -1;
    }
    return (int)d->status;
}

/* Its stderr so far. */
static void daemon_err(struct daemon *d, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen(d->err_path, "rb");
    if (!f)
        return;
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = '\0';
    fclose(f);
}

static int contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* ---- cases ---- */
static void test_ping(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char out[4096];
    CHECK(daemon_start(&d, NULL, "a") == 0);
    CHECK(exchange("{\"v\":1,\"id\":7,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    printf("%s", out);
    CHECK(contains(out, "\"id\":7,\"ok\":true"));
    /* Many clients one after the other: every one gets a fresh instance. */
    for (int i = 0; i < 20; i++)
        CHECK(exchange("{\"v\":1,\"id\":8,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    CHECK_EQ(daemon_stop(&d), 0);
}

/* Clients that stay connected together, each on its own instance, all answered; clients that
 * connect and leave at once (before or after the daemon accepts) disturb nothing. */
static void test_many_clients(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    enum { N = 24 };
    conn_t c[N];
    char out[4096];
    int n = 0, answered = 0;
    CHECK(daemon_start(&d, NULL, "a") == 0);
    for (; n < N; n++)
        if ((c[n] = conn_open()) == CONN_NONE)
            break;
    for (int i = 0; i < n; i++) {
        char req[64];
        snprintf(req, sizeof(req), "{\"v\":1,\"id\":%d,\"cmd\":\"ping\"}\n", 100 + i);
        if (conn_write(c[i], req, strlen(req)) != 0)
            continue;
        long r = conn_read(c[i], out, sizeof(out) - 1);
        out[r > 0 ? r : 0] = '\0';
        snprintf(req, sizeof(req), "\"id\":%d,\"ok\":true", 100 + i);
        answered += contains(out, req);
    }
    for (int i = 0; i < n; i++)
        conn_close(c[i]);
    CHECK_EQ(n, N);
    CHECK_EQ(answered, N);
    for (int i = 0; i < 20; i++) {
        conn_t g = conn_open();
        CHECK(g != CONN_NONE);
        conn_close(g);
    }
    CHECK(exchange("{\"v\":1,\"id\":9,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    CHECK(contains(out, "\"id\":9,\"ok\":true"));
    CHECK_EQ(daemon_stop(&d), 0);
}

/* The same requests and error replies as integration.bad_requests on Linux. */
static void test_bad_requests(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char out[8192];
    CHECK(daemon_start(&d, NULL, "a") == 0);
    CHECK(exchange(
              "not json\n{\"v\":1,\"id\":3}\n{\"v\":1,\"id\":4,\"cmd\":\"frobnicate\"}\n"
              "{\"v\":2,\"id\":10,\"cmd\":\"ping\"}\n[1,2]\n{\"v\":1,\"id\":13,\"cmd\":\"ping\"}\n",
              6, out, sizeof(out)) == 0);
    printf("%s", out);
    int bad = 0;
    for (const char *p = out; (p = strstr(p, "\"EBADJSON\"")); p++)
        bad++;
    CHECK_EQ(bad, 3);
    CHECK(contains(out, "\"id\":4,\"ok\":false,\"err\":\"EUNKNOWNCMD\""));
    CHECK(contains(
        out, "\"id\":10,\"ok\":false,\"err\":\"EVERSION\",\"msg\":\"protocol version 2 is not "
             "supported; this daemon speaks 1\""));
    CHECK(contains(out, "\"id\":13,\"ok\":true"));
    CHECK_EQ(daemon_stop(&d), 0);
}

/* Reads what a refused client is told before the daemon closes it (no request sent). */
static void read_refusal(char *out, size_t outsz)
{
    size_t len = 0;
    conn_t c = conn_open();
    if (c != CONN_NONE) {
        long r;
        while (len + 1 < outsz && (r = conn_read(c, out + len, outsz - len - 1)) > 0)
            len += (size_t)r;
        conn_close(c);
    }
    out[len] = '\0';
}

/* Found by the adversary: a client refused at accept is told why, as on Linux (libuv 1.44's
 * uv_try_write always says EAGAIN for a Windows pipe, so the refusal line never went out and
 * the client saw only the pipe closing). Too many clients: EFULL; no memory for a client
 * (test knob): ENOMEM, and the next client is served. */
static void test_refusals_told(void)
{
    static struct daemon d, e; /* static: main kills what a failed case left */
    char cfg[600], out[4096];
    snprintf(cfg, sizeof(cfg), "%s/ht-ep-%d-full.json", tmp_dir, (int)uv_os_getpid());
    FILE *f = fopen(cfg, "wb");
    CHECK(f);
    fputs("{\"max_clients\":2,\"root_clients\":1}\n", f);
    fclose(f);
    CHECK(daemon_start(&d, cfg, "a") == 0);
    conn_t a = conn_open(), b = conn_open();
    CHECK(a != CONN_NONE && b != CONN_NONE);
    const char *ping = "{\"v\":1,\"id\":2,\"cmd\":\"ping\"}\n";
    CHECK(conn_write(a, ping, strlen(ping)) == 0 && conn_read(a, out, sizeof(out)) > 0);
    CHECK(conn_write(b, ping, strlen(ping)) == 0 && conn_read(b, out, sizeof(out)) > 0);
    read_refusal(out, sizeof(out));
    printf("third client: %s", out);
    CHECK(contains(out, "\"ok\":false,\"err\":\"EFULL\""));
    CHECK(contains(out, "all 2 slots are taken"));
    conn_close(a);
    conn_close(b);
    /* Their slots free once the daemon sees them gone. */
    int served = 0;
    for (int i = 0; i < 100 && !served; i++) {
        served = exchange(ping, 1, out, sizeof(out)) == 0 && contains(out, "\"ok\":true");
        if (!served)
            uv_sleep(20);
    }
    CHECK(served);
    CHECK_EQ(daemon_stop(&d), 0);
    remove(cfg);

    uv_os_setenv("HEAPTRACED_TEST_FAIL_CLIENTS", "2");
    int rc = daemon_start(&e, NULL, "b");
    uv_os_unsetenv("HEAPTRACED_TEST_FAIL_CLIENTS");
    CHECK(rc == 0);
    for (int i = 0; i < 2; i++) {
        read_refusal(out, sizeof(out));
        printf("client %d: %s", i, out);
        CHECK(contains(out, "\"ok\":false,\"err\":\"ENOMEM\""));
        CHECK(contains(out, "out of memory: try again later"));
    }
    CHECK(exchange("{\"v\":1,\"id\":3,\"cmd\":\"version\"}\n", 1, out, sizeof(out)) == 0);
    CHECK(contains(out, "\"refused_no_memory\":2"));
    CHECK_EQ(daemon_stop(&e), 0);
}

/* Reads one reply line from c (byte by byte: nothing after it is taken). */
static void read_line(conn_t c, char *out, size_t outsz)
{
    size_t len = 0;
    while (len + 1 < outsz && conn_read(c, out + len, 1) == 1 && out[len++] != '\n')
        ;
    out[len] = '\0';
}

/* Hostile clients the adversary tried (these held): a request in 1-byte writes; a line over
 * the 64 KiB cap is refused with ETOOBIG and the same connection is answered after it; 300
 * clients that connect and vanish, half of them mid-request; then a client is still served. */
static void test_hostile_clients(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    static char big[65536];
    char out[4096];
    CHECK(daemon_start(&d, NULL, "a") == 0);
    conn_t c = conn_open();
    CHECK(c != CONN_NONE);
    const char *req = "{\"v\":1,\"id\":21,\"cmd\":\"ping\"}\n";
    for (size_t i = 0; req[i]; i++)
        CHECK(conn_write(c, req + i, 1) == 0);
    read_line(c, out, sizeof(out));
    CHECK(contains(out, "\"id\":21,\"ok\":true"));
    memset(big, 'x', sizeof(big));
    for (int i = 0; i < 3; i++)
        CHECK(conn_write(c, big, sizeof(big)) == 0);
    const char *after = "\n{\"v\":1,\"id\":22,\"cmd\":\"ping\"}\n";
    CHECK(conn_write(c, after, strlen(after)) == 0);
    read_line(c, out, sizeof(out));
    printf("%s", out);
    CHECK(contains(out, "\"err\":\"ETOOBIG\""));
    read_line(c, out, sizeof(out));
    CHECK(contains(out, "\"id\":22,\"ok\":true"));
    conn_close(c);
    for (int i = 0; i < 300; i++) {
        conn_t g = conn_open();
        CHECK(g != CONN_NONE);
        if (i % 2)
            conn_write(g, req, 10);
        conn_close(g);
    }
    /* Until the daemon has seen them go they may hold its slots (EFULL): served then. */
    int served = 0;
    for (int i = 0; i < 100 && !served; i++) {
        served = exchange("{\"v\":1,\"id\":23,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0 &&
                 contains(out, "\"id\":23,\"ok\":true");
        if (!served) {
            printf("not yet: %s", out);
            uv_sleep(20);
        }
    }
    CHECK(served);
    CHECK_EQ(daemon_stop(&d), 0);
}

/* A second daemon on the same name refuses to start; the first one is undisturbed. */
static void test_second_daemon(void)
{
    static struct daemon a, b; /* static: main kills what a failed case left */
    char out[4096], err[4096];
    CHECK(daemon_start(&a, NULL, "a") == 0);
    CHECK(exchange("{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    CHECK(daemon_start(&b, NULL, "b") == 0);
    CHECK(daemon_wait(&b, 10000));
    daemon_err(&b, err, sizeof(err));
    fprintf(stderr, "second daemon: %s", err);
    CHECK_EQ(b.status, 1);
    CHECK(contains(err, "already running"));
    CHECK(exchange("{\"v\":1,\"id\":2,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    CHECK(contains(out, "\"id\":2,\"ok\":true"));
    CHECK_EQ(daemon_stop(&a), 0);
}

/* A configuration naming an operators group: Windows resolves it (an unknown one stops the
 * start, naming it); Unix refuses the key. */
static void test_unknown_group(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char cfg[600], err[4096];
    snprintf(cfg, sizeof(cfg), "%s/ht-ep-%d-group.json", tmp_dir, (int)uv_os_getpid());
    FILE *f = fopen(cfg, "wb");
    CHECK(f);
    fputs("{\"pipe_operators_group\":\"no-such-group-ht\"}\n", f);
    fclose(f);
    CHECK(daemon_start(&d, cfg, "a") == 0);
    CHECK(daemon_wait(&d, 10000));
    daemon_err(&d, err, sizeof(err));
    fprintf(stderr, "%s", err);
    remove(cfg);
    CHECK_EQ(d.status, 1);
    CHECK(contains(err, "pipe_operators_group"));
#ifdef _WIN32
    CHECK(contains(err, "no-such-group-ht"));
    /* A SID that is no account, and an account that is no group (our own user). */
    char me[256] = "";
    HANDLE tok;
    union {
        TOKEN_USER tu;
        BYTE buf[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
    } user;
    DWORD n;
    LPSTR ssid = NULL;
    if (OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok)) {
        if (GetTokenInformation(tok, TokenUser, &user, sizeof(user), &n) &&
            ConvertSidToStringSidA(user.tu.User.Sid, &ssid))
            snprintf(me, sizeof(me), "%s", ssid);
        LocalFree(ssid);
        CloseHandle(tok);
    }
    CHECK(me[0]);
    const char *bad[] = {"S-1-5-21-1-2-3-4242", me};
    const char *want[] = {"unknown account", "is not a group"};
    for (int i = 0; i < 2; i++) {
        static struct daemon e[2]; /* static: main kills what a failed case left */
        f = fopen(cfg, "wb");
        CHECK(f);
        fprintf(f, "{\"pipe_operators_group\":\"%s\"}\n", bad[i]);
        fclose(f);
        CHECK(daemon_start(&e[i], cfg, i ? "c" : "b") == 0);
        CHECK(daemon_wait(&e[i], 10000));
        daemon_err(&e[i], err, sizeof(err));
        fprintf(stderr, "%s", err);
        CHECK_EQ(e[i].status, 1);
        CHECK(contains(err, bad[i]) && contains(err, want[i]));
    }
    remove(cfg);
#endif
}

#ifdef _WIN32
/* Wine has ntdll!wine_get_version (docs/windows.md#what-wine-does-and-does-not-do). */
static int under_wine(void)
{
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    return nt && GetProcAddress(nt, "wine_get_version") != NULL;
}

/* An endpoint that is not \\.\pipe\NAME is refused, naming the form. */
static void test_bad_name(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char err[4096];
    snprintf(pipe_name, sizeof(pipe_name), "C:\\heaptrace.sock");
    CHECK(daemon_start(&d, NULL, "a") == 0);
    CHECK(daemon_wait(&d, 10000));
    daemon_err(&d, err, sizeof(err));
    fprintf(stderr, "%s", err);
    CHECK_EQ(d.status, 1);
    CHECK(contains(err, "is not a pipe name"));
}

/* Someone created the pipe first: the daemon refuses to start, naming it. */
static void test_squatted(void)
{
    WCHAR w[256];
    widen(pipe_name, w, 256);
    HANDLE squat = CreateNamedPipeW(w, PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES,
                                    4096, 4096, 0, NULL);
    CHECK(squat != INVALID_HANDLE_VALUE);
    static struct daemon d; /* static: main kills what a failed case left */
    char err[4096];
    CHECK(daemon_start(&d, NULL, "a") == 0);
    int exited = daemon_wait(&d, 10000);
    CloseHandle(squat);
    if (!exited)
        daemon_stop(&d);
    CHECK(exited);
    daemon_err(&d, err, sizeof(err));
    fprintf(stderr, "%s", err);
    CHECK_EQ(d.status, 1);
    CHECK(contains(err, "already exists"));
}

/* The DACL of the instance the client reached, as SDDL. */
static int pipe_sddl(char *out, size_t outsz)
{
    DWORD e = 0;
    conn_t c = conn_open_access(GENERIC_READ | GENERIC_WRITE | READ_CONTROL, &e);
    if (c == CONN_NONE) {
        fprintf(stderr, "open for READ_CONTROL: error %lu\n", (unsigned long)e);
        return -1;
    }
    PSECURITY_DESCRIPTOR sd = NULL;
    LPWSTR s = NULL;
    DWORD rc = GetSecurityInfo(c, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, NULL,
                               NULL, &sd);
    int ok = rc == ERROR_SUCCESS && ConvertSecurityDescriptorToStringSecurityDescriptorW(
                                        sd, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, &s, NULL);
    if (ok)
        WideCharToMultiByte(CP_UTF8, 0, s, -1, out, (int)outsz, NULL, NULL);
    else
        fprintf(stderr, "GetSecurityInfo: %lu / %lu\n", (unsigned long)rc,
                (unsigned long)GetLastError());
    LocalFree(s);
    LocalFree(sd);
    conn_close(c);
    return ok ? 0 : -1;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* Every instance: protected, LocalSystem and Administrators only (GA reads back as FA, the
 * file-specific form, once mapped for the pipe). The first instance and a later one. */
static void test_dacl(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char sddl[1024], out[4096];
    CHECK(daemon_start(&d, NULL, "a") == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(pipe_sddl(sddl, sizeof(sddl)) == 0);
        fprintf(stderr, "instance %d: %s\n", i, sddl);
        CHECK(strncmp(sddl, "D:P", 3) == 0);
        CHECK_EQ(count(sddl, "("), 2);
        CHECK(contains(sddl, ";;;SY)") && contains(sddl, ";;;BA)"));
        CHECK(contains(sddl, "(A;;FA;;;SY)") || contains(sddl, "(A;;GA;;;SY)"));
        CHECK(contains(sddl, "(A;;FA;;;BA)") || contains(sddl, "(A;;GA;;;BA)"));
    }
    CHECK(exchange("{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    CHECK_EQ(daemon_stop(&d), 0);
}

/* pipe_operators_group "Users" (BUILTIN\Users, BU): a third ACE, read/write without
 * FILE_CREATE_PIPE_INSTANCE (0x4). */
static void test_operators_dacl(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char cfg[600], sddl[1024];
    snprintf(cfg, sizeof(cfg), "%s/ht-ep-%d-ops.json", tmp_dir, (int)uv_os_getpid());
    FILE *f = fopen(cfg, "wb");
    CHECK(f);
    fputs("{\"pipe_operators_group\":\"Users\"}\n", f);
    fclose(f);
    CHECK(daemon_start(&d, cfg, "a") == 0);
    int rc = pipe_sddl(sddl, sizeof(sddl));
    int st = daemon_stop(&d);
    remove(cfg);
    CHECK(rc == 0);
    fprintf(stderr, "with operators: %s\n", sddl);
    CHECK(strncmp(sddl, "D:P", 3) == 0);
    CHECK_EQ(count(sddl, "("), 3);
    CHECK(contains(sddl, "(A;;0x12018b;;;BU)"));
    CHECK_EQ(st, 0);
}

/* This thread takes the process's token with Administrators deny-only, as UAC's filtered
 * token has it (RevertToSelf ends it). 0 or -1. */
static int impersonate_nonadmin(void)
{
    HANDLE self = NULL, restricted = NULL;
    BYTE admins[SECURITY_MAX_SID_SIZE];
    DWORD asz = sizeof(admins);
    int ok = OpenProcessToken(GetCurrentProcess(), TOKEN_ALL_ACCESS, &self) &&
             CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, admins, &asz);
    SID_AND_ATTRIBUTES deny = {admins, 0};
    ok = ok && CreateRestrictedToken(self, 0, 1, &deny, 0, NULL, 0, NULL, &restricted) &&
         ImpersonateLoggedOnUser(restricted);
    if (!ok)
        fprintf(stderr, "cannot impersonate a non-administrator: error %lu\n",
                (unsigned long)GetLastError());
    if (self)
        CloseHandle(self);
    if (restricted)
        CloseHandle(restricted);
    return ok ? 0 : -1;
}

static void skip_wine_admin(void)
{
    printf("skip: wine let a token with Administrators deny-only open the pipe as an "
           "administrator (it runs everyone as an administrator and does not check pipe DACLs "
           "against it): verified only on real Windows\n");
    exit(HT_TEST_SKIP);
}

/* A client whose token has Administrators as deny-only is not let in by the DACL. */
static void test_nonadmin_refused(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    CHECK(daemon_start(&d, NULL, "a") == 0);
    char out[4096];
    CHECK(exchange("{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    DWORD e = 0;
    conn_t c = CONN_NONE;
    int imp = impersonate_nonadmin();
    if (imp == 0) {
        c = conn_open_access(GENERIC_READ | GENERIC_WRITE, &e);
        RevertToSelf();
    }
    int st = daemon_stop(&d);
    CHECK_EQ(imp, 0);
    if (c != CONN_NONE && under_wine()) {
        conn_close(c);
        skip_wine_admin();
    }
    CHECK(c == CONN_NONE);
    CHECK_EQ(e, ERROR_ACCESS_DENIED);
    CHECK_EQ(st, 0);
}

/* A member of pipe_operators_group (here Users, given by its SID) who is not an administrator:
 * opened with GENERIC_READ | FILE_WRITE_DATA | FILE_WRITE_ATTRIBUTES it is let in and answered;
 * asking for GENERIC_WRITE (which holds FILE_CREATE_PIPE_INSTANCE) it is refused. */
static void test_operator_admitted(void)
{
    static struct daemon d; /* static: main kills what a failed case left */
    char cfg[600], out[4096];
    snprintf(cfg, sizeof(cfg), "%s/ht-ep-%d-opadm.json", tmp_dir, (int)uv_os_getpid());
    FILE *f = fopen(cfg, "wb");
    CHECK(f);
    /* By SID (BUILTIN\\Users): group names are localized. */
    fputs("{\"pipe_operators_group\":\"S-1-5-32-545\"}\n", f);
    fclose(f);
    CHECK(daemon_start(&d, cfg, "a") == 0);
    CHECK(exchange("{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n", 1, out, sizeof(out)) == 0);
    DWORD e_op = 0, e_gw = 0;
    conn_t op = CONN_NONE, gw = CONN_NONE;
    long r = -1;
    int imp = impersonate_nonadmin();
    if (imp == 0) {
        op = conn_open_access(GENERIC_READ | FILE_WRITE_DATA | FILE_WRITE_ATTRIBUTES, &e_op);
        const char *ping = "{\"v\":1,\"id\":5,\"cmd\":\"ping\"}\n";
        if (op != CONN_NONE && conn_write(op, ping, strlen(ping)) == 0)
            r = conn_read(op, out, sizeof(out) - 1);
        gw = conn_open_access(GENERIC_READ | GENERIC_WRITE, &e_gw);
        RevertToSelf();
    }
    out[r > 0 ? r : 0] = '\0';
    if (op != CONN_NONE)
        conn_close(op);
    int st = daemon_stop(&d);
    remove(cfg);
    CHECK_EQ(imp, 0);
    fprintf(stderr, "operator: open error %lu, reply %s", (unsigned long)e_op, out);
    CHECK(op != CONN_NONE);
    CHECK(contains(out, "\"id\":5,\"ok\":true"));
    if (gw != CONN_NONE && under_wine()) {
        conn_close(gw);
        skip_wine_admin();
    }
    CHECK(gw == CONN_NONE);
    CHECK_EQ(e_gw, ERROR_ACCESS_DENIED);
    CHECK_EQ(st, 0);
}
#endif

static void setup(const char *name, const char *argv0)
{
    case_name = name ? name : "all";
    size_t n = sizeof(daemon_path);
    uv_exepath(daemon_path, &n);
    char *slash = strrchr(daemon_path, '/');
#ifdef _WIN32
    char *bs = strrchr(daemon_path, '\\');
    if (!slash || (bs && bs > slash))
        slash = bs;
#endif
    (void)argv0;
    if (slash)
        *slash = '\0';
    /* tests/integration/ -> daemon/ */
    char dir[sizeof(daemon_path)];
    snprintf(dir, sizeof(dir), "%s", daemon_path);
    n = sizeof(tmp_dir);
    uv_os_tmpdir(tmp_dir, &n);
#ifdef _WIN32
    int r1 = snprintf(daemon_path, sizeof(daemon_path), "%s\\..\\..\\daemon\\heaptraced.exe", dir);
    int r2 = snprintf(pipe_name, sizeof(pipe_name), "\\\\.\\pipe\\ht-test-%d-%s",
                      (int)uv_os_getpid(), case_name);
#else
    int r1 = snprintf(daemon_path, sizeof(daemon_path), "%s/../../daemon/heaptraced", dir);
    int r2 = snprintf(pipe_name, sizeof(pipe_name), "%s/ht-ep-%d-%s.sock", tmp_dir,
                      (int)uv_os_getpid(), case_name);
#endif
    if (r1 >= (int)sizeof(daemon_path) || r2 >= (int)sizeof(pipe_name)) {
        fprintf(stderr, "paths too long (%s)\n", dir);
        exit(2);
    }
    uv_loop_init(&loop);
}

int ht_test_failed;

int main(int argc, char **argv)
{
    static const struct ht_test_case cases[] = {
        T(ping),           T(many_clients),     T(bad_requests),
        T(second_daemon),  T(unknown_group),    T(refusals_told),
        T(hostile_clients),
#ifdef _WIN32
        T(bad_name),       T(squatted),         T(dacl),
        T(operators_dacl), T(nonadmin_refused), T(operator_admitted),
#endif
    };
    setvbuf(stdout, NULL, _IONBF, 0);
    setup(argc > 1 ? argv[1] : NULL, argv[0]);
    int rc = ht_test_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
    for (int i = 0; i < nstarted; i++)
        if (!started[i]->exited) {
            fprintf(stderr, "killing a daemon the case left running\n");
            uv_process_kill(&started[i]->proc, SIGKILL);
            daemon_wait(started[i], 5000);
        }
    return rc;
}
