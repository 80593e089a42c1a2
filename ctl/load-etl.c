/* heaptracectl load FILE.etl: a Windows trace converted on the ctl's side into the .htevb
 * stream the daemon loads. The ctl does it because the reader seeks (each processor's
 * buffers are interleaved in the file and merged by time) while a load streams bytes in
 * order; the daemon sees an ordinary .htevb stream. */
#include "ctl.h"

#include "etl-events.h"
#include "etl-read.h"
#include "htevb.h"
#include "stack-intern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (1 << 16)

struct etl_load {
    struct ctl *c;
    struct htevb_writer w;
    struct etl_events *ev;
    char buf[CHUNK];
    size_t n;
    int send_failed;
};

static int64_t read_at(void *arg, uint64_t off, void *buf, size_t n)
{
#ifdef _WIN32
    if (_fseeki64(arg, (long long)off, SEEK_SET) != 0)
        return -1;
#else
    if (fseeko(arg, (off_t)off, SEEK_SET) != 0)
        return -1;
#endif
    return (int64_t)fread(buf, 1, n, arg);
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

int ctl_etl_is(FILE *in)
{
    /* The first buffer's header (0x48 bytes), then the log-file header record: a SYSTEM32
     * or SYSTEM64 trace header (ntwmi.h TRACE_HEADER_TYPE_SYSTEM32/64, marker 0xC0) with
     * HookId 0. */
    unsigned char h[0x50];
    int ok = fread(h, 1, sizeof(h), in) == sizeof(h) && (h[0x48 + 3] & 0xC0) == 0xC0 &&
             (h[0x48 + 2] == 1 || h[0x48 + 2] == 2) && h[0x48 + 6] == 0 && h[0x48 + 7] == 0;
    rewind(in);
    return ok;
}

static void report(const char *path, const struct etl_reader *rd, const struct etl_events *ev)
{
    const struct etl_counts *c = etl_reader_counts(rd);
    for (int k = 0; k < ETL_ERR_N; k++)
        if (c->err[k])
            fprintf(stderr, "heaptracectl: %s: %llu x %s (%s), first at offset %llu\n", path,
                    (unsigned long long)c->err[k], etl_err_name(k), etl_err_msg(k),
                    (unsigned long long)c->err_first[k]);
    if (c->flag_events_lost || c->flag_buffer_lost || etl_reader_header(rd)->buffers_lost)
        fprintf(stderr,
                "heaptracectl: %s: Windows lost data: %llu buffers flagged events lost, %llu "
                "flagged buffers lost, %u buffers lost\n",
                path, (unsigned long long)c->flag_events_lost,
                (unsigned long long)c->flag_buffer_lost, etl_reader_header(rd)->buffers_lost);
    if (ev) {
        struct etl_events_stats st;
        etl_events_stats(ev, &st);
        fprintf(stderr,
                "%s: process %u (%s): %llu events, %llu stacks matched, %llu stack-key "
                "references unresolved\n",
                path, st.corr.followed_pid, st.name, (unsigned long long)st.corr.events_in,
                (unsigned long long)st.corr.stacks_matched, (unsigned long long)st.key_unresolved);
    }
}

int ctl_etl_send(struct ctl *c, FILE *in, const char *path, int *read_error)
{
    struct etl_load *l = calloc(1, sizeof(*l));
    struct etl_reader *rd = NULL;
    struct stack_intern si;
    int rc = EXIT_CMD, si_ok = 0;
#ifdef _WIN32
    long long size = _fseeki64(in, 0, SEEK_END) == 0 ? _ftelli64(in) : -1;
#else
    long long size = fseeko(in, 0, SEEK_END) == 0 ? (long long)ftello(in) : -1;
#endif
    *read_error = 0;
    if (!l || size < 0 || etl_reader_new(&rd, read_at, in, (uint64_t)size, NULL) != 0)
        goto out;
    l->c = c;
    si_ok = stack_intern_init(&si, 1u << 24, 1u << 24) == 0;
    if (!si_ok)
        goto out;
    if (htevb_writer_init(&l->w, &si, write_cb, l) != 0) {
        htevb_writer_close(&l->w);
        goto out;
    }
    if (etl_reader_open(rd) == 0 &&
        etl_events_new(&l->ev, &si, etl_reader_header(rd), 0, event_cb, l) == 0 &&
        etl_events_run(l->ev, rd) == 0)
        rc = EXIT_OK;
    htevb_writer_close(&l->w);
    flush(l);
    report(path, rd, l->ev);
    /* The file could not be read as a whole: the session holds what was sent. */
    if (etl_reader_counts(rd)->err[ETL_ERR_READ] || rc != EXIT_OK)
        *read_error = 1;
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
