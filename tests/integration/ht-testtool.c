/*
 * Test helper for the integration suite:
 *   norm                    JSON on stdin -> formatted, wall-clock fields removed
 *   get PATH...             print values of JSON on stdin ("rows.0.frame"; "rows.#" a length)
 *   raw SOCK                send stdin's bytes as they are, print every reply line (2 s idle)
 *   bigline SOCK N          a request line of N bytes, then a ping: both must be answered
 *   partial SOCK            half a request without newline, then disconnect
 *   noread SOCK             subscribe to top and never read: the daemon must cut us off
 *   concurrent SOCK N Q     N clients at once, Q stacks queries each; every reply ok
 *   halfload SOCK FILE      start a load, send half of FILE, disconnect
 *   pausedload SOCK FILE NAME [GO]  load FILE as NAME: half, a 400 ms pause (or until
 *                           the file GO exists, 20 s at most), the rest and the end
 *                           chunk; prints the replies (summary or error)
 *   uintargs                every numeric argument of the command table: "CMD NAME"
 *   jsonlines               exit 0 when every line on stdin is UTF-8 and a JSON object
 *   req SOCK LINE           send one request line, print the first reply line
 *   hold SOCK N MS          open N connections, print "connected N", then wait up to MS
 *                           for each to be answered or closed; prints one summary line:
 *                           open=, silent= (closed without a line), first_timeout_ms=
 *                           (from before the first connect to the first ETIMEDOUT line),
 *                           and a count per error code (EFULL=, ETIMEDOUT=, EMFILE=, ...)
 *   fakeserver SOCK         a squatter: listen on SOCK, print "ready", accept one client,
 *                           print "received N" (bytes it sent before closing, 3 s at most)
 *   swap DIR NAME TARGET N  N times: wait until DIR/NAME is a socket, then rename a symlink
 *                           to TARGET over it (an attacker racing the daemon's start)
 *   longnames E N LEN       .htev to stdout: E allocs, each with N new names of LEN bytes
 *   manyallocs N            binary stream to stdout: N allocs, none freed, no stacks
 *   stall SOCK SECONDS      pour stacks queries for SECONDS without reading: must not be
 *                           cut off (backpressure), the daemon keeps serving others
 *   slowread SOCK REQ CHUNK MS  send the request line REQ, read its reply CHUNK bytes
 *                           every MS ms; prints frames, items of the cut arrays, bytes
 *   pingwatch SOCK STOPFILE MAXMS [PID MAXCPUMS]  ping every 10 ms until STOPFILE
 *                           exists; fails if a ping took over MAXMS ms (prints the
 *                           slowest); with PID (the daemon's: its loop is the main
 *                           thread), also if its loop thread used over MAXCPUMS ms of
 *                           CPU while a ping waited (a wall time bound a loaded host
 *                           can pass; the loop's CPU time it does not swell)
 *   halfclose SOCK N [REQ]  N pipelined pings (and REQ), then shutdown(SHUT_WR); reads to
 *                           EOF; prints the answers, frames and items of REQ's reply
 *   holdreplies SOCK N REQ STOPFILE  N connections each send REQ and never read, until
 *                           STOPFILE exists (60 s at most); prints "holding N"
 *   pipeline SOCK N SECS    N pings (ids 1..N) in one write, then read every reply: each
 *                           must be ok and in order; fails if that takes over SECS
 *   neverread SOCK SECS     write pings without ever reading until the daemon closes us
 *                           (0: prints when) or SECS pass (1: never cut off)
 */
#include "ht-commands.h"
#include "ht-text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap + 1);
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int connect_to(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen >= sizeof(sa.sun_path)) {
        fprintf(stderr, "endpoint path too long: %s\n", path);
        exit(1);
    }
    memcpy(sa.sun_path, path, plen + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Print reply lines until the peer closes or it stays quiet for idle_ms. */
static int drain(int fd, int idle_ms, int max_lines)
{
    char buf[65536];
    int lines = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, idle_ms) <= 0)
            return lines;
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0)
            return lines;
        fwrite(buf, 1, (size_t)k, stdout);
        for (ssize_t i = 0; i < k; i++)
            lines += buf[i] == '\n';
        if (max_lines && lines >= max_lines)
            return lines;
    }
}

