/* .htev line parser: a small strict JSON reader for flat event objects; unknown fields skipped. */
#include "htev.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-hash.h"
#include "ht-text.h"
#include "stack-intern.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct cur {
    const char *begin, *p, *end;
    struct htev_parser *ps;
};

static int fail(struct cur *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->ps->err, sizeof(c->ps->err), fmt, ap);
    va_end(ap);
    return HT_EBADJSON;
}

static void ws(struct cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int expect(struct cur *c, char ch)
{
    ws(c);
    if (c->p >= c->end || *c->p != ch)
        return fail(c, "expected '%c' at column %ld", ch, (long)(c->p - c->begin) + 1);
    c->p++;
    return 0;
}

static size_t utf8_put(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int hex4(struct cur *c, unsigned *v)
{
    if (c->end - c->p < 4)
        return fail(c, "bad \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = ht_hexval(c->p[i]);
        if (h < 0)
            return fail(c, "bad \\u escape");
        *v = *v << 4 | (unsigned)h;
    }
    c->p += 4;
    return 0;
}

/* A string into out (cap bytes incl. NUL; longer is cut); out NULL skips it. */
static int string(struct cur *c, char *out, size_t cap, size_t *olen)
{
    size_t n = 0;
    if (expect(c, '"'))
        return HT_EBADJSON;
    while (c->p < c->end && *c->p != '"') {
        char tmp[4];
        size_t k = 1;
        unsigned char ch = (unsigned char)*c->p++;
        if (ch < 0x20)
            return fail(c, "control character in string");
        tmp[0] = (char)ch;
        if (ch == '\\') {
            if (c->p >= c->end)
                break;
            char e = *c->p++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                tmp[0] = e;
                break;
            case 'b':
                tmp[0] = '\b';
                break;
            case 'f':
                tmp[0] = '\f';
                break;
            case 'n':
                tmp[0] = '\n';
                break;
            case 'r':
                tmp[0] = '\r';
                break;
            case 't':
                tmp[0] = '\t';
                break;
            case 'u': {
                unsigned cp;
                if (hex4(c, &cp))
                    return HT_EBADJSON;
                if (cp >= 0xd800 && cp < 0xdc00 && c->end - c->p >= 6 && c->p[0] == '\\' &&
                    c->p[1] == 'u') {
                    unsigned lo;
                    c->p += 2;
                    if (hex4(c, &lo))
                        return HT_EBADJSON;
                    if (lo >= 0xdc00 && lo < 0xe000)
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (cp == 0)
                    cp = '?'; /* no NULs inside names */
                k = utf8_put(tmp, cp);
                break;
            }
            default:
                return fail(c, "bad escape '\\%c'", e);
            }
        }
        if (out && n + k < cap) {
            memcpy(out + n, tmp, k);
            n += k;
        }
    }
    if (c->p >= c->end)
        return fail(c, "unterminated string");
    c->p++;
    if (out)
        out[n] = '\0';
    if (olen)
        *olen = n;
    return 0;
}

static int skip_value(struct cur *c, int depth);

static int skip_container(struct cur *c, char close, int depth)
{
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        if (close == '}') {
            if (string(c, NULL, 0, NULL) || expect(c, ':'))
                return HT_EBADJSON;
        }
        if (skip_value(c, depth + 1))
            return HT_EBADJSON;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, close);
    }
}

static int skip_value(struct cur *c, int depth)
{
    ws(c);
    if (depth > 32)
        return fail(c, "nesting too deep");
    if (c->p >= c->end)
        return fail(c, "missing value");
    switch (*c->p) {
    case '"':
        return string(c, NULL, 0, NULL);
    case '{':
        return skip_container(c, '}', depth);
    case '[':
        return skip_container(c, ']', depth);
    }
    const char *s = c->p;
    while (c->p < c->end && (strchr("+-.eE", *c->p) || (*c->p >= '0' && *c->p <= '9') ||
                             (*c->p >= 'a' && *c->p <= 'z')))
        c->p++;
    size_t n = (size_t)(c->p - s);
    if (n == 0)
        return fail(c, "unexpected character '%c'", *s);
    if ((n == 4 && (!memcmp(s, "true", 4) || !memcmp(s, "null", 4))) ||
        (n == 5 && !memcmp(s, "false", 5)) || (*s == '-' || (*s >= '0' && *s <= '9')))
        return 0;
    return fail(c, "bad literal");
}

