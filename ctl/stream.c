/* The ctl's streaming commands: load (upload), record and export (download), top (subscription). */
#include "ctl.h"
#include "out-file.h"
#include "term.h"

#include "ht-proto.h"
#include "ht-units.h"
#include "htev.h"
#include "htevb.h"
#include "htevz.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>
#include <unistd.h> /* read: mingw-w64 has it too */

int ctl_send(struct ctl *c, const char *cmd, cJSON *args, int64_t *id);

/* Send a streaming request (args taken over) and wait for its acknowledgement. */
static int open_stream(struct ctl *c, const char *cmd, int64_t *id, cJSON **ack)
{
    int rc = ctl_send(c, cmd, c->args, id);
    c->args = NULL;
    *ack = NULL;
    return rc != 0 ? rc : ctl_read_frame(c, *id, ack);
}

/* The file as it is, in chunks. 0, or EXIT_UNREACHABLE; *read_error the errno of a failed
 * read. */
/* *etl set when the stream's first read is a Windows trace's start: nothing sent (the .etl
 * reader seeks, which a pipe cannot). */
static int send_bytes(struct ctl *c, FILE *in, int *read_error, int *etl)
{
    static char buf[1 << 16];
    char hdr[32];
    /* read(2), not fread: from a pipe or a FIFO (a trace still being
     * written, `tail -f ... | heaptracectl load -`) each piece goes out as it
     * comes instead of waiting for 64 KiB. */
    int fd = fileno(in), rc = 0, first = 1;
    *etl = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *read_error = n < 0 ? errno : 0;
            break;
        }
        if (first && (*etl = ctl_etl_head((const unsigned char *)buf, (size_t)n)) != 0)
            break;
        first = 0;
        int hl = snprintf(hdr, sizeof(hdr), "%zu\n", (size_t)n);
        if (conn_send(c->conn, hdr, (size_t)hl) || conn_send(c->conn, buf, (size_t)n)) {
            rc = EXIT_UNREACHABLE;
            break;
        }
    }
    return rc;
}

static int etl_on_pipe(const char *file)
{
    fprintf(stderr,
            "heaptracectl: %s is a Windows trace (.etl) on a pipe or standard input: its "
            "reader seeks (each processor's buffers are interleaved), so it loads from a "
            "regular file named on the command line only; nothing was sent\n",
            file);
    return EXIT_CMD;
}

int ctl_load(struct ctl *c)
{
    FILE *in = strcmp(c->file, "-") ? fopen(c->file, "rb") : stdin;
    if (!in) {
        perror(c->file);
        return EXIT_CMD;
    }
    /* fopen takes a directory on POSIX and read(2) fails on it: said
     * before a session is made for nothing. */
    struct stat sb;
    if (fstat(fileno(in), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "heaptracectl: %s: is a directory, not a stream\n", c->file);
        if (in != stdin)
            fclose(in);
        return EXIT_CMD;
    }
    /* A Windows trace (.etl) is converted here into the .htevb stream (load-etl.c); only a
     * regular file is looked at: the look reads ahead, which a pipe or FIFO cannot undo. */
    int etl = in != stdin && fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode) &&
              ctl_etl_is(in);
    if (etl || c->etl_pid || c->etl_process) {
        int rc = etl ? ctl_etl_load(c, in, c->file) : EXIT_USAGE;
        if (!etl)
            fprintf(stderr,
                    "heaptracectl: --pid and --process are for Windows traces (.etl); "
                    "%s is not one\n",
                    c->file);
        if (in != stdin)
            fclose(in);
        return rc;
    }
    int64_t id;
    cJSON *env;
    int rc = open_stream(c, "load", &id, &env); /* acknowledged: streaming may start */
    if (rc != 0) {
        if (in != stdin)
            fclose(in);
        return rc;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(env, "data");
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(d, "session");
    if (!c->json)
        fprintf(stderr, "loading %s into session %d...\n", c->file,
                cJSON_IsNumber(sid) ? sid->valueint : 0);
    cJSON_Delete(env);
    int read_error = 0, etl_pipe = 0;
    rc = send_bytes(c, in, &read_error, &etl_pipe);
    if (in != stdin)
        fclose(in);
    if (rc == 0 && conn_send(c->conn, "0\n", 2) != 0)
        rc = EXIT_UNREACHABLE;
    if (rc != 0) {
        /* The daemon may have said why before it closed (the session was
         * dropped): its error is worth more than ours. */
        fprintf(stderr, "heaptracectl: lost the connection while loading\n");
        if (ctl_read_frame(c, id, &env) == EXIT_OK)
            cJSON_Delete(env);
        return rc;
    }
    rc = ctl_read_frame(c, id, &env);
    if (rc != 0)
        return rc;
    cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
    cJSON_Delete(env);
    render_reply(c, sum);
    cJSON_Delete(sum);
    if (read_error) {
        fprintf(stderr, "heaptracectl: read error on %s (%s): the session holds what was sent\n",
                c->file, strerror(read_error));
        return EXIT_CMD;
    }
    if (etl_pipe)
        return etl_on_pipe(c->file);
    return EXIT_OK;
}

