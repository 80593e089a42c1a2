/* The ctl's reply buffer (linebuf.h). */
#include "linebuf.h"

#include "ht-chunk.h"

#include <stdlib.h>
#include <string.h>

int linebuf_init(struct linebuf *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->buf = malloc(cap);
    if (!b->buf)
        return -1;
    b->cap = cap;
    return 0;
}

void linebuf_free(struct linebuf *b)
{
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

int linebuf_line(struct linebuf *b, char **line)
{
    char *nl = memchr(b->buf + b->off, '\n', b->len - b->off);
    if (!nl)
        return 0;
    size_t n = (size_t)(nl - (b->buf + b->off));
    *line = malloc(n + 1);
    if (!*line)
        return -1;
    memcpy(*line, b->buf + b->off, n);
    (*line)[n] = '\0';
    b->off += n + 1;
    return 1;
}

char *linebuf_room(struct linebuf *b, size_t max, size_t *room)
{
    if (b->off > 0) {
        memmove(b->buf, b->buf + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len == b->cap) {
        if (b->cap >= max)
            return NULL;
        char *nb = realloc(b->buf, b->cap * 2);
        if (!nb)
            return NULL;
        b->buf = nb;
        b->cap *= 2;
    }
    *room = b->cap - b->len;
    return b->buf + b->len;
}

void linebuf_filled(struct linebuf *b, size_t n)
{
    b->len += n;
}

int linebuf_chunks(struct linebuf *b, struct ht_chunk_reader *r,
                   void (*out)(void *arg, const void *buf, size_t n), void *arg)
{
    int64_t k = ht_chunk_read(r, b->buf + b->off, b->len - b->off, out, arg);
    if (k < 0)
        return -1;
    b->off += (size_t)k;
    return r->done ? 1 : 0;
}