static int parse_u64_text(const char *s, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (n > 18)
            return -1;
        for (size_t i = 2; i < n; i++) {
            int h = ht_hexval(s[i]);
            if (h < 0)
                return -1;
            x = x << 4 | (unsigned)h;
        }
    } else {
        if (n == 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
                return -1;
            x = x * 10 + (uint64_t)(s[i] - '0');
        }
    }
    *v = x;
    return 0;
}

/* An unsigned integer given as a JSON number or as a "0x..."/decimal string.
 * Negative numbers are allowed only where neg_ok (exit codes). */
static int integer(struct cur *c, const char *key, uint64_t *v, int neg_ok)
{
    ws(c);
    if (c->p < c->end && *c->p == '"') {
        char buf[32];
        size_t n;
        if (string(c, buf, sizeof(buf), &n) || parse_u64_text(buf, n, v))
            return fail(c, "\"%s\": bad integer string", key);
        return 0;
    }
    int neg = 0;
    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    const char *s = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return fail(c, "\"%s\": expected an integer", key);
    if (parse_u64_text(s, (size_t)(c->p - s), v))
        return fail(c, "\"%s\": bad or out-of-range integer", key);
    if (neg) {
        if (!neg_ok || *v > (uint64_t)INT64_MAX)
            return fail(c, "\"%s\": must not be negative", key);
        *v = (uint64_t)(-(int64_t)*v);
    }
    return 0;
}

/* Long: the text parser's hot path (a stack per event): the cache probe, the
 * array walk and the interning kept together, as measured fastest. */
static int stack_array(struct cur *c, struct ht_event *ev)
{
    struct htev_parser *ps = c->ps;
    ws(c);
    if (c->p >= c->end || *c->p != '[')
        return fail(c, "\"stack\": expected an array");
    const char *start = c->p;
    /* Find the array's end cheaply for the cache (strings may hold ']' or '"'). */
    const char *q = start + 1;
    int instr = 0;
    for (; q < c->end; q++) {
        if (instr) {
            if (*q == '\\')
                q++;
            else if (*q == '"')
                instr = 0;
        } else if (*q == '"') {
            instr = 1;
        } else if (*q == ']') {
            break;
        }
    }
    if (q >= c->end)
        return fail(c, "\"stack\": unterminated array");
    size_t tlen = (size_t)(q - start + 1);
    uint64_t h = ht_hash_bytes(start, tlen, 99);
    struct htev_cache_slot *pair = &ps->cache[h & (HTEV_STACK_CACHE - 2)];
    for (int w = 0; w < 2; w++) {
        struct htev_cache_slot *sl = &pair[w];
        if (sl->text && sl->hash == h && sl->len == tlen && !memcmp(sl->text, start, tlen)) {
            c->p = q + 1;
            ev->stack = sl->id;
            if (sl->truncated)
                ev->flags |= HT_EVF_TRUNCATED;
            return 0;
        }
    }
    /* Miss: fill an empty way, else replace one chosen by the hash. */
    struct htev_cache_slot *slot = !pair[0].text   ? &pair[0]
                                   : !pair[1].text ? &pair[1]
                                                   : &pair[(h >> 40) & 1];
    uint64_t frames[HT_STACK_MAX_DEPTH];
    frames[0] = 0; /* every frame read is written first; this quiets -Wmaybe-uninitialized */
    unsigned depth = 0;
    int truncated = 0;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            char buf[HT_STR_MAX_LEN + 1];
            size_t n;
            if (string(c, buf, sizeof(buf), &n))
                return HT_EBADJSON;
            uint64_t addr;
            if (depth >= HT_STACK_MAX_DEPTH) {
                truncated = 1;
            } else if (n > 2 && buf[0] == '0' && buf[1] == 'x' &&
                       parse_u64_text(buf, n, &addr) == 0 && !(addr & HT_FRAME_SYM)) {
                frames[depth++] = addr;
            } else {
                uint32_t id = stack_intern_str(ps->si, buf, (unsigned)n);
                if (id == 0) {
                    truncated = 1; /* string table full: keep what we have */
                } else {
                    frames[depth++] = HT_FRAME_SYM | id;
                }
            }
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (expect(c, ']'))
                return HT_EBADJSON;
            break;
        }
    }
    ev->stack = stack_intern_get(ps->si, frames, depth);
    if (truncated)
        ev->flags |= HT_EVF_TRUNCATED;
    if ((depth || truncated) && !ev->stack)
        ev->flags |= HT_EVF_STACK_DROPPED; /* counted by the interner too */
    if (tlen <= HTEV_STACK_CACHE_TEXT && (ev->stack || depth == 0)) {
        if (!slot->text)
            slot->text = mem_alloc(ps->si->acct, MEM_decoder_buffers, HTEV_STACK_CACHE_TEXT);
        if (slot->text) {
            memcpy(slot->text, start, tlen);
            slot->hash = h;
            slot->len = (uint32_t)tlen;
            slot->id = ev->stack;
            slot->truncated = (uint8_t)truncated;
        }
    }
    return 0;
}