/* The count of a recording's "lost" line ({"t":..,"ev":"lost","count":N}), else 0. */
static uint64_t record_lost_count(const char *line)
{
    if (!strstr(line, "\"ev\":\"lost\""))
        return 0;
    cJSON *o = cJSON_Parse(line);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "count");
    uint64_t count = cJSON_IsNumber(n) && n->valuedouble > 0 ? (uint64_t)n->valuedouble : 0;
    cJSON_Delete(o);
    return count;
}

/* The recorder's own gaps: the daemon's total ("lost" in the end frame)
 * when it came, else the sum of the gap lines (the connection went first).
 * Gap lines past the daemon's total were in the session's stream already
 * (a loaded recording's gaps, the session's own losses): *carried. */
static uint64_t record_lost_total(const cJSON *end, uint64_t counted, uint64_t *carried)
{
    const cJSON *n =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(end, "data"), "lost");
    if (!cJSON_IsNumber(n) || n->valuedouble < 0)
        return counted;
    uint64_t own = (uint64_t)n->valuedouble;
    *carried = counted > own ? counted - own : 0;
    return own;
}

/* The envelope that ends a recording (its "lost" total updates *lost); rc is the exit code. */
static int record_end(struct ctl *c, char *line, uint64_t events, uint64_t *lost, uint64_t *carried,
                      int raw)
{
    cJSON *e = cJSON_Parse(line);
    int rc = EXIT_OK;
    *lost = record_lost_total(e, *lost, carried);
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "ok")))
        rc = ctl_print_error(e);
    else if (!c->json && c->output && strcmp(c->output, "-"))
        fprintf(stderr, "recorded %llu %s to %s (%s)\n",
                (unsigned long long)(raw && events ? events - 1 : events),
                raw ? "raw records" : "events", c->output,
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(e, "data"), "end")));
    cJSON_Delete(e);
    return rc;
}

/* A recording to a path ending in .htevb is written as compressed .htevb
 * (htevz.h), a tenth of the text's size: the daemon's .htev lines (its
 * output caps and gap lines unchanged) are parsed here and written as binary
 * records in zstd frames. A frame closes every RECORD_FRAME_MS as lines come,
 * or at 1 MiB of stream, so an interrupted recording loses little. */
#define RECORD_FRAME_MS 1000

struct rec_bin {
    struct stack_intern si;
    struct htev_parser parser;
    struct htevb_writer w;
    struct htevz_writer z;
    struct out_file *out;
    uint64_t frame_start_ms;
};

/* Monotonic milliseconds (uv_hrtime: CLOCK_MONOTONIC on Unix, QueryPerformanceCounter on Windows). */
static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void rec_bin_out(void *arg, const void *buf, size_t n)
{
    out_write(arg, buf, n); /* a failure stays in the out_file */
}

