/* The pprof builder (pprof.h): strings, functions and locations interned by
 * hash, encoded with protobuf-c (profile.proto, generated at build time) and
 * gzip'd with zlib. */
#include "pprof.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "profile.pb-c.h"

#include <stdatomic.h>
#include <string.h>
#include <zlib.h>

typedef Perftools__Profiles__Profile pb_profile;
typedef Perftools__Profiles__ValueType pb_vtype;
typedef Perftools__Profiles__Sample pb_sample;
typedef Perftools__Profiles__Mapping pb_mapping;
typedef Perftools__Profiles__Location pb_location;
typedef Perftools__Profiles__Line pb_line;
typedef Perftools__Profiles__Function pb_function;

/* An open-addressing table of ids (1-based; 0 empty) keyed by a 64-bit hash;
 * the owner compares the entries themselves. */
struct idmap {
    uint32_t *slot;
    uint64_t *hash; /* per slot */
    uint32_t mask, n;
};

struct loc {
    pb_location m;
    pb_line line;
    pb_line *lines[1];
};

struct pprof {
    struct idmap strs, funcs, locs;
    char **str;
    size_t nstr, astr;
    pb_function *fn;
    size_t nfn, afn;
    struct loc *loc;
    size_t nloc, aloc;
    uint64_t *loc_key; /* the address, or 1 << 63 | the function id of a name-only frame */
    pb_mapping *map;
    size_t nmap, amap;
    pb_sample *smp;
    size_t nsmp, asmp;
    size_t unmapped; /* address locations in no mapping */
    int default_type; /* PPROF_*: the profile's default_sample_type */
    /* The bytes the profile holds (pprof_budget): what it allocated, what
     * was charged besides, and whether the cap refused a charge. */
    uint64_t used, cap;
    int over;
    _Atomic uint64_t *pool; /* the bytes of every profile sharing cap, NULL: this one's */
};

/* bytes more held by p: 0, or HT_EFULL past its cap (p->over set, nothing
 * charged). */
static int charge(struct pprof *p, uint64_t bytes)
{
    if (p->pool) {
        /* Every profile made at once (the query workers) under one cap. */
        uint64_t cur = atomic_load(p->pool);
        do {
            if (bytes > p->cap || cur > p->cap - bytes) {
                p->over = 1;
                return HT_EFULL;
            }
        } while (!atomic_compare_exchange_weak(p->pool, &cur, cur + bytes));
    } else if (p->cap && (bytes > p->cap || p->used > p->cap - bytes)) {
        p->over = 1;
        return HT_EFULL;
    }
    p->used += bytes;
    return 0;
}

/* Why a call failed: the cap, or out of memory. */
static int failure(const struct pprof *p)
{
    return p->over ? HT_EFULL : HT_ENOMEM;
}

static int grow(struct pprof *p, void **v, size_t *alloc, size_t need, size_t sz)
{
    if (need <= *alloc)
        return 0;
    size_t n = *alloc ? *alloc * 2 : 64;
    while (n < need)
        n *= 2;
    if (charge(p, (uint64_t)(n - *alloc) * sz) != 0)
        return HT_EFULL;
    void *b = ht_realloc(*v, n * sz);
    if (!b)
        return HT_ENOMEM;
    *v = b;
    *alloc = n;
    return 0;
}

/* FNV-1a, 64-bit (the published offset basis and prime). */
static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}
#define FNV_BASIS 0xcbf29ce484222325ULL

