/* The symbol cache of both platforms (symcache.h): the module table, when to re-read it,
 * memory accounting and counters; the OS part reads modules and symbols. */
#include "symcache.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "mem-acct.h"
#include "modlist.h"

#include <stddef.h>
#include <string.h>
#include <uv.h>

void *symcache_alloc(struct sym_cache *c, size_t n)
{
    void *p = mem_alloc(c->acct, c->kind, n);
    if (p)
        c->st.bytes += n;
    return p;
}

void symcache_free(struct sym_cache *c, void *p, size_t n)
{
    if (!p)
        return;
    mem_free(c->acct, c->kind, p, n);
    c->st.bytes -= n;
}

void *symcache_realloc(struct sym_cache *c, void *p, size_t old, size_t new_size)
{
    void *v = mem_realloc(c->acct, c->kind, p, old, new_size);
    if (v)
        c->st.bytes += new_size - old;
    return v;
}

int symcache_new(struct sym_cache **out, uint64_t pid, struct mem_acct *acct, int kind,
                 const struct sym_os_ops *ops)
{
    struct sym_cache *c = ht_calloc(1, sizeof *c);
    if (!c)
        return UV_ENOMEM;
    c->pid = pid;
    c->acct = acct;
    c->kind = kind;
    c->ops = ops;
    int err = ops->new(c);
    if (err) {
        ht_free(c);
        return err;
    }
    *out = c;
    return 0;
}

void sym_cache_free(struct sym_cache *c)
{
    if (!c)
        return;
    c->ops->free(c);
    for (size_t i = 0; i < c->nmods; i++)
        symcache_free(c, c->mods[i].path, strlen(c->mods[i].path) + 1);
    symcache_free(c, c->mods, c->capmods * sizeof *c->mods);
    ht_free(c);
}

/* ---- the module list ---- */

_Static_assert(offsetof(struct sym_module, start) == 0 && offsetof(struct sym_module, end) == 8,
               "modlist.h: a module begins with start, end");

struct sym_module *symcache_mod_at(struct sym_cache *c, uint64_t addr)
{
    size_t i = modlist_find(c->mods, c->nmods, sizeof *c->mods, addr);
    return i < c->nmods ? &c->mods[i] : NULL;
}

void symcache_mod_drop(struct sym_cache *c, size_t i)
{
    c->ops->module_dropped(c, &c->mods[i]);
    symcache_free(c, c->mods[i].path, strlen(c->mods[i].path) + 1);
    modlist_close(c->mods, c->nmods, sizeof *c->mods, i);
    c->nmods--;
}

static int mods_reserve(struct sym_cache *c)
{
    if (c->nmods < c->capmods)
        return 0;
    if (c->nmods >= SYM_MODULES_MAX)
        return HT_EFULL;
    size_t cap = c->capmods ? c->capmods * 2 : 32;
    struct sym_module *v = symcache_realloc(c, c->mods, c->capmods * sizeof *v, cap * sizeof *v);
    if (!v)
        return UV_ENOMEM;
    c->mods = v;
    c->capmods = cap;
    return 0;
}

/* Insert a module; one it overlaps is replaced when `replace`, else the new
 * one is not added (a scan never overrides the source's modules). */
static void mod_drop_cb(void *arg, size_t i)
{
    symcache_mod_drop(arg, i);
}

static int mod_insert(struct sym_cache *c, const struct sym_module *m, int replace)
{
    long at = modlist_place((const void *const *)&c->mods, &c->nmods, sizeof *c->mods, m->start,
                            m->end, replace, mod_drop_cb, c);
    if (at < 0)
        return (int)at;
    int err = mods_reserve(c);
    if (err)
        return err;
    size_t plen = strlen(m->path) + 1;
    char *path = symcache_alloc(c, plen);
    if (!path)
        return UV_ENOMEM;
    memcpy(path, m->path, plen);
    struct sym_module *slot = modlist_open(c->mods, c->nmods, sizeof *c->mods, (size_t)at);
    *slot = *m;
    slot->path = path;
    c->nmods++;
    return 0;
}