int htev_parser_init(struct htev_parser *p, struct stack_intern *si)
{
    memset(p, 0, sizeof(*p));
    p->si = si;
    p->cache = mem_calloc(si->acct, MEM_decoder_buffers, HTEV_STACK_CACHE, sizeof(*p->cache));
    return p->cache ? 0 : HT_ENOMEM;
}

void htev_parser_close(struct htev_parser *p)
{
    if (p->cache)
        for (unsigned i = 0; i < HTEV_STACK_CACHE; i++)
            ht_free(p->cache[i].text);
    ht_free(p->cache);
    p->cache = NULL;
}

enum {
    F_T = 1,
    F_EV = 2,
    F_ADDR = 4,
    F_SIZE = 8,
    F_OLD = 16,
    F_VALUE = 32,
    F_HEAP = 64,
    F_BASE = 128,
    F_PATH = 256,
    F_BUILD_ID = 512
};

static int key_is(const char *k, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(k, lit, n) == 0;
}

/* Long: one branch per key of an event line, in the order they are most
 * often seen. */
static int field(struct cur *c, const char *k, size_t kn, struct ht_event *ev, unsigned *seen)
{
    struct htev_parser *ps = c->ps;
    if (key_is(k, kn, "t")) {
        *seen |= F_T;
        return integer(c, "t", &ev->t, 0);
    }
    if (key_is(k, kn, "ev")) {
        char buf[32];
        size_t n;
        if (string(c, buf, sizeof(buf), &n))
            return HT_EBADJSON;
        ev->kind = (uint8_t)ht_event_kind_parse(buf, (unsigned)n);
        if (ev->kind == HT_EV_NONE)
            return fail(c, "unknown event kind \"%s\"", buf);
        *seen |= F_EV;
        return 0;
    }
    if (key_is(k, kn, "addr")) {
        *seen |= F_ADDR;
        return integer(c, "addr", &ev->addr, 0);
    }
    if (key_is(k, kn, "old_addr")) {
        *seen |= F_OLD;
        return integer(c, "old_addr", &ev->old_addr, 0);
    }
    if (key_is(k, kn, "heap")) {
        *seen |= F_HEAP;
        return integer(c, "heap", &ev->heap, 0);
    }
    if (key_is(k, kn, "size")) {
        *seen |= F_SIZE;
        return integer(c, "size", &ev->size, 0);
    }
    if (key_is(k, kn, "old_size"))
        return integer(c, "old_size", &ev->old_size, 0);
    if (key_is(k, kn, "tid")) {
        uint64_t v;
        if (integer(c, "tid", &v, 0))
            return HT_EBADJSON;
        ev->tid = (uint32_t)v;
        return 0;
    }
    if (key_is(k, kn, "bytes") || key_is(k, kn, "count") || key_is(k, kn, "pid") ||
        key_is(k, kn, "code")) {
        *seen |= F_VALUE;
        return integer(c, "value", &ev->old_size, key_is(k, kn, "code"));
    }
    if (key_is(k, kn, "stack"))
        return stack_array(c, ev);
    if (key_is(k, kn, "truncated")) {
        ws(c);
        if (c->end - c->p >= 4 && !memcmp(c->p, "true", 4))
            ev->flags |= HT_EVF_TRUNCATED;
        return skip_value(c, 0);
    }
    if (key_is(k, kn, "base")) {
        *seen |= F_BASE;
        return integer(c, "base", &ev->addr, 0);
    }
    if (key_is(k, kn, "bias"))
        return integer(c, "bias", &ev->old_addr, 0);
    if (key_is(k, kn, "path")) {
        *seen |= F_PATH;
        return string(c, ps->path, sizeof(ps->path), NULL);
    }
    if (key_is(k, kn, "build_id")) {
        size_t n;
        if (string(c, ps->build_id, sizeof(ps->build_id), &n))
            return HT_EBADJSON;
        if (n >= sizeof(ps->build_id) - 1 || strspn(ps->build_id, "0123456789abcdefABCDEF") != n)
            return fail(c, "build_id must be at most 128 hex digits");
        *seen |= F_BUILD_ID;
        return 0;
    }
    if (key_is(k, kn, "name"))
        return string(c, ps->name, sizeof(ps->name), NULL);
    if (key_is(k, kn, "wall"))
        return string(c, ps->wall, sizeof(ps->wall), NULL);
    return skip_value(c, 0);
}