static int idmap_grow(struct pprof *p, struct idmap *m)
{
    if (m->slot && (m->n + 1) * 4 < (m->mask + 1) * 3)
        return 0;
    uint32_t cap = m->slot ? (m->mask + 1) * 2 : 1024;
    if (charge(p, (uint64_t)(cap - (m->slot ? m->mask + 1 : 0)) *
                      (sizeof(*m->slot) + sizeof(*m->hash))) != 0)
        return HT_EFULL;
    uint32_t *slot = ht_calloc(cap, sizeof(*slot));
    uint64_t *hash = ht_calloc(cap, sizeof(*hash));
    if (!slot || !hash) {
        ht_free(slot);
        ht_free(hash);
        return HT_ENOMEM;
    }
    for (uint32_t i = 0; m->slot && i <= m->mask; i++) {
        if (!m->slot[i])
            continue;
        uint32_t k = (uint32_t)m->hash[i] & (cap - 1);
        while (slot[k])
            k = (k + 1) & (cap - 1);
        slot[k] = m->slot[i];
        hash[k] = m->hash[i];
    }
    ht_free(m->slot);
    ht_free(m->hash);
    m->slot = slot;
    m->hash = hash;
    m->mask = cap - 1;
    return 0;
}

/* The slot of h whose id eq accepts, or the empty slot where it goes. */
static uint32_t idmap_find(const struct idmap *m, uint64_t h,
                           int (*eq)(const struct pprof *, uint32_t, const void *),
                           const struct pprof *p, const void *key)
{
    uint32_t k = (uint32_t)h & m->mask;
    while (m->slot[k] && !(m->hash[k] == h && eq(p, m->slot[k], key)))
        k = (k + 1) & m->mask;
    return k;
}

static void idmap_free(struct idmap *m)
{
    ht_free(m->slot);
    ht_free(m->hash);
}

static int str_eq(const struct pprof *p, uint32_t id, const void *key)
{
    return !strcmp(p->str[id - 1], key);
}

/* The string table index of s (interned): index 0 is "", as the schema requires. */
static int64_t str_index(struct pprof *p, const char *s)
{
    if (idmap_grow(p, &p->strs) != 0)
        return -1;
    uint64_t h = fnv(s, strlen(s), FNV_BASIS);
    uint32_t k = idmap_find(&p->strs, h, str_eq, p, s);
    if (p->strs.slot[k])
        return p->strs.slot[k] - 1;
    char *c = charge(p, strlen(s) + 1) == 0 ? ht_strdup(s) : NULL;
    if (!c || grow(p, (void **)&p->str, &p->astr, p->nstr + 1, sizeof(*p->str)) != 0) {
        ht_free(c);
        return -1;
    }
    p->str[p->nstr++] = c;
    p->strs.slot[k] = (uint32_t)p->nstr;
    p->strs.hash[k] = h;
    p->strs.n++;
    return (int64_t)p->nstr - 1;
}

struct pprof *pprof_new(void)
{
    struct pprof *p = ht_calloc(1, sizeof(*p));
    if (p && str_index(p, "") != 0) {
        pprof_free(p);
        return NULL;
    }
    if (p)
        p->default_type = PPROF_INUSE_SPACE;
    return p;
}

void pprof_default_sample(struct pprof *p, int type)
{
    if (type >= 0 && type < PPROF_NVALUES)
        p->default_type = type;
}

void pprof_budget(struct pprof *p, uint64_t cap, _Atomic uint64_t *pool)
{
    p->cap = cap;
    p->pool = cap ? pool : NULL;
    if (p->pool) /* what it holds already (pprof_new's tables) is in the pool too */
        atomic_fetch_add(p->pool, p->used);
}

int pprof_charge(struct pprof *p, uint64_t bytes)
{
    return charge(p, bytes);
}

uint64_t pprof_used(const struct pprof *p)
{
    return p->used;
}

void pprof_free(struct pprof *p)
{
    if (!p)
        return;
    if (p->pool)
        atomic_fetch_sub(p->pool, p->used);
    for (size_t i = 0; i < p->nstr; i++)
        ht_free(p->str[i]);
    for (size_t i = 0; i < p->nsmp; i++) {
        ht_free(p->smp[i].location_id);
        ht_free(p->smp[i].value);
    }
    idmap_free(&p->strs);
    idmap_free(&p->funcs);
    idmap_free(&p->locs);
    ht_free(p->str);
    ht_free(p->fn);
    ht_free(p->loc);
    ht_free(p->loc_key);
    ht_free(p->map);
    ht_free(p->smp);
    ht_free(p);
}

