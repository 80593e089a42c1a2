/* Fuzz target: bytes as an .etl file through the reader (daemon/source/etl: buffer walk,
 * log-file header, XPRESS, record walker, per-processor merge) and the --stats summary, with
 * small caps so that every limit is reached; then again (rewound) through the events path
 * (stack-key definitions, the ETW decoder and correlator, as load does); and the bytes as an
 * XPRESS stream alone. Every hostile size must end as a counted error or drop, never a read
 * out of bounds or an allocation past the caps. */
#include "etl-events.h"
#include "etl-read.h"
#include "etl-stats.h"
#include "etl-xpress.h"
#include "stack-intern.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct input {
    const uint8_t *p;
    size_t n;
};

static int64_t read_cb(void *arg, uint64_t off, void *buf, size_t n)
{
    const struct input *in = arg;
    if (off > in->n)
        return -1;
    size_t k = in->n - off < n ? in->n - off : n;
    memcpy(buf, in->p + off, k);
    return (int64_t)k;
}

static void record_cb(void *arg, const struct etl_record *r)
{
    /* Every payload byte is read: one past the buffer shows under ASan. */
    volatile uint8_t x = 0;
    for (uint32_t i = 0; i < r->len; i++)
        x ^= r->payload[i];
    for (uint32_t i = 0; i < r->ext_len; i++)
        x ^= r->ext[i];
    (void)x;
    etl_stats_record(arg, r);
}

static void event_cb(void *arg, const struct ht_event *ev)
{
    uint64_t *n = arg;
    *n += ev->kind;
}

/* The events path over the same reader, rewound: pid 0 follows the first heap process. */
static void run_events(struct etl_reader *r)
{
    struct stack_intern si;
    if (stack_intern_init(&si, 1u << 10, 1u << 12) != 0)
        return;
    struct etl_events *ev;
    uint64_t n = 0;
    etl_reader_rewind(r);
    if (etl_events_new(&ev, &si, etl_reader_header(r), 0, event_cb, &n) == 0) {
        etl_events_run(ev, r);
        etl_events_free(ev);
    }
    stack_intern_close(&si);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t out[1 << 16];
    etl_xpress_decode(data, size, out, sizeof(out));
    struct input in = {data, size};
    struct etl_limits lim = {
        .max_buffer = 1u << 20, .max_buffers = 4096, .max_cpus = 64, .max_memory = 4u << 20};
    struct etl_reader *r;
    struct etl_stats *st = etl_stats_new(64, 64);
    if (!st || etl_reader_new(&r, read_cb, &in, size, &lim) != 0) {
        etl_stats_free(st);
        return 0;
    }
    if (etl_reader_open(r) == 0) {
        etl_reader_run(r, record_cb, st);
        run_events(r);
    }
    cJSON *j = etl_stats_json(st, r);
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    free(txt);
    cJSON_Delete(j);
    etl_stats_free(st);
    etl_reader_free(r);
    return 0;
}