static void strip(cJSON *o)
{
    static const char *const volatile_keys[] = {"wall_start", "libuv", "cjson", NULL};
    for (int i = 0; volatile_keys[i]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(o, volatile_keys[i]);
    cJSON *c;
    cJSON_ArrayForEach(c, o) if (cJSON_IsObject(c) || cJSON_IsArray(c)) strip(c);
}

static int cmd_norm(void)
{
    size_t n;
    char *text = read_all(stdin, &n);
    cJSON *o = cJSON_Parse(text);
    free(text);
    if (!o) {
        fprintf(stderr, "norm: not JSON\n");
        return 1;
    }
    strip(o);
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    return 0;
}

/* One value of root by path (see "get" at the top); 0 or 1 if missing. */
static int get_print(cJSON *root, const char *path)
{
    cJSON *o = root;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *save, *tok = strtok_r(buf, ".", &save); o && tok; tok = strtok_r(NULL, ".", &save)) {
        if (!strcmp(tok, "#") && cJSON_IsArray(o)) { /* "rows.#": the array's length */
            printf("%d\n", cJSON_GetArraySize(o));
            return 0;
        }
        if (cJSON_IsArray(o))
            o = cJSON_GetArrayItem(o, atoi(tok));
        else
            o = cJSON_GetObjectItemCaseSensitive(o, tok);
    }
    if (!o) {
        puts("(missing)");
        return 1;
    }
    if (cJSON_IsString(o)) {
        puts(o->valuestring);
    } else if (cJSON_IsNumber(o)) {
        printf("%.0f\n", o->valuedouble);
    } else {
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        free(s);
    }
    return 0;
}

/* Every path's value, one a line, from a single parse. */
static int cmd_get(int npaths, char **paths)
{
    size_t n;
    char *text = read_all(stdin, &n);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = 0;
    for (int i = 0; i < npaths; i++)
        rc |= get_print(root, paths[i]);
    cJSON_Delete(root);
    return rc;
}

static int cmd_raw(const char *sock)
{
    size_t n;
    char *text = read_all(stdin, &n);
    int fd = connect_to(sock);
    send_all(fd, text, n);
    free(text);
    drain(fd, 1500, 0);
    close(fd);
    return 0;
}

static int cmd_bigline(const char *sock, size_t n)
{
    int fd = connect_to(sock);
    char *line = malloc(n + 1);
    memset(line, 'x', n);
    memcpy(line, "{\"v\":1,\"id\":1,\"cmd\":\"ping\",\"args\":{\"pad\":\"", 43);
    line[n] = '\n';
    const char *ping = "{\"v\":1,\"id\":2,\"cmd\":\"ping\"}\n";
    if (send_all(fd, line, n + 1) || send_all(fd, ping, strlen(ping))) {
        fprintf(stderr, "bigline: send failed\n");
        return 1;
    }
    free(line);
    drain(fd, 1500, 2);
    close(fd);
    return 0;
}

static int cmd_partial(const char *sock)
{
    int fd = connect_to(sock);
    const char *half = "{\"v\":1,\"id\":7,\"cmd\":\"sta";
    send_all(fd, half, strlen(half));
    close(fd);
    return 0;
}

static int cmd_noread(const char *sock)
{
    int fd = connect_to(sock);
    /* Replies wait for a client that does not read (backpressure); what a
     * subscription pushes cannot wait: past the cap the daemon drops us. */
    const char *q =
        "{\"v\":1,\"id\":1,\"cmd\":\"top\",\"args\":{\"interval\":\"10ms\",\"top\":1000}}\n";
    send_all(fd, q, strlen(q));
    time_t start = time(NULL);
    int cut = 0;
    while (!cut && time(NULL) - start < 60) {
        struct pollfd p = {fd, 0, 0};
        if (poll(&p, 1, 1000) < 0)
            break;
        cut = (p.revents & (POLLERR | POLLHUP)) != 0;
    }
    printf("noread: %s\n", cut ? "disconnected by the daemon" : "never cut off");
    close(fd);
    return cut ? 0 : 1;
}

#define ACC (1 << 18) /* a 5-row stacks reply is a few KiB */