int pprof_mapping(struct pprof *p, uint64_t start, uint64_t limit, uint64_t offset,
                  const char *file, const char *build_id)
{
    int64_t fi = str_index(p, file ? file : ""), bi = str_index(p, build_id ? build_id : "");
    if (fi < 0 || bi < 0 || grow(p, (void **)&p->map, &p->amap, p->nmap + 1, sizeof(*p->map)) != 0)
        return failure(p);
    pb_mapping *m = &p->map[p->nmap++];
    perftools__profiles__mapping__init(m);
    m->id = p->nmap;
    m->memory_start = start;
    m->memory_limit = limit;
    m->file_offset = offset;
    m->filename = fi;
    m->build_id = bi;
    return 0;
}

size_t pprof_unmapped(const struct pprof *p)
{
    return p->unmapped;
}

/* The mapping holding addr (0: none); the mappings are sorted by start. */
static uint64_t mapping_of(const struct pprof *p, uint64_t addr)
{
    size_t lo = 0, hi = p->nmap;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->map[mid].memory_start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && addr < p->map[lo - 1].memory_limit ? p->map[lo - 1].id : 0;
}

struct fn_key {
    int64_t name, file;
};

static int fn_eq(const struct pprof *p, uint32_t id, const void *key)
{
    const struct fn_key *k = key;
    return p->fn[id - 1].name == k->name && p->fn[id - 1].filename == k->file;
}

/* The function id of a name and file (interned), 0 when out of memory. */
static uint64_t function_id(struct pprof *p, const char *name, const char *file)
{
    struct fn_key k = {str_index(p, name), str_index(p, file ? file : "")};
    if (k.name < 0 || k.file < 0 || idmap_grow(p, &p->funcs) != 0)
        return 0;
    uint64_t h = fnv(&k, sizeof(k), FNV_BASIS);
    uint32_t s = idmap_find(&p->funcs, h, fn_eq, p, &k);
    if (p->funcs.slot[s])
        return p->funcs.slot[s];
    if (grow(p, (void **)&p->fn, &p->afn, p->nfn + 1, sizeof(*p->fn)) != 0)
        return 0;
    pb_function *f = &p->fn[p->nfn++];
    perftools__profiles__function__init(f);
    f->id = p->nfn;
    f->name = f->system_name = k.name;
    f->filename = k.file;
    p->funcs.slot[s] = (uint32_t)p->nfn;
    p->funcs.hash[s] = h;
    p->funcs.n++;
    return f->id;
}

static int loc_eq(const struct pprof *p, uint32_t id, const void *key)
{
    return p->loc_key[id - 1] == *(const uint64_t *)key;
}

/* The location id of a frame (interned), 0 when out of memory. An address
 * is one location whatever name it had; a name-only frame is one per
 * function. */
static uint64_t location_id(struct pprof *p, const struct pprof_frame *f)
{
    uint64_t fid = f->func ? function_id(p, f->func, f->file) : 0;
    if ((f->func && !fid) || idmap_grow(p, &p->locs) != 0)
        return 0;
    uint64_t key = f->has_addr ? f->addr & ~(1ULL << 63) : 1ULL << 63 | fid;
    uint64_t h = fnv(&key, sizeof(key), FNV_BASIS);
    uint32_t s = idmap_find(&p->locs, h, loc_eq, p, &key);
    if (p->locs.slot[s])
        return p->locs.slot[s];
    size_t aloc = p->aloc;
    if (grow(p, (void **)&p->loc, &p->aloc, p->nloc + 1, sizeof(*p->loc)) != 0 ||
        grow(p, (void **)&p->loc_key, &aloc, p->nloc + 1, sizeof(*p->loc_key)) != 0)
        return 0;
    struct loc *l = &p->loc[p->nloc];
    p->loc_key[p->nloc++] = key;
    perftools__profiles__location__init(&l->m);
    perftools__profiles__line__init(&l->line);
    l->m.id = p->nloc;
    if (f->has_addr) {
        l->m.address = f->addr;
        l->m.mapping_id = mapping_of(p, f->addr);
        p->unmapped += l->m.mapping_id == 0;
    }
    l->line.function_id = fid;
    l->m.n_line = fid ? 1 : 0; /* the pointer is set at write: loc moves as it grows */
    p->locs.slot[s] = (uint32_t)p->nloc;
    p->locs.hash[s] = h;
    p->locs.n++;
    return l->m.id;
}

