/* Finding the allocator entry points a process resolves, in its symbol-resolution order. */
#include "resolve.h"

#include "heaptrace-bpf.h"
#include "ht-alloc.h"
#include "procmaps.h"
#include "prologue.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

/* The functions probed. operator new (every variant) takes the size first,
 * so it reads as malloc. new and delete are allocators only where the
 * module defining malloc defines them too (tcmalloc, jemalloc): libstdc++'s
 * call malloc and free, probed already, so there new is only a hint (an
 * entry probe telling where the frame-pointer stack starts) and delete is
 * not probed. No return probe on libstdc++'s new: a return probe replaces
 * the return address with its trampoline, which the C++ unwinder cannot
 * step through, so a bad_alloc thrown through it would terminate the
 * target. strdup and friends are hints too: glibc has no frame pointers. */
static const struct {
    const char *name;
    unsigned fn;
    int is_cxx;     /* operator new or delete */
    unsigned nargs; /* arguments the probe reads, kept intact up to it (prologue.h): a
                     * hint reads none, only rsp, the return address and rbp */
} alloc_syms[] = {
    {"malloc", HB_FN_MALLOC, 0, 1},
    {"calloc", HB_FN_CALLOC, 0, 2},
    {"realloc", HB_FN_REALLOC, 0, 2},
    {"reallocarray", HB_FN_REALLOCARRAY, 0, 3},
    {"free", HB_FN_FREE, 0, 1},
    {"posix_memalign", HB_FN_POSIX_MEMALIGN, 0, 3},
    {"aligned_alloc", HB_FN_MEMALIGN, 0, 2},
    {"memalign", HB_FN_MEMALIGN, 0, 2},
    {"valloc", HB_FN_MALLOC, 0, 1},
    {"pvalloc", HB_FN_PVALLOC, 0, 1},
    {"_Znwm", HB_FN_MALLOC, 1, 1},
    {"_Znam", HB_FN_MALLOC, 1, 1},
    {"_ZnwmRKSt9nothrow_t", HB_FN_MALLOC, 1, 2},
    {"_ZnamRKSt9nothrow_t", HB_FN_MALLOC, 1, 2},
    {"_ZnwmSt11align_val_t", HB_FN_MALLOC, 1, 2},
    {"_ZnamSt11align_val_t", HB_FN_MALLOC, 1, 2},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t", HB_FN_MALLOC, 1, 3},
    {"_ZnamSt11align_val_tRKSt9nothrow_t", HB_FN_MALLOC, 1, 3},
    {"strdup", HB_FN_HINT, 0, 0},
    {"strndup", HB_FN_HINT, 0, 0},
    {"wcsdup", HB_FN_HINT, 0, 0},
    {"getline", HB_FN_HINT, 0, 0},
    {"getdelim", HB_FN_HINT, 0, 0},
    /* Not an allocator: its wrapper has a stack frame but no frame pointer,
     * so the walk from the syscall would skip its caller (heaptrace.bpf.c
     * sys_exit takes the stack from the hint instead). */
    {"mremap", HB_FN_HINT, 0, 0},
    {"_ZdlPv", HB_FN_FREE, 1, 1},
    {"_ZdaPv", HB_FN_FREE, 1, 1},
    {"_ZdlPvm", HB_FN_FREE, 1, 2},
    {"_ZdaPvm", HB_FN_FREE, 1, 2},
    {"_ZdlPvRKSt9nothrow_t", HB_FN_FREE, 1, 2},
    {"_ZdaPvRKSt9nothrow_t", HB_FN_FREE, 1, 2},
    {"_ZdlPvSt11align_val_t", HB_FN_FREE, 1, 2},
    {"_ZdaPvSt11align_val_t", HB_FN_FREE, 1, 2},
    {"_ZdlPvmSt11align_val_t", HB_FN_FREE, 1, 3},
    {"_ZdaPvmSt11align_val_t", HB_FN_FREE, 1, 3},
};
#define NSYMS (sizeof(alloc_syms) / sizeof(alloc_syms[0]))

struct mod {
    const struct procmaps_module *pm;
    int fd;
    Elf *elf;
    char soname[256];
    int ordered;
    uint64_t vaddr[NSYMS]; /* 0: not defined here */
};

struct ctx {
    uint64_t pid;
    int hints; /* probe the hint functions (frame-pointer stacks) */
    struct procmaps_module *pms;
    struct mod *mods;
    size_t n;
    size_t *order, norder;
};

