/* Frame pattern parsing and matching (semantics from xperf's -cullFrames/-requireFrames). */
#include "frame-match.h"

#include "ht-error.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

int frame_pat_parse(const char *s, size_t len, struct frame_pat *p)
{
    memset(p, 0, sizeof(*p));
    if (len == 0)
        return HT_EBADARG;
    const char *bang = memchr(s, '!', len);
    if (!bang) {
        p->symbol = s;
        p->slen = len;
    } else {
        p->module = s;
        p->mlen = (size_t)(bang - s);
        if (bang + 1 < s + len) {
            p->symbol = bang + 1;
            p->slen = len - p->mlen - 1;
        }
        if (p->mlen == 0)
            p->module = NULL;
    }
    if (!p->module && !p->symbol)
        return HT_EBADARG;
    return 0;
}

size_t frame_module(const char *frame, const char **start)
{
    *start = frame;
    const char *bang = strchr(frame, '!');
    return bang ? (size_t)(bang - frame) : 0;
}

/* "+0x" and one or more hex digits, to the end. */
static int is_offset(const char *p)
{
    if (p[0] != '+' || p[1] != '0' || p[2] != 'x' || !p[3])
        return 0;
    for (p += 3; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return 0;
    return 1;
}

size_t frame_function_len(const char *frame)
{
    if (frame[0] == '0' && frame[1] == 'x')
        return 0;
    const char *bang = strchr(frame, '!');
    const char *sym = bang ? bang + 1 : frame;
    if (!*sym || is_offset(sym))
        return 0;
    const char *plus = strrchr(sym, '+');
    if (plus && plus > sym && is_offset(plus))
        return (size_t)(plus - frame);
    return strlen(frame);
}

static int module_eq(const struct frame_pat *p, const char *m, size_t mlen)
{
    if (mlen == p->mlen && strncasecmp(m, p->module, mlen) == 0)
        return 1;
    /* "ntdll" matches "ntdll.dll" when the pattern names no extension. */
    if (memchr(p->module, '.', p->mlen) == NULL && mlen > p->mlen && m[p->mlen] == '.' &&
        strncasecmp(m, p->module, p->mlen) == 0 &&
        memchr(m + p->mlen + 1, '.', mlen - p->mlen - 1) == NULL)
        return 1;
    return 0;
}

/* A frame split once into module and symbol, for matching many patterns. */
struct frame_split {
    const char *m, *sym;
    size_t mlen, slen;
};

static void frame_split(const char *frame, struct frame_split *fs)
{
    fs->mlen = frame_module(frame, &fs->m);
    fs->sym = fs->mlen || frame[0] == '!' ? frame + fs->mlen + 1 : frame;
    fs->slen = strlen(fs->sym);
}

static int split_match(const struct frame_pat *p, const struct frame_split *fs)
{
    if (p->symbol && (fs->slen != p->slen || strncasecmp(fs->sym, p->symbol, p->slen) != 0))
        return 0;
    if (p->module && (fs->mlen == 0 || !module_eq(p, fs->m, fs->mlen)))
        return 0;
    return 1;
}

int frame_pat_match(const struct frame_pat *p, const char *frame)
{
    struct frame_split fs;
    frame_split(frame, &fs);
    return split_match(p, &fs);
}

int frame_pat_match_any(const struct frame_pat *ps, unsigned n, const char *frame)
{
    if (n == 0)
        return 0;
    struct frame_split fs;
    frame_split(frame, &fs);
    for (unsigned i = 0; i < n; i++)
        if (split_match(&ps[i], &fs))
            return 1;
    return 0;
}

const char *frame_text(const struct stack_intern *si, uint64_t frame, char *buf, size_t bufsz)
{
    if (frame & HT_FRAME_SYM) {
        const char *s = stack_intern_strget(si, (uint32_t)frame);
        if (s)
            return s;
    } else if (si->resolve) {
        const char *s = si->resolve(si->resolve_arg, frame, buf, bufsz);
        if (s)
            return s;
    }
    snprintf(buf, bufsz, "0x%llx", (unsigned long long)(frame & ~HT_FRAME_SYM));
    return buf;
}