/* Which fields each kind needs. */
static int check_fields(struct cur *c, struct ht_event *ev, unsigned seen)
{
    unsigned need = 0;
    switch (ev->kind) {
    case HT_EV_ALLOC:
    case HT_EV_COMMIT:
    case HT_EV_DECOMMIT:
    case HT_EV_RELEASE:
        need = F_ADDR | F_SIZE;
        break;
    case HT_EV_REALLOC:
        need = F_ADDR | F_OLD | F_SIZE;
        break;
    case HT_EV_FREE:
        need = F_ADDR;
        break;
    case HT_EV_HEAP_DESTROY:
        need = F_HEAP;
        break;
    case HT_EV_PRIVATE_BYTES:
    case HT_EV_LOST:
        need = F_VALUE;
        break;
    case HT_EV_MODULE_LOAD:
        need = F_BASE | F_SIZE | F_PATH;
        break;
    case HT_EV_MODULE_UNLOAD:
        need = F_BASE;
        break;
    }
    if ((seen & need) != need)
        return fail(c, "\"%s\" event lacks a required field (%s)", ht_event_kind_name(ev->kind),
                    (need & ~seen & F_ADDR)   ? "addr"
                    : (need & ~seen & F_BASE) ? "base"
                    : (need & ~seen & F_SIZE) ? "size"
                    : (need & ~seen & F_PATH) ? "path"
                    : (need & ~seen & F_OLD)  ? "old_addr"
                    : (need & ~seen & F_HEAP) ? "heap"
                                              : "bytes/count");
    if (ev->kind == HT_EV_MODULE_LOAD || ev->kind == HT_EV_MODULE_UNLOAD) {
        /* Strings of the interner, as live sources give them (ht-event.h). */
        struct htev_parser *ps = c->ps;
        ev->heap = ev->old_size = 0;
        ev->stack = 0;
        if (ev->kind == HT_EV_MODULE_LOAD) {
            ev->heap = stack_intern_str(ps->si, ps->path, (unsigned)strlen(ps->path));
            if ((seen & F_BUILD_ID) && ps->build_id[0])
                ev->old_size =
                    stack_intern_str(ps->si, ps->build_id, (unsigned)strlen(ps->build_id));
        } else {
            ev->size = ev->old_addr = 0;
        }
    }
    /* The value fields share one slot; move it where the engine reads it. */
    if (ev->kind == HT_EV_PRIVATE_BYTES || ev->kind == HT_EV_LOST || ev->kind == HT_EV_PROCESS ||
        ev->kind == HT_EV_EXIT) {
        ev->size = ev->old_size;
        ev->old_size = 0;
    }
    return 0;
}

int htev_parse_line(struct htev_parser *p, const char *line, size_t len, struct ht_event *ev)
{
    struct cur c = {line, line, line + len, p};
    memset(ev, 0, sizeof(*ev));
    p->err[0] = '\0';
    ws(&c);
    if (c.p == c.end)
        return 0;
    if (*c.p != '{')
        return fail(&c, "expected a JSON object");
    c.p++;
    unsigned seen = 0;
    ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            char key[32];
            size_t kn;
            if (string(&c, key, sizeof(key), &kn) || expect(&c, ':'))
                return HT_EBADJSON;
            if (field(&c, key, kn, ev, &seen))
                return HT_EBADJSON;
            ws(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                continue;
            }
            if (expect(&c, '}'))
                return HT_EBADJSON;
            break;
        }
    }
    ws(&c);
    if (c.p != c.end)
        return fail(&c, "trailing characters after the object");
    if (!(seen & F_EV))
        return fail(&c, "missing \"ev\"");
    if (check_fields(&c, ev, seen))
        return HT_EBADJSON;
    if (!(seen & F_T))
        ev->t = p->last_t; /* e.g. the "process" header line */
    p->last_t = ev->t;
    return 1;
}
