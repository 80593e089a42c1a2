/* A process's mappings and ELF modules from /proc/PID/maps, files opened through map_files. */
#include "procmaps.h"

#include "ht-alloc.h"
#include "ht-error.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

/* A line is at most a path (PATH_MAX, the kernel's limit for d_path) plus
 * the fixed fields and " (deleted)": anything longer is not from the kernel
 * and is skipped whole. */
#define LINE_MAX_LEN (PROCMAPS_PATH_MAX + 256)
#define READ_CHUNK 65536
#define DELETED_SUFFIX " (deleted)"

static int sys_err(int e)
{
    /* A process that exits while we read its files answers ESRCH. */
    if (e == ESRCH)
        return UV_ENOENT;
    return uv_translate_sys_error(e);
}

static int parse_hex(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    int n = 0;
    for (;; s++, n++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A' + 10);
        else
            break;
        if (n >= 16)
            return -1;
        v = v << 4 | d;
    }
    if (n == 0)
        return -1;
    *p = s;
    *out = v;
    return 0;
}

static int parse_dec(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    int n = 0;
    for (; *s >= '0' && *s <= '9'; s++, n++) {
        if (n >= 19)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (n == 0)
        return -1;
    *p = s;
    *out = v;
    return 0;
}

static int expect(const char **p, char c)
{
    if (**p != c)
        return -1;
    (*p)++;
    return 0;
}

static void skip_spaces(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* "start-end perms offset dev inode   path": line is NUL-terminated, without
 * its newline, and is modified (the deleted suffix is cut). */
static int parse_line(char *line, struct procmaps_entry *e)
{
    const char *p = line;
    uint64_t dev_major, dev_minor;
    memset(e, 0, sizeof *e);
    if (parse_hex(&p, &e->start) || expect(&p, '-') || parse_hex(&p, &e->end) || expect(&p, ' ') ||
        e->end < e->start)
        return -1;
    if (p[0] == '\0' || p[1] == '\0' || p[2] == '\0' || p[3] == '\0')
        return -1;
    e->prot = (p[0] == 'r' ? PROT_READ : 0) | (p[1] == 'w' ? PROT_WRITE : 0) |
              (p[2] == 'x' ? PROT_EXEC : 0);
    e->shared = p[3] == 's';
    p += 4;
    if (expect(&p, ' ') || parse_hex(&p, &e->offset) || expect(&p, ' ') ||
        parse_hex(&p, &dev_major) || expect(&p, ':') || parse_hex(&p, &dev_minor) ||
        expect(&p, ' ') || parse_dec(&p, &e->inode))
        return -1;
    if (*p != '\0' && *p != ' ')
        return -1;
    skip_spaces(&p);
    /* The path runs to the end of the line: spaces are part of it. */
    size_t len = strlen(p);
    size_t sl = sizeof(DELETED_SUFFIX) - 1;
    if (p[0] == '/' && len > sl && strcmp(p + len - sl, DELETED_SUFFIX) == 0) {
        e->deleted = 1;
        line[(size_t)(p - line) + len - sl] = '\0';
    }
    e->path = p;
    return 0;
}

/* A file whose name itself ends in " (deleted)" reads like a deleted one:
 * when a file of that full name exists with the mapped inode, it is not
 * deleted and the suffix is its name's. */
static void check_deleted(uint64_t pid, struct procmaps_entry *e)
{
    char path[PROCMAPS_PATH_MAX + 64];
    struct stat st;
    size_t len = strlen(e->path);
    if ((size_t)snprintf(path, sizeof path, "/proc/%" PRIu64 "/root%s" DELETED_SUFFIX, pid,
                         e->path) >= sizeof path)
        return;
    if (stat(path, &st) == 0 && st.st_ino == e->inode) {
        /* Put the suffix back: parse_line cut it at the path's end. */
        memcpy((char *)e->path + len, DELETED_SUFFIX, sizeof DELETED_SUFFIX);
        e->deleted = 0;
    }
}

struct reader {
    uint64_t pid;
    char *buf;
    size_t len;   /* bytes held */
    int skipping; /* inside an overlong line: drop up to its newline */
};

/* Hand every complete line in r to cb; keep the tail. 1 when cb stopped. */
static int reader_lines(struct reader *r, int (*cb)(void *, const struct procmaps_entry *),
                        void *arg)
{
    size_t pos = 0;
    for (;;) {
        char *nl = memchr(r->buf + pos, '\n', r->len - pos);
        if (!nl)
            break;
        *nl = '\0';
        struct procmaps_entry e;
        int skip = r->skipping || (size_t)(nl - (r->buf + pos)) > LINE_MAX_LEN;
        r->skipping = 0;
        if (!skip && parse_line(r->buf + pos, &e) == 0) {
            if (e.deleted && r->pid)
                check_deleted(r->pid, &e);
            if (cb(arg, &e))
                return 1;
        }
        pos = (size_t)(nl - r->buf) + 1;
    }
    memmove(r->buf, r->buf + pos, r->len - pos);
    r->len -= pos;
    if (r->len > LINE_MAX_LEN) {
        r->len = 0;
        r->skipping = 1;
    }
    return 0;
}

/* pid 0: text not from /proc (a test's), no file-system check of names. */
static int each_fd(int fd, uint64_t pid, int (*cb)(void *arg, const struct procmaps_entry *e),
                   void *arg)
{
    int err = 0;
    struct reader r = {.pid = pid, .buf = ht_malloc(LINE_MAX_LEN + READ_CHUNK + 1)};
    if (!r.buf)
        return UV_ENOMEM;
    for (;;) {
        ssize_t got = read(fd, r.buf + r.len, READ_CHUNK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            err = sys_err(errno);
            break;
        }
        if (got == 0) {
            /* A last line without its newline still counts. */
            if (r.len > 0 && !r.skipping) {
                r.buf[r.len++] = '\n';
                reader_lines(&r, cb, arg);
            }
            break;
        }
        r.len += (size_t)got;
        if (reader_lines(&r, cb, arg))
            break;
    }
    ht_free(r.buf);
    return err;
}

int procmaps_parse_fd(int fd, int (*cb)(void *arg, const struct procmaps_entry *e), void *arg)
{
    return each_fd(fd, 0, cb, arg);
}

int procmaps_each(uint64_t pid, int (*cb)(void *arg, const struct procmaps_entry *e), void *arg)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/maps", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err(errno);
    int err = each_fd(fd, pid, cb, arg);
    close(fd);
    return err;
}

/* ---- modules ---- */

struct mod_list {
    struct procmaps_module *v;
    size_t n, cap;
    int err;
};

static struct procmaps_module *mod_find_open(struct mod_list *l, const struct procmaps_entry *e)
{
    for (size_t i = l->n; i-- > 0;) {
        struct procmaps_module *m = &l->v[i];
        if (m->inode == e->inode && strcmp(m->path, e->path) == 0)
            return m;
    }
    return NULL;
}

static int mod_collect_cb(void *arg, const struct procmaps_entry *e)
{
    struct mod_list *l = arg;
    if (e->path[0] != '/' || e->inode == 0 || strlen(e->path) >= PROCMAPS_PATH_MAX)
        return 0;
    struct procmaps_module *m = e->offset == 0 ? NULL : mod_find_open(l, e);
    if (m) {
        if (e->end > m->end)
            m->end = e->end;
        return 0;
    }
    if (l->n == PROCMAPS_MODULES_MAX)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct procmaps_module *v = ht_realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->err = UV_ENOMEM;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    m = &l->v[l->n++];
    memset(m, 0, sizeof *m);
    m->start = e->start;
    m->end = e->end;
    m->first_map_end = e->end;
    m->inode = e->inode;
    m->deleted = e->deleted;
    /* The offset of the lowest mapping, kept in bias until the ELF is read. */
    m->bias = e->offset;
    memcpy(m->path, e->path, strlen(e->path) + 1);
    return 0;
}

static int build_id_from_note(Elf *elf, Elf_Data *d, char *out, size_t outsz)
{
    size_t off = 0, next;
    GElf_Nhdr nh;
    size_t name_off, desc_off;
    while (off < d->d_size && (next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            memcmp((const char *)d->d_buf + name_off, "GNU", 4) == 0 && nh.n_descsz > 0 &&
            nh.n_descsz <= PROCMAPS_BUILD_ID_MAX && 2 * (size_t)nh.n_descsz < outsz) {
            const unsigned char *b = (const unsigned char *)d->d_buf + desc_off;
            for (size_t i = 0; i < nh.n_descsz; i++)
                snprintf(out + 2 * i, 3, "%02x", b[i]);
            return 1;
        }
        off = next;
    }
    (void)elf;
    return 0;
}

int procmaps_elf_info(int fd, uint64_t map_start, uint64_t map_offset, uint64_t *bias,
                      char *build_id, size_t build_id_sz)
{
    int err = HT_EBADARG;
    if (build_id_sz)
        build_id[0] = '\0';
    elf_version(EV_CURRENT);
    /* ELF_C_READ reads lazily with pread: only the headers and notes. */
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    if (!elf)
        return HT_EBADARG;
    size_t phnum;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t mask = ~((uint64_t)(pg > 0 ? pg : 4096) - 1);
    if (elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &phnum) != 0)
        goto end_elf;
    int have_bias = 0;
    for (size_t i = 0; i < phnum && i < 65536; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph))
            goto end_elf;
        if (ph.p_type == PT_LOAD && !have_bias && (ph.p_offset & mask) == map_offset) {
            *bias = map_start - (ph.p_vaddr & mask);
            have_bias = 1;
        } else if (ph.p_type == PT_NOTE && build_id_sz && !build_id[0] && ph.p_filesz > 0 &&
                   ph.p_filesz < (1u << 20)) {
            Elf_Data *d = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz,
                                               ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
            if (d)
                build_id_from_note(elf, d, build_id, build_id_sz);
        }
    }
    if (have_bias)
        err = 0;
