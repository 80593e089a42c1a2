/* ht-convert: a recorded stream (.htev text, .htevb, either in zstd frames) to .htevb in zstd
 * frames (htevz.h), or plain .htevb with --plain; HTEVB2 records, or HTEVB1 with --v1;
 * heaptracectl load takes all of them. */
#include "htevb.h"
#include "htevz.h"
#include "replay.h"
#include "stack-intern.h"

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

static int usage(void)
{
    fprintf(stderr,
            "usage: ht-convert [--plain] [--v1] [--level N] [--frame-kib N] IN OUT.htevb   (- for "
            "stdin/stdout)\n"
            "  IN: .htev text or .htevb, plain or compressed\n"
            "  OUT: .htevb in zstd frames (level 1-19, default %d; frames of N KiB of stream,\n"
            "       at most and by default %u), or plain with --plain; HTEVB2 records (htevb2.h),\n"
            "       or the older HTEVB1 with --v1\n",
            HTEVZ_LEVEL_DEFAULT, HTEVZ_FRAME_BYTES >> 10);
    return 2;
}

int main(int argc, char **argv)
{
    int plain = 0, version = 2, level = HTEVZ_LEVEL_DEFAULT;
    long frame_kib = HTEVZ_FRAME_BYTES >> 10;
    const char *files[2];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain")) {
            plain = 1;
        } else if (!strcmp(argv[i], "--v1")) {
            version = 1;
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
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        replay_feed(&rep, buf, n);
    replay_finish(&rep);
    int bad = !plain && htevz_writer_close(&zw) != 0;
    for (uint32_t i = 0; i < rep.nerrors; i++)
        fprintf(stderr, "%s: %s %llu: %s\n", files[0], rep.binary ? "record" : "line",
                (unsigned long long)rep.errors[i].line, rep.errors[i].msg);
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
