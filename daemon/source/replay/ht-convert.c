/* ht-convert: a recorded stream (.htev text, .htevb, either in zstd frames) to .htevb in zstd
 * frames (htevz.h), or plain .htevb with --plain; HTEVB2 records, or HTEVB1 with --v1;
 * heaptracectl load takes all of them. --stats FILE.etl: a JSON summary of a Windows trace. */
#include "etl-events.h"
#include "etl-read.h"
#include "etl-stats.h"
#include "htevb.h"
#include "htevz.h"
#include "replay.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

static FILE *out;
static struct htevb_writer writer;
static struct htevz_writer zw;
static struct replay rep;

static void write_cb(void *arg, const void *buf, size_t n)
{
    (void)arg;
    fwrite(buf, 1, n, out);
}

static void event_cb(void *arg, const struct ht_event *ev)
{
    (void)arg;
    if (ev->kind == HT_EV_PROCESS)
        htevb_write_process(&writer, ev->t, ev->size, rep.parser.name);
    else
        htevb_write_event(&writer, ev);
}

static int64_t etl_read_cb(void *arg, uint64_t off, void *buf, size_t n)
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

/* --stats: the summary on stdout; 1 when the file could not be read or had errors. */
static int etl_stats_main(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
#ifdef _WIN32
    int sk = _fseeki64(f, 0, SEEK_END);
    long long size = sk == 0 ? _ftelli64(f) : -1;
#else
    int sk = fseeko(f, 0, SEEK_END);
    long long size = sk == 0 ? (long long)ftello(f) : -1;
#endif
    struct etl_reader *rd = NULL;
    struct etl_stats *st = etl_stats_new(0, 0);
    if (size < 0 || !st || etl_reader_new(&rd, etl_read_cb, f, (uint64_t)size, NULL) != 0) {
        fprintf(stderr, "ht-convert: %s: %s\n", path, size < 0 ? "cannot seek" : "out of memory");
        return 1;
    }
    int rc = etl_reader_open(rd);
    if (rc == 0)
        rc = etl_reader_run(rd, etl_stats_record, st);
    if (rc < 0 && rc != -1)
        fprintf(stderr, "ht-convert: %s: out of memory\n", path);
    const struct etl_header *h = etl_reader_header(rd);
    if (rc == -1 && etl_reader_counts(rd)->err[ETL_ERR_COMPRESSION_FORMAT])
        fprintf(stderr,
                "ht-convert: %s: unsupported compression format %u (%s); only XPRESS (3) is read\n",
                path, h->compression,
                h->compression == 2   ? "LZNT1"
                : h->compression == 4 ? "XPRESS_HUFF"
                                      : "unknown");
    cJSON *j = etl_stats_json(st, rd);
    char *txt = j ? cJSON_Print(j) : NULL;
    if (txt)
        printf("%s\n", txt);
    int bad = rc != 0 || !txt || cJSON_GetNumberValue(cJSON_GetObjectItem(j, "errors_total")) != 0;
    free(txt);
    cJSON_Delete(j);
    etl_stats_free(st);
    etl_reader_free(rd);
    fclose(f);
    return bad ? 1 : 0;
}

static struct etl_events *etl_ev;

static void etl_event_cb(void *arg, const struct ht_event *ev)
{
    (void)arg;
    if (ev->kind == HT_EV_PROCESS) {
        static struct etl_events_stats st;
        etl_events_stats(etl_ev, &st);
        htevb_write_process(&writer, ev->t, ev->size, st.name);
    } else {
        htevb_write_event(&writer, ev);
    }
}

static int64_t file_size(FILE *f)
{
#ifdef _WIN32
    return _fseeki64(f, 0, SEEK_END) == 0 ? _ftelli64(f) : -1;
#else
    return fseeko(f, 0, SEEK_END) == 0 ? (int64_t)ftello(f) : -1;
#endif
}

/* FILE.etl through the reader, the ETW decoder and the stack correlator into the writer:
 * the events of process pid (0: the first with a heap event). 1 on errors (listed). */
static int etl_convert(FILE *in, const char *path, uint32_t pid, struct stack_intern *si)
{
    struct etl_reader *rd = NULL;
    int64_t size = file_size(in);
    if (size < 0 || etl_reader_new(&rd, etl_read_cb, in, (uint64_t)size, NULL) != 0) {
        fprintf(stderr, "ht-convert: %s: %s\n", path, size < 0 ? "cannot seek" : "out of memory");
        return 1;
    }
    int rc = etl_reader_open(rd);
    if (rc == 0 &&
        (rc = etl_events_new(&etl_ev, si, etl_reader_header(rd), pid, etl_event_cb, NULL)) == 0) {
        rc = etl_events_run(etl_ev, rd);
    }
    const struct etl_counts *c = etl_reader_counts(rd);
    for (int k = 0; k < ETL_ERR_N; k++)
        if (c->err[k])
            fprintf(stderr, "%s: %llu x %s (%s), first at offset %llu\n", path,
                    (unsigned long long)c->err[k], etl_err_name(k), etl_err_msg(k),
                    (unsigned long long)c->err_first[k]);
    if (etl_ev) {
        struct etl_events_stats st;
        etl_events_stats(etl_ev, &st);
        fprintf(stderr,
                "%s: process %u (%s): %llu events, %llu stacks matched, %llu unmatched, "
                "%llu events without a stack, %llu malformed payloads, %llu records of other "
                "processes, %llu stack-key references (%llu unresolved, %llu waited for a later "
                "definition, %llu dropped, at most %llu waiting)\n",
                path, pid ? pid : st.corr.followed_pid, st.name,
                (unsigned long long)st.corr.events_in, (unsigned long long)st.corr.stacks_matched,
                (unsigned long long)st.corr.stacks_unmatched,
                (unsigned long long)st.corr.events_no_stack, (unsigned long long)st.malformed,
                (unsigned long long)st.corr.other_process, (unsigned long long)st.key_refs,
                (unsigned long long)st.key_unresolved, (unsigned long long)st.key_waited,
                (unsigned long long)(st.key_dropped + st.key_evicted),
                (unsigned long long)st.key_waiting_max);
    }
    int errors = 0;
    for (int k = 0; k < ETL_ERR_N; k++)
        errors |= c->err[k] != 0;
    etl_events_free(etl_ev);
    etl_reader_free(rd);
    return rc != 0 || errors;
}