static int cmd_concurrent(const char *sock, int n, int q)
{
    struct pollfd *p = calloc((size_t)n, sizeof(*p));
    int *left = calloc((size_t)n, sizeof(int)), *oks = calloc((size_t)n, sizeof(int));
    char **acc = calloc((size_t)n, sizeof(char *));
    size_t *alen = calloc((size_t)n, sizeof(size_t));
    for (int i = 0; i < n; i++) {
        p[i].fd = connect_to(sock);
        p[i].events = POLLIN;
        left[i] = q;
        acc[i] = malloc(ACC);
        char req[160];
        int k = snprintf(req, sizeof(req),
                         "{\"v\":1,\"id\":%d,\"cmd\":\"stacks\",\"args\":{\"top\":5}}\n", q);
        send_all(p[i].fd, req, (size_t)k);
    }
    int active = n, bad = 0;
    time_t start = time(NULL);
    while (active > 0 && time(NULL) - start < 120) {
        if (poll(p, (nfds_t)n, 1000) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
                continue;
            ssize_t k = recv(p[i].fd, acc[i] + alen[i], ACC - alen[i] - 1, 0);
            if (k <= 0) {
                bad++;
                close(p[i].fd);
                p[i].fd = -1;
                active--;
                continue;
            }
            alen[i] += (size_t)k;
            char *nl;
            while ((nl = memchr(acc[i], '\n', alen[i])) != NULL) {
                *nl = '\0';
                if (strstr(acc[i], "\"ok\":true"))
                    oks[i]++;
                else
                    bad++;
                size_t used = (size_t)(nl - acc[i]) + 1;
                memmove(acc[i], nl + 1, alen[i] - used);
                alen[i] -= used;
                if (--left[i] == 0) {
                    close(p[i].fd);
                    p[i].fd = -1;
                    active--;
                } else {
                    char req[160];
                    int m = snprintf(
                        req, sizeof(req),
                        "{\"v\":1,\"id\":%d,\"cmd\":\"stacks\",\"args\":{\"top\":5}}\n", left[i]);
                    send_all(p[i].fd, req, (size_t)m);
                }
            }
        }
    }
    long total = 0;
    for (int i = 0; i < n; i++)
        total += oks[i];
    printf("concurrent: %d clients, %ld ok replies, %d bad, %d unfinished\n", n, total, bad,
           active);
    for (int i = 0; i < n; i++) {
        if (p[i].fd >= 0)
            close(p[i].fd);
        free(acc[i]);
    }
    free(p);
    free(left);
    free(oks);
    free(acc);
    free(alen);
    return bad == 0 && active == 0 && total == (long)n * q ? 0 : 1;
}

static int cmd_halfload(const char *sock, const char *file)
{
    FILE *f = fopen(file, "rb");
    size_t n;
    char *data = read_all(f, &n);
    fclose(f);
    int fd = connect_to(sock);
    const char *req = "{\"v\":1,\"id\":1,\"cmd\":\"load\",\"args\":{\"name\":\"half\"}}\n";
    send_all(fd, req, strlen(req));
    drain(fd, 1000, 1); /* the acknowledgement */
    char hdr[32];
    int k = snprintf(hdr, sizeof(hdr), "%zu\n", n / 2);
    send_all(fd, hdr, (size_t)k);
    send_all(fd, data, n / 2);
    free(data);
    usleep(200000);
    close(fd); /* mid-stream */
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmd_pausedload(const char *sock, const char *file, const char *name, const char *go)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return 1;
    size_t n;
    char *data = read_all(f, &n);
    fclose(f);
    int fd = connect_to(sock);
    char req[256], hdr[32];
    snprintf(req, sizeof(req), "{\"v\":1,\"id\":1,\"cmd\":\"load\",\"args\":{\"name\":\"%s\"}}\n",
             name);
    send_all(fd, req, strlen(req));
    drain(fd, 1000, 1); /* the acknowledgement */
    size_t half = n / 2;
    int k = snprintf(hdr, sizeof(hdr), "%zu\n", half);
    send_all(fd, hdr, (size_t)k);
    send_all(fd, data, half);
    /* Pause 400 ms, or until the test creates GO (it polls the session meanwhile). */
    for (int i = 0; go ? i < 2000 && access(go, F_OK) != 0 : i < 40; i++)
        usleep(10000);
    /* The session may be gone by now: sends may fail, the replies say why. */
    k = snprintf(hdr, sizeof(hdr), "%zu\n", n - half);
    send_all(fd, hdr, (size_t)k);
    send_all(fd, data + half, n - half);
    send_all(fd, "0\n", 2);
    drain(fd, 2000, 1);
    free(data);
    close(fd);
    return 0;
}

