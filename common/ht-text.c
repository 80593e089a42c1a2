/* Escaping of untrusted text for terminals and logs, and a strict UTF-8 check. */
#include "ht-text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Well-formed sequences after the Unicode Standard, Table 3-7 (chapter 3.9):
 * the second byte's range depends on the first; no overlongs, no surrogates. */
size_t ht_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

int ht_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = ht_utf8_seq(p + i, n - i);
        if (k == 0 || p[i] == 0)
            return 0;
        i += k;
    }
    return 1;
}

/* The escape for the sequence at p of length k, or NULL when it is printed as is. */
static const char *escape_of(const unsigned char *p, size_t k, char tmp[8])
{
    if (k == 0) {
        snprintf(tmp, 8, "\\x%02x", p[0]);
        return tmp;
    }
    if (k == 1) {
        if (p[0] == '\n')
            return "\\n";
        if (p[0] == '\r')
            return "\\r";
        if (p[0] == '\t')
            return "\\t";
        if (p[0] < 0x20 || p[0] == 0x7F) {
            snprintf(tmp, 8, "\\x%02x", p[0]);
            return tmp;
        }
        return NULL;
    }
    /* U+0080-U+009F are C2 80-C2 9F: terminals take some as CSI, OSC, ... */
    if (k == 2 && p[0] == 0xC2 && p[1] <= 0x9F) {
        snprintf(tmp, 8, "\\u%04x", p[1]);
        return tmp;
    }
    return NULL;
}

/* Escaped length of the n bytes at p. */
static size_t escaped_len(const unsigned char *p, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = ht_utf8_seq(p + i, n - i);
        char tmp[8];
        const char *e = escape_of(p + i, k, tmp);
        len += e ? strlen(e) : k;
        i += k ? k : 1;
    }
    return len;
}

size_t ht_text_escape(const char *s, char *out, size_t outsz)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), o = 0, room = outsz - 1;
    for (size_t i = 0; i < n;) {
        size_t k = ht_utf8_seq(p + i, n - i), adv = k ? k : 1;
        char tmp[8];
        const char *e = escape_of(p + i, k, tmp);
        size_t elen = e ? strlen(e) : k;
        /* A piece goes in only if "..." still fits after it when more follows
         * (unless all the rest fits). */
        if (o + elen + (i + adv < n ? 3 : 0) > room &&
            (i + adv == n || o + escaped_len(p + i, n - i) > room)) {
            size_t dots = room - o < 3 ? room - o : 3;
            memcpy(out + o, "...", dots);
            o += dots;
            break;
        }
        memcpy(out + o, e ? e : (const char *)p + i, elen);
        o += elen;
        i += adv;
    }
    out[o] = '\0';
    return o;
}

int ht_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
