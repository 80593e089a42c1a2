/* Replies made one frame at a time: the frames of a big reply are built when
 * the client has read the previous ones (server.c asks), never all at once. */
#include "reply.h"

#include "server-state.h"

#include "ht-alloc.h"
#include "ht-chunk.h"
#include "ht-error.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <time.h>
#endif

struct session *reply_session(struct server *srv, uint32_t id, char *err, size_t errsz)
{
    for (struct session *s = srv->sessions.head; s; s = session_next(s))
        if (session_id(s) == id)
            return s;
    snprintf(err, errsz, "session %u was dropped while the reply was sent", id);
    return NULL;
}

/* Make the next item ahead unless it is there or the items ended. */
static int ahead_fill(struct reply_src *r, char *err, size_t errsz)
{
    if (r->ahead.len || r->done)
        return 0;
    if (r->lead) {
        int rc = ht_sbuf_add(&r->ahead, r->lead, strlen(r->lead));
        r->lead = NULL;
        return rc;
    }
    int rc = r->item(r, &r->ahead, err, errsz);
    if (rc <= 0)
        r->done = 1;
    return rc < 0 ? rc : 0;
}

/* Items joined by commas until the next one would pass HT_FRAME_TARGET (a
 * frame holds at least one item). */
static int frame_items(struct reply_src *r, struct ht_sbuf *items, char *err, size_t errsz)
{
    int rc;
    while ((rc = ahead_fill(r, err, errsz)) == 0 && r->ahead.len) {
        if (items->len && items->len + 1 + r->ahead.len > HT_FRAME_TARGET)
            break;
        if (items->len && (rc = ht_sbuf_add(items, ",", 1)) != 0)
            break;
        if ((rc = ht_sbuf_add(items, r->ahead.p, r->ahead.len)) != 0)
            break;
        r->ahead.len = 0;
    }
    if (rc == HT_ETOOBIG || rc == HT_ENOMEM)
        snprintf(err, errsz, "%s making the reply",
                 rc == HT_ENOMEM ? "out of memory" : "an item too big");
    return rc;
}

/* CPU time the calling thread has used, ns: what a frame cost the loop
 * whatever else the host runs (its wall time also counts the waits for a
 * core on a loaded machine). POSIX: the thread CPU-time clock
 * (clock_gettime, CLOCK_THREAD_CPUTIME_ID, POSIX.1-2008 <time.h>); Windows:
 * GetThreadTimes, kernel and user time in 100 ns units (Win32 API docs,
 * processthreadsapi.h), advancing by scheduler ticks. 0 when unknown. */
