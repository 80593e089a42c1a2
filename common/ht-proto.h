/* The control protocol: newline-delimited JSON requests and replies (ARCHITECTURE.md). */
#ifndef HT_PROTO_H
#define HT_PROTO_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define HT_PROTO_VERSION 1
#define HT_REQUEST_MAX (64 * 1024)      /* bytes per request line, newline included */
#define HT_FRAME_TARGET (256 * 1024)    /* replies bigger than this go out in several frames */
#define HT_REPLY_MAX (64 * 1024 * 1024) /* a ctl refuses a single frame beyond this */

struct ht_request {
    struct cJSON *root; /* owned; free with ht_request_free */
    int64_t id;
    int v;
    const char *cmd;
    struct cJSON *args; /* NULL when absent */
};

/* Parse one request line. 0; HT_EBADJSON (not JSON, not an object, bad
 * "id"/"cmd"); HT_EVERSION (req->v is what the client sent). The id is
 * filled whenever it could be read, so errors can echo it. */
int ht_request_parse(const char *line, size_t len, struct ht_request *req, char *err, size_t errsz);
void ht_request_free(struct ht_request *req);

/* Build a request line (with '\n'); takes ownership of args. */
char *ht_request_build(int64_t id, const char *cmd, struct cJSON *args);

/* Reply lines (each ends with '\n'); data is taken over and freed. */
char *ht_reply_ok(int64_t id, struct cJSON *data, int more);
char *ht_reply_err(int64_t id, int err, const char *msg);

/* Split data into frames no bigger than about HT_FRAME_TARGET by cutting the
 * first large array among its members ("rows", "samples", ...): calls emit
 * once per line. Takes ownership of data. */
typedef int (*ht_emit_fn)(void *arg, char *line);
int ht_reply_frames(int64_t id, struct cJSON *data, ht_emit_fn emit, void *arg);

/* Merge a continuation frame's data into the first: arrays are appended,
 * other members of later frames ignored. */
void ht_reply_merge(struct cJSON *into, struct cJSON *next);

#endif
