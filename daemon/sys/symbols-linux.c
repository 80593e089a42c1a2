/* Lazy symbolizer for a live process: libdwfl reads each module once into a sorted table. */
#include "symcache.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "procmaps.h"
#include "symbols-dpkg.h"

#include <demangle.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

/* Caps: distinct images (files) cached, functions and name bytes per image
 * (a large C++ library has ~10^6 symbols); modules mapped at once: symcache.h. */
#define SYM_IMAGES_MAX 4096
#define SYM_PER_IMAGE_MAX (4u << 20)
#define SYM_NAMES_MAX (256u << 20)
#define SYM_NAME_MAX 4096 /* longer names are cut */
/* A symbol of size 0 (assembly) covers at most this far, up to the next one. */
#define SYM_ZERO_SIZE_SPAN 4096

struct sym_entry {
    uint64_t start; /* ELF virtual address */
    uint32_t size;
    uint32_t name; /* offset in the image's names, or SYM_DEMANGLED|offset in its dem */
};

/* The entry's name was demangled once and kept (lookups then copy it). */
#define SYM_DEMANGLED 0x80000000u
#define SYM_DEM_MAX (64u << 20) /* demangled names kept per image */

/* One ELF file, shared by every module with its build id. */
struct sym_image {
    char key[2 * PROCMAPS_BUILD_ID_MAX + 32]; /* build id hex, or "" (never shared) */
    struct sym_entry *syms;
    uint32_t nsyms, capsyms; /* aliases merged: nsyms <= capsyms, the size allocated */
    char *names;
    size_t names_len;
    char *dem; /* demangled names, filled as lookups meet them */
    size_t dem_len, dem_cap;
    char soname[64];  /* DT_SONAME, "" when none */
    Dwfl *dwfl;       /* for line info only, opened on demand */
    int lines_failed; /* its file gave no Dwfl: not retried */
    Dwfl_Module *mod;
    /* Lookups in it that found no symbol; the Debian package of its file
     * (looked up at the first), "" when none owns it. */
    uint64_t unsym;
    int pkg_looked;
    char pkg[96];
    char unsym_path[256];
};

_Static_assert(SYM_BUILD_ID_HEX == 2 * PROCMAPS_BUILD_ID_MAX + 1, "symcache.h: build id size");

/* The Linux part of a cache: the images its modules use, what names the
 * main executable, and whose the process must be. */
struct sym_os {
    struct sym_image **images;
    size_t nimages, capimages;
    /* The main executable's file (as the maps name it) and the name the
     * process knows itself by: frames in that file are named so. */
    char exe_path[PROCMAPS_PATH_MAX];
    char exe_name[256];
    /* sym_cache_set_owner: the uid the process must be of for its /proc to
     * be read; not_owner once it was not (never read again). */
    int has_owner, not_owner;
    uint32_t owner;
};

static char *debuginfo_path = "/usr/lib/debug";

/* The standard lookup, for a module whose .gnu_debuglink is a plain file
 * name: binutils writes the link's base name (bfd/opncls.c,
 * bfd_create_gnu_debuglink_section) and libdwfl appends it to each directory
 * it searches, so a "../" in a target's link reached any file as root (one
 * only root may read, whose symbols then named the target's frames, or a
 * FIFO, whose open blocked the loop). */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink_file,
                          GElf_Word debuglink_crc, char **debuginfo_file_name)
{
    if (debuglink_file && (strchr(debuglink_file, '/') || strcmp(debuglink_file, "..") == 0))
        return -1;
    return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                        debuglink_crc, debuginfo_file_name);
}

/* Separate debug files are looked up by build id and debuglink only under
 * /usr/lib/debug (root's): the daemon runs as root and a target's own
 * directory could hold a FIFO or a device under the debuglink name; and a
 * debuglink that is not a plain file name is not followed at all. */
static const Dwfl_Callbacks dwfl_cbs = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

int sym_set_search_path(const char *path)
{
    return path && path[0] ? HT_EBADARG : 0;
}

