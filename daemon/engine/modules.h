/*
 * The modules a live source reported (HT_EV_MODULE_LOAD / UNLOAD): base,
 * size, load bias, path and build id (string ids of the session's interner),
 * sorted by base. Symbolization is the source's business (source.h
 * symbolize); the engine keeps the table for status and for exports.
 * Memory is charged to MEM_modules; past the cap or the budget a load is
 * dropped and counted. Loop thread only, like the rest of the engine.
 */
#ifndef MODULES_H
#define MODULES_H

#include "ht-event.h"

#include <stdint.h>

struct mem_acct;

#define MODULES_MAX_DEFAULT 4096

struct module {
    uint64_t base, size, bias;
    uint64_t t_load;
    uint32_t path, build_id; /* string ids (0: none) */
};

struct module_table {
    struct module *v; /* sorted by base */
    uint32_t n, alloc;
    uint32_t cap;             /* most modules kept */
    uint64_t loads, unloads;  /* events applied */
    uint64_t drops;           /* loads not kept: the cap or the memory budget */
    uint64_t unknown_unloads; /* unloads of a base no load named */
    struct mem_acct *acct;
};

void module_table_init(struct module_table *mt, uint32_t cap, struct mem_acct *acct);
void module_table_close(struct module_table *mt);
/* A module_load event: added, or replaces the module at the same base. */
void module_table_load(struct module_table *mt, const struct ht_event *ev);
/* A module_unload event (ev->addr = base). */
void module_table_unload(struct module_table *mt, uint64_t base);
/* The module holding addr, or NULL. */
const struct module *module_table_find(const struct module_table *mt, uint64_t addr);

#endif
