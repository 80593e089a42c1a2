/*
 * The heaptrack importer on a small real recording (testdata/README.md) and on
 * hand-made lines: every event read back through the .htevb reader.
 * usage: test-heaptrack-import TESTDATA_DIR
 */
#define _GNU_SOURCE /* fmemopen, open_memstream */
#include "heaptrack-import.h"

#include "ht-event.h"
#include "htevb.h"
#include "stack-intern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define MAX_LIVE 256

/* What the stream says, read back: live blocks by address, counts, names. */
struct readback {
    struct stack_intern si;
    uint64_t allocs, frees, unknown_frees, module_loads, module_unloads, max_t;
    uint64_t live_addr[MAX_LIVE], live_size[MAX_LIVE];
    uint32_t live_stack[MAX_LIVE];
    unsigned nlive;
    char process[64];
    char first_module[256];
};

static void on_event(void *arg, const struct ht_event *ev)
{
    struct readback *rb = arg;
    if (ev->t > rb->max_t)
        rb->max_t = ev->t;
    switch (ev->kind) {
    case HT_EV_ALLOC:
        rb->allocs++;
        if (rb->nlive < MAX_LIVE) {
            rb->live_addr[rb->nlive] = ev->addr;
            rb->live_size[rb->nlive] = ev->size;
            rb->live_stack[rb->nlive++] = ev->stack;
        }
        break;
    case HT_EV_FREE:
        rb->frees++;
        for (unsigned k = 0; k < rb->nlive; k++) {
            if (rb->live_addr[k] == ev->addr) {
                rb->nlive--;
                rb->live_addr[k] = rb->live_addr[rb->nlive];
                rb->live_size[k] = rb->live_size[rb->nlive];
                rb->live_stack[k] = rb->live_stack[rb->nlive];
                return;
            }
        }
        rb->unknown_frees++;
        break;
    case HT_EV_MODULE_LOAD:
        if (!rb->module_loads++) {
            const char *p = stack_intern_strget(&rb->si, (uint32_t)ev->heap);
            snprintf(rb->first_module, sizeof(rb->first_module), "%s", p ? p : "");
        }
        break;
    case HT_EV_MODULE_UNLOAD:
        rb->module_unloads++;
        break;
    }
}

static void on_process(void *arg, const char *name, size_t len)
{
    struct readback *rb = arg;
    snprintf(rb->process, sizeof(rb->process), "%.*s", (int)len, name);
}

/* Import raw (+ sym) into memory and read it back into rb: the import's rc. */
static int import_and_read(FILE *raw, FILE *sym, struct readback *rb, char *err, size_t errsz)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    struct heaptrack_import_stats st;
    int rc = heaptrack_import(raw, sym, out, 4242, &st, err, errsz);
    fclose(out);
    memset(rb, 0, sizeof(*rb));
    stack_intern_init(&rb->si, 1u << 20, 1u << 20);
    struct htevb_reader r;
    htevb_reader_init(&r, &rb->si);
    htevb_feed(&r, (const unsigned char *)buf, len, on_event, on_process, rb);
    CHECK(r.malformed == 0);
    htevb_reader_close(&r);
    free(buf);
    return rc;
}

static FILE *open_data(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        perror(path);
    return f;
}

static const char *frame_name(const struct stack_intern *si, const uint64_t *fr, unsigned k)
{
    if (!(fr[k] & HT_FRAME_SYM))
        return "(address)";
    const char *s = stack_intern_strget(si, (uint32_t)fr[k]);
    return s ? s : "(none)";
}

/* The recording with names: heaptrack_interpret's own counts (60 allocations,
 * 7 leaked) and the leak's stack as heaptrack_print shows it. */