/* Up to sz - 1 bytes of /proc/PID/<what>, NUL-terminated; the length read. */
static size_t proc_read(uint64_t pid, const char *what, char *buf, size_t sz)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/%s", pid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sz - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = 0;
    return n > 0 ? (size_t)n : 0;
}

/* The name the process knows itself by: its comm, or argv[0]'s base name
 * when comm is the start of it (the kernel cuts comm at 15 bytes:
 * TASK_COMM_LEN, include/linux/sched.h). A program started through a
 * symlink is named by the link (/usr/bin/redis-server is a link to
 * redis-check-rdb: the maps name the file). */
static void exe_learn(struct sym_cache *c)
{
    char comm[64], argv0[256], path[64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/exe", c->pid);
    ssize_t n = readlink(path, c->os->exe_path, sizeof c->os->exe_path - 1);
    if (n <= 0) {
        c->os->exe_path[0] = 0;
        return;
    }
    c->os->exe_path[n] = 0;
    /* As procmaps names a deleted file: without the kernel's suffix. */
    size_t dl = strlen(" (deleted)");
    if ((size_t)n > dl && strcmp(c->os->exe_path + n - dl, " (deleted)") == 0)
        c->os->exe_path[n - dl] = 0;
    proc_read(c->pid, "comm", comm, sizeof comm);
    comm[strcspn(comm, "\n")] = 0;
    proc_read(c->pid, "cmdline", argv0, sizeof argv0); /* argv[0] ends at its NUL */
    const char *b = strrchr(argv0, '/');
    b = b ? b + 1 : argv0;
    size_t cl = strlen(comm);
    if (cl && strncmp(b, comm, cl) == 0 && b[strcspn(b, " ")] == 0)
        snprintf(c->os->exe_name, sizeof c->os->exe_name, "%s", b);
    else
        snprintf(c->os->exe_name, sizeof c->os->exe_name, "%s", comm);
}

static int sym_os_new(struct sym_cache *c)
{
    c->os = ht_calloc(1, sizeof *c->os);
    if (!c->os)
        return UV_ENOMEM;
    if (c->pid)
        exe_learn(c);
    return 0;
}

static void image_free(struct sym_cache *c, struct sym_image *im)
{
    if (im->dwfl)
        dwfl_end(im->dwfl);
    symcache_free(c, im->syms, (size_t)im->capsyms * sizeof *im->syms);
    symcache_free(c, im->names, im->names_len);
    symcache_free(c, im->dem, im->dem_cap);
    symcache_free(c, im, sizeof *im);
}

static void sym_os_free(struct sym_cache *c)
{
    for (size_t i = 0; i < c->os->nimages; i++)
        image_free(c, c->os->images[i]);
    symcache_free(c, c->os->images, c->os->capimages * sizeof *c->os->images);
    ht_free(c->os);
}

void sym_cache_set_owner(struct sym_cache *c, uint32_t uid)
{
    c->os->has_owner = 1;
    c->os->owner = uid;
}

/* May the process's maps and files be read for the owner? /proc/PID is
 * owned by the process's effective uid while it is dumpable, by root once
 * not (a setuid or setgid exec, prctl): task_dump_owner, fs/proc/base.c.
 * Once no, never again: the process is not the one the owner started. */
static int owner_ok(struct sym_cache *c)
{
    if (!c->os->has_owner)
        return 1;
    if (c->os->not_owner)
        return 0;
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%" PRIu64, c->pid);
    if (stat(path, &st) == 0 && st.st_uid == c->os->owner)
        return 1;
    c->os->not_owner = 1;
    c->st.not_owner++;
    return 0;
}

static int sym_os_module_check(uint64_t start, uint64_t end, const char *path, const char *build_id)
{
    if (!path || end <= start || strlen(path) >= PROCMAPS_PATH_MAX ||
        (build_id && strlen(build_id) > 2 * PROCMAPS_BUILD_ID_MAX))
        return HT_EBADARG;
    return 0;
}

static void sym_os_module_dropped(struct sym_cache *c, struct sym_module *m)
{
    (void)c; /* its image stays cached by build id */
    (void)m;
}

/* Re-read the process's modules: those of an earlier scan go, the source's stay. */
static void sym_os_rescan(struct sym_cache *c)
{
    struct procmaps_module *v;
    size_t n;
    if (!owner_ok(c) || procmaps_modules(c->pid, &v, &n) != 0)
        return;
    if (!owner_ok(c)) { /* it changed hands while its maps were read */
        ht_free(v);
        return;
    }
    symcache_scan_drop_all(c);
    for (size_t i = 0; i < n; i++) {
        struct sym_module m = {.start = v[i].start,
                               .end = v[i].end,
                               .bias = v[i].bias,
                               .first_map_end = v[i].first_map_end,
                               .inode = v[i].inode,
                               .deleted = v[i].deleted,
                               .path = v[i].path,
                               .image = -1,
                               .from_maps = MOD_SCAN};
        memcpy(m.build_id, v[i].build_id, sizeof m.build_id);
        symcache_scan_add(c, &m);
    }
    ht_free(v);
}

/* ---- opening a module's file ---- */

struct find_map {
    uint64_t start, first_map_end, inode;
    int deleted;
};

static int find_map_cb(void *arg, const struct procmaps_entry *e)
{
    struct find_map *f = arg;
    if (e->start < f->start)
        return 0;
    if (e->start == f->start) {
        f->first_map_end = e->end;
        f->inode = e->inode;
        f->deleted = e->deleted;
    }
    return 1;
}

/* A descriptor of the module's file as the process maps it, or an error. */
static int mod_open(struct sym_cache *c, struct sym_module *m)
{
    struct procmaps_module pm = {.start = m->start,
                                 .first_map_end = m->first_map_end,
                                 .inode = m->inode,
                                 .deleted = m->deleted};
    if (!owner_ok(c))
        return UV_EPERM;
    if (!m->first_map_end) {
        /* A module from the source names its range, not its first mapping's. */
        struct find_map f = {.start = m->start};
        int err = procmaps_each(c->pid, find_map_cb, &f);
        if (err)
            return err;
        if (!f.first_map_end)
            return UV_ENOENT;
        m->first_map_end = pm.first_map_end = f.first_map_end;
        m->inode = pm.inode = f.inode;
        m->deleted = pm.deleted = f.deleted;
    }
    snprintf(pm.path, sizeof pm.path, "%s", m->path);
    if (!owner_ok(c))
        return UV_EPERM;
    int fd = procmaps_open_module(c->pid, &pm);
    if (fd >= 0 && !owner_ok(c)) { /* it changed hands meanwhile */
        close(fd);
        return UV_EPERM;
    }
    return fd;
}

/* A Dwfl holding the module's file at bias 0 (addresses are ELF virtual
 * addresses). Takes fd. */
static Dwfl *image_report(int fd, const char *path, Dwfl_Module **mod)
{
    Dwfl *d = dwfl_begin(&dwfl_cbs);
    if (!d) {
        close(fd);
        return NULL;
    }
    const char *base = strrchr(path, '/');
    dwfl_report_begin(d);
    /* On success libdwfl owns fd and closes it in dwfl_end. */
    *mod = dwfl_report_elf(d, base ? base + 1 : path, path, fd, 0, true);
    dwfl_report_end(d, NULL, NULL);
    if (!*mod) {
        close(fd);
        dwfl_end(d);
        return NULL;
    }
    return d;
}

static void build_id_hex(Dwfl_Module *mod, char *out, size_t outsz)
{
    const unsigned char *bits;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &bits, &vaddr);
    out[0] = '\0';
    if (n <= 0 || (size_t)n > PROCMAPS_BUILD_ID_MAX || 2 * (size_t)n >= outsz)
        return;
    for (int i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", bits[i]);
}

/* ---- reading the symbol table ---- */

/* Preference among aliases at one address: a plain name ("malloc") over
 * "__libc_malloc", a global over a local, no version suffix, shorter. */
static unsigned name_rank(const char *name, unsigned char bind)
{
    unsigned r = 0;
    while (name[r] == '_' && r < 8)
        r++;
    r *= 4;
    if (bind == STB_LOCAL)
        r += 2;
    if (strchr(name, '@'))
        r += 64;
    return r;
}

static int is_function(const GElf_Sym *s, GElf_Word shndx)
{
    unsigned t = GELF_ST_TYPE(s->st_info);
    return (t == STT_FUNC || t == STT_GNU_IFUNC) && shndx != SHN_UNDEF && s->st_value != 0;
}

static int entry_cmp(const void *a, const void *b)
{
    const struct sym_entry *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return 0;
}

/* Does alias b win over a (same address)? Rank, then the larger size, then
 * the shorter and lower name: the same choice on every load. */
static int alias_better(const struct sym_entry *a, const struct sym_entry *b, const char *names)
{
    uint32_t ra = a->size >> 24, rb = b->size >> 24;
    uint32_t sa = a->size & 0xffffff, sb = b->size & 0xffffff;
    if (ra != rb)
        return rb < ra;
    if (sa != sb)
        return sb > sa;
    const char *na = names + a->name, *nb = names + b->name;
    size_t la = strlen(na), lb = strlen(nb);
    if (la != lb)
        return lb < la;
    return strcmp(nb, na) < 0;
}

/* Sort by address; of the aliases at one address keep the best-ranked name,
 * whose rank rides in the top byte of size while sorting. */
static uint32_t entries_finish(struct sym_entry *v, uint32_t n, const char *names)
{
    qsort(v, n, sizeof *v, entry_cmp);
    uint32_t out = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (out > 0 && v[out - 1].start == v[i].start) {
            if (alias_better(&v[out - 1], &v[i], names))
                v[out - 1] = v[i];
            continue;
        }
        v[out++] = v[i];
    }
    for (uint32_t i = 0; i < out; i++) {
        uint32_t size = v[i].size & 0xffffff;
        if (size == 0) {
            uint64_t span = SYM_ZERO_SIZE_SPAN;
            if (i + 1 < out && v[i + 1].start - v[i].start < span)
                span = v[i + 1].start - v[i].start;
            size = (uint32_t)span;
        }
        v[i].size = size;
    }
    return out;
}