static int cmd_uintargs(void)
{
    for (size_t i = 0; i < ht_nargs; i++)
        if (ht_args[i].type == HT_ARG_UINT)
            printf("%s %s\n", ht_cmds[ht_args[i].cmd].name, ht_args[i].name);
    return 0;
}

static int cmd_jsonlines(void)
{
    size_t n;
    char *text = read_all(stdin, &n);
    int bad = 0, lines = 0;
    for (char *p = text, *nl; p < text + n; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(text + n - p));
        if (!nl)
            nl = text + n;
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(nl - p));
        if (!ht_utf8_valid(p, (size_t)(nl - p)) || !cJSON_IsObject(o)) {
            fprintf(stderr, "line %d is not UTF-8 JSON: %.*s\n", lines + 1, (int)(nl - p), p);
            bad = 1;
        }
        cJSON_Delete(o);
        lines++;
    }
    free(text);
    return bad || lines == 0;
}

static int cmd_req(const char *sock, const char *line)
{
    int fd = connect_to(sock);
    if (send_all(fd, line, strlen(line)) || send_all(fd, "\n", 1))
        return 1;
    int n = drain(fd, 10000, 1);
    close(fd);
    return n == 1 ? 0 : 1;
}


struct held {
    int fd;
    char line[512];
    size_t len;
    int state; /* 0 open, 1 answered (line complete), 2 closed silently */
};

/* The error code of a reply line ("EFULL"), or "ok". */
static void line_code(const char *line, char *code, size_t n)
{
    cJSON *o = cJSON_Parse(line);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "err");
    snprintf(code, n, "%s", cJSON_IsString(e) ? e->valuestring : "ok");
    cJSON_Delete(o);
}

static void held_read(struct held *h)
{
    ssize_t k = recv(h->fd, h->line + h->len, sizeof(h->line) - 1 - h->len, 0);
    if (k <= 0) {
        h->state = 2;
        close(h->fd);
        return;
    }
    h->len += (size_t)k;
    h->line[h->len] = '\0';
    if (memchr(h->line, '\n', h->len) || h->len == sizeof(h->line) - 1) {
        h->state = 1;
        close(h->fd);
    }
}

static int cmd_hold(const char *sock, int n, long wait_ms)
{
    struct held *hs = calloc((size_t)n, sizeof(*hs));
    struct pollfd *ps = calloc((size_t)n, sizeof(*ps));
    /* Times count from before the first connect: no accept is earlier. */
    long t0 = now_ms(), first_timeout = -1;
    for (int i = 0; i < n; i++)
        hs[i].fd = connect_to(sock);
    printf("connected %d\n", n);
    fflush(stdout);
    for (;;) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (hs[i].state == 0)
                ps[m++] = (struct pollfd){hs[i].fd, POLLIN, 0};
        long left = wait_ms - (now_ms() - t0);
        if (m == 0 || left <= 0 || poll(ps, (nfds_t)m, (int)left) <= 0)
            break;
        for (int i = 0, j = 0; i < n; i++) {
            if (hs[i].state != 0)
                continue;
            if (ps[j++].revents) {
                held_read(&hs[i]);
                if (hs[i].state == 1 && strstr(hs[i].line, "ETIMEDOUT") && first_timeout < 0)
                    first_timeout = now_ms() - t0;
            }
        }
    }
    static const char *const codes[] = {"EFULL", "ETIMEDOUT", "EMFILE", "ENFILE", "EPERM", "ENOMEM", "ok"};
    enum { NCODES = sizeof(codes) / sizeof(codes[0]) };
    int count[NCODES] = {0}, open = 0, silent = 0, other = 0;
    for (int i = 0; i < n; i++) {
        if (hs[i].state == 0) {
            open++;
            close(hs[i].fd);
            continue;
        }
        if (hs[i].state == 2 && hs[i].len == 0) {
            silent++;
            continue;
        }
        char code[32];
        line_code(hs[i].line, code, sizeof(code));
        int k = 0;
        while (k < NCODES && strcmp(code, codes[k]))
            k++;
        if (k < NCODES)
            count[k]++;
        else
            other++;
    }
    printf("open=%d silent=%d first_timeout_ms=%ld", open, silent, first_timeout);
    for (int k = 0; k < NCODES; k++)
        printf(" %s=%d", codes[k], count[k]);
    printf(" other=%d\n", other);
    free(hs);
    free(ps);
    return 0;
}