static struct rec_bin *rec_bin_open(struct out_file *out)
{
    struct rec_bin *rb = calloc(1, sizeof(*rb));
    if (!rb)
        return NULL;
    rb->out = out;
    if (stack_intern_init(&rb->si, 1u << 24, 1u << 24) != 0) {
        free(rb);
        return NULL;
    }
    if (htev_parser_init(&rb->parser, &rb->si) != 0 ||
        htevz_writer_init(&rb->z, HTEVZ_LEVEL_FAST, rec_bin_out, out) != 0) {
        htev_parser_close(&rb->parser);
        stack_intern_close(&rb->si);
        free(rb);
        return NULL;
    }
    if (htevb_writer_init(&rb->w, &rb->si, htevz_write, &rb->z) != 0) {
        htevz_writer_close(&rb->z); /* nothing written yet */
        htev_parser_close(&rb->parser);
        stack_intern_close(&rb->si);
        free(rb);
        return NULL;
    }
    rb->frame_start_ms = now_ms();
    return rb;
}

/* One line from the daemon into the file. 0, or -1 (reported) on a write error. */
static int rec_bin_line(struct rec_bin *rb, const char *line)
{
    struct ht_event ev;
    int rc = htev_parse_line(&rb->parser, line, strlen(line), &ev);
    if (rc == 1) {
        if (ev.kind == HT_EV_PROCESS)
            htevb_write_process(&rb->w, ev.t, ev.size, rb->parser.name);
        else
            htevb_write_event(&rb->w, &ev);
    } else if (rc < 0) {
        fprintf(stderr, "heaptracectl: a recorded line is not .htev (%s): left out\n",
                rb->parser.err);
    }
    if (now_ms() - rb->frame_start_ms >= RECORD_FRAME_MS) {
        htevz_flush(&rb->z);
        rb->frame_start_ms = now_ms();
    }
    return rb->out->failed || rb->z.failed ? -1 : 0;
}

/* The last frame out, everything freed. 0, or -1 if the file is incomplete. */
static int rec_bin_close(struct rec_bin *rb)
{
    if (!rb)
        return 0;
    int rc = htevz_writer_close(&rb->z);
    htevb_writer_close(&rb->w);
    htev_parser_close(&rb->parser);
    stack_intern_close(&rb->si);
    rc |= rb->out->failed ? -1 : 0;
    free(rb);
    return rc;
}

/* A raw recording's gap line ({"etw_raw_lost":N}): N, else 0. */
static uint64_t raw_lost_count(const char *line)
{
    static const char tag[] = "{\"etw_raw_lost\":";
    if (strncmp(line, tag, sizeof(tag) - 1) != 0)
        return 0;
    return strtoull(line + sizeof(tag) - 1, NULL, 10);
}