/* Name without its version ("cfree@GLIBC_2.2.5" -> "cfree"), cut at SYM_NAME_MAX. */
static size_t name_len(const char *name)
{
    size_t n = 0;
    while (name[n] && n < SYM_NAME_MAX - 1 && !(name[n] == '@' && n > 0))
        n++;
    return n;
}

static int image_load_symbols(struct sym_cache *c, struct sym_image *im, Dwfl_Module *mod)
{
    int n = dwfl_module_getsymtab(mod);
    if (n <= 0)
        return 0; /* no symbols at all: every address reads module!+0x... */
    uint32_t count = 0;
    size_t names = 0;
    for (int i = 1; i < n; i++) {
        GElf_Sym s;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(mod, i, &s, &addr, &shndx, NULL, NULL);
        if (!name || !name[0] || !is_function(&s, shndx))
            continue;
        if (count == SYM_PER_IMAGE_MAX || names + name_len(name) + 1 > SYM_NAMES_MAX)
            break;
        count++;
        names += name_len(name) + 1;
    }
    if (count == 0)
        return 0;
    im->syms = symcache_alloc(c, (size_t)count * sizeof *im->syms);
    im->names = symcache_alloc(c, names);
    if (!im->syms || !im->names) {
        symcache_free(c, im->syms, im->syms ? (size_t)count * sizeof *im->syms : 0);
        symcache_free(c, im->names, im->names ? names : 0);
        im->syms = NULL;
        im->names = NULL;
        return UV_ENOMEM;
    }
    im->nsyms = im->capsyms = count;
    im->names_len = names;
    uint32_t k = 0;
    size_t off = 0;
    for (int i = 1; i < n && k < count; i++) {
        GElf_Sym s;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(mod, i, &s, &addr, &shndx, NULL, NULL);
        if (!name || !name[0] || !is_function(&s, shndx))
            continue;
        size_t len = name_len(name);
        if (off + len + 1 > names)
            break;
        uint64_t size = s.st_size > 0xffffff ? 0xffffff : s.st_size;
        unsigned rank = name_rank(name, GELF_ST_BIND(s.st_info));
        im->syms[k].start = addr;
        im->syms[k].size = (uint32_t)size | (rank > 255 ? 255u : rank) << 24;
        im->syms[k].name = (uint32_t)off;
        memcpy(im->names + off, name, len);
        im->names[off + len] = '\0';
        off += len + 1;
        k++;
    }
    im->nsyms = entries_finish(im->syms, k, im->names);
    c->st.symbols += im->nsyms;
    return 0;
}

