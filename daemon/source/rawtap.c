/* The raw record tap (rawtap.h). */
#include "rawtap.h"

#include "ht-alloc.h"
#include "mem-acct.h"
#include "source.h"

#include <stdatomic.h>
#include <string.h>

struct rawtap {
    uv_async_t async;
    uv_mutex_t mu;
    atomic_int on;
    char *buf; /* cap bytes while on */
    size_t len, cap;
    char header[RAWTAP_HEADER_MAX]; /* hlen bytes: the line the tap opened with */
    size_t hlen;
    uint64_t nlines;  /* waiting */
    uint64_t lost;    /* since the last take */
    struct rawtap_stats st;
    struct mem_acct *acct;
    void (*ready)(void *arg);
    void *arg;
};

static void async_cb(uv_async_t *h)
{
    struct rawtap *t = h->data;
    if (t->ready)
        t->ready(t->arg);
}

int rawtap_new(struct rawtap **out, uv_loop_t *loop, size_t cap, struct mem_acct *acct,
               void (*ready)(void *arg), void *arg)
{
    *out = NULL;
    struct rawtap *t = ht_calloc(1, sizeof(*t));
    if (!t)
        return UV_ENOMEM;
    if (uv_mutex_init(&t->mu) != 0) {
        ht_free(t);
        return UV_ENOMEM;
    }
    if (uv_async_init(loop, &t->async, async_cb) != 0) {
        uv_mutex_destroy(&t->mu);
        ht_free(t);
        return UV_ENOMEM;
    }
    t->async.data = t;
    t->cap = cap;
    t->acct = acct;
    t->ready = ready;
    t->arg = arg;
    *out = t;
    return 0;
}

static void closed_cb(uv_handle_t *h)
{
    ht_free(h->data);
}

void rawtap_free(struct rawtap *t)
{
    if (!t)
        return;
    rawtap_enable(t, 0, NULL, 0);
    uv_mutex_destroy(&t->mu);
    t->ready = NULL;
    uv_close((uv_handle_t *)&t->async, closed_cb);
}

int rawtap_enable(struct rawtap *t, int on, const char *header, size_t hlen)
{
    uv_mutex_lock(&t->mu);
    int rc = 0;
    if (on && !t->buf) {
        t->buf = mem_alloc(t->acct, MEM_decoder_buffers, t->cap);
        if (!t->buf)
            rc = UV_ENOMEM;
    }
    if (on && t->buf) {
        t->len = t->nlines = t->lost = 0;
        t->hlen = 0;
        if (header && hlen <= sizeof(t->header)) {
            memcpy(t->header, header, hlen);
            t->hlen = hlen;
        }
        if (header && hlen <= t->cap) {
            memcpy(t->buf, header, hlen);
            t->len = hlen;
            t->nlines = 1;
        }
        atomic_store(&t->on, 1);
    } else if (!on) {
        atomic_store(&t->on, 0);
        mem_free(t->acct, MEM_decoder_buffers, t->buf, t->buf ? t->cap : 0);
        t->buf = NULL;
        t->len = t->nlines = t->lost = t->hlen = 0;
    }
    uv_mutex_unlock(&t->mu);
    if (on && rc == 0)
        uv_async_send(&t->async); /* the header */
    return rc;
}

int rawtap_on(struct rawtap *t)
{
    return t && atomic_load_explicit(&t->on, memory_order_relaxed);
}

size_t rawtap_header(struct rawtap *t, char *buf, size_t cap)
{
    size_t n = 0;
    uv_mutex_lock(&t->mu);
    if (t->buf && t->hlen && t->hlen <= cap) {
        memcpy(buf, t->header, t->hlen);
        n = t->hlen;
    }
    uv_mutex_unlock(&t->mu);
    return n;
}

void rawtap_put(struct rawtap *t, const char *line, size_t n)
{
    if (!rawtap_on(t))
        return;
    int wake = 0;
    uv_mutex_lock(&t->mu);
    if (t->buf) {
        if (n > t->cap - t->len) {
            t->lost++;
            t->st.lost++;
        } else {
            wake = t->len == 0;
            memcpy(t->buf + t->len, line, n);
            t->len += n;
            t->nlines++;
            t->st.lines++;
            t->st.bytes += n;
        }
    }
    uv_mutex_unlock(&t->mu);
    if (wake)
        uv_async_send(&t->async);
}

char *rawtap_take(struct rawtap *t, size_t *n, uint64_t *lines, uint64_t *lost)
{
    *n = 0;
    *lines = *lost = 0;
    uv_mutex_lock(&t->mu);
    char *r = NULL;
    if (t->len) {
        r = ht_malloc(t->len);
        if (r) {
            memcpy(r, t->buf, t->len);
            *n = t->len;
            *lines = t->nlines;
        } else {
            t->lost += t->nlines; /* out of memory: these become the gap */
        }
        t->len = t->nlines = 0;
    }
    *lost = t->lost;
    t->lost = 0;
    uv_mutex_unlock(&t->mu);
    return r;
}

void rawtap_flush(struct rawtap *t, const struct source_sink *sink)
{
    if (!rawtap_on(t))
        return;
    size_t n;
    uint64_t lines, lost;
    char *buf = rawtap_take(t, &n, &lines, &lost);
    if ((n || lost) && sink->raw)
        sink->raw(sink->arg, buf, n, lines, lost);
    ht_free(buf);
}

void rawtap_off(struct rawtap *t, const struct source_sink *sink)
{
    if (!t)
        return;
    rawtap_flush(t, sink);
    rawtap_enable(t, 0, NULL, 0);
}

void rawtap_stats(struct rawtap *t, struct rawtap_stats *st)
{
    uv_mutex_lock(&t->mu);
    *st = t->st;
    uv_mutex_unlock(&t->mu);
}
