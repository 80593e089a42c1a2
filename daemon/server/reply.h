/* Replies made one frame at a time (reply.c): a reply stream is asked for
 * its next frame when the client has read the previous ones. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef REPLY_H
#define REPLY_H

#include "ht-proto.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct server;
struct session;

/* A reply produced one frame at a time (reply.c): its next frame is made when
 * the client has read the previous ones, so no request holds the loop for
 * longer than one frame takes. */
struct reply_src {
    struct ht_framer fr;
    /* Append the next item's JSON text to out (empty): 1 added, 0 no more
     * items, or an error (the reply then ends with an error envelope, err). */
    int (*item)(struct reply_src *r, struct ht_sbuf *out, char *err, size_t errsz);
    void (*free)(struct reply_src *r); /* frees r itself */
    /* A reply of bytes, not items (reply_bytes_src): its next frame, *len
     * bytes (any bytes), *last set on the last; NULL when out of memory. */
    char *(*frame)(struct reply_src *r, size_t *len, int *last);
    struct ht_sbuf ahead;              /* the next item, made early: it says if more come */
    int done;
    const char *lead; /* JSON text of an item sent before the others (a CSV header), or NULL */
    /* For the debug log: the loop's longest hold for one frame, wall time
     * and the loop thread's CPU time (the one a loaded host does not swell). */
    uint64_t frames, bytes, slowest_ns, slowest_cpu_ns;
    uint64_t held; /* bytes the source holds (a query's rows): queued output until freed */
};
/* How a stream turns one row (or sample) into its item: 1 added to out, 0
 * skipped, or an error. NULL means the row's JSON itself. */
typedef int (*reply_fmt_fn)(const void *arg, const struct cJSON *row, uint32_t rank,
                            struct ht_sbuf *out);
/* Append row as the item fmt makes of it (see reply_fmt_fn). */
int reply_item_add(const struct cJSON *row, reply_fmt_fn fmt, const void *arg, uint32_t rank,
                   struct ht_sbuf *out);
/* Cut data's array arr (in data, or in its member outer) for r, the reply
 * to request id; data is freed. 0, or HT_ENOMEM with r freed. */
int reply_src_ready(struct reply_src *r, int64_t id, struct cJSON *data, struct cJSON *arr,
                    struct cJSON *outer);
/* Reply data (taken over) as a stream whose biggest array is cut into
 * frames, as cmd_reply sends it; NULL when out of memory. */
struct reply_src *reply_json_src(int64_t id, struct cJSON *data);
/* Bytes (taken over, ht_malloc'd, n of them) as a reply: the header line
 * {"v":1,"id":id,"ok":true,"more":true,"data":head} (head taken over), then
 * the bytes as chunks (ht-chunk.h) of at most HT_FRAME_TARGET, a frame each,
 * "0\n", and the trailer line {"v":1,"id":id,"ok":true,"data":{"bytes":n,
 * "crc32":crc}} (crc: ht_crc32 of the bytes). NULL when out of memory (all
 * freed). */
struct reply_src *reply_bytes_src(int64_t id, struct cJSON *head, uint8_t *bytes, size_t n,
                                  uint32_t crc);
/* The next frame of r, *len bytes (*last = 1 when it is the last one, or an
 * error envelope ended it); NULL when out of memory. */
char *reply_src_next(struct reply_src *r, size_t *len, int *last);
void reply_src_free(struct reply_src *r);
/* The session a streamed reply reads from, or NULL with the message for a
 * session dropped while its reply was sent. */
struct session *reply_session(struct server *srv, uint32_t id, char *err, size_t errsz);
#endif