end_elf:
    elf_end(elf);
    return err;
}

int procmaps_open_module(uint64_t pid, const struct procmaps_module *m)
{
    char path[PROCMAPS_PATH_MAX + 64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/map_files/%" PRIx64 "-%" PRIx64, pid, m->start,
             m->first_map_end);
    /* A process can map a device; opening one can have effects, so only a
     * regular file is opened (stat follows the link without opening). */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return UV_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            return fd;
        close(fd);
        return UV_EINVAL;
    }
    int err = sys_err(errno);
    /* The fallback names the path the process mapped: useless when that file
     * is gone or was replaced (the inode tells), and never a non-file. */
    if (m->deleted || m->path[0] != '/')
        return err;
    if ((size_t)snprintf(path, sizeof path, "/proc/%" PRIu64 "/root%s", pid, m->path) >=
        sizeof path)
        return err;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return UV_ENOENT;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return sys_err(errno);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (m->inode && st.st_ino != m->inode)) {
        close(fd);
        return UV_ENOENT;
    }
    return fd;
}

/* Keep the modules that are ELF files, with their bias and build id. */
static size_t mod_keep_elf(uint64_t pid, struct procmaps_module *v, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct procmaps_module *m = &v[i];
        int fd = procmaps_open_module(pid, m);
        if (fd < 0)
            continue;
        uint64_t bias = 0;
        int ok =
            procmaps_elf_info(fd, m->start, m->bias, &bias, m->build_id, sizeof m->build_id) == 0;
        close(fd);
        if (!ok)
            continue;
        m->bias = bias;
        if (kept != i)
            v[kept] = *m;
        kept++;
    }
    return kept;
}

int procmaps_modules(uint64_t pid, struct procmaps_module **out, size_t *n)
{
    struct mod_list l = {0};
    *out = NULL;
    *n = 0;
    int err = procmaps_each(pid, mod_collect_cb, &l);
    if (!err)
        err = l.err;
    if (err) {
        ht_free(l.v);
        return err;
    }
    *n = mod_keep_elf(pid, l.v, l.n);
    *out = l.v;
    return 0;
}
