/* The parts of a request's URL the routes decode (url.h). */
#include "url.h"

static int hexval(char h)
{
    return h >= '0' && h <= '9'   ? h - '0'
           : h >= 'a' && h <= 'f' ? h - 'a' + 10
           : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                  : -1;
}

/* A URL parameter's name or value, %XX and '+' decoded (WHATWG URL's
 * application/x-www-form-urlencoded parser), into out: 0, or -1 when
 * malformed, too long or holding a NUL. */
int url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '+') {
            ch = ' ';
        } else if (ch == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
            ch = hi << 4 | lo;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}
