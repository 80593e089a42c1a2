/* Replay: line splitting with a bounded carry buffer, malformed lines counted and kept. */
#include "replay.h"

#include "etw-raw.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>

int replay_init(struct replay *r, struct stack_intern *si, replay_event_fn fn, void *arg)
{
    memset(r, 0, sizeof(*r));
    r->on_event = fn;
    r->arg = arg;
    htevb_reader_init(&r->bin, si);
    return htev_parser_init(&r->parser, si);
}

void replay_close(struct replay *r)
{
    if (r->compressed)
        htevz_reader_close(&r->z);
    etw_raw_free(r->etw);
    r->etw = NULL;
    htev_parser_close(&r->parser);
    htevb_reader_close(&r->bin);
    ht_free(r->line);
    r->line = NULL;
}

static void bad_line(struct replay *r, const char *msg)
{
    r->malformed++;
    if (r->nerrors < REPLAY_ERRORS_KEPT) {
        r->errors[r->nerrors].line = r->line_no;
        snprintf(r->errors[r->nerrors].msg, sizeof(r->errors[0].msg), "%s", msg);
        r->nerrors++;
    }
}

static void etw_event(void *arg, const struct ht_event *ev)
{
    struct replay *r = arg;
    if (ev->kind == HT_EV_PROCESS && r->etw) {
        struct etw_raw_stats st;
        etw_raw_stats(r->etw, &st);
        snprintf(r->parser.name, sizeof(r->parser.name), "%s", st.name);
    }
    r->events++;
    r->on_event(r->arg, ev);
}

/* The first line of a raw ETW stream: its parser, and the traced process. */
static void etw_header(struct replay *r, const char *s, size_t n)
{
    char err[160];
    if (etw_raw_new(&r->etw, r->parser.si, s, n, etw_event, r, err, sizeof(err)) != 0) {
        r->etw_bad = 1;
        bad_line(r, err);
        return;
    }
    etw_raw_tap(r->etw, r->tap);
    struct etw_raw_stats st;
    etw_raw_stats(r->etw, &st);
    if (st.pid) {
        snprintf(r->parser.name, sizeof(r->parser.name), "%s", st.name);
        struct ht_event ev = {.kind = HT_EV_PROCESS, .size = st.pid};
        etw_event(r, &ev);
    }
}

static void one_line(struct replay *r, const char *s, size_t n)
{
    struct ht_event ev;
    r->line_no++;
    if (r->etw || r->etw_bad) {
        char err[160];
        if (r->etw_bad)
            bad_line(r, "raw ETW record after a header that did not parse");
        else if (etw_raw_line(r->etw, s, n, err, sizeof(err)) < 0)
            bad_line(r, err);
        return;
    }
    if (r->line_no == 1 && etw_raw_is_header(s, n)) {
        etw_header(r, s, n);
        return;
    }
    int rc = htev_parse_line(&r->parser, s, n, &ev);
    if (rc == 1) {
        r->events++;
        r->on_event(r->arg, &ev);
    } else if (rc < 0) {
        bad_line(r, r->parser.err);
    }
}

static void bin_event(void *arg, const struct ht_event *ev)
{
    struct replay *r = arg;
    r->events++;
    r->on_event(r->arg, ev);
}

static void bin_process(void *arg, const char *name, size_t len)
{
    struct replay *r = arg;
    snprintf(r->parser.name, sizeof(r->parser.name), "%.*s", (int)len, name);
}

static void feed_binary(struct replay *r, const char *buf, size_t n)
{
    uint64_t before = r->bin.malformed;
    htevb_feed(&r->bin, (const unsigned char *)buf, n, bin_event, bin_process, r);
    if (r->bin.malformed != before) {
        r->line_no = r->bin.records;
        bad_line(r, r->bin.err);
    }
}

