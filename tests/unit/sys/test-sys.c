/* Process services on Linux: /proc/PID/maps, modules and build ids, private bytes, symbols. */
#define _GNU_SOURCE
#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-test.h"
#include "mem-acct.h"
#include "procmaps.h"
#include "procmem.h"
#include "procwatch.h"
#include "symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

int ht_test_failed;

/* ---- a helper program as a child, talking over pipes ---- */

#define CHILD_NAMES 16

struct child {
    pid_t pid;
    FILE *out; /* its stdout */
    int in;    /* its stdin */
    int n, line;
    char names[CHILD_NAMES][64];
    uint64_t addrs[CHILD_NAMES];
};

static int child_start(struct child *ch, const char *path)
{
    int to[2], from[2];
    memset(ch, 0, sizeof *ch);
    if (pipe(to) != 0 || pipe(from) != 0)
        return -1;
    ch->pid = fork();
    if (ch->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]);
        close(from[0]);
        execl(path, path, (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    ch->in = to[1];
    ch->out = fdopen(from[0], "r");
    char line[256];
    while (fgets(line, sizeof line, ch->out)) {
        char name[64];
        unsigned long long v;
        int lv;
        if (strcmp(line, "ready\n") == 0)
            return 0;
        if (sscanf(line, "line %d", &lv) == 1)
            ch->line = lv;
        else if (sscanf(line, "%63s %llx", name, &v) == 2 && ch->n < CHILD_NAMES) {
            snprintf(ch->names[ch->n], sizeof ch->names[0], "%s", name);
            ch->addrs[ch->n++] = v;
        }
    }
    return -1;
}

static uint64_t child_addr(const struct child *ch, const char *name)
{
    for (int i = 0; i < ch->n; i++)
        if (strcmp(ch->names[i], name) == 0)
            return ch->addrs[i];
    return 0;
}

static int child_cmd(struct child *ch, const char *cmd, char *reply, size_t sz)
{
    if (write(ch->in, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
        return -1;
    return fgets(reply, (int)sz, ch->out) ? 0 : -1;
}

static void child_stop(struct child *ch)
{
    if (ch->pid <= 0)
        return;
    if (write(ch->in, "quit\n", 5) != 5)
        kill(ch->pid, SIGKILL);
    close(ch->in);
    fclose(ch->out);
    waitpid(ch->pid, NULL, 0);
    ch->pid = 0;
}

/* libc's own function even when a sanitizer interposes malloc. */
static uint64_t libc_sym(const char *name)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    return h ? (uint64_t)(uintptr_t)dlsym(h, name) : 0;
}

static const char *resolve(struct sym_cache *c, uint64_t addr, int is_return)
{
    static char buf[1024];
    return sym_cache_resolve(c, addr, is_return, buf, sizeof buf);
}

/* Build id of a file as elfutils' readelf (or binutils') prints it, independent of ours. */
static int readelf_build_id(const char *path, char *out, size_t sz)
{
    char cmd[4200], line[512];
    snprintf(cmd, sizeof cmd, "eu-readelf -n '%s' 2>/dev/null || readelf -n '%s'", path, path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int found = -1;
    while (fgets(line, sizeof line, p)) {
        const char *b = strstr(line, "Build ID: ");
        if (b && found != 0 && sscanf(b + 10, "%255s", out) == 1 && strlen(out) < sz)
            found = 0;
    }
    pclose(p);
    return found;
}

static const struct procmaps_module *find_module(const struct procmaps_module *v, size_t n,
                                                 uint64_t addr)
{
    for (size_t i = 0; i < n; i++)
        if (addr >= v[i].start && addr < v[i].end)
            return &v[i];
    return NULL;
}

/* ---- symbols ---- */

static void test_resolve_c(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    CHECK(child_start(&ch, HELPER_C) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    uint64_t leaf = child_addr(&ch, "ht_sym_leaf_one");
    CHECK_STR(resolve(c, leaf, 0), "ht-sym-helper-c!ht_sym_leaf_one");
    CHECK_STR(resolve(c, leaf + 4, 0), "ht-sym-helper-c!ht_sym_leaf_one");
    /* A return address one past the function's first byte is the function. */
    CHECK_STR(resolve(c, leaf + 1, 1), "ht-sym-helper-c!ht_sym_leaf_one");
    CHECK(strcmp(resolve(c, leaf, 1), "ht-sym-helper-c!ht_sym_leaf_one") != 0);
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_static_two"), 0),
              "ht-sym-helper-c!ht_sym_static_two");
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_exported"), 0), "ht-sym-helper-c!ht_sym_exported");
    CHECK_STR(resolve(c, child_addr(&ch, "malloc"), 0), "libc.so.6!malloc");
    CHECK_STR(resolve(c, child_addr(&ch, "free"), 0), "libc.so.6!free");
    CHECK_STR(resolve(c, child_addr(&ch, "calloc"), 0), "libc.so.6!calloc");
    CHECK(resolve(c, 16, 0) == NULL);
    struct sym_stats st;
    sym_cache_stats(c, &st);
    CHECK(st.modules == 2 && st.symbols > 1000 && st.lookups == 10 && st.misses == 1);
    CHECK_EQ(st.load_errors, 0);
    sym_cache_free(c);
    child_stop(&ch);
}

/* A program started through a symlink (Debian's /usr/bin/redis-server is a
 * link to redis-check-rdb) is named as it knows itself, not by the file the
 * maps name; its libraries keep their file names. */
static void test_exe_link_name(void)
{
    char dir[] = "/tmp/ht-sym-link-XXXXXX", link[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(link, sizeof link, "%s/ht-linked-name", dir);
    CHECK_EQ(symlink(HELPER_C, link), 0);
    struct child ch;
    struct sym_cache *c = NULL;
    CHECK(child_start(&ch, link) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    uint64_t leaf = child_addr(&ch, "ht_sym_leaf_one");
    CHECK_STR(resolve(c, leaf, 0), "ht-linked-name!ht_sym_leaf_one");
    CHECK_STR(resolve(c, child_addr(&ch, "malloc"), 0), "libc.so.6!malloc");
    sym_cache_free(c);
    child_stop(&ch);
    unlink(link);
    rmdir(dir);
}

static void test_resolve_cpp(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    CHECK(child_start(&ch, HELPER_CPP) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK_STR(resolve(c, child_addr(&ch, "twice"), 0),
              "ht-sym-helper-cpp!htsym::Box<int>::twice(int)");
    CHECK_STR(resolve(c, child_addr(&ch, "outer") + 2, 0),
              "ht-sym-helper-cpp!htsym::outer(long, char const*)");
    CHECK_STR(resolve(c, child_addr(&ch, "malloc"), 0), "libc.so.6!malloc");
    sym_cache_free(c);
    child_stop(&ch);
}

/* Modules named by the source win over the maps; removing one brings the maps back. */
static void test_added_modules(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    struct procmaps_module *v = NULL;
    size_t n = 0;
    CHECK(child_start(&ch, HELPER_C) == 0);
    CHECK(procmaps_modules((uint64_t)ch.pid, &v, &n) == 0);
    uint64_t leaf = child_addr(&ch, "ht_sym_leaf_one");
    const struct procmaps_module *m = find_module(v, n, leaf);
    CHECK(m != NULL);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK(sym_cache_add_module(c, m->start, m->end, m->bias, "/some/where/renamed", m->build_id) ==
          0);
    CHECK_STR(resolve(c, leaf, 0), "renamed!ht_sym_leaf_one");
    CHECK(sym_cache_add_module(c, 10, 5, 0, "/x", "") == HT_EBADARG);
    sym_cache_remove_module(c, m->start);
    CHECK_STR(resolve(c, leaf, 0), "ht-sym-helper-c!ht_sym_leaf_one");
    struct sym_stats st;
    sym_cache_stats(c, &st);
    CHECK_EQ(st.modules, 1); /* one image: the same build id */
    sym_cache_free(c);
    ht_free(v);
    child_stop(&ch);
}

static int copy_file(const char *from, const char *to)
{
    char cmd[8500];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.tmp' && chmod 755 '%s.tmp' && mv '%s.tmp' '%s'", from,
             to, to, to, to);
    return system(cmd);
}

/* The binary is deleted and another one put at its path: map_files still has the original. */
static void test_deleted_replaced(void)
{
    char dir[] = "/tmp/ht-sym-XXXXXX", path[256], bid[256], obid[256];
    struct child ch;
    struct sym_cache *c = NULL;
    struct procmaps_module *v = NULL;
    size_t n = 0;
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/ht-sym-victim", dir);
    CHECK(copy_file(HELPER_C, path) == 0);
    CHECK(child_start(&ch, path) == 0);
    CHECK(unlink(path) == 0);
    CHECK(copy_file(HELPER_CPP, path) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_static_two"), 0),
              "ht-sym-victim!ht_sym_static_two");
    CHECK(sym_cache_lineinfo(c, child_addr(&ch, "ht_sym_leaf_one"), 0, bid, sizeof bid,
                             (unsigned *)&n) == 0);
    CHECK(procmaps_modules((uint64_t)ch.pid, &v, &n) == 0);
    const struct procmaps_module *m = find_module(v, n, child_addr(&ch, "ht_sym_leaf_one"));
    CHECK(m && m->deleted && strcmp(m->path, path) == 0);
    CHECK(readelf_build_id(HELPER_C, bid, sizeof bid) == 0);
    CHECK(readelf_build_id(path, obid, sizeof obid) == 0);
    CHECK(strcmp(bid, obid) != 0);
    CHECK_STR(m->build_id, bid);
    unlink(path);
    rmdir(dir);
    ht_free(v);
    sym_cache_free(c);
    child_stop(&ch);
}

/* Only .dynsym: exported names resolve, the rest read module!+0x(ELF address). */
static void test_stripped_dynsym(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    struct procmaps_module *v = NULL;
    size_t n = 0;
    char want[256];
    CHECK(child_start(&ch, HELPER_STRIPPED) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_exported"), 0),
              "ht-sym-helper-stripped!ht_sym_exported");
    CHECK(procmaps_modules((uint64_t)ch.pid, &v, &n) == 0);
    uint64_t two = child_addr(&ch, "ht_sym_static_two");
    const struct procmaps_module *m = find_module(v, n, two);
    CHECK(m != NULL);
    snprintf(want, sizeof want, "ht-sym-helper-stripped!+0x%" PRIx64, two - m->bias);
    CHECK_STR(resolve(c, two, 0), want);
    CHECK_STR(resolve(c, child_addr(&ch, "malloc"), 0), "libc.so.6!malloc");
    ht_free(v);
    sym_cache_free(c);
    child_stop(&ch);
}

/* Stripped, with the function symbols in an xz-compressed .gnu_debugdata. */
static void test_minidebuginfo(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    if (access(HELPER_MINI, X_OK) != 0) {
        fprintf(stderr, "no MiniDebugInfo helper (xz or objcopy missing at build time)\n");
        exit(HT_TEST_SKIP);
    }
    CHECK(child_start(&ch, HELPER_MINI) == 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_static_two"), 0),
              "ht-sym-helper-mini!ht_sym_static_two");
    CHECK_STR(resolve(c, child_addr(&ch, "ht_sym_leaf_one"), 0),
              "ht-sym-helper-mini!ht_sym_leaf_one");
    sym_cache_free(c);
    child_stop(&ch);
}

static void test_lineinfo(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    char file[4096];
    unsigned line = 0;
    CHECK(child_start(&ch, HELPER_C) == 0);
    CHECK(ch.line > 0);
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    CHECK(sym_cache_lineinfo(c, child_addr(&ch, "ht_sym_leaf_one"), 0, file, sizeof file, &line) ==
          0);
    const char *base = strrchr(file, '/');
    CHECK_STR(base ? base + 1 : file, "helper-c.c");
    CHECK(line >= (unsigned)ch.line && line <= (unsigned)ch.line + 2);
    CHECK(sym_cache_lineinfo(c, 16, 0, file, sizeof file, &line) == UV_ENOENT);
    sym_cache_free(c);
    child_stop(&ch);
}

/* Symbol tables are charged to the acct, and all given back. */
static void test_mem_charged(void)
{
    struct mem_budget b;
    struct mem_acct a;
    struct sym_cache *c = NULL;
    struct sym_stats st;
    mem_budget_init(&b, NULL, 0);
    mem_acct_init(&a, &b);
    CHECK(sym_cache_new(&c, (uint64_t)getpid(), &a, MEM_symbols) == 0);
    char buf[256];
    CHECK_STR(sym_cache_resolve(c, libc_sym("malloc"), 0, buf, sizeof buf), "libc.so.6!malloc");
    sym_cache_stats(c, &st);
    CHECK(st.bytes > 100000);
    CHECK_EQ(a.bytes[MEM_symbols], st.bytes);
    sym_cache_free(c);
    CHECK_EQ(a.bytes[MEM_symbols], 0);
    CHECK_EQ(mem_budget_used(&b), 0);
    /* A budget too small for libc's table: refused, counted, no crash. */
    mem_budget_init(&b, NULL, 64 << 10);
    mem_acct_init(&a, &b);
    CHECK(sym_cache_new(&c, (uint64_t)getpid(), &a, MEM_symbols) == 0);
    const char *r = sym_cache_resolve(c, libc_sym("malloc"), 0, buf, sizeof buf);
    CHECK(r == NULL || strncmp(r, "libc.so.6!", 10) == 0);
    sym_cache_stats(c, &st);
    CHECK(st.load_errors >= 1 && a.over_budget[MEM_symbols] >= 1);
    sym_cache_free(c);
    CHECK_EQ(a.bytes[MEM_symbols], 0);
}

/* ---- modules and build ids ---- */

struct own_ids {
    char exe[256], libc[256];
};

static void hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/* Build ids from the notes as loaded in memory, via the dynamic linker's view. */
static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct own_ids *ids = arg;
    (void)size;
    char *dst = info->dlpi_name[0] == '\0'              ? ids->exe
                : strstr(info->dlpi_name, "/libc.so.6") ? ids->libc
                                                        : NULL;
    if (!dst)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const unsigned char *name = p + sizeof *nh;
            const unsigned char *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0)
                hex(desc, nh->n_descsz, dst);
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 0;
}

static void test_build_ids(void)
{
    struct own_ids ids = {{0}, {0}};
    struct procmaps_module *v = NULL;
    size_t n = 0;
    dl_iterate_phdr(phdr_cb, &ids);
    CHECK(ids.exe[0] && ids.libc[0]);
    CHECK(procmaps_modules((uint64_t)getpid(), &v, &n) == 0);
    const struct procmaps_module *exe = find_module(v, n, (uint64_t)(uintptr_t)&test_build_ids);
    const struct procmaps_module *libc = find_module(v, n, libc_sym("malloc"));
    CHECK(exe && libc);
    CHECK_STR(exe->build_id, ids.exe);
    CHECK_STR(libc->build_id, ids.libc);
    CHECK(v[0].start == exe->start); /* the executable is mapped first */
    /* The bias is the dynamic linker's load address. */
    struct link_map *lm = NULL;
    CHECK(dlinfo(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), RTLD_DI_LINKMAP, &lm) == 0);
    CHECK_EQ(libc->bias, lm->l_addr);
    for (size_t i = 0; i < n; i++)
        CHECK(v[i].start < v[i].first_map_end && v[i].first_map_end <= v[i].end);
    ht_free(v);
    /* A child's executable against elfutils' readelf. */
    struct child ch;
    char bid[256];
    CHECK(child_start(&ch, HELPER_CPP) == 0);
    CHECK(procmaps_modules((uint64_t)ch.pid, &v, &n) == 0);
    const struct procmaps_module *m = find_module(v, n, child_addr(&ch, "twice"));
    CHECK(m && readelf_build_id(HELPER_CPP, bid, sizeof bid) == 0);
    CHECK_STR(m->build_id, bid);
    const char *b = strrchr(m->path, '/');
    CHECK_STR(b, "/ht-sym-helper-cpp");
    ht_free(v);
    child_stop(&ch);
}

/* ---- the maps parser on awkward paths ---- */

struct find_ctx {
    uint64_t start;
    char path[PROCMAPS_PATH_MAX];
    int deleted, found, count;
};

static int find_cb(void *arg, const struct procmaps_entry *e)
{
    struct find_ctx *f = arg;
    f->count++;
    if (e->start == f->start) {
        snprintf(f->path, sizeof f->path, "%s", e->path);
        f->deleted = e->deleted;
        f->found = 1;
    }
    return 0;
}

static void *map_file(const char *path, int *fd)
{
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (*fd < 0 || write(*fd, "x", 1) != 1)
        return NULL;
    void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, *fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int check_path(void *p, const char *want, int deleted)
{
    struct find_ctx f = {.start = (uint64_t)(uintptr_t)p};
    if (procmaps_each((uint64_t)getpid(), find_cb, &f) != 0 || !f.found || f.deleted != deleted)
        return -1;
    if (strcmp(f.path, want) != 0) {
        fprintf(stderr, "path \"%s\", wanted \"%s\"\n", f.path, want);
        return -1;
    }
    return f.count > 5 ? 0 : -1;
}

static void test_maps_paths(void)
{
    char dir[] = "/tmp/ht-sym-XXXXXX", path[PROCMAPS_PATH_MAX + 64], want[PROCMAPS_PATH_MAX + 64];
    int fd;
    CHECK(mkdtemp(dir) != NULL);
    /* Spaces, and a name that looks like the deleted suffix. */
    snprintf(path, sizeof path, "%s/a b  (deleted) c (deleted)", dir);
    void *p = map_file(path, &fd);
    CHECK(p);
    CHECK(check_path(p, path, 0) == 0);
    CHECK(unlink(path) == 0);
    CHECK(check_path(p, path, 1) == 0);
    munmap(p, 4096);
    close(fd);
    /* A newline in a name: the kernel writes it as \012, the next lines still parse. */
    snprintf(path, sizeof path, "%s/nl\nname", dir);
    p = map_file(path, &fd);
    CHECK(p);
    snprintf(want, sizeof want, "%s/nl\\012name", dir);
    CHECK(check_path(p, want, 0) == 0);
    munmap(p, 4096);
    close(fd);
    unlink(path);
    /* A path near PATH_MAX, from nested directories of 200 characters. */
    size_t len = strlen(dir);
    memcpy(path, dir, len + 1);
    while (len + 202 < 4000) {
        path[len++] = '/';
        memset(path + len, 'd', 200);
        len += 200;
        path[len] = '\0';
        CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
    }
    memcpy(path + len, "/f", 3);
    p = map_file(path, &fd);
    CHECK(p);
    CHECK(check_path(p, path, 0) == 0);
    munmap(p, 4096);
    close(fd);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

struct collect {
    int n;
    struct procmaps_entry e[8];
    char paths[8][64];
};

static int collect_cb(void *arg, const struct procmaps_entry *e)
{
    struct collect *c = arg;
    if (c->n < 8) {
        c->e[c->n] = *e;
        snprintf(c->paths[c->n], sizeof c->paths[0], "%s", e->path);
        c->e[c->n].path = c->paths[c->n];
    }
    c->n++;
    return 0;
}

static int tmp_with(const char *text, size_t len)
{
    FILE *f = tmpfile();
    if (!f || fwrite(text, 1, len, f) != len || fflush(f) != 0)
        return -1;
    int fd = dup(fileno(f));
    fclose(f);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Text no kernel writes: only the well-formed lines come out, nothing overruns. */
static void test_maps_hostile(void)
{
    size_t cap = 1 << 20, len = 0;
    char *t = malloc(cap);
    CHECK(t);
#define ADD(...) len += (size_t)snprintf(t + len, cap - len, __VA_ARGS__)
    ADD("00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus daemon\n");
    ADD("00500000-00501000 r--p 00000000 08:02 1 /");
    memset(t + len, 'a', 20000);
    len += 20000;
    ADD("\nzzzz\n1-0 r--p 0 0:0 0 x\n11111111111111111-2 r--p 0 0:0 0 x\n");
    ADD("600000-601000 rw-p 00000000 00:00 0 /");
    memset(t + len, 'b', 200000); /* longer than a read */
    len += 200000;
    ADD("\n7f00-7f10 rw-s 00001000 fd:01 99 /tmp/x y (deleted)\n");
    ADD("7f10-7f20 rw-p 00000000 00:00 0 \n");
    ADD("7ffc0000-7ffc1000 rw-p 00000000 00:00 0                          [stack]\n");
    ADD("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]");
#undef ADD
    int fd = tmp_with(t, len);
    CHECK(fd >= 0);
    struct collect c = {0};
    CHECK(procmaps_parse_fd(fd, collect_cb, &c) == 0);
    close(fd);
    CHECK_EQ(c.n, 5);
    CHECK(c.e[0].start == 0x400000 && c.e[0].end == 0x452000 && c.e[0].inode == 173521);
    CHECK(c.e[0].prot == (PROT_READ | PROT_EXEC) && !c.e[0].shared);
    CHECK_STR(c.e[0].path, "/usr/bin/dbus daemon");
    CHECK(c.e[1].deleted && c.e[1].shared && c.e[1].offset == 0x1000);
    CHECK_STR(c.e[1].path, "/tmp/x y");
    CHECK_STR(c.e[2].path, "");
    CHECK_STR(c.e[3].path, "[stack]");
    CHECK(c.e[4].start == 0xffffffffff600000ull && c.e[4].prot == PROT_EXEC);
    CHECK_STR(c.e[4].path, "[vsyscall]");
    /* Random bytes and random mutations of good lines. */
    srand(3);
    for (int round = 0; round < 200; round++) {
        len = 0;
        while (len < 60000) {
            const char *good = "7f00-7f10 r-xp 00000000 fd:01 99 /lib/a.so\n";
            size_t gl = strlen(good);
            memcpy(t + len, good, gl);
            for (int k = rand() % 4; k > 0; k--)
                t[len + (size_t)rand() % gl] = (char)(rand() % 3 ? rand() % 128 : rand());
            len += gl;
        }
        fd = tmp_with(t, len);
        CHECK(fd >= 0);
        struct collect r = {0};
        CHECK(procmaps_parse_fd(fd, collect_cb, &r) == 0);
        close(fd);
        CHECK(r.n > 0);
    }
    free(t);
}

/* Not ELF, and ELF cut short: never a crash; the first is no module. */
static void test_malformed_elf(void)
{
    char dir[] = "/tmp/ht-sym-XXXXXX", junk[64], cut[64], cmd[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(junk, sizeof junk, "%s/junk.so", dir);
    snprintf(cut, sizeof cut, "%s/cut.so", dir);
    int fd = open(junk, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    unsigned char bytes[8192];
    srand(9);
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)rand();
    memcpy(bytes, "\177ELF\2\1\1", 7);
    CHECK(write(fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    void *pj = mmap(NULL, sizeof bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "head -c 12288 '%s' > '%s'", HELPER_CPP, cut);
    CHECK(system(cmd) == 0);
    fd = open(cut, O_RDONLY);
    CHECK(fd >= 0);
    void *pc = mmap(NULL, 12288, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(pj != MAP_FAILED && pc != MAP_FAILED);
    /* A device mapping is never opened as a module. */
    fd = open("/dev/zero", O_RDONLY);
    void *pz = fd >= 0 ? mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    CHECK(pz != MAP_FAILED);
    struct procmaps_module *v = NULL;
    size_t n = 0;
    CHECK(procmaps_modules((uint64_t)getpid(), &v, &n) == 0);
    CHECK(find_module(v, n, (uint64_t)(uintptr_t)pj) == NULL);
    CHECK(find_module(v, n, (uint64_t)(uintptr_t)pz) == NULL);
    struct procmaps_module zm = {.start = (uint64_t)(uintptr_t)pz,
                                 .first_map_end = (uint64_t)(uintptr_t)pz + 4096};
    snprintf(zm.path, sizeof zm.path, "/dev/zero");
    CHECK_EQ(procmaps_open_module((uint64_t)getpid(), &zm), UV_EINVAL);
    munmap(pz, 4096);
    ht_free(v);
    struct sym_cache *c = NULL;
    CHECK(sym_cache_new(&c, (uint64_t)getpid(), NULL, MEM_symbols) == 0);
    uint64_t j = (uint64_t)(uintptr_t)pj, k = (uint64_t)(uintptr_t)pc;
    CHECK(sym_cache_add_module(c, j, j + sizeof bytes, j, junk, "") == 0);
    CHECK(sym_cache_add_module(c, k, k + 12288, k, cut, "") == 0);
    CHECK_STR(resolve(c, j + 100, 0), "junk.so!+0x64");
    const char *r = resolve(c, k + 5000, 0);
    CHECK(r && strncmp(r, "cut.so!", 7) == 0);
    struct sym_stats st;
    sym_cache_stats(c, &st);
    CHECK(st.load_errors >= 1);
    sym_cache_free(c);
    munmap(pj, sizeof bytes);
    munmap(pc, 12288);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* A file without build id: its image is found again after the maps are re-read. */
static void test_no_build_id(void)
{
    struct child ch;
    struct sym_cache *c = NULL;
    struct sym_stats st;
    struct procmaps_module *v = NULL;
    size_t n = 0;
    CHECK(child_start(&ch, HELPER_NOBID) == 0);
    CHECK(procmaps_modules((uint64_t)ch.pid, &v, &n) == 0);
    uint64_t leaf = child_addr(&ch, "ht_sym_leaf_one");
    const struct procmaps_module *m = find_module(v, n, leaf);
    CHECK(m && m->build_id[0] == '\0');
    CHECK(sym_cache_new(&c, (uint64_t)ch.pid, NULL, MEM_symbols) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK_STR(resolve(c, leaf, 0), "ht-sym-helper-nobid!ht_sym_leaf_one");
        usleep(120000);
        CHECK(resolve(c, 16, 0) == NULL); /* re-reads the maps */
    }
    CHECK_STR(resolve(c, leaf, 0), "ht-sym-helper-nobid!ht_sym_leaf_one");
    sym_cache_stats(c, &st);
    CHECK_EQ(st.modules, 1);
    ht_free(v);
    sym_cache_free(c);
    child_stop(&ch);
}

/* ---- private bytes ---- */

static void test_procmem_grows(void)
{
    struct child ch;
    struct procmem a, b;
    char reply[64];
    CHECK(child_start(&ch, HELPER_C) == 0);
    CHECK(procmem_read((uint64_t)ch.pid, &a) == 0);
    CHECK(a.vm_data > 0 && a.vm_stk > 0 && a.private_bytes == a.vm_data + a.vm_stk);
    CHECK(child_cmd(&ch, "alloc\n", reply, sizeof reply) == 0);
    CHECK_STR(reply, "ok\n");
    CHECK(procmem_read((uint64_t)ch.pid, &b) == 0);
    CHECK(b.rss_anon >= a.rss_anon + (64u << 20));
    CHECK(b.vm_data >= a.vm_data + (64u << 20));
    CHECK(b.private_bytes >= a.private_bytes + (64u << 20));
    child_stop(&ch);
}

static int count_cb(void *arg, const struct procmaps_entry *e)
{
    (void)e;
    (*(int *)arg)++;
    return 0;
}

static void test_dead_pid(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    CHECK(pid > 0);
    CHECK(waitpid(pid, NULL, 0) == pid);
    struct procmem m;
    struct procmaps_module *v = NULL;
    size_t n = 0;
    int count = 0;
    CHECK_EQ(procmem_read((uint64_t)pid, &m), UV_ENOENT);
    CHECK_EQ(procmaps_each((uint64_t)pid, count_cb, &count), UV_ENOENT);
    CHECK_EQ(procmaps_modules((uint64_t)pid, &v, &n), UV_ENOENT);
    CHECK(v == NULL && n == 0);
    struct sym_cache *c = NULL;
    CHECK(sym_cache_new(&c, (uint64_t)pid, NULL, MEM_symbols) == 0);
    CHECK(resolve(c, 0x400000, 0) == NULL);
    sym_cache_free(c);
}

struct exit_seen {
    int fired, known, code;
    uint64_t pid;
};

static void on_exit_cb(void *arg, uint64_t pid, int known, int code)
{
    struct exit_seen *e = arg;
    e->fired++;
    e->known = known;
    e->code = code;
    e->pid = pid;
}

static void on_timeout(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* A child that exits with 7 once its stdin closes: the watch fires once on
 * the loop with that code (its parent has not reaped it: the zombie tells),
 * and a watch stopped first never calls back. */
static void test_exit_watch(void)
{
    for (int stop_first = 0; stop_first < 2; stop_first++) {
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            char b;
            close(p[1]);
            while (read(p[0], &b, 1) > 0)
                ;
            _exit(7);
        }
        CHECK(pid > 0);
        close(p[0]);
        uv_loop_t loop;
        CHECK_EQ(uv_loop_init(&loop), 0);
        struct exit_seen seen = {0};
        struct procwatch *w = NULL;
        CHECK_EQ(procwatch_start(&loop, (uint64_t)pid, on_exit_cb, &seen, &w), 0);
        uv_timer_t timer;
        uv_timer_init(&loop, &timer);
        uv_timer_start(&timer, on_timeout, 10000, 0);
        uv_run(&loop, UV_RUN_NOWAIT);
        CHECK_EQ(seen.fired, 0);
        if (stop_first)
            procwatch_stop(w);
        close(p[1]);
        if (stop_first)
            usleep(100000);
        else
            while (!seen.fired && uv_run(&loop, UV_RUN_ONCE))
                ;
        CHECK_EQ(seen.fired, !stop_first);
        if (!stop_first) {
            CHECK_EQ(seen.pid, (uint64_t)pid);
            CHECK(seen.known);
            CHECK_EQ(seen.code, 7);
            procwatch_stop(w);
        }
        uv_close((uv_handle_t *)&timer, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        CHECK_EQ(seen.fired, !stop_first);
        CHECK_EQ(uv_loop_close(&loop), 0);
        CHECK(waitpid(pid, NULL, 0) == pid);
    }
    uv_loop_t loop;
    struct exit_seen seen = {0};
    struct procwatch *w = NULL;
    CHECK_EQ(uv_loop_init(&loop), 0);
    CHECK_EQ(procwatch_start(&loop, 0x7ffffff0u, on_exit_cb, &seen, &w), UV_ENOENT);
    uv_loop_close(&loop);
}

int main(int argc, char **argv)
{
    static const struct ht_test_case cases[] = {
        T(resolve_c),       T(resolve_cpp),   T(added_modules), T(deleted_replaced),
        T(stripped_dynsym), T(minidebuginfo), T(lineinfo),      T(mem_charged),
        T(build_ids),       T(maps_paths),    T(malformed_elf), T(procmem_grows),
        T(dead_pid),        T(no_build_id),   T(maps_hostile),  T(exit_watch),
        T(exe_link_name),
    };
    return ht_test_run(cases, sizeof cases / sizeof cases[0], argc, argv);
}
