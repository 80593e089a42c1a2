/* heaptracectl load FILE.etl: a Windows trace converted on the ctl's side into .htevb
 * streams the daemon loads, one session per process with heap or VirtualAlloc events. The
 * ctl does it because the reader seeks (each processor's buffers are interleaved in the file
 * and merged by time) while a load streams bytes in order; the daemon sees ordinary .htevb
 * streams. Each process is its own pass over the file: memory does not grow with the number
 * of processes or the size of the file. */
#include "ctl.h"
#include "etl-procs.h"

#include "etl-events.h"
#include "etl-read.h"
#include "htevb.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#define CHUNK (1 << 16)

struct etl_load {
    struct ctl *c;
    struct htevb_writer w;
    struct etl_events *ev;
    char buf[CHUNK];
    size_t n;
    int send_failed;
};

/* One read per buffer, straight into the reader's buffer: pread on POSIX (no stdio buffer
 * to fill and throw away at each seek). */
static int64_t read_at(void *arg, uint64_t off, void *buf, size_t n)
{
#ifdef _WIN32
    if (_fseeki64(arg, (long long)off, SEEK_SET) != 0)
        return -1;
    return (int64_t)fread(buf, 1, n, arg);
#else
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fileno(arg), (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    return (int64_t)got;
#endif
}

/* The file mapped for the readers (POSIX): its uncompressed buffers parsed in place, where
 * pread copied each (the kernel's copies were a
 * fifth of a load's time, perf); each buffer's pages dropped once the reader leaves it, so
 * that the ctl's resident memory stays a few buffers whatever the file's size. A file
 * shortened while it loads would end the ctl with SIGBUS (a page past the file's end):
 * map_bus puts a page of zeros there instead, counts it, and the load says the file changed.
 * No mapping (Windows, an empty file, mmap refused): the readers read by offset. */
struct etl_map {
    uint8_t *base;
    uint64_t size;
    uint64_t page;
};

#ifndef _WIN32
/* The mapping the SIGBUS handler may patch (one load at a time), and the pages it patched. */
static struct etl_map *bus_map;
static volatile sig_atomic_t bus_pages;
static struct sigaction bus_old;

/* A read of the mapping past the file's end (the file shrank): the page becomes a private
 * page of zeros, which the reader takes for the end of its records, and the read is retried
 * on return. mmap is a plain system call on Linux (not on POSIX's async-signal-safe list).
 * Any other SIGBUS: the handler before ours, the fault retried into it. */
static void map_bus(int sig, siginfo_t *si, void *uc)
{
    const struct etl_map *m = bus_map;
    uint8_t *a = si->si_addr;
    (void)sig, (void)uc;
    if (m && a >= m->base && a < m->base + m->size) {
        uint8_t *pg = m->base + (uint64_t)(a - m->base) / m->page * m->page;
        if (mmap(pg, m->page, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0) !=
            MAP_FAILED) {
            bus_pages++;
            return;
        }
    }
    sigaction(SIGBUS, &bus_old, NULL);
}

static void map_bus_catch(struct etl_map *m)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = map_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    bus_map = m;
    bus_pages = 0;
    if (sigaction(SIGBUS, &sa, &bus_old) != 0)
        bus_map = NULL;
}
#endif

/* Pages of the file that were gone when read (the file shrank while it loaded). */
static uint64_t map_lost_pages(void)
{
#ifndef _WIN32
    return (uint64_t)bus_pages;
#else
    return 0;
#endif
}

static void map_open(struct etl_map *m, FILE *in, uint64_t size)
{
    memset(m, 0, sizeof(*m));
#ifndef _WIN32
    long page = sysconf(_SC_PAGESIZE);
    void *p = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fileno(in), 0) : MAP_FAILED;
    if (p == MAP_FAILED || page <= 0)
        return;
    m->base = p;
    m->size = size;
    m->page = (uint64_t)page;
    map_bus_catch(m);
#else
    (void)in, (void)size;
#endif
}

static void map_close(struct etl_map *m)
{
#ifndef _WIN32
    if (m->base) {
        if (bus_map == m) {
            sigaction(SIGBUS, &bus_old, NULL);
            bus_map = NULL;
        }
        munmap(m->base, m->size);
    }
#endif
    m->base = NULL;
}