/* DT_SONAME from the .dynamic section (strip keeps it). */
static void image_soname(struct sym_image *im, Dwfl_Module *mod)
{
    GElf_Addr bias;
    Elf *e = dwfl_module_getelf(mod, &bias);
    Elf_Scn *scn = NULL;
    while (e && (scn = elf_nextscn(e, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC || sh.sh_entsize == 0)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize && i < 4096; i++) {
            GElf_Dyn dyn;
            if (!gelf_getdyn(d, (int)i, &dyn) || dyn.d_tag == DT_NULL)
                break;
            const char *so =
                dyn.d_tag == DT_SONAME ? elf_strptr(e, sh.sh_link, dyn.d_un.d_val) : NULL;
            if (so && strlen(so) < sizeof im->soname) {
                strcpy(im->soname, so);
                return;
            }
        }
        return;
    }
}

static int image_find(const struct sym_cache *c, const char *build_id)
{
    if (!build_id[0])
        return -1;
    for (size_t i = 0; i < c->os->nimages; i++)
        if (strcmp(c->os->images[i]->key, build_id) == 0)
            return (int)i;
    return -1;
}

static int images_add(struct sym_cache *c, struct sym_image *im)
{
    if (c->os->nimages == SYM_IMAGES_MAX)
        return HT_EFULL;
    if (c->os->nimages == c->os->capimages) {
        size_t cap = c->os->capimages ? c->os->capimages * 2 : 16;
        struct sym_image **v =
            symcache_realloc(c, c->os->images, c->os->capimages * sizeof *v, cap * sizeof *v);
        if (!v)
            return UV_ENOMEM;
        c->os->images = v;
        c->os->capimages = cap;
    }
    c->os->images[c->os->nimages++] = im;
    return (int)c->os->nimages - 1;
}

