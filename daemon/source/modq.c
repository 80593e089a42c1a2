/* The live sources' module queue (modq.h). */
#include "modq.h"

#include "ht-error.h"
#include "symbols.h"

#include <string.h>

int modq_init(struct modq *q, struct mem_acct *acct)
{
    memset(q, 0, sizeof(*q));
    if (uv_mutex_init(&q->mu) != 0)
        return UV_ENOMEM;
    q->ready = 1;
    uint64_t refused = acct ? acct->over_budget[MEM_source_buffers] : 0;
    q->e = mem_calloc(acct, MEM_source_buffers, MODQ_ENTRIES, sizeof(*q->e));
    q->text = q->e ? mem_alloc(acct, MEM_source_buffers, MODQ_TEXT) : NULL;
    if (!q->text)
        return acct && acct->over_budget[MEM_source_buffers] > refused ? HT_EFULL : UV_ENOMEM;
    return 0;
}

void modq_free(struct modq *q, struct mem_acct *acct)
{
    if (q->e)
        mem_free(acct, MEM_source_buffers, q->e, MODQ_ENTRIES * sizeof(*q->e));
    if (q->text)
        mem_free(acct, MEM_source_buffers, q->text, MODQ_TEXT);
    q->e = NULL;
    q->text = NULL;
    if (q->ready)
        uv_mutex_destroy(&q->mu);
    q->ready = 0;
}

int modq_push(struct modq *q, int load, uint64_t start, uint64_t end, uint64_t bias,
              const char *path, const char *bid)
{
    size_t pl = load ? strlen(path) : 0, bl = load ? strlen(bid) : 0;
    int rc = 0;
    uv_mutex_lock(&q->mu);
    if (q->n == MODQ_ENTRIES || pl + bl + 2 > MODQ_ENTRY_TEXT ||
        q->text_used + pl + bl + 2 > MODQ_TEXT) {
        q->drops++;
        rc = HT_EFULL;
    } else {
        struct modq_entry *e = &q->e[q->n++];
        *e = (struct modq_entry){start, end, bias, q->text_used, (uint16_t)pl, (uint16_t)bl, load};
        char *t = q->text + q->text_used;
        memcpy(t, path, pl);
        t[pl] = '\0';
        memcpy(t + pl + 1, bid, bl);
        t[pl + 1 + bl] = '\0';
        q->text_used += (uint32_t)(pl + bl + 2);
        q->queued++;
        if (q->n - q->head > q->max_waiting)
            q->max_waiting = q->n - q->head;
    }
    uv_mutex_unlock(&q->mu);
    return rc;
}

int modq_take(struct modq *q, struct modq_entry *out, char *text)
{
    uv_mutex_lock(&q->mu);
    if (q->head == q->n) {
        uv_mutex_unlock(&q->mu);
        return 0;
    }
    *out = q->e[q->head++];
    memcpy(text, q->text + out->text, (size_t)out->path_len + out->bid_len + 2);
    if (q->head == q->n)
        q->head = q->n = q->text_used = 0;
    q->applied++;
    uv_mutex_unlock(&q->mu);
    return 1;
}

void modq_stats(struct modq *q, struct modq_stats *st)
{
    uv_mutex_lock(&q->mu);
    *st = (struct modq_stats){q->queued, q->applied, q->drops, q->n - q->head, q->max_waiting};
    uv_mutex_unlock(&q->mu);
}

unsigned modq_apply(struct modq *q, struct sym_cache *c, int eager)
{
    struct modq_entry e;
    char text[MODQ_ENTRY_TEXT];
    unsigned n = 0;
    while (q->ready && modq_take(q, &e, text)) {
        if (!e.load) {
            sym_cache_remove_module(c, e.start);
        } else if (sym_cache_add_module(c, e.start, e.end, e.bias, text, text + e.path_len + 1) == 0 &&
                   eager) {
            char buf[256];
            sym_cache_resolve(c, e.start, 0, buf, sizeof(buf));
        }
        n++;
    }
    return n;
}
