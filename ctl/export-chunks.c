/* A binary export's bytes as raw chunks (export --transfer chunks, the
 * default for pprof): after the header frame the daemon sends the bytes as
 * a chunked stream (ht-chunk.h), then a trailer with their length and
 * CRC-32. They go to the output file as they come; the file is put in place
 * only when both match (out-file.h: a temporary name until then). */
#include "ctl.h"
#include "out-file.h"

#include "ht-chunk.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

struct chunks_sink {
    struct out_file *o;
    uint64_t n;
    uint32_t crc;
};

static void chunks_out(void *arg, const void *buf, size_t n)
{
    struct chunks_sink *k = arg;
    k->crc = ht_crc32(k->crc, buf, n);
    k->n += n;
    out_write(k->o, buf, n); /* a failure stays in the out_file */
}

/* The trailer's figure key, or -1 when it has none. */
static double trailer_num(const cJSON *env, const char *key)
{
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(env, "data"), key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int ctl_export_chunks(struct ctl *c, int64_t id, struct out_file *o, const cJSON *head, uint64_t *n)
{
    struct chunks_sink k = {o, 0, 0};
    struct ht_chunk_reader r = {0};
    if (conn_read_chunks(c->conn, &r, chunks_out, &k) != 0) {
        if (conn_interrupted())
            return EXIT_CMD; /* said by ctl_export */
        fprintf(stderr,
                "heaptracectl: the profile's bytes stopped after %llu: the connection "
                "closed or a chunk was malformed\n",
                (unsigned long long)k.n);
        return EXIT_UNREACHABLE;
    }
    *n = k.n;
    if (o->failed)
        return EXIT_CMD; /* said by out_write */
    cJSON *env;
    int rc = ctl_read_frame(c, id, &env);
    if (rc != EXIT_OK)
        return rc;
    double want = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(head, "bytes"));
    double bytes = trailer_num(env, "bytes"), crc = trailer_num(env, "crc32");
    cJSON_Delete(env);
    if (bytes != (double)k.n || want != (double)k.n || crc != (double)k.crc) {
        fprintf(stderr,
                "heaptracectl: the profile came damaged: %llu bytes of CRC-32 %08x, the daemon "
                "sent %.0f of CRC-32 %08llx\n",
                (unsigned long long)k.n, (unsigned)k.crc, bytes,
                crc < 0 ? 0ull : (unsigned long long)crc);
        return EXIT_CMD;
    }
    return EXIT_OK;
}