static int cmd_fakeserver(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 4) != 0) {
        perror("fakeserver");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    struct pollfd p = {l, POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0)
        return 1;
    int fd = accept(l, NULL, NULL);
    size_t got = 0;
    char buf[4096];
    long t0 = now_ms();
    for (;;) {
        struct pollfd q = {fd, POLLIN, 0};
        long left = 3000 - (now_ms() - t0);
        if (left <= 0 || poll(&q, 1, (int)left) <= 0)
            break;
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    printf("received %zu\n", got);
    close(fd);
    close(l);
    unlink(sock);
    return 0;
}

/* Wait for DIR/NAME to appear (inotify), then rename a symlink over it at once. */
static int cmd_swap(const char *dir, const char *name, const char *target, int times)
{
    char path[512], tmp[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.swap", dir);
    int in = inotify_init1(0);
    if (in < 0 || inotify_add_watch(in, dir, IN_CREATE) < 0) {
        perror("inotify");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    int swapped = 0;
    char ev[4096];
    while (swapped < times) {
        unlink(tmp);
        if (symlink(target, tmp) != 0)
            return 1;
        struct stat st;
        while (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
            if (read(in, ev, sizeof(ev)) <= 0)
                return 1;
        if (rename(tmp, path) == 0)
            swapped++;
    }
    printf("swapped %d\n", swapped);
    return 0;
}

/* A stream of events carrying many new long names (issue 8 item 4): events
 * allocs, each with a stack of per_event names never seen before, each name
 * len bytes ("f<event>_<frame>_" then 'x's), written as .htev to stdout. */
static int cmd_longnames(long events, long per_event, long len)
{
    char *name = malloc((size_t)len + 64);
    if (!name || len < 24)
        return 2;
    for (long e = 0; e < events; e++) {
        printf("{\"t\":%ld,\"ev\":\"alloc\",\"heap\":1,\"addr\":%ld,\"size\":64,\"stack\":[", e + 1,
               4096 + 64 * e);
        for (long k = 0; k < per_event; k++) {
            int n = snprintf(name, 64, "f%ld_%ld_", e, k);
            memset(name + n, 'x', (size_t)(len - n));
            name[len] = '\0';
            printf("%s\"%s\"", k ? "," : "", name);
        }
        printf("]}\n");
    }
    free(name);
    return fflush(stdout) == 0 ? 0 : 1;
}

static void put_varint(uint64_t v, FILE *f)
{
    while (v >= 0x80) {
        fputc((int)(v | 0x80) & 0xff, f);
        v >>= 7;
    }
    fputc((int)v, f);
}

/* The binary twin (htevb.h) on stdout: n allocs of 32 bytes at distinct
 * addresses, 1 ns apart, none freed, no stacks. */
static int cmd_manyallocs(long n)
{
    fwrite("HTEVB1\n\0", 1, 8, stdout);
    for (long i = 0; i < n; i++) {
        /* 'e', kind alloc (1), fields heap|size, dt, addr, heap, size */
        fputc('e', stdout);
        fputc(1, stdout);
        fputc(1 | 4, stdout);
        put_varint(1, stdout);
        put_varint(0x10000 + 64 * (uint64_t)i, stdout);
        put_varint(1, stdout);
        put_varint(32, stdout);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

static int cmd_holdreplies(const char *sock, int n, const char *req, const char *stopfile)
{
    int fds[256];
    if (n < 1 || n > 256)
        return 2;
    char line[4096];
    snprintf(line, sizeof(line), "%s\n", req);
    for (int i = 0; i < n; i++) {
        fds[i] = connect_to(sock);
        if (fds[i] < 0 || send_all(fds[i], line, strlen(line)) != 0)
            return 1;
    }
    printf("holding %d\n", n);
    fflush(stdout);
    for (int t = 0; t < 6000 && access(stopfile, F_OK) != 0; t++)
        usleep(10000);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 0;
}

static int cmd_stall(const char *sock, int seconds)
{
    int fd = connect_to(sock);
    const char *q =
        "{\"v\":1,\"id\":1,\"cmd\":\"stacks\",\"args\":{\"top\":10000,\"no_default_cull\":true}}\n";
    double end = now_ms() + seconds * 1e3;
    long sent = 0;
    int cut = 0;
    while (now_ms() < end && !cut) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 100) < 0)
            break;
        if (p.revents & (POLLERR | POLLHUP))
            cut = 1;
        else if (p.revents & POLLOUT) {
            ssize_t k = send(fd, q, strlen(q), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0)
                sent++;
            else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                cut = 1;
        }
    }
    printf("stall: sent %ld requests, %s\n", sent, cut ? "cut off" : "still connected");
    close(fd);
    return cut;
}

/* Reply lines of one request, as they come. */
struct reader {
    int fd;
    char *buf;
    size_t len, cap;
};

static char *reader_line(struct reader *r, size_t chunk, int delay_ms)
{
    for (;;) {
        char *nl = r->len ? memchr(r->buf, '\n', r->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - r->buf);
            char *line = malloc(n + 1);
            memcpy(line, r->buf, n);
            line[n] = '\0';
            memmove(r->buf, nl + 1, r->len - n - 1);
            r->len -= n + 1;
            return line;
        }
        if (r->len + chunk + 1 > r->cap) {
            r->cap = (r->len + chunk + 1) * 2;
            r->buf = realloc(r->buf, r->cap);
        }
        if (delay_ms)
            usleep((useconds_t)delay_ms * 1000);
        ssize_t k = recv(r->fd, r->buf + r->len, chunk, 0);
        if (k <= 0)
            return NULL;
        r->len += (size_t)k;
    }
}

/* Items of the arrays a reply cuts across frames. */
static long frame_items(const cJSON *data)
{
    static const char *const keys[] = {"rows", "samples", "lines"};
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(data, "result");
    long n = 0;
    for (int k = 0; k < 3; k++) {
        n += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(data, keys[k]));
        if (in)
            n += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(in, keys[k]));
    }
    return n;
}

