/* The control protocol: newline-delimited JSON requests and replies (docs/protocol.md). */
#ifndef HT_PROTO_H
#define HT_PROTO_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define HT_PROTO_VERSION 1
#define HT_REQUEST_MAX (64 * 1024) /* bytes per request line, newline included */
/* Replies bigger than this go out in several frames. Small enough that making
 * one frame holds the daemon's loop for a few milliseconds. */
#define HT_FRAME_TARGET (64 * 1024)
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

/* Split data into frames no bigger than about HT_FRAME_TARGET by cutting its
 * biggest array (a member of data, or of an object member of data such as
 * export's "result"): calls emit once per line. Linear in the reply's size.
 * Takes ownership of data. */
typedef int (*ht_emit_fn)(void *arg, char *line);
int ht_reply_frames(int64_t id, struct cJSON *data, ht_emit_fn emit, void *arg);

/* Merge a continuation frame's data into the first: arrays are appended
 * (nested objects are merged the same way), other members of later frames
 * ignored. Linear in the size of next. */
void ht_reply_merge(struct cJSON *into, struct cJSON *next);

/* Frames built around an array whose items come one at a time: the first
 * frame carries every other member of data around the first items, later
 * frames only {"<outer>":{"<key>":[items]}} (or {"<key>":[items]}), with
 * "more":true on every frame but the last. */
struct ht_framer {
    int64_t id;
    char *pre, *post;           /* first frame: data text before and after its items */
    char *cont_pre, *cont_post; /* later frames */
    int started;
};

/* The array to cut: the biggest array member of data, or of an object
 * member of data (*outer is then that member), NULL if data has none. */
struct cJSON *ht_reply_split_member(struct cJSON *data, struct cJSON **outer);
/* Take arr's items out of data (arr is a member of data, or of outer, itself
 * a member of data; NULL when nothing is cut): *items is their chain (the
 * caller frees it with cJSON_Delete). data is only read. 0 or HT_ENOMEM. */
int ht_framer_init(struct ht_framer *f, int64_t id, struct cJSON *data, struct cJSON *arr,
                   struct cJSON *outer, struct cJSON **items);
/* One frame line ('\n' ended) around items, n bytes of comma-joined item
 * texts; NULL when out of memory. */
char *ht_framer_frame(struct ht_framer *f, const char *items, size_t n, int more);
void ht_framer_close(struct ht_framer *f);

/* A growable string with a hard cap (HT_REPLY_MAX unless set). */
struct ht_sbuf {
    char *p;
    size_t len, cap, max;
};
/* 0, or HT_ENOMEM (out of memory) / HT_ETOOBIG (past max). */
int ht_sbuf_add(struct ht_sbuf *b, const char *s, size_t n);
void ht_sbuf_free(struct ht_sbuf *b);

#endif