/* A buffer read: its whole pages dropped from the ctl's memory (they stay in the page cache). */
static void map_done(void *arg, uint64_t off, uint32_t n)
{
#ifndef _WIN32
    const struct etl_map *m = arg;
    uint64_t a = (off + m->page - 1) / m->page * m->page, e = (off + n) / m->page * m->page;
    if (e > a)
        madvise(m->base + a, e - a, MADV_DONTNEED);
#else
    (void)arg, (void)off, (void)n;
#endif
}

static void map_reader(struct etl_reader *rd, struct etl_map *m)
{
    if (m->base)
        etl_reader_map(rd, m->base, map_done, m);
}

/* One load chunk: its length in decimal and a newline, then its bytes (ctl_load's framing). */
static void flush(struct etl_load *l)
{
    char hdr[32];
    if (l->n == 0 || l->send_failed)
        return;
    int hl = snprintf(hdr, sizeof(hdr), "%zu\n", l->n);
    if (conn_send(l->c->conn, hdr, (size_t)hl) || conn_send(l->c->conn, l->buf, l->n))
        l->send_failed = 1;
    l->n = 0;
}

static void write_cb(void *arg, const void *p, size_t n)
{
    struct etl_load *l = arg;
    while (n > 0) {
        size_t k = CHUNK - l->n < n ? CHUNK - l->n : n;
        memcpy(l->buf + l->n, p, k);
        l->n += k;
        p = (const char *)p + k;
        n -= k;
        if (l->n == CHUNK)
            flush(l);
    }
}

static void event_cb(void *arg, const struct ht_event *ev)
{
    struct etl_load *l = arg;
    if (ev->kind == HT_EV_PROCESS) {
        static struct etl_events_stats st;
        etl_events_stats(l->ev, &st);
        htevb_write_process(&l->w, ev->t, ev->size, st.name);
    } else {
        htevb_write_event(&l->w, ev);
    }
}

int ctl_etl_head(const unsigned char *h, size_t n)
{
    /* The first buffer's header (0x48 bytes), then the log-file header record: a SYSTEM32
     * or SYSTEM64 trace header (ntwmi.h TRACE_HEADER_TYPE_SYSTEM32/64, marker 0xC0) with
     * HookId 0. */
    return n >= 0x50 && (h[0x48 + 3] & 0xC0) == 0xC0 && (h[0x48 + 2] == 1 || h[0x48 + 2] == 2) &&
           h[0x48 + 6] == 0 && h[0x48 + 7] == 0;
}

int ctl_etl_is(FILE *in)
{
    unsigned char h[0x50];
    int ok = ctl_etl_head(h, fread(h, 1, sizeof(h), in));
    rewind(in);
    return ok;
}

/* The reader's errors and Windows' own losses, once for the file: the
 * number of the reader's errors (Windows' losses are the trace's, said in
 * every reply's quality, not an error of the file). */
static uint64_t report_reader(const char *path, const struct etl_reader *rd)
{
    const struct etl_counts *c = etl_reader_counts(rd);
    uint64_t errors = 0;
    for (int k = 0; k < ETL_ERR_N; k++)
        errors += c->err[k];
    for (int k = 0; k < ETL_ERR_N; k++)
        if (c->err[k])
            fprintf(stderr, "heaptracectl: %s: %llu x %s (%s), first at offset %llu\n", path,
                    (unsigned long long)c->err[k], etl_err_name(k), etl_err_msg(k),
                    (unsigned long long)c->err_first[k]);
    if (c->backwards)
        fprintf(stderr,
                "heaptracectl: %s: %llu records earlier than the record before them on their "
                "processor (a damaged clock or file): their events are out of order\n",
                path, (unsigned long long)c->backwards);
    if (c->flag_events_lost || c->flag_buffer_lost || etl_reader_header(rd)->buffers_lost)
        fprintf(stderr,
                "heaptracectl: %s: Windows lost data: %llu buffers flagged events lost, %llu "
                "flagged buffers lost, %u buffers lost\n",
                path, (unsigned long long)c->flag_events_lost,
                (unsigned long long)c->flag_buffer_lost, etl_reader_header(rd)->buffers_lost);
    return errors;
}