/* Read one reply (until a frame without more); 0 if every frame was ok. */
static int read_reply(struct reader *r, size_t chunk, int delay_ms, long *frames, long *items,
                      long *bytes)
{
    for (;;) {
        char *line = reader_line(r, chunk, delay_ms);
        if (!line) {
            fprintf(stderr, "reply ended without its last frame\n");
            return 1;
        }
        *bytes += (long)strlen(line) + 1;
        cJSON *env = cJSON_Parse(line);
        free(line);
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "ok"))) {
            fprintf(stderr, "bad frame %ld\n", *frames);
            cJSON_Delete(env);
            return 1;
        }
        (*frames)++;
        *items += frame_items(cJSON_GetObjectItemCaseSensitive(env, "data"));
        int more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
        cJSON_Delete(env);
        if (!more)
            return 0;
    }
}

static int cmd_slowread(const char *sock, const char *req, size_t chunk, int delay_ms)
{
    struct reader r = {connect_to(sock), NULL, 0, 0};
    char line[4096];
    int n = snprintf(line, sizeof(line), "%s\n", req);
    send_all(r.fd, line, (size_t)n);
    long frames = 0, items = 0, bytes = 0;
    int rc = read_reply(&r, chunk, delay_ms, &frames, &items, &bytes);
    printf("frames %ld items %ld bytes %ld\n", frames, items, bytes);
    close(r.fd);
    free(r.buf);
    return rc;
}

/* CPU time the main thread of pid has used, ms (utime + stime, fields 14
 * and 15 of /proc/PID/task/PID/stat, in clock ticks: proc(5)); -1 if unread. */