/* The stream itself (decompressed if it came in frames). */
static void feed_plain(struct replay *r, const char *buf, size_t n)
{
    if (r->plain_bytes == 0 && n > 0 && buf[0] == HTEVB_MAGIC[0])
        r->binary = 1;
    r->plain_bytes += n;
    if (r->binary) {
        feed_binary(r, buf, n);
        return;
    }
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) : n;
        if (r->skipping) {
            if (nl)
                r->skipping = 0;
        } else if (r->len == 0 && nl) {
            one_line(r, buf, take); /* the common case: no copy */
        } else if (r->len + take > REPLAY_LINE_MAX) {
            r->len = 0;
            r->line_no++;
            bad_line(r, "line longer than 1 MiB");
            r->skipping = nl == NULL;
        } else {
            if (r->len + take > r->alloc) {
                size_t na = r->alloc ? r->alloc : 4096;
                while (na < r->len + take)
                    na *= 2;
                /* Charged with the parser's interner (the decoder's memory). */
                char *nb =
                    mem_realloc(r->parser.si->acct, MEM_decoder_buffers, r->line, r->alloc, na);
                if (!nb) {
                    r->len = 0;
                    r->line_no++;
                    bad_line(r, "out of memory for a long line");
                    r->skipping = nl == NULL;
                    goto next;
                }
                r->line = nb;
                r->alloc = na;
            }
            memcpy(r->line + r->len, buf, take);
            r->len += take;
            if (nl) {
                one_line(r, r->line, r->len);
                r->len = 0;
            }
        }
    next:
        if (!nl)
            break;
        buf = nl + 1;
        n -= take + 1;
    }
}

static void plain_cb(void *arg, const unsigned char *buf, size_t n)
{
    feed_plain(arg, (const char *)buf, n);
}

/* A zstd error ends the stream as a malformed record does: what came
 * before stays, one malformed count says why. */
static void compressed_broken(struct replay *r)
{
    if (r->binary)
        r->line_no = r->bin.records;
    bad_line(r, r->z.err);
}

static void start_compressed(struct replay *r)
{
    r->compressed = 1;
    int rc = htevz_reader_init(&r->z, r->parser.si->acct);
    r->z.cancel = r->cancel;
    if (rc != 0) {
        r->z.broken = 1;
        snprintf(r->z.err, sizeof(r->z.err),
                 "compressed stream: no memory for its decompressor (or over the budget)");
        compressed_broken(r);
    }
}

void replay_feed(struct replay *r, const char *buf, size_t n)
{
    if (r->bytes == 0 && n > 0 && buf[0] == HTEVZ_MAGIC[0])
        start_compressed(r);
    r->bytes += n;
    if (!r->compressed) {
        feed_plain(r, buf, n);
        return;
    }
    /* Nothing more can be read once either layer is broken. */
    if (r->z.broken || (r->binary && r->bin.broken))
        return;
    htevz_feed(&r->z, (const unsigned char *)buf, n, plain_cb, r);
    if (r->z.broken)
        compressed_broken(r);
}

static void finish_stream(struct replay *r)
{
    if (r->compressed) {
        /* A broken binary stream stopped the reading (counted there): the
         * frame it was in is not cut. */
        if (!r->z.broken && !(r->binary && r->bin.broken) && htevz_finish(&r->z) != 0)
            compressed_broken(r);
        if (r->z.broken) {
            /* Counted once above: the cut record or line is part of it. */
            r->bin.carry_len = 0;
            r->len = 0;
            r->skipping = 0;
            return;
        }
    }
    if (r->binary) {
        if (r->bin.carry_len > 0 && !r->bin.broken) {
            r->line_no = r->bin.records;
            bad_line(r, "binary stream: it ends inside a record");
            r->bin.carry_len = 0;
        }
        return;
    }
    if (r->len > 0 && !r->skipping)
        one_line(r, r->line, r->len);
    r->len = 0;
    r->skipping = 0;
}

void replay_finish(struct replay *r)
{
    finish_stream(r);
    /* Events of a raw ETW stream still waiting for their stacks leave now. */
    if (r->etw)
        etw_raw_finish(r->etw);
}
