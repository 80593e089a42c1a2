/* URL parameters' decoding (url.c), shared by the routes and unit-tested. */
#ifndef HTTP_URL_H
#define HTTP_URL_H

#include <stddef.h>

/* A URL parameter's name or value s[0..n), %XX and '+' decoded
 * (application/x-www-form-urlencoded), into out (cap bytes, NUL-ended): 0,
 * or -1 when a %-escape is malformed or %00, or out is too small. */
int url_decode(const char *s, size_t n, char *out, size_t cap);

#endif