static void report_process(const char *path, uint32_t pid, const struct etl_events *ev)
{
    struct etl_events_stats st;
    etl_events_stats(ev, &st);
    fprintf(stderr,
            "%s: process %u (%s): %llu events, %llu stacks matched, %llu stack-key "
            "references unresolved, %llu dropped (more than %u waiting for their "
            "definitions: their events have no stack)\n",
            path, pid, ctl_text(st.name), (unsigned long long)st.corr.events_in,
            (unsigned long long)st.corr.stacks_matched, (unsigned long long)st.key_unresolved,
            (unsigned long long)(st.key_dropped + st.key_evicted), ETL_KEYS_WAITING);
}

static long long file_size(FILE *in)
{
#ifdef _WIN32
    return _fseeki64(in, 0, SEEK_END) == 0 ? _ftelli64(in) : -1;
#else
    return fseeko(in, 0, SEEK_END) == 0 ? (long long)ftello(in) : -1;
#endif
}

static uint64_t error_total(const struct etl_reader *rd)
{
    uint64_t n = 0;
    for (int k = 0; k < ETL_ERR_N; k++)
        n += etl_reader_counts(rd)->err[k];
    return n;
}

/* This pass read what the scan did not: the file changed (shrank, grew, was rewritten)
 * since, and the session holds what this pass could read. */
static int changed(const char *path, const struct etl_procs *ps, const struct etl_reader *rd,
                   uint32_t pid)
{
    uint64_t lost = map_lost_pages();
    if (error_total(rd) == ps->errors && lost == 0)
        return 0;
    report_reader(path, rd);
    fprintf(stderr,
            "heaptracectl: %s changed while loaded (the errors above differ from those of "
            "the scan of its processes, or %llu pages of it were gone when read): session "
            "of process %u holds what could be read\n",
            path, (unsigned long long)lost, pid);
    return 1;
}

/* Process p's events as an .htevb stream in load chunks: 0, or EXIT_UNREACHABLE;
 * *read_error set when the file could not be read whole. The file is read to the size
 * it had at the scan. */
static int send_process(struct ctl *c, FILE *in, struct etl_map *m, const char *path,
                        const struct etl_procs *ps, const struct etl_proc *p, int *read_error)
{
    uint32_t pid = p->pid;
    struct etl_load *l = calloc(1, sizeof(*l));
    struct etl_reader *rd = NULL;
    struct stack_intern si;
    int rc = EXIT_CMD, si_ok = 0;
    *read_error = 1;
    if (!l || etl_reader_new(&rd, read_at, in, ps->size, NULL) != 0)
        goto out;
    map_reader(rd, m);
    l->c = c;
    si_ok = stack_intern_init(&si, 1u << 24, 1u << 24) == 0;
    if (!si_ok)
        goto out;
    /* HTEVB1: the daemon reads it as fast as HTEVB2, and writing it costs nothing, where
     * HTEVB2's coding against past events was a third of the ctl's time (perf, bench-etl.sh);
     * over a local socket its smaller size buys nothing. */
    if (htevb_writer_init_version(&l->w, &si, 1, write_cb, l) != 0) {
        htevb_writer_close(&l->w);
        goto out;
    }
    int ok = etl_reader_open(rd) == 0 &&
             etl_events_new(&l->ev, &si, etl_reader_header(rd), pid, event_cb, l) == 0;
    if (ok)
        etl_events_window(l->ev, p->from, p->to);
    ok = ok && etl_events_run(l->ev, rd) == 0;
    htevb_writer_close(&l->w);
    flush(l);
    if (l->ev)
        report_process(path, pid, l->ev);
    /* The file could not be read as a whole: the session holds what was sent. */
    *read_error = changed(path, ps, rd, pid) || !ok;
    rc = l->send_failed ? EXIT_UNREACHABLE : EXIT_OK;
out:
    if (l)
        etl_events_free(l->ev);
    if (si_ok)
        stack_intern_close(&si);
    etl_reader_free(rd);
    free(l);
    return rc;
}

int ctl_send(struct ctl *c, const char *cmd, cJSON *args, int64_t *id);

#define SESSION_NAME_MAX 63 /* bytes: the daemon refuses longer names (session-access.c) */

