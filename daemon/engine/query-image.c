/* Group keys by name: a frame's image (module) or function, indexed in the query's own list. */
#include "query-int.h"

#include "ht-hash.h"

#include <string.h>

/* Index of a module name in the query's own list, added if new; 0 (none)
 * when out of memory. The list is the result's: nothing is interned into
 * the engine, whose interner the query may not write. */
static uint32_t image_index(struct qctx *c, const char *m, size_t len)
{
    uint64_t h = ht_hash_bytes(m, len, 11);
    if ((uint64_t)(c->nimages + 1) * 2 > c->imask) {
        uint32_t size = c->imask ? (c->imask + 1) * 2 : 256;
        uint32_t *ns = ht_calloc(size, sizeof(uint32_t));
        if (!ns) {
            c->oom = 1;
            return 0;
        }
        for (uint32_t k = 1; k < c->nimages; k++) {
            uint32_t j =
                (uint32_t)ht_hash_bytes(c->images[k], strlen(c->images[k]), 11) & (size - 1);
            while (ns[j])
                j = (j + 1) & (size - 1);
            ns[j] = k + 1;
        }
        ht_free(c->islots);
        c->islots = ns;
        c->imask = size - 1;
    }
    uint32_t j = (uint32_t)h & c->imask;
    for (uint32_t k; (k = c->islots[j]) != 0; j = (j + 1) & c->imask) {
        const char *s = c->images[k - 1];
        if (strlen(s) == len && memcmp(s, m, len) == 0)
            return k - 1;
    }
    if (c->nimages == c->images_alloc) {
        uint32_t na = c->images_alloc ? c->images_alloc * 2 : 16;
        char **ni = ht_realloc(c->images, (size_t)na * sizeof(char *));
        if (!ni) {
            c->oom = 1;
            return 0;
        }
        c->images = ni;
        c->images_alloc = na;
        if (c->nimages == 0)
            c->images[c->nimages++] = NULL; /* index 0: no module */
    }
    char *s = ht_malloc(len + 1);
    if (!s) {
        c->oom = 1;
        return 0;
    }
    memcpy(s, m, len);
    s[len] = '\0';
    uint32_t k = c->nimages++;
    c->images[k] = s;
    c->islots[j] = k + 1;
    return k;
}

uint64_t image_key(struct qctx *c, uint64_t frame)
{
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(c->si, frame, buf, sizeof(buf));
    const char *m;
    size_t mlen = frame_module(text, &m);
    return mlen ? image_index(c, m, mlen) : 0;
}

/* Group key of a frame for --by frame: its function. Frames that name the
 * same function (module!symbol; a call-site offset "+0x..." left out) are
 * one group, keyed by the first such frame met: every return address into
 * a function is a frame of its own, and WPA groups them as one. A frame
 * with no symbol (an address, module!+0xOFF) is its own group. */
uint64_t function_key(struct qctx *c, uint64_t frame)
{
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(c->si, frame, buf, sizeof(buf));
    size_t len = frame_function_len(text);
    uint32_t k = len ? image_index(c, text, len) : 0;
    if (k == 0)
        return frame; /* no symbol, or out of memory (c->oom says so) */
    if (k >= c->fnframe_alloc) {
        uint32_t na = c->images_alloc;
        uint64_t *nf = ht_realloc(c->fnframe, (size_t)na * sizeof(uint64_t));
        if (!nf) {
            c->oom = 1;
            return frame;
        }
        memset(nf + c->fnframe_alloc, 0, (size_t)(na - c->fnframe_alloc) * sizeof(uint64_t));
        c->fnframe = nf;
        c->fnframe_alloc = na;
    }
    if (!c->fnframe[k])
        c->fnframe[k] = frame;
    return c->fnframe[k];
}
