/* The protocol's chunked byte stream: "<length>\n" then that many bytes, any
 * bytes (NUL and newlines included), and "0\n" at the end. load sends a
 * trace this way; a binary export's reply (pprof) comes back the same way,
 * its trailer carrying the length and CRC-32 of the bytes. */
#ifndef HT_CHUNK_H
#define HT_CHUNK_H

#include <stddef.h>
#include <stdint.h>

/* The largest chunk a reader takes. */
#define HT_CHUNK_MAX (4u << 20)
/* Room for a header: 7 digits (HT_CHUNK_MAX has 7) and the newline. */
#define HT_CHUNK_HDR_MAX 16

/* The header of a chunk of n bytes (n <= HT_CHUNK_MAX; 0 is the end) into
 * hdr, HT_CHUNK_HDR_MAX bytes: its length. */
size_t ht_chunk_header(char *hdr, size_t n);

/* The length in a chunk header of n bytes (its newline excluded): decimal
 * digits only, no sign, space or leading zero, at most HT_CHUNK_MAX; a
 * trailing CR is allowed. 0, or HT_EBADARG. */
int ht_chunk_length(const char *h, size_t n, uint64_t *len);

/* CRC-32 of n bytes continued from crc (0 to start): the ISO-HDLC CRC that
 * gzip (RFC 1952 section 8) and zlib's crc32() compute, reflected
 * polynomial 0xEDB88320, "123456789" -> 0xCBF43926. */
uint32_t ht_crc32(uint32_t crc, const void *buf, size_t n);

/* An incremental reader of a chunked stream, fed as the bytes come. */
struct ht_chunk_reader {
    char hdr[HT_CHUNK_HDR_MAX];
    size_t hlen;
    uint64_t left; /* bytes left of the current chunk */
    int done;      /* the end chunk was read */
};
typedef void (*ht_chunk_out_fn)(void *arg, const void *buf, size_t n);

/* Feed n bytes: each chunk's bytes go to out. Returns the bytes taken (fewer
 * than n only once the end chunk is read: the rest is not the stream's), or
 * HT_EBADARG on a bad header. */
int64_t ht_chunk_read(struct ht_chunk_reader *r, const void *buf, size_t n, ht_chunk_out_fn out,
                      void *arg);

#endif