int sym_cache_add_module(struct sym_cache *c, uint64_t start, uint64_t end, uint64_t bias,
                         const char *path, const char *build_id)
{
    if (c->ops->module_check(start, end, path, build_id) != 0)
        return HT_EBADARG;
    struct sym_module m = {
        .start = start, .end = end, .bias = bias, .path = (char *)path, .image = -1};
    /* Windows ignores the build id (a PE image is known by its file): one
     * that does not fit is not kept. */
    if (build_id && strlen(build_id) < sizeof m.build_id)
        strcpy(m.build_id, build_id);
    return mod_insert(c, &m, 1);
}

void sym_cache_remove_module(struct sym_cache *c, uint64_t start)
{
    size_t i = modlist_upper(c->mods, c->nmods, sizeof *c->mods, start);
    if (i > 0 && c->mods[i - 1].start == start)
        symcache_mod_drop(c, i - 1);
}

/* Linux only (symbols.h): Windows never makes a kept module. */
void sym_cache_maps_changed(struct sym_cache *c)
{
    c->last_scan_ns = 0;
}

void sym_cache_keep_modules(struct sym_cache *c)
{
    c->keeps++;
    for (size_t i = 0; i < c->nmods; i++)
        if (c->mods[i].from_maps == MOD_SCAN) {
            c->mods[i].from_maps = MOD_KEPT;
            c->mods[i].kept_gen = c->keeps;
        }
}

/* Kept modules [start, end) overlaps go: the running program maps there now. */
static void kept_drop_overlaps(struct sym_cache *c, uint64_t start, uint64_t end)
{
    for (size_t i = c->nmods; i-- > 0;)
        if (c->mods[i].from_maps == MOD_KEPT && c->mods[i].start < end && c->mods[i].end > start) {
            symcache_mod_drop(c, i);
            c->st.kept_replaced++;
        }
}

/* The list full: the oldest kept module goes (its program's frames are
 * unnamed from then on, counted). 0 when there was one. */
static int kept_drop_oldest(struct sym_cache *c)
{
    size_t at = c->nmods;
    for (size_t i = 0; i < c->nmods; i++)
        if (c->mods[i].from_maps == MOD_KEPT &&
            (at == c->nmods || c->mods[i].kept_gen < c->mods[at].kept_gen))
            at = i;
    if (at == c->nmods)
        return -1;
    symcache_mod_drop(c, at);
    c->st.kept_dropped++;
    return 0;
}

void symcache_scan_drop_all(struct sym_cache *c)
{
    for (size_t i = c->nmods; i-- > 0;)
        if (c->mods[i].from_maps == MOD_SCAN)
            symcache_mod_drop(c, i);
}

void symcache_scan_add(struct sym_cache *c, const struct sym_module *m)
{
    kept_drop_overlaps(c, m->start, m->end);
    if (c->nmods >= SYM_MODULES_MAX)
        (void)kept_drop_oldest(c);
    struct sym_module s = *m;
    s.from_maps = MOD_SCAN;
    if (mod_insert(c, &s, 0) != 0)
        c->st.modules_not_added++;
}

struct sym_module *symcache_mod_for(struct sym_cache *c, uint64_t addr)
{
    struct sym_module *m = symcache_mod_at(c, addr);
    /* In a kept module (a program before an exec) the running program may
     * have mapped something since: looked at as for an address in none. */
    if ((!m || m->from_maps == MOD_KEPT) &&
        (c->last_scan_ns == 0 || uv_hrtime() - c->last_scan_ns >= SYM_RESCAN_NS)) {
        c->last_scan_ns = uv_hrtime();
        c->ops->rescan(c);
        m = symcache_mod_at(c, addr);
    }
    return m;
}

/* ---- lookups and counters ---- */

const char *sym_cache_resolve(struct sym_cache *c, uint64_t addr, int is_return, char *buf,
                              size_t bufsz)
{
    if (bufsz == 0)
        return NULL;
    if (is_return && addr > 0)
        addr--;
    c->st.lookups++;
    return c->ops->resolve(c, addr, buf, bufsz);
}

int sym_cache_lineinfo(struct sym_cache *c, uint64_t addr, int is_return, char *file, size_t filesz,
                       unsigned *line)
{
    if (is_return && addr > 0)
        addr--;
    return c->ops->lineinfo(c, addr, file, filesz, line);
}

void sym_cache_stats(const struct sym_cache *c, struct sym_stats *st)
{
    *st = c->st;
    c->ops->stats(c, st);
}