/* A file without build id is known by its inode and path (a hash of it), so
 * that re-reading the maps finds its image again. */
static void image_key_nobid(const struct sym_module *m, char *key, size_t sz)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = m->path; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    snprintf(key, sz, "@%" PRIx64 ":%016" PRIx64, m->inode, h);
}

/* Load the module's image (or find it by build id). Its index, or an error. */
static int mod_load(struct sym_cache *c, struct sym_module *m)
{
    int idx = image_find(c, m->build_id);
    if (idx >= 0)
        return idx;
    int fd = mod_open(c, m);
    if (fd < 0)
        return fd;
    Dwfl_Module *mod;
    Dwfl *d = image_report(fd, m->path, &mod);
    if (!d)
        return HT_EBADARG;
    /* The file's own build id decides (a module event may be stale). */
    char bid[sizeof m->build_id + 32];
    build_id_hex(mod, bid, sizeof m->build_id);
    if (!bid[0])
        image_key_nobid(m, bid, sizeof bid);
    idx = image_find(c, bid);
    if (idx >= 0) {
        dwfl_end(d);
        return idx;
    }
    int err = UV_ENOMEM;
    struct sym_image *im = symcache_alloc(c, sizeof *im);
    if (!im)
        goto end_dwfl;
    memset(im, 0, sizeof *im);
    strcpy(im->key, bid);
    image_soname(im, mod);
    err = image_load_symbols(c, im, mod);
    if (err == 0 && (err = images_add(c, im)) >= 0) {
        idx = err;
        err = 0;
        c->st.modules++;
    }
    if (err)
        image_free(c, im);
end_dwfl:
    dwfl_end(d);
    return err ? err : idx;
}

