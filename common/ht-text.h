/* Text from outside (session, process and frame names) made safe for a terminal, a log line or
 * JSON. */
#ifndef HT_TEXT_H
#define HT_TEXT_H

#include <stddef.h>

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), or 0 when
 * the bytes there are not one (overlong, surrogate, past U+10FFFF, cut). */
size_t ht_utf8_seq(const unsigned char *s, size_t n);
/* 1 when the n bytes at s are well-formed UTF-8 with no NUL. */
int ht_utf8_valid(const char *s, size_t n);
/* Copy s into out (outsz > 0; always terminated) with every byte that could
 * act on a terminal or end a line written as an escape: "\n", "\r", "\t",
 * other C0 controls, DEL and bytes that are not UTF-8 as "\xNN", C1 controls
 * (U+0080-U+009F) as "\u0080". Printable UTF-8, the backslash included, is
 * copied as is. Output that does not fit is cut at a character boundary and
 * ends in "..."; returns the length written. */
size_t ht_text_escape(const char *s, char *out, size_t outsz);

/* The value of a hex digit (either case), or -1. */
int ht_hexval(int c);

#endif