unsigned resolve_fn_of(const char *name, int *is_delete)
{
    for (size_t i = 0; i < NSYMS; i++)
        if (strcmp(alloc_syms[i].name, name) == 0) {
            if (is_delete)
                *is_delete = alloc_syms[i].fn == HB_FN_FREE && alloc_syms[i].is_cxx;
            return alloc_syms[i].fn;
        }
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static Elf_Scn *section_of_type(Elf *elf, unsigned type)
{
    Elf_Scn *scn = NULL;
    GElf_Shdr sh;
    while ((scn = elf_nextscn(elf, scn)) != NULL)
        if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
            return scn;
    return NULL;
}

/* Call cb for each string-valued tag of the dynamic section. */
static void dynamic_each(Elf *elf, int64_t tag, void (*cb)(void *arg, const char *s), void *arg)
{
    Elf_Scn *scn = section_of_type(elf, SHT_DYNAMIC);
    GElf_Shdr sh;
    if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_entsize == 0)
        return;
    Elf_Data *d = elf_getdata(scn, NULL);
    for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
        GElf_Dyn dyn;
        if (!gelf_getdyn(d, (int)i, &dyn))
            break;
        if (dyn.d_tag != tag)
            continue;
        const char *s = elf_strptr(elf, sh.sh_link, dyn.d_un.d_val);
        if (s)
            cb(arg, s);
    }
}

static void soname_cb(void *arg, const char *s)
{
    snprintf(arg, 256, "%s", s);
}

/* Record the allocator symbols the table defines (global or weak functions). */
static void symbols_scan(struct mod *m, Elf_Scn *scn)
{
    GElf_Shdr sh;
    if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_entsize == 0)
        return;
    Elf_Data *d = elf_getdata(scn, NULL);
    size_t count = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; d && i < count; i++) {
        GElf_Sym sym;
        if (!gelf_getsym(d, (int)i, &sym))
            break;
        unsigned bind = GELF_ST_BIND(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
            (bind != STB_GLOBAL && bind != STB_WEAK) || sym.st_value == 0)
            continue;
        const char *name = elf_strptr(m->elf, sh.sh_link, sym.st_name);
        if (!name || (name[0] != 'm' && name[0] != 'c' && name[0] != 'r' && name[0] != 'f' &&
                      name[0] != 'p' && name[0] != 'a' && name[0] != 'v' && name[0] != '_' &&
                      name[0] != 's' && name[0] != 'w' && name[0] != 'g'))
            continue;
        for (size_t k = 0; k < NSYMS; k++)
            if (!m->vaddr[k] && strcmp(alloc_syms[k].name, name) == 0)
                m->vaddr[k] = sym.st_value;
    }
}

static void module_open(struct ctx *c, size_t i)
{
    struct mod *m = &c->mods[i];
    m->pm = &c->pms[i];
    m->fd = procmaps_open_module(c->pid, m->pm);
    if (m->fd < 0)
        return;
    m->elf = elf_begin(m->fd, ELF_C_READ_MMAP, NULL);
    if (!m->elf || elf_kind(m->elf) != ELF_K_ELF)
        return;
    dynamic_each(m->elf, DT_SONAME, soname_cb, m->soname);
    Elf_Scn *dynsym = section_of_type(m->elf, SHT_DYNSYM);
    symbols_scan(m, dynsym);
    /* A static executable has no dynamic symbols: its own table is all there is. */
    if (!dynsym)
        symbols_scan(m, section_of_type(m->elf, SHT_SYMTAB));
}

static void module_close(struct mod *m)
{
    if (m->elf)
        elf_end(m->elf);
    if (m->fd >= 0)
        close(m->fd);
}

static void order_add(struct ctx *c, size_t i)
{
    if (c->mods[i].ordered)
        return;
    c->mods[i].ordered = 1;
    c->order[c->norder++] = i;
}

/* The inode of a path as the process sees it (0: none). A preload names
 * libtcmalloc_minimal.so.4, a symlink; the maps name the file it points to. */
