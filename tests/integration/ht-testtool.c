/*
 * Test helper for the integration suite:
 *   norm                    JSON on stdin -> formatted, wall-clock fields removed
 *   get PATH                print a value of JSON on stdin ("rows.0.frame")
 *   raw SOCK                send stdin's bytes as they are, print every reply line (2 s idle)
 *   bigline SOCK N          a request line of N bytes, then a ping: both must be answered
 *   partial SOCK            half a request without newline, then disconnect
 *   noread SOCK             pour queries without reading: the daemon must cut us off
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

static int cmd_get(const char *path)
{
    size_t n;
    char *text = read_all(stdin, &n);
    cJSON *root = cJSON_Parse(text), *o = root;
    free(text);
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *save, *tok = strtok_r(buf, ".", &save); o && tok; tok = strtok_r(NULL, ".", &save)) {
        if (cJSON_IsArray(o))
            o = cJSON_GetArrayItem(o, atoi(tok));
        else
            o = cJSON_GetObjectItemCaseSensitive(o, tok);
    }
    int rc = 0;
    if (!o) {
        puts("(missing)");
        rc = 1;
    } else if (cJSON_IsString(o)) {
        puts(o->valuestring);
    } else if (cJSON_IsNumber(o)) {
        printf("%.0f\n", o->valuedouble);
    } else {
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        free(s);
    }
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
    const char *q =
        "{\"v\":1,\"id\":1,\"cmd\":\"stacks\",\"args\":{\"top\":10000,\"no_default_cull\":true}}\n";
    time_t start = time(NULL);
    long sent = 0;
    /* Keep writing until the daemon drops us (EPIPE/ECONNRESET) or 60 s pass. */
    while (time(NULL) - start < 60) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 1000) < 0)
            break;
        if (p.revents & (POLLERR | POLLHUP))
            break;
        if (!(p.revents & POLLOUT))
            continue;
        ssize_t k = send(fd, q, strlen(q), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (k <= 0)
            break;
        sent++;
    }
    int cut = time(NULL) - start < 60;
    printf("noread: sent %ld requests, %s\n", sent,
           cut ? "disconnected by the daemon" : "never cut off");
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

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
    static const char *const codes[] = {"EFULL", "ETIMEDOUT", "EMFILE", "ENFILE", "EPERM", "ok"};
    int count[6] = {0}, open = 0, silent = 0, other = 0;
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
        while (k < 6 && strcmp(code, codes[k]))
            k++;
        if (k < 6)
            count[k]++;
        else
            other++;
    }
    printf("open=%d silent=%d first_timeout_ms=%ld", open, silent, first_timeout);
    for (int k = 0; k < 6; k++)
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

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "norm"))
        return cmd_norm();
    if (argc >= 3 && !strcmp(argv[1], "get"))
        return cmd_get(argv[2]);
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
    fprintf(stderr, "usage: see the comment at the top of ht-testtool.c\n");
    return 2;
}