static double thread_cpu_ms(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/task/%ld/stat", pid, pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The name (field 2) is in parentheses and may hold spaces: fields
     * count from the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

static int cmd_pingwatch(const char *sock, const char *stopfile, double max_ms, long pid,
                         double max_cpu_ms)
{
    struct reader r = {connect_to(sock), NULL, 0, 0};
    const char *ping = "{\"v\":1,\"id\":7,\"cmd\":\"ping\"}\n";
    /* A ping that waits ten times the limit (at least 2 s) has failed already. */
    double wait_ms = max_ms * 10 > 2000 ? max_ms * 10 : 2000;
    struct timeval tv = {(time_t)(wait_ms / 1e3), 0};
    setsockopt(r.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    double worst = 0, worst_cpu = 0;
    long pings = 0;
    struct stat st;
    double give_up = now_ms() + 300e3;
    while (stat(stopfile, &st) != 0 && now_ms() < give_up) {
        double t0 = now_ms(), c0 = pid ? thread_cpu_ms(pid) : 0;
        send_all(r.fd, ping, strlen(ping));
        char *line = reader_line(&r, 4096, 0);
        if (!line || !strstr(line, "\"ok\":true")) {
            fprintf(stderr, "pingwatch: no answer within %.0f ms after %ld pings\n", wait_ms,
                    pings);
            return 1;
        }
        free(line);
        double dt = now_ms() - t0;
        if (dt > worst)
            worst = dt;
        if (pid) {
            double c1 = thread_cpu_ms(pid);
            if (c0 < 0 || c1 < 0) {
                fprintf(stderr, "pingwatch: cannot read the CPU time of %ld\n", pid);
                return 1;
            }
            if (c1 - c0 > worst_cpu)
                worst_cpu = c1 - c0;
        }
        pings++;
        usleep(10000);
    }
    printf("pingwatch: %ld pings, slowest %.1f ms (limit %.0f)", pings, worst, max_ms);
    if (pid)
        printf(", most loop CPU while one waited %.0f ms (limit %.0f)", worst_cpu, max_cpu_ms);
    printf("\n");
    close(r.fd);
    free(r.buf);
    return pings > 0 && worst <= max_ms && (!pid || worst_cpu <= max_cpu_ms) ? 0 : 1;
}

static int cmd_halfclose(const char *sock, long n, const char *req)
{
    struct reader r = {connect_to(sock), NULL, 0, 0};
    const char *ping = "{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n";
    size_t pl = strlen(ping), rl = req ? strlen(req) + 1 : 0;
    size_t total = pl * (size_t)n + rl;
    char *all = malloc(total + 1);
    for (long i = 0; i < n; i++)
        memcpy(all + pl * (size_t)i, ping, pl);
    if (req) {
        memcpy(all + pl * (size_t)n, req, rl - 1);
        all[total - 1] = '\n';
    }
    /* Sent from a child so the pipe never deadlocks against our reading. */
    pid_t pid = fork();
    if (pid == 0) {
        send_all(r.fd, all, total);
        shutdown(r.fd, SHUT_WR);
        _exit(0);
    }
    long answers = 0, frames = 0, items = 0, bytes = 0;
    int rc = 0;
    for (long i = 0; i < n; i++) {
        char *line = reader_line(&r, 65536, 0);
        if (!line)
            break;
        answers += strstr(line, "\"ok\":true") != NULL;
        free(line);
    }
    if (req)
        rc = read_reply(&r, 65536, 0, &frames, &items, &bytes);
    char *extra = reader_line(&r, 65536, 0);
    printf("answers %ld frames %ld items %ld bytes %ld%s\n", answers, frames, items, bytes,
           extra ? " (and more lines)" : "");
    free(extra);
    waitpid(pid, NULL, 0);
    close(r.fd);
    free(r.buf);
    free(all);
    return rc || answers != n;
}

/* pipeline: where it was when the time ran out. */
static volatile long pipe_sent = -1, pipe_read;

static void pipeline_alarm(int sig)
{
    char msg[160];
    int n = snprintf(msg, sizeof(msg), "pipeline: stuck: %s, %ld replies read\n",
                     pipe_sent < 0 ? "still in the write" : "write done", pipe_read);
    (void)sig;
    if (write(1, msg, (size_t)n) < 0)
        _exit(2);
    _exit(1);
}

static int cmd_pipeline(const char *sock, long n, int secs)
{
    size_t cap = (size_t)n * 48 + 1, len = 0;
    char *buf = malloc(cap);
    for (long i = 1; i <= n; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "{\"v\":1,\"id\":%ld,\"cmd\":\"ping\",\"args\":{}}\n", i);
    int fd = connect_to(sock);
    signal(SIGALRM, pipeline_alarm);
    alarm((unsigned)secs);
    double t0 = now_ms();
    if (send_all(fd, buf, len) != 0) {
        printf("pipeline: write failed: %s\n", strerror(errno));
        return 1;
    }
    pipe_sent = (long)len;
    struct reader r = {fd, NULL, 0, 0};
    for (long i = 1; i <= n; i++, pipe_read++) {
        char *line = reader_line(&r, 65536, 0);
        cJSON *env = line ? cJSON_Parse(line) : NULL;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(env, "id");
        int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "ok")) && cJSON_IsNumber(id) &&
                 id->valuedouble == (double)i;
        if (!ok) {
            printf("pipeline: reply %ld: %s\n", i, line ? line : "connection closed");
            return 1;
        }
        cJSON_Delete(env);
        free(line);
    }
    alarm(0);
    printf("pipeline: %ld requests (%zu bytes) in one write, %ld replies in order, %.0f ms\n", n,
           len, pipe_read, now_ms() - t0);
    free(r.buf);
    free(buf);
    close(fd);
    return 0;
}