static void test_recording_named(const char *dir)
{
    FILE *raw = open_data(dir, "leaky.raw"), *sym = open_data(dir, "leaky.interpreted");
    if (!raw || !sym) {
        failures++;
        return;
    }
    struct readback rb;
    char err[256] = "";
    CHECK(import_and_read(raw, sym, &rb, err, sizeof(err)) == 0);
    if (err[0])
        fprintf(stderr, "import: %s\n", err);
    CHECK(rb.allocs == 60);
    CHECK(rb.frees == 53);
    CHECK(rb.unknown_frees == 0);
    CHECK(rb.nlive == 7);
    CHECK(strcmp(rb.process, "leaky") == 0);
    CHECK(rb.module_loads == 10); /* vdso included: it has a PT_LOAD */
    CHECK(rb.module_unloads == 0);
    CHECK(strcmp(rb.first_module, "/tmp/htcmp-probe/leaky") == 0); /* "m 1 x": the executable */
    CHECK(rb.max_t == 0); /* its only time line ("c 4", at exit) follows the last event */
    static const char *const want[] = {"leaky!make_leak", "leaky!main",
                                       "libc.so.6!__libc_start_call_main",
                                       "libc.so.6!__libc_start_main_impl", "leaky!_start"};
    for (unsigned k = 0; k < rb.nlive; k++) {
        CHECK(rb.live_size[k] == 100);
        unsigned d;
        const uint64_t *fr = stack_intern_frames(&rb.si, rb.live_stack[k], &d);
        CHECK(d == 5);
        for (unsigned j = 0; j < d && j < 5; j++) {
            if (strcmp(frame_name(&rb.si, fr, j), want[j]) != 0) {
                fprintf(stderr, "leak frame %u: %s, want %s\n", j, frame_name(&rb.si, fr, j),
                        want[j]);
                failures++;
            }
        }
    }
    stack_intern_close(&rb.si);
    fclose(raw);
    fclose(sym);
}

/* The raw data alone: the same events, frames as addresses (heaptrack's,
 * already minus one: the leak's innermost is make_leak's call site). */
static void test_recording_raw(const char *dir)
{
    FILE *raw = open_data(dir, "leaky.raw");
    if (!raw) {
        failures++;
        return;
    }
    struct readback rb;
    char err[256] = "";
    CHECK(import_and_read(raw, NULL, &rb, err, sizeof(err)) == 0);
    CHECK(rb.allocs == 60 && rb.frees == 53 && rb.nlive == 7);
    if (rb.nlive) {
        unsigned d;
        const uint64_t *fr = stack_intern_frames(&rb.si, rb.live_stack[0], &d);
        CHECK(d == 5);
        CHECK(d && fr[0] == 0x55c2af6f9161ull);
        CHECK(d == 5 && fr[4] == 0x55c2af6f9090ull);
    }
    stack_intern_close(&rb.si);
    fclose(raw);
}

/* Hand-made streams: s is the raw text, y the interpreted one (or NULL). */
static int run_text(const char *s, const char *y, struct readback *rb, char *err, size_t errsz)
{
    FILE *raw = fmemopen((void *)s, strlen(s), "r");
    FILE *sym = y ? fmemopen((void *)y, strlen(y), "r") : NULL;
    int rc = import_and_read(raw, sym, rb, err, errsz);
    fclose(raw);
    if (sym)
        fclose(sym);
    return rc;
}