static struct sym_image *mod_image(struct sym_cache *c, struct sym_module *m)
{
    if (m->image == -1) {
        int r = mod_load(c, m);
        if (r < 0)
            c->st.load_errors++;
        m->image = r < 0 ? -2 : r;
    }
    return m->image >= 0 ? c->os->images[m->image] : NULL;
}

static struct sym_entry *image_lookup(const struct sym_image *im, uint64_t vaddr)
{
    size_t lo = 0, hi = im->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (im->syms[mid].start <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* A few steps back cover a function that holds smaller symbols. */
    for (size_t i = lo, steps = 0; i > 0 && steps < 4; i--, steps++) {
        struct sym_entry *e = &im->syms[i - 1];
        if (vaddr - e->start < e->size)
            return e;
    }
    return NULL;
}

/* The module's file name, or its soname when the file name is the soname
 * with a version after it ("libstdc++.so.6.0.30" reads "libstdc++.so.6", as
 * the cull list names it); the main executable by the process's own name. */
static const char *module_name(const struct sym_cache *c, const char *path,
                               const struct sym_image *im)
{
    if (c->os->exe_name[0] && strcmp(path, c->os->exe_path) == 0)
        return c->os->exe_name;
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t sl = im ? strlen(im->soname) : 0;
    if (sl && strncmp(b, im->soname, sl) == 0 && b[sl] == '.')
        return im->soname;
    return b;
}

/* Keep text in the image's demangled names: its offset, or -1 (cap, memory). */
static int64_t dem_keep(struct sym_cache *c, struct sym_image *im, const char *text)
{
    size_t len = strlen(text) + 1;
    if (im->dem_len + len > im->dem_cap) {
        size_t cap = im->dem_cap ? im->dem_cap * 2 : 4096;
        while (cap < im->dem_len + len)
            cap *= 2;
        if (cap > SYM_DEM_MAX)
            return -1;
        char *d = symcache_realloc(c, im->dem, im->dem_cap, cap);
        if (!d)
            return -1;
        im->dem = d;
        im->dem_cap = cap;
    }
    memcpy(im->dem + im->dem_len, text, len);
    im->dem_len += len;
    return (int64_t)(im->dem_len - len);
}

/* The entry's name for output: C++ (_Z) and Rust (_R, and legacy
 * _ZN...17h<hash>E) names demangled once, the style left to libiberty's
 * auto-detection (which tries Rust first), and kept. */
static const char *entry_name(struct sym_cache *c, struct sym_image *im, struct sym_entry *e)
{
    if (e->name & SYM_DEMANGLED)
        return im->dem + (e->name & ~SYM_DEMANGLED);
    const char *name = im->names + e->name;
    if (name[0] != '_' || (name[1] != 'Z' && name[1] != 'R'))
        return name;
    char *dem = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
    int64_t off = dem_keep(c, im, dem ? dem : name);
    free(dem); /* libiberty allocates with malloc */
    if (off < 0)
        return name;
    e->name = SYM_DEMANGLED | (uint32_t)off;
    return im->dem + off;
}

/* A lookup in m found no symbol: counted, and at the image's first, who
 * could supply its symbols. */
static void unsym_note(struct sym_cache *c, struct sym_module *m, struct sym_image *im)
{
    c->st.unsymbolized++;
    if (!im)
        return;
    im->unsym++;
    if (im->pkg_looked)
        return;
    im->pkg_looked = 1;
    snprintf(im->unsym_path, sizeof im->unsym_path, "%s", m->path);
    dpkg_owner(m->path, im->pkg, sizeof im->pkg);
}

static const char *sym_os_resolve(struct sym_cache *c, uint64_t addr, char *buf, size_t bufsz)
{
    struct sym_module *m = symcache_mod_for(c, addr);
    if (!m) {
        c->st.misses++;
        return NULL;
    }
    struct sym_image *im = mod_image(c, m);
    uint64_t vaddr = addr - m->bias;
    struct sym_entry *e = im ? image_lookup(im, vaddr) : NULL;
    if (!e) {
        c->st.misses++;
        unsym_note(c, m, im);
        snprintf(buf, bufsz, "%s!+0x%" PRIx64, module_name(c, m->path, im), vaddr);
        return buf;
    }
    snprintf(buf, bufsz, "%s!%s", module_name(c, m->path, im), entry_name(c, im, e));
    return buf;
}

static int sym_os_lineinfo(struct sym_cache *c, uint64_t addr, char *file, size_t filesz,
                           unsigned *line)
{
    struct sym_module *m = symcache_mod_for(c, addr);
    struct sym_image *im = m ? mod_image(c, m) : NULL;
    if (!im)
        return UV_ENOENT;
    if (!im->dwfl && im->lines_failed)
        return UV_ENOENT;
    if (!im->dwfl) {
        /* Line tables stay loaded for this image from now on. */
        im->lines_failed = 1;
        int fd = mod_open(c, m);
        if (fd < 0)
            return UV_ENOENT;
        im->dwfl = image_report(fd, m->path, &im->mod);
        if (!im->dwfl)
            return UV_ENOENT;
        im->lines_failed = 0;
    }
    Dwfl_Line *l = dwfl_module_getsrc(im->mod, addr - m->bias);
    int ln = 0;
    const char *src = l ? dwfl_lineinfo(l, NULL, &ln, NULL, NULL, NULL) : NULL;
    if (!src || ln <= 0)
        return UV_ENOENT;
    snprintf(file, filesz, "%s", src);
    *line = (unsigned)ln;
    return 0;
}

/* What would name the unsymbolized frames: the file most of them are in
 * and its debug symbols (Debian's PACKAGE-dbgsym, from the debian-debug
 * archive; else a debug file under /usr/lib/debug by build id). */
static void hint_make(const struct sym_cache *c, char *buf, size_t sz)
{
    const struct sym_image *top = NULL;
    buf[0] = 0;
    for (size_t i = 0; i < c->os->nimages; i++)
        if (c->os->images[i]->unsym && (!top || c->os->images[i]->unsym > top->unsym))
            top = c->os->images[i];
    if (!top)
        return;
    /* The daemon keeps DEBUGINFOD_URLS only when the configuration turns
     * debuginfod on (daemon.c). */
    const char *dbg = getenv("DEBUGINFOD_URLS") ? "; debuginfod is on and had none"
                                                : ", or turn debuginfod on in the configuration";
    if (top->pkg[0])
        snprintf(buf, sz,
                 "most are in %.100s: its symbols are in %.60s-dbgsym (debian-debug archive)%s",
                 top->unsym_path, top->pkg, dbg);
    else
        snprintf(buf, sz, "most are in %.100s: install its debug file under /usr/lib/debug%s",
                 top->unsym_path, dbg);
}

static void sym_os_stats(const struct sym_cache *c, struct sym_stats *st)
{
    hint_make(c, st->hint, sizeof st->hint);
}

static const struct sym_os_ops os_ops = {
    .new = sym_os_new,
    .free = sym_os_free,
    .module_check = sym_os_module_check,
    .module_dropped = sym_os_module_dropped,
    .rescan = sym_os_rescan,
    .resolve = sym_os_resolve,
    .lineinfo = sym_os_lineinfo,
    .stats = sym_os_stats,
};

int sym_cache_new(struct sym_cache **out, uint64_t pid, struct mem_acct *acct, int kind)
{
    return symcache_new(out, pid, acct, kind, &os_ops);
}