int ctl_record(struct ctl *c)
{
    int64_t id;
    cJSON *env;
    int raw = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c->args, "raw"));
    if (raw && c->output && ends_with(c->output, ".htevb")) {
        fprintf(stderr, "heaptracectl: record --raw writes a raw ETW stream (text): not .htevb\n");
        return EXIT_USAGE;
    }
    int rc = open_stream(c, "record", &id, &env);
    if (rc != 0)
        return rc; /* refused: no file was touched */
    cJSON_Delete(env);
    struct out_file out;
    if (out_open(&out, c->output) != 0)
        return EXIT_CMD;
    struct rec_bin *rb = NULL;
    if (c->output && ends_with(c->output, ".htevb") && !(rb = rec_bin_open(&out))) {
        fprintf(stderr, "heaptracectl: out of memory for the .htevb writer\n");
        out_abort(&out);
        return EXIT_CMD;
    }
    /* Ctrl-C ends the recording and keeps what was recorded. */
    conn_break_on_interrupt(c->conn);
    uint64_t events = 0, lost = 0, carried = 0;
    for (;;) {
        char *line = conn_read_line(c->conn, HT_REPLY_MAX);
        if (!line) {
            if (conn_interrupted()) {
                fprintf(stderr, "heaptracectl: interrupted: %llu events recorded\n",
                        (unsigned long long)events);
            } else {
                fprintf(stderr, "heaptracectl: the daemon closed the connection\n");
                rc = EXIT_UNREACHABLE;
            }
            break;
        }
        if (strncmp(line, "{\"v\":", 5) == 0) {
            rc = record_end(c, line, events, &lost, &carried, raw);
            free(line);
            break;
        }
        int wrc = rb ? rec_bin_line(rb, line) : out_puts(&out, line);
        uint64_t gap = wrc != 0 ? 0 : raw ? raw_lost_count(line) : record_lost_count(line);
        free(line);
        if (wrc != 0 || (!rb && out_write(&out, "\n", 1) != 0)) {
            /* The disk is full (or gone): stop here, loudly. */
            rec_bin_close(rb);
            out_abort(&out);
            return EXIT_CMD;
        }
        lost += gap;
        events += gap == 0;
    }
    /* What was recorded is kept, even if the daemon went away. */
    if (rec_bin_close(rb) != 0 && rc == EXIT_OK)
        rc = EXIT_CMD;
    if (out_commit(&out) != 0 && rc == EXIT_OK)
        rc = EXIT_CMD;
    /* The recording is kept: its gaps are marked in it. Those the stream
     * had before the recorder are its content, not a failure. */
    if (carried > 0)
        fprintf(stderr,
                "heaptracectl: the session's stream had gaps of its own: %llu %s lost before "
                "this recording (its \"lost\" lines are kept in it)\n",
                (unsigned long long)carried, raw ? "records" : "events");
    if (lost > 0) {
        fprintf(stderr,
                "heaptracectl: the recording has gaps: %llu %s lost while the recorder "
                "was behind (\"lost\" lines mark where)\n",
                (unsigned long long)lost, raw ? "records" : "events");
        if (rc == 0)
            rc = EXIT_CMD;
    }
    return rc;
}

/* An export's JSON "result" written as it comes: the array cut across the
 * frames is opened in the first frame's text and its items follow, printed
 * as cJSON_Print would have printed them in place. */
struct json_out {
    char *post; /* the first frame's text after its items */
    char *key;
    int indent; /* tabs added after each newline of an item */
    int nitems;
};

static int json_item_write(struct out_file *o, struct json_out *j, const cJSON *item)
{
    char *s = cJSON_Print(item);
    if (!s)
        return -1;
    int rc = j->nitems++ ? out_puts(o, ", ") : 0;
    for (char *p = s, *nl; rc == 0 && *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) {
            rc = out_puts(o, p);
            break;
        }
        rc = out_write(o, p, (size_t)(nl - p) + 1);
        for (int k = 0; rc == 0 && k < j->indent; k++)
            rc = out_write(o, "\t", 1);
    }
    cJSON_free(s);
    return rc;
}

static int json_items_write(struct out_file *o, struct json_out *j, const cJSON *arr)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr)
    {
        if (json_item_write(o, j, x) != 0)
            return -1;
    }
    return 0;
}

/* The first frame's result, cut at its array key (the one the next frame carries). */
static int json_open(struct out_file *o, struct json_out *j, cJSON *result, const char *key)
{
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(result, key);
    if (!cJSON_IsArray(arr))
        return -1;
    cJSON *items = arr->child;
    arr->child = NULL;
    cJSON_AddItemToArray(arr, cJSON_CreateRaw("\001")); /* cannot occur in printed JSON */
    char *text = cJSON_Print(result);
    cJSON_Delete(arr->child);
    arr->child = items;
    char *cut = text ? strchr(text, '\001') : NULL;
    if (!cut) {
        cJSON_free(text);
        return -1;
    }
    *cut = '\0';
    const char *line = strrchr(text, '\n');
    j->indent = 1;
    for (line = line ? line + 1 : text; *line == '\t'; line++)
        j->indent++;
    j->post = strdup(cut + 1);
    int rc = out_puts(o, text);
    cJSON_free(text);
    if (!j->post || rc != 0)
        return -1;
    return json_items_write(o, j, arr);
}

