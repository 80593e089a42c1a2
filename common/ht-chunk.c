/* The chunked byte stream: headers written and read, and an incremental reader. */
#include "ht-chunk.h"

#include "ht-error.h"

#include <stdio.h>
#include <string.h>

size_t ht_chunk_header(char *hdr, size_t n)
{
    return (size_t)snprintf(hdr, HT_CHUNK_HDR_MAX, "%zu\n", n);
}

int ht_chunk_length(const char *h, size_t n, uint64_t *len)
{
    if (n > 0 && h[n - 1] == '\r')
        n--; /* CRLF, as request lines allow */
    /* At most 7 digits: HT_CHUNK_MAX has 7. */
    if (n == 0 || n > 7 || (h[0] == '0' && n > 1))
        return HT_EBADARG;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (h[i] < '0' || h[i] > '9')
            return HT_EBADARG;
        v = v * 10 + (uint64_t)(h[i] - '0');
    }
    if (v > HT_CHUNK_MAX)
        return HT_EBADARG;
    *len = v;
    return 0;
}

/* Header bytes up to its newline: 1 when complete (r->left set), 0 when more
 * are needed, or HT_EBADARG. *used: the bytes taken. */
static int header_take(struct ht_chunk_reader *r, const char *p, size_t n, size_t *used)
{
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) : n;
    /* A header longer than any valid one is bad before its newline comes. */
    if (r->hlen + take > 8)
        return HT_EBADARG;
    memcpy(r->hdr + r->hlen, p, take);
    r->hlen += take;
    *used = take + (nl != NULL);
    if (!nl)
        return 0;
    int rc = ht_chunk_length(r->hdr, r->hlen, &r->left);
    r->hlen = 0;
    if (rc)
        return rc;
    r->done = r->left == 0;
    return 1;
}

int64_t ht_chunk_read(struct ht_chunk_reader *r, const void *buf, size_t n, ht_chunk_out_fn out,
                      void *arg)
{
    const char *p = buf;
    size_t i = 0;
    while (i < n && !r->done) {
        if (r->left == 0) {
            size_t used;
            int rc = header_take(r, p + i, n - i, &used);
            if (rc < 0)
                return rc;
            i += used;
            continue;
        }
        size_t take = n - i < r->left ? n - i : (size_t)r->left;
        out(arg, p + i, take);
        r->left -= take;
        i += take;
    }
    return (int64_t)i;
}