static uint64_t thread_cpu_ns(void)
{
#ifdef _WIN32
    FILETIME c, e, k, u;
    if (!GetThreadTimes(GetCurrentThread(), &c, &e, &k, &u))
        return 0;
    uint64_t kt = ((uint64_t)k.dwHighDateTime << 32) | k.dwLowDateTime;
    uint64_t ut = ((uint64_t)u.dwHighDateTime << 32) | u.dwLowDateTime;
    return (kt + ut) * 100;
#else
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* The next frame of a reply of items. */
static char *items_frame(struct reply_src *r, size_t *len, int *last)
{
    struct ht_sbuf items = {0};
    char err[256] = "";
    int rc = frame_items(r, &items, err, sizeof(err));
    char *line;
    if (rc != 0) {
        /* The frames already sent had more:true: this envelope ends the reply. */
        *last = 1;
        line = ht_reply_err(r->fr.id, rc, err);
    } else {
        *last = r->ahead.len == 0;
        line = ht_framer_frame(&r->fr, items.p ? items.p : "", items.len, !*last);
    }
    ht_sbuf_free(&items);
    *len = line ? strlen(line) : 0;
    return line;
}

char *reply_src_next(struct reply_src *r, size_t *len, int *last)
{
    uint64_t t0 = uv_hrtime(), c0 = thread_cpu_ns();
    char *line = r->frame ? r->frame(r, len, last) : items_frame(r, len, last);
    uint64_t dt = uv_hrtime() - t0, dc = thread_cpu_ns() - c0;
    r->frames++;
    r->bytes += line ? *len : 0;
    if (dt > r->slowest_ns)
        r->slowest_ns = dt;
    if (dc > r->slowest_cpu_ns)
        r->slowest_cpu_ns = dc;
    return line;
}

void reply_src_free(struct reply_src *r)
{
    ht_framer_close(&r->fr);
    ht_sbuf_free(&r->ahead);
    r->free(r);
}

/* A reply already built as cJSON: its biggest array is printed item by item. */
struct json_src {
    struct reply_src base;
    cJSON *data;  /* what is left around the cut array */
    cJSON *items; /* the cut array's items not yet sent */
};

static int json_item(struct reply_src *r, struct ht_sbuf *out, char *err, size_t errsz)
{
    struct json_src *j = (struct json_src *)r;
    (void)err;
    (void)errsz;
    cJSON *x = j->items;
    if (!x)
        return 0;
    j->items = x->next;
    x->next = x->prev = NULL;
    char *s = cJSON_PrintUnformatted(x);
    cJSON_Delete(x);
    int rc = s ? ht_sbuf_add(out, s, strlen(s)) : HT_ENOMEM;
    cJSON_free(s);
    return rc == 0 ? 1 : rc;
}

static void json_free(struct reply_src *r)
{
    struct json_src *j = (struct json_src *)r;
    cJSON_Delete(j->items);
    cJSON_Delete(j->data);
    ht_free(j);
}

int reply_item_add(const cJSON *row, reply_fmt_fn fmt, const void *arg, uint32_t rank,
                   struct ht_sbuf *out)
{
    if (!row)
        return HT_ENOMEM;
    if (fmt)
        return fmt(arg, row, rank, out);
    char *s = cJSON_PrintUnformatted(row);
    int rc = s ? ht_sbuf_add(out, s, strlen(s)) : HT_ENOMEM;
    cJSON_free(s);
    return rc == 0 ? 1 : rc;
}

int reply_src_ready(struct reply_src *r, int64_t id, cJSON *data, cJSON *arr, cJSON *outer)
{
    cJSON *items = NULL;
    int rc = data ? ht_framer_init(&r->fr, id, data, arr, outer, &items) : HT_ENOMEM;
    cJSON_Delete(items); /* the stream makes its own */
    cJSON_Delete(data);
    if (rc != 0) {
        reply_src_free(r);
        return HT_ENOMEM;
    }
    return 0;
}

struct reply_src *reply_json_src(int64_t id, cJSON *data)
{
    struct json_src *j = data ? ht_calloc(1, sizeof(*j)) : NULL;
    if (!j) {
        cJSON_Delete(data);
        return NULL;
    }
    j->data = data;
    j->base.item = json_item;
    j->base.free = json_free;
    cJSON *outer;
    cJSON *arr = ht_reply_split_member(data, &outer);
    if (ht_framer_init(&j->base.fr, id, data, arr, outer, &j->items) != 0) {
        reply_src_free(&j->base);
        return NULL;
    }
    return &j->base;
}

/* A reply of bytes: a header line, the bytes in chunks, the trailer line. */
struct bytes_src {
    struct reply_src base;
    char *head, *trailer; /* lines, each sent once (NULL after) */
    uint8_t *bytes;
    size_t n, off;
};

/* One chunk of the bytes (at most HT_FRAME_TARGET: a frame of any other
 * reply), or once they are all sent the end chunk and the trailer. A copy
 * of 64 KiB per frame: the loop never holds for the whole profile. */
static char *bytes_frame(struct reply_src *r, size_t *len, int *last)
{
    struct bytes_src *b = (struct bytes_src *)r;
    char *out;
    *last = 0;
    if (b->head) {
        out = b->head;
        b->head = NULL;
        *len = strlen(out);
        return out;
    }
    if (b->off < b->n) {
        size_t k = b->n - b->off < HT_FRAME_TARGET ? b->n - b->off : HT_FRAME_TARGET;
        char hdr[HT_CHUNK_HDR_MAX];
        size_t hl = ht_chunk_header(hdr, k);
        out = ht_malloc(hl + k);
        if (!out)
            return NULL;
        memcpy(out, hdr, hl);
        memcpy(out + hl, b->bytes + b->off, k);
        b->off += k;
        *len = hl + k;
        return out;
    }
    size_t tl = strlen(b->trailer);
    out = ht_malloc(2 + tl + 1);
    if (!out)
        return NULL;
    memcpy(out, "0\n", 2);
    memcpy(out + 2, b->trailer, tl + 1);
    *len = 2 + tl;
    *last = 1;
    return out;
}

static void bytes_free(struct reply_src *r)
{
    struct bytes_src *b = (struct bytes_src *)r;
    ht_free(b->head);
    ht_free(b->trailer);
    ht_free(b->bytes);
    ht_free(b);
}

struct reply_src *reply_bytes_src(int64_t id, cJSON *head, uint8_t *bytes, size_t n, uint32_t crc)
{
    struct bytes_src *b = ht_calloc(1, sizeof(*b));
    cJSON *t = cJSON_CreateObject();
    if (t) {
        cJSON_AddNumberToObject(t, "bytes", (double)n);
        cJSON_AddNumberToObject(t, "crc32", (double)crc);
    }
    if (b) {
        b->bytes = bytes;
        b->n = n;
        b->head = head ? ht_reply_ok(id, head, 1) : NULL;
        b->trailer = t ? ht_reply_ok(id, t, 0) : NULL;
    } else {
        cJSON_Delete(head);
        cJSON_Delete(t);
    }
    if (!b || !b->head || !b->trailer) {
        if (b)
            bytes_free(&b->base);
        else
            ht_free(bytes);
        return NULL;
    }
    b->base.frame = bytes_frame;
    b->base.free = bytes_free;
    b->base.fr.id = id;
    b->base.held = n; /* the profile, until its last chunk: counted as queued output */
    return &b->base;
}