/* The image part of a session name cut to n bytes, on a UTF-8 character's start. */
static size_t utf8_cut(const char *s, size_t n)
{
    size_t len = strlen(s);
    if (len <= n)
        return len;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* The session's name: `<image>.<pid>`, or `N.<pid>` under --name N; a process whose
 * Process event is not in the trace is "process.<pid>". The k-th process of a pid in the
 * trace (Windows reuses them) is `<image>.<pid>.<k>`. An image name too long for a session
 * name is cut, and said (a file may name its images as it likes). */
static cJSON *session_args(const struct ctl *c, const char *path, const struct etl_proc *p)
{
    cJSON *args = c->args ? cJSON_Duplicate(c->args, 1) : cJSON_CreateObject();
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(c->args, "name");
    const char *base = cJSON_IsString(n) ? n->valuestring : p->name[0] ? p->name : "process";
    char suffix[32], name[300];
    int sl = snprintf(suffix, sizeof(suffix), ".%u", p->pid);
    if (p->nth > 1)
        snprintf(suffix + sl, sizeof(suffix) - (size_t)sl, ".%u", p->nth);
    size_t keep = strlen(base);
    if (!cJSON_IsString(n) && keep + strlen(suffix) > SESSION_NAME_MAX) {
        keep = utf8_cut(base, SESSION_NAME_MAX - strlen(suffix));
        fprintf(stderr,
                "heaptracectl: %s: process %u: image name cut to %zu bytes in its "
                "session name (at most %d bytes)\n",
                path, p->pid, keep, SESSION_NAME_MAX);
    }
    snprintf(name, sizeof(name), "%.*s%s", (int)keep, base, suffix);
    cJSON_DeleteItemFromObjectCaseSensitive(args, "name");
    cJSON_AddStringToObject(args, "name", name);
    return args;
}

/* One process into a new session: 0, EXIT_CMD (this one failed, the others may go on) or
 * EXIT_UNREACHABLE (the daemon is gone: what was loaded before stays). */
static int load_process(struct ctl *c, FILE *in, struct etl_map *m, const char *path,
                        const struct etl_procs *ps, const struct etl_proc *p)
{
    int64_t id;
    cJSON *env;
    int rc = ctl_send(c, "load", session_args(c, path, p), &id);
    if (rc == 0)
        rc = ctl_read_frame(c, id, &env); /* acknowledged: streaming may start */
    if (rc != 0)
        return rc;
    const cJSON *sid =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(env, "data"), "session");
    if (!c->json)
        fprintf(stderr, "loading %s process %u into session %d...\n", path, p->pid,
                cJSON_IsNumber(sid) ? sid->valueint : 0);
    cJSON_Delete(env);
    int read_error = 0;
    /* EXIT_CMD: nothing could be converted (memory, the file): the stream still ends, so
     * that the connection can carry the next process. */
    rc = send_process(c, in, m, path, ps, p, &read_error);
    if (rc != EXIT_UNREACHABLE && conn_send(c->conn, "0\n", 2) != 0)
        rc = EXIT_UNREACHABLE;
    if (rc == EXIT_UNREACHABLE) {
        fprintf(stderr, "heaptracectl: lost the connection while loading process %u\n", p->pid);
        if (ctl_read_frame(c, id, &env) == EXIT_OK)
            cJSON_Delete(env);
        return rc;
    }
    int conv = rc;
    if ((rc = ctl_read_frame(c, id, &env)) != 0)
        return rc;
    cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
    cJSON_Delete(env);
    render_reply(c, sum);
    cJSON_Delete(sum);
    if (conv != 0)
        fprintf(stderr,
                "heaptracectl: %s: process %u could not be converted (out of memory, or the file "
                "could not be sized)\n",
                path, p->pid);
    else if (read_error)
        fprintf(stderr,
                "heaptracectl: read error on %s (see above): session of process %u "
                "holds what was sent\n",
                path, p->pid);
    return conv != 0 || read_error ? EXIT_CMD : EXIT_OK;
}

static int picked(const struct ctl *c, const struct etl_proc *p)
{
    if (p->events == 0)
        return 0;
    if (c->etl_pid && p->pid != c->etl_pid)
        return 0;
    return !c->etl_process || etl_proc_name_eq(p->name, c->etl_process);
}