static uint64_t inode_in(const struct ctx *c, const char *name)
{
    char path[PROCMAPS_PATH_MAX + 64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%llu/root%s", (unsigned long long)c->pid, name);
    return name[0] == '/' && stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The module a DT_NEEDED or preload entry names: by path (or the file a
 * path links to), soname or file name. */
static void order_add_name(struct ctx *c, const char *name)
{
    if (!*name)
        return;
    int has_slash = strchr(name, '/') != NULL;
    uint64_t ino = has_slash ? inode_in(c, name) : 0;
    for (size_t i = 0; i < c->n; i++) {
        const char *p = c->pms[i].path;
        if ((has_slash && (strcmp(p, name) == 0 || (ino && c->pms[i].inode == ino))) ||
            (!has_slash &&
             (strcmp(c->mods[i].soname, name) == 0 || strcmp(base_name(p), name) == 0))) {
            order_add(c, i);
            return;
        }
    }
}

static void needed_cb(void *arg, const char *s)
{
    order_add_name(arg, s);
}

/* Entries of a preload list (space or colon separated, ld.so(8)). */
static void preload_list(struct ctx *c, char *list)
{
    char *save = NULL;
    for (char *t = strtok_r(list, " :\t\n", &save); t; t = strtok_r(NULL, " :\t\n", &save))
        order_add_name(c, t);
}

static void preloads_add(struct ctx *c)
{
    char path[64], buf[8192];
    snprintf(path, sizeof(path), "/proc/%llu/environ", (unsigned long long)c->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        for (ssize_t off = 0; r > 0 && off < r;) {
            buf[r] = 0;
            char *e = buf + off;
            if (strncmp(e, "LD_PRELOAD=", 11) == 0) {
                preload_list(c, e + 11);
                break;
            }
            off += (ssize_t)strlen(e) + 1;
        }
    }
    snprintf(path, sizeof(path), "/proc/%llu/root/etc/ld.so.preload", (unsigned long long)c->pid);
    FILE *f = fopen(path, "re");
    if (f) {
        size_t r = fread(buf, 1, sizeof(buf) - 1, f);
        buf[r] = 0;
        fclose(f);
        preload_list(c, buf);
    }
}

static size_t exe_index(struct ctx *c)
{
    char path[64], exe[PROCMAPS_PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%llu/exe", (unsigned long long)c->pid);
    ssize_t r = readlink(path, exe, sizeof(exe) - 1);
    if (r > 0) {
        exe[r] = 0;
        char *del = strstr(exe, " (deleted)");
        if (del && del[10] == 0)
            *del = 0;
        for (size_t i = 0; i < c->n; i++)
            if (strcmp(c->pms[i].path, exe) == 0)
                return i;
    }
    return 0;
}

/* The resolution order: executable, preloads, DT_NEEDED breadth first, the rest
 * (dlopen'ed objects, in map order). */
static void order_build(struct ctx *c)
{
    order_add(c, exe_index(c));
    preloads_add(c);
    for (size_t k = 0; k < c->norder; k++)
        if (c->mods[c->order[k]].elf)
            dynamic_each(c->mods[c->order[k]].elf, DT_NEEDED, needed_cb, c);
    for (size_t i = 0; i < c->n; i++)
        order_add(c, i);
}

/* File offset of a virtual address, through the PT_LOAD holding it. */
static int vaddr_to_offset(Elf *elf, uint64_t vaddr, uint64_t *off, uint64_t *left)
{
    size_t nph;
    if (elf_getphdrnum(elf, &nph))
        return -1;
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
            continue;
        if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
            *off = vaddr - ph.p_vaddr + ph.p_offset;
            *left = ph.p_vaddr + ph.p_filesz - vaddr;
            return 0;
        }
    }
    return -1;
}

/* The probe site of alloc_syms[k] at vaddr in the file (prologue.h), and
 * the function's file offset in *off; -1 when vaddr is in no PT_LOAD. */
static int site_of(int fd, Elf *elf, uint64_t vaddr, size_t k, uint64_t *off,
                   struct prologue_site *site)
{
    uint64_t left;
    if (vaddr_to_offset(elf, vaddr, off, &left))
        return -1;
    uint8_t code[PROLOGUE_SCAN];
    size_t want = left < sizeof(code) ? (size_t)left : sizeof(code);
    ssize_t r = pread(fd, code, want, (off_t)*off);
    prologue_site_find(code, r > 0 ? (size_t)r : 0, alloc_syms[k].nargs, site);
    if (r <= 0)
        snprintf(site->why, sizeof(site->why), "the code could not be read");
    return 0;
}

static int point_add(struct ctx *c, struct resolve_point *pts, size_t *np, size_t mi, size_t k,
                     unsigned fn)
{
    struct mod *m = &c->mods[mi];
    uint64_t vaddr = m->vaddr[k], off;
    for (size_t i = 0; i < *np; i++)
        if (pts[i].addr == vaddr + m->pm->bias) {
            pts[i].aliases++; /* aligned_alloc == memalign: attached once */
            return 0;
        }
    struct prologue_site site;
    if (site_of(m->fd, m->elf, vaddr, k, &off, &site))
        return 0;
    struct resolve_point *p = &pts[(*np)++];
    memset(p, 0, sizeof(*p));
    snprintf(p->attach_path, sizeof(p->attach_path), "/proc/%llu/map_files/%llx-%llx",
             (unsigned long long)c->pid, (unsigned long long)m->pm->start,
             (unsigned long long)m->pm->first_map_end);
    snprintf(p->module, sizeof(p->module), "%s", m->pm->path);
    p->name = alloc_syms[k].name;
    p->fn = fn;
    p->addr = vaddr + m->pm->bias;
    p->probe_off = site.off;
    p->emulated = site.emulated;
    snprintf(p->why, sizeof(p->why), "%s", site.why);
    p->file_offset = off + p->probe_off;
    return 0;
}

/* For each function, the first module in order defining it; C++ operators
 * only where malloc itself is defined (see alloc_syms). */
static void points_pick(struct ctx *c, struct resolve_point *pts, size_t *np)
{
    size_t malloc_mod = (size_t)-1;
    for (size_t k = 0; k < NSYMS; k++) {
        for (size_t o = 0; o < c->norder; o++) {
            size_t mi = c->order[o];
            if (!c->mods[mi].vaddr[k])
                continue;
            if (k == 0)
                malloc_mod = mi;
            if (alloc_syms[k].fn == HB_FN_HINT && !c->hints)
                break;
            if (!alloc_syms[k].is_cxx || mi == malloc_mod)
                point_add(c, pts, np, mi, k, alloc_syms[k].fn);
            else if (alloc_syms[k].fn == HB_FN_MALLOC && c->hints)
                point_add(c, pts, np, mi, k, HB_FN_HINT);
            break;
        }
    }
}

int resolve_points(uint64_t pid, int hints, struct resolve_point **out, size_t *n, char *err,
                   size_t errsz)
{
    struct ctx c = {.pid = pid, .hints = hints};
    struct resolve_point *pts = NULL;
    size_t np = 0;
    int rc = procmaps_modules(pid, &c.pms, &c.n);
    if (rc) {
        snprintf(err, errsz, "cannot read the modules of process %llu: %s", (unsigned long long)pid,
                 uv_strerror(rc));
        return rc;
    }
    elf_version(EV_CURRENT);
    c.mods = ht_calloc(c.n ? c.n : 1, sizeof(*c.mods));
    c.order = ht_calloc(c.n ? c.n : 1, sizeof(*c.order));
    pts = ht_calloc(NSYMS, sizeof(*pts));
    if (!c.mods || !c.order || !pts) {
        rc = UV_ENOMEM;
        snprintf(err, errsz, "out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < c.n; i++)
        c.mods[i].fd = -1;
    for (size_t i = 0; i < c.n; i++)
        module_open(&c, i);
    order_build(&c);
    points_pick(&c, pts, &np);
    if (np == 0 || !c.mods[0].pm) {
        rc = UV_ENOENT;
        snprintf(err, errsz,
                 "no allocator symbol found in process %llu (a static binary without a symbol "
                 "table, or no malloc in any of its %zu modules)",
                 (unsigned long long)pid, c.n);
        goto out_free;
    }
    *out = pts;
    *n = np;
    pts = NULL;
out_free:
    for (size_t i = 0; c.mods && i < c.n; i++)
        module_close(&c.mods[i]);
    ht_free(pts);
    ht_free(c.order);
    ht_free(c.mods);
    ht_free(c.pms);
    return rc;
}

int resolve_file_site(const char *path, const char *name, uint64_t *vaddr,
                      struct prologue_site *site)
{
    size_t k = 0;
    while (k < NSYMS && strcmp(alloc_syms[k].name, name) != 0)
        k++;
    if (k == NSYMS)
        return UV_EINVAL;
    struct mod m = {.fd = open(path, O_RDONLY | O_CLOEXEC)};
    if (m.fd < 0)
        return uv_translate_sys_error(errno);
    elf_version(EV_CURRENT);
    int rc = UV_ENOENT;
    uint64_t off;
    m.elf = elf_begin(m.fd, ELF_C_READ_MMAP, NULL);
    if (m.elf && elf_kind(m.elf) == ELF_K_ELF) {
        symbols_scan(&m, section_of_type(m.elf, SHT_DYNSYM));
        *vaddr = m.vaddr[k];
        if (m.vaddr[k] && site_of(m.fd, m.elf, m.vaddr[k], k, &off, site) == 0)
            rc = 0;
    }
    module_close(&m);
    return rc;
}
