/* The ctl's reply buffer: bytes read from the connection, cut into lines
 * (shared by conn-unix.c and conn-win.c). */
#ifndef LINEBUF_H
#define LINEBUF_H

#include <stddef.h>

struct linebuf {
    char *buf;
    size_t len, off, cap; /* bytes [off, len) are unread */
};

/* 0, or -1 out of memory. */
int linebuf_init(struct linebuf *b, size_t cap);
void linebuf_free(struct linebuf *b);
/* A buffered complete line, without its newline, malloc'd into *line: 1;
 * none buffered: 0; out of memory: -1. */
int linebuf_line(struct linebuf *b, char **line);
/* Where the next read goes and how much fits (*room), after moving the unread
 * bytes to the front and growing the buffer up to max; NULL when a line would
 * pass max bytes or memory runs out. */
char *linebuf_room(struct linebuf *b, size_t max, size_t *room);
/* n bytes were read into the room. */
void linebuf_filled(struct linebuf *b, size_t n);
struct ht_chunk_reader;
/* The buffered bytes fed to a chunked stream's reader (ht-chunk.h; each
 * chunk's bytes go to out), those after its end chunk left buffered (the
 * lines that follow). 1 once the end chunk was read, 0 when it needs more,
 * -1 on a bad chunk header. */
int linebuf_chunks(struct linebuf *b, struct ht_chunk_reader *r,
                   void (*out)(void *arg, const void *buf, size_t n), void *arg);

#endif