/* None of the trace's processes is the one asked for: say which there are. */
static int none_picked(const struct ctl *c, const char *path, const struct etl_procs *ps)
{
    fprintf(stderr, "heaptracectl: %s: no process", path);
    if (c->etl_pid)
        fprintf(stderr, " %u", c->etl_pid);
    if (c->etl_process)
        fprintf(stderr, " named %s", ctl_text(c->etl_process));
    fprintf(stderr, " with heap or VirtualAlloc events; there are:");
    int any = 0;
    for (uint32_t i = 0; i < ps->n; i++)
        if (ps->v[i].events) {
            fprintf(stderr, "%s %s (pid %u, %llu events)", any ? "," : "",
                    ps->v[i].name[0] ? ctl_text(ps->v[i].name) : "?", ps->v[i].pid,
                    (unsigned long long)ps->v[i].events);
            any = 1;
        }
    fprintf(stderr, "%s\n", any ? "" : " none");
    return EXIT_CMD;
}

/* The processes of the file, each loaded in turn; a failed one is reported and the next
 * goes on, a lost daemon stops (the sessions made stay). */
static int load_each(struct ctl *c, FILE *in, struct etl_map *m, const char *path,
                     const struct etl_procs *ps)
{
    uint32_t made = 0, failed = 0, want = 0;
    for (uint32_t i = 0; i < ps->n; i++)
        want += picked(c, &ps->v[i]);
    if (want == 0)
        return none_picked(c, path, ps);
    for (uint32_t i = 0; i < ps->n; i++) {
        if (!picked(c, &ps->v[i]))
            continue;
        int rc = load_process(c, in, m, path, ps, &ps->v[i]);
        if (rc == EXIT_UNREACHABLE) {
            fprintf(stderr,
                    "heaptracectl: %s: %u of %u processes loaded before the daemon "
                    "went away; their sessions stay\n",
                    path, made, want);
            return rc;
        }
        if (rc == 0)
            made++;
        else
            failed++;
    }
    if (failed)
        fprintf(stderr, "heaptracectl: %s: %u of %u processes loaded, %u failed (above)\n", path,
                made, want, failed);
    return failed ? EXIT_CMD : EXIT_OK;
}

int ctl_etl_load(struct ctl *c, FILE *in, const char *path)
{
    struct etl_reader *rd = NULL;
    struct etl_procs ps;
    struct etl_map m;
    memset(&ps, 0, sizeof(ps));
    long long size = file_size(in);
    int rc = EXIT_CMD;
    map_open(&m, in, size > 0 ? (uint64_t)size : 0);
    if (size < 0 || etl_reader_new(&rd, read_at, in, (uint64_t)size, NULL) != 0) {
        fprintf(stderr, "heaptracectl: %s: cannot read\n", path);
        goto out;
    }
    map_reader(rd, &m);
    int scan = etl_reader_open(rd);
    if (scan == 0)
        scan = etl_procs_scan(&ps, rd);
    uint64_t errors = report_reader(path, rd);
    ps.size = (uint64_t)size;
    ps.errors = errors;
    if (map_lost_pages()) {
        fprintf(stderr,
                "heaptracectl: %s changed while loaded: %llu pages of it were gone when read\n",
                path, (unsigned long long)map_lost_pages());
        errors++;
    }
    if (ps.dropped)
        fprintf(stderr,
                "heaptracectl: %s: more than %d processes: %llu records of the "
                "others not listed (processes_dropped)\n",
                path, ETL_PROCS_MAX, (unsigned long long)ps.dropped);
    if (scan != 0 && ps.n == 0)
        goto out;
    rc = load_each(c, in, &m, path, &ps);
    /* A damaged file: the sessions keep what could be read, and the exit
     * status says the file was not read whole (as ht-convert --stats does). */
    if (rc == EXIT_OK && errors) {
        fprintf(stderr,
                "heaptracectl: %s: %llu errors in the file (above): the sessions hold what "
                "could be read\n",
                path, (unsigned long long)errors);
        rc = EXIT_CMD;
    }
out:
    etl_procs_free(&ps);
    etl_reader_free(rd);
    map_close(&m);
    return rc;
}
