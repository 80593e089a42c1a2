/*
 * Symbolizer for a live process (Linux: elfutils libdwfl + libiberty's
 * demangler). Lazy: nothing is read until an address is asked for; each
 * module's symbol table is loaded once, sorted, and cached by build id, so
 * every lookup after the first is a binary search. Single-threaded (the
 * loop thread): the caller serialises.
 *
 * Windows (symbols-win.c): DbgHelp, which is single-threaded process-wide,
 * runs on one dedicated thread that serves every sym_cache; a lookup not yet
 * cached is a request to it, and the caller waits at most SYM_WAIT_MS for the
 * answer (else the address reads "module!+0xOFF" this time and counts under
 * timeouts). Each answer is cached per address. Modules are PE images: bias
 * is the image base (OFF is the RVA), build_id is ignored, and a miss reads
 * the target's module list (procmods.h) instead of /proc/PID/maps.
 *
 * The module table, its rescans, the accounting and the counters are one
 * cache for both platforms (symcache.c); per OS only reading the modules
 * and their symbols (symbols-linux.c, symbols-win.c).
 */
#ifndef SYMBOLS_H
#define SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

struct sym_cache;
struct mem_acct;

/* Windows: the longest a caller waits for the DbgHelp thread. */
#define SYM_WAIT_MS 5000

/* Windows: DbgHelp's symbol search path (UTF-8, paths separated by ';', e.g.
 * "srv*CACHE_DIR*SERVER_URL" or a folder of .pdb files) for caches whose
 * first lookup comes afterwards; _NT_SYMBOL_PATH, when set, is searched after
 * it. NULL or "": DbgHelp's default (the current folder, _NT_SYMBOL_PATH,
 * _NT_ALTERNATE_SYMBOL_PATH). Linux: only NULL or "" is taken (separate
 * debug files come from /usr/lib/debug only): else HT_EBADARG. 0,
 * HT_EBADARG or UV_ENOMEM. Any thread. */
int sym_set_search_path(const char *path);

/* A symbolizer for pid; modules come from add_module (or, when none was
 * added for an address, from a fresh read of /proc/PID/maps). acct (may be
 * NULL) is charged for the caches under MEM kind `kind`. 0 or UV_ENOMEM. */
int sym_cache_new(struct sym_cache **out, uint64_t pid, struct mem_acct *acct, int kind);
void sym_cache_free(struct sym_cache *c);

/* A module mapped at [start, end) with this load bias, path and build id
 * (hex, "" if none): a module_load event. It replaces the modules it
 * overlaps; its file is opened (map_files of the mapping at start) on the
 * first lookup, unless an image with that build id is cached. 0, HT_EBADARG,
 * HT_EFULL (module cap) or UV_ENOMEM. */
int sym_cache_add_module(struct sym_cache *c, uint64_t start, uint64_t end, uint64_t bias,
                         const char *path, const char *build_id);
/* The module at start was unmapped (module_unload): its addresses no longer
 * resolve (its symbols stay cached by build id). */
void sym_cache_remove_module(struct sym_cache *c, uint64_t start);
#ifndef _WIN32
/* The process exec'd: the modules known now stay for the addresses taken
 * before (a re-read of the maps no longer drops them; a module mapped over
 * one of them replaces it). Linux only. */
void sym_cache_keep_modules(struct sym_cache *c);
/* The maps changed (an exec), or are about to go (an exit): the next
 * address in no known module re-reads them at once. Linux only. */
void sym_cache_maps_changed(struct sym_cache *c);
/* The process's maps and files are read only while it is uid's (and
 * dumpable): a traced process that exec'd a setuid program is root's, whose
 * layout and files are not for uid. Linux only. */
void sym_cache_set_owner(struct sym_cache *c, uint32_t uid);
#endif

/* Text of the code address addr (a return address: looked up as addr - 1
 * when is_return), "module!function" with the module's file name (its
 * soname when the file name is the soname plus a version: libstdc++.so.6)
 * and the function demangled with its parameters (C++ and Rust),
 * "module!+0xOFF" when the module has no symbol there, OFF being the ELF
 * virtual address (addr - bias, what addr2line takes); NULL when no module
 * holds addr. An address in no known module re-reads /proc/PID/maps (at
 * most every 100 ms). buf holds the result. */
const char *sym_cache_resolve(struct sym_cache *c, uint64_t addr, int is_return, char *buf,
                              size_t bufsz);
/* Source file and line of addr (is_return as above), when the module has
 * line info. 0, or UV_ENOENT. */
int sym_cache_lineinfo(struct sym_cache *c, uint64_t addr, int is_return, char *file, size_t filesz,
                       unsigned *line);

/* Counters for status: modules = images (distinct files) loaded, symbols
 * held (functions, aliases merged), lookups, misses (no module, or no
 * symbol there), load_errors (a module whose file could not be opened or
 * read, or whose table did not fit the budget), bytes charged. Caps: 4096
 * modules and images, 4M functions and 256 MiB of names per image.
 * The hint costs one scan of dpkg's file lists per module the first time it
 * misses a symbol (Debian; no network).
 * Windows: modules = images DbgHelp loaded, symbols = answers cached (one
 * per address; DbgHelp's own memory is not charged), timeouts = lookups the
 * DbgHelp thread did not answer within SYM_WAIT_MS (always 0 on Linux). */
struct sym_stats {
    uint64_t modules, symbols, lookups, misses, load_errors, bytes;
    uint64_t timeouts;
    /* Linux: lookups that found the module but no symbol there (a stripped
     * file: "module!+0xOFF"), and what would name them: the debug symbol
     * package of the file most of them are in, "" when there were none. */
    uint64_t unsymbolized;
    /* Modules of a program the process ran before an exec: replaced by the
     * running program's mappings where they overlap, dropped (oldest first)
     * when the module list is full; and mappings a scan could not add (the
     * list full, out of memory, a module of the source's there). */
    uint64_t kept_replaced, kept_dropped, modules_not_added;
    /* Linux: reads of the process refused once it was no longer its owner's
     * (sym_cache_set_owner): 1 when that happened. */
    uint64_t not_owner;
    char hint[320];
};
void sym_cache_stats(const struct sym_cache *c, struct sym_stats *st);

#endif