/* The key of the array a continuation frame of the JSON export carries. */
static char *cont_key(const cJSON *data)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(data, "result");
    const cJSON *m = r ? r->child : NULL;
    return m && cJSON_IsArray(m) ? strdup(m->string) : NULL;
}

static int lines_write(struct out_file *o, const cJSON *lines, uint64_t *n)
{
    const cJSON *l;
    cJSON_ArrayForEach(l, lines)
    {
        if (!cJSON_IsString(l) || out_puts(o, l->valuestring) != 0 || out_write(o, "\n", 1) != 0)
            return -1;
        ++*n;
    }
    return 0;
}

/* Read the next frame of id: its data (detached) and whether more follow. */
static int next_frame(struct ctl *c, int64_t id, cJSON **data, int *more)
{
    cJSON *env;
    int rc = ctl_read_frame(c, id, &env);
    if (rc != 0)
        return rc;
    *more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
    *data = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
    cJSON_Delete(env);
    return *data ? EXIT_OK : EXIT_CMD;
}

/* The items of a whole JSON export: its rows, a timeline's samples, or a
 * snapshot's stacks and commits rows. */
static uint64_t json_items(const cJSON *result)
{
    static const char *const keys[] = {"rows", "samples"};
    uint64_t n = 0;
    for (int k = 0; k < 2; k++)
        n += (uint64_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(result, keys[k]));
    static const char *const parts[] = {"stacks", "commits"};
    for (int k = 0; k < 2; k++)
        n += (uint64_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(result, parts[k]), "rows"));
    return n;
}

/* A JSON export: printed whole if it came in one frame, else streamed
 * (*n: the items written). */
static int export_json(struct ctl *c, int64_t id, struct out_file *o, cJSON *first, int more,
                       uint64_t *n)
{
    cJSON *result = cJSON_GetObjectItemCaseSensitive(first, "result");
    if (!more) {
        *n = json_items(result);
        char *s = cJSON_Print(result);
        int rc = s ? out_puts(o, s) : -1;
        cJSON_free(s);
        return rc == 0 && out_write(o, "\n", 1) == 0 ? EXIT_OK : EXIT_CMD;
    }
    struct json_out j = {0};
    cJSON *d = NULL;
    int rc = next_frame(c, id, &d, &more);
    if (rc == EXIT_OK && (!(j.key = cont_key(d)) || json_open(o, &j, result, j.key) != 0))
        rc = EXIT_CMD;
    while (rc == EXIT_OK) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(d, "result");
        if (json_items_write(o, &j, cJSON_GetObjectItemCaseSensitive(r, j.key)) != 0)
            rc = EXIT_CMD;
        cJSON_Delete(d);
        d = NULL;
        if (rc != EXIT_OK || !more)
            break;
        rc = next_frame(c, id, &d, &more);
    }
    cJSON_Delete(d);
    *n = (uint64_t)j.nitems; /* the first frame's items included (json_open) */
    if (rc == EXIT_OK && (out_puts(o, j.post) != 0 || out_write(o, "\n", 1) != 0))
        rc = EXIT_CMD;
    free(j.post);
    free(j.key);
    return rc;
}