static int is_etl(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && (!strcmp(path + n - 4, ".etl") || !strcmp(path + n - 4, ".ETL"));
}

static int usage(void)
{
    fprintf(stderr,
            "usage: ht-convert [--plain] [--v1] [--level N] [--frame-kib N] IN OUT.htevb   (- for "
            "stdin/stdout)\n"
            "  IN: .htev text or .htevb, plain or compressed\n"
            "  OUT: .htevb in zstd frames (level 1-19, default %d; frames of N KiB of stream,\n"
            "       at most and by default %u), or plain with --plain; HTEVB2 records (htevb2.h),\n"
            "       or the older HTEVB1 with --v1\n"
            "       ht-convert --stats FILE.etl   (a JSON summary of a Windows trace; exit 1 on\n"
            "       errors, which it lists)\n"
            "  IN may be FILE.etl (a Windows trace): the heap and VirtualAlloc events of one\n"
            "       process (--pid N; by default the first with a heap event)\n",
            HTEVZ_LEVEL_DEFAULT, HTEVZ_FRAME_BYTES >> 10);
    return 2;
}

/* Long: the tool's options, one branch each, then the conversion chosen. */
int main(int argc, char **argv)
{
    int plain = 0, version = 2, level = HTEVZ_LEVEL_DEFAULT;
    long long pid = 0;
    long frame_kib = HTEVZ_FRAME_BYTES >> 10;
    const char *files[2];
    int nfiles = 0;
    if (argc == 3 && !strcmp(argv[1], "--stats"))
        return etl_stats_main(argv[2]);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain")) {
            plain = 1;
        } else if (!strcmp(argv[i], "--v1")) {
            version = 1;
        } else if (!strcmp(argv[i], "--pid") && i + 1 < argc) {
            pid = atoll(argv[++i]);
            if (pid < 1 || pid > 0xFFFFFFFFLL)
                return usage();
        } else if (!strcmp(argv[i], "--level") && i + 1 < argc) {
            level = atoi(argv[++i]);
            if (level < 1 || level > 19)
                return usage();
        } else if (!strcmp(argv[i], "--frame-kib") && i + 1 < argc) {
            frame_kib = atol(argv[++i]);
            if (frame_kib < 1 || frame_kib > (long)(HTEVZ_FRAME_BYTES >> 10))
                return usage();
        } else if (nfiles < 2 && (argv[i][0] != '-' || !strcmp(argv[i], "-"))) {
            files[nfiles++] = argv[i];
        } else {
            return usage();
        }
    }
    if (nfiles != 2)
        return usage();
#ifdef _WIN32
    /* The C runtime opens stdin and stdout in text mode: CR LF would be rewritten and a 0x1A
     * byte would end the input (learn.microsoft.com, _setmode). */
    if (_setmode(_fileno(stdin), _O_BINARY) == -1 || _setmode(_fileno(stdout), _O_BINARY) == -1) {
        perror("ht-convert: binary stdin/stdout");
        return 1;
    }
#endif
    FILE *in = strcmp(files[0], "-") ? fopen(files[0], "rb") : stdin;
    out = strcmp(files[1], "-") ? fopen(files[1], "wb") : stdout;
    if (!in || !out) {
        perror(!in ? files[0] : files[1]);
        return 1;
    }
    struct stack_intern si;
    stack_intern_init(&si, 1u << 24, 1u << 24);
    replay_init(&rep, &si, event_cb, NULL);
    if (!plain && htevz_writer_init(&zw, level, write_cb, NULL) != 0) {
        fprintf(stderr, "ht-convert: out of memory for the compressor\n");
        return 1;
    }
    zw.frame_bytes = (uint64_t)frame_kib << 10;
    if (htevb_writer_init_version(&writer, &si, version, plain ? write_cb : htevz_write,
                                  plain ? NULL : &zw) != 0) {
        fprintf(stderr, "ht-convert: out of memory for the writer\n");
        return 1;
    }
    int bad = 0;
    if (is_etl(files[0])) {
        bad = etl_convert(in, files[0], (uint32_t)pid, &si);
    } else {
        static char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
            replay_feed(&rep, buf, n);
        replay_finish(&rep);
    }
    bad |= !plain && htevz_writer_close(&zw) != 0;
    for (uint32_t i = 0; i < rep.nerrors; i++)
        fprintf(stderr, "%s: %s %llu: %s\n", files[0], rep.binary ? "record" : "line",
                (unsigned long long)rep.errors[i].line, rep.errors[i].msg);
    if (!is_etl(files[0]))
        fprintf(stderr, "%llu events, %llu malformed %s\n", (unsigned long long)rep.events,
                (unsigned long long)rep.malformed, rep.binary ? "records" : "lines");
    bad |= ferror(out) || (out != stdout && fclose(out) != 0);
    htevb_writer_close(&writer);
    replay_close(&rep);
    stack_intern_close(&si);
    if (in != stdin)
        fclose(in);
    return bad ? 1 : 0;
}
