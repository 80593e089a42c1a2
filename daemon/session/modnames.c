/* Module names for replayed address frames (modnames.h). */
#include "modnames.h"

#include "mem-acct.h"
#include "modlist.h"
#include "stack-intern.h"

#include <stdio.h>
#include <string.h>

int modnames_init(struct modnames *m, struct mem_acct *acct)
{
    memset(m, 0, sizeof(*m));
    m->acct = acct;
    return uv_mutex_init(&m->mu);
}

void modnames_close(struct modnames *m)
{
    mem_free(m->acct, MEM_modules, m->v, m->alloc * sizeof(*m->v));
    m->v = NULL;
    m->n = m->alloc = 0;
    uv_mutex_destroy(&m->mu);
}

/* The last component of a path of either platform, cut to fit. */
static void base_name(const char *path, char *out)
{
    const char *b = path;
    for (const char *p = path; *p; p++)
        if (*p == '/' || *p == '\\')
            b = p + 1;
    size_t k = strlen(b);
    if (k >= MODNAMES_NAME) {
        k = MODNAMES_NAME - 1;
        while (k > 0 && ((unsigned char)b[k] & 0xC0) == 0x80)
            k--; /* not inside a UTF-8 sequence */
    }
    memcpy(out, b, k);
    out[k] = '\0';
}

static void drop_at(void *arg, size_t i)
{
    struct modnames *m = arg;
    modlist_close(m->v, m->n, sizeof(*m->v), i);
    m->n--;
}

static void load(struct modnames *m, const struct stack_intern *si, const struct ht_event *ev)
{
    if (ev->size == 0 || ev->addr + ev->size < ev->addr) {
        m->drops++;
        return;
    }
    struct modname e = {.start = ev->addr, .end = ev->addr + ev->size, .bias = ev->old_addr};
    const char *path = ev->heap ? stack_intern_strget(si, (uint32_t)ev->heap) : NULL;
    base_name(path ? path : "", e.name);
    if (!e.name[0])
        snprintf(e.name, sizeof(e.name), "0x%llx", (unsigned long long)ev->addr);
    if (m->n >= MODNAMES_MAX) {
        /* Full: the module unloaded longest ago makes room, if there is one. */
        size_t old = m->n;
        for (size_t i = 0; i < m->n; i++)
            if (m->v[i].unloaded && (old == m->n || m->v[i].unloaded < m->v[old].unloaded))
                old = i;
        if (old < m->n)
            drop_at(m, old);
    }
    long at = modlist_place((const void *const *)&m->v, &m->n, sizeof(*m->v), e.start, e.end, 1,
                            drop_at, m);
    if (m->n == m->alloc) {
        size_t na = m->alloc ? m->alloc * 2 : 16;
        if (m->n >= MODNAMES_MAX) {
            m->drops++;
            return;
        }
        struct modname *nv =
            mem_realloc(m->acct, MEM_modules, m->v, m->alloc * sizeof(*m->v), na * sizeof(*m->v));
        if (!nv) {
            m->drops++;
            return;
        }
        m->v = nv;
        m->alloc = na;
    }
    *(struct modname *)modlist_open(m->v, m->n, sizeof(*m->v), (size_t)at) = e;
    m->n++;
}

void modnames_apply(struct modnames *m, const struct stack_intern *si, const struct ht_event *evs,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (evs[i].kind != HT_EV_MODULE_LOAD && evs[i].kind != HT_EV_MODULE_UNLOAD)
            continue;
        uv_mutex_lock(&m->mu);
        if (evs[i].kind == HT_EV_MODULE_LOAD) {
            load(m, si, &evs[i]);
        } else {
            /* Kept, for the frames recorded while it was loaded, until a
             * load takes its range (modnames.h). */
            size_t k = modlist_find(m->v, m->n, sizeof(*m->v), evs[i].addr);
            if (k < m->n && m->v[k].start == evs[i].addr && !m->v[k].unloaded)
                m->v[k].unloaded = ++m->unloads;
        }
        uv_mutex_unlock(&m->mu);
    }
}

const char *modnames_text(struct modnames *m, uint64_t addr, char *buf, size_t bufsz)
{
    const char *r = NULL;
    uv_mutex_lock(&m->mu);
    size_t k = modlist_find(m->v, m->n, sizeof(*m->v), addr);
    if (k < m->n) {
        snprintf(buf, bufsz, "%s!+0x%llx", m->v[k].name,
                 (unsigned long long)(addr - m->v[k].bias));
        r = buf;
    }
    uv_mutex_unlock(&m->mu);
    return r;
}