/* Lines (csv, collapsed) are written frame by frame: memory stays one frame. */
static int export_lines(struct ctl *c, int64_t id, struct out_file *o, cJSON *d, int more,
                        uint64_t *lines)
{
    int rc =
        lines_write(o, cJSON_GetObjectItemCaseSensitive(d, "lines"), lines) ? EXIT_CMD : EXIT_OK;
    while (rc == EXIT_OK && more) {
        cJSON *n = NULL;
        rc = next_frame(c, id, &n, &more);
        if (rc == EXIT_OK &&
            lines_write(o, cJSON_GetObjectItemCaseSensitive(n, "lines"), lines) != 0)
            rc = EXIT_CMD;
        cJSON_Delete(n);
    }
    return rc;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* One base64 piece (RFC 4648 section 4) decoded into out (*written counts
 * the bytes): 0, or -1 on a character that is not base64 or a write that
 * failed. */
static int base64_write(struct out_file *o, const char *s, uint64_t *written)
{
    unsigned char buf[3 * 1024];
    size_t n = 0, len = strlen(s);
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char ch = s[i + k];
            const char *at = ch ? strchr(b64_alphabet, ch) : NULL;
            if (ch == '=' && i + 4 == len && k >= 2) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!at || pad)
                return -1;
            v = v << 6 | (uint32_t)(at - b64_alphabet);
        }
        buf[n++] = (unsigned char)(v >> 16);
        if (pad < 2)
            buf[n++] = (unsigned char)(v >> 8);
        if (pad < 1)
            buf[n++] = (unsigned char)v;
        if (n > sizeof(buf) - 3 || i + 4 == len) {
            if (out_write(o, (const char *)buf, n) != 0)
                return -1;
            *written += n;
            n = 0;
        }
    }
    return 0;
}

/* A binary export (pprof): its bytes, sent as base64 pieces in "data", are
 * written as they are (*n: the bytes written, all of "bytes" or a failure;
 * a profile of no samples is still a profile). */
static int export_binary(struct ctl *c, int64_t id, struct out_file *o, cJSON *d, int more,
                         uint64_t *n)
{
    const cJSON *x;
    int rc = EXIT_OK;
    for (cJSON *f = d; rc == EXIT_OK;) {
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(f, "data"))
        {
            if (!cJSON_IsString(x) || base64_write(o, x->valuestring, n) != 0) {
                rc = EXIT_CMD;
                break;
            }
        }
        if (f != d)
            cJSON_Delete(f);
        if (rc != EXIT_OK || !more)
            break;
        rc = next_frame(c, id, &f, &more);
    }
    /* Every byte the daemon made, or the file is not put in place. */
    double want = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "bytes"));
    if (rc == EXIT_OK && (double)*n != want) {
        fprintf(stderr, "heaptracectl: the profile came with %llu of its %.0f bytes\n",
                (unsigned long long)*n, want);
        rc = EXIT_CMD;
    }
    return rc;
}

/* What a binary export's header says of the profile: addresses in no
 * mapping, stacks left out by --top. */
static void binary_notes(const cJSON *d)
{
    double unmapped =
        cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "unmapped_locations"));
    if (unmapped > 0)
        fprintf(stderr,
                "heaptracectl: %.0f location%s of the profile %s an address in no mapping (no "
                "module events, and the process is gone or its modules unreadable): they keep "
                "their names, a backend cannot symbolize them\n",
                unmapped, unmapped == 1 ? "" : "s", unmapped == 1 ? "has" : "have");
    /* --top keeps the largest: a profile of fewer stacks than the query
     * found says so. */
    double ns = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "samples"));
    double ng = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "groups"));
    if (ng > ns)
        fprintf(stderr,
                "heaptracectl: the profile holds the %.0f largest of the %.0f stacks the query "
                "found (--top N; --top 0 for all of them)\n",
                ns, ng);
}

/* An export with nothing in it is a failure, said with why: the file is not
 * written (a 0-byte flame graph is no answer). */
static int export_empty(const cJSON *d)
{
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(d, "value");
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(d, "groups");
    double ng = cJSON_IsNumber(groups) ? groups->valuedouble : 0;
    if (cJSON_IsString(value) && ng > 0)
        fprintf(stderr,
                "heaptracectl: nothing to export: none of the %.0f group%s found has a nonzero "
                "%s (the collapsed value); --sort or --type choose another\n",
                ng, ng == 1 ? "" : "s", ctl_text(value->valuestring));
    else
        fprintf(stderr, "heaptracectl: nothing to export: the window, --type and filters match "
                        "nothing\n");
    return EXIT_CMD;
}

