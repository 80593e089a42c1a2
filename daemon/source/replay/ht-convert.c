/* ht-convert: .htev (JSON Lines) to its binary twin, for fast replay (heaptracectl load takes
 * both). */
#include "htevb.h"
#include "replay.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>

static FILE *out;
static struct htevb_writer writer;
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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ht-convert IN.htev OUT.htevb   (- for stdin/stdout)\n");
        return 2;
    }
    FILE *in = strcmp(argv[1], "-") ? fopen(argv[1], "rb") : stdin;
    out = strcmp(argv[2], "-") ? fopen(argv[2], "wb") : stdout;
    if (!in || !out) {
        perror(!in ? argv[1] : argv[2]);
        return 1;
    }
    struct stack_intern si;
    stack_intern_init(&si, 1u << 24, 1u << 24);
    replay_init(&rep, &si, event_cb, NULL);
    htevb_writer_init(&writer, &si, write_cb, NULL);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        replay_feed(&rep, buf, n);
    replay_finish(&rep);
    for (uint32_t i = 0; i < rep.nerrors; i++)
        fprintf(stderr, "%s: line %llu: %s\n", argv[1], (unsigned long long)rep.errors[i].line,
                rep.errors[i].msg);
    fprintf(stderr, "%llu events, %llu malformed lines\n", (unsigned long long)rep.events,
            (unsigned long long)rep.malformed);
    int bad = ferror(out) || (out != stdout && fclose(out) != 0);
    htevb_writer_close(&writer);
    replay_close(&rep);
    stack_intern_close(&si);
    if (in != stdin)
        fclose(in);
    return bad ? 1 : 0;
}