static void test_lines(void)
{
    struct readback rb;
    char err[256];
    /* Times, modules listed again after a dlclose (one gone: unloaded), a free of a
     * block allocated before the recording (written: the engine counts it). */
    const char *ok = "v 10400 3\n"
                     "x 8 /bin/app\n"
                     "m 1 -\n"
                     "m 1 x 1000 0 100\n"
                     "m 7 /lib/b1 5000 0 200 1000 10\n"
                     "t 1010 0\n"
                     "c 5\n"
                     "+ 20 1 a000\n"
                     "m 1 -\n"
                     "m 1 x 1000 0 100\n"
                     "c 7\n"
                     "- a000\n"
                     "- b000\n";
    CHECK(run_text(ok, NULL, &rb, err, sizeof(err)) == 0);
    CHECK(rb.allocs == 1 && rb.frees == 2 && rb.unknown_frees == 1 && rb.nlive == 0);
    CHECK(rb.module_loads == 2 && rb.module_unloads == 1);
    CHECK(rb.max_t == 7000000ull);
    CHECK(strcmp(rb.process, "app") == 0);
    stack_intern_close(&rb.si);

    /* An interpreted stream of another recording: the parents disagree. */
    const char *raw2 = "v 10400 3\nt 1000 0\nt 2000 1\n+ 8 2 c000\n";
    const char *sym2 = "v 10400 3\ns 1 m\ns 1 f\ni 1000 1 2\nt 1 0\ni 2000 1 2\nt 2 0\n";
    err[0] = 0;
    CHECK(run_text(raw2, sym2, &rb, err, sizeof(err)) != 0);
    CHECK(strstr(err, "not the same recording") != NULL);
    stack_intern_close(&rb.si);

    /* The same with matching parents: names "module!function". */
    const char *sym3 = "v 10400 3\ns 5 /x/mm\ns 2 fn\ni 1000 1 2\nt 1 0\ni 2000 1\nt 2 1\n";
    CHECK(run_text(raw2, sym3, &rb, err, sizeof(err)) == 0);
    if (rb.nlive == 1) {
        unsigned d;
        const uint64_t *fr = stack_intern_frames(&rb.si, rb.live_stack[0], &d);
        CHECK(d == 2);
        CHECK(d == 2 && !(fr[0] & HT_FRAME_SYM) && fr[0] == 0x2000); /* no function: the address */
        CHECK(d == 2 && strcmp(frame_name(&rb.si, fr, 1), "mm!fn") == 0);
    } else {
        failures++;
    }
    stack_intern_close(&rb.si);

    /* An ip with inlined frames: the first frame is the innermost (inlined)
     * function, then its callers out to the function the ip lies in. */
    const char *raw4 = "v 10400 3\nt 1000 0\n+ 8 1 c000\n";
    const char *sym4 = "v 10400 3\ns 5 /x/mm\ns 5 inner\ns 4 file\ns 5 outer\n"
                       "i 1000 1 2 3 a 4 3 14\nt 1 0\n";
    CHECK(run_text(raw4, sym4, &rb, err, sizeof(err)) == 0);
    if (rb.nlive == 1) {
        unsigned d;
        const uint64_t *fr = stack_intern_frames(&rb.si, rb.live_stack[0], &d);
        CHECK(d == 2);
        CHECK(d == 2 && strcmp(frame_name(&rb.si, fr, 0), "mm!inner") == 0);
        CHECK(d == 2 && strcmp(frame_name(&rb.si, fr, 1), "mm!outer") == 0);
    } else {
        failures++;
    }
    stack_intern_close(&rb.si);

    /* Malformed lines fail with their line number. */
    err[0] = 0;
    CHECK(run_text("v 10400 3\n+ zz 1 2\n", NULL, &rb, err, sizeof(err)) != 0);
    CHECK(strstr(err, "raw line 2") != NULL);
    stack_intern_close(&rb.si);
    CHECK(run_text("v 10400 3\n+ 10 5 2\n", NULL, &rb, err, sizeof(err)) !=
          0); /* trace 5 unknown */
    stack_intern_close(&rb.si);
    CHECK(run_text("v 10400 3\nm 50 short\n", NULL, &rb, err, sizeof(err)) !=
          0); /* length past the line */
    stack_intern_close(&rb.si);
    CHECK(run_text("v 10400 2\n", NULL, &rb, err, sizeof(err)) != 0); /* unsized strings */
    stack_intern_close(&rb.si);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test-heaptrack-import TESTDATA_DIR\n");
        return 2;
    }
    test_recording_named(argv[1]);
    test_recording_raw(argv[1]);
    test_lines();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
