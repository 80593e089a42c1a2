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

/* Four bits at a time: entry i is i's remainder after four shifts of the
 * reflected polynomial (a 16-entry table, computed from the polynomial). */
static const uint32_t crc_nibble[16] = {
    0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
    0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
};

uint32_t ht_crc32(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *b = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        crc = crc_nibble[crc & 15] ^ (crc >> 4);
        crc = crc_nibble[crc & 15] ^ (crc >> 4);
    }
    return ~crc;
}
