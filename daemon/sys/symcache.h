/*
 * The symbol cache both platforms share (symbols.h's struct sym_cache, not
 * for other users): the module table, the rescan policy, memory accounting
 * and the counters. symcache.c holds them and the public entry points; the
 * OS part (symbols-linux.c: /proc/PID/maps, ELF through libdw; symbols-win.c:
 * the module list and DbgHelp) reads a process's modules and their symbols
 * through the sym_os_* functions below.
 */
#ifndef HT_SYMCACHE_H
#define HT_SYMCACHE_H

#include "symbols.h"

#include <stddef.h>
#include <stdint.h>

/* Modules mapped at once. */
#define SYM_MODULES_MAX 4096
/* An address in no known module re-reads the module list at most this often. */
#define SYM_RESCAN_NS 100000000ull
/* A build id as hex text with its NUL (64 bytes at most: procmaps.h). */
#define SYM_BUILD_ID_HEX (2 * 64 + 1)

/* Where a module came from: the source added it; a scan found it (the next
 * scan replaces it); or a scan found it in a program the process ran before
 * an exec (sym_cache_keep_modules): kept to name that program's frames, but
 * the running program's mappings win over it, and the oldest go first when
 * the list is full. */
enum { MOD_SOURCE, MOD_SCAN, MOD_KEPT };

struct sym_module {
    uint64_t start, end, bias;
    char *path;
    /* The OS part's image: -1 not loaded yet, -2 failed to load, else loaded
     * (Linux: its index in the images; Windows: loaded in DbgHelp). */
    int image;
    int from_maps;     /* MOD_SOURCE, MOD_SCAN or MOD_KEPT */
    uint64_t kept_gen; /* MOD_KEPT: the keep that made it one (older ones go first) */
    /* What a maps scan or the source said of the file (Linux; unused on
     * Windows): first_map_end 0 when not known yet; inode keys an image
     * without build id; deleted: the maps said " (deleted)". */
    uint64_t first_map_end, inode;
    int deleted;
    char build_id[SYM_BUILD_ID_HEX];
};

struct sym_os; /* the OS part's state of one cache */

struct sym_cache {
    uint64_t pid;
    struct mem_acct *acct;
    int kind;
    struct sym_module *mods; /* sorted by start, not overlapping */
    size_t nmods, capmods;
    uint64_t last_scan_ns;
    uint64_t keeps; /* sym_cache_keep_modules calls so far */
    struct sym_stats st;
    struct sym_os *os;
    const struct sym_os_ops *ops;
};

/* ---- symcache.c, for the OS part ---- */

/* Memory charged to the cache's accounting and counted in st.bytes. */
void *symcache_alloc(struct sym_cache *c, size_t n);
void symcache_free(struct sym_cache *c, void *p, size_t n);
/* mem_realloc from old to new bytes, the difference counted; NULL on failure
 * (p is kept). */
void *symcache_realloc(struct sym_cache *c, void *p, size_t old, size_t new_size);
/* The module holding addr, or NULL. */
struct sym_module *symcache_mod_at(struct sym_cache *c, uint64_t addr);
/* The module holding addr; when none holds it (or a kept one does) the
 * module list is read again, at most every SYM_RESCAN_NS. */
struct sym_module *symcache_mod_for(struct sym_cache *c, uint64_t addr);
/* Module i goes (sym_os_module_dropped is told first). */
void symcache_mod_drop(struct sym_cache *c, size_t i);
/* A scan found m (its path is copied): kept modules it overlaps go, the
 * oldest kept one goes when the list is full, and it never replaces a
 * module of the source's; one it could not add is counted. */
void symcache_scan_add(struct sym_cache *c, const struct sym_module *m);
/* The modules of earlier scans go. */
void symcache_scan_drop_all(struct sym_cache *c);

/* ---- the OS part (symbols-linux.c, symbols-win.c) ----
 * Its functions, given to the cache when it is made (symcache_new): the
 * cache calls them through this table, so that the OS part calls the cache
 * and never the other way round by name (scripts/check-cycles.py). */
struct sym_os_ops {
    /* c->os for a new cache (pid, acct and kind set): 0 or UV_ENOMEM. */
    int (*new)(struct sym_cache *c);
    /* Before c's modules are freed. */
    void (*free)(struct sym_cache *c);
    /* sym_cache_add_module's arguments: 0, or HT_EBADARG. */
    int (*module_check)(uint64_t start, uint64_t end, const char *path, const char *build_id);
    /* m is about to leave the table. */
    void (*module_dropped)(struct sym_cache *c, struct sym_module *m);
    /* Read the process's modules again (c->last_scan_ns is set). */
    void (*rescan)(struct sym_cache *c);
    /* sym_cache_resolve and sym_cache_lineinfo after the shared part (addr
     * is the address to look up; lookups counted). */
    const char *(*resolve)(struct sym_cache *c, uint64_t addr, char *buf, size_t bufsz);
    int (*lineinfo)(struct sym_cache *c, uint64_t addr, char *file, size_t filesz, unsigned *line);
    /* What st (a copy of c->st) lacks: the Linux hint. */
    void (*stats)(const struct sym_cache *c, struct sym_stats *st);
};

/* sym_cache_new with the OS part's table (each OS's sym_cache_new). */
int symcache_new(struct sym_cache **out, uint64_t pid, struct mem_acct *acct, int kind,
                 const struct sym_os_ops *ops);

#endif