static int cmd_neverread(const char *sock, int secs)
{
    int fd = connect_to(sock);
    const char *q = "{\"v\":1,\"id\":1,\"cmd\":\"ping\"}\n";
    size_t qn = strlen(q);
    double t0 = now_ms(), last_sent = t0;
    long sent = 0;
    int cut = 0;
    while (now_ms() - t0 < secs * 1e3 && !cut) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 100) < 0)
            break;
        if (p.revents & (POLLERR | POLLHUP)) {
            cut = 1;
        } else if (p.revents & POLLOUT) {
            ssize_t k = send(fd, q, qn, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sent += k;
                last_sent = now_ms();
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                cut = 1;
            }
        }
    }
    double t = now_ms();
    printf("neverread: wrote %ld bytes, %s %.0f ms after the last write went in\n", sent,
           cut ? "closed by the daemon" : "never cut off,", t - last_sent);
    close(fd);
    return !cut;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "norm"))
        return cmd_norm();
    if (argc >= 3 && !strcmp(argv[1], "get"))
        return cmd_get(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[1], "raw"))
        return cmd_raw(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "bigline"))
        return cmd_bigline(argv[2], (size_t)atol(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "partial"))
        return cmd_partial(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "noread"))
        return cmd_noread(argv[2]);
    if (argc >= 5 && !strcmp(argv[1], "concurrent"))
        return cmd_concurrent(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 5 && !strcmp(argv[1], "pausedload"))
        return cmd_pausedload(argv[2], argv[3], argv[4], argc >= 6 ? argv[5] : NULL);
    if (argc >= 4 && !strcmp(argv[1], "halfload"))
        return cmd_halfload(argv[2], argv[3]);
    if (argc >= 2 && !strcmp(argv[1], "uintargs"))
        return cmd_uintargs();
    if (argc >= 2 && !strcmp(argv[1], "jsonlines"))
        return cmd_jsonlines();
    if (argc >= 4 && !strcmp(argv[1], "req"))
        return cmd_req(argv[2], argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "hold"))
        return cmd_hold(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "fakeserver"))
        return cmd_fakeserver(argv[2]);
    if (argc >= 6 && !strcmp(argv[1], "swap"))
        return cmd_swap(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc >= 3 && !strcmp(argv[1], "manyallocs"))
        return cmd_manyallocs(atol(argv[2]));
    if (argc >= 5 && !strcmp(argv[1], "longnames"))
        return cmd_longnames(atol(argv[2]), atol(argv[3]), atol(argv[4]));
    if (argc >= 4 && !strcmp(argv[1], "stall"))
        return cmd_stall(argv[2], atoi(argv[3]));
    if (argc >= 6 && !strcmp(argv[1], "slowread"))
        return cmd_slowread(argv[2], argv[3], (size_t)atol(argv[4]), atoi(argv[5]));
    if (argc >= 5 && !strcmp(argv[1], "pingwatch"))
        return cmd_pingwatch(argv[2], argv[3], atof(argv[4]), argc >= 7 ? atol(argv[5]) : 0,
                             argc >= 7 ? atof(argv[6]) : 0);
    if (argc >= 4 && !strcmp(argv[1], "halfclose"))
        return cmd_halfclose(argv[2], atol(argv[3]), argc >= 5 ? argv[4] : NULL);
    if (argc >= 6 && !strcmp(argv[1], "holdreplies"))
        return cmd_holdreplies(argv[2], atoi(argv[3]), argv[4], argv[5]);
    if (argc >= 5 && !strcmp(argv[1], "pipeline"))
        return cmd_pipeline(argv[2], atol(argv[3]), atoi(argv[4]));
    if (argc >= 4 && !strcmp(argv[1], "neverread"))
        return cmd_neverread(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: see the comment at the top of ht-testtool.c\n");
    return 2;
}