/* A binary format's bytes are not for a terminal. */
static int binary_refused(const struct ctl *c)
{
    const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->args, "format"));
    if (!format || strcmp(format, "pprof") || (c->output && strcmp(c->output, "-")) ||
        !term_stdout_is_tty())
        return 0;
    fprintf(stderr, "heaptracectl: pprof is binary (gzip'd): write it to a file with -o FILE.pb.gz "
                    "or redirect standard output\n");
    return 1;
}

int ctl_export(struct ctl *c)
{
    int64_t id;
    if (binary_refused(c))
        return EXIT_USAGE;
    /* pprof's bytes as raw chunks unless --transfer says base64 (what a
     * daemon answers a request that does not say: docs/protocol.md). */
    const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->args, "format"));
    const char *transfer =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->args, "transfer"));
    if (transfer && !strcmp(transfer, "base64")) /* not said: what daemons before chunks take */
        cJSON_DeleteItemFromObjectCaseSensitive(c->args, "transfer");
    else if (format && !strcmp(format, "pprof") && !transfer)
        cJSON_AddStringToObject(c->args, "transfer", "chunks");
    int rc = ctl_send(c, "export", c->args, &id);
    c->args = NULL;
    cJSON *d = NULL;
    int more = 0;
    if (rc == EXIT_OK)
        rc = next_frame(c, id, &d, &more);
    if (rc != EXIT_OK)
        return rc; /* refused: no file was touched */
    struct out_file out;
    if (out_open(&out, c->output) != 0) {
        cJSON_Delete(d);
        return EXIT_CMD;
    }
    /* Ctrl-C or SIGTERM ends the transfer, not the process: the temporary
     * file is removed (it was left behind), the target left as it was. */
    if (out.tmp)
        conn_break_on_interrupt(c->conn);
    uint64_t n = 0;
    format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "format"));
    int csv = format && !strcmp(format, "csv");
    int binary = cJSON_GetObjectItemCaseSensitive(d, "bytes") != NULL;
    transfer = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "transfer"));
    if (binary && transfer && !strcmp(transfer, "chunks"))
        rc = ctl_export_chunks(c, id, &out, d, &n);
    else if (binary)
        rc = export_binary(c, id, &out, d, more, &n);
    else if (cJSON_GetObjectItemCaseSensitive(d, "lines"))
        rc = export_lines(c, id, &out, d, more, &n);
    else
        rc = export_json(c, id, &out, d, more, &n);
    /* A CSV export's first line is its header. */
    if (rc == EXIT_OK && !binary && n <= (uint64_t)csv)
        rc = export_empty(d);
    if (rc == EXIT_OK && binary)
        binary_notes(d);
    cJSON_Delete(d);
    if (rc != EXIT_OK || conn_interrupted()) {
        if (conn_interrupted()) {
            fprintf(stderr, "heaptracectl: interrupted: %s left as it was\n", c->output);
            rc = EXIT_CMD;
        }
        out_abort(&out);
        return rc;
    }
    return out_commit(&out) == 0 ? EXIT_OK : EXIT_CMD;
}

int ctl_top(struct ctl *c)
{
    int64_t id;
    int rc = ctl_send(c, "top", c->args, &id);
    c->args = NULL;
    int tty = term_stdout_is_tty() && !c->json;
    while (rc == 0) {
        cJSON *env;
        rc = ctl_read_frame(c, id, &env);
        if (rc != 0)
            break;
        int more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(env, "data");
        if (cJSON_GetObjectItemCaseSensitive(d, "end")) {
            if (!c->json)
                printf("session ended: %s\n",
                       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "end")));
        } else {
            render_top(c, d, tty);
        }
        fflush(stdout);
        cJSON_Delete(env);
        if (!more)
            break;
    }
    return rc;
}
