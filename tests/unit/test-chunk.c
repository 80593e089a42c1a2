/* The chunked byte stream (ht-chunk.h): any bytes through, bad headers refused. */
#include "ht-chunk.h"
#include "ht-error.h"
#include "ht-test.h"

#include <stdlib.h>
#include <string.h>

struct sink {
    unsigned char *p;
    size_t len, cap;
};

static void sink_out(void *arg, const void *buf, size_t n)
{
    struct sink *s = arg;
    if (s->len + n <= s->cap)
        memcpy(s->p + s->len, buf, n);
    s->len += n;
}

/* Bytes of every value, NUL and '\n' among them, in random chunk sizes, read
 * back in random pieces: the same bytes come out, and the reader stops at
 * the end chunk, leaving what follows it (the next reply line) untaken. */
static void test_roundtrip_binary(void)
{
    enum { N = 200000 };
    static unsigned char payload[N], wire[N + N / 8 + 64], got[N];
    srand(24);
    for (size_t i = 0; i < N; i++)
        payload[i] = (unsigned char)(i % 3 == 0 ? 0 : i % 3 == 1 ? '\n' : rand());
    size_t w = 0;
    char hdr[HT_CHUNK_HDR_MAX];
    for (size_t i = 0; i < N;) {
        size_t n = 1 + (size_t)rand() % 5000;
        if (n > N - i)
            n = N - i;
        size_t hl = ht_chunk_header(hdr, n);
        memcpy(wire + w, hdr, hl);
        memcpy(wire + w + hl, payload + i, n);
        w += hl + n;
        i += n;
    }
    size_t end = w + ht_chunk_header((char *)wire + w, 0);
    static const char after[] = "{\"v\":1,\"id\":2,\"ok\":true}\n";
    memcpy(wire + end, after, sizeof(after) - 1);
    w = end + sizeof(after) - 1;
    struct ht_chunk_reader r = {0};
    struct sink s = {got, 0, N};
    size_t at = 0;
    while (at < w && !r.done) {
        size_t n = 1 + (size_t)rand() % 97;
        if (n > w - at)
            n = w - at;
        int64_t took = ht_chunk_read(&r, wire + at, n, sink_out, &s);
        CHECK(took >= 0);
        at += (size_t)took;
        if (!r.done)
            CHECK_EQ((size_t)took, n);
    }
    CHECK(r.done);
    CHECK_EQ(at, end);
    CHECK_EQ(s.len, (size_t)N);
    CHECK(memcmp(got, payload, N) == 0);
}

/* Headers the load stream refuses are refused here too, whole or split. */
static void test_bad_headers(void)
{
    static const char *const bad[] = {"+5\n",  "05\n",      "4194305\n", " 5\n", "5 \n",
                                      "0x1\n", "123456789", "\n",        "-0\n", "5\r\r\n"};
    unsigned char sink_buf[8];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ht_chunk_reader r = {0};
        struct sink s = {sink_buf, 0, sizeof(sink_buf)};
        int64_t rc = 0;
        for (size_t k = 0; bad[i][k] && rc >= 0; k++)
            rc = ht_chunk_read(&r, bad[i] + k, 1, sink_out, &s);
        CHECK_EQ(rc, HT_EBADARG);
        CHECK_EQ(s.len, 0);
    }
    /* Every length a writer makes reads back as itself. */
    static const size_t lens[] = {0, 1, 9, 10, 65536, HT_CHUNK_MAX};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        char hdr[HT_CHUNK_HDR_MAX];
        uint64_t v = 12345;
        size_t hl = ht_chunk_header(hdr, lens[i]);
        CHECK_EQ(ht_chunk_length(hdr, hl - 1, &v), 0);
        CHECK_EQ(v, lens[i]);
    }
}

/* The checksum of a binary reply's trailer: the published check value of
 * CRC-32/ISO-HDLC ("123456789"), and a value continued across pieces equals
 * the whole's (python3 -c 'import zlib; print(hex(zlib.crc32(bytes(range(256)) * 4)))'). */
static void test_crc32(void)
{
    CHECK_EQ(ht_crc32(0, "123456789", 9), 0xcbf43926u);
    CHECK_EQ(ht_crc32(0, "", 0), 0u);
    unsigned char b[1024];
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (unsigned char)i;
    uint32_t whole = ht_crc32(0, b, sizeof(b));
    CHECK_EQ(whole, 0xb70b4c26u);
    CHECK_EQ(ht_crc32(ht_crc32(0, b, 100), b + 100, sizeof(b) - 100), whole);
}

HT_TEST_MAIN(T(roundtrip_binary), T(bad_headers), T(crc32))