int pprof_sample(struct pprof *p, const struct pprof_frame *f, unsigned n,
                 const int64_t v[PPROF_NVALUES])
{
    if (grow(p, (void **)&p->smp, &p->asmp, p->nsmp + 1, sizeof(*p->smp)) != 0 ||
        charge(p, ((n ? n : 1) + PPROF_NVALUES) * sizeof(uint64_t)) != 0)
        return failure(p);
    pb_sample *s = &p->smp[p->nsmp];
    perftools__profiles__sample__init(s);
    s->location_id = ht_malloc((n ? n : 1) * sizeof(uint64_t));
    s->value = ht_malloc(PPROF_NVALUES * sizeof(int64_t));
    if (!s->location_id || !s->value) {
        ht_free(s->location_id);
        ht_free(s->value);
        return HT_ENOMEM;
    }
    p->nsmp++; /* freed with p from here on */
    for (unsigned i = 0; i < n; i++)
        if (!(s->location_id[s->n_location_id++] = location_id(p, &f[i])))
            return failure(p);
    memcpy(s->value, v, PPROF_NVALUES * sizeof(int64_t));
    s->n_value = PPROF_NVALUES;
    return 0;
}

/* gzip (RFC 1952) through zlib: windowBits 15 + 16 asks deflate for a gzip
 * wrapper (zlib.h, deflateInit2). Level 1 (Z_BEST_SPEED), as Go's
 * runtime/pprof writes its profiles (gzip.BestSpeed, src/runtime/pprof/
 * proto.go): on 100,000 stacks' 6.4 MB it took a sixth of level 6's time
 * (a third of the whole profile's at level 6) and made a file 1% smaller. */
static int gzip(struct pprof *p, const uint8_t *in, size_t n, uint8_t **out, size_t *len)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return HT_ENOMEM;
    /* deflate's own state: (1 << (windowBits + 2)) + (1 << (memLevel + 9))
     * bytes (zconf.h, "deflate memory usage"), 256 KiB here. */
    uLong cap = deflateBound(&z, (uLong)n) + 32;
    int rc = charge(p, cap + (1u << 17) + (1u << 17));
    uint8_t *b = rc == 0 ? ht_malloc(cap) : NULL;
    rc = rc ? rc : HT_ENOMEM;
    if (b) {
        z.next_in = (Bytef *)in;
        z.avail_in = (uInt)n;
        z.next_out = b;
        z.avail_out = (uInt)cap;
        if (deflate(&z, Z_FINISH) == Z_STREAM_END) {
            *out = b;
            *len = z.total_out;
            b = NULL;
            rc = 0;
        }
    }
    ht_free(b);
    deflateEnd(&z);
    return rc;
}

int pprof_gunzip(const uint8_t *gz, size_t n, uint8_t **out, size_t *len)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return HT_ENOMEM;
    size_t cap = n * 4 + 64, used = 0;
    uint8_t *b = NULL;
    int zr = Z_OK;
    z.next_in = (Bytef *)gz;
    z.avail_in = (uInt)n;
    while (zr == Z_OK) {
        uint8_t *nb = ht_realloc(b, cap);
        if (!nb)
            break;
        b = nb;
        z.next_out = b + used;
        z.avail_out = (uInt)(cap - used);
        zr = inflate(&z, Z_NO_FLUSH);
        used = z.total_out;
        cap *= 2;
    }
    inflateEnd(&z);
    if (zr != Z_STREAM_END) {
        ht_free(b);
        return HT_EBADARG;
    }
    *out = b;
    *len = used;
    return 0;
}

static pb_vtype *vtype(struct pprof *p, pb_vtype *t, const char *type, const char *unit)
{
    perftools__profiles__value_type__init(t);
    t->type = str_index(p, type);
    t->unit = str_index(p, unit);
    return t->type < 0 || t->unit < 0 ? NULL : t;
}

int pprof_write(struct pprof *p, int64_t time_nanos, int64_t duration_nanos, uint8_t **out,
                size_t *len)
{
    static const char *const names[PPROF_NVALUES][2] = {{"alloc_objects", "count"},
                                                        {"alloc_space", "bytes"},
                                                        {"inuse_objects", "count"},
                                                        {"inuse_space", "bytes"}};
    pb_vtype st[PPROF_NVALUES], period;
    pb_vtype *stp[PPROF_NVALUES];
    for (int k = 0; k < PPROF_NVALUES; k++)
        if (!(stp[k] = vtype(p, &st[k], names[k][0], names[k][1])))
            return failure(p);
    if (!vtype(p, &period, "space", "bytes"))
        return failure(p);
    pb_profile pr;
    perftools__profiles__profile__init(&pr);
    pr.n_sample_type = PPROF_NVALUES;
    pr.sample_type = stp;
    pr.period_type = &period;
    pr.time_nanos = time_nanos;
    pr.duration_nanos = duration_nanos;
    /* Go's heap profiles show inuse_space unless asked otherwise (its
     * allocs profile: alloc_space; pprof_default_sample). */
    pr.default_sample_type = st[p->default_type].type;
    if (charge(p, (p->nsmp + p->nloc + p->nfn + p->nmap + 4) * sizeof(void *)) != 0)
        return HT_EFULL;
    pb_sample **sp = ht_malloc((p->nsmp + 1) * sizeof(*sp));
    pb_location **lp = ht_malloc((p->nloc + 1) * sizeof(*lp));
    pb_function **fp = ht_malloc((p->nfn + 1) * sizeof(*fp));
    pb_mapping **mp = ht_malloc((p->nmap + 1) * sizeof(*mp));
    uint8_t *buf = NULL;
    int rc = HT_ENOMEM;
    if (sp && lp && fp && mp) {
        for (size_t i = 0; i < p->nsmp; i++)
            sp[i] = &p->smp[i];
        for (size_t i = 0; i < p->nloc; i++) {
            p->loc[i].lines[0] = &p->loc[i].line;
            p->loc[i].m.line = p->loc[i].lines;
            lp[i] = &p->loc[i].m;
        }
        for (size_t i = 0; i < p->nfn; i++)
            fp[i] = &p->fn[i];
        for (size_t i = 0; i < p->nmap; i++) {
            /* Names known where a function was: pprof then shows them as given. */
            p->map[i].has_functions = p->nfn > 0;
            mp[i] = &p->map[i];
        }
        pr.n_sample = p->nsmp;
        pr.sample = sp;
        pr.n_location = p->nloc;
        pr.location = lp;
        pr.n_function = p->nfn;
        pr.function = fp;
        pr.n_mapping = p->nmap;
        pr.mapping = mp;
        pr.n_string_table = p->nstr;
        pr.string_table = p->str;
        size_t n = perftools__profiles__profile__get_packed_size(&pr);
        buf = charge(p, n) == 0 ? ht_malloc(n ? n : 1) : NULL;
        if (buf && perftools__profiles__profile__pack(&pr, buf) == n)
            rc = gzip(p, buf, n, out, len);
        else if (p->over)
            rc = HT_EFULL;
    }
    ht_free(buf);
    ht_free(sp);
    ht_free(lp);
    ht_free(fp);
    ht_free(mp);
    return rc;
}
